"""The network of a study: which collective model the kernels use, the NIC interface, and the
equipment (switches, transceivers), cost and power of the NIC fabric.

    name        two_tier (seed 001) | rail_optimized | rail_only | any_to_any (seeds 000, 002)
    radix       switch radix of the NIC fabric (for its equipment count)
    prices      a conf/prices preset: price and power per switch port and per transceiver
    nic         a conf/nic preset whose packet formats give the repacketization overhead of a shared
                switch -> NIC link (seed 004 Eq. 2), or null
    nic_link_bandwidth
                GB/s of the link that `nic_sharing` GPUs of a node share towards their NICs; null
                when it does not limit (the default)
    nic_sharing GPUs sharing that link

With a NIC link, each GPU's InfiniBand bandwidth becomes seed 004's effective bandwidth,
min(NIC, link / (sharing x overhead)), before any collective is timed (`apply`). The equipment is that
of a minimal-tier folded Clos (`kernels.fabric_cost`): one over all GPUs for two_tier and
rail_optimized, one per rail for rail_only, none for any_to_any (one HB domain holds every GPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

import numpy as np
from dse.runtime import float64
from dse.spec.specs import SpecError, SystemSpec, check_choice, check_float, check_int, load_spec, preset_names, read_preset
from kernels.collectives import NETWORKS

COST_COLUMNS = ("network_tiers", "network_switches", "network_transceivers", "network_cost", "network_power")


@dataclass(frozen=True)
class NetworkSpec:
    name: str = "two_tier"
    radix: int = 64
    prices: str | None = "rail_only_2024"
    nic: str | None = None
    nic_link_bandwidth: float | None = None
    nic_sharing: int = 8

    def __post_init__(self):
        check_choice("network.name", self.name, NETWORKS)
        radix = check_int("network.radix", self.radix, 4)
        if radix % 2:
            raise SpecError(f"network.radix = {radix}: must be even (half the ports face down)")
        object.__setattr__(self, "radix", radix)
        object.__setattr__(self, "nic_sharing", check_int("network.nic_sharing", self.nic_sharing))
        if self.nic_link_bandwidth is not None:
            object.__setattr__(self, "nic_link_bandwidth", check_float("network.nic_link_bandwidth", self.nic_link_bandwidth))
        if self.prices is not None:
            from dse.spec.netcost import load_prices

            load_prices(self.prices)  # validates the preset name
        if self.nic is not None:
            from dse.spec.nic import load_nic

            load_nic(self.nic)

    @float64
    def overhead(self) -> float:
        """Seed 004 Eq. 2 for the NIC preset's packet formats (1 without a preset)."""
        if self.nic is None:
            return 1.0
        from dse.spec.nic import load_nic
        from kernels.nic import traffic_overhead

        n = load_nic(self.nic)
        return float(traffic_overhead(n.intra_header, n.intra_payload, n.inter_header, n.inter_payload))

    @float64
    def apply(self, system: SystemSpec) -> SystemSpec:
        """The system as this network sees it: InfiniBand bandwidth capped by a shared NIC link."""
        if self.nic_link_bandwidth is None:
            return system
        from kernels.nic import effective_nic_bandwidth

        per_gpu = system.ib_bandwidth * system.nic_factor
        eff = float(effective_nic_bandwidth(per_gpu, self.nic_link_bandwidth, self.nic_sharing, self.overhead()))
        return system.replace(ib_bandwidth=eff / system.nic_factor)

    @float64
    def equipment(self, n_gpus: np.ndarray, hb_domain: np.ndarray) -> dict[str, np.ndarray]:
        """Per (n_gpus, hb_domain) row: tiers, switches, transceivers of the NIC fabric, its cost
        (USD) and power (W) with the price set (NaN where there is no fabric or no figure)."""
        from dse.spec.netcost import load_prices

        n = np.asarray(n_gpus, dtype=np.int64)
        k = np.minimum(np.asarray(hb_domain, dtype=np.int64), n)
        none = (n <= k) | (self.name == "any_to_any")  # one HB domain: no NIC fabric at all
        p = load_prices(self.prices) if self.prices is not None else None
        price = [math.nan] * 4 if p is None else [p.port_price, p.transceiver_price, p.port_power, p.transceiver_power]
        price = np.array([math.nan if x is None else float(x) for x in price])
        if self.name == "rail_only":
            fab, cost, power = _equipment("rail_only", np.where(none, k, n), np.maximum(k, 1), self.radix, price)
        else:
            fab, cost, power = _equipment("rail_optimized", np.maximum(n, 1), np.ones_like(n), self.radix, price)
        zero = np.zeros(len(n), dtype=np.int64)
        out = {
            "network_tiers": np.where(none, zero, fab.tiers),
            "network_switches": np.where(none, zero, fab.switches),
            "network_transceivers": np.where(none, zero, fab.transceivers),
            "network_cost": np.full(len(n), math.nan),
            "network_power": np.full(len(n), math.nan),
        }
        if p is not None:
            out["network_cost"] = np.where(none, 0.0, cost)
            if p.port_power is not None and p.transceiver_power is not None:
                out["network_power"] = np.where(none, 0.0, power)
        if self.name == "any_to_any":
            for c in ("network_cost", "network_power"):
                out[c] = np.full(len(n), math.nan)
        return out


@lru_cache(maxsize=None)
def _equipment_program(kind: str, size: int):
    """The fabric's counts (`kernels.fabric_cost.rail_only` / `rail_optimized`) and its cost and
    power (`equipment_total`, prices: port price, transceiver price, port power, transceiver
    power) of `size` (n, k) rows, as one program compiled once (`dse.explore.programs`: loaded from disk
    by a later process)."""
    import jax

    from dse.explore import programs
    from kernels.fabric_cost import equipment_total, rail_only, rail_optimized

    def run(n, k, radix, price):
        fab = rail_only(n, k, radix) if kind == "rail_only" else rail_optimized(n, radix)
        return fab, equipment_total(fab, price[0], price[1]), equipment_total(fab, price[2], price[3])

    one = np.ones(size, dtype=np.int64)
    return programs.compile(jax.jit(run), (one, one, one, np.ones(4)), ("equipment", kind))


def _equipment(kind: str, n: np.ndarray, k: np.ndarray, radix: int, price: np.ndarray):
    """(Fabric, cost, power) of each (n, k) row (`_equipment_program`), padded to a power of two
    of at least 64 rows, so a search's few rows cost one call of a program compiled once."""
    from kernels.fabric_cost import Fabric

    rows = len(n)
    size = max(64, 1 << (max(rows, 1) - 1).bit_length())
    pad = lambda x: np.concatenate([np.asarray(x, dtype=np.int64), np.ones(size - rows, dtype=np.int64)])  # noqa: E731
    fab, cost, power = _equipment_program(kind, size)(pad(n), pad(k), np.full(size, radix, dtype=np.int64), price)
    return (Fabric(*(np.asarray(x)[:rows] for x in fab)), np.asarray(cost, dtype=np.float64)[:rows],
            np.asarray(power, dtype=np.float64)[:rows])


def group_equipment(net: "NetworkSpec", groups, profile: str = "default") -> dict[str, np.ndarray]:
    """`NetworkSpec.equipment` of each (nvs_size, n_gpus) group, in the groups' order: the HB
    domains of a job of n GPUs hold its domain share (`dse.explore.space.domain_share`). A search computes
    them once and gathers them by group id into its frames."""
    from dse.explore.space import domain_share

    groups = list(groups)
    n = np.array([g[1] for g in groups], dtype=np.int64)
    share = np.array([max(domain_share(n_, k, profile), 1) for k, n_ in groups], dtype=np.int64)
    return net.equipment(n, share)


def with_network_columns(frame, net: "NetworkSpec", profile: str = "default"):
    """Add `network` and the equipment/cost columns of each row's (nvs_size, n_gpus) to a Polars
    frame. The HB domains of a job of n GPUs hold its domain share (`dse.explore.space.domain_share`)."""
    import polars as pl

    if frame.is_empty():
        cols = [pl.lit(net.name).alias("network")] + [
            pl.lit(None, dtype=pl.Int64 if c.endswith(("tiers", "switches", "transceivers")) else pl.Float64).alias(c)
            for c in COST_COLUMNS]
        return frame.with_columns(cols)
    keys = frame.select("nvs_size", "n_gpus").unique()
    eq = group_equipment(net, keys.iter_rows(), profile)
    table = keys.with_columns([pl.Series(c, eq[c]) for c in COST_COLUMNS])
    return frame.join(table, on=["nvs_size", "n_gpus"], how="left").with_columns(pl.lit(net.name).alias("network"))


def network_presets() -> list[str]:
    return preset_names("network")


def load_network(network: str | Mapping[str, Any] | NetworkSpec | None = None, **overrides) -> NetworkSpec:
    """A `NetworkSpec` from a preset name (conf/network), a mapping or a spec."""
    return load_spec(NetworkSpec, "network", "two_tier" if network is None else network,
                     lambda name: read_preset("network", name), overrides)
