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
`network_cost` (USD) are the NIC fabric's (`dse.spec.network`, the price set of `network.prices`).

Rental prices include the fabric, power and cooling, so a rented run's cost is its GPU-hours; its
energy and power are still reported. The cluster's price `cluster_cost_usd` is the purchase price
in both modes (null without `gpu_price_usd`). Unknown inputs give null, never a guess: a model
without a training-set size (no run), a network without a price or power figure (NaN in
`network_cost` / `network_power`, e.g. `any_to_any`), a system no preset covers.

The prices and powers are presets in `conf/economics/` (every number with its public source);
`economics=auto` (the default) takes the preset whose `systems` lists the row's system. Any field
can be overridden: `dse economics.pricing=rental economics.gpu_hour_usd=2.5`, or in Python
`dse.search(..., economics={"pricing": "rental", "gpu_hour_usd": 2.5})`.

The formulas are written once (`cost_formulas`, over columns as float64 arrays with their nulls:
Polars' rule that a null input gives a null output), and applied to finished result frames by
`with_cost_columns` and to a search's rows as their frames are built (`cost_columns`): the kernels
never see a price.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from dse.spec.specs import SpecError, SystemSpec, check_choice, check_float, preset_names, read_preset

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
        if not isinstance(systems, (list, tuple, type(None))) or not all(isinstance(s, str) for s in systems or ()):
            raise SpecError(f"economics.systems = {systems!r}: must be a list of system preset names")
        object.__setattr__(self, "systems", tuple(systems or ()))

    def replace(self, **changes) -> "EconomicsSpec":
        return dataclasses.replace(self, **changes)


def economics_presets() -> list[str]:
    """The presets of `conf/economics/` (auto included)."""
    return preset_names("economics")


FIELDS = tuple(f.name for f in dataclasses.fields(EconomicsSpec))


def _fields_of(economics: str | Mapping[str, Any] | None) -> dict:
    """The fields an economics value gives: a preset name is its `name`; a mapping as it is."""
    if economics is None:
        return {"name": AUTO}
    if isinstance(economics, str):
        return {"name": economics}
    if not isinstance(economics, Mapping):
        raise SpecError(f"economics = {economics!r}: must be a preset name ({', '.join(economics_presets())}), "
                        "a mapping of fields or an EconomicsSpec")
    return dict(economics)


def _check_keys(data: Mapping[str, Any]) -> None:
    unknown = sorted(set(data) - set(FIELDS), key=str)
    if unknown:
        raise SpecError(f"economics.{unknown[0]}: unknown field; valid fields: {', '.join(FIELDS)}")


def _preset(name: str) -> dict:
    """The fields of an economics preset (a name that is none is `read_preset`'s one-line error,
    naming the valid ones)."""
    return dict(read_preset("economics", name))


@lru_cache(maxsize=256)
def preset_for(system: str) -> str | None:
    """The preset whose `systems` lists `system`, or None (kept per process, as the presets
    themselves are: `dse.spec.specs.read_preset`)."""
    for name in economics_presets():
        if name != AUTO and system in (_preset(name).get("systems") or ()):
            return name
    return None


def check_economics(economics: str | Mapping[str, Any] | EconomicsSpec | None) -> None:
    """Validate economics inputs before any compute (names, fields, values); raises SpecError."""
    if economics is None or isinstance(economics, EconomicsSpec):
        return
    data = _fields_of(economics)
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
    data = _fields_of(economics)
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


class Column:
    """A column as the formulas take it: float64 values and where they are null (`null`: a bool
    array, or None for none), so that a null input gives a null output, as in Polars; NaN stays
    NaN. Arithmetic with columns and numbers."""

    __slots__ = ("values", "null")

    def __init__(self, values: np.ndarray, null: np.ndarray | None = None):
        self.values = values
        self.null = null if null is not None and null.any() else None

    def _op(self, other, op, swap=False) -> "Column":
        if isinstance(other, Column):
            b, null = other.values, (self.null if other.null is None else
                                     other.null if self.null is None else self.null | other.null)
        else:
            b, null = other, self.null
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return Column(op(b, self.values) if swap else op(self.values, b), null)

    def __add__(self, o): return self._op(o, np.add)
    def __radd__(self, o): return self._op(o, np.add, True)
    def __sub__(self, o): return self._op(o, np.subtract)
    def __rsub__(self, o): return self._op(o, np.subtract, True)
    def __mul__(self, o): return self._op(o, np.multiply)
    def __rmul__(self, o): return self._op(o, np.multiply, True)
    def __truediv__(self, o): return self._op(o, np.true_divide)
    def __rtruediv__(self, o): return self._op(o, np.true_divide, True)

    def series(self, name: str) -> pl.Series:
        """A Float64 Series, null where the column is."""
        out = pl.Series(name, self.values, dtype=pl.Float64)
        return out if self.null is None else out.scatter(np.flatnonzero(self.null), None)


def _choose(rental: Column, rented: Column, owned: Column) -> Column:
    """rented where `rental` holds, else owned (a null condition takes owned, as Polars' when)."""
    pick = rental.values.astype(bool) if rental.null is None else rental.values.astype(bool) & ~rental.null
    if pick.all() or not pick.any():
        return rented if pick.all() else owned
    null = None
    if rented.null is not None or owned.null is not None:
        rn = rented.null if rented.null is not None else np.zeros(len(pick), dtype=bool)
        on = owned.null if owned.null is not None else np.zeros(len(pick), dtype=bool)
        null = np.where(pick, rn, on)
    return Column(np.where(pick, rented.values, owned.values), null)


def cost_formulas(c: Mapping[str, Column], p: Mapping[str, Any]) -> dict[str, Column]:
    """The economy columns from the result columns `c` (`_NEEDS`) and the price/power parameters
    `p` (`_PARAMS`, numbers or `Column`s, and rental, a `Column`): the one place the formulas live
    (module docstring)."""
    n = c["n_gpus"]
    util = (c["t_compute"] + c["t_memory"] + c["t_optimizer"]) / c["iteration_time"]
    hours = c["training_days"] * 24.0
    gpu_w = p["gpu_idle_w"] + p["host_w"] + (p["gpu_tdp_w"] - p["gpu_idle_w"]) * util
    power_kw = p["pue"] * (n * gpu_w + c["network_power"]) / 1000.0
    energy_mwh = power_kw * hours / 1000.0
    capex = n * p["gpu_price_usd"] + c["network_cost"]
    owned = capex * hours / (HOURS_PER_YEAR * p["amortisation_years"]) + energy_mwh * 1000.0 * p["electricity_usd_per_kwh"]
    rented = n * hours * p["gpu_hour_usd"]
    return {"compute_utilisation": util, "power_kw": power_kw, "energy_per_run_mwh": energy_mwh,
            "cluster_cost_usd": capex, "cost_per_run_usd": _choose(p["rental"], rented, owned)}


_PARAMS = ("gpu_tdp_w", "gpu_idle_w", "host_w", "gpu_price_usd", "amortisation_years", "gpu_hour_usd", "pue",
           "electricity_usd_per_kwh")


def _param_row(spec: EconomicsSpec | None) -> dict[str, Any]:
    if spec is None:
        return {**{k: None for k in _PARAMS}, "rental": None}
    return {**{k: getattr(spec, k) for k in _PARAMS}, "rental": spec.pricing == "rental"}


_NEEDS = ("n_gpus", "iteration_time", "t_compute", "t_memory", "t_optimizer", "training_days", "network_cost",
          "network_power")


#: Runs of rows of one price group up to which `cost_columns` evaluates the formulas once per run,
#: its prices as numbers; past it (rows of many groups, or interleaved), once over every row with
#: each row's prices gathered.
MAX_PRICE_RUNS = 16


def cost_columns(data: Mapping[str, Any], group: np.ndarray, specs: Sequence[EconomicsSpec | None]) -> dict[str, pl.Series]:
    """The economy columns (`ECONOMY_COLUMNS`, Float64 Series) of rows whose result columns are
    `data` (`_NEEDS`: NumPy arrays, or Polars Series whose nulls stay null) and whose prices are
    specs[group[i]] (None: no preset, null costs). The formulas run once per run of consecutive
    rows of one group, its prices as numbers (a search's rows come system by system), or, past
    MAX_PRICE_RUNS runs, once over all rows with each row's prices gathered (the same values: a
    price is the same float either way)."""
    group = np.asarray(group, dtype=np.int64)
    rows = len(group)
    cols = {}
    for k in _NEEDS:
        x = data[k]
        if isinstance(x, pl.Series):
            cols[k] = Column(x.cast(pl.Float64).to_numpy(), x.is_null().to_numpy() if x.null_count() else None)
        else:
            cols[k] = Column(np.asarray(x, dtype=np.float64))
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if rows else np.zeros(0, dtype=np.int64)
    if len(starts) > MAX_PRICE_RUNS:  # each row's prices gathered, one pass
        table = [_param_row(s) for s in specs]
        params = {}
        for k in (*_PARAMS, "rental"):
            known = np.array([r[k] is not None for r in table])
            values = np.array([float(r[k]) if r[k] is not None else np.nan for r in table])
            params[k] = Column(values[group], ~known[group])
        got = cost_formulas(cols, params)
        return {k: got[k].series(k) for k in ECONOMY_COLUMNS}
    parts: dict[str, list[Column]] = {k: [] for k in ECONOMY_COLUMNS}
    for lo, hi in zip(starts.tolist(), np.r_[starts[1:], rows].tolist()):
        row = _param_row(specs[group[lo]])
        n = hi - lo
        params = {k: Column(np.full(n, np.nan), np.ones(n, dtype=bool)) if v is None else float(v)
                  for k, v in row.items()}
        params["rental"] = Column(np.full(n, bool(row["rental"])), None if row["rental"] is not None else np.ones(n, dtype=bool))
        got = cost_formulas({k: Column(c.values[lo:hi], None if c.null is None else c.null[lo:hi])
                             for k, c in cols.items()}, params)
        for k in ECONOMY_COLUMNS:
            parts[k].append(got[k])
    out = {}
    for k, c in parts.items():
        if len(c) == 1:
            out[k] = c[0].series(k)
            continue
        values = np.concatenate([x.values for x in c]) if c else np.zeros(0)
        null = None if all(x.null is None for x in c) else np.concatenate(
            [x.null if x.null is not None else np.zeros(len(x.values), dtype=bool) for x in c])
        out[k] = Column(values, null).series(k)
    return out


def with_cost_columns(frame: pl.DataFrame, economics: Any = None, system: str | SystemSpec | None = None) -> pl.DataFrame:
    """`frame` with the economy columns (`ECONOMY_COLUMNS`) appended, replacing any it had.

    Each row's prices are its system's (`resolve_economics` of `economics` and the row's `system`
    column, or of `system` when the frame has no such column). NaN inputs (a missing network
    price) give NaN; null inputs, rows without a preset and rows without a run give null."""
    old = [c for c in ECONOMY_COLUMNS if c in frame.columns]
    frame = frame.drop(old) if old else frame
    missing = [c for c in _NEEDS if c not in frame.columns and c != "training_days"]
    if missing:
        raise ValueError(f"cost columns need the result columns {missing}")
    rows = len(frame)
    data = {c: frame[c] for c in _NEEDS if c in frame.columns}
    if "training_days" not in data:  # a model without a training-set size: no run
        data["training_days"] = pl.Series("training_days", [None] * rows, dtype=pl.Float64)
    if "system" in frame.columns and rows:
        names = frame["system"]
        unique = names.unique(maintain_order=True)
        group = (names.replace_strict(unique, pl.int_range(len(unique), eager=True), return_dtype=pl.Int64).to_numpy()
                 if len(unique) > 1 else np.zeros(rows, dtype=np.int64))
        specs = [resolve_economics(economics, s) for s in unique.to_list()]
    else:
        group, specs = np.zeros(rows, dtype=np.int64), [resolve_economics(economics, system)]
    return frame.with_columns(list(cost_columns(data, group, specs).values()))


def cost_coefficients(row: Mapping[str, Any], economics: Any = None,
                      system: str | SystemSpec | None = None) -> tuple[float, float] | None:
    """(k_T, k_W) with cost_per_run = k_T T + k_W W for a result row, T its iteration time and
    W = t_compute + t_memory + t_optimizer (the time the GPUs work), every other input held: the
    run's hours are proportional to T and its utilisation is W / T, so the formulas above are
    linear in (T, W). Read off `cost_formulas` themselves at (T, W), (2T, W) and (T, 2W), so the
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
