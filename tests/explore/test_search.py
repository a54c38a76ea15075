"""The chunked search (spec section 7.4): top-10 parity with the reference, counts, hardware axis,
chunk independence, full rows and the deterministic tie-break."""

from __future__ import annotations

import importlib
import time

import jax
import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse.explore.engine import METRIC_COLUMNS
from dse.truth.reference import relative_error
from dse.explore.search import run_search
from dse.explore.stream import unpack_rows
from dse.explore.topk import TopK
from dse.explore.packing import pack
from dse.explore.placement import Piece, enumerate_space
from dse.explore.space import COLUMNS, Question
from dse.spec.specs import load_system

stream_mod = importlib.import_module("dse.explore.stream")

POW2 = [1 << k for k in range(2, 15)]
_SEARCHES: dict = {}


def reference_search(ref):
    """One search per reference file, every power of two 4 ... 16384, profile lbnl (memoized)."""
    if ref.name not in _SEARCHES:
        _SEARCHES[ref.name] = run_search(model=ref.model, system="b200", nvs_size=ref.nvs, strategy=ref.strategy,
                                         n_gpus="pow2:4:16384", profile="lbnl")
    return _SEARCHES[ref.name]


def find(reference_files, strategy, model, nvs):
    return next(r for r in reference_files if (r.strategy, r.model, r.nvs) == (strategy, model, nvs))


def test_top10_matches_reference(ref_file):
    res = reference_search(ref_file)
    top = res.top
    assert set(top["nvs_size"].to_list()) <= {ref_file.nvs}
    assert top["feasible"].all()
    listed = {n for n in ref_file.n_gpus if any(e["n_gpus"] == n for e in ref_file.entries)}
    # the reference lists GPU counts from the first feasible one
    if ref_file.n_gpus:
        assert ref_file.n_gpus == [n for n in POW2 if n >= ref_file.n_gpus[0]]
    for n in POW2:
        got = top.filter(pl.col("n_gpus") == n).sort("rank")
        if n not in listed:
            assert got.is_empty(), f"n={n}: the reference has no feasible configuration"
            continue
        exp = [e for e in ref_file.entries if e["n_gpus"] == n]
        assert len(got) == len(exp), f"n={n}"
        assert got["rank"].to_list() == list(range(1, len(exp) + 1))
        for c in COLUMNS:
            assert got[c].to_list() == [e[c] for e in exp], f"n={n} column {c}"
        for g, e in zip(got["throughput"].to_list(), exp):
            assert relative_error(g, e["expected"]["throughput"]) <= 1e-9
        assert got["throughput"].to_list() == sorted(got["throughput"].to_list(), reverse=True)
    # every group of the question is counted, feasible or not
    counts = res.counts
    assert counts["n_gpus"].to_list() == POW2
    assert (counts["candidates"] == counts["feasible"] + counts["infeasible"]).all()
    for n in POW2:
        row = counts.filter(pl.col("n_gpus") == n).row(0, named=True)
        assert (row["feasible"] > 0) == (n in listed)
        assert row["feasible"] >= len(top.filter(pl.col("n_gpus") == n))


# spec section 7.5: GPT3-1T, n = 16384, candidates and those fitting in 192 GB on B200
SPEC_COUNTS = {
    ("tp1d", 8): (2027, 1340), ("tp1d", 64): (3816, 2637),
    ("summa", 8): (54662, 52773), ("summa", 64): (115938, 113878),
    ("tp2d", 8): (22696, 15537), ("tp2d", 64): (49897, 35601),
}


@pytest.mark.parametrize("strategy,nvs", sorted(SPEC_COUNTS))
def test_feasible_counts_from_spec(strategy, nvs, reference_files):
    res = reference_search(find(reference_files, strategy, "gpt3_1t", nvs))
    row = res.counts.filter(pl.col("n_gpus") == 16384).row(0, named=True)
    assert (row["candidates"], row["feasible"]) == SPEC_COUNTS[(strategy, nvs)]


def test_counts_equal_evaluate_many(reference_files, gpt3_1t):
    """Feasible counts of the search = feasible rows of `evaluate_many` over the enumerated groups."""
    q = Question(gpt3_1t, "tp1d", 4096, "lbnl")
    groups = [(8, 4096), (8, 16384), (64, 4096), (64, 16384)]
    tables = [enumerate_space(q, n, nvs) for nvs, n in groups]
    table = {c: np.concatenate([t[c] for t in tables]) for c in COLUMNS}
    out = dse.evaluate_many(table, model="gpt3_1t", system="b200", nvs_size=64, strategy="tp1d", profile="lbnl")
    feasible = out["feasible"].to_numpy()
    start = 0
    for (nvs, n), t in zip(groups, tables):
        k = len(t["n1"])
        res = reference_search(find(reference_files, "tp1d", "gpt3_1t", nvs))
        row = res.counts.filter(pl.col("n_gpus") == n).row(0, named=True)
        assert row["candidates"] == k
        assert row["feasible"] == int(feasible[start:start + k].sum())
        start += k


def test_empty_search_has_the_columns(reference_files):
    empty = dse.search(model="vit_era5", strategy="tp1d", n_gpus=4096, nvs_size=8, profile="lbnl")
    full = dse.search(model="gpt3_1t", strategy="tp1d", n_gpus=4096, nvs_size=8, profile="lbnl", top_k=3)
    assert empty.is_empty() and len(full) == 3
    assert empty.schema == full.schema
    assert full.columns[:7] == ["model", "strategy", "network", "system", "nvs_size", "n_gpus", "rank"]
    for c in list(COLUMNS) + list(METRIC_COLUMNS) + ["training_days"]:
        assert c in full.columns
    vit = reference_search(find(reference_files, "tp1d", "vit_era5", 8)).top
    gpt = reference_search(find(reference_files, "tp1d", "gpt3_1t", 8)).top
    assert vit.is_empty() and vit.schema == gpt.schema


# -------------------------------------------------------------------------------------------------
# hardware axis, chunking, rows

GRID = {"hbm_capacity": [96.0, 192.0], "hbm_bandwidth": [4000.0, 8000.0]}
SAME = ["model", "strategy", "system", "nvs_size", "n_gpus", "rank"] + list(COLUMNS) + list(METRIC_COLUMNS) + [
    "training_days"]


def test_hardware_axis_equals_separate_searches(reference_files):
    """Two presets crossed with a 2 x 2 grid: eight systems in one search, each point's top rows
    identical (bitwise) to a search of that system alone."""
    kw = dict(model="gpt3_1t", strategy="tp1d", nvs_size=8, n_gpus="pow2:256:16384", profile="lbnl")
    res = run_search(system=["b200", "h200"], grid=GRID, **kw)
    points = res.top.select("system_id", "system", "hbm_capacity", "hbm_bandwidth").unique().sort("system_id").rows()
    assert [p[1:] for p in points] == [(s, c, b) for s in ("b200", "h200") for c in GRID["hbm_capacity"]
                                       for b in GRID["hbm_bandwidth"]]
    assert res.counts["system_id"].n_unique() == 8
    tops = []
    for sid, name, cap, bw in points:
        alone = run_search(system=load_system(name).replace(hbm_capacity=cap, hbm_bandwidth=bw), **kw).top
        mine = res.top.filter(pl.col("system_id") == sid)
        assert len(mine) == len(alone) > 0
        assert mine.select(SAME).equals(alone.select(SAME)), (name, cap, bw)
        tops.append(mine.select(COLUMNS))
    assert not tops[0].equals(tops[3])  # the grid points do give different answers
    # the plain B200 point is the reference search
    base = reference_search(find(reference_files, "tp1d", "gpt3_1t", 8)).top.filter(pl.col("n_gpus") >= 256)
    assert res.top.filter(pl.col("system_id") == 3).select(SAME).equals(base.select(SAME))


def test_chunk_size_independence(reference_files):
    ref = find(reference_files, "summa", "gpt3_1t", 8)
    small = run_search(model=ref.model, system="b200", nvs_size=8, strategy="summa", n_gpus="pow2:4:16384",
                       profile="lbnl", chunk=4096)
    big = reference_search(ref)
    assert small.stats["candidates"] == big.stats["candidates"] > 50 * 4096
    assert small.top.equals(big.top)
    assert small.counts.equals(big.counts)


def test_keep_rows_equals_evaluate_many(gpt3_1t):
    grid = {"hbm_capacity": [96.0, 192.0]}
    res = run_search(model="gpt3_1t", system="b200", strategy="tp1d", nvs_size=8, n_gpus=[4096, 16384],
                     profile="lbnl", grid=grid, keep_rows=True)
    q = Question(gpt3_1t, "tp1d", 4096, "lbnl")
    tables = [enumerate_space(q, n, 8) for n in (4096, 16384)]
    k = sum(len(t["n1"]) for t in tables)
    assert k == 2544 + 2027  # spec section 7.5 / lbnl_candidate_counts.txt
    rows = res.rows
    assert len(rows) == 2 * k
    key = ["n_gpus"] + list(COLUMNS)
    for sid, cap in enumerate(grid["hbm_capacity"]):
        mine = rows.filter(pl.col("system_id") == sid).sort(key)
        assert (mine["hbm_capacity"] == cap).all()
        table = {c: np.concatenate([t[c] for t in tables]) for c in COLUMNS}
        exp = dse.evaluate_many(table, model="gpt3_1t", system=load_system("b200").replace(hbm_capacity=cap),
                                nvs_size=8, strategy="tp1d", profile="lbnl").sort(key)
        for c in key:
            assert mine[c].equals(exp[c]), c
        for c in list(METRIC_COLUMNS) + ["training_days"]:
            assert np.array_equal(mine[c].to_numpy(), exp[c].to_numpy()), c
        counted = res.counts.filter(pl.col("system_id") == sid)["feasible"].sum()
        assert counted == int(mine["feasible"].sum())
    assert rows.filter(pl.col("system_id") == 0)["feasible"].sum() < rows.filter(pl.col("system_id") == 1)[
        "feasible"].sum()


# -------------------------------------------------------------------------------------------------
# top-k and ties


def brute_topk(seg, score, cols, k, n_seg):
    out = []
    for s in range(n_seg):
        idx = [i for i in range(len(seg)) if seg[i] == s and np.isfinite(score[i])]
        idx.sort(key=lambda i: (-score[i], tuple(cols[i])))
        out += [(s, score[i], tuple(cols[i])) for i in idx[:k]]
    return out


def topk_rows(t: TopK):
    return [(int(s), float(v), tuple(int(x) for x in c)) for s, v, c in zip(t.seg, t.score, t.cols)]


def test_topk_tie_break_constructed():
    k = 3
    cols = np.array([[4, 1, 1, 1, 1, 1, 1, 1, 1, 1],
                     [2, 2, 1, 1, 1, 1, 1, 1, 1, 1],
                     [2, 1, 8, 1, 1, 1, 1, 1, 1, 1],
                     [2, 1, 4, 1, 1, 1, 1, 1, 1, 1],
                     [1, 9, 9, 9, 1, 1, 1, 1, 1, 1],
                     [8, 1, 1, 1, 1, 1, 1, 1, 1, 1]], dtype=np.int64)
    score = np.array([10.0, 10.0, 10.0, 10.0, 9.0, 11.0])
    seg = np.zeros(6, dtype=np.int64)
    # 11 first; then the ties at 10 by candidate columns ascending: (2,1,4,...) < (2,1,8,...) < (2,2,...)
    expected = [(0, 11.0, tuple(cols[5])), (0, 10.0, tuple(cols[3])), (0, 10.0, tuple(cols[2]))]
    for order in ([0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [2, 0, 5, 1, 3, 4]):
        for split in (1, 2, 6):
            t = TopK(k, 1)
            o = np.array(order)
            for lo in range(0, 6, split):
                i = o[lo:lo + split]
                t.add(seg[i], score[i], cols[i])
            assert topk_rows(t) == expected, (order, split)


def test_topk_ignores_non_finite():
    t = TopK(2, 2)
    cols = np.arange(40, dtype=np.int64).reshape(4, 10)
    t.add(np.array([0, 0, 1, 1]), np.array([-np.inf, 1.0, np.nan, 2.0]), cols)
    assert topk_rows(t) == [(0, 1.0, tuple(cols[1])), (1, 2.0, tuple(cols[3]))]


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_topk_matches_brute_force(data):
    n = data.draw(st.integers(1, 80))
    k = data.draw(st.integers(1, 6))
    n_seg = data.draw(st.integers(1, 6))
    seg = np.array(data.draw(st.lists(st.integers(0, n_seg - 1), min_size=n, max_size=n)), dtype=np.int64)
    score = np.array(data.draw(st.lists(st.sampled_from([1.0, 2.0, 3.0, -np.inf]), min_size=n, max_size=n)))
    cols = np.array(data.draw(st.lists(st.lists(st.integers(1, 3), min_size=10, max_size=10), min_size=n,
                                       max_size=n, unique_by=tuple)), dtype=np.int64).reshape(n, 10)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=4)))
    bucket = data.draw(st.integers(1, 4))  # rows kept in buckets of 1-4 segments
    t = TopK(k, n_seg, bucket=bucket)
    # the same rows offered as packed candidate words (16 columns: the 10 drawn, then ones)
    wide = np.concatenate([cols, np.ones((n, len(COLUMNS) - 10), dtype=np.int64)], axis=1)
    packed = TopK(k, n_seg, bucket=bucket, columns=unpack_rows)
    words = pack(wide.T).T
    for lo, hi in zip([0] + cuts, cuts + [n]):
        if hi > lo:
            t.add(seg[lo:hi], score[lo:hi], cols[lo:hi])
            packed.add(seg[lo:hi], score[lo:hi], words[lo:hi])
    assert topk_rows(t) == brute_topk(seg, score, cols, k, n_seg)
    assert topk_rows(packed) == brute_topk(seg, score, wide, k, n_seg)


def test_every_row_is_the_same_in_pipelined_chunks():
    """Chunks are evaluated while the next fills (two buffers in turn): every row, in stream order,
    and the top rows are the same with many small chunks as with one."""
    kw = dict(model="gpt3_1t", system="b200", strategy="tp2d", nvs_size=8, n_gpus=[1024, 4096], profile="lbnl",
              keep_rows=True)
    one = run_search(**kw)
    many = run_search(**kw, chunk=1024)
    assert len(one.rows) == one.stats["candidates"] > 8 * 1024
    assert many.rows.equals(one.rows)
    assert many.top.equals(one.top) and many.counts.equals(one.counts)


#: the MoE space compiles a packed and a plain MoE search program (tens of seconds): it runs with
#: -m slow; the default suite checks its packed pieces in tests/explore/test_space.py
#: (`test_packed_pieces_are_the_candidates`, mixtral_8x7b)
@pytest.mark.parametrize("kw", [
    dict(model="gpt3_1t", system="b200", strategy="tp2d", nvs_size=[8, 64], n_gpus=[96, 1024, 4096], profile="lbnl"),
    pytest.param(dict(model="mixtral_8x7b", system="dgx_h100", strategy="tp1d", nvs_size=8, n_gpus=[64, 256],
                      profile="default", global_batch=512), marks=pytest.mark.slow),
])
def test_packed_and_plain_candidates_give_the_same_search(kw, monkeypatch):
    """A search whose candidates fit the packed words (`dse.explore.packing.packs`) streams them packed;
    with packing turned off it streams the columns: every row, the top rows and the counts are
    the same, in several chunks (the lbnl spaces and a default-profile MoE one: context
    parallelism, expert degrees, interleaving, recompute and ZeRO stages)."""
    kernels = []
    real = stream_mod.search_kernel

    def spy(*a, **k):
        kernels.append(real(*a, **k))
        return kernels[-1]

    monkeypatch.setattr(stream_mod, "search_kernel", spy)
    packed = run_search(**kw, keep_rows=True, chunk=2048)
    monkeypatch.setattr(stream_mod, "PACK_CANDIDATES", False)  # what `dse bench --columns` does
    plain = run_search(**kw, keep_rows=True, chunk=2048)
    assert [k.packed for k in kernels] == [True, False]
    assert len(plain.rows) == plain.stats["candidates"] > 3 * 2048
    assert packed.rows.equals(plain.rows)
    assert packed.top.equals(plain.top) and packed.counts.equals(plain.counts)


def test_an_error_in_a_row_sink_leaves_nothing_running(monkeypatch):
    """A search of several chunks dispatches their calls in a worker thread (one per process,
    shared by searches); an error raised while the search folds a chunk in (here the caller's row
    sink) reaches the caller only after the chunk in flight has been dispatched and evaluated, so
    nothing of the search runs on, and the next search finds the worker free."""
    started, done = [], []
    dispatch = stream_mod._dispatch

    def slow(*args):
        started.append(1)
        time.sleep(0.2)  # still dispatching when the sink raises
        out = dispatch(*args)
        done.append(out[0])
        return out

    monkeypatch.setattr(stream_mod, "_dispatch", slow)
    calls = []

    def sink(frame):
        calls.append(len(frame))
        raise ValueError("the sink is full")

    kw = dict(model="gpt3_1t", system="b200", strategy="tp2d", nvs_size=8, n_gpus=[1024, 4096], profile="lbnl")
    with pytest.raises(ValueError, match="the sink is full"):
        run_search(**kw, keep_rows=sink, chunk=1024)
    assert calls == [32768]  # the first chunk's rows (a call of 32,768 candidates), then the error
    assert len(started) == 2 and len(done) == 2  # the second chunk was in flight, and was waited for
    assert all(x.is_ready() for pending in done for x in jax.tree.leaves(pending))
    monkeypatch.setattr(stream_mod, "_dispatch", dispatch)
    again = run_search(**kw, keep_rows=lambda frame: None, chunk=1024)  # the worker is free (the same program)
    assert again.stats["candidates"] > 32768 and again.stats["eval_s"] > 0


def test_search_stats_split_the_wall_time_into_head_stream_and_tail():
    """A search's wall time is the sum of its phases: before the first chunk is launched (compiling
    or loading the program included), the stream (which holds every wait for an evaluated chunk),
    and after it; a search without a candidate has no stream."""
    kw = dict(model="gpt3_1t", system="b200", strategy="tp2d", nvs_size=8, profile="lbnl")
    for chunk in (1024, None):  # several chunks (a worker thread), and one
        st = run_search(**kw, n_gpus=[1024, 4096], chunk=chunk).stats
        assert min(st["head_s"], st["stream_s"], st["tail_s"]) > 0
        assert st["head_s"] + st["stream_s"] + st["tail_s"] == pytest.approx(st["wall_s"], rel=1e-12)
        assert st["eval_s"] <= st["stream_s"] and st["compile_s"] <= st["head_s"]
    st = run_search(**kw, n_gpus=[3]).stats  # 3 GPUs in domains of 8: no candidate
    assert st["candidates"] == 0 and st["stream_s"] == 0 and st["head_s"] > 0 and st["tail_s"] > 0


def test_rank_score_and_its_reduction_with_unrankable_rows():
    """`rank_score`: throughput where memory fits, -inf where not, NaN where it fits without a
    finite throughput. `_reduce` counts NaN rows as feasible, never ranks them, and a run with at
    least k of them still keeps its best finite rows (the k-th by partition is NaN there)."""
    from types import SimpleNamespace

    from dse.explore.engine import BLOCK, BLOCK_FEASIBLE, BLOCK_MAX, SCORE, block_summaries, rank_score
    from dse.explore.stream import _Chunk, _reduce
    from dse.explore.topk import TopK
    from kernels.params import Metrics

    t = np.array([0.5, 0.0, np.nan, 2.0, np.inf, 0.25, np.nan, 4.0])
    fits = np.array([True, True, True, False, True, True, True, True])
    import jax.numpy as jnp

    m = Metrics(*[jnp.zeros(8)] * len(Metrics._fields))._replace(iteration_time=jnp.asarray(t), feasible=jnp.asarray(fits))
    score = np.asarray(rank_score(m, 8.0))  # as in the kernel: JAX arrays
    np.testing.assert_array_equal(score, [16.0, np.nan, np.nan, -np.inf, 0.0, 32.0, np.nan, 2.0])

    kern = SimpleNamespace(chunk=8, n_devices=1, block_shape=(1, len(COLUMNS), 8), packed=False)
    chunk = _Chunk(8, kern)
    table = np.tile(np.arange(8, dtype=np.int64), (len(COLUMNS), 1))  # row i: every column = i
    chunk.put(Piece.of(table), 0, 0)
    topk, n_cand, n_feas = TopK(2, 1), np.zeros(1, dtype=np.int64), np.zeros((1, 1), dtype=np.int64)
    padded = np.concatenate([score, np.full(BLOCK - 8, 1e9)])[None, :]  # the call's padding: never read
    bmax, bfeas = block_summaries(padded, xp=np)
    _reduce({SCORE: padded, BLOCK_MAX: bmax, BLOCK_FEASIBLE: bfeas}, chunk, 8, topk, n_cand, n_feas)
    assert n_cand.tolist() == [8] and n_feas.tolist() == [[7]]
    assert topk.score.tolist() == [32.0, 16.0] and topk.cols[:, 0].tolist() == [5, 0]


def test_block_cut_keeps_exactly_the_brute_force_top_k():
    """`_reduce` on runs of groups that start and end inside blocks, with ties, NaN and -inf, and
    garbage past `take` (a padded call): its top-k and counts equal sorting every (system, group)
    by hand, for k below, at and above the number of whole blocks in a run (k = 50: every run read row
    by row), with and without ties."""
    from types import SimpleNamespace

    from dse.explore.engine import BLOCK, BLOCK_FEASIBLE, BLOCK_MAX, SCORE, block_summaries
    from dse.explore.stream import _Chunk, _reduce

    rng = np.random.default_rng(7)
    size, n_sys = 16 * BLOCK, 3
    kern = SimpleNamespace(chunk=size, n_devices=1, block_shape=(1, len(COLUMNS), size), packed=False)
    lengths = [5, BLOCK + 3, 3 * BLOCK - 7, 1, 7 * BLOCK + 11, 2 * BLOCK]  # groups 0..5, in turn
    take = sum(lengths)
    assert take < size
    for k, tied in [(1, True), (3, True), (10, True), (3, False), (10, False), (50, True), (50, False)]:
        chunk = _Chunk(size, kern)
        for gi, n in enumerate(lengths):
            rows = np.arange(chunk.fill, chunk.fill + n, dtype=np.int64)
            chunk.put(Piece.of(np.stack([rows // 7] + [rows] * (len(COLUMNS) - 1))), 0, gi)
        if tied:  # ties everywhere: the columns decide
            score = rng.choice([1.0, 2.0, 3.0, 5.0, 8.0, np.nan, -np.inf], size=(n_sys, size))
        else:  # distinct scores: the merge's two-key sort is the whole order
            score = np.where(rng.random((n_sys, size)) < 0.2, -np.inf, rng.random((n_sys, size)))
        score[:, take:] = 1e9  # the padded call's tail: never read
        score[1, 70:200] = -np.inf  # a stretch of whole blocks where nothing fits
        bmax, bfeas = block_summaries(score, xp=np)
        topk = TopK(k, n_sys * len(lengths))
        n_cand, n_feas = np.zeros(len(lengths), dtype=np.int64), np.zeros((n_sys, len(lengths)), dtype=np.int64)
        _reduce({SCORE: score, BLOCK_MAX: bmax, BLOCK_FEASIBLE: bfeas}, chunk, take, topk, n_cand, n_feas)
        assert n_cand.tolist() == lengths
        cols = chunk.table(take)[:-1].T
        first = np.cumsum([0] + lengths)
        for s in range(n_sys):
            for gi in range(len(lengths)):
                sc = score[s, first[gi]:first[gi + 1]]
                assert n_feas[s, gi] == int(np.sum(sc != -np.inf))
                ranked = sorted((-v, tuple(cols[first[gi] + i])) for i, v in enumerate(sc) if np.isfinite(v))[:k]
                seg = topk.seg == gi * n_sys + s
                got = [(-v, tuple(c)) for v, c in zip(topk.score[seg], topk.cols[seg])]
                assert got == ranked, (k, s, gi)


def test_stream_sizes_per_platform_and_search_size():
    """CPU: a small search in chunks of 2^18 candidates x systems and calls of 2^15, one whose size
    is bounded by 2^21 evaluations or more in chunks of 2^19 and calls of 2^17 (the bench's
    figures); an accelerator: a small search in chunks of 2^18 and calls of 2^16, a large one in
    one call per chunk of 2^20; a search on this machine uses the CPU's."""
    small, large = (1 << 18, 1 << 15), (1 << 19, 1 << 17)
    assert stream_mod.stream_sizes("cpu") == stream_mod.stream_sizes("cpu", (1 << 21) - 1) == small
    assert stream_mod.stream_sizes("cpu", 1 << 21) == stream_mod.stream_sizes("cpu", 10**9) == large
    for platform in ("gpu", "rocm"):
        assert stream_mod.stream_sizes(platform) == stream_mod.stream_sizes(platform, (1 << 21) - 1) == (1 << 18, 1 << 16)
        assert stream_mod.stream_sizes(platform, 1 << 21) == stream_mod.stream_sizes(platform, 10**9) == (1 << 20, 1 << 20)
    assert stream_mod.stream_sizes() == small and stream_mod.stream_sizes(evaluations=10**9) == large
    unit = dse.explore.engine.CPU_UNIT * len(jax.devices())  # calls are whole units per host device
    prof = dse.explore.engine.profile_of("lbnl")
    for evaluations, call in ((None, small[1]), (10**5, small[1]), (10**9, large[1])):
        kern = stream_mod.search_kernel("tp1d", prof, 18, evaluations=evaluations)
        assert kern.chunk == -(-(call // 18) // unit) * unit
    assert stream_mod.default_chunk(18, 10**5) == 10**5 // 18  # no more than the search holds
    assert stream_mod.default_chunk(18, (1 << 21) - 1) == small[0] // 18
    assert stream_mod.default_chunk(18, 10**9) == large[0] // 18


def test_a_search_is_the_same_in_either_stream_size(monkeypatch):
    """The small and the large stream sizes (calls of 2^15 and 2^17 candidates x systems) give the
    same rows, top rows and counts: a call's size changes the program's shape, not its arithmetic."""
    kw = dict(model="gpt3_1t", system=["b200", "h200"], strategy="tp2d", nvs_size=[8, 64], n_gpus=[512, 4096],
              profile="lbnl", keep_rows=True)
    calls, real = [], stream_mod.search_kernel

    def spy(*a, **k):
        kern = real(*a, **k)
        calls.append(kern.chunk)
        return kern

    monkeypatch.setattr(stream_mod, "search_kernel", spy)
    runs = []
    for sizes in ((1 << 18, 1 << 15), (1 << 19, 1 << 17)):
        monkeypatch.setattr(stream_mod, "STREAM_SIZES", sizes)
        runs.append(run_search(**kw))
    assert calls == [(1 << 15) // 2, (1 << 17) // 2]  # candidates per call of each program (2 systems)
    small, large = runs
    assert len(small.rows) == small.stats["evaluations"] > 1 << 17
    assert small.rows.equals(large.rows)
    assert small.top.equals(large.top) and small.counts.equals(large.counts)


def test_lbnl_with_its_quirks_fixed_keeps_the_reference_space():
    """`dse profiles` compares each fix of the reference's quirks on lbnl's candidates: a quirk
    switched off changes a cost term, not the enumeration; any other switch leaves lbnl's rule."""
    from dse.explore.engine import space_profile
    from kernels.params import PROFILES, REFERENCE_QUIRKS

    lbnl = PROFILES["lbnl"]
    assert space_profile(lbnl) == "lbnl"
    for quirk in REFERENCE_QUIRKS:
        assert space_profile(lbnl._replace(**{quirk: False})) == "lbnl"
    assert space_profile(lbnl._replace(**{q: False for q in REFERENCE_QUIRKS})) == "lbnl"
    assert space_profile(lbnl._replace(max_interleave=4)) == "default"
    assert space_profile(PROFILES["default"]) == "default"
