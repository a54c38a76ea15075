"""A search's stream on the host: candidates packed into call slabs, evaluated in calls of one program, reduced per group.

The stream is a two-buffer software pipeline (`_Stream`, `_Chunk`): chunk i + 1 is dispatched
to the devices (from a worker thread: JAX's CPU client runs a call over the host devices in the
calling thread) before chunk i is joined and reduced (`_reduce`) in the search's thread. The
sizes of its chunks and calls are the platform's (`stream_sizes`); on an accelerator a search that
keeps only its reductions takes `dse.explore.device_stream` instead (`device_stream_on`).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait as futures_wait
from typing import Any, Callable, Sequence

import jax
import numpy as np

from dse.explore.engine import BLOCK, BLOCK_FEASIBLE, BLOCK_MAX, SCORE, SCORE_COLUMNS, aligned_empty, chunk_kernel
from dse.explore.packing import in_form, packs, unpack
from dse.explore.placement import Piece
from dse.explore.space import COLUMNS, Question
from dse.explore.topk import TopK
from dse.runtime import float64
from kernels.collectives import TWO_TIER
from kernels.params import Profile

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
    (`dse.explore.packing.pack`: where every value fits, `dse.explore.packing.packs`) or as their sixteen columns."""
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
    is one call of 2^15. A few fixed sizes, not a size per search: each is a program to compile
    (or load). These are the host path's sizes; the device stream of a large search grows its calls
    past them (`dse.explore.device_stream.capacities`).
    An accelerator: a large search in one call per chunk of ACCELERATOR_ELEMENTS, since there a
    call is a kernel launch with a fixed cost (dispatch and launch, tens of microseconds) that a
    32,768-element call, about 33 us of work at the 1e9 evaluations/s sought there, cannot
    amortise; a small one in chunks of CHUNK_ELEMENTS and calls of ACCELERATOR_SMALL_CALL, since a
    call of 2^20 would be mostly padding, evaluated like any row (the seed-001 case of 22,696
    candidates would be 46 times its own size, 2.9 times in a call of 2^16). On an H200 calls of
    2^22 and 2^24 ran the kernel no faster than 2^20 (docs/gpu.md; `dse bench --stream` measures
    others). STREAM_SIZES, when set, replaces all of these."""
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
    each call the same number of evaluations); `packed`: taking the candidates as `dse.explore.packing.pack`
    words."""
    call = stream_sizes(evaluations=evaluations)[1]
    return chunk_kernel(strategy, profile, max(1, call // n_sys), n_sys, outputs, network, moe, packed)


def default_chunk(n_sys: int, evaluations: int) -> int:
    """Candidates per chunk of a search's stream of `evaluations` (candidates x systems): its
    `stream_sizes` chunk's elements // n_sys, and no more than the search holds (a smaller search
    gets a buffer of its own size: fresh pages cost)."""
    return min(stream_sizes(evaluations=evaluations)[0] // n_sys, max(1, evaluations // n_sys))


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
        """Append the rows of a piece of one group (a `dse.explore.placement.Piece` of the kernel's form:
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
        """Append a piece of one group (a `dse.explore.placement.Piece` of the kernel's form, or a (columns,
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


class StreamTimes:
    """What a stream measured of itself: seconds compiling (or loading) its program, seconds waiting
    for evaluated chunks and joining their outputs, and when its first chunk was launched."""

    def __init__(self):
        self.compile_s = 0.0
        self.eval_s = 0.0
        self.t_launch: float | None = None


def host_stream(pieces: Callable[[int], Any], gid: Callable[[int, int], int], kern, chunk: int,
                several: Callable[[int], bool],
                workload, sys_params, topk: TopK, n_cand, n_feas,
                on_rows: Callable[[dict, np.ndarray], None] | None = None,
                on_chunk: Callable[[int], None] | None = None) -> StreamTimes:
    """Stream a search's pieces (`pieces(max_rows)`: (n, nvs, Piece), group by group) through the
    chunk program `kern` in chunks of `chunk` candidates, folding each into the top-k and the
    counts, and handing its outputs and candidate table to `on_rows` when every row is kept
    (`several(size)`: whether the search spans more than one chunk of that size).

    With `several` chunks a chunk's calls are dispatched in the worker thread (`_chunk_worker`)
    and joined here, so the worker dispatches chunk i + 1 while this thread copies chunk i's
    outputs out, reduces them and enumerates chunk i + 2; a search of one chunk has nothing to
    overlap and is evaluated here. On an error the chunk in flight is waited for: nothing of this
    search runs on after it."""
    times = StreamTimes()
    stream = _Stream(chunk, kern)  # `chunk` rounded up to whole calls; two buffers
    worker = _chunk_worker() if several(stream.size) else None

    def launch(c: _Chunk, take: int):
        """Start evaluating a chunk (in the worker, or here); returns what `finish` needs."""
        if kern._compiled is None:
            tc = time.perf_counter()
            kern.lower_and_compile(workload, sys_params)
            times.compile_s += time.perf_counter() - tc
        times.t_launch = time.perf_counter() if times.t_launch is None else times.t_launch  # compiling was the head's
        if worker is not None:
            return c, take, worker.submit(_dispatch, kern, c, take, workload, sys_params)
        te = time.perf_counter()
        out = _evaluate(kern, c, take, workload, sys_params)
        times.eval_s += time.perf_counter() - te
        return c, take, out

    def finish(job) -> None:
        """Wait for a launched chunk and fold it into the counts, the top-k and the rows."""
        c, take, out = job
        if worker is not None:  # the calls were dispatched in the worker; joined here (waiting for them)
            te = time.perf_counter()
            out = kern.gather(*out.result())
            times.eval_s += time.perf_counter() - te
        _reduce(out, c, take, topk, n_cand, n_feas)
        if on_rows is not None:
            on_rows(out, c.table(take))
        if on_chunk is not None:
            on_chunk(take)

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
        for n, nvs, piece in pieces(stream.size):
            for c in stream.add(piece, gid(n, nvs)):
                step(c, c.size)
        tail = stream.partial()
        if tail is not None:
            step(tail, tail.fill)
        step(None, 0)
    finally:
        if waiting is not None and worker is not None:
            futures_wait([waiting[2]])  # dispatched,
            if waiting[2].exception() is None:
                jax.block_until_ready(waiting[2].result()[0])  # and evaluated
    return times
