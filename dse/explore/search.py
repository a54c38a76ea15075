"""Chunked, streaming search over the design space (seed 001 section III-E; spec section 7.4).

The candidate stream of a question (every NVS size and GPU count asked for) is cut into fixed-size
chunks, padded, and evaluated by one compiled kernel against every system of the hardware axis at
once (`dse.explore.stream`; on an accelerator `dse.explore.device_stream`). Reductions run as the
chunks come: the top-k feasible candidates by throughput for each (system, NVS size, GPU count)
group, with a deterministic tie-break (the candidate columns in order, `dse.explore.topk`), and
the count of candidates and of feasible ones per group. Peak memory is bounded by the chunk, not
by the size of the space. Optionally every evaluated row is handed to a sink. This module plans a
search, runs it and returns its frames (`dse.explore.frames`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np
import polars as pl

from dse.explore.bounds import check_size, exact_candidates
from dse.explore.engine import METRIC_COLUMNS, SCORE_COLUMNS, prefetch_table_program, profile_of, space_options, stack_systems
from dse.explore.frames import _column_order, _counts_frame, _empty_rows, _rows_frame, _system_prices, _top_frame
from dse.explore.grid import system_grid
from dse.explore.pieces import domain_note, explain_groups, iter_pieces
from dse.explore.space import Question, parse_gpu_counts
from dse.explore import stream as host  # by module: tests and `dse bench` set its switches and stand-ins
from dse.explore.topk import TopK
from dse.results.economics import ECONOMY_COLUMNS, check_economics, with_cost_columns
from dse.results.pareto import KEEP, ParetoFront, SEARCH_GROUP, ranked_front
from dse.runtime import float64
from dse.spec.network import NetworkSpec, group_equipment, load_network
from dse.spec.checks import check_precision_rates, check_switches
from dse.spec.specs import MAX_TOP_K, ModelSpec, SpecError, SystemSpec, check_choice, check_int, load_model, nvs_sizes
from dse.truth.calibration import apply_calibration, profile_calibration, with_error_band
from kernels.params import Profile

PREFETCH_ROWS = 1 << 16  # top rows of a search whose every-metric program is loaded ahead (`prefetch_table_program`)



@dataclass
class SearchResult:
    """What a search returns: the top rows, per-group counts, optionally every row, and timings."""

    top: pl.DataFrame
    counts: pl.DataFrame
    rows: pl.DataFrame | None = None
    stats: dict[str, Any] = field(default_factory=dict)  # counts and timings; "notes": lines for the user


def _resolve_nvs(nvs_size, systems: list[SystemSpec]) -> list[int]:
    """`dse.spec.specs.nvs_sizes` for a hardware axis: unset, the systems must agree on their NVS size."""
    if nvs_size is None:
        sizes = sorted({s.nvs_size for s in systems})
        if len(sizes) > 1:
            raise SpecError(
                f"system.nvs_size: the systems have different NVS sizes {sizes}; give one (an int or a list)")
    return nvs_sizes(nvs_size, systems[0])


class SearchPlan(NamedTuple):
    """A search's inputs, every one validated (`plan_search`)."""

    model: ModelSpec
    profile: Profile
    network: NetworkSpec
    question: Question
    top_k: int
    systems: list
    sys_table: pl.DataFrame
    calibration: Any
    nvs_sizes: list
    n_gpus: list
    estimate: Any = None  # `dse.explore.bounds.Estimate`: the candidates (an upper bound) and the first configurations

    @property
    def generations(self) -> dict[str, str]:
        """System name -> GPU generation, for the error band of each row (a grid keeps its preset's)."""
        return {s.name: s.generation for s in self.systems}


def plan_search(*, model, system="b200", strategy="tp1d", n_gpus=4096, nvs_size=None, profile="default",
                global_batch=4096, top_k=10, grid=None, network="two_tier", max_candidates=None) -> SearchPlan:
    """Check every input of a search, before any compute (a bad one is a one-line SpecError), and
    resolve the calibrated systems, NVS sizes and GPU counts. `run_search` starts here; a job of
    several strategies calls it for each before it searches any (`dse.interface.app.run_job`)."""
    m = load_model(model)
    prof = profile_of(profile)
    net = load_network(network)
    # the enumeration follows the reference's placement rule only under the reference profile
    q = Question(m, strategy, global_batch, **space_options(prof))
    top_k = check_int("top_k", top_k, 1, MAX_TOP_K)
    systems, sys_table = system_grid(system, grid)
    cal = profile_calibration(prof, tuple(c for c in sys_table.columns if c in SystemSpec.__dataclass_fields__))
    # calibrated efficiencies, then e.g. InfiniBand capped by a shared NIC link
    systems = [net.apply(apply_calibration(s, cal)) for s in systems]
    check_precision_rates("profile.precision", list(q.precision), systems)
    check_switches(prof, systems)
    nvs, ns = _resolve_nvs(nvs_size, systems), parse_gpu_counts(n_gpus)
    est = check_size(q, ns, nvs, len(systems), max_candidates)  # bounds before compute
    return SearchPlan(m, prof, net, q, top_k, systems, sys_table, cal, nvs, ns, est)


def check_strategies(strategies, **question) -> tuple[list[str], list[str]]:
    """`plan_search` for each strategy before any search: (the strategies that take the question,
    a line for each that refuses it, with its reason). A strategy that cannot model what the others
    can (SUMMA and latent attention, say) is left out with that line, never silently; when every
    strategy refuses, the first refusal is raised, a one-line SpecError."""
    ok, notes, first = [], [], None
    for strategy in strategies:
        try:
            plan_search(strategy=strategy, **question)
        except SpecError as exc:
            first = first or exc
            notes.append(f"{strategy}: not searched: {exc}")
            continue
        ok.append(strategy)
    if not ok:
        raise first
    return ok, notes


class _Job:
    """A planned search ready to stream: its groups, program, reductions and row sinks."""

    def __init__(self, plan: "SearchPlan", keep: str, objectives, keep_rows, economics, chunk: int | None):
        m, q, net, sys_table = plan.model, plan.question, plan.network, plan.sys_table
        self.plan, self.economics = plan, economics
        self.n_sys = len(plan.systems)
        self.groups = [(nvs, n) for nvs in plan.nvs_sizes for n in plan.n_gpus]
        self.gid = {g: i for i, g in enumerate(self.groups)}
        self.workload = m.workload(q.global_batch)
        self.sys_params = stack_systems([s.params() for s in plan.systems])
        # the top rows' every-metric program, loaded from disk while the stream runs (a small search
        # would wait for it at the end); its bucket holds every row the top-k can keep
        most = plan.estimate.groups * self.n_sys * plan.top_k
        self.bucket = (prefetch_table_program(q.strategy, plan.profile, self.workload, most, net.name, m.arch)
                       if most <= PREFETCH_ROWS else None)
        row_columns = [c for c in _column_order(sys_table) + list(ECONOMY_COLUMNS)
                       if c not in ("model", "strategy", "network", "system")]
        self.front = ParetoFront(objectives, SEARCH_GROUP, columns=row_columns) if keep == "pareto" else None
        self.full_rows = bool(keep_rows) or self.front is not None
        self.packed = host.candidate_form(q, plan.n_gpus)
        self.topk = TopK(plan.top_k, self.n_sys * len(self.groups), columns=host.unpack_rows if self.packed else None)
        self.n_cand = np.zeros(len(self.groups), dtype=np.int64)
        self.n_feas = np.zeros((self.n_sys, len(self.groups)), dtype=np.int64)
        self.kept: list[pl.DataFrame] = []
        self.sinks = [keep_rows if callable(keep_rows) else self.kept.append] if keep_rows else []
        self.sinks += [self.front.add] if self.front is not None else []
        self.prices = _system_prices(sys_table, economics)  # each system's price and power group, by system id
        self.equipment = group_equipment(net, self.groups, q.profile)  # the network columns of each group, once
        self.chunk = chunk

    def group_of(self, n: int, nvs: int) -> int:
        return self.gid[(nvs, n)]

    def pieces(self, max_rows: int, compact: bool = False):
        plan = self.plan
        return iter_pieces(plan.question, plan.n_gpus, plan.nvs_sizes, max_rows=max_rows, known=plan.estimate.enumerated,
                           packed=self.packed or compact, compact=compact)

    def rows_frame(self, out, table) -> None:
        """Every row of an evaluated chunk, with its error band, to the row sinks."""
        plan = self.plan
        rows = with_error_band(_rows_frame(out, table, self.groups, plan.sys_table, plan.model, plan.question.strategy,
                                           self.equipment, plan.network.name, self.prices), plan.calibration,
                               plan.generations, plan.model.arch.moe)
        rows = rows.select(_column_order(plan.sys_table) + list(ECONOMY_COLUMNS))
        for f in self.sinks:
            f(rows)


def _stream_on_host(job: _Job, bar) -> dict[str, Any]:
    """The chunk program over the host's stream (`dse.explore.stream.host_stream`): the stream's timings."""
    plan = job.plan
    q, m = plan.question, plan.model
    outputs = (*METRIC_COLUMNS, *SCORE_COLUMNS) if job.full_rows else SCORE_COLUMNS
    # one program per search (`search_kernel`), called over a chunk of the stream (`chunk` rows,
    # `default_chunk` unless given) whose calls are reduced together
    kern = host.search_kernel(q.strategy, plan.profile, job.n_sys, tuple(outputs), plan.network.name, m.arch, job.packed,
                         plan.estimate.candidates)
    chunk = job.chunk if job.chunk is not None else host.default_chunk(job.n_sys, plan.estimate.candidates)
    times = host.host_stream(job.pieces, job.group_of, kern, chunk,
                        lambda size: plan.estimate.candidates // job.n_sys > size,  # (the estimate counts every system's rows)
                        job.workload, job.sys_params, job.topk, job.n_cand, job.n_feas,
                        job.rows_frame if job.full_rows else None,
                        None if bar is None else (lambda take: bar.update(take * job.n_sys)))
    return {"compile_s": times.compile_s, "eval_s": times.eval_s, "t_launch": times.t_launch}


def _stream_on_device(job: _Job, bar) -> dict[str, Any]:
    """Candidates expanded and reduced in the program (`dse.explore.device_stream`): its timings and statistics."""
    from dse.explore import device_stream as ds

    plan = job.plan
    q, m = plan.question, plan.model
    caps = ds.capacities(host.stream_sizes(evaluations=plan.estimate.candidates)[1], job.n_sys, plan.top_k,
                         plan.estimate.candidates)
    prog = ds.device_program(q.strategy, plan.profile, plan.network.name, m.arch, job.n_sys, caps)
    tc = time.perf_counter()
    prog.compiled(job.workload, job.sys_params)
    compile_s = time.perf_counter() - tc
    t_launch = time.perf_counter()
    # compact pieces hold configurations, not rows: a call takes what fits of one and leaves the rest
    # for the next, so pieces as large as the host path's chunks keep the per-piece costs few
    pieces = job.pieces(max(caps.rows, host.LARGE_CHUNK_ELEMENTS), compact=True)
    stats = ds.run_stream(pieces, job.group_of, prog, job.workload, job.sys_params, job.topk, job.n_cand, job.n_feas,
                          host._reduce, None if bar is None else (lambda rows: bar.update(rows * job.n_sys)))
    return {"compile_s": compile_s, "eval_s": stats["wait_s"], "t_launch": t_launch, "device_stream": stats}


def _result(job: _Job, streamed: dict[str, Any], keep_rows, t_start: float, t_stream: float) -> "SearchResult":
    """The search's frames (top rows, counts, every row when kept) and its statistics."""
    plan = job.plan
    q, m, sys_table = plan.question, plan.model, plan.sys_table
    top = _top_frame(job.topk, q, plan.profile, job.workload, job.sys_params, sys_table, job.groups, m,
                     plan.network.name, job.equipment, job.bucket, job.prices, job.economics)
    top = with_error_band(top, plan.calibration, plan.generations, m.arch.moe).select(_column_order(sys_table, rank=True) + list(ECONOMY_COLUMNS))
    if job.front is not None:
        top = ranked_front(job.front, top.clear())
    counts = _counts_frame(job.n_cand, job.n_feas, job.groups, sys_table)
    rows = None
    if keep_rows is True:
        rows = pl.concat(job.kept) if job.kept else with_cost_columns(_empty_rows(sys_table, m), job.economics)
    notes = [note for nvs in plan.nvs_sizes for n in plan.n_gpus if (note := domain_note(n, nvs, q.profile))]
    empty = explain_groups(q, [grp for grp, k in zip(job.groups, job.n_cand) if k == 0], plan.estimate.configurations)
    notes += [f"no candidate: {why}" for why in empty.values()]
    stats = {
        "notes": notes,
        "empty": empty,  # (nvs, n) of each group without a candidate: why
        "candidates": float(job.n_cand.sum()),
        "evaluations": float(job.n_cand.sum() * job.n_sys),
        "compile_s": streamed["compile_s"],
        "eval_s": streamed["eval_s"],  # time the search waited for evaluated chunks and joined their outputs
    }
    if "device_stream" in streamed:
        stats["device_stream"] = streamed["device_stream"]
    # where the wall time went: before the first chunk is launched (planning, loading the program,
    # the first chunk's enumeration), the stream (evaluation, with the reductions and the next
    # chunks' enumeration beside it), and after it (the top rows' metrics, the frames); they sum
    # to wall_s
    t_launch = t_stream if streamed["t_launch"] is None else streamed["t_launch"]
    t_end = time.perf_counter()
    stats.update(head_s=t_launch - t_start, stream_s=t_stream - t_launch, tail_s=t_end - t_stream, wall_s=t_end - t_start)
    return SearchResult(top=top, counts=counts, rows=rows, stats=stats)


@float64
def run_search(
    *,
    model: str | Mapping | ModelSpec,
    system: str | Mapping | SystemSpec | Sequence = "b200",
    strategy: str = "tp1d",
    n_gpus: Any = 4096,
    nvs_size: Any = None,
    profile: str | Profile = "default",
    global_batch: int = 4096,
    top_k: int = 10,
    grid: Mapping[str, Any] | None = None,
    chunk: int | None = None,
    keep_rows: bool | Callable[[pl.DataFrame], None] = False,
    progress: bool = False,
    network: str | Mapping | NetworkSpec = "two_tier",
    keep: str = "top",
    objectives: Sequence[str] | str | None = None,
    economics: Any = None,
    max_candidates: int | None = None,
) -> SearchResult:
    """Search one strategy over GPU counts, NVS sizes and a hardware axis; see `search`.

    `keep_rows`: False (only the reductions), True (return every row in `SearchResult.rows`), or a
    callable that receives each chunk's rows as a DataFrame (e.g. a Parquet writer).
    `keep`: "top" (the top_k rows per group) or "pareto" (each group's Pareto front of
    `objectives`, `dse.pareto`, merged chunk by chunk). `economics`: the price and power group of
    the cost columns (`dse.results.economics`; None: the system's preset).
    `max_candidates`: the size limit (`dse.explore.bounds`; None: 1e9), checked before any compute.
    """
    t_start = time.perf_counter()
    plan = plan_search(model=model, system=system, strategy=strategy, n_gpus=n_gpus, nvs_size=nvs_size,
                       profile=profile, global_batch=global_batch, top_k=top_k, grid=grid, network=network,
                       max_candidates=max_candidates)
    check_choice("search.keep", keep, KEEP)
    check_economics(economics)
    job = _Job(plan, keep, objectives, keep_rows, economics, chunk)
    bar = None
    if progress:
        from tqdm import tqdm

        total = exact_candidates(plan.question, plan.n_gpus, plan.nvs_sizes)  # counted by the placement masks
        bar = tqdm(total=total * job.n_sys, unit="cand", unit_scale=True, desc=f"{plan.model.name} {strategy}")
    on_device = host.device_stream_on(job.packed, job.full_rows)
    streamed = _stream_on_device(job, bar) if on_device else _stream_on_host(job, bar)
    if bar is not None:
        bar.close()
    return _result(job, streamed, keep_rows, t_start, time.perf_counter())


def evaluations_line(stats: Mapping[str, Any]) -> str:
    """'N evaluations in T s (R M/s)': a search's size, wall time (compilation included) and rate."""
    ev, wall = int(stats["evaluations"]), stats["wall_s"]
    return f"{ev:,} evaluations in {wall:.2f} s ({ev / max(wall, 1e-9) / 1e6:.2f} M/s)"


def search(  # run_search's question: the public API's frame-returning form of it
    *,
    model: str | Mapping | ModelSpec,
    system: str | Mapping | SystemSpec | Sequence = "b200",
    nvs_size: Any = None,
    strategy: str = "tp1d",
    n_gpus: Any = 4096,
    profile: str = "default",
    global_batch: int = 4096,
    top_k: int = 10,
    grid: Mapping[str, Sequence[Any]] | None = None,
    progress: bool = False,
    network: str | Mapping | NetworkSpec = "two_tier",
    keep: str = "top",
    objectives: Sequence[str] | str | None = None,
    economics: Any = None,
    max_candidates: int | None = None,
) -> pl.DataFrame:
    """The fastest feasible configurations, best first.

    For each system (or each point of `grid`, a mapping of system fields to lists of values), each
    NVS size (`nvs_size`: an int or a list; left out, the system's own, its preset's unless the spec
    sets it: the NVS rule of every entry point, `dse.interface.overrides`) and each GPU count (`n_gpus`: an int, a list, 'pow2:4:16384' or 'range:LOW:HIGH[:STEP]'),
    the `top_k` configurations by throughput. Columns: model, strategy, system (and the grid fields),
    nvs_size, n_gpus, rank, the candidate columns (n1, n2, n_p, n_d, microbatch, nvs1, nvs2, nvs_p,
    nvs_d, n_b), iteration_time, throughput, memory, feasible, the time and memory breakdown,
    training_days, the network with its equipment, cost and power (`dse.spec.network`), and the run's
    cost, energy and power (`dse.results.economics`: compute_utilisation, power_kw, energy_per_run_mwh,
    cluster_cost_usd, cost_per_run_usd; `economics=` a preset of conf/economics, a mapping of
    fields over the system's preset, or a `dse.results.economics.EconomicsSpec`). `keep="pareto"` keeps
    each group's Pareto front of `objectives` (default iteration_time and memory; `max:col`
    maximises) instead of the top_k. Empty (same columns) when nothing fits.
    """
    res = run_search(model=model, system=system, strategy=strategy, n_gpus=n_gpus, nvs_size=nvs_size,
                     profile=profile, global_batch=global_batch, top_k=top_k, grid=grid, progress=progress,
                     network=network, keep=keep, objectives=objectives, economics=economics,
                     max_candidates=max_candidates)
    return res.top.drop("system_id")
