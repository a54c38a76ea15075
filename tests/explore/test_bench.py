"""`dse bench`: its JSON lines and the search pipeline's pieces it measures (no timing asserted)."""

import json

import jax
import numpy as np
import pytest

from dse.cli import main
from dse.commands.bench import MIN_SEARCH, search_workload
from dse.explore.engine import BLOCK, METRIC_COLUMNS, SCORE_COLUMNS, aligned_empty, chunk_kernel, profile_of, space_options, stack_systems
from dse.explore.search import plan_search
from dse.explore.stream import _Stream, _evaluate
from dse.explore.pieces import iter_space
from dse.explore.placement import enumerate_space
from dse.explore.space import COLUMNS, Question
from dse.spec.specs import load_model, load_system


def _measured(capsys) -> list[dict]:
    """The JSON lines of a `dse bench --json` run after its first, the machine's."""
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert lines[0]["kind"] == "machine"
    return lines[1:]


def test_bench_json_lines(capsys):
    assert main(["bench", "strategy=tp1d", "profile=lbnl", "--json", "--no-search", "--repeats", "1",
                 "--chunk", "4096"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 2
    head, row = lines
    assert head["kind"] == "machine" and head["device"].startswith("cpu") and "cores" in head["machine"]
    assert head["date"].endswith("Z") and len(head["date"]) == 20
    for key in ("kind", "strategy", "evaluations", "seconds", "evals_per_s", "device"):
        assert key in row, key
    assert row["kind"] == "kernel" and row["strategy"] == "tp1d"
    assert row["evaluations"] >= 4096 and row["seconds"] > 0
    assert row["evals_per_s"] == pytest.approx(row["evaluations"] / row["seconds"])
    assert row["device"].startswith("cpu")
    assert row["candidates"] == "packed words"


def test_bench_columns_measures_the_column_form_and_leaves_it(capsys):
    """`--columns`: the kernel line measures the program taking the sixteen columns; after the
    command the searches of the process pack their candidates again."""
    import importlib

    stream_mod = importlib.import_module("dse.explore.stream")
    assert main(["bench", "strategy=tp1d", "profile=lbnl", "--json", "--no-search", "--repeats", "1",
                 "--chunk", "4096", "--columns"]) == 0
    row = _measured(capsys)[0]
    assert row["candidates"] == "columns" and row["packed"] is False
    assert stream_mod.PACK_CANDIDATES is True
    assert main(["bench", "strategy=tp1d", "profile=lbnl", "--json", "--no-search", "--repeats", "1",
                 "--chunk", "4096"]) == 0
    assert _measured(capsys)[0]["packed"] is True


def test_bench_stream_sets_the_sizes_for_its_measurement_only(capsys):
    """`--stream CHUNK:CALL`: the kernel line runs calls of CALL candidates x systems, every line
    says the sizes, and afterwards searches take the platform's sizes again; a bad value is a
    one-line error before any measurement."""
    import importlib

    from dse.explore.engine import CPU_UNIT

    stream_mod = importlib.import_module("dse.explore.stream")
    assert main(["bench", "strategy=tp1d", "profile=lbnl", "--json", "--no-search", "--repeats", "1",
                 "--chunk", "4096", "--stream", "65536:8192"]) == 0
    row = _measured(capsys)[0]
    unit = CPU_UNIT * len(jax.devices())
    assert row["call"] == -(-8192 // unit) * unit
    assert row["stream_small"] == row["stream_large"] == [65536, 8192]
    assert stream_mod.STREAM_SIZES is None
    assert main(["bench", "strategy=tp1d", "profile=lbnl", "--json", "--no-search", "--repeats", "1",
                 "--chunk", "4096"]) == 0
    row = _measured(capsys)[0]
    assert row["stream_small"] == [1 << 18, 1 << 15] and row["stream_large"] == [1 << 19, 1 << 17]
    assert row["call"] == 1 << 17  # the kernel line measures a large search's program
    for bad, why in (("8192:65536", "the call (65536) is larger than the chunk (8192)"),
                     ("abc", "expected CHUNK or CHUNK:CALL"), ("0", "integers 1..")):
        assert main(["bench", "--no-search", "--stream", bad]) == 2
        out = capsys.readouterr()
        assert out.out == "" and out.err.startswith(f"dse bench: error: --stream = '{bad}'") and why in out.err


def test_search_rate_pairs_the_search_with_its_kernel():
    """A search line carries the kernel alone at the search's hardware axis (measured in the same
    rounds), and the search evaluates the workload's every candidate on every system."""
    from dse.explore.bounds import exact_candidates
    from dse.commands.bench import search_rate

    r = search_rate("tp1d", "lbnl", repeats=1, chunk=4096, kernel_repeats=1)
    kw = r["workload"]
    plan = plan_search(**{k: v for k, v in kw.items() if k != "grid"})
    assert r["systems"] == len(kw["system"]) * len(kw["grid"]["hbm_capacity"]) == 18
    assert r["evaluations"] == exact_candidates(plan.question, plan.n_gpus, plan.nvs_sizes) * r["systems"]
    assert r["kind"] == "search" and r["seconds"] > 0 and r["kernel_evals_per_s"] > 0
    assert r["evals_per_s"] == pytest.approx(r["evaluations"] / r["seconds"])
    # the best run's phases: each a share of the time measured around the search
    assert all(r[k] > 0 for k in ("head_s", "stream_s", "tail_s"))
    assert r["head_s"] + r["stream_s"] + r["tail_s"] <= r["seconds"]


def test_enumeration_line_writes_every_candidate_of_the_workload():
    from dse.explore.bounds import exact_candidates
    from dse.commands.bench import enumeration_rate

    r = enumeration_rate("tp2d", "lbnl", repeats=1)
    plan = plan_search(**{k: v for k, v in search_workload("tp2d", profile_of("lbnl")).items() if k != "grid"})
    assert r["kind"] == "enumeration" and r["seconds"] > 0
    assert r["evaluations"] == exact_candidates(plan.question, plan.n_gpus, plan.nvs_sizes) > 100_000


@pytest.mark.parametrize("strategy", ["tp1d", "tp2d", "summa"])
def test_search_workload_reaches_a_million_evaluations(strategy):
    kw = search_workload(strategy, profile_of("lbnl"))
    plan = plan_search(**{k: v for k, v in kw.items() if k != "grid"})
    per_system = sum(len(p["n1"]) for _, _, p in iter_space(plan.question, plan.n_gpus, plan.nvs_sizes))  # by brute force
    systems = len(kw["system"]) * (len(kw["grid"]["hbm_capacity"]) if kw["grid"] else 1)
    assert per_system * systems >= MIN_SEARCH
    if kw["grid"]:  # no more hardware points than the million needs
        assert per_system * (systems - len(kw["system"])) < MIN_SEARCH


@pytest.mark.parametrize("packed", [False, True])
def test_stream_packing_and_padded_calls_equal_one_table(packed):
    """Pieces packed into chunks across group boundaries, evaluated in calls whose last one is
    padded: the same numbers, row for row, as one call over the whole table; with the candidates
    as their columns or as packed words (`dse.explore.packing.pack`)."""
    from dse.explore.stream import unpack_rows

    m, s = load_model("gpt3_1t"), load_system("b200")
    prof = profile_of("lbnl")
    q = Question(m, "tp1d", 4096, **space_options(prof))
    tables = [enumerate_space(q, n, 8) for n in (256, 512, 1024)]
    total = sum(len(t["n1"]) for t in tables)
    w, sp = m.workload(4096), stack_systems([s.params(), s.replace(hbm_capacity=96.0).params()])
    kern = chunk_kernel("tp1d", prof, 1024, 2, SCORE_COLUMNS, packed=packed)
    stream = _Stream(3 * kern.chunk, kern)
    got_t, got_g, got_c, held, summaries = [], [], [], [], []
    for gi, t in enumerate(tables):
        for chunk in stream.add(np.stack([t[c] for c in COLUMNS]), gi):
            if held:  # the chunk yielded before this one is intact until this one is used
                assert np.array_equal(held[-1][0].table(stream.size), held[-1][1])
            held.append((chunk, chunk.table(stream.size).copy()))
            out = _evaluate(kern, chunk, stream.size, w, sp)
            got_t.append(out["score"])
            summaries.append(out)
            got_g.append(chunk.groups.copy())
            got_c.append(chunk.table(stream.size)[:-1])
            assert np.array_equal(chunk.table(stream.size)[-1], chunk.groups)
            picks = np.array([0, kern.chunk // 2 - 1, kern.chunk // 2, stream.size - 1])
            rows = chunk.rows(picks)
            assert rows.shape[1] == (3 if packed else len(COLUMNS))
            assert np.array_equal(unpack_rows(rows) if packed else rows, got_c[-1][:, picks].T)
    assert len(held) >= 2 and held[0][0] is not held[1][0]  # two buffers in turn
    tail = stream.partial()
    if tail is not None:
        out = _evaluate(kern, tail, tail.fill, w, sp)
        got_t.append(out["score"])
        summaries.append(out)
        got_g.append(tail.groups[:tail.fill].copy())
        got_c.append(tail.table(tail.fill)[:-1])
    got = np.concatenate(got_t, axis=1)
    groups = np.concatenate(got_g)
    assert got.shape == (2, total)
    assert np.array_equal(groups, np.repeat([0, 1, 2], [len(t["n1"]) for t in tables]))
    whole = np.stack([np.concatenate([t[c] for t in tables]) for c in COLUMNS])
    assert np.array_equal(np.concatenate(got_c, axis=1), whole)  # the call layout holds the stream's rows
    one = chunk_kernel("tp1d", prof, total, 2, SCORE_COLUMNS)
    pad = np.concatenate([whole, np.repeat(whole[:, :1], one.chunk - total, axis=1)], axis=1)
    ref = one(pad, w, sp)["score"][:, :total]
    np.testing.assert_array_equal(got, ref)
    # each whole block of BLOCK rows: its largest score (NaN as -inf) and its count of rows that fit
    for out in summaries:
        sc = out["score"]
        for j in range(sc.shape[1] // BLOCK):
            for i in range(sc.shape[0]):
                vals = [v for v in sc[i, j * BLOCK:(j + 1) * BLOCK] if not np.isnan(v)]
                assert out["block_max"][i, j] == max(vals, default=-np.inf)
                assert out["block_feasible"][i, j] == sum(v != -np.inf for v in sc[i, j * BLOCK:(j + 1) * BLOCK])
    # the rank score is the throughput (global batch / iteration time) where the memory fits, else -inf
    full = chunk_kernel("tp1d", prof, total, 2, tuple(METRIC_COLUMNS))(pad, w, sp)
    t, mem = full["iteration_time"][:, :total], full["memory"][:, :total]
    fits = mem <= np.array([s.hbm_capacity, 96.0])[:, None]
    assert fits.any() and not fits.all()
    np.testing.assert_array_equal(got, np.where(fits, 4096 / t, -np.inf))


def test_call_layout_is_aligned_and_used_in_place():
    """`aligned_empty` starts on a 64-byte boundary; a call's slab group (`ChunkKernel.block`)
    holds device d's share of the table as a contiguous slab; and JAX's CPU client uses each slab
    in place: the shard the device reads is the host memory itself (no per-call copy, the reason
    for the layout)."""
    import jax

    for shape in [(3,), (2, 5, 7), (1, 16, 4096)]:
        a = aligned_empty(shape)
        assert a.ctypes.data % 64 == 0 and a.shape == shape and a.flags.c_contiguous
    prof = profile_of("lbnl")
    kern = chunk_kernel("tp1d", prof, 1024, 1, SCORE_COLUMNS)
    table = np.arange(len(COLUMNS) * kern.chunk, dtype=np.int64).reshape(len(COLUMNS), kern.chunk)
    blk = kern.block(table)
    per = kern.chunk // kern.n_devices
    for d in range(kern.n_devices):
        np.testing.assert_array_equal(blk[d], table[:, d * per:(d + 1) * per])
    if jax.devices()[0].platform == "cpu":
        placed = jax.device_put(blk, kern._shardings[0]) if kern._shardings else jax.device_put(blk)
        shards = sorted(placed.addressable_shards, key=lambda s: s.index[0].start or 0)
        for d, shard in enumerate(shards):
            assert shard.data.unsafe_buffer_pointer() == blk[d].ctypes.data


def test_the_many_groups_workload_is_384_groups():
    from dse.commands.bench import GROUPS
    from dse.explore.space import parse_gpu_counts

    ns = parse_gpu_counts(GROUPS["n_gpus"])
    assert ns == list(range(64, 8193, 64)) and len(ns) * len(GROUPS["nvs_size"]) == 384


@pytest.mark.parametrize("device", [False, True])
def test_kernel_on_resident_inputs_evaluates_the_same_calls(device):
    """The "inputs resident" kernel lines (printed on an accelerator) time the same program on the
    same candidates, copied to the device beforehand: the same evaluations, and for the device
    stream the same rows selected as when the call's tables come from the host."""
    from dse.commands.bench import RESIDENT, kernel_rate

    host = kernel_rate("tp1d", 1 << 15, 1, 1, "lbnl", device)
    here = kernel_rate("tp1d", 1 << 15, 1, 1, "lbnl", device, resident=True)
    assert here["program"] == host["program"] + RESIDENT and here["evaluations"] > 0
    if device:
        assert here["selected"] == host["selected"] > 0
