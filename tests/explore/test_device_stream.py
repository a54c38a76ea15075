"""The accelerator's stream (`dse.explore.device_stream`): compact pieces, the in-program expansion and
reduction against brute force, and whole searches against the host path (on the CPU, forced)."""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from polars.testing import assert_frame_equal

from dse.explore import device_stream as ds
from dse.runtime import float64
from dse.explore.packing import pack
from dse.explore.pieces import iter_pieces
from dse.explore.placement import compact_piece, placement_piece, _FACTOR
from dse.explore.space import Question, configurations
from dse.explore.engine import profile_of, space_options
from dse.spec.specs import load_model

search_mod = importlib.import_module("dse.explore.search")
stream_mod = importlib.import_module("dse.explore.stream")


def _question(strategy="tp1d", profile="default", model="gpt3_1t"):
    prof = profile_of(profile)
    return Question(load_model(model), strategy, 4096, **space_options(prof))


@pytest.mark.parametrize("strategy,profile,n,nvs", [
    ("tp1d", "default", 4096, 8),     # NVS divides n: every factorisation of 8
    ("tp2d", "lbnl", 1024, 64),       # four-part placements
    ("summa", "lbnl", 64, 64),        # one domain holds the job: word 1 is word 0
    ("tp1d", "default", 96, 64),      # NVS does not divide n: domains of the largest divisor, 48
    ("tp1d", "default", 8, 72),       # fewer GPUs than a domain
])
def test_compact_piece_holds_the_rows_of_placement_piece(strategy, profile, n, nvs):
    q = _question(strategy, profile)
    cfg = configurations(q, n)
    words = pack({**cfg, **dict.fromkeys(_FACTOR, np.int64(0))})
    full = placement_piece(q, cfg, n, nvs, words=words)
    compact = compact_piece(q, cfg, n, nvs, words)
    assert compact.rows == full.rows > 0
    assert np.array_equal(compact.table(), full.table())
    assert (compact.take > 0).all() and len(compact.take) <= len(cfg["n1"])


@float64
def test_monotone_keys_order_floats_and_invert():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-300, 300, 200),
                        [0.0, -0.0, np.inf, -np.inf, 5e-324, -5e-324, 1.0, -1.0]])
    keys = np.asarray(ds.monotone(jnp.asarray(x)))
    order = np.argsort(keys, kind="stable")
    assert np.all(np.diff(x[order]) >= 0)
    back = np.asarray(ds.from_monotone(jnp.asarray(keys)))
    assert np.array_equal(back.view(np.int64), x.view(np.int64))  # bit for bit, -0.0 too


def _brute_force(f, real, starts, ends, k):
    """Per (system, run): feasible count, and the k-th largest ranked score (-inf with fewer than k)."""
    S = f.shape[0]
    feas = np.zeros((S, len(starts)), np.int64)
    kth = np.full((S, len(starts)), -np.inf)
    for s in range(S):
        for r, (a, b) in enumerate(zip(starts, ends)):
            seg = f[s, a:b][real[a:b]]
            feas[s, r] = np.count_nonzero(seg != -np.inf)
            ranked = np.sort(seg[np.isfinite(seg)])
            if len(ranked) >= k:
                kth[s, r] = ranked[-k]
    return feas, kth


@pytest.mark.parametrize("seed", range(6))
def test_select_keeps_every_row_that_can_enter_the_top_k(seed):
    """Against brute force on scores with many ties, -inf (does not fit) and NaN (no finite
    throughput: counted as fitting, never ranked), some runs with a score already kept: the
    feasible counts are exact; every ranked row at or above the larger of its run's k-th best and
    the kept score is selected, ties included; nothing below the kept score, nor far below the k-th."""
    rng = np.random.default_rng(seed)
    S, rows, n_runs, cap = 3, 256, 16, 1024
    k = int(rng.choice([1, 2, 5, 10]))
    f = rng.choice([1.0, 2.0, 2.5, 3.0, 7.25, 1e-3, 4e5], size=(S, rows)) * rng.choice([1, 1, 1 + 1e-12], size=(S, rows))
    f[rng.random((S, rows)) < 0.2] = -np.inf
    f[rng.random((S, rows)) < 0.05] = np.nan
    take = int(rng.integers(rows // 2, rows + 1))
    used = int(rng.integers(1, n_runs - 1))
    cuts = np.sort(rng.choice(np.arange(1, take), size=used - 1, replace=False)) if used > 1 else np.zeros(0, int)
    starts = np.concatenate([[0], cuts]).astype(np.int32)
    rs = np.full(n_runs, rows, np.int32)
    rs[:used] = starts
    if take < rows:
        rs[used] = take  # the padding's own run
    real = np.arange(rows) < take
    ends = np.append(starts[1:], take)

    kept = np.full((S, n_runs), -np.inf)  # what the search kept so far, for some runs
    some = rng.random((S, n_runs)) < 0.3
    kept[some] = rng.choice([1.0, 2.5, 3.0, 7.25], size=some.sum())
    run = jax.jit(ds.select, static_argnums=(5, 6))
    with jax.enable_x64(True):
        feasible, count, idx, val = run(jnp.asarray(f), jnp.asarray(real), jnp.asarray(rs), jnp.int32(k),
                                        jnp.asarray(kept), n_runs, cap)
    feasible, count, idx, val = np.asarray(feasible), int(count), np.asarray(idx), np.asarray(val)
    feas, kth = _brute_force(f, real, starts, ends, k)
    assert np.array_equal(feasible[:, :used], feas)
    assert count <= cap
    chosen = np.zeros((S, rows), bool)
    chosen.reshape(-1)[idx[:count]] = True
    assert np.array_equal(val[:count], f.reshape(-1)[idx[:count]])
    run_of = np.searchsorted(starts, np.arange(rows), side="right") - 1
    for s in range(S):
        for t in range(rows):
            ranked = real[t] and np.isfinite(f[s, t])
            if not ranked:
                assert not chosen[s, t]
                continue
            floor = max(kth[s, run_of[t]], kept[s, run_of[t]])
            if f[s, t] >= floor:
                assert chosen[s, t], (s, t, f[s, t], floor)
            elif chosen[s, t]:  # below the k-th: only by the floor's cut bits (relative 2^-40)
                assert f[s, t] >= floor * (1 - 1e-11) and f[s, t] >= kept[s, run_of[t]], (s, t, f[s, t], floor)


def test_calls_decode_the_stream_row_for_row():
    """Pieces put into calls of small capacities (configurations split between calls, assignment
    lists that overflow a call, runs that fill it) decode to the pieces' rows, each in its group."""
    q = _question("tp1d", "default")
    pieces = [(i, p) for i, (_, _, p) in enumerate(iter_pieces(q, [96, 512, 4096], [8, 64], max_rows=1 << 12,
                                                             packed=True, compact=True))]
    caps = ds.Capacities(rows=640, configs=96, words=90, runs=4, selected=4096)  # a list: at most 84 words
    calls, call = [], ds.Call(caps)
    for serial, p in pieces:
        i, off = 0, 0
        while i < len(p.take):
            j, o = call.put(p, serial, serial // 3, i, off)
            if (j, o) == (i, off):
                assert call.rows, "an empty call takes something"
                calls.append(call)
                call = ds.Call(caps)
            i, off = j, o
    calls.append(call)
    assert len(calls) > 10
    words = np.concatenate([c.decode(np.arange(c.rows)) for c in calls])
    assert np.array_equal(words, np.concatenate([p.table() for _, p in pieces], axis=1).T)
    groups = np.concatenate([np.repeat(c.groups, c.run_bounds()[1]) for c in calls])
    assert np.array_equal(groups, np.concatenate([np.full(p.rows, s // 3) for s, p in pieces]))
    for c in calls:
        assert c.rows <= caps.rows and c.n_configs <= caps.configs and c.n_words <= caps.words
        assert len(c.groups) <= caps.runs - 1


QUESTIONS = [
    dict(model="gpt3_1t", system="b200", strategy="tp1d", n_gpus="pow2:4:16384", nvs_size=[8, 64], profile="lbnl"),
    dict(model="gpt3_1t", system=["a100", "b200"], strategy="summa", n_gpus=[64, 4096], nvs_size=[4, 8],
         profile="lbnl", top_k=3),
    dict(model="gpt3_1t", system="b200", strategy="tp1d", n_gpus="range:64:1024:64", nvs_size=[4, 72],
         profile="default", top_k=2),
    dict(model="gpt3_1t", system="h200", strategy="tp2d", n_gpus=[256, 1024], profile="lbnl", top_k=1,
         grid={"hbm_capacity": [80, 120, 160, 200, 240]}),
    # MoE and a rail-only fabric: the same program with other switches; their compilations are long (slow)
    pytest.param(dict(model="mixtral_8x7b", system="dgx_h100", strategy="tp1d", n_gpus=[64, 256], profile="default",
                      top_k=4), marks=pytest.mark.slow),
    # (three GPU counts: 43,708 candidates, two calls; [1024, 4096] alone fit in one call)
    pytest.param(dict(model="gpt3_1t", system="b200", strategy="tp1d", n_gpus=[1024, 4096, 16384], nvs_size=[8, 64],
                      profile="railonly", network="rail_only", top_k=3), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("kw", QUESTIONS, ids=lambda kw: f"{kw['strategy']}-{kw['profile']}-{kw['model']}-{kw.get('network', 'two_tier')}")
def test_a_search_reduced_in_the_program_equals_the_host_search(kw, monkeypatch):
    """The same top-k (ranks, ties by the candidate columns, every metric) and counts as the host
    path, in the CPU's call sizes (the host path's programs are the other tests'): several groups a
    call, groups over several calls, the kept scores of a group's earlier calls."""
    monkeypatch.setattr(stream_mod, "DEVICE_STREAM", False)
    host = search_mod.run_search(**kw)
    monkeypatch.setattr(stream_mod, "DEVICE_STREAM", True)
    dev = search_mod.run_search(**kw)
    assert "device_stream" not in host.stats and dev.stats["device_stream"]["calls"] > 1
    assert host.top.height > 0
    assert_frame_equal(host.top, dev.top)
    assert_frame_equal(host.counts, dev.counts)


def test_a_call_that_selects_more_than_its_buffer_is_reduced_on_the_host(monkeypatch):
    """Calls over their selection buffer (none: every call that selects a row) are reduced from
    their full scores on the host: the same answer."""
    kw = QUESTIONS[1]  # SUMMA on two systems
    monkeypatch.setattr(stream_mod, "DEVICE_STREAM", False)
    host = search_mod.run_search(**kw)
    real = ds.capacities
    monkeypatch.setattr(ds, "capacities", lambda *a: real(*a)._replace(selected=0))
    monkeypatch.setattr(stream_mod, "DEVICE_STREAM", True)
    dev = search_mod.run_search(**kw)
    st = dev.stats["device_stream"]
    assert st["fallbacks"] > 1 and st["selected"] == 0
    assert_frame_equal(host.top, dev.top)
    assert_frame_equal(host.counts, dev.counts)


def test_which_searches_stream_through_the_program(monkeypatch):
    """Only searches of packed candidates that keep no rows; on an accelerator by default, and as
    $DSE_DEVICE_STREAM or `DEVICE_STREAM` say; a bad value of the variable is an error naming it."""
    from dse.runtime import device_stream_env

    on = stream_mod.device_stream_on
    monkeypatch.setattr(stream_mod, "DEVICE_STREAM", None)
    monkeypatch.delenv("DSE_DEVICE_STREAM", raising=False)
    assert on(True, False, "gpu") and not on(True, False, "cpu")
    assert not on(False, False, "gpu") and not on(True, True, "gpu")
    monkeypatch.setenv("DSE_DEVICE_STREAM", "on")
    assert on(True, False, "cpu") and not on(True, True, "cpu")
    monkeypatch.setenv("DSE_DEVICE_STREAM", "OFF")
    assert not on(True, False, "gpu")
    monkeypatch.setattr(stream_mod, "DEVICE_STREAM", True)
    assert on(True, False, "cpu")
    monkeypatch.setenv("DSE_DEVICE_STREAM", "sometimes")
    with pytest.raises(ValueError, match="DSE_DEVICE_STREAM = 'sometimes': expected one of on, off, auto"):
        device_stream_env()


def test_capacities_fit_the_call_and_the_top_k():
    c = ds.capacities(1 << 20, 1)
    assert c.rows == 1 << 20 and c.configs == c.rows // 4 and c.runs == 4096 and c.selected == (1 << 20) // 32
    c = ds.capacities(1 << 20, 1760, top_k=10)  # a wide axis: calls of 4x the evaluations
    assert c.rows == 2432 and c.rows % 64 == 0 and c.runs == 32 and c.rows * 1760 >= 4 << 20
    assert c.selected >= 4 * 10 * 1760 and c.selected >= 1760 * 640 // 32
    assert ds.capacities(100, 3).rows == 64


def test_a_large_search_makes_fewer_larger_calls():
    # 449,251,200 evaluations over 64 systems: a 16th of it is 2^24.7, so calls of 2^24 (MAX_CALL),
    # 262,144 rows a system, not 2^20 / 64 = 16,384
    c = ds.capacities(1 << 20, 64, 10, 449_251_200)
    assert c.rows == 262_144 and c.selected == 64 * 262_144 // 32
    # one system: never more rows than the call's own (the tables sent stay those of 2^20 rows)
    assert ds.capacities(1 << 20, 1, 10, 7_019_550).rows == 1 << 20
    # 56,156,400 over 8 systems: a 16th is 2^21.7, so 2^21 a call, 262,144 rows
    assert ds.capacities(1 << 20, 8, 10, 56_156_400).rows == 262_144
    # a search of about 1M evaluations keeps its call: 2^20 / 18 rounded up to a multiple of 64
    assert ds.capacities(1 << 20, 18, 10, 1_072_656) == ds.capacities(1 << 20, 18, 10) and \
        ds.capacities(1 << 20, 18).rows == 58_304
    # the 1e9 sweep's 1,760 systems: 2^24 a call (9,536 rows), beyond the wide axis' 4 x 2^20
    assert ds.capacities(1 << 20, 1760, 10, 1_004_685_440).rows == 9_536


def test_a_search_whose_calls_grow_equals_the_host_search(monkeypatch):
    """A search of 154,515 evaluations over 5 systems asked for calls of 2^10 evaluations (256 rows):
    `capacities` grows them to the one-system call's rows, 1,024 (5,120 evaluations; a 16th of the
    search would be more): a quarter of the calls, the same answer."""
    kw = QUESTIONS[3]  # TP2D on five HBM capacities
    monkeypatch.setattr(stream_mod, "DEVICE_STREAM", False)
    host = search_mod.run_search(**kw)
    monkeypatch.setattr(stream_mod, "STREAM_SIZES", (1 << 12, 1 << 10))
    monkeypatch.setattr(stream_mod, "DEVICE_STREAM", True)
    dev = search_mod.run_search(**kw)
    rows = dev.stats["evaluations"] / 5
    assert rows == 30_903
    calls = dev.stats["device_stream"]["calls"]
    assert -(-rows // 1024) <= calls <= -(-rows // 1024) + 2 < rows / 256 / 3
    assert_frame_equal(host.top, dev.top)
    assert_frame_equal(host.counts, dev.counts)


def test_a_call_s_selection_comes_back_from_its_head_or_whole():
    caps = ds.capacities(1 << 20, 1)  # 32,768 selected, a head of 4,096
    assert ds.head_size(caps) == 4096 and caps.selected == 32_768
    idx = np.arange(caps.selected, dtype=np.int32)[::-1].copy()
    val = idx.astype(np.float64) / 2
    feasible = np.ones((1, caps.runs), np.int32)

    def out(count):  # the head as the program returns it (the buffers' first entries); past the head
        # the buffers read -1, so a count within the head must come from the head alone
        full_idx, full_val = (idx, val) if count > 4096 else (np.full_like(idx, -1), np.full_like(val, -1.0))
        return feasible, np.int32(count), full_idx, full_val, None, idx[:4096], val[:4096]

    for count in (0, 1, 4096, 4097, 32_768):
        n, f, i, v = ds.fetch(out(count), caps)
        assert n == count and len(i) == len(v) == count and (f == 1).all()
        assert (i == np.arange(caps.selected - 1, caps.selected - 1 - count, -1)).all() and (v == i / 2).all()
    n, f, i, v = ds.fetch(out(32_769), caps)  # overflowed: nothing to read, the host reduces the call
    assert n == 32_769 and i is None and v is None
