"""Chunked, streaming search over the design space (seed 001 section III-E; spec section 7.4).

The candidate stream of a question (every NVS size and GPU count asked for) is cut into fixed-size
chunks, padded, and evaluated by one compiled kernel against every system of the hardware axis at
once. Reductions run as the chunks come: the top-k feasible candidates by throughput for each
(system, NVS size, GPU count) group, with a deterministic tie-break (the candidate columns in
order), and the count of candidates and of feasible ones per group. Peak memory is bounded by the
chunk, not by the size of the space. Optionally every evaluated row is handed to a sink.
"""

from __future__ import annotations

import itertools
import math
import os
import time
import threading
from concurrent.futures import ThreadPoolExecutor, wait as futures_wait
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import numpy as np
import polars as pl

from dse.explore.engine import (
    BLOCK,
    BLOCK_FEASIBLE,
    BLOCK_MAX,
    METRIC_COLUMNS,
    SCORE,
    SCORE_COLUMNS,
    aligned_empty,
    chunk_kernel,
    prefetch_table_program,
    profile_of,
    run_metrics,
    space_options,
    stack_systems,
    table_rows,
)
from dse.spec.network import COST_COLUMNS, NetworkSpec, group_equipment, load_network
from dse.explore.bounds import check_size, exact_candidates
from dse.explore.ranking import lexsort_keys
from dse.runtime import float64
from dse.explore.space import (COLUMNS, Piece, Question, domain_note, explain_groups, in_form, iter_pieces, packs,
                       parse_gpu_counts, unpack)
from dse.spec.specs import MAX_TOP_K, ModelSpec, SpecError, SystemSpec, check_choice, check_int, load_model, load_system, nvs_sizes
from dse.truth.calibration import BAND_COLUMNS, apply_calibration, profile_calibration, with_error_band
from dse.results.economics import ECONOMY_COLUMNS, check_economics, cost_columns, resolve_economics, with_cost_columns
from dse.results.pareto import KEEP, ParetoFront, SEARCH_GROUP, ranked_front
from kernels.collectives import TWO_TIER
from kernels.params import Candidates, Profile, System
from kernels.units import training_days

CHUNK_ELEMENTS = 1 << 18  # candidates x systems per chunk of the stream (reduced together), on CPU
CALL_ELEMENTS = 1 << 15  # candidates x systems per kernel call, on CPU
#: Evaluations, as the size check bounds them from above (`dse.explore.bounds.Estimate.candidates`, 1.4-3.6x
#: the exact count on `dse bench`'s searches), from which a search on CPU streams in the sizes below
LARGE_SEARCH = 1 << 21
LARGE_CHUNK_ELEMENTS = 1 << 19  # per chunk of a large search, on CPU
LARGE_CALL_ELEMENTS = 1 << 17  # per kernel call of a large search, on CPU
ACCELERATOR_ELEMENTS = 1 << 20  # candidates x systems per chunk and per call of a large search on an accelerator (`stream_sizes`)
ACCELERATOR_SMALL_CALL = 1 << 16  # per call of a small search on an accelerator (`stream_sizes`)
#: Stream a search's candidates as packed words where they fit (`candidate_form`); `dse bench
#: --columns` turns it off, to measure the sixteen-column form against it.
PACK_CANDIDATES = True
#: (chunk, call) elements of every search's stream in place of the platform's (`stream_sizes`);
#: None: the platform's. `dse bench --stream` sets it for its measurement, to compare sizes.
STREAM_SIZES: tuple[int, int] | None = None
PREFETCH_ROWS = 1 << 16  # top rows of a search whose every-metric program is loaded ahead (`prefetch_table_program`)
MAX_GRID_POINTS = 100_000  # hardware points of one search (systems x grid), and points of one grid axis

# ----------------------------------------------------------------------------------------------
# systems


def _axis_values(where: str, spec: Any) -> list[float]:
    """Values of one grid field: a list, 'linspace:A:B:N', 'geomspace:A:B:N' or 'path:V1,...,Vk:N'
    (N points piecewise-linear through the anchors V1..Vk, evenly spaced in anchor index)."""
    if isinstance(spec, str):
        kind, _, rest = spec.partition(":")
        try:
            if kind in ("linspace", "geomspace"):
                a, b, n = rest.split(":")
                n = check_int(f"{where} points", int(n), 1, MAX_GRID_POINTS)
                fn = np.linspace if kind == "linspace" else np.geomspace
                return [float(v) for v in fn(float(a), float(b), n)]
            if kind == "path":
                anchors, n = rest.rsplit(":", 1)
                vals = [float(v) for v in anchors.split(",")]
                n = check_int(f"{where} points", int(n), 1, MAX_GRID_POINTS)
                t = np.linspace(0.0, len(vals) - 1.0, n)
                return [float(v) for v in np.interp(t, np.arange(len(vals)), vals)]
        except SpecError:
            raise
        except ValueError:
            pass
        raise SpecError(f"{where} = {spec!r}: expected a list, 'linspace:A:B:N', 'geomspace:A:B:N' or 'path:V1,...,Vk:N'")
    try:
        vals = [float(v) for v in spec]
    except (TypeError, ValueError):
        raise SpecError(f"{where} = {spec!r}: expected a list of numbers") from None
    if not vals:
        raise SpecError(f"{where} = []: give at least one value")
    return vals


def grid_axes(grid: Mapping[str, Any] | None) -> list[tuple[tuple[str, ...], list[tuple[float, ...]]]]:
    """Parse a hardware grid into axes. Each axis is (fields, points): a plain entry
    `field: values` is a one-field axis; `name: {field: values, field2: values}` is a zipped axis
    whose fields move together (equal lengths). The grid is the product of its axes."""
    fields = [f for f in SystemSpec.__dataclass_fields__ if f != "name"]
    axes = []
    for key, spec in (grid or {}).items():
        if isinstance(spec, Mapping):
            names = tuple(spec)
            cols = [_axis_values(f"grid.{key}.{f}", spec[f]) for f in names]
            if len({len(c) for c in cols}) != 1:
                raise SpecError(f"grid.{key}: the fields of a zipped axis need equal lengths, got "
                                + ", ".join(f"{f}={len(c)}" for f, c in zip(names, cols)))
            points = list(zip(*cols))
        else:
            names = (key,)
            points = [(v,) for v in _axis_values(f"grid.{key}", spec)]
        for f in names:
            if f == "nvs_size":
                raise SpecError("grid.nvs_size: the NVS size changes the candidates; give system.nvs_size (nvs_size= in Python) a list instead")
            if f not in fields:
                raise SpecError(f"grid.{f}: not a system field; valid: {', '.join(fields)}")
        axes.append((names, points))
    seen = [f for names, _ in axes for f in names]
    dup = sorted({f for f in seen if seen.count(f) > 1})
    if dup:
        raise SpecError(f"grid.{dup[0]}: appears in more than one axis")
    return axes


def system_grid(
    system: str | Mapping | SystemSpec | Sequence,
    grid: Mapping[str, Any] | None = None,
) -> tuple[list[SystemSpec], pl.DataFrame]:
    """The hardware axis: base systems crossed with a grid of field overrides (`grid_axes`).

    Returns the validated specs and a table with one row per system (`system_id`, `system`, and
    one column per grid field).
    """
    bases = list(system) if isinstance(system, (list, tuple)) else [system]
    if not bases:
        raise SpecError("system = []: give at least one system")
    specs = [load_system(s) for s in bases]
    axes = grid_axes(grid)
    total = len(specs) * math.prod(len(points) for _, points in axes)
    if total > MAX_GRID_POINTS:
        raise SpecError(f"search.grid: {total:,} hardware points (systems x grid); at most {MAX_GRID_POINTS:,} in one search")
    keys = [f for names, _ in axes for f in names]
    out, rows = [], []
    for base in specs:
        for combo in itertools.product(*(points for _, points in axes)):
            values = [v for point in combo for v in point]
            change = dict(zip(keys, values))
            spec = base.replace(**change) if change else base
            rows.append({"system_id": len(out), "system": base.name, **change})
            out.append(spec)
    return out, pl.DataFrame(rows)


# ----------------------------------------------------------------------------------------------
# top-k per group


class TopK:
    """The k best rows per segment, merged chunk by chunk.

    Rank order: `dse.explore.ranking` (throughput descending, then the candidate columns ascending).
    Rows with throughput below the current k-th of their segment are discarded before any sorting.
    The rows are kept in buckets of `bucket` consecutive segments, and an offer merges only with
    the buckets it touches: the search numbers segments group-major (group x systems + system) and
    streams group by group, so a chunk touches the few buckets of its groups, not every row kept
    so far (a wide hardware axis keeps millions). `columns`: how the rows offered (packed
    candidate words, `dse.explore.space.pack`) become candidate columns, for ties and for `cols`; None when
    they are the columns. Rows are kept as offered: a merge concatenates and gathers three words a
    row, not sixteen columns.
    """

    def __init__(self, k: int, n_segments: int, bucket: int = 4096,
                 columns: Callable[[np.ndarray], np.ndarray] | None = None):
        self.k = k
        self._columns = columns or (lambda rows: rows)
        self.bucket = min(max(1, int(bucket)), 1 << 16)  # a segment's place in its bucket: 16 bits (`_merge`)
        self.threshold = np.full(n_segments, -np.inf)
        self._rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # bucket: (seg, score, cols)

    def _column(self, i: int, empty: np.ndarray) -> np.ndarray:
        parts = [self._rows[b][i] for b in sorted(self._rows)]
        return np.concatenate(parts) if parts else empty

    @property
    def seg(self) -> np.ndarray:
        """Segment of each kept row; rows sorted by segment, then rank."""
        return self._column(0, np.zeros(0, dtype=np.int64))

    @property
    def score(self) -> np.ndarray:
        return self._column(1, np.zeros(0))

    @property
    def cols(self) -> np.ndarray:
        """(rows, columns) candidate columns; (0, 0) before any row."""
        rows = self._column(2, None)
        return np.zeros((0, 0), dtype=np.int64) if rows is None else self._columns(rows)

    def add(self, seg: np.ndarray, score: np.ndarray, cols: np.ndarray) -> None:
        """Offer rows (segment id, throughput, candidate columns); non-finite scores are ignored.
        Rows below their segment's current k-th are dropped; the rest are merged (and sorted once)
        with the rows kept in their buckets."""
        keep = np.isfinite(score) & (score >= self.threshold[seg])
        if not keep.all():
            seg, score, cols = seg[keep], score[keep], cols[keep]
        if not len(seg):
            return
        b = seg // self.bucket
        first, last = int(b.min()), int(b.max())
        if first == last:  # the usual offer: one bucket
            self._merge(first, seg, score, cols)
            return
        for i in np.unique(b).tolist():
            at = b == i
            self._merge(i, seg[at], score[at], cols[at])

    def _merge(self, b: int, seg: np.ndarray, score: np.ndarray, cols: np.ndarray) -> None:
        """Merge rows of bucket b with the rows it keeps: with those of the segments from the
        lowest to the highest offered (kept rows are sorted by segment, so a slice), the rows of
        the bucket's other segments set aside unsorted and put back around the merged ones."""
        before = after = None
        if b in self._rows:
            old = self._rows[b]
            lo, hi = np.searchsorted(old[0], seg.min(), side="left"), np.searchsorted(old[0], seg.max(), side="right")
            before, after = tuple(x[:lo] for x in old), tuple(x[hi:] for x in old)
            seg, score, cols = (np.concatenate([old[0][lo:hi], seg]), np.concatenate([old[1][lo:hi], score]),
                                np.concatenate([old[2][lo:hi], cols]))
        # by segment, then score descending: a sort by score, then a stable one by the segment's
        # place in the bucket (16 bits: NumPy's radix sort), faster than np.lexsort on the
        # thousands of rows of a merge. Equal (segment, score) rows are ordered by their columns below.
        by_score = np.argsort(-score)
        order = by_score[np.argsort((seg[by_score] - b * self.bucket).astype(np.uint16), kind="stable")]
        s_seg, s_score = seg[order], score[order]
        same = (s_seg[1:] == s_seg[:-1]) & (s_score[1:] == s_score[:-1])
        if same.any():  # ties: the columns decide (`dse.explore.ranking`), sorted within each run of equal (segment, score)
            tied = np.flatnonzero(np.r_[same, False] | np.r_[False, same])  # positions in a run of equal keys
            run = np.cumsum(np.r_[True, ~same])[tied]  # the run each belongs to (runs are contiguous)
            rows = order[tied]
            # (run, columns): within a run the segment and score are equal, so its order is the columns'
            order[tied] = rows[np.lexsort(lexsort_keys(run, np.zeros(len(rows)), self._columns(cols[rows])))]
        # the tie order moved rows only within runs of equal (segment, score): s_seg and s_score
        # stand, and the columns are gathered for the kept rows alone
        rank = np.arange(len(s_seg)) - np.searchsorted(s_seg, s_seg, side="left")
        keep = rank < self.k
        merged = (s_seg[keep], s_score[keep], cols[order[keep]])
        if before is not None and (len(before[0]) or len(after[0])):
            merged = tuple(np.concatenate([x, y, z]) for x, y, z in zip(before, merged, after))
        self._rows[b] = merged
        full = rank == self.k - 1
        self.threshold[s_seg[full]] = s_score[full]


# ----------------------------------------------------------------------------------------------
# the search


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
    no_fp8 = [s.name for s in systems if s.matrix_flops_fp8 <= 0]
    if 1 in q.precision and no_fp8:
        raise SpecError(f"profile.precision = {prof.precision!r}: system {no_fp8[0]!r} has no FP8 rate "
                        "(system.matrix_flops_fp8 = 0); use bf16 or set matrix_flops_fp8")
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
    m, prof, net, q, top_k = plan.model, plan.profile, plan.network, plan.question, plan.top_k
    systems, sys_table, cal = plan.systems, plan.sys_table, plan.calibration
    nvs_list, n_list = plan.nvs_sizes, plan.n_gpus
    check_choice("search.keep", keep, KEEP)
    check_economics(economics)
    row_columns = [c for c in _column_order(sys_table) + list(ECONOMY_COLUMNS)
                   if c not in ("model", "strategy", "network", "system")]
    front = ParetoFront(objectives, SEARCH_GROUP, columns=row_columns) if keep == "pareto" else None
    n_sys = len(systems)
    groups = [(nvs, n) for nvs in nvs_list for n in n_list]
    gid = {g: i for i, g in enumerate(groups)}
    n_groups = len(groups)

    workload = m.workload(q.global_batch)
    sys_params = stack_systems([s.params() for s in systems])
    # the top rows' every-metric program, loaded from disk while the stream runs (a small search
    # would wait for it at the end); its bucket holds every row the top-k can keep
    most = plan.estimate.groups * n_sys * top_k
    bucket = prefetch_table_program(q.strategy, prof, workload, most, net.name, m.arch) if most <= PREFETCH_ROWS else None
    full_rows = bool(keep_rows) or front is not None
    outputs = (*METRIC_COLUMNS, *SCORE_COLUMNS) if full_rows else SCORE_COLUMNS
    # one program per search (`search_kernel`), called over a chunk of the stream (`chunk` rows,
    # `default_chunk` unless given) whose calls are reduced together
    packed = candidate_form(q, n_list)
    kern = search_kernel(q.strategy, prof, n_sys, tuple(outputs), net.name, m.arch, packed, plan.estimate.candidates)
    if chunk is None:
        chunk = default_chunk(n_sys, plan.estimate.candidates)
    compile_s = 0.0  # the program is compiled when the stream first needs it
    t_launch = None  # when the first chunk was launched (the head ends, the stream begins)

    topk = TopK(top_k, n_sys * n_groups, columns=unpack_rows if packed else None)
    n_cand = np.zeros(n_groups, dtype=np.int64)
    n_feas = np.zeros((n_sys, n_groups), dtype=np.int64)
    kept: list[pl.DataFrame] = []
    sinks = [keep_rows if callable(keep_rows) else kept.append] if keep_rows else []
    sinks += [front.add] if front is not None else []
    prices = _system_prices(sys_table, economics)  # each system's price and power group, by system id
    bar = None
    if progress:
        from tqdm import tqdm

        total = exact_candidates(q, n_list, nvs_list)  # counted by the placement masks, no rows built
        bar = tqdm(total=total * n_sys, unit="cand", unit_scale=True, desc=f"{m.name} {strategy}")

    equipment = group_equipment(net, groups, q.profile)  # the network columns of each group, once
    device_stats = None
    eval_s = 0.0
    if device_stream_on(packed, full_rows):
        # an accelerator: candidates expanded and reduced in the program (`dse.explore.device_stream`)
        from dse.explore import device_stream as ds

        caps = ds.capacities(stream_sizes(evaluations=plan.estimate.candidates)[1], n_sys, top_k)
        prog = ds.device_program(q.strategy, prof, net.name, m.arch, n_sys, caps)
        tc = time.perf_counter()
        prog.compiled(workload, sys_params)
        compile_s = time.perf_counter() - tc
        t_launch = time.perf_counter()
        # compact pieces hold configurations, not rows: a call takes what fits of one and leaves the rest
        # for the next, so pieces as large as the host path's chunks keep the per-piece costs few
        pieces = iter_pieces(q, n_list, nvs_list, max_rows=max(caps.rows, LARGE_CHUNK_ELEMENTS), known=plan.estimate.enumerated,
                             packed=True, compact=True)
        device_stats = ds.run_stream(pieces, lambda n, nvs: gid[(nvs, n)], prog, workload, sys_params, topk, n_cand,
                                     n_feas, _reduce, None if bar is None else (lambda rows: bar.update(rows * n_sys)))
    else:
        stream = _Stream(chunk, kern)  # `chunk` rounded up to whole calls; two buffers
        # a chunk's calls are dispatched in a worker thread (JAX's CPU client runs a call over the
        # host devices in the calling thread) and joined here, so the worker dispatches chunk i + 1
        # while this thread copies chunk i's outputs out, reduces them and enumerates chunk i + 2,
        # using what the devices' threads leave of the cores; a search of one chunk has nothing to
        # overlap and is evaluated here
        several = plan.estimate.candidates // n_sys > stream.size  # (the estimate counts every system's rows)
        worker = _chunk_worker() if several else None

        def launch(c: _Chunk, take: int):
            """Start evaluating a chunk (in the worker, or here); returns what `finish` needs."""
            nonlocal compile_s, eval_s, t_launch
            if kern._compiled is None:
                tc = time.perf_counter()
                kern.lower_and_compile(workload, sys_params)
                compile_s += time.perf_counter() - tc
            t_launch = time.perf_counter() if t_launch is None else t_launch  # compiling or loading was the head's
            if worker is not None:
                return c, take, worker.submit(_dispatch, kern, c, take, workload, sys_params)
            te = time.perf_counter()
            out = _evaluate(kern, c, take, workload, sys_params)
            eval_s += time.perf_counter() - te
            return c, take, out

        def finish(job) -> None:
            """Wait for a launched chunk and fold it into the counts, the top-k and the row sinks."""
            nonlocal eval_s
            c, take, out = job
            if worker is not None:  # the calls were dispatched in the worker; joined here (waiting for them)
                te = time.perf_counter()
                out = kern.gather(*out.result())
                eval_s += time.perf_counter() - te
            _reduce(out, c, take, topk, n_cand, n_feas)
            if full_rows:
                rows = with_error_band(_rows_frame(out, c.table(take), groups, sys_table, m, q.strategy, equipment, net.name,
                                                   prices), cal).select(_column_order(sys_table) + list(ECONOMY_COLUMNS))
                for f in sinks:
                    f(rows)
            if bar is not None:
                bar.update(take * n_sys)

        # a software pipeline: chunk i + 1 is dispatched before chunk i is reduced, so the host's
        # reduction and the next chunk's enumeration run while the devices evaluate
        waiting = None

        def step(c: _Chunk | None, take: int) -> None:
            """Launch chunk c (None: none left), then finish the one launched before it."""
            nonlocal waiting
            before, waiting = waiting, (launch(c, take) if c is not None else None)
            if before is not None:
                finish(before)

        try:
            for n, nvs, piece in iter_pieces(q, n_list, nvs_list, max_rows=stream.size, known=plan.estimate.enumerated,
                                             packed=packed):
                for c in stream.add(piece, gid[(nvs, n)]):
                    step(c, c.size)
            tail = stream.partial()
            if tail is not None:
                step(tail, tail.fill)
            step(None, 0)
        finally:  # on an error, the chunk in flight is waited for: nothing of this search runs on after it
            if waiting is not None and worker is not None:
                futures_wait([waiting[2]])  # dispatched,
                if waiting[2].exception() is None:
                    jax.block_until_ready(waiting[2].result()[0])  # and evaluated
    if bar is not None:
        bar.close()
    t_stream = time.perf_counter()
    t_launch = t_stream if t_launch is None else t_launch

    top = _top_frame(topk, q, prof, workload, sys_params, sys_table, groups, m, net.name, equipment, bucket, prices, economics)
    top = with_error_band(top, cal).select(_column_order(sys_table, rank=True) + list(ECONOMY_COLUMNS))
    if front is not None:
        top = ranked_front(front, top.clear())
    counts = _counts_frame(n_cand, n_feas, groups, sys_table)
    rows = None
    if keep_rows is True:
        rows = pl.concat(kept) if kept else with_cost_columns(_empty_rows(sys_table, m), economics)
    notes = [note for nvs in nvs_list for n in n_list if (note := domain_note(n, nvs, q.profile))]
    empty = explain_groups(q, [grp for grp, k in zip(groups, n_cand) if k == 0], plan.estimate.configurations)
    notes += [f"no candidate: {why}" for why in empty.values()]
    stats = {
        "notes": notes,
        "empty": empty,  # (nvs, n) of each group without a candidate: why
        "candidates": float(n_cand.sum()),
        "evaluations": float(n_cand.sum() * n_sys),
        "compile_s": compile_s,
        "eval_s": eval_s,  # time the search waited for evaluated chunks and joined their outputs
    }
    if device_stats is not None:
        stats["device_stream"] = device_stats
        stats["eval_s"] = device_stats["wait_s"]
    # where the wall time went: before the first chunk is launched (planning, loading the program,
    # the first chunk's enumeration), the stream (evaluation, with the reductions and the next
    # chunks' enumeration beside it), and after it (the top rows' metrics, the frames); they sum
    # to wall_s
    t_end = time.perf_counter()
    stats.update(head_s=t_launch - t_start, stream_s=t_stream - t_launch, tail_s=t_end - t_stream, wall_s=t_end - t_start)
    return SearchResult(top=top, counts=counts, rows=rows, stats=stats)


_WORKER: dict[int, ThreadPoolExecutor] = {}  # by process id: a forked child starts its own
_WORKER_LOCK = threading.Lock()


def _chunk_worker() -> ThreadPoolExecutor:
    """The thread that dispatches a search's chunks to the devices while the search's own thread
    joins, reduces and enumerates (`run_search`): one per process, started by the first search of
    several chunks (starting a thread costs a small search about a millisecond). Searches run from
    several threads share it, their chunks dispatched in turn."""
    with _WORKER_LOCK:
        pid = os.getpid()
        if pid not in _WORKER:
            _WORKER[pid] = ThreadPoolExecutor(1, thread_name_prefix="dse-chunk")
        return _WORKER[pid]


def unpack_rows(rows: np.ndarray) -> np.ndarray:
    """Packed candidate words as rows, (N, PACKED_WORDS), to their columns, (N, columns)."""
    return unpack(rows.T).T


def candidate_form(q: Question, n_gpus: Sequence[int]) -> bool:
    """Whether a search of q over these GPU counts streams its candidates as three packed words
    (`dse.explore.space.pack`: where every value fits, `dse.explore.space.packs`) or as their sixteen columns."""
    return PACK_CANDIDATES and packs(q, n_gpus)


def stream_sizes(platform: str | None = None, evaluations: int | None = None) -> tuple[int, int]:
    """(candidates x systems per chunk, per kernel call) of the stream of a search of at most
    `evaluations` (candidates x systems; None: a small one) on `platform` (None: this process's
    devices).

    CPU: a small search in chunks of CHUNK_ELEMENTS and calls of CALL_ELEMENTS; one of at least
    LARGE_SEARCH evaluations in chunks of LARGE_CHUNK_ELEMENTS and calls of LARGE_CALL_ELEMENTS.
    A call over the host devices ends on all of them together, a fixed cost per call that larger
    calls amortise (measured with `dse bench --stream`: the kernel gains from 2^15 up to 2^20
    elements a call, and the bench's searches of 1-4M evaluations were fastest in calls of 2^17,
    chunks of 2^19: fewer, larger reductions, a pipeline still several chunks deep), while a small
    search would evaluate mostly padding in a large call: the seed-001 case of 22,696 candidates
    is one call of 2^15. Two sizes, not a size per search: each is a program to compile (or load).
    An accelerator: a large search in one call per chunk of ACCELERATOR_ELEMENTS, since there a
    call is a kernel launch with a fixed cost (dispatch and launch, tens of microseconds) that a
    32,768-element call, about 33 us of work at the 1e9 evaluations/s sought there, cannot
    amortise; a small one in chunks of CHUNK_ELEMENTS and calls of ACCELERATOR_SMALL_CALL, since a
    call of 2^20 would be mostly padding, evaluated like any row (the seed-001 case of 22,696
    candidates would be 46 times its own size, 2.9 times in a call of 2^16). These sizes are
    reasoned, not yet measured on a GPU (`dse bench --stream` measures others). STREAM_SIZES,
    when set, replaces all of these."""
    if STREAM_SIZES is not None:
        return STREAM_SIZES
    large = evaluations is not None and evaluations >= LARGE_SEARCH
    if (platform or jax.devices()[0].platform) != "cpu":
        return (ACCELERATOR_ELEMENTS, ACCELERATOR_ELEMENTS) if large else (CHUNK_ELEMENTS, ACCELERATOR_SMALL_CALL)
    return (LARGE_CHUNK_ELEMENTS, LARGE_CALL_ELEMENTS) if large else (CHUNK_ELEMENTS, CALL_ELEMENTS)


#: Whether a search that keeps only its reductions streams through `dse.explore.device_stream` (candidates
#: expanded and reduced in the program): None, on an accelerator; True or False, always or never
#: (tests run it on the CPU; `dse bench --device-stream` compares the two). While None, the
#: environment's DSE_DEVICE_STREAM=on|off|auto decides (`dse.runtime.device_stream_env`).
DEVICE_STREAM: bool | None = None


def device_stream_on(packed: bool, full_rows: bool, platform: str | None = None) -> bool:
    """Whether a search streams through `dse.explore.device_stream`: its candidates packed, no row kept
    (every row's metrics come back on the host path), and an accelerator (`DEVICE_STREAM`)."""
    if not packed or full_rows:
        return False
    from dse.runtime import device_stream_env

    forced = DEVICE_STREAM if DEVICE_STREAM is not None else device_stream_env()
    if forced is not None:
        return forced
    return (platform or jax.devices()[0].platform) != "cpu"


def search_kernel(strategy: str, profile: Profile, n_sys: int, outputs: tuple[str, ...] = SCORE_COLUMNS,
                  network: str = TWO_TIER, moe=False, packed: bool = False, evaluations: int | None = None):
    """The program a search of `evaluations` over `n_sys` systems calls (`dse.explore.engine.chunk_kernel`):
    calls of its `stream_sizes` call's elements // n_sys candidates (fewer for a wide hardware axis,
    each call the same number of evaluations); `packed`: taking the candidates as `dse.explore.space.pack`
    words."""
    call = stream_sizes(evaluations=evaluations)[1]
    return chunk_kernel(strategy, profile, max(1, call // n_sys), n_sys, outputs, network, moe, packed)


def default_chunk(n_sys: int, evaluations: int) -> int:
    """Candidates per chunk of a search's stream of `evaluations` (candidates x systems): its
    `stream_sizes` chunk's elements // n_sys, and no more than the search holds (a smaller search
    gets a buffer of its own size: fresh pages cost)."""
    return min(stream_sizes(evaluations=evaluations)[0] // n_sys, max(1, evaluations // n_sys))


def evaluations_line(stats: Mapping[str, Any]) -> str:
    """'N evaluations in T s (R M/s)': a search's size, wall time (compilation included) and rate."""
    ev, wall = int(stats["evaluations"]), stats["wall_s"]
    return f"{ev:,} evaluations in {wall:.2f} s ({ev / max(wall, 1e-9) / 1e6:.2f} M/s)"


class _Chunk:
    """One buffer of the candidate stream: `size` rows laid out as the kernel's calls take them
    (`ChunkKernel.block`: per call and device one contiguous, aligned (width, rows) slab of the
    candidates' columns or packed words), so that a call reaches the devices without a copy; the
    group id of each row in `groups`; the rows written so far, `fill`. The stream comes group by
    group, so within a chunk the group ids never decrease."""

    def __init__(self, size: int, kern):
        self.devices = kern.n_devices
        self.per = kern.chunk // self.devices
        self.size = size
        self.packed = kern.packed
        calls = self.size // kern.chunk
        self.blocks = aligned_empty((calls, *kern.block_shape))
        self._slabs = self.blocks.reshape(calls * self.devices, kern.block_shape[1], self.per)
        self.groups = np.empty(self.size, dtype=np.int64)
        self.fill = 0

    def put(self, piece: Piece, lo: int, group: int) -> int:
        """Append the rows of a piece of one group (a `dse.explore.space.Piece` of the kernel's form:
        packed words or `COLUMNS`) from row `lo` on, as many as fit, gathered slab by slab
        straight into place; returns the first row not taken."""
        take = min(self.size - self.fill, piece.rows - lo)
        done = 0
        while done < take:
            b, p = divmod(self.fill + done, self.per)
            k = min(self.per - p, take - done)
            piece.write(self._slabs[b, :, p:p + k], lo + done, lo + done + k)
            done += k
        self.groups[self.fill:self.fill + take] = group
        self.fill += take
        return lo + take

    def block(self, i: int, n: int) -> np.ndarray:
        """Call i's slab group, its rows past the first n (the chunk's end) set to copies of its
        first row (evaluated, then dropped)."""
        blk = self.blocks[i]
        for d in range(self.devices):
            lo = max(0, n - d * self.per)
            if lo < self.per:
                blk[d, :, lo:] = blk[0, :, :1]
        return blk

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """Chunk rows `idx` as the kernel takes them, (len(idx), width): candidate columns or packed
        words (`unpack_rows` turns the latter into columns)."""
        return self._slabs[idx // self.per, :, idx % self.per]

    def table(self, take: int) -> np.ndarray:
        """The first `take` rows as one (columns + 1, take) table: the columns, then the group id
        (one copy: whole slabs, then the rows of the last one taken; packed words unpacked)."""
        width = self._slabs.shape[1]
        out = np.empty((len(COLUMNS) + 1, take), dtype=np.int64)
        rows = np.empty((width, take), dtype=np.int64) if self.packed else out[:width]
        whole = take // self.per
        rows[:, :whole * self.per].reshape(width, whole, self.per)[...] = self._slabs[:whole].transpose(1, 0, 2)
        if take > whole * self.per:
            rows[:, whole * self.per:] = self._slabs[whole, :, :take - whole * self.per]
        if self.packed:
            unpack(rows, out=out[:-1])
        out[-1] = self.groups[:take]
        return out


#: Slabs (rows per call and device) at least this long are gathered into column by column; a piece
#: over thinner ones is gathered once into a table and copied slab by slab (a wide hardware axis
#: makes the calls short, and per-column writes into many short slabs cost more than the copy).
DIRECT_ROWS = 4096


class _Stream:
    """The candidate stream packed into `_Chunk`s of `size` rows (rounded up to whole calls),
    `buffers` of them in turn: a chunk `add` yields is written again only after `buffers - 1`
    more have been yielded, so it can be evaluated while the next one fills."""

    def __init__(self, size: int, kern, buffers: int = 2):
        self.size = max(1, -(-int(size) // kern.chunk)) * kern.chunk
        self._bufs = [_Chunk(self.size, kern) for _ in range(max(1, buffers))]
        self._at = 0

    @property
    def current(self) -> _Chunk:
        return self._bufs[self._at]

    def add(self, piece: Piece | np.ndarray, group: int):
        """Append a piece of one group (a `dse.explore.space.Piece` of the kernel's form, or a (columns,
        rows) table in `COLUMNS` order, packed here for a kernel of packed candidates); yield each
        chunk as it fills (then go on in the next buffer)."""
        if isinstance(piece, np.ndarray):
            piece = Piece.of(in_form(piece, self.current.packed))
        elif self.current.per < DIRECT_ROWS and piece.rows > self.current.per:
            piece = Piece.of(piece.table())  # thin slabs: one gather, then one copy per slab, not one per column
        lo, n = 0, piece.rows
        while lo < n:
            lo = self.current.put(piece, lo, group)
            if self.current.fill == self.size:
                full = self.current
                self._at = (self._at + 1) % len(self._bufs)
                self.current.fill = 0
                yield full

    def partial(self) -> _Chunk | None:
        """The last, partly filled chunk (None when the stream ended on a chunk boundary)."""
        return self.current if self.current.fill else None


def _submit(kern, chunk: _Chunk, take: int, workload, sys_params) -> tuple[list, list[int]]:
    """Dispatch the first `take` candidates of a chunk in calls of the program's size, without
    waiting (`ChunkKernel.gather` joins them); the last call is padded with copies of its first
    row, whose results are dropped."""
    pending, takes = [], []
    for i, lo in enumerate(range(0, take, kern.chunk)):
        n = min(kern.chunk, take - lo)
        pending.append(kern.submit(chunk.block(i, n), workload, sys_params))
        takes.append(n)
    return pending, takes


@float64  # the search's 64-bit scope is its thread's: a worker thread takes its own
def _dispatch(kern, chunk: _Chunk, take: int, workload, sys_params) -> tuple[list, list[int]]:
    """`_submit` in the search's float64 scope, as the chunk worker runs it."""
    return _submit(kern, chunk, take, workload, sys_params)


@float64
def _evaluate(kern, chunk: _Chunk, take: int, workload, sys_params) -> dict[str, np.ndarray]:
    """The first `take` candidates of a chunk, evaluated: (n_systems, take) arrays per output."""
    return kern.gather(*_submit(kern, chunk, take, workload, sys_params))


def _reduce(out, chunk: _Chunk, take: int, topk: TopK, n_cand, n_feas):
    """Fold the first `take` rows of a chunk into the counts and the top-k: array passes over every
    run of one group and every system at once, plus one partition per run long enough to have a
    floor.

    Each (system, run) is cut to the rows at or above a floor no higher than its k-th best score
    (ties kept) before the exact merge (`TopK.add`). The floor is the k-th largest of the run's
    items: the maximum of each whole block (`dse.explore.engine.block_summaries`) of a run spanning at
    least k of them, and the score of every other row (the run's ends outside whole blocks, and
    every row of a shorter run). Items are distinct rows' scores, so the k-th largest bounds the
    k-th best row from below. Counts come from the summaries of whole blocks and from the rows."""
    if take == 0:
        return
    score = out[SCORE]  # `dse.explore.engine.rank_score`: -inf where it does not fit, NaN never ranked
    bmax, bfeas = out[BLOCK_MAX], out[BLOCK_FEASIBLE]
    n_sys, k = score.shape[0], topk.k
    g = chunk.groups[:take]
    starts = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))  # runs: one group each
    lengths = np.diff(np.append(starts, take))
    run_of = np.repeat(np.arange(len(starts)), lengths)  # run of each row
    gr = g[starts]  # group of each run
    np.add.at(n_cand, gr, lengths)
    nw = take // BLOCK  # blocks wholly within the rows taken
    b_run = run_of[:nw * BLOCK:BLOCK]
    whole = b_run == run_of[BLOCK - 1:nw * BLOCK:BLOCK]  # the block lies in one run
    per_run = np.bincount(b_run[whole], minlength=len(starts))
    wide = np.flatnonzero(whole & (per_run[b_run] >= k))  # blocks summarised: of runs with >= k of them
    b_run = b_run[wide]
    loose = np.ones(take, dtype=bool)
    loose[(wide[:, None] * BLOCK + np.arange(BLOCK)).ravel()] = False
    loose = np.flatnonzero(loose)  # every other row, read one by one
    l_run = run_of[loose]
    bm = bmax[:, wide]  # NaN already -inf
    sl = score[:, :take] if len(loose) == take else score[:, loose]
    fits = sl != -np.inf
    sl = np.where(np.isnan(sl), -np.inf, sl)  # NaN (fits, no finite throughput): counted, never ranked
    # counts: whole blocks from their summaries, other rows one by one
    feas = np.zeros((n_sys, len(starts)), dtype=np.int64)
    for by_run, vals in ((b_run, bfeas[:, wide]), (l_run, fits)):
        if len(by_run):
            first = np.flatnonzero(np.concatenate([[True], by_run[1:] != by_run[:-1]]))
            feas[:, by_run[first]] += np.add.reduceat(vals.astype(np.int64), first, axis=1)
    np.add.at(n_feas, (slice(None), gr), feas)
    # floors: the k-th largest item of each (system, run) with at least k items, else -inf (a
    # partition per such run: linear, where one sort of every item would cost a wide hardware
    # axis, whose chunks are a few blocks x thousands of systems, a log factor per chunk)
    runs = np.arange(len(starts))
    b_lo, b_hi = np.searchsorted(b_run, runs), np.searchsorted(b_run, runs, side="right")
    l_lo, l_hi = np.searchsorted(l_run, runs), np.searchsorted(l_run, runs, side="right")
    count = b_hi - b_lo + l_hi - l_lo
    kth = np.full((n_sys, len(starts)), -np.inf)
    for r in np.flatnonzero(count >= k).tolist():
        x = np.concatenate([bm[:, b_lo[r]:b_hi[r]], sl[:, l_lo[r]:l_hi[r]]], axis=1) if b_hi[r] > b_lo[r] \
            else sl[:, l_lo[r]:l_hi[r]]
        kth[:, r] = np.partition(x, count[r] - k, axis=1)[:, count[r] - k]
    systems = np.arange(n_sys)
    seg_of_run = gr[None, :] * n_sys + systems[:, None]  # segment (system s, group g): g * n_sys + s (`TopK`)
    floor = np.maximum(topk.threshold[seg_of_run], kth)  # (systems, runs)
    # rows at or above their floor: in the blocks whose maximum reaches it, and among the loose rows
    s_idx, j_idx = np.nonzero((bm >= floor[:, b_run]) & (bm > -np.inf))
    blocks = score[:, :nw * BLOCK].reshape(n_sys, nw, BLOCK)[s_idx, wide[j_idx]]
    bi, br = np.nonzero((blocks >= floor[s_idx, b_run[j_idx]][:, None]) & (blocks > -np.inf))
    ls, lr = np.nonzero((sl >= floor[:, l_run]) & (sl > -np.inf))
    sys_of = np.concatenate([s_idx[bi], ls])
    rows = np.concatenate([wide[j_idx[bi]] * BLOCK + br, loose[lr]])
    if len(rows):
        topk.add(gr[run_of[rows]] * n_sys + sys_of, score[sys_of, rows], chunk.rows(rows))


def _metrics_frame(metrics: Mapping[str, np.ndarray], m: ModelSpec) -> dict[str, Any]:
    """Metric columns of result rows, with `training_days`: null for a model without a training set
    (no run: the dataset schema's rule, `dse.results.io`, and `dse.evaluate`'s, so the run's energy and cost
    are null too, `dse.results.economics`)."""
    out = dict(metrics)
    out["feasible"] = np.asarray(out["feasible"], dtype=bool)
    if m.samples is not None:
        out["training_days"] = training_days(m.samples, out["throughput"])
    else:
        out["training_days"] = pl.Series("training_days", [None] * len(out["throughput"]), dtype=pl.Float64)
    return out


def _beside_systems(sys_table: pl.DataFrame, system_ids: np.ndarray, data: Mapping[str, np.ndarray]) -> pl.DataFrame:
    """The columns `data` with each row's system fields before them, gathered by id (`sys_table`
    row i is system i; no join)."""
    return pl.concat([sys_table[system_ids], pl.DataFrame(data)], how="horizontal")


def _system_prices(sys_table: pl.DataFrame, economics: Any) -> tuple[np.ndarray, list]:
    """(group of each system id, groups): the price and power groups (`dse.results.economics.
    resolve_economics`; None: no preset) of the search's systems, one per system name (the points
    of a hardware grid share their base system's), and each system id's (`sys_table` row i is
    system i)."""
    names = sys_table["system"].to_list()
    index = {n: i for i, n in enumerate(dict.fromkeys(names))}
    return np.array([index[n] for n in names], dtype=np.int64), [resolve_economics(economics, n) for n in index]


def _top_frame(topk: TopK, q, prof, workload, sys_params: System, sys_table, groups, m, network,
               equipment: Mapping[str, np.ndarray], bucket: int | None, prices: tuple,
               economics: Any = None) -> pl.DataFrame:
    """The kept rows with every metric and the cost columns (`prices`: `_system_prices`), sorted by
    system, NVS size, GPU count and rank (sorted here, and each row's system fields and prices
    gathered by its id: `sys_table` row i is system i, `sys_params` its (systems,) parameters)."""
    if not len(topk.seg):
        return with_cost_columns(_empty_rows(sys_table, m, rank=True).with_columns(
            pl.lit(m.name).alias("model"), pl.lit(q.strategy).alias("strategy"), pl.lit(network).alias("network")),
            economics)
    seg, cols = topk.seg, topk.cols
    n_sys = len(sys_table)
    sys_id = seg % n_sys  # segments are group-major (`_reduce`)
    g = seg // n_sys
    rank = np.arange(len(seg)) - np.searchsorted(seg, seg, side="left") + 1
    nvs_of = np.array([k for k, _ in groups], dtype=np.int64)[g]
    n_of = np.array([n for _, n in groups], dtype=np.int64)[g]
    order = np.lexsort((rank, n_of, nvs_of, sys_id))
    # the program's rows gathered at once, padded to its size with copies of the first (`table_rows`)
    n = len(order)
    padded = np.concatenate([order, np.full(table_rows(n, bucket) - n, order[0])])
    cols, sys_id = cols[padded], sys_id[padded]
    c = Candidates(*(cols[:, j] for j in range(cols.shape[1])))
    per_row = System(*(np.asarray(x)[sys_id] for x in sys_params))
    metrics = run_metrics(q.strategy, prof, c, workload, per_row, network, m.arch, bucket=bucket)
    metrics = {k: v[:n] for k, v in metrics.items()}
    cols, sys_id = cols[:n], sys_id[:n]
    g, rank, nvs_of, n_of = g[order], rank[order], nvs_of[order], n_of[order]
    data = {"nvs_size": nvs_of, "n_gpus": n_of, "rank": rank.astype(np.int64)}
    data.update({k: cols[:, j].astype(np.int64) for j, k in enumerate(COLUMNS)})
    data.update(_metrics_frame(metrics, m))
    data.update({k: v[g] for k, v in equipment.items()})
    data.update(cost_columns(data, prices[0][sys_id], prices[1]))
    frame = _beside_systems(sys_table, sys_id, data)
    return frame.with_columns(pl.lit(m.name).alias("model"), pl.lit(q.strategy).alias("strategy"),
                              pl.lit(network).alias("network"))


def _column_order(sys_table: pl.DataFrame, rank: bool = False) -> list[str]:
    head = ["model", "strategy", "network"] + list(sys_table.columns) + ["nvs_size", "n_gpus"]
    head += ["rank"] if rank else []
    return head + list(COLUMNS) + list(METRIC_COLUMNS) + ["training_days"] + list(COST_COLUMNS) + list(BAND_COLUMNS)


def _empty_rows(sys_table: pl.DataFrame, m: ModelSpec, rank: bool = False) -> pl.DataFrame:
    schema: dict[str, Any] = {"model": pl.Utf8, "strategy": pl.Utf8, "network": pl.Utf8}
    schema.update(dict(zip(sys_table.columns, sys_table.dtypes)))
    schema.update({"nvs_size": pl.Int64, "n_gpus": pl.Int64})
    if rank:
        schema["rank"] = pl.Int64
    schema.update({c: pl.Int64 for c in COLUMNS})
    schema.update({c: (pl.Boolean if c == "feasible" else pl.Float64) for c in METRIC_COLUMNS})
    schema["training_days"] = pl.Float64
    schema.update({c: (pl.Float64 if c in ("network_cost", "network_power") else pl.Int64) for c in COST_COLUMNS})
    schema.update({c: pl.Float64 for c in BAND_COLUMNS})
    return pl.DataFrame(schema=schema)


def _rows_frame(out, cols, groups, sys_table: pl.DataFrame, m: ModelSpec, strategy: str,
               equipment: Mapping[str, np.ndarray], network: str, prices: tuple) -> pl.DataFrame:
    """Every evaluated row of a chunk (`cols`: its columns then group ids, one row each), with
    its group's network equipment (`equipment`: by group id) and its system's cost columns
    (`prices`: `_system_prices`)."""
    take = cols.shape[1]
    n_sys = out["iteration_time"].shape[0]
    gids = cols[-1]

    def each(a: np.ndarray) -> np.ndarray:  # a candidate's value on every system's row
        return a if n_sys == 1 else np.tile(a, n_sys)

    metrics = {k: out[k][:, :take].reshape(-1) for k in METRIC_COLUMNS}
    data = {
        "nvs_size": each(np.array([k for k, _ in groups], dtype=np.int64)[gids]),
        "n_gpus": each(np.array([n for _, n in groups], dtype=np.int64)[gids]),
    }
    data.update({k: each(cols[j]) for j, k in enumerate(COLUMNS)})
    data.update(_metrics_frame(metrics, m))
    data.update({k: each(v[gids]) for k, v in equipment.items()})
    sys_id = np.repeat(np.arange(n_sys), take)  # system by system, as the kernel lays them
    data.update(cost_columns(data, prices[0][sys_id], prices[1]))
    frame = _beside_systems(sys_table, sys_id, data)
    return frame.with_columns(pl.lit(m.name).alias("model"), pl.lit(strategy).alias("strategy"),
                              pl.lit(network).alias("network"))


def _counts_frame(n_cand, n_feas, groups, sys_table: pl.DataFrame) -> pl.DataFrame:
    """Candidates and feasible counts per (system, group), system by system."""
    n_sys, n_groups = n_feas.shape
    candidates = np.tile(n_cand, n_sys)
    data = {
        "nvs_size": np.tile(np.array([g[0] for g in groups], dtype=np.int64), n_sys),
        "n_gpus": np.tile(np.array([g[1] for g in groups], dtype=np.int64), n_sys),
        "candidates": candidates,
        "feasible": n_feas.reshape(-1),
        "infeasible": candidates - n_feas.reshape(-1),
    }
    return _beside_systems(sys_table, np.repeat(np.arange(n_sys), n_groups), data)


def search(
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
