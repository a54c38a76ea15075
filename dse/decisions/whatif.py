"""Failure what-ifs and goodput: the best plan under a degraded cluster, the best re-plan, and the
expected time to train with failures.

A training job runs in lockstep: tensor-parallel collectives synchronize every layer, each pipeline
stage waits for its neighbours, and the data-parallel replicas reduce their gradients together. So
one degraded GPU, node or link paces the whole job. Each scenario is therefore modelled as the
system every GPU of the job effectively sees, evaluated by the same kernels (`dse.evaluate`):

gpu_lost
    One GPU of an HB (NVLink) domain fails and the job keeps its plan: the K GPUs the job places in
    that domain (K = nvs1 nvs2 nvs_p nvs_d) become K - 1, each taking K / (K - 1) of the lost GPU's
    shards, work and traffic (a fluid approximation: real shards are whole heads and layers, so the
    survivors' share is at least this). With s = K / (K - 1), the survivors' FLOP rates, HBM,
    NVLink and NIC bandwidths are divided by s and their model state and activations multiplied by
    s (the framework reserve is not). In lockstep that domain paces the job. K = 1 (a domain holding
    one GPU of the job) cannot continue: its plan is infeasible.
rail_lost
    One rail (the NIC switch plane of one GPU index) fails; that GPU's NIC traffic is forwarded over
    NVLink to a GPU of another rail, whose NIC then carries two GPUs' traffic: the slowest NIC of
    every collective has half its bandwidth, and the relay adds an NVLink hop (its latency) to the
    NIC latency. NVLink's share of the relayed bytes is ignored (at most the NIC's rate, a ninth of
    NVLink on B200). A job inside one domain is unaffected.
slow_node
    One node (its GPUs: one DP replica's / PP stage's share) computes `straggler` = s >= 1 times
    slower (thermal throttling, a bad DIMM): FLOP rates and HBM bandwidth divided by s, kernel
    latency times s. In lockstep every stage is paced by it: the whole job is evaluated at that
    speed (communication as before, its overlap with compute recomputed). Exact for the steady
    state; for the pipeline's fill and drain, which pass through the fast stages too, it is an upper
    bound. A configuration without communication takes exactly s times as long.
degraded_link
    A link of one GPU (`link`: nvlink or nic) runs at `link_factor` of its bandwidth; a ring or
    hierarchical collective runs at its slowest link, so that bandwidth is scaled for the job. Only
    communication terms change.

The re-plan is the best configuration under the scenario (every candidate evaluated under it;
under gpu_lost each with its own K), and for gpu_lost also the best plan on the GPUs left when the
whole domain is taken out of the job.

Goodput (Young 1974, "A first order approximation to the optimum checkpoint interval", CACM 17(9);
Daly 2006, FGCS 22(3)): with a failure rate lambda per GPU-hour on n GPUs, the job's mean time
between failures is M = 1 / (lambda n) hours. Checkpointing every tau seconds at a cost of C
seconds and restarting in R seconds after each failure (losing on average tau / 2 of work), the
useful fraction of wall time is, to first order,

    goodput(tau) = 1 - C / tau - (R + tau / 2) / M,

maximal at Young's interval tau* = sqrt(2 C M), where goodput = 1 - sqrt(2 C / M) - R / M. The
expected time to train with failures is the failure-free time over the goodput (infinite when the
goodput is <= 0: the job cannot make progress).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Any, NamedTuple

import polars as pl

from dse.interface.reproduce import plan  # every key of a plan named, as every answer names it
from dse.runtime import float64
from dse.spec.specs import MAX_GPUS, SpecError, SystemSpec, check_float, check_int

SCENARIOS = {
    "none": "the cluster as it is",
    "gpu_lost": "one GPU of an HB domain lost; that domain's share of the job on K - 1 GPUs",
    "rail_lost": "one rail lost; its NIC traffic forwarded through the HB domain to another rail",
    "slow_node": "one node computes `straggler` times slower",
    "degraded_link": "one GPU's NVLink or NIC at `link_factor` of its bandwidth",
}
LINKS = ("nvlink", "nic")

#: Unexpected job interruptions of Llama 3 405B's pre-training: 419 in a 54-day snapshot on
#: 16,384 H100 GPUs (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, section
#: 3.3.4 and Table 5): 419 / (54 x 24 x 16384) per GPU-hour.
LLAMA3_FAILURES_PER_GPU_HOUR = 419 / (54 * 24 * 16384)


#: A GPU's own rates, which a lost GPU's share or a straggler divides: its FLOP rates at every
#: precision and its HBM bandwidth.
RATES = ("matrix_flops", "vector_flops", "matrix_flops_fp8", "matrix_flops_fp4", "hbm_bandwidth")


def _divided(s: SystemSpec, fields: tuple[str, ...], f: float) -> dict[str, float]:
    """`fields` of `s` divided by f."""
    return {k: getattr(s, k) / f for k in fields}


@dataclass(frozen=True)
class Scenario:
    """A what-if: the scenario's name and its parameters (validated)."""

    name: str = "none"
    straggler: float = 1.2
    link: str = "nic"
    link_factor: float = 0.5

    def __post_init__(self):
        if self.name not in SCENARIOS:
            raise SpecError(f"whatif.scenario = {self.name!r}: not a scenario; valid: {', '.join(SCENARIOS)}")
        check_float("whatif.straggler", self.straggler, 1.0, math.inf, low_open=False)
        if self.link not in LINKS:
            raise SpecError(f"whatif.link = {self.link!r}: must be one of {', '.join(LINKS)}")
        check_float("whatif.link_factor", self.link_factor, 0.0, 1.0)

    def describe(self) -> str:
        if self.name == "slow_node":
            return f"slow_node: one node {self.straggler:g}x slower"
        if self.name == "degraded_link":
            return f"degraded_link: one GPU's {self.link} at {self.link_factor:g} of its bandwidth"
        return f"{self.name}: {SCENARIOS[self.name]}"

    def domain_dependent(self) -> bool:
        return self.name == "gpu_lost"

    def apply(self, system: SystemSpec, domain_gpus: int = 1) -> tuple[SystemSpec | None, float]:
        """The system every GPU of the job effectively sees under the scenario, and the factor on
        its model state and activations; (None, inf) when the plan cannot continue. `domain_gpus`:
        the job's GPUs in one HB domain (nvs1 nvs2 nvs_p nvs_d), for gpu_lost."""
        s = system
        if self.name == "gpu_lost":
            k = int(domain_gpus)
            if k <= 1:
                return None, math.inf
            f = k / (k - 1)
            return s.replace(**_divided(s, RATES + ("nvlink_bandwidth", "ib_bandwidth"), f)), f
        if self.name == "rail_lost":
            return s.replace(ib_bandwidth=s.ib_bandwidth / 2.0, ib_latency=s.ib_latency + s.nvlink_latency), 1.0
        if self.name == "slow_node":
            f = self.straggler
            return s.replace(**_divided(s, RATES, f), flop_latency=s.flop_latency * f), 1.0
        if self.name == "degraded_link":
            key = "nvlink_bandwidth" if self.link == "nvlink" else "ib_bandwidth"
            return s.replace(**{key: getattr(s, key) * self.link_factor}), 1.0
        return s, 1.0


# ----------------------------------------------------------------------------------------------
# goodput


class Goodput(NamedTuple):
    """Expected useful fraction of a run's wall time under failures (module docstring)."""

    mtbf_s: float  # the job's mean time between failures, s
    interval_s: float  # checkpoint interval tau, s
    goodput: float  # useful fraction of wall time (0 when the job cannot progress)
    failures_per_day: float


def young_daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's optimal checkpoint interval, tau* = sqrt(2 C M) (s)."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def goodput(failures_per_gpu_hour: float, n_gpus: int, restart_s: float, checkpoint_s: float,
            checkpoint_interval_s: float | None = None) -> Goodput:
    """The first-order goodput 1 - C / tau - (R + tau / 2) / M of a job of `n_gpus` GPUs, at
    `checkpoint_interval_s` (None: Young's optimum). No failures (rate 0): 1 - C / tau, and no checkpoint
    needed (goodput 1) when no interval is given."""
    rate = check_float("whatif.failures_per_gpu_hour", failures_per_gpu_hour, 0.0, math.inf, low_open=False)
    n_gpus = check_int("n_gpus", n_gpus, 1, MAX_GPUS)
    c = check_float("whatif.checkpoint_s", checkpoint_s, 0.0, math.inf, low_open=False)
    r = check_float("whatif.restart_s", restart_s, 0.0, math.inf, low_open=False)
    if rate == 0.0:
        tau = (math.inf if checkpoint_interval_s is None
               else check_float("whatif.checkpoint_interval_s", checkpoint_interval_s))
        return Goodput(math.inf, tau, 1.0 - c / tau, 0.0)
    mtbf = 3600.0 / (rate * n_gpus)
    tau = (young_daly_interval(c, mtbf) if checkpoint_interval_s is None
           else check_float("whatif.checkpoint_interval_s", checkpoint_interval_s))
    if tau <= 0.0:  # C = 0: checkpoints are free; take them continuously
        return Goodput(mtbf, 0.0, max(1.0 - r / mtbf, 0.0), 86400.0 / mtbf)
    g = 1.0 - c / tau - (r + tau / 2.0) / mtbf
    return Goodput(mtbf, tau, max(g, 0.0), 86400.0 / mtbf)


def expected_training_days(training_days: float, good: Goodput | float) -> float:
    """The failure-free training days over the goodput (inf when it is 0): days >= 0 (inf: a run
    that cannot finish), goodput in [0, 1]."""
    if isinstance(training_days, bool) or not isinstance(training_days, Real) or not training_days >= 0:
        raise SpecError(f"training_days = {training_days}: must be a number of days >= 0 (inf: never done)")
    g = check_float("goodput", good.goodput if isinstance(good, Goodput) else good, 0.0, 1.0, low_open=False)
    return training_days / g if g > 0 else math.inf


# ----------------------------------------------------------------------------------------------
# plans under a scenario

SCENARIO_COLUMNS = ("iteration_time", "memory", "feasible", "throughput", "training_days")


def domain_gpus(row) -> int:
    return int(row["nvs1"]) * int(row["nvs2"]) * int(row["nvs_p"]) * int(row["nvs_d"])


@float64
def under(row: dict, scenario: Scenario, *, model, system: SystemSpec, strategy: str, profile, global_batch: int,
          network) -> dict[str, Any]:
    """One configuration (a result row) evaluated under the scenario: iteration time, memory (the
    model state and activations scaled as the scenario says), feasibility, throughput, days."""
    from dse.api import evaluate
    from dse.decisions.sensitivity import POINT_KEYS

    s, factor = scenario.apply(system, domain_gpus(row))
    if s is None:
        return {"iteration_time": math.inf, "memory": math.inf, "feasible": False, "throughput": 0.0,
                "training_days": math.inf}
    r = evaluate(model=model, system=s, strategy=strategy, profile=profile, global_batch=global_batch,
                 network=network, **{k: row[k] for k in POINT_KEYS})
    memory = r["mem_reserved"] + factor * (r["memory"] - r["mem_reserved"])
    return {"iteration_time": r["iteration_time"], "memory": memory, "feasible": memory <= s.hbm_capacity,
            "throughput": r["throughput"], "training_days": r.get("training_days")}


BLOCK = 4096  # rows per evaluate_many call: one compiled program (a power-of-two bucket of dse.explore.engine.run_metrics)


@float64
def best_under(scenario: Scenario, *, model, system: SystemSpec, strategies, profile, global_batch: int,
               network, n_gpus: int) -> tuple[dict | None, str | None]:
    """The best re-plan under the scenario: the fastest configuration that fits, every candidate
    evaluated under it (gpu_lost: each with its own domain share K; plans with K = 1 cannot
    continue). Returns (row, strategy) or (None, None) when nothing fits."""
    from dse.api import evaluate_many
    from dse.explore.search import run_search, search
    from dse.explore.space import COLUMNS

    best, where = None, None
    for strategy in strategies:
        if not scenario.domain_dependent():
            s, _ = scenario.apply(system)
            top = search(model=model, system=s, strategy=strategy, n_gpus=n_gpus, profile=profile,
                         global_batch=global_batch, network=network, top_k=1)
            if top.height and (best is None or top["iteration_time"][0] < best["iteration_time"]):
                best, where = top.row(0, named=True), strategy
            continue
        kept: list[pl.DataFrame] = []
        run_search(model=model, system=system, strategy=strategy, n_gpus=n_gpus, profile=profile,
                   global_batch=global_batch, network=network, top_k=1,
                   keep_rows=lambda f: kept.append(f.select(COLUMNS)))
        if not kept:
            continue
        table = pl.concat(kept).with_columns(
            (pl.col("nvs1") * pl.col("nvs2") * pl.col("nvs_p") * pl.col("nvs_d")).alias("_k"))
        for k in sorted(table["_k"].unique().to_list()):
            s, factor = scenario.apply(system, k)
            if s is None:
                continue
            sub = table.filter(pl.col("_k") == k).drop("_k")
            for start in range(0, sub.height, BLOCK):
                r = evaluate_many(sub.slice(start, BLOCK), model=model, system=s, strategy=strategy, profile=profile,
                                  global_batch=global_batch, network=network, validate=False)
                r = r.with_columns((pl.col("mem_reserved") + factor * (pl.col("memory") - pl.col("mem_reserved")))
                                   .alias("memory"))
                r = r.filter(pl.col("memory") <= s.hbm_capacity)
                if r.height == 0:
                    continue
                row = r.sort("iteration_time").row(0, named=True)
                if best is None or row["iteration_time"] < best["iteration_time"]:
                    best, where = row, strategy
    return best, where


@float64
def best_without_domain(*, model, system: SystemSpec, strategies, profile, global_batch: int, network,
                        n_gpus: int) -> tuple[dict | None, str | None, int]:
    """gpu_lost's other re-plan: the best plan on the GPUs left when the failed GPU's whole HB
    domain is taken out of the job (n_gpus - nvs_size); (None, None, n) when nothing fits."""
    from dse.explore.search import search

    n = n_gpus - system.nvs_size
    best, where = None, None
    if n < 1:
        return None, None, n
    for strategy in strategies:
        top = search(model=model, system=system, strategy=strategy, n_gpus=n, profile=profile,
                     global_batch=global_batch, network=network, top_k=1)
        if top.height and (best is None or top["iteration_time"][0] < best["iteration_time"]):
            best, where = top.row(0, named=True), strategy
    return best, where, n


@float64
def whatif(scenario: Scenario | str, *, model, system, strategy=None, profile="default", nvs_size=None,
           global_batch: int = 4096, network="two_tier", n_gpus: int = 4096, failures_per_gpu_hour: float =
           LLAMA3_FAILURES_PER_GPU_HOUR, restart_s: float = 600.0, checkpoint_s: float = 60.0,
           checkpoint_interval_s: float | None = None, **point) -> pl.DataFrame:
    """The plan (`dse.evaluate`'s keywords, or the search's optimum over `strategy`, None: all) healthy
    and under the scenario, the best re-plan under it (gpu_lost: also the best plan without the failed
    domain), side by side: columns case, plan, strategy, iteration_time, change (vs healthy),
    feasible, training_days, goodput and training_days_failures (training days over the goodput of
    `goodput`, for the plan's GPU count)."""
    from dse.spec.network import load_network
    from dse.decisions.sensitivity import resolve_point
    from dse.spec.specs import load_model, load_system
    from kernels.params import STRATEGIES

    sc = Scenario(scenario) if isinstance(scenario, str) else scenario
    goodput(failures_per_gpu_hour, 1, restart_s, checkpoint_s, checkpoint_interval_s)  # validated before compute
    m, s, net = load_model(model), load_system(system, nvs_size=nvs_size), load_network(network)
    p = resolve_point(model=m, system=s, strategy=strategy, profile=profile, global_batch=global_batch,
                      network=net, n_gpus=n_gpus, **point)
    n = int(p.row["n_gpus"])
    good = goodput(failures_per_gpu_hour, n, restart_s, checkpoint_s, checkpoint_interval_s)
    kw = dict(model=m, system=s, profile=profile, global_batch=global_batch, network=net)
    strategies = [p.strategy] if not p.searched else ([strategy] if isinstance(strategy, str)
                                                      else list(strategy or STRATEGIES))
    healthy = p.row["iteration_time"]

    def case(name, row, strat, t, feasible, days):
        return {"case": name, "plan": plan(row, strat) if row is not None else "nothing fits", "strategy": strat,
                "n_gpus": int(row["n_gpus"]) if row is not None else None,
                "iteration_time": t, "change": t / healthy - 1.0, "feasible": bool(feasible),
                "training_days": days, "goodput": good.goodput,
                "training_days_failures": None if days is None else expected_training_days(days, good)}

    now = under(p.row, sc, strategy=p.strategy, **kw)
    rows = [case("healthy, the plan", p.row, p.strategy, healthy, p.row["feasible"], p.row.get("training_days")),
            case("scenario, the same plan", p.row, p.strategy, now["iteration_time"], now["feasible"],
                 now["training_days"])]
    if sc.name != "none":
        re_row, re_strategy = best_under(sc, strategies=strategies, n_gpus=n, **kw)
        rows.append(case("scenario, best re-plan", re_row, re_strategy,
                         re_row["iteration_time"] if re_row else math.inf, re_row is not None,
                         re_row.get("training_days") if re_row else math.inf))
        if sc.domain_dependent():
            d_row, d_strategy, left = best_without_domain(strategies=strategies, n_gpus=n, **kw)
            rows.append(case(f"re-plan on {left} GPUs (domain out)", d_row, d_strategy,
                             d_row["iteration_time"] if d_row else math.inf, d_row is not None,
                             d_row.get("training_days") if d_row else math.inf))
    return pl.DataFrame(rows, schema_overrides={"n_gpus": pl.Int64, "training_days": pl.Float64, "training_days_failures": pl.Float64})
