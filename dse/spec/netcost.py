"""Network equipment cost and power of rail-optimized vs rail-only fabrics (seed 000 section 6.5,
seed 002 section V-E).

A `PriceSet` is the price (USD) and optionally the power (W) of one switch port and of one
transceiver, from a preset in `conf/prices/`, a mapping or keyword arguments; every field is checked
before any compute and a bad value raises `SpecError` with one line naming field, value and rule.
`compare` validates a grid of cluster sizes and switch radices, evaluates the kernels of
`kernels.fabric_cost` on it in one call and returns Polars tables:

    from dse.spec.netcost import compare, load_prices
    tables = compare([32768, 65536], [64, 128, 256], hb_domain=256,
                     prices=[load_prices("rail_only_2024")])
    tables.counts   # one row per (gpus, radix): tiers, switches, transceivers of both fabrics
    tables.totals   # one row per (prices, metric, gpus, radix): SOTA, rail-only, savings
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np
import polars as pl

from dse.runtime import float64
from dse.spec.specs import SpecError, check_float, check_int, load_spec, preset_names, read_preset

@dataclass(frozen=True)
class PriceSet:
    """Price and power of network equipment at one line rate (seed 002 Eq. 4-5 footnote).

    A switch costs `port_price` times its radix; power fields are both given or both left out.
    """

    name: str
    port_price: float  # USD per switch port, > 0
    transceiver_price: float  # USD per transceiver, >= 0 (0: copper links)
    port_power: float | None = None  # W per switch port, > 0
    transceiver_power: float | None = None  # W per transceiver, >= 0
    line_rate_gbps: float = 400.0
    source: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"prices.name = {self.name!r}: must be a non-empty string")
        if not isinstance(self.source, str):
            raise SpecError(f"prices.source = {self.source!r}: must be a string")
        checked = {
            "port_price": check_float("prices.port_price", self.port_price),
            "transceiver_price": check_float(
                "prices.transceiver_price", self.transceiver_price, low_open=False),
            "line_rate_gbps": check_float("prices.line_rate_gbps", self.line_rate_gbps),
        }
        if (self.port_power is None) != (self.transceiver_power is None):
            given, missing = (("port_power", "transceiver_power") if self.transceiver_power is None
                              else ("transceiver_power", "port_power"))
            raise SpecError(
                f"prices.{missing}: missing; prices.{given} is given and power needs both")
        if self.port_power is not None:
            checked["port_power"] = check_float("prices.port_power", self.port_power)
            checked["transceiver_power"] = check_float(
                "prices.transceiver_power", self.transceiver_power, low_open=False)
        for key, value in checked.items():
            object.__setattr__(self, key, value)

    @property
    def has_power(self) -> bool:
        return self.port_power is not None


def price_presets() -> list[str]:
    """Names of the price sets in `conf/prices/`."""
    return preset_names("prices")


def load_prices(prices: str | Mapping[str, Any] | PriceSet, **overrides) -> PriceSet:
    """A `PriceSet` from a preset name, a mapping or a price set, with optional field overrides."""
    return load_spec(PriceSet, "prices", prices, lambda name: read_preset("prices", name), overrides,
                     noun="a price set")


def check_cluster(gpus: Any, hb_domain: Any, radix: Any) -> tuple[int, int, int]:
    """One cluster size, HB domain size and switch radix, checked for `kernels.fabric_cost`."""
    gpus = check_int("cluster.gpus", gpus)
    hb_domain = check_int("cluster.hb_domain", hb_domain)
    radix = check_int("cluster.radix", radix, minimum=4)
    if radix % 2:
        raise SpecError(f"cluster.radix = {radix}: must be an even integer >= 4 (ports split half "
                        "down, half up)")
    if gpus % hb_domain:
        raise SpecError(f"cluster.gpus = {gpus}: must be a multiple of cluster.hb_domain = "
                        f"{hb_domain} (whole HB domains)")
    return gpus, hb_domain, radix


def percent_as_printed(fraction: float) -> int:
    """A fraction as the papers print it: whole percent, to nearest, exact halves rounded down.

    Both Table 2 (seed 000) and TABLE II (seed 002) print an exact 37.5% saving as 37% and a
    76.59% saving as 77%; no half-up, half-even or truncating rule gives both.
    """
    return math.ceil(round(100.0 * float(fraction), 9) - 0.5)


class NetCostTables(NamedTuple):
    """Results of `compare`.

    counts: gpus, radix, hb_domain, then tiers_*, switches_*, ports_*, transceivers_* for
            * = sota (rail-optimized) and rail (rail-only).
    totals: prices, metric ("cost" in USD or "power" in W), gpus, radix, hb_domain, sota, rail,
            savings (fraction of the SOTA total that rail-only saves).
    """

    counts: pl.DataFrame
    totals: pl.DataFrame


@float64
def compare(gpus: Iterable[int], radix: Iterable[int], hb_domain: int = 256,
            prices: Sequence[PriceSet | str | Mapping[str, Any]] = ()) -> NetCostTables:
    """Both fabrics for every (gpus, radix) pair, and their cost and power under each price set."""
    from kernels import fabric_cost

    gpus, radix = list(gpus), list(radix)
    if not gpus:
        raise SpecError("cluster.gpus = []: give at least one cluster size")
    if not radix:
        raise SpecError("cluster.radix = []: give at least one switch radix")
    for n in gpus:
        for k in radix:
            check_cluster(n, hb_domain, k)
    price_sets = [load_prices(p) for p in prices]

    n_grid, k_grid = (a.ravel() for a in np.meshgrid(np.asarray(gpus, dtype=np.int64),
                                                     np.asarray(radix, dtype=np.int64),
                                                     indexing="ij"))
    k_dom = np.int64(hb_domain)
    sota = fabric_cost.rail_optimized(n_grid, k_grid)
    rail = fabric_cost.rail_only(n_grid, k_dom, k_grid)

    keys = {"gpus": n_grid, "radix": k_grid, "hb_domain": np.full_like(n_grid, k_dom)}
    counts = pl.DataFrame({
        **keys,
        **{f"{field}_sota": np.asarray(getattr(sota, field)) for field in sota._fields},
        **{f"{field}_rail": np.asarray(getattr(rail, field)) for field in rail._fields},
    })

    parts = []
    for p in price_sets:
        metrics = [("cost", p.port_price, p.transceiver_price)]
        if p.has_power:
            metrics.append(("power", p.port_power, p.transceiver_power))
        for metric, per_port, per_tr in metrics:
            t_sota = fabric_cost.equipment_total(sota, per_port, per_tr)
            t_rail = fabric_cost.equipment_total(rail, per_port, per_tr)
            parts.append(pl.DataFrame({
                "prices": [p.name] * len(n_grid),
                "metric": [metric] * len(n_grid),
                **keys,
                "sota": np.asarray(t_sota),
                "rail": np.asarray(t_rail),
                "savings": np.asarray(fabric_cost.savings(t_sota, t_rail)),
            }))
    totals = pl.concat(parts) if parts else pl.DataFrame(schema={
        "prices": pl.String, "metric": pl.String, "gpus": pl.Int64, "radix": pl.Int64,
        "hb_domain": pl.Int64, "sota": pl.Float64, "rail": pl.Float64, "savings": pl.Float64})
    return NetCostTables(counts, totals)
