"""A search's stream on an accelerator: candidates expanded and reduced inside the program.

Measured on an H200 (docs/speed.md, `docs/device/split.py`): one call of 2^20 packed candidates
spends about 3.2 ms copying their 24 MB to the device, 1.4 ms evaluating them and 1.6 ms copying
the 8.6 MB of scores back, so the host path (`dse.explore.stream._Stream`, the reduction on the host)
runs at a quarter of the program's rate. Here each call carries its candidates as the
enumeration makes them (`dse.explore.placement.CompactPiece`: a configuration's two words once, the NVS
assignment words of each placement class once) and the program

1. expands them into rows: row t's configuration is the number of configurations starting at or
   before t, minus one (a scatter of ones and a prefix sum), its assignment word the entry t - first
   of its class's list (`expand`);
2. evaluates them against every system of the hardware axis (`kernels.evaluate_candidates`);
3. reduces them per (system, run of one group): the feasible count, and every row at or above a
   floor no higher than the run's k-th best rank score (`select`), compacted into a buffer of
   `Capacities.selected` entries.

The host folds the selected rows into the same exact top-k (`dse.explore.topk.TopK`, ties broken by the
candidate columns) and the counts; a call that selected more rows than the buffer holds is reduced
on the host from its full scores (`fallback`), so the result never depends on the capacities.
At a call's fixed capacities about 8 bytes a candidate go to the device (24 with the host path)
and 12 bytes a selected row come back (8 an evaluation).
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dse.explore import programs
from dse.explore.engine import BLOCK, BLOCK_FEASIBLE, BLOCK_MAX, SCORE, block_summaries, rank_score, unpack_candidates
from dse.explore.packing import PACKING
from dse.explore.placement import CompactPiece
from kernels.iteration import evaluate_candidates
from kernels.params import Profile, System, Workload

_SIGN = np.uint64(1 << 63)


class Capacities(NamedTuple):
    """The fixed shapes of one call: `rows` candidates (x systems), `configs` configurations,
    `words` NVS assignment words, `runs` runs of one group (the last reserved for the padding),
    `selected` (system, row) pairs coming back."""

    rows: int
    configs: int
    words: int
    runs: int
    selected: int


def _pow2_floor(x: int) -> int:
    return 1 << (max(1, int(x)).bit_length() - 1)


def _pow2_ceil(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


#: Evaluations a call may grow to on a wide hardware axis (`capacities`), as a multiple of the call.
WIDE_CALL = 4
#: A large search's calls grow until it makes about this many (`capacities`) ...
SEARCH_CALLS = 16
#: ... up to this many evaluations a call (a call's scores and sort keys stay near 128 MB each).
MAX_CALL = 1 << 24


def capacities(call: int, n_systems: int, top_k: int = 10, evaluations: int | None = None) -> Capacities:
    """The shapes of a call of about `call` evaluations over `n_systems` systems keeping `top_k`
    rows per group: rows a multiple of BLOCK; a quarter as many configurations (the searches'
    configurations have 5-10 candidates each; a piece of fewer ends its call early); runs so that
    the counts coming back stay within 2^16 entries (16 to 4096); a selection buffer of a 32nd of
    the evaluations and of 4 top_k rows per system (two runs a call, ties), at least 4096.

    A call costs the host a few milliseconds whatever its size (filling its tables, dispatching
    it, folding its selection: 2.9 ms a call on an H100's host in docs/gpu.md run 11, where a
    search of 449M evaluations over 64 systems ran 441 calls of 2^20 and waited for the GPU 0.16 s
    of its 1.42 s stream). So a search of `evaluations` (candidates x systems, the planned
    estimate) grows its calls up to a `SEARCH_CALLS`-th of itself, at most `MAX_CALL`
    evaluations and never past the rows of a one-system call (the tables it sends stay those of
    `call`); a wide hardware axis (64 systems or more) grows them `WIDE_CALL` times at least."""
    rows_cap = max(BLOCK, call)
    call = call * min(WIDE_CALL, max(1, n_systems // 64))
    if evaluations:
        call = max(call, min(_pow2_floor(max(1, evaluations // SEARCH_CALLS)), MAX_CALL, rows_cap * max(1, n_systems)))
    rows = max(BLOCK, -(-max(1, call // max(1, n_systems)) // BLOCK) * BLOCK)
    configs = max(BLOCK, rows // 4)
    words = max(4096, rows // 4)
    runs = min(4096, max(16, _pow2_floor((1 << 16) // max(1, n_systems))))
    selected = max(4096, _pow2_ceil(n_systems * rows // 32), _pow2_ceil(4 * top_k * n_systems))
    return Capacities(rows, configs, words, runs, selected)


def head_size(caps: Capacities) -> int:
    """Entries of the selection a call also returns apart (`DeviceProgram`), fetched alone when the
    call selected no more: a 32nd of the buffer, at least 4096 (or the buffer)."""
    return max(min(4096, caps.selected), caps.selected // 32)


def fetch(out, caps: Capacities) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """(count, feasible, idx, val) of a call's outputs on the host, the selection cut to its count
    (None, None for a call whose selection overflowed its buffer). The buffers come back whole or
    as their head (`head_size`), both outputs of the program: slicing them here would be an
    operation queued behind the next call, and wait for it."""
    feasible, count, idx, val, _, idx_head, val_head = out
    count = int(count)
    if count > caps.selected:
        return count, np.asarray(feasible), None, None
    if count > head_size(caps):
        idx_head, val_head = idx, val
    return count, np.asarray(feasible), np.asarray(idx_head)[:count], np.asarray(val_head)[:count]


def expand(cw, cf, kb, kw, take, rows: int):
    """The packed words (PACKED_WORDS, rows) of a call's rows from its configurations: cw (2, C)
    their words 0 and 2, cf (C,) the first row of each (the rows' count for unused entries), kb
    (C,) where its assignment words start in kw (-1: word 1 is word 0, one row). Rows past `take`
    repeat row 0 (evaluated, never selected)."""
    t = jnp.arange(rows, dtype=jnp.int32)
    c = jnp.cumsum(jnp.zeros(rows, jnp.int32).at[cf].add(1, mode="drop")) - 1
    real = t < take
    c = jnp.where(real, jnp.clip(c, 0, cf.shape[0] - 1), 0)
    r = jnp.where(real, t - cf[c], 0)
    w0, w2, b = cw[0, c], cw[1, c], kb[c]
    w1 = jnp.where(b < 0, w0, kw[jnp.clip(b + r, 0, kw.shape[0] - 1)])
    return jnp.stack([w0, w1, w2]), real


def monotone(f):
    """float64 -> uint64 with the same order (-0.0 below +0.0; NaN not ordered: callers mask it)."""
    bits = jax.lax.bitcast_convert_type(f, jnp.uint64)
    return jnp.where((bits >> 63) == 1, ~bits, bits | _SIGN)


def from_monotone(m):
    """`monotone` undone."""
    bits = jnp.where((m >> 63) == 1, m & ~_SIGN, ~m)
    return jax.lax.bitcast_convert_type(bits, jnp.float64)


def select(f, real, rs, k, kept, n_runs: int, n_selected: int):
    """Reduce a call's (S, rows) rank scores (`dse.explore.engine.rank_score`: -inf where a candidate does
    not fit, NaN where it has no finite throughput) per (system, run); rs (runs,) the first row of
    each run (the rows' count for unused entries); kept (S, runs) the k-th best score the search
    has kept so far for each (system, run)'s group (-inf while it has fewer). Returns (feasible
    (S, runs) int32, the number of (system, row) pairs selected, their flat indices s * rows + row
    (n_selected,) int32, their scores).

    A row is selected when its score is finite and at or above its run's floor: the larger of
    `kept` and the k-th largest score of the run with its lowest bits cut (the sort key holds the
    run in its top bits). Both are at most the k-th best of the group in the end, so every row that
    can enter the top-k, ties included, is selected; a run of fewer than k ranked rows has only
    `kept`. A group's later calls select only what beats the rows kept from its earlier ones."""
    S, rows = f.shape
    starts = jnp.minimum(rs, rows)
    ends = jnp.concatenate([starts[1:], jnp.array([rows], starts.dtype)])
    run = jnp.cumsum(jnp.zeros(rows, jnp.int32).at[rs].add(1, mode="drop")) - 1
    fits = (f != -jnp.inf) & real[None, :]
    cs = jnp.concatenate([jnp.zeros((S, 1), jnp.int32), jnp.cumsum(fits.astype(jnp.int32), axis=1)], axis=1)
    feasible = cs[:, ends] - cs[:, starts]
    ranked = (f > -jnp.inf) & (f == f) & real[None, :]
    rb = max(1, (n_runs - 1).bit_length())
    low = np.uint64((1 << (64 - rb)) - 1)
    key = (run.astype(jnp.uint64)[None, :] << np.uint64(64 - rb)) | jnp.where(ranked, monotone(f) >> np.uint64(rb), 0)
    key = jnp.sort(key, axis=1)  # by run (rows of a run are contiguous), then score ascending
    kth = key[:, jnp.clip(ends - k, 0, rows - 1)] & low  # (S, runs)
    has = ((ends - starts) >= k)[None, :] & (kth > 0)
    floor = from_monotone(kth << np.uint64(rb))
    floor = jnp.maximum(jnp.where(has & ~jnp.isnan(floor), floor, -jnp.inf), kept)
    chosen = (ranked & (f >= floor[:, run])).reshape(-1)
    at = jnp.cumsum(chosen.astype(jnp.int32)) - 1
    count = at[-1] + 1
    idx = jnp.zeros(n_selected, jnp.int32).at[jnp.where(chosen, at, n_selected)].set(
        jnp.arange(S * rows, dtype=jnp.int32), mode="drop")
    return feasible, count, idx, f.reshape(-1)[idx]


class DeviceProgram:
    """The compiled expand-evaluate-select program of one strategy, profile, network, MoE-ness,
    system count and `Capacities`."""

    def __init__(self, strategy: str, profile: Profile, network: str, moe, n_systems: int, caps: Capacities):
        self.strategy, self.profile, self.network, self.moe = strategy, profile, network, moe
        self.n_systems, self.caps = n_systems, caps
        self._compiled = None

    def _run(self, cw, cf, kb, kw, rs, take, k, kept, w: Workload, s: System):
        caps = self.caps
        words, real = expand(cw, cf, kb, kw, take, caps.rows)
        s2 = System(*(x[:, None] for x in s))
        m = evaluate_candidates(self.strategy, unpack_candidates(words), w, s2, self.profile, self.network, self.moe)
        f = jnp.broadcast_to(rank_score(m, w.global_batch), (self.n_systems, caps.rows))
        feasible, count, idx, val = select(f, real, rs, k, kept, caps.runs, caps.selected)
        h = head_size(caps)
        return feasible, count, idx, val, f, idx[:h], val[:h]

    def example(self, w: Workload, s: System) -> tuple:
        c = self.caps
        return (np.zeros((2, c.configs), np.int64), np.full(c.configs, c.rows, np.int32), np.full(c.configs, -1, np.int32),
                np.zeros(c.words, np.int64), np.full(c.runs, c.rows, np.int32), np.int32(1), np.int32(1),
                np.full((self.n_systems, c.runs), -np.inf), w, s)

    def compiled(self, w: Workload, s: System):
        if self._compiled is None:
            what = ("device_stream", self.strategy, self.profile, self.network, self.moe, self.n_systems, tuple(self.caps),
                    PACKING)  # the layout of the words lives in dse.explore.space
            self._compiled = programs.compile(jax.jit(self._run), self.example(w, s), what)
        return self._compiled


@lru_cache(maxsize=32)
def device_program(strategy: str, profile: Profile, network: str, moe, n_systems: int, caps: Capacities) -> DeviceProgram:
    return DeviceProgram(strategy, profile, network, moe, n_systems, caps)


class Call:
    """One call's inputs, filled on the host from compact pieces (`put`), and what the host keeps to
    read its results: the group of each run, and the tables to decode a selected row."""

    def __init__(self, caps: Capacities):
        self.caps = caps
        self.cw = np.zeros((2, caps.configs), np.int64)
        self.cf = np.full(caps.configs, caps.rows, np.int32)
        self.kb = np.full(caps.configs, -1, np.int32)
        self.kw = np.zeros(caps.words, np.int64)
        self.rs = np.full(caps.runs, caps.rows, np.int32)
        self.rows = self.n_configs = self.n_words = 0
        self.groups: list[int] = []  # group of each run
        self._bases: dict[int, np.ndarray] = {}  # piece serial -> where each class's list lies in kw (-1: not yet)

    def put(self, p: CompactPiece, serial: int, group: int, i: int, off: int) -> tuple[int, int]:
        """Take configurations of piece p (serial: its number in the stream) from configuration i,
        candidate `off` of it, as many as fit; returns where the piece goes on (i, off unchanged:
        the call is full)."""
        caps = self.caps
        free_rows, free_cfg = caps.rows - self.rows, caps.configs - self.n_configs
        new_run = not self.groups or self.groups[-1] != group
        if free_rows <= 0 or free_cfg <= 0 or (new_run and len(self.groups) >= caps.runs - 1):
            return i, off
        rem = p.take[i:i + free_cfg].astype(np.int64)
        rem[0] -= off
        cum = np.cumsum(rem)
        n = int(np.searchsorted(cum, free_rows, side="right"))  # configurations wholly taken
        part = 0
        if n < len(rem):
            part = free_rows - (int(cum[n - 1]) if n else 0)
            if part > 0:
                n += 1  # and the next in part
        each = rem[:n].copy()
        if part > 0:
            each[-1] = part
        start = np.zeros(n, np.int64)
        start[0] = off
        if p.kind is not None:
            bases = self._bases.setdefault(serial, np.full(len(p.kind_rows), -1, np.int64))
            kinds = p.kind[i:i + n]
            u, first = np.unique(kinds, return_index=True)
            new = bases[u] < 0
            u, first = u[new], first[new]
            order = np.argsort(first)
            u, first = u[order], first[order]
            need = np.cumsum(p.kind_rows[u])
            over = np.flatnonzero(need > caps.words - self.n_words)
            if len(over):  # the lists of classes first used from config first[over[0]] on do not fit
                n, part = int(first[over[0]]), 0
                u = u[:over[0]]
                each, start = each[:n], start[:n]
                if n == 0:
                    return i, off
            for x in u.tolist():
                lo, m = int(p.kind_start[x]), int(p.kind_rows[x])
                self.kw[self.n_words:self.n_words + m] = p.lists[lo:lo + m]
                bases[x] = self.n_words
                self.n_words += m
            kb = bases[kinds[:n]] + start
        else:
            kb = np.full(n, -1, np.int64)
        if new_run:
            self.rs[len(self.groups)] = self.rows
            self.groups.append(group)
        a, b = self.n_configs, self.n_configs + n
        self.cw[0, a:b], self.cw[1, a:b] = p.w0[i:i + n], p.w2[i:i + n]
        self.cf[a:b] = self.rows + np.cumsum(each) - each
        self.kb[a:b] = kb
        self.rows += int(each.sum())
        self.n_configs = b
        if part > 0 and n and each[-1] < rem[n - 1]:  # the last configuration goes on in the next call
            return i + n - 1, (off if n == 1 else 0) + int(each[-1])
        return i + n, 0

    def close(self) -> None:
        """The padding rows past the last run form a run of their own (never counted)."""
        if self.rows < self.caps.rows:
            self.rs[len(self.groups)] = self.rows

    def kept(self, threshold: np.ndarray, n_sys: int) -> np.ndarray:
        """(S, runs) the k-th best score kept so far of each (system, run)'s segment (`TopK.threshold`,
        segments group x n_sys + system), -inf past the runs used."""
        out = np.full((n_sys, self.caps.runs), -np.inf)
        seg = np.asarray(self.groups, np.int64)[None, :] * n_sys + np.arange(n_sys)[:, None]
        out[:, :len(self.groups)] = threshold[seg]
        return out

    def decode(self, t: np.ndarray) -> np.ndarray:
        """Packed words (len(t), PACKED_WORDS) of rows t."""
        c = np.searchsorted(self.cf[:self.n_configs], t, side="right") - 1
        w0, w2, b = self.cw[0, c], self.cw[1, c], self.kb[c]
        w1 = np.where(b < 0, w0, self.kw[np.maximum(b, 0) + t - self.cf[c]])
        return np.stack([w0, w1, w2], axis=1)

    def run_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(first row, rows) of each run."""
        starts = self.rs[:len(self.groups)].astype(np.int64)
        return starts, np.diff(np.append(starts, self.rows))


class _Rows:
    """A call as `dse.explore.stream._reduce` reads a chunk: the group of each row, and rows by index."""

    def __init__(self, call: Call):
        starts, lengths = call.run_bounds()
        self.groups = np.repeat(np.asarray(call.groups, np.int64), lengths)
        self.rows = call.decode


def fallback(call: Call, f: np.ndarray, topk, n_cand, n_feas, reduce: Callable) -> None:
    """Reduce a call on the host from its full (S, rows) scores with the host path's `reduce`
    (`dse.explore.stream._reduce`: a chunk's scores and block summaries, the chunk, its rows taken, ...)."""
    take = call.rows
    pad = -(-take // BLOCK) * BLOCK
    score = np.full((f.shape[0], pad), -np.inf)
    score[:, :take] = f[:, :take]
    top, fits = block_summaries(score, xp=np)
    reduce({SCORE: score, BLOCK_MAX: top, BLOCK_FEASIBLE: fits}, _Rows(call), take, topk, n_cand, n_feas)


def fold(call: Call, out, topk, n_cand, n_feas, stats: dict, reduce: Callable) -> None:
    """Fold a call's results into the top-k and the counts (`fallback` when its selection overflowed)."""
    t0 = time.perf_counter()
    count = int(out[1])  # waits for the call
    stats["wait_s"] += time.perf_counter() - t0
    stats["calls"] += 1
    if count > call.caps.selected:
        stats["fallbacks"] += 1
        fallback(call, np.asarray(out[4]), topk, n_cand, n_feas, reduce)
        return
    count, feasible, idx, val = fetch(out, call.caps)
    starts, lengths = call.run_bounds()
    groups = np.asarray(call.groups, np.int64)
    np.add.at(n_cand, groups, lengths)
    feasible = feasible[:, :len(groups)].astype(np.int64)
    np.add.at(n_feas, (slice(None), groups), feasible)
    if count == 0:
        return
    sys_of, t = np.divmod(idx.astype(np.int64), call.caps.rows)
    run = np.searchsorted(starts, t, side="right") - 1
    n_sys = n_feas.shape[0]
    topk.add(groups[run] * n_sys + sys_of, val, call.decode(t))
    stats["selected"] += count


def run_stream(pieces, gid: Callable[[int, int], int], prog: DeviceProgram, workload: Workload, systems: System,
               topk, n_cand, n_feas, reduce: Callable, on_call: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Stream compact pieces ((n, nvs, CompactPiece), group by group) through `prog`: calls filled on
    the host, dispatched without waiting, each folded while the next one runs (`reduce`: the host
    path's reduction, for a call whose selection overflowed). Returns the stream's statistics
    (calls, fallbacks, rows selected, seconds waited for calls)."""
    caps = prog.caps
    run = prog.compiled(workload, systems)
    w, s = jax.device_put(workload), jax.device_put(systems)
    k = np.int32(topk.k)
    stats = {"calls": 0, "fallbacks": 0, "selected": 0, "wait_s": 0.0}
    pending = None

    def dispatch(call: Call) -> None:
        nonlocal pending
        call.close()
        kept = call.kept(topk.threshold, prog.n_systems)  # as of the calls folded so far: a floor, never too high
        out = run(call.cw, call.cf, call.kb, call.kw, call.rs, np.int32(call.rows), k, kept, w, s)
        before, pending = pending, (call, out)
        if before is not None:
            fold(*before, topk, n_cand, n_feas, stats, reduce)
            if on_call is not None:
                on_call(before[0].rows)

    call = Call(caps)
    for serial, (n, nvs, piece) in enumerate(pieces):
        group = gid(n, nvs)
        i, off = 0, 0
        while i < len(piece.take):
            j, o = call.put(piece, serial, group, i, off)
            if (j, o) == (i, off):
                if not call.rows:  # cannot happen with `capacities`: a class's list is at most ~1000 words
                    raise RuntimeError(f"a call of capacities {caps} cannot take configuration {i} of a piece")
                dispatch(call)
                call = Call(caps)
            i, off = j, o
    if call.rows:
        dispatch(call)
    if pending is not None:
        fold(*pending, topk, n_cand, n_feas, stats, reduce)
        if on_call is not None:
            on_call(pending[0].rows)
    return stats
