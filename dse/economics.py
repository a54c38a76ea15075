"""Cost and energy of a training run: every result row's dollars, megawatt-hours and kilowatts.

A *run* trains the model on its training set (`ModelSpec.training_tokens`), the same run whose
length is `training_days`; its hours are H = 24 training_days. With N = n_gpus and the row's time
breakdown (seconds per iteration, `kernels.Metrics`):

    compute_utilisation u = (t_compute + t_memory + t_optimizer) / iteration_time
    power_kw             P = PUE (N (idle + host + (TDP - idle) u) + network_power) / 1000
    energy_per_run_mwh   E = P H / 1000
    cluster_cost_usd     C = N gpu_price + network_cost
    cost_per_run_usd       = C H / (8760 amortisation_years) + 1000 E electricity      (ownership)
                           = N H gpu_hour                                             (rental)

`u` is the fraction of the iteration the GPUs run the model's own kernels: the roofline time of its
layers (math, and the HBM time a memory-bound layer adds) and the optimizer step. The rest of the
iteration (exposed TP/DP/PP communication and the pipeline bubble) they wait, near idle. This is the
utilisation that sets power, not the model FLOPs utilisation (useful FLOPs / peak): a GPU running a
GEMM at 60% of its peak rate is busy the whole time, its SMs and HBM switching, and draws close to
its TDP; MFU would put it at 60% of the dynamic range. `host` is the rest of the node per GPU
(CPUs, memory, NICs, NVSwitches, fans), drawn whatever the GPU does. `network_power` (W) and
`network_cost` (USD) are the NIC fabric's (`dse.network`, the price set of `network.prices`).

Rental prices include the fabric, power and cooling, so a rented run's cost is its GPU-hours; its
energy and power are still reported. The cluster's price `cluster_cost_usd` is the purchase price
in both modes (null without `gpu_price_usd`). Unknown inputs give null, never a guess: a model
without a training-set size (no run), a network without a price or power figure (NaN in
`network_cost` / `network_power`, e.g. `any_to_any`), a system no preset covers.

The prices and powers are presets in `conf/economics/` (every number with its public source);
`economics=auto` (the default) takes the preset whose `systems` lists the row's system. Any field
can be overridden: `dse economics.pricing=rental economics.gpu_hour_usd=2.5`, or in Python
`dse.search(..., economics={"pricing": "rental", "gpu_hour_usd": 2.5})`.

The formulas are written once, as Polars expressions (`cost_expressions`), and applied to finished
result frames by `with_cost_columns`: the kernels never see a price.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

import polars as pl

from dse.specs import SpecError, SystemSpec, check_choice, check_float, preset_names, read_preset

#: The columns every result row gains (`with_cost_columns`), in order.
ECONOMY_COLUMNS = ("compute_utilisation", "power_kw", "energy_per_run_mwh", "cluster_cost_usd", "cost_per_run_usd")
#: Pricing modes.
PRICING = ("ownership", "rental")
HOURS_PER_YEAR = 8760.0
#: The preset that matches the system (`resolve_economics`).
AUTO = "auto"

_PRICE_FIELDS = ("gpu_price_usd", "amortisation_years", "gpu_hour_usd")


@dataclass(frozen=True)
class EconomicsSpec:
    """Prices and powers of one GPU kind (`conf/economics/*.yaml`); the formulas are in the module
    docstring. A price left null makes the columns that need it null."""

    name: str
    pricing: str = "ownership"
    gpu_tdp_w: float | None = None  # W per GPU at full load (the board's TDP)
    gpu_idle_w: float | None = None  # W per GPU idle
    host_w: float = 0.0  # W per GPU for the rest of the node
    gpu_price_usd: float | None = None  # USD per GPU (node price / GPUs per node)
    amortisation_years: float | None = None  # years the purchase is written off over
    gpu_hour_usd: float | None = None  # USD per GPU-hour rented
    pue: float = 1.0  # facility power / IT power
    electricity_usd_per_kwh: float | None = None  # USD per kWh
    systems: tuple = field(default=())  # system presets this group prices (economics=auto)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"economics.name = {self.name!r}: must be a non-empty string")
        check_choice("economics.pricing", self.pricing, PRICING)
        for f in ("gpu_tdp_w", "gpu_price_usd", "amortisation_years", "gpu_hour_usd"):
            v = getattr(self, f)
            if v is not None:
                object.__setattr__(self, f, check_float(f"economics.{f}", v))
        for f in ("gpu_idle_w", "electricity_usd_per_kwh"):
            v = getattr(self, f)
            if v is not None:
                object.__setattr__(self, f, check_float(f"economics.{f}", v, low_open=False))
        object.__setattr__(self, "host_w", check_float("economics.host_w", self.host_w, low_open=False))
        object.__setattr__(self, "pue", check_float("economics.pue", self.pue, 1.0, 5.0, low_open=False))
        if self.gpu_tdp_w is not None and self.gpu_idle_w is not None and self.gpu_idle_w > self.gpu_tdp_w:
            raise SpecError(f"economics.gpu_idle_w = {self.gpu_idle_w}: must be <= economics.gpu_tdp_w = "
                            f"{self.gpu_tdp_w}")
        systems = self.systems
        if isinstance(systems, str) or not all(isinstance(s, str) for s in systems or ()):
            raise SpecError(f"economics.systems = {systems!r}: must be a list of system preset names")
        object.__setattr__(self, "systems", tuple(systems or ()))

    def replace(self, **changes) -> "EconomicsSpec":
        return dataclasses.replace(self, **changes)


def economics_presets() -> list[str]:
    """The presets of `conf/economics/` (auto included)."""
    return preset_names("economics")


FIELDS = tuple(f.name for f in dataclasses.fields(EconomicsSpec))


def _check_keys(data: Mapping[str, Any]) -> None:
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise SpecError(f"economics.{unknown[0]}: unknown field; valid fields: {', '.join(FIELDS)}")


def _preset(name: str) -> dict:
    """The fields of an economics preset (a name that is none is `read_preset`'s one-line error,
    naming the valid ones)."""
    return dict(read_preset("economics", name))


@lru_cache(maxsize=256)
def preset_for(system: str) -> str | None:
    """The preset whose `systems` lists `system`, or None (kept per process, as the presets
    themselves are: `dse.specs.read_preset`)."""
    for name in economics_presets():
        if name != AUTO and system in (_preset(name).get("systems") or ()):
            return name
    return None


def check_economics(economics: str | Mapping[str, Any] | EconomicsSpec | None) -> None:
    """Validate economics inputs before any compute (names, fields, values); raises SpecError."""
    if economics is None or isinstance(economics, EconomicsSpec):
        return
    data = {"name": economics} if isinstance(economics, str) else dict(economics)
    _check_keys(data)
    name = data.get("name", AUTO)
    base = {"name": "check"} if name == AUTO else _preset(name)
    EconomicsSpec(**{**base, **{k: v for k, v in data.items() if k != "name"}, "name": str(name)})


def resolve_economics(economics: str | Mapping[str, Any] | EconomicsSpec | None,
                      system: str | SystemSpec | None) -> EconomicsSpec | None:
    """The price and power group of one system: a spec as given; a preset name; `auto` (or None)
    for the preset listing the system; a mapping of fields on top of its `name` (default auto).
    None when auto finds no preset and the mapping does not say what a GPU draws."""
    if isinstance(economics, EconomicsSpec):
        return economics
    data = {"name": AUTO} if economics is None else (
        {"name": economics} if isinstance(economics, str) else dict(economics))
    _check_keys(data)
    name = str(data.pop("name", AUTO))
    sys_name = system.name if isinstance(system, SystemSpec) else system
    if name == AUTO:
        match = preset_for(sys_name) if sys_name else None
        if match is None:
            if "gpu_tdp_w" not in data:
                return None
            return EconomicsSpec(name=f"custom:{sys_name}", **data)
        name = match
    return EconomicsSpec(**{**_preset(name), **data, "name": name})


# ----------------------------------------------------------------------------------------------
# the formulas


def cost_expressions(p: Mapping[str, pl.Expr]) -> dict[str, pl.Expr]:
    """The economy columns as Polars expressions of result columns and of the price/power
    parameters `p` (expressions too: literals or the columns of a per-system table), the one place
    the formulas live (module docstring)."""
    n = pl.col("n_gpus").cast(pl.Float64)
    t = pl.col("iteration_time")
    util = (pl.col("t_compute") + pl.col("t_memory") + pl.col("t_optimizer")) / t
    hours = pl.col("training_days") * 24.0
    gpu_w = p["gpu_idle_w"] + p["host_w"] + (p["gpu_tdp_w"] - p["gpu_idle_w"]) * util
    power_kw = p["pue"] * (n * gpu_w + pl.col("network_power")) / 1000.0
    energy_mwh = power_kw * hours / 1000.0
    capex = n * p["gpu_price_usd"] + pl.col("network_cost")
    owned = capex * hours / (HOURS_PER_YEAR * p["amortisation_years"]) + energy_mwh * 1000.0 * p["electricity_usd_per_kwh"]
    rented = n * hours * p["gpu_hour_usd"]
    cost = pl.when(p["rental"]).then(rented).otherwise(owned)
    return {"compute_utilisation": util, "power_kw": power_kw, "energy_per_run_mwh": energy_mwh,
            "cluster_cost_usd": capex, "cost_per_run_usd": cost}


_PARAMS = ("gpu_tdp_w", "gpu_idle_w", "host_w", "gpu_price_usd", "amortisation_years", "gpu_hour_usd", "pue",
           "electricity_usd_per_kwh")


def _param_row(spec: EconomicsSpec | None) -> dict[str, Any]:
    if spec is None:
        return {**{k: None for k in _PARAMS}, "rental": None}
    return {**{k: getattr(spec, k) for k in _PARAMS}, "rental": spec.pricing == "rental"}


_NEEDS = ("n_gpus", "iteration_time", "t_compute", "t_memory", "t_optimizer", "training_days", "network_cost",
          "network_power")


def with_cost_columns(frame: pl.DataFrame, economics: Any = None, system: str | SystemSpec | None = None) -> pl.DataFrame:
    """`frame` with the economy columns (`ECONOMY_COLUMNS`) appended, replacing any it had.

    Each row's prices are its system's (`resolve_economics` of `economics` and the row's `system`
    column, or of `system` when the frame has no such column). NaN inputs (a missing network
    price) give NaN; rows without a preset or a run give null."""
    old = [c for c in ECONOMY_COLUMNS if c in frame.columns]
    frame = frame.drop(old) if old else frame
    if "training_days" not in frame.columns:  # a model without a training-set size: no run
        frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias("training_days"))
        return with_cost_columns(frame, economics, system).drop("training_days")
    missing = [c for c in _NEEDS if c not in frame.columns]
    if missing:
        raise ValueError(f"cost columns need the result columns {missing}")
    if frame.is_empty():
        return frame.with_columns([pl.lit(None, dtype=pl.Float64).alias(c) for c in ECONOMY_COLUMNS])
    prefix = "__econ_"
    names = frame["system"].unique().to_list() if "system" in frame.columns else []
    if len(names) > 1:  # each row its system's prices
        rows = [{"system": s, **{prefix + k: v for k, v in _param_row(resolve_economics(economics, s)).items()}}
                for s in names]
        table = pl.DataFrame(rows, schema={"system": frame.schema["system"],
                                           **{prefix + k: pl.Float64 for k in _PARAMS}, prefix + "rental": pl.Boolean})
        work = frame.join(table, on="system", how="left")
    else:  # one system: its prices as literals, no join
        row = _param_row(resolve_economics(economics, names[0] if names else system))
        work = frame.with_columns([pl.lit(row[k], dtype=pl.Float64).alias(prefix + k) for k in _PARAMS]
                                  + [pl.lit(row["rental"], dtype=pl.Boolean).alias(prefix + "rental")])
    params = {k: pl.col(prefix + k) for k in (*_PARAMS, "rental")}
    exprs = cost_expressions(params)
    work = work.with_columns([exprs[c].cast(pl.Float64).alias(c) for c in ECONOMY_COLUMNS])
    return work.drop([prefix + k for k in (*_PARAMS, "rental")])


def cost_coefficients(row: Mapping[str, Any], economics: Any = None,
                      system: str | SystemSpec | None = None) -> tuple[float, float] | None:
    """(k_T, k_W) with cost_per_run = k_T T + k_W W for a result row, T its iteration time and
    W = t_compute + t_memory + t_optimizer (the time the GPUs work), every other input held: the
    run's hours are proportional to T and its utilisation is W / T, so the formulas above are
    linear in (T, W). Read off `cost_expressions` itself at (T, W), (2T, W) and (T, 2W), so the
    formulas stay in one place; None when the row has no cost (no preset, no run)."""
    keep = [c for c in _NEEDS if c in row] + (["system"] if "system" in row else [])
    base = {c: [row[c]] for c in keep}
    frame = pl.DataFrame(base)
    t_scaled = frame.with_columns(pl.col("iteration_time") * 2.0, pl.col("training_days") * 2.0)
    w_scaled = frame.with_columns([pl.col(c) * 2.0 for c in ("t_compute", "t_memory", "t_optimizer")])
    cost = with_cost_columns(pl.concat([frame, t_scaled, w_scaled], how="vertical_relaxed"), economics,
                             system)["cost_per_run_usd"].to_list()
    if any(c is None for c in cost) or not all(map(lambda c: c == c, cost)):
        return None
    t = float(row["iteration_time"])
    w = float(row["t_compute"] + row["t_memory"] + row["t_optimizer"])
    return (cost[1] - cost[0]) / t, (cost[2] - cost[0]) / w if w > 0 else 0.0


def economics_sink(sink, economics: Any):
    """A row sink (`dse.search.run_search`'s keep_rows callable) that adds the cost columns to each
    chunk's rows first."""
    def add(frame: pl.DataFrame) -> None:
        sink(with_cost_columns(frame, economics))

    return add
