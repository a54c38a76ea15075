"""Sensitivities of one configuration to the hardware: elasticities by JAX through the kernels.

For a configuration (a row of the candidate table) on a system with continuous fields x_k, the
elasticity of the iteration time T with respect to x_k is

    e_k = d ln T / d ln x_k = (x_k / T) dT/dx_k,

so a small relative change dx/x of the field changes the time by about e_k dx/x. It is computed as
the gradient of ln T(exp(u)) with respect to u = ln x at u_0 = ln x_0, differentiating the very
kernels the search runs (`kernels.evaluate_candidates`, as `dse.truth.calibrate` differentiates them), all
fields in one forward-mode pass (`jax.jacfwd`: 17 tangents; it compiles about 3.5 times faster than
reverse mode and runs as fast). The effect of a finite change is reported two ways: (1.1^e - 1), the
power law the elasticity implies for +10%, and the exact re-evaluation of the kernels at 1.1 x_k
(which sees the model's kinks: max(compute, memory) rooflines, exposed-communication clips).

Training days are the training set over the throughput, B / T per second, so their elasticity is
that of T; so is the expected time to train with failures (`dse.decisions.whatif.goodput`: the goodput does
not depend on the hardware's speed). A cost per run depends on the hardware's price too: pass an
`objective` (a function of the kernels' `Metrics` and `System`, in JAX) and its elasticities come
in one more column.

HBM capacity changes no time: it decides only whether the configuration fits. Its row has
elasticity 0, `constraint` true and the memory headroom, 1 - memory / capacity (the fraction by
which the capacity can fall before the configuration stops fitting).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import polars as pl

from dse.explore.space import COLUMNS
from dse.runtime import float64
from dse.spec.specs import SpecError, SystemSpec

#: The continuous hardware fields of `dse.SystemSpec`: (what a planner calls it, unit).
CONTINUOUS: dict[str, tuple[str, str]] = {
    "matrix_flops": ("tensor-core FLOP rate", "TFLOP/s"),
    "matrix_flops_fp8": ("FP8 tensor-core FLOP rate", "TFLOP/s"),
    "matrix_flops_fp4": ("NVFP4 tensor-core FLOP rate", "TFLOP/s"),
    "vector_flops": ("vector FLOP rate", "TFLOP/s"),
    "compute_eff": ("compute efficiency", "fraction"),
    "fp8_eff": ("FP8 matmul efficiency (of BF16's)", "fraction"),
    "fp8_rowwise_eff": ("rowwise-scaled FP8 matmul efficiency (of FP8's)", "fraction"),
    "fp4_eff": ("NVFP4 matmul efficiency (of BF16's)", "fraction"),
    "matmul_knee": ("GEMM efficiency knee", "machine balances"),
    "flop_latency": ("per-layer kernel latency", "s"),
    "hbm_bandwidth": ("HBM bandwidth", "GB/s"),
    "hbm_eff": ("HBM efficiency", "fraction"),
    "hbm_capacity": ("HBM capacity", "GB"),
    "nvlink_bandwidth": ("NVLink bandwidth", "GB/s"),
    "nvlink_eff": ("NVLink efficiency", "fraction"),
    "nvlink_latency": ("NVLink latency", "s"),
    "ib_bandwidth": ("NIC bandwidth", "GB/s"),
    "ib_eff": ("NIC efficiency", "fraction"),
    "ib_latency": ("NIC latency", "s"),
    "nic_factor": ("NICs per GPU", "NICs"),
    "host_bandwidth": ("host link bandwidth (activation offloading)", "GB/s"),
    "host_moe_time": ("host time to issue a dropless MoE block", "s"),
}

#: Fields of `SystemSpec` that are not continuous hardware quantities, and why.
NOT_CONTINUOUS = {
    "nvs_size": "an integer domain size that changes the candidate configurations (search it with system.nvs_size=[...])",
    "element_size": "the bytes of the precision's tensor elements, not a hardware quantity",
    "mask_element_size": "the bytes of a dropout-mask element, not a hardware quantity",
    "fp8_weight_copies": "a count of weight copies Transformer Engine keeps, not a hardware quantity",
}

#: Fields that decide feasibility only (no time depends on them).
CONSTRAINTS = ("hbm_capacity",)

#: The configuration keywords of `dse.evaluate`.
POINT_KEYS = COLUMNS

STEP = 1.1  # the finite change reported: +10%


def check_fields(fields: Sequence[str] | None, where: str = "fields") -> list[str]:
    """The continuous fields asked for (None: all); a field that is not one is a one-line error."""
    if fields is None:
        return list(CONTINUOUS)
    if isinstance(fields, str):
        fields = [f.strip() for f in fields.split(",") if f.strip()]
    out = []
    for f in fields:
        if f in NOT_CONTINUOUS:
            raise SpecError(f"{where}: {f!r} is not a continuous hardware field ({NOT_CONTINUOUS[f]}); "
                            f"valid: {', '.join(CONTINUOUS)}")
        if f not in CONTINUOUS:
            raise SpecError(f"{where}: {f!r} is not a system field; valid: {', '.join(CONTINUOUS)}")
        if f not in out:
            out.append(f)
    if not out:
        raise SpecError(f"{where} = []: give at least one of {', '.join(CONTINUOUS)}")
    return out


# ----------------------------------------------------------------------------------------------
# the configuration and its kernel inputs


@dataclass
class Point:
    """One configuration with everything its kernels need: the candidate row, the model's
    workload, the system as the kernels see it (calibrated, the network applied) and the static
    kernel arguments."""

    row: dict[str, Any]  # `dse.evaluate`'s result (candidate columns and metrics)
    strategy: str
    profile: Any  # kernels.params.Profile
    model: Any  # ModelSpec
    system: SystemSpec  # calibrated, network applied: what the kernels run
    network: Any  # NetworkSpec
    global_batch: int
    searched: bool = False  # the search's optimum (else given by the caller)

    def candidates(self):
        from kernels.params import Candidates

        return Candidates(*(np.array([int(self.row[k])], dtype=np.int64) for k in Candidates._fields))

    def workload(self):
        return self.model.workload(self.global_batch)

    def config(self) -> dict[str, int]:
        return {k: int(self.row[k]) for k in POINT_KEYS}


def kernel_system(system, profile, network, nvs_size=None) -> SystemSpec:
    """The system as the kernels see it: the profile's calibration and the network applied
    (`dse.evaluate_many` does the same)."""
    from dse.truth.calibration import apply_calibration, profile_calibration
    from dse.explore.engine import profile_of
    from dse.spec.network import load_network
    from dse.spec.specs import load_system

    s = load_system(system, nvs_size=nvs_size)
    return load_network(network).apply(apply_calibration(s, profile_calibration(profile_of(profile))))


def best_row(*, model, system, strategy=None, profile="default", nvs_size=None, global_batch=4096,
             network="two_tier", n_gpus=4096) -> tuple[dict, str]:
    """The search's optimum (highest throughput that fits) over the strategies asked (None: all
    that can model the question) and its strategy. No fitting configuration is a SpecError."""
    from dse.explore.search import check_strategies, search
    from kernels.params import STRATEGIES

    names = [strategy] if isinstance(strategy, str) else list(strategy or STRATEGIES)
    q = dict(model=model, system=system, nvs_size=nvs_size, n_gpus=n_gpus, profile=profile,
             global_batch=global_batch, network=network)
    names, _ = check_strategies(names, top_k=1, **q)
    best = None
    for s in names:
        top = search(strategy=s, top_k=1, **q)
        if top.height and (best is None or top["throughput"][0] > best[0]["throughput"]):
            best = (top.row(0, named=True), s)
    if best is None:
        raise SpecError(f"n_gpus = {n_gpus}: no configuration fits on this system; nothing to differentiate")
    return best


@float64
def resolve_point(*, model, system, strategy=None, profile="default", nvs_size=None, global_batch=4096,
                  network="two_tier", n_gpus=4096, **point) -> Point:
    """The configuration of `dse.evaluate`'s keywords, or (no degree given) the search's optimum
    for the question (`n_gpus`, the strategies)."""
    from dse.api import evaluate
    from dse.explore.engine import profile_of
    from dse.spec.network import load_network
    from dse.spec.specs import load_model, load_system

    unknown = sorted(set(point) - set(POINT_KEYS))
    if unknown:
        raise SpecError(f"{unknown[0]}: not a configuration keyword; valid: {', '.join(POINT_KEYS)}")
    given = {k: v for k, v in point.items() if v is not None}
    m = load_model(model)
    s = load_system(system, nvs_size=nvs_size)
    net = load_network(network)
    searched = not given
    if searched:
        row, strategy = best_row(model=m, system=s, strategy=strategy, profile=profile, global_batch=global_batch,
                                 network=net, n_gpus=n_gpus)
        given = {k: row[k] for k in POINT_KEYS}
    strategy = strategy or "tp1d"
    r = evaluate(model=m, system=s, strategy=strategy, profile=profile, global_batch=global_batch,
                 network=net, **given)
    prof = profile_of(profile)
    return Point(r, strategy, prof, m, kernel_system(s, prof, net), net, global_batch, searched)


# ----------------------------------------------------------------------------------------------
# the differentiable time


ALL = tuple(CONTINUOUS)


@lru_cache(maxsize=None)
def _functions(strategy: str, profile, network: str, arch):
    """Jitted ln T(u) with u = ln x of every continuous field (`ALL`), its gradient, and T at each
    field's +10% (static: the kernel's strategy, profile, network and block shape). One program
    serves every subset of fields, configuration, model and system."""
    import jax
    import jax.numpy as jnp

    from kernels.iteration import evaluate_candidates

    def metrics(u, c, w, s):
        x = jnp.exp(u)
        s = s._replace(**{f: x[i] for i, f in enumerate(ALL)})
        return evaluate_candidates(strategy, c, w, s, profile, network, arch)

    def log_time(u, c, w, s):
        return jnp.log(metrics(u, c, w, s).iteration_time[0])

    def stepped(u, c, w, s):  # T at u + ln(1.1) e_k for every k: one vmapped evaluation
        steps = u[None, :] + jnp.log(STEP) * jnp.eye(len(ALL))
        return jax.vmap(lambda v: metrics(v, c, w, s).iteration_time[0])(steps)

    def value_and_grad(u, c, w, s):  # forward mode, the 17 tangents at once: compiles ~3.5x faster than
        g, v = jax.jacfwd(lambda v_: (log_time(v_, c, w, s),) * 2, has_aux=True)(u)  # reverse, runs as fast
        return v, g

    return jax.jit(value_and_grad), jax.jit(stepped), metrics


class TimeModel:
    """ln T of one configuration as a function of u = ln x of the continuous fields (`ALL`),
    compiled once per (strategy, profile, network, block shape) and reused for any configuration,
    model and system (traced arguments). `dse.decisions.codesign` follows its gradient."""

    def __init__(self, point: Point):
        self.point = point
        self._vg, self._step, self._metrics = _functions(point.strategy, point.profile, point.network.name,
                                                         point.model.arch)
        self.cands = point.candidates()
        self.work = point.workload()
        self.sys = point.system.params()

    def u0(self) -> np.ndarray:
        """ln x of every field (a field at 0 at a tiny positive value: its elasticity is 0)."""
        return np.log(np.array([max(float(getattr(self.point.system, f)), 1e-300) for f in ALL]))

    @float64
    def value_and_grad(self, u) -> tuple[float, np.ndarray]:
        """ln T and d ln T / d u (every field of `ALL`)."""
        v, g = self._vg(np.asarray(u, dtype=np.float64), self.cands, self.work, self.sys)
        return float(v), np.asarray(g)

    @float64
    def stepped(self, u) -> np.ndarray:
        """T with each field in turn at 1.1 times its value."""
        return np.asarray(self._step(np.asarray(u, dtype=np.float64), self.cands, self.work, self.sys))


# ----------------------------------------------------------------------------------------------
# the analysis


@dataclass
class Sensitivity:
    """A configuration's elasticities (`frame`) with the configuration and the timings."""

    point: Point
    frame: pl.DataFrame
    seconds: dict[str, float] = field(default_factory=dict)


@float64
def analyse(point: Point, fields: Sequence[str] | None = None,
            objective: Callable | None = None, objective_name: str = "objective") -> Sensitivity:
    """Elasticities of `point`'s iteration time to `fields` (None: every continuous field).

    `objective(metrics, system)`, optional: a positive scalar function in JAX of the kernels'
    `Metrics` (arrays of one row) and `System` (the fields as traced scalars), e.g. a cost per run;
    its elasticities go to the column `elasticity_<objective_name>`."""
    import jax
    import jax.numpy as jnp

    fields = check_fields(fields)
    t0 = time.perf_counter()
    model = TimeModel(point)
    u = model.u0()
    idx = np.array([ALL.index(f) for f in fields])
    zero = np.array([getattr(point.system, f) <= 0 for f in fields])
    log_t, grad = model.value_and_grad(u)
    grad = grad[idx]
    t_grad = time.perf_counter() - t0
    stepped = model.stepped(u)[idx]
    t_all = time.perf_counter() - t0
    t = float(np.exp(log_t))
    grad = np.where(zero, 0.0, grad)  # x d lnT/dx at x = 0 is 0
    finite = np.where(zero, 0.0, stepped / t - 1.0)
    capacity, memory = point.system.hbm_capacity, float(point.row["memory"])
    data = {
        "field": fields,
        "label": [CONTINUOUS[f][0] for f in fields],
        "unit": [CONTINUOUS[f][1] for f in fields],
        "value": [float(getattr(point.system, f)) for f in fields],
        "elasticity": grad,
        "time_change_10pct": STEP ** grad - 1.0,
        "time_change_10pct_exact": finite,
        "constraint": [f in CONSTRAINTS for f in fields],
        "headroom": [1.0 - memory / capacity if f == "hbm_capacity" else None for f in fields],
    }
    if objective is not None:
        metrics = model._metrics

        def obj(u_):
            m = metrics(u_, model.cands, model.work, model.sys)
            x = jnp.exp(u_)
            s = model.sys._replace(**{f: x[i] for i, f in enumerate(ALL)})
            return jnp.log(jnp.squeeze(objective(m, s)))

        og = np.asarray(jax.grad(obj)(jnp.asarray(u)))[idx]
        data[f"elasticity_{objective_name}"] = np.where(zero, 0.0, og)
    frame = pl.DataFrame(data)
    if abs(t / point.row["iteration_time"] - 1.0) > 1e-9:  # the same kernels as dse.evaluate
        raise RuntimeError(f"sensitivity: time {t} differs from dse.evaluate's {point.row['iteration_time']}")
    return Sensitivity(point, frame, {"gradient_s": t_grad, "total_s": t_all})


def cost_objective(point: Point, economics: Any = None) -> Callable | None:
    """The cost per run (`dse.results.economics`) as an `objective` of `analyse`: k_T T + k_W W with the
    coefficients `dse.results.economics.cost_coefficients` reads off the cost formulas at this row (the
    prices are held; the hardware fields move T and W through the kernels). None when the row has
    no cost (no price preset for the system, no training-set size)."""
    from dse.results.economics import cost_coefficients

    k = cost_coefficients(point.row, economics, point.system.name)
    if k is None:
        return None
    k_t, k_w = k

    def cost(m, s):
        return k_t * m.iteration_time + k_w * (m.t_compute + m.t_memory + m.t_optimizer)

    return cost


def sensitivity(*, model, system, strategy: str | None = None, profile="default", nvs_size=None,
                global_batch: int = 4096, network="two_tier", n_gpus=4096, fields: Sequence[str] | None = None,
                objective: Callable | None = None, objective_name: str = "objective", economics: Any = None,
                **point) -> pl.DataFrame:
    """Elasticities of the iteration time (and training days, which are proportional to it) to every
    continuous hardware field, at one configuration: `dse.evaluate`'s keywords (n1=, n_p=, ...), or,
    when no degree is given, the search's optimum for the question (`n_gpus`; `strategy` None:
    every strategy). Columns: field, label, unit, value, elasticity (d ln T / d ln x, by jax.jacfwd),
    time_change_10pct ((1.1^e - 1): the power law for +10%), time_change_10pct_exact (the kernels
    re-evaluated at +10%), constraint (the field decides feasibility only), headroom (1 - memory /
    capacity for HBM capacity), elasticity_cost (of the cost per run, prices held: `economics`
    as in `dse.search`, when the system has prices) and elasticity_<objective_name> when
    `objective` is given (`analyse`). Sorted by |elasticity|, largest first."""
    fields = check_fields(fields)
    p = resolve_point(model=model, system=system, strategy=strategy, profile=profile, nvs_size=nvs_size,
                      global_batch=global_batch, network=network, n_gpus=n_gpus, **point)
    if objective is None:
        objective, objective_name = cost_objective(p, economics), "cost"
    frame = analyse(p, fields, objective, objective_name).frame
    return ranked(frame)


def ranked(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows by |elasticity|, largest first (constraints last)."""
    return frame.sort([pl.col("constraint"), pl.col("elasticity").abs()], descending=[False, True],
                      maintain_order=True)


def sentence(row: Mapping[str, Any], which: str = "time_change_10pct_exact") -> str:
    """One row in a planner's words: '+10% HBM bandwidth: -3.1% time'."""
    if row["constraint"]:
        return (f"{row['label']}: no effect on time; it decides only whether the configuration fits "
                f"({100 * row['headroom']:.1f}% headroom: it can fall that far)")
    out = f"+10% {row['label']}: {100 * row[which]:+.2f}% time"
    if row.get("elasticity_cost") is not None:
        out += f", {100 * (STEP ** row['elasticity_cost'] - 1.0):+.2f}% cost per run (1.1^e - 1, prices held)"
    return out
