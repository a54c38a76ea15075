"""Hardware co-design by gradient: continuous GPU fields chosen with optax, the parallel
configuration re-searched as the hardware moves, checked against a dense grid.

Hardware cost. A GPU's price is modelled as linear in its fields,

    price(x) = base_usd + sum_k p_k x_k            (USD per GPU)

with per-unit prices p_k (`PRICES`, overridable: `codesign.prices.FIELD=...`), and the cluster's
hardware cost is n_gpus price(x) (GPUs only; the NIC fabric's cost does not depend on these fields,
`dse.spec.network`). The default prices are set so that the B200 preset (2,500 TFLOP/s, 8,000 GB/s and
192 GB of HBM, 900 GB/s NVLink, a 100 GB/s NIC) costs USD 35,000, the middle of the USD 30,000-40,000
NVIDIA's CEO gave for Blackwell GPUs (CNBC, 19 March 2024, "Nvidia's latest AI chip will cost more
than $30,000, CEO says"); how that total splits over the fields is this model's assumption (about
30% tensor cores, 30% HBM bandwidth, 20% HBM capacity, 10% NVLink, 7% NIC, 3% the rest). Give your
own quotes as `codesign.prices.*` and `codesign.base_usd`.

Objective. `throughput_per_dollar` maximises samples/s per USD of hardware, B / (T(x) cost(x));
`time` minimises the iteration time T(x), i.e. the time to train. Both under bounds on every field
and an optional budget, cost(x) <= budget_usd.

Method. The parameters are theta = (ln x - ln lo) / (ln hi - ln lo), each field's position on a log
scale between its bounds (scale-free steps; a field stays positive; `learning_rate` is a fraction of
every field's range, so any bounds are crossed in the same number of steps). From the system's
values (clipped into the bounds and the budget), each step (Adam, or under a budget plain gradient
descent, its step size falling along a cosine to 5% of `learning_rate`) takes the gradient of
ln T(x) (+ ln cost(x)) by `jax.jacfwd` through the kernels at the current configuration
(`dse.decisions.sensitivity.TimeModel`), a step (optax) in theta, and projects theta back onto the bounds and
the budget (the Euclidean projection in theta, `_project_theta`; under a budget the step is plain
gradient descent, whose fixed points in that metric are the constrained optima, while Adam's
per-field scaling would drift along the budget). HBM capacity changes no time, only which configurations fit: when it is
designed, each search prices every configuration at the capacity it needs (its memory, at least the
lower bound) and takes the best configuration-capacity pair; between searches the configuration's
memory is the capacity's lower bound. Every
`research_every` steps the discrete configuration is searched again at the current hardware
(`dse.search`, the best of the strategies asked), and the gradient then follows the new one: the
objective is the minimum over configurations of smooth functions, and this follows the active one.
The point reported is the best re-searched point of the path (its objective exact, from the search).

Check. The same objective is evaluated at every point of a dense grid of the same fields within the
same bounds (geometric, `grid_points` per field, `dse.search(grid=...)`), over the points within
the budget; the gradient's point must be within 1% of the grid's best or better.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from dse.explore.space import COLUMNS
from dse.runtime import float64
from dse.decisions.sensitivity import ALL, CONTINUOUS, Point, TimeModel, best_row, check_fields
from dse.spec.specs import SpecError, SystemSpec, check_float, check_int

#: USD per unit of each field (per GPU). See the module docstring for where the total comes from.
PRICES: dict[str, float] = {
    "matrix_flops": 4.2,  # per TFLOP/s of BF16 tensor cores: 10,500 at B200's 2,500
    "hbm_bandwidth": 1.3125,  # per GB/s: 10,500 at 8,000 GB/s
    "hbm_capacity": 7000.0 / 192.0,  # per GB: 7,000 at 192 GB
    "nvlink_bandwidth": 3500.0 / 900.0,  # per GB/s: 3,500 at 900 GB/s
    "ib_bandwidth": 24.5,  # per GB/s of NIC: 2,450 at 100 GB/s (one 800 Gb/s NIC)
    "vector_flops": 0.0,
    "matrix_flops_fp8": 0.0,
    "matrix_flops_fp4": 0.0,
    "nic_factor": 0.0,  # a NIC is priced by its bandwidth above
    "host_bandwidth": 0.0,  # the host link comes with the board (BASE_USD)
}
BASE_USD = 1050.0  # the rest of the GPU (board, power delivery): 3% of 35,000

OBJECTIVES = ("throughput_per_dollar", "time")


def price_per_gpu(system: SystemSpec, prices: Mapping[str, float] | None = None, base_usd: float = BASE_USD) -> float:
    """price(x) = base_usd + sum_k p_k x_k, USD per GPU (fields without a price cost nothing)."""
    p = {**PRICES, **(prices or {})}
    return base_usd + sum(v * getattr(system, f) for f, v in p.items())


@dataclass
class CodesignResult:
    """The path (one row per step), the final point and the grid's best."""

    path: pl.DataFrame
    final: dict[str, Any]  # fields, strategy, configuration, iteration_time, cost_usd, score
    grid_best: dict[str, Any] | None
    ratio: float | None  # final score / grid best score (>= 0.99: within 1% or better)
    seconds: dict[str, float] = field(default_factory=dict)


def _score(objective: str, t: float, cost: float, global_batch: int) -> float:
    """What is maximised: samples/s per USD, or 1 / T."""
    return global_batch / t / cost if objective == "throughput_per_dollar" else 1.0 / t


def check_bounds(fields: Sequence[str], bounds: Mapping[str, Any] | None, system: SystemSpec) -> dict[str, tuple]:
    """(lo, hi) of every field: given, or [x/2, 2x] of the system's value; lo < hi, both > 0."""
    bounds = dict(bounds or {})
    extra = sorted(set(bounds) - set(fields))
    if extra:
        raise SpecError(f"codesign.bounds.{extra[0]}: not one of codesign.fields = [{', '.join(fields)}]")
    out = {}
    for f in fields:
        v = getattr(system, f)
        b = bounds.get(f)
        if b is None:
            if v <= 0:
                raise SpecError(f"codesign.bounds.{f}: the system's {f} is 0; give bounds [lo, hi]")
            lo, hi = v / 2.0, v * 2.0
        else:
            if not isinstance(b, (list, tuple)) or len(b) != 2:
                raise SpecError(f"codesign.bounds.{f} = {b!r}: must be [lo, hi]")
            lo = check_float(f"codesign.bounds.{f}[0]", b[0])
            hi = check_float(f"codesign.bounds.{f}[1]", b[1])
            if lo >= hi:  # equal bounds leave nothing to choose: fix the field on the system instead
                what = "inverted" if lo > hi else "empty (lo = hi); set system." + f + " to fix it"
                raise SpecError(f"codesign.bounds.{f} = [{lo:g}, {hi:g}]: {what}; lo must be below hi")
            if f in ("compute_eff", "hbm_eff", "nvlink_eff", "ib_eff") and hi > 1.0:
                raise SpecError(f"codesign.bounds.{f} = [{lo:g}, {hi:g}]: an efficiency is at most 1")
        out[f] = (lo, hi)
    return out


def _project(x, lo, hi, a, budget, scale):
    """Euclidean projection of x (in units of `scale`) onto lo <= x <= hi and a.x <= budget."""
    y, l_, h_ = x / scale, lo / scale, hi / scale
    w = a * scale
    z = np.clip(y, l_, h_)
    if budget is None or w @ z <= budget:
        return z * scale
    lam_lo, lam_hi = 0.0, 1.0
    while w @ np.clip(y - lam_hi * w, l_, h_) > budget:
        lam_hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lam_lo + lam_hi)
        if w @ np.clip(y - mid * w, l_, h_) > budget:
            lam_lo = mid
        else:
            lam_hi = mid
    return np.clip(y - lam_hi * w, l_, h_) * scale


def _project_theta(y, low, high, lo, span, a, budget):
    """Euclidean projection, in theta = (ln x - ln lo) / span, of y onto low <= theta <= high and the
    budget sum_k a_k lo_k exp(span_k theta_k) <= budget (a convex set: a sum of exponentials). The
    KKT conditions separate: theta_k(lam) = clip(root of theta + lam a_k lo_k span_k e^(span_k theta)
    = y_k, low_k, high_k), each root by Newton's method; lam >= 0 by bisection until the budget holds."""
    y = np.asarray(y, dtype=np.float64)

    def cost(t):
        return float(a @ (lo * np.exp(span * t)))

    z = np.clip(y, low, high)
    if budget is None or cost(z) <= budget:
        return z
    k = a * lo * span

    def at(lam):
        # theta + lam k e^(span theta) - y is convex and increasing: Newton from theta = y (where it is
        # >= 0) descends monotonically onto the root
        t = y.copy()
        for _ in range(50):
            e = lam * k * np.exp(span * t)
            step = (t + e - y) / (1.0 + span * e)
            t = t - step
            if np.all(np.abs(step) <= 1e-13 * (1.0 + np.abs(t))):
                break
        return np.clip(t, low, high)

    lam_lo, lam_hi = 0.0, 1e-12
    while cost(at(lam_hi)) > budget:
        lam_hi *= 4.0
        if lam_hi > 1e300:
            return at(lam_hi)
    for _ in range(64):
        mid = 0.5 * (lam_lo + lam_hi)
        lam_lo, lam_hi = (mid, lam_hi) if cost(at(mid)) > budget else (lam_lo, mid)
    return at(lam_hi)


@dataclass
class _Problem:
    """A co-design question, every input checked: the fields and their bounds, the cluster's cost
    as fixed + a.x, the budget above the fixed part, and the strategies that take the question."""

    m: Any
    base: SystemSpec
    prof: Any
    net: Any
    cal: Any
    names: list
    fields: list
    bounds: dict
    lo: np.ndarray
    hi: np.ndarray
    a: np.ndarray
    fixed: float
    budget: float | None
    budget_usd: float | None
    objective: str
    n_gpus: int
    global_batch: int

    @property
    def cap(self) -> int | None:
        return self.fields.index("hbm_capacity") if "hbm_capacity" in self.fields else None

    def spec_at(self, x) -> SystemSpec:
        return self.base.replace(**{f: float(v) for f, v in zip(self.fields, x)})

    def cost_of(self, x) -> float:
        return float(self.fixed + self.a @ x)

    def seen(self, x) -> SystemSpec:
        """The system at x as the kernels see it: calibrated, the network applied."""
        from dse.truth.calibration import apply_calibration

        return self.net.apply(apply_calibration(self.spec_at(x), self.cal))


def _problem(model, system, strategy, profile, nvs_size, global_batch, network, n_gpus, fields, bounds, objective,
             budget_usd, prices, base_usd) -> _Problem:
    """Check every input of `codesign` (one SpecError line for a bad one) and set up its problem."""
    from dse.explore.engine import profile_of
    from dse.explore.search import check_strategies
    from dse.spec.network import load_network
    from dse.spec.specs import load_model, load_system
    from dse.truth.calibration import profile_calibration
    from kernels.params import STRATEGIES

    fields = check_fields(fields, "codesign.fields")
    if objective not in OBJECTIVES:
        raise SpecError(f"codesign.objective = {objective!r}: must be one of {', '.join(OBJECTIVES)}")
    n_gpus = check_int("n_gpus", n_gpus)
    unknown = sorted(set(prices or {}) - set(CONTINUOUS))
    if unknown:
        raise SpecError(f"codesign.prices.{unknown[0]}: not a continuous field; valid: {', '.join(CONTINUOUS)}")
    prices = {**PRICES, **{k: check_float(f"codesign.prices.{k}", v, 0.0, math.inf, low_open=False)
                           for k, v in (prices or {}).items()}}
    base_usd = check_float("codesign.base_usd", base_usd, 0.0, math.inf, low_open=False)
    m = load_model(model)
    prof = profile_of(profile)
    net = load_network(network)
    base = load_system(system, nvs_size=nvs_size)
    cal = profile_calibration(prof)
    clash = [f for f in fields if cal is not None and f in cal.values]
    if clash:
        raise SpecError(f"codesign.fields: {clash[0]!r} is set by the profile's calibration {cal.name!r}; "
                        "add profile.calibration=none to design it")
    names = [strategy] if isinstance(strategy, str) else list(strategy or STRATEGIES)
    # the strategies that can model the question (one that cannot, e.g. SUMMA with latent attention, left out)
    names, _ = check_strategies(names, model=m, system=base, n_gpus=n_gpus, profile=prof,
                                global_batch=global_batch, network=net, top_k=1)
    bnd = check_bounds(fields, bounds, base)
    lo = np.array([bnd[f][0] for f in fields])
    hi = np.array([bnd[f][1] for f in fields])
    a = n_gpus * np.array([prices.get(f, 0.0) for f in fields])  # cluster USD per unit of each field
    # the cluster's cost apart from the fields' terms: cost(x) = fixed + a.x
    fixed = n_gpus * price_per_gpu(base, prices, base_usd) - a @ np.array([getattr(base, f) for f in fields])
    if objective == "throughput_per_dollar" and fixed + a @ lo <= 0:
        raise SpecError("codesign.prices: the cluster costs nothing at the lower bounds, so throughput per dollar "
                        "is unbounded; give the fields (or codesign.base_usd) a price, or codesign.objective=time")
    budget = None
    if budget_usd is not None:
        budget_usd = check_float("codesign.budget_usd", budget_usd)
        cheapest = fixed + a @ lo
        if budget_usd < cheapest:
            raise SpecError(f"codesign.budget_usd = {budget_usd:,.0f}: below the cheapest point in the bounds, "
                            f"USD {cheapest:,.0f} ({n_gpus} GPUs at the lower bounds); raise it or lower the bounds")
        budget = budget_usd - fixed
    return _Problem(m, base, prof, net, cal, names, fields, bnd, lo, hi, a, fixed, budget, budget_usd, objective,
                    n_gpus, global_batch)


def _research(pb: _Problem, x):
    """The best configuration at x, and x (HBM capacity, when designed, chosen with it)."""
    from dse.explore.search import run_search

    cap = pb.cap
    if cap is None:
        row, st = best_row(model=pb.m, system=pb.spec_at(x), strategy=pb.names, profile=pb.prof,
                           global_batch=pb.global_batch, network=pb.net, n_gpus=pb.n_gpus)
        return row, st, x
    # capacity only decides what fits: each configuration is priced at the capacity it needs (its
    # memory, at least the lower bound), and the best configuration-capacity pair is taken
    lo, hi, a = pb.lo, pb.hi, pb.a
    top = x.copy()
    top[cap] = hi[cap]
    found: list = [None, None, -np.inf]
    for st in pb.names:
        def sink(frame, st=st):
            mem = frame["memory"].to_numpy()
            need = np.maximum(mem, lo[cap])
            cost = pb.fixed + a @ x - a[cap] * x[cap] + a[cap] * need
            t = frame["iteration_time"].to_numpy()
            score = pb.global_batch / t / cost if pb.objective == "throughput_per_dollar" else 1.0 / t
            ok = (mem <= hi[cap]) & np.isfinite(score)
            if pb.budget is not None:
                ok &= cost <= pb.budget_usd * (1 + 1e-12)
            if ok.any():
                i = int(np.argmax(np.where(ok, score, -np.inf)))
                if score[i] > found[2]:
                    found[:] = [frame.row(i, named=True), st, score[i]]
        run_search(model=pb.m, system=pb.spec_at(top), strategy=st, n_gpus=pb.n_gpus, profile=pb.prof,
                   global_batch=pb.global_batch, network=pb.net, top_k=1, keep_rows=sink)
    if found[0] is None:
        raise SpecError(f"n_gpus = {pb.n_gpus}: no configuration fits within codesign.bounds.hbm_capacity "
                        f"and the budget")
    x = x.copy()
    x[cap] = max(float(found[0]["memory"]), lo[cap])
    return found[0], found[1], x


CONFIGURATION = COLUMNS  # the configuration's keys, as dse.evaluate takes them


def _descend(pb: _Problem, steps: int, learning_rate: float, research_every: int):
    """The gradient path from the system's own point: (path rows, the best point seen, seconds
    re-searching, seconds in gradients).

    The step shrinks along the path (cosine to 5%), so the last steps settle instead of circling.
    Adam within bounds alone (projecting onto a box commutes with its per-field scaling); projected
    gradient descent under a budget, whose projection must use the metric of the step to stop at
    an optimum (Adam's per-field scaling against a Euclidean projection drifts along the budget).
    The fields move as theta = (ln x - ln lo) / (ln hi - ln lo): 0 to 1 across every field's
    bounds, so one step size crosses any range in the same number of steps."""
    import optax

    fields, lo, hi, a, cap = pb.fields, pb.lo, pb.hi, pb.a, pb.cap
    scale = np.array([max(getattr(pb.base, f), 1e-300) for f in fields])
    x = _project(np.clip(scale, lo, hi), lo, hi, a, pb.budget, scale)
    idx = np.array([ALL.index(f) for f in fields])
    schedule = optax.cosine_decay_schedule(learning_rate, steps, alpha=0.05)
    opt = optax.adam(schedule) if pb.budget is None else optax.sgd(schedule)
    span = np.log(hi) - np.log(lo)

    def to_theta(x):
        return (np.log(x) - np.log(lo)) / span

    theta = to_theta(x)
    state = opt.init(theta)
    rows, best = [], None
    row = strat = None
    t_research = t_grad = 0.0
    for step in range(steps + 1):
        if step % research_every == 0 or step == steps:
            t0 = time.perf_counter()
            row, strat, x = _research(pb, x)
            theta = to_theta(x)
            t_research += time.perf_counter() - t0
            score = _score(pb.objective, row["iteration_time"], pb.cost_of(x), pb.global_batch)
            if best is None or score > best["score"]:
                best = {"step": step, **{f: float(v) for f, v in zip(fields, x)}, "strategy": strat,
                        "configuration": {k: int(row[k]) for k in CONFIGURATION},
                        "iteration_time": row["iteration_time"], "memory": row["memory"],
                        "cost_usd": pb.cost_of(x), "score": score}
        t0 = time.perf_counter()
        tm = TimeModel(Point(row, strat, pb.prof, pb.m, pb.seen(x), pb.net, pb.global_batch, True))
        log_t, g_all = tm.value_and_grad(tm.u0())
        t_grad += time.perf_counter() - t0
        t = math.exp(log_t)
        rows.append({"step": step, **{f: float(v) for f, v in zip(fields, x)}, "strategy": strat,
                     "n1": int(row["n1"]), "n2": int(row["n2"]), "n_p": int(row["n_p"]), "n_d": int(row["n_d"]),
                     "microbatch": int(row["microbatch"]), "iteration_time": t, "cost_usd": pb.cost_of(x),
                     "score": _score(pb.objective, t, pb.cost_of(x), pb.global_batch),
                     "research": step % research_every == 0})
        if step == steps:
            break
        g = g_all[idx]
        if pb.objective == "throughput_per_dollar":
            g = g + a * x / pb.cost_of(x)  # d ln cost / d ln x
        updates, state = opt.update(g * span, state)  # d/d theta = span d/d ln x
        theta = np.asarray(optax.apply_updates(theta, updates))
        lo_k = lo.copy()
        if cap is not None:  # the configuration must still fit
            lo_k[cap] = min(max(lo[cap], float(row["memory"])), hi[cap])
        theta = _project_theta(theta, to_theta(lo_k), np.ones(len(fields)), lo, span, a, pb.budget)
        x = np.clip(np.exp(np.log(lo) + span * theta), lo_k, hi)  # exact at the bounds
    return rows, best, t_research, t_grad


@float64
def codesign(*, model, system, strategy=None, profile="default", nvs_size=None, global_batch: int = 4096,
             network="two_tier", n_gpus: int = 64, fields: Sequence[str] = ("matrix_flops", "hbm_bandwidth"),
             bounds: Mapping[str, Any] | None = None, objective: str = "throughput_per_dollar",
             budget_usd: float | None = None, prices: Mapping[str, float] | None = None,
             base_usd: float = BASE_USD, steps: int = 60, learning_rate: float = 0.05, research_every: int = 10,
             grid_points: int = 6, compare: bool = True) -> CodesignResult:
    """Co-design `fields` of `system` for `model` on `n_gpus` GPUs (module docstring). Returns the
    path, the final point and (`compare`) the best point of the dense grid with the ratio of
    scores."""
    t_start = time.perf_counter()
    steps = check_int("codesign.steps", steps)
    research_every = check_int("codesign.research_every", research_every)
    grid_points = check_int("codesign.grid_points", grid_points, 2)
    learning_rate = check_float("codesign.learning_rate", learning_rate)
    pb = _problem(model, system, strategy, profile, nvs_size, global_batch, network, n_gpus, fields, bounds, objective,
                  budget_usd, prices, base_usd)
    rows, best, t_research, t_grad = _descend(pb, steps, learning_rate, research_every)
    path = pl.DataFrame(rows)
    t_path = time.perf_counter() - t_start
    grid_best = ratio = None
    t_grid = 0.0
    if compare:
        t0 = time.perf_counter()
        grid_best = grid_search(pb.m, pb.base, pb.names, pb.prof, pb.net, pb.global_batch, pb.n_gpus, pb.fields,
                                pb.bounds, grid_points, pb.objective, pb.fixed, pb.a, pb.budget_usd)
        if grid_best is not None:
            ratio = best["score"] / grid_best["score"]
        t_grid = time.perf_counter() - t0
    return CodesignResult(path, best, grid_best, ratio,
                          {"path_s": t_path, "research_s": t_research, "gradient_s": t_grad, "grid_s": t_grid,
                           "total_s": time.perf_counter() - t_start})


@float64
def grid_search(m, base, names, prof, net, global_batch, n_gpus, fields, bnd, points, objective, fixed, a,
                budget_usd) -> dict[str, Any] | None:
    """The best point of the dense geometric grid of `fields` within the bounds and the budget."""
    from dse.explore.search import search

    grid = {f: [float(v) for v in np.geomspace(bnd[f][0], bnd[f][1], points)] for f in fields}
    frames = []
    for s in names:
        top = search(model=m, system=base, strategy=s, n_gpus=n_gpus, profile=prof, global_batch=global_batch,
                     network=net, top_k=1, grid=grid)
        if top.height:
            frames.append(top.with_columns(pl.lit(s).alias("strategy")))
    if not frames:
        return None
    top = pl.concat(frames, how="diagonal_relaxed")
    x = top.select(fields).to_numpy()
    cost = fixed + x @ a
    t = top["iteration_time"].to_numpy()
    score = global_batch / t / cost if objective == "throughput_per_dollar" else 1.0 / t
    ok = np.ones(len(t), dtype=bool) if budget_usd is None else cost <= budget_usd * (1 + 1e-12)
    if not ok.any():
        return None
    i = int(np.argmax(np.where(ok, score, -np.inf)))
    r = top.row(i, named=True)
    return {**{f: r[f] for f in fields}, "strategy": r["strategy"], "iteration_time": r["iteration_time"],
            "cost_usd": float(cost[i]), "score": float(score[i]), "points": int(ok.sum())}
