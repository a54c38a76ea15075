"""Measured runs (`dse.truth.measured`, `dse validate measured`): CSV schema, row checks, GPU aliases,
Megatron placement, engine calls, Parquet output.

The tests that predict need the engine's `recompute` and `seq_par` candidate columns; until
`dse.explore.engine.CANDIDATE_COLUMNS` has them they are skipped, and the engine's refusal is tested instead.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

import dse.truth.measured as dm
from dse.commands import validate as validate_cmd
from dse.commands import validate_measured as vm
from dse.spec.specs import SpecError
from helpers import GOOD, HEADER, write_csv

SHARED_CSV = Path("/work/shared/reference/measured/korthikanti2022_table5.csv")


def errors_of(tmp_path, *changes, header=HEADER) -> list[str]:
    """The error lines of a CSV of GOOD rows, each with one set of changes."""
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", [{**GOOD, **c} for c in changes], header))
    return [str(e) for e in runs.errors]


# ---------------------------------------------------------------------------- placement


@pytest.mark.parametrize("degrees, node, want", [
    ((8, 1, 1, 1), 8, dict(nvs1=8, nvs_p=1, nvs_d=1, nvs_cp=1)),
    ((8, 1, 1, 64), 8, dict(nvs1=8, nvs_p=1, nvs_d=1, nvs_cp=1)),
    ((2, 1, 4, 2), 8, dict(nvs1=2, nvs_p=1, nvs_d=4, nvs_cp=1)),
    ((4, 1, 1, 4), 8, dict(nvs1=4, nvs_p=2, nvs_d=1, nvs_cp=1)),
    ((16, 1, 2, 2), 8, dict(nvs1=8, nvs_p=1, nvs_d=1, nvs_cp=1)),   # TP spans two nodes, 8 in each
    ((2, 2, 4, 2), 8, dict(nvs1=2, nvs_p=1, nvs_d=2, nvs_cp=2)),   # context inside TP's node, then data
    ((2, 1, 3, 2), 8, dict(nvs1=2, nvs_p=1, nvs_d=1, nvs_cp=1)),   # gcd(3, 4) = 1: data across nodes
    ((3, 1, 2, 1), 8, dict(nvs1=3, nvs_p=1, nvs_d=2, nvs_cp=1)),   # 6 ranks: both TP groups in one node
    ((3, 1, 4, 1), 8, dict(nvs1=1, nvs_p=1, nvs_d=1, nvs_cp=1)),   # 12: a TP group straddles two nodes
    ((1, 1, 2, 8), 8, dict(nvs1=1, nvs_p=4, nvs_d=2, nvs_cp=1)),
    ((2, 1, 2, 2), 64, dict(nvs1=2, nvs_p=2, nvs_d=2, nvs_cp=1)),  # the whole job in one domain
    # 72-GPU NVLink domains (GB200 NVL72), which powers of two do not divide: hierarchical groups
    ((2, 1, 64, 1), 72, dict(nvs1=2, nvs_p=1, nvs_d=32, nvs_cp=1)),  # 36 + 28 data ranks: 2 domains
    ((8, 1, 16, 1), 72, dict(nvs1=8, nvs_p=1, nvs_d=8, nvs_cp=1)),   # 9 + 7
    ((8, 1, 8, 2), 72, dict(nvs1=8, nvs_p=1, nvs_d=4, nvs_cp=1)),    # stage 2's groups: 1 + 7
    ((1, 1, 64, 1), 72, dict(nvs1=1, nvs_p=1, nvs_d=64, nvs_cp=1)),  # 72 holds 64 whole
])
def test_megatron_placement(degrees, node, want):
    tp, cp, dp, pp = degrees
    got = dm.megatron_placement(tp, cp, dp, pp, node)
    assert got == want
    product = got["nvs1"] * got["nvs_p"] * got["nvs_d"] * got["nvs_cp"]
    assert product <= node
    for k, n in (("nvs1", tp), ("nvs_cp", cp), ("nvs_d", dp), ("nvs_p", pp)):
        assert n % got[k] == 0


@pytest.mark.parametrize("degrees, node", [
    ((2, 1, 64, 1), 72), ((8, 1, 16, 1), 72), ((8, 1, 8, 2), 72), ((4, 2, 8, 4), 72), ((2, 1, 3, 2), 8),
    ((8, 1, 9, 2), 72), ((4, 1, 6, 2), 8), ((2, 2, 16, 2), 72), ((3, 1, 4, 1), 8), ((3, 1, 2, 1), 8),
])
def test_megatron_placement_never_counts_fewer_nodes_than_a_group_spans(degrees, node):
    """Brute force: number the ranks in Megatron's order (tp fastest, then cp, dp, pp), put rank r in
    node r // node, and find the most nodes any group of each kind spans; the placement counts each
    group as split evenly over n / g nodes, never fewer than that."""
    tp, cp, dp, pp = degrees
    got = dm.megatron_placement(tp, cp, dp, pp, node)
    shape = (pp, dp, cp, tp)  # slowest to fastest
    rank = np.arange(tp * cp * dp * pp).reshape(shape)
    nodes = rank // node
    for key, axis, n in (("nvs1", 3, tp), ("nvs_cp", 2, cp), ("nvs_d", 1, dp), ("nvs_p", 0, pp)):
        groups = np.moveaxis(nodes, axis, -1).reshape(-1, n)
        spans = max(len(set(g.tolist())) for g in groups)
        assert n // got[key] >= spans, (key, got)


def test_megatron_placement_rejects_bad_degrees():
    with pytest.raises(SpecError, match=r"^tp = 0: must be an integer >= 1$"):
        dm.megatron_placement(0, 1, 1, 1, 8)
    with pytest.raises(SpecError, match=r"^node_size = 2.5: must be an integer >= 1$"):
        dm.megatron_placement(1, 1, 1, 1, 2.5)


# ---------------------------------------------------------------------------- GPU names


@pytest.mark.parametrize("name, preset", [
    ("A100-80GB", "dgx_a100_80gb"), ("a100-80gb", "dgx_a100_80gb"), ("H100-80GB", "dgx_h100"),
    ("H100-SXM", "dgx_h100"), ("h100-sxm", "dgx_h100"), ("H100-96GB", "grand_teton_h100"), ("H200-SXM", "dgx_h200"),
    ("B200", "dgx_b200"), ("GB200", "gb200_nvl72"), ("dgx_h100", "dgx_h100"), (" DGX_A100_80GB ", "dgx_a100_80gb"),
    ("H800", "dgx_h800"), ("B300", "dgx_b300"), ("gb300", "gb300_nvl72"),
])
def test_resolve_gpu(name, preset):
    assert dm.resolve_gpu(name) == preset


def test_resolve_gpu_unknown():
    with pytest.raises(SpecError, match=r"^gpu = 'V100': unknown; valid: A100-80GB, H100-80GB, H100-SXM, H100-96GB, H200-SXM, H800, B200, "
                                        r"GB200, B300, GB300 or a "
                                        r"system preset \(a100, .*dgx_h100.*\)$"):
        dm.resolve_gpu("V100")


def test_presets_of_the_aliases():
    from dse.spec.specs import load_model, load_system

    a, h = load_system("dgx_a100_80gb"), load_system("dgx_h100")
    # capacities as the GPUs expose them: 81,920 MiB (A100 80GB) and 81,559 MiB (H100 80GB, nvidia-smi)
    assert (a.matrix_flops, a.vector_flops, a.hbm_bandwidth) == (312, 78, 2039)
    assert a.hbm_capacity == pytest.approx(81920 * 2**20 / 1e9, abs=0.01)
    assert (a.nvlink_bandwidth, a.ib_bandwidth, a.nic_factor, a.nvs_size) == (300, 25, 1, 8)
    assert (h.matrix_flops, h.vector_flops, h.hbm_bandwidth) == (989, 134, 3350)
    assert h.hbm_capacity == pytest.approx(81559 * 2**20 / 1e9, abs=0.01)
    assert (h.nvlink_bandwidth, h.ib_bandwidth, h.nic_factor, h.nvs_size) == (450, 50, 1, 8)
    a100 = load_system("a100")
    for s in (a, h):  # the seed-001 efficiencies and latencies until calibration
        for f in ("compute_eff", "nvlink_eff", "ib_eff", "hbm_eff", "flop_latency", "nvlink_latency", "ib_latency"):
            assert getattr(s, f) == getattr(a100, f), f
    m = load_model("megatron_1t")
    assert (m.heads, m.hidden, m.depth, m.ffn, m.seq_len, m.vocab) == (160, 25600, 128, 102400, 2048, 51200)


# ---------------------------------------------------------------------------- the packaged CSV


def test_packaged_csv_is_the_shared_one():
    if not SHARED_CSV.is_file():
        pytest.skip(f"{SHARED_CSV} not on this machine")
    assert dm.PACKAGED_CSV.read_bytes() == SHARED_CSV.read_bytes()


def test_packaged_csv_is_package_data():
    import tomllib

    conf = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    patterns = conf["tool"]["setuptools"]["package-data"]["dse.data.measured"]
    import dse

    package = Path(dse.__file__).resolve().parent / "data" / "measured"  # the package the patterns belong to
    assert any(dm.PACKAGED_CSV in package.glob(p) for p in patterns)


def test_read_packaged_runs():
    runs = dm.read_runs()
    assert runs.errors == ()
    assert runs.labels == ("params_b", "source")
    assert runs.rows.height == 8
    assert runs.rows["row"].to_list() == list(range(1, 9))
    assert runs.rows["interleave"].to_list() == [1, 1, 3, 3, 3, 3, 1, 1]
    assert runs.rows["recompute"].to_list() == ["full", "selective"] * 4
    assert runs.rows["sequence_parallel"].to_list() == [False, True] * 4
    assert runs.rows["measured_iter_s"].to_list() == [1.42, 1.10, 18.13, 13.75, 49.05, 37.83, 94.42, 71.49]
    assert set(runs.rows["system"]) == {"dgx_a100_80gb"}
    # optional columns absent from the file: their defaults
    assert runs.rows["kv_heads"].to_list() == runs.rows["heads"].to_list()
    assert set(runs.rows["mlp"]) == {"gelu"} and set(runs.rows["precision"]) == {"bf16"}
    assert set(runs.rows["cp"]) == {1}
    assert runs.columns[-38:] == ("kv_heads", "mlp", "precision", "cp", "attention", "framework", "grad_reduce",
                                  "optimizer_state", "step_time", "memory_gib", "recompute_layers", "preset", "ep", "etp",
                                  "capacity_factor", "mtp", "pipeline_layout", "recompute_modules", "nvs_size",
                                  "offload_layers", "fp8_recipe", "dropout", "elementwise", "window", "window_layers",
                                  "token_dispatcher", "tied_embeddings", "bias",
                                  "tp_comm_overlap", "pp_comm_overlap", "account_for_embedding_in_pipeline_split",
                                  "account_for_loss_in_pipeline_split", "moe_overlap", "moe_force_balance",
                                  "fp8_param_gather", "kv_repeat", "act_fp8_store", "zero")
    assert set(runs.rows["framework"]) == {"megatron"} and set(runs.rows["grad_reduce"]) == {"fp32"}
    assert set(runs.rows["zero"]) == {1}  # blank: Megatron's distributed optimizer
    # A100 runs of 2022: tied embeddings, no communication overlaps (blank cells take these)
    assert runs.rows.select("tied_embeddings", "tp_comm_overlap", "pp_comm_overlap").unique().rows() == [
        (True, False, False)]
    assert runs.rows["source"][0] == "Korthikanti et al. 2022 (arXiv 2205.05198) Table 5"


# ---------------------------------------------------------------------------- row checks


@pytest.mark.parametrize("change, line", [
    (dict(gpu="V100"), "row 1 (m22b): gpu = V100: unknown; valid: A100-80GB, H100-80GB, H100-SXM, H100-96GB, H200-SXM, "
                         "H800, B200, GB200, B300, GB300 or a system preset ("),
    (dict(recompute="partial"), "row 1 (m22b): recompute = partial: must be one of none | selective | full"),
    (dict(sequence_parallel="maybe"),
     "row 1 (m22b): sequence_parallel = maybe: must be a boolean (true | false | 1 | 0 | yes | no)"),
    (dict(tp="2.5"), "row 1 (m22b): tp = 2.5: must be an integer >= 1"),
    (dict(pp="0"), "row 1 (m22b): pp = 0: must be an integer >= 1"),
    (dict(dp="-1"), "row 1 (m22b): dp = -1: must be an integer >= 1"),
    (dict(micro_batch="two"), "row 1 (m22b): micro_batch = two: must be an integer >= 1"),
    (dict(heads=""), "row 1 (m22b): heads = '': required, must be an integer >= 1"),
    (dict(tp="3", gpus="3"), "row 1 (m22b): tp = 3: must divide heads = 64"),
    (dict(pp="50", gpus="400"), "row 1 (m22b): pp = 50: must be <= layers = 48"),
    (dict(pp="5", gpus="40", interleave="2"),
     "row 1 (m22b): interleave = 2: the interleaved schedule needs pp = 5 to divide layers = 48"),
    (dict(pp="4", gpus="32", interleave="5"), "row 1 (m22b): interleave = 5: must divide layers / pp = 12"),
    (dict(interleave="2"), "row 1 (m22b): interleave = 2: model chunks interleave pipeline stages; must be 1 "
                           "with pp = 1"),
    (dict(gpus="16"), "row 1 (m22b): gpus = 16: must equal tp*pp*dp*cp = 8*1*1*1 = 8"),
    (dict(dp="2", gpus="16", global_batch="6", micro_batch="2"),
     "row 1 (m22b): global_batch = 6: must be a multiple of dp*micro_batch = 2*2 = 4"),
    (dict(measured_iter_s="0"), "row 1 (m22b): measured_iter_s = 0: must be a number > 0 (seconds)"),
    (dict(measured_iter_s="fast"), "row 1 (m22b): measured_iter_s = fast: must be a number > 0 (seconds)"),
    (dict(model=""), "row 1 (?): model = '': must be a non-empty label"),
])
def test_row_error(tmp_path, change, line):
    (got,) = errors_of(tmp_path, change)
    assert got.startswith(line), got
    assert "\n" not in got


def test_tp_must_divide_hidden(tmp_path):
    got = errors_of(tmp_path, dict(heads="16", hidden="100", tp="8"))
    assert got == ["row 1 (m22b): heads = 16: must divide hidden = 100",
                   "row 1 (m22b): tp = 8: must divide hidden = 100"]


def test_several_problems_of_one_row_each_get_a_line(tmp_path):
    got = errors_of(tmp_path, dict(tp="3", gpu="B200-X", measured_iter_s="-1"))
    assert [g.split(":")[1].strip() for g in got] == ["gpu = B200-X", "measured_iter_s = -1", "tp = 3", "gpus = 8"]


def test_modern_runs_are_predicted(tmp_path):
    """Grouped-query attention, SwiGLU, FP8 and context parallelism are modelled: each run is
    predicted, and each mechanism moves the time the way its work does."""
    header = HEADER + ("kv_heads", "mlp", "precision", "cp")
    base = {**GOOD, "gpu": "H100-SXM", "kv_heads": "64", "mlp": "gelu", "precision": "bf16", "cp": "1"}
    rows = [base,
            {**base, "model": "gqa", "kv_heads": "8"},
            {**base, "model": "fp8", "precision": "fp8"},
            {**base, "model": "cp2", "cp": "2", "gpus": "16"},
            {**base, "model": "swiglu", "mlp": "swiglu"},
            {**base, "model": "gqa-bad", "kv_heads": "4"}]
    res = dm.predict(write_csv(tmp_path / "runs.csv", rows, header))
    t = dict(zip(res.frame["model"], res.frame["predicted_iter_s"]))
    assert t["gqa"] < t["m22b"] and t["fp8"] < t["m22b"] and t["cp2"] < t["m22b"]
    assert t["swiglu"] > t["m22b"]  # the same ffn width with a third matrix
    assert [str(e) for e in res.errors] == [
        "row 6 (gqa-bad): rejected by the engine: n1 = 8: must divide model.kv_heads = 4 "
        "(each GPU holds whole key/value heads)"]


def test_fp8_on_a_gpu_without_fp8_is_refused(tmp_path):
    header = HEADER + ("precision",)
    res = dm.predict(write_csv(tmp_path / "runs.csv", [{**GOOD, "precision": "fp8"}], header))
    assert res.frame.height == 0
    assert "precision = fp8: system 'dgx_a100_80gb' has no FP8 rate" in str(res.errors[0])


def test_optional_columns_valid_values_and_blanks(tmp_path):
    header = HEADER + ("kv_heads", "mlp", "precision", "cp")
    rows = [{**GOOD, "kv_heads": "64", "mlp": "GELU", "precision": "bf16", "cp": "1"},
            {**GOOD, "kv_heads": "", "mlp": "", "precision": "", "cp": "", "interleave": ""}]
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", rows, header))
    assert runs.errors == ()
    assert runs.rows.select("kv_heads", "mlp", "precision", "cp", "interleave").rows() == [
        (64, "gelu", "bf16", 1, 1), (64, "gelu", "bf16", 1, 1)]


@pytest.mark.parametrize("text, on", [("true", True), ("TRUE", True), ("1", True), ("Yes", True),
                                      ("false", False), ("0", False), ("no", False), ("NO", False)])
def test_sequence_parallel_spellings(tmp_path, text, on):
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", [{**GOOD, "sequence_parallel": text}]))
    assert runs.errors == () and runs.rows["sequence_parallel"].to_list() == [on]


def test_bad_rows_are_skipped_and_the_others_kept(tmp_path):
    rows = [GOOD, {**GOOD, "model": "bad", "tp": "3"}, {**GOOD, "model": "other", "recompute": "full"}]
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", rows))
    assert [str(e) for e in runs.errors] == ["row 2 (bad): tp = 3: must divide heads = 64",
                                             "row 2 (bad): gpus = 8: must equal tp*pp*dp*cp = 3*1*1*1 = 3"]
    assert runs.rows["row"].to_list() == [1, 3]
    assert runs.rows["model"].to_list() == ["m22b", "other"]


# ---------------------------------------------------------------------------- whole-file errors


def test_missing_column(tmp_path):
    header = tuple(c for c in HEADER if c != "tp")
    path = write_csv(tmp_path / "runs.csv", [GOOD], header)
    with pytest.raises(dm.MeasuredError, match=r"^csv = '.*runs.csv': column 'tp' missing; required columns: "
                                              r"model, heads, .*, measured_iter_s$"):
        dm.read_runs(path)


def test_empty_file_and_header_only(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(dm.MeasuredError, match=r"empty.csv': empty file"):
        dm.read_runs(empty)
    with pytest.raises(dm.MeasuredError, match=r"header.csv': no data rows"):
        dm.read_runs(write_csv(tmp_path / "header.csv", []))


def test_no_such_file_and_reserved_column(tmp_path):
    with pytest.raises(dm.MeasuredError, match=r"^csv = '.*nowhere.csv': no such file$"):
        dm.read_runs(tmp_path / "nowhere.csv")
    path = write_csv(tmp_path / "runs.csv", [{**GOOD, "error": "x"}], HEADER + ("error",))
    with pytest.raises(dm.MeasuredError, match=r"column 'error' is reserved for the output"):
        dm.read_runs(path)


# ---------------------------------------------------------------------------- engine calls


def test_plan_groups_runs_into_one_call_each(tmp_path):
    rows = [
        {**GOOD, "recompute": "full", "sequence_parallel": "false"},                   # 1: group A
        {**GOOD, "model": "gpt3-175b", "heads": "96", "hidden": "12288", "layers": "96", "ffn": "49152",
         "pp": "8", "gpus": "64", "global_batch": "64", "micro_batch": "1", "interleave": "3"},  # 2: group B
        {**GOOD, "model": "m22b-again", "recompute": "none"},                          # 3: group A
        {**GOOD, "gpu": "H100-SXM"},                                                   # 4: group C
        {**GOOD, "global_batch": "8"},                                                 # 5: group D
        {**GOOD, "tp": "2", "dp": "4", "pp": "2", "gpus": "16", "micro_batch": "1"},  # 6: group A
    ]
    calls = dm.plan(dm.read_runs(write_csv(tmp_path / "runs.csv", rows)))
    assert [c.rows for c in calls] == [(1, 3, 6), (2,), (4,), (5,)]
    a = calls[0]
    assert a.model.name == "m22b" and (a.model.depth, a.model.ffn, a.model.vocab) == (48, 24576, 51200)
    assert (a.system, a.nvs_size) == ("dgx_a100_80gb", 8)
    assert a.table["recompute"].tolist() == [dm.RECOMPUTE_CODES["full"], dm.RECOMPUTE_CODES["none"], 1] == [2, 0, 1]
    assert a.table["seq_par"].tolist() == [0, 1, 1]
    assert a.table["n1"].tolist() == [8, 8, 2] and a.table["nvs_d"].tolist() == [1, 1, 4]
    assert calls[1].model.name == "gpt3_175b" and calls[1].table["interleave"].tolist() == [3]
    assert calls[2].system == "dgx_h100"
    assert set(a.table) == {"n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p", "nvs_d", "n_b",
                            "interleave", "recompute", "seq_par", "precision", "zero", "ep"}


def test_candidate_table_uses_megatron_placement(tmp_path):
    rows = [{**GOOD, "tp": "2", "dp": "4", "pp": "2", "gpus": "16", "global_batch": "16", "micro_batch": "1"},
            {**GOOD, "tp": "4", "dp": "1", "pp": "4", "gpus": "16"}]
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", rows))
    t = dm.candidate_table(runs.rows, 8)
    assert {k: v.tolist() for k, v in t.items()} == {
        "n1": [2, 4], "n2": [1, 1], "n_p": [2, 4], "n_d": [4, 1], "microbatch": [1, 4],
        "nvs1": [2, 4], "nvs2": [1, 1], "nvs_p": [1, 2], "nvs_d": [4, 1], "n_b": [1, 1],
        "interleave": [1, 1], "recompute": [1, 1], "seq_par": [1, 1], "precision": [0, 0], "zero": [1, 1], "ep": [1, 1]}
    assert all(v.dtype == np.int64 for v in t.values())


def test_model_name():
    assert dm.model_name("MT-NLG 530B") == "mt_nlg_530b"
    assert dm.model_name("--") == "model"


# ---------------------------------------------------------------------------- Parquet


def test_write_parquet_is_atomic_and_keeps_every_column(tmp_path):
    runs = dm.read_runs()
    frame = runs.rows.select("row", *runs.columns).with_columns(
        pl.lit(1.0).alias("predicted_iter_s"),
        (1.0 / pl.col("measured_iter_s") - 1.0).alias("error"),
        pl.lit("default").alias("profile"), pl.lit("dgx_a100_80gb").alias("system"))
    err = dm.RowError(9, "x", "tp", "3: must divide heads = 64")
    out = dm.write_parquet(dm.Prediction(frame, (err,), "default"), tmp_path / "sub" / "p.parquet", source="s.csv")
    assert sorted(p.name for p in out.parent.iterdir()) == ["p.parquet"]
    back = pl.read_parquet(out)
    assert back.equals(frame)
    import json

    meta = json.loads(pq.read_schema(out).metadata[b"dse.truth.measured"])
    assert meta["profile"] == "default" and meta["source"] == "s.csv"
    assert meta["errors"] == ["row 9 (x): tp = 3: must divide heads = 64"]


# ---------------------------------------------------------------------------- the command


def test_validate_registers_measured():
    assert validate_cmd.TARGETS["measured"] == "dse.commands.validate_measured"
    assert "dse validate measured" in validate_cmd.__doc__


@pytest.mark.parametrize("argv, fragment", [
    (["--csv", "NOWHERE.csv"], "csv = 'NOWHERE.csv': no such file"),
    (["--profile", "fast"], "profile = 'fast': must be one of default, fsdp2, lbnl, railonly"),
])
def test_command_unusable_input(capsys, argv, fragment):
    assert vm.main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err == f"dse validate measured: error: {fragment}\n"


def test_command_missing_column_and_empty_file(capsys, tmp_path):
    path = write_csv(tmp_path / "runs.csv", [GOOD], tuple(c for c in HEADER if c != "gpu"))
    assert vm.main(["--csv", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dse validate measured: error: csv = ") and "column 'gpu' missing" in err
    assert len(err.splitlines()) == 1
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert vm.main(["--csv", str(empty)]) == 2
    assert "empty file" in capsys.readouterr().err


def test_predict_packaged_runs():
    runs = dm.read_runs()
    result = dm.predict(runs)
    frame = result.frame
    assert frame.height >= 1 and frame.height + len({e.row for e in result.errors}) == 8
    assert frame.columns == ["row", *runs.columns, "predicted_iter_s", "error", "predicted_memory_gb", "hbm_gb",
                             "fits", "memory_error", "profile", "system", "t_compute", "t_memory", "t_tp_comm",
                             "t_ep_comm", "t_dp_comm", "t_pp_comm", "t_bubble", "t_optimizer", "t_offload",
                             "t_host", "mem_weights", "mem_grads", "mem_optimizer", "mem_activations", "mem_reserved"]
    # the parts: seconds that add up to the predicted time, GB to the predicted memory; a dense model
    # has no all-to-all nor host wait, Table 5 has pipelines (a bubble) and no offloading
    seconds = sum(frame[c] for c in frame.columns if c.startswith("t_"))
    gb = sum(frame[c] for c in frame.columns if c.startswith("mem_"))
    assert (seconds / frame["predicted_iter_s"]).to_list() == pytest.approx([1.0] * frame.height, rel=1e-12)
    assert (gb / frame["predicted_memory_gb"]).to_list() == pytest.approx([1.0] * frame.height, rel=1e-12)
    assert frame["t_ep_comm"].to_list() == [0.0] * frame.height and frame["t_offload"].to_list() == [0.0] * frame.height
    assert frame["t_host"].to_list() == [0.0] * frame.height
    assert all(b > 0 for b, p in zip(frame["t_bubble"], frame["pp"]) if p > 1)
    # the DGX A100's 81,920 MiB, and whether each run's predicted memory fits in it
    assert set(frame["hbm_gb"]) == {85.9}
    assert frame["fits"].to_list() == (frame["predicted_memory_gb"] <= 85.9).to_list()
    assert frame["memory_error"].null_count() == frame.height  # Table 5 publishes no memory
    assert set(frame["profile"]) == {"default"} and set(frame["system"]) == {"dgx_a100_80gb"}
    for r in frame.iter_rows(named=True):
        assert r["predicted_iter_s"] > 0
        assert r["error"] == pytest.approx(r["predicted_iter_s"] / r["measured_iter_s"] - 1.0, rel=1e-12)
    # the same configuration with full recompute costs more than with selective recompute
    by = {(r["model"], r["recompute"]): r["predicted_iter_s"] for r in frame.iter_rows(named=True)}
    pairs = [(by[(m, "full")], by[(m, "selective")]) for m, rc in by if rc == "full" and (m, "selective") in by]
    assert pairs and all(full > sel for full, sel in pairs)


def test_command_predicts_all_but_the_bad_row(capsys, tmp_path):
    rows = [GOOD, {**GOOD, "model": "bad", "tp": "3", "gpus": "3"}, {**GOOD, "model": "m22b-full",
                                                                     "recompute": "full",
                                                                     "sequence_parallel": "false"}]
    path = write_csv(tmp_path / "runs.csv", rows)
    out = tmp_path / "pred.parquet"
    assert vm.main(["--csv", str(path), "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert cap.err.splitlines() == ["row 2 (bad): tp = 3: must divide heads = 64"]
    lines = cap.out.strip().splitlines()
    assert lines[-1].startswith("2 runs: mean |error| ")
    assert lines[-1].endswith("% (profile default, calibration corpus2026); 0 predicted not to fit in HBM")
    assert any(line.startswith("m22b ") for line in lines) and any(line.startswith("m22b-full ") for line in lines)
    frame = pl.read_parquet(out)
    assert frame["row"].to_list() == [1, 3]
    assert {"source", "predicted_iter_s", "error", "profile", "system", "kv_heads", "cp"} <= set(frame.columns)
    assert frame["source"].to_list() == ["test", "test"]
    mean = frame["error"].abs().mean()
    assert f"mean |error| {100 * mean:.1f}%" in lines[-1] and not math.isnan(mean)


# ---------------------------------------------------------------------------- today's runs' columns


def test_frameworks_gradients_and_memory_columns(tmp_path):
    """fsdp2 runs default to ZeRO-3 and no TP overlap; a published peak memory is compared in GB:
    memory_error = predicted GB / (GiB x 2^30 / 1e9) - 1; fits is predicted memory <= the HBM."""
    header = HEADER + ("framework", "grad_reduce", "memory_gib", "step_time", "zero")
    rows = [{**GOOD, "framework": "fsdp2", "dp": "2", "gpus": "16", "global_batch": "8", "memory_gib": "40",
             "step_time": "derived", "zero": ""},
            {**GOOD, "gpu": "H100-SXM", "grad_reduce": "bf16", "zero": ""},
            {**GOOD, "framework": "jax"}, {**GOOD, "grad_reduce": "fp16"}, {**GOOD, "memory_gib": "-3"},
            {**GOOD, "step_time": "guessed"}]
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", rows, header))
    assert runs.rows.select("framework", "grad_reduce", "zero", "tp_comm_overlap").rows() == [
        ("fsdp2", "fp32", 3, False), ("megatron", "bf16", 1, True)]
    assert [str(e) for e in runs.errors] == [
        "row 3 (m22b): framework = jax: must be one of megatron | fsdp2",
        "row 4 (m22b): grad_reduce = fp16: must be one of fp32 | bf16",
        "row 5 (m22b): memory_gib = -3: must be a number > 0 (GiB per GPU) or blank",
        "row 6 (m22b): step_time = guessed: must be one of stated | derived"]
    frame = dm.predict(runs).frame
    r = frame.row(0, named=True)
    assert r["memory_error"] == pytest.approx(r["predicted_memory_gb"] / (40 * 2**30 / 1e9) - 1.0, rel=1e-12)
    assert frame["fits"].to_list() == [m <= h for m, h in zip(frame["predicted_memory_gb"], frame["hbm_gb"])]
    assert frame["hbm_gb"].to_list() == [85.9, pytest.approx(81559 * 2**20 / 1e9, abs=0.01)]
    # the gradient dtype reaches the engine: 2-byte gradients hold less than fp32 ones
    fp32 = dm.predict(write_csv(tmp_path / "b.csv", [{**rows[1], "grad_reduce": "fp32"}], header)).frame
    assert frame["predicted_memory_gb"][1] < fp32["predicted_memory_gb"][0]


def test_pipeline_split_columns_and_partial_recompute(tmp_path):
    """With both pipeline-split flags pp divides layers + 2 (126 + 2 on 8 stages, 2 per chunk of 8);
    partial recomputation is read under full recomputation (the profile's recompute_layers) and
    refused under another mode, not silently read as full."""
    header = HEADER + ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                       "recompute_layers")
    base = {**GOOD, "layers": "126", "pp": "8", "gpus": "64", "interleave": "8", "global_batch": "16",
            "micro_batch": "1"}
    rows = [{**base, "account_for_embedding_in_pipeline_split": "true", "account_for_loss_in_pipeline_split": "1"},
            base, {**base, "account_for_embedding_in_pipeline_split": "true"},
            {**GOOD, "recompute": "full", "recompute_layers": "5"},
            {**GOOD, "recompute": "selective", "recompute_layers": "5"}]
    runs = dm.read_runs(write_csv(tmp_path / "split.csv", rows, header))
    assert runs.rows["row"].to_list() == [1, 4]
    assert [str(e) for e in runs.errors] == [
        "row 2 (m22b): interleave = 8: the interleaved schedule needs pp = 8 to divide layers = 126",
        "row 3 (m22b): pp = 8: must divide layers + 1 (the embedding and loss counted as layers) = 127",
        "row 5 (m22b): recompute_layers = 5: partial recomputation (Megatron's recompute_num_layers) is modelled "
        "under full recomputation only (recompute_method block); this run's recompute is selective"]
    assert [c.recompute_layers for c in dm.plan(runs)] == [0, 5]
    assert dm.predict(runs).frame.height == 2


def test_several_files_read_as_one(tmp_path):
    """Rows are numbered on across the files; a problem names its file and its row there; a file
    without source_id gives its name."""
    a = write_csv(tmp_path / "a.csv", [GOOD, {**GOOD, "tp": "3"}])
    b = write_csv(tmp_path / "b.csv", [{**GOOD, "model": "other"}])
    runs = dm.read_runs([a, b])
    assert runs.rows["row"].to_list() == [1, 3]
    assert runs.rows["source_id"].to_list() == ["a", "b"]
    assert [str(e) for e in runs.errors][0].startswith("row 2 (a.csv row 2, m22b): tp = 3: must divide heads")
    assert dm.predict(runs).frame.height == 2
    with pytest.raises(dm.MeasuredError, match="no such file"):
        dm.read_runs([a, tmp_path / "missing.csv"])


def test_corpus_is_packaged_with_provenance():
    """Every packaged training set has its provenance notes beside it, and every run a source."""
    paths = dm.corpus_paths()
    assert {p.stem for p in paths} == set(dm.CORPUS)
    for p in paths:
        assert p.with_suffix(".md").is_file() or p.stem == "korthikanti2022_table5"
    runs = dm.read_runs(list(paths))
    assert runs.rows.height >= 100
    assert runs.rows["source"].null_count() == 0
    assert set(runs.rows["framework"]) == {"megatron", "fsdp2"}
    assert {"dgx_a100_80gb", "dgx_h100", "dgx_b200", "gb200_nvl72", "grand_teton_h100"} <= set(runs.rows["system"])


def slurm_segment_gpus(gpus: int, per_node: int = 4, rack_nodes: int = 18) -> int:
    """The NVLink domain NVIDIA's performance launchers give a GB200 job (NeMo's scripts/performance since
    2025-04-07, Megatron-Bridge's since 2025-08-28): beyond one rack of 18 four-GPU nodes, a Slurm
    segment of the largest node count <= 18 that divides the job's nodes; within one rack, the job."""
    nodes = gpus // per_node
    if nodes <= rack_nodes:
        return gpus
    return per_node * max(k for k in range(1, rack_nodes + 1) if nodes % k == 0)


def test_gb200_runs_of_nvidias_launchers_have_their_segment_as_nvlink_domain():
    """Every packaged GB200 run of more than one rack's GPUs (NeMo 25.04 on, Megatron-Bridge) declares the
    segment its launcher asked for (64 GPUs for 128 and 256), not the rack's 72; within a rack a blank
    (the preset's 72) or the job's own size say the same."""
    rows = pl.concat([dm.read_runs(dm.PACKAGED_CSV.parent / f"{name}.csv").rows.select("gpu", "gpus", "nvs_size",
                                                                                        "source_id")
                      for name in ("nemo_perf_dense", "nvidia_perf_dense", "nvidia_perf_moe")], how="diagonal")
    gb200 = rows.filter(pl.col("gpu") == "GB200")
    assert gb200.height >= 40 and gb200["gpus"].max() >= 256
    for r in gb200.iter_rows(named=True):
        assert r["source_id"].startswith(("nemo-25.04", "nemo-25.07", "mbridge-")), r
        domain = slurm_segment_gpus(r["gpus"])
        assert (r["nvs_size"] or 72) == domain or (domain == r["gpus"] and r["nvs_size"] in (None, r["gpus"])), r
    assert slurm_segment_gpus(128) == slurm_segment_gpus(256) == 64 and slurm_segment_gpus(72) == 72


def test_offload_layers_column(tmp_path):
    """Megatron's cpu_offloading_num_layers: blank or 0 is none; the engine's profile gets the
    value, so the predicted memory falls; at least one block stays, the system needs a host link
    (B300's is not in its preset), and a value that is not a whole number is refused."""
    header = HEADER + ("offload_layers",)
    base = {**GOOD, "recompute": "none", "gpu": "GB200"}
    rows = [base, {**base, "offload_layers": "24"}, {**base, "offload_layers": "48"},
            {**base, "offload_layers": "2.5"}, {**base, "offload_layers": "8", "gpu": "B300"},
            {**base, "offload_layers": "8", "recompute": "full"}]
    runs = dm.read_runs(write_csv(tmp_path / "offload.csv", rows, header))
    assert runs.rows["offload_layers"].to_list() == [0, 24]
    assert [str(e) for e in runs.errors] == [
        "row 3 (m22b): offload_layers = 48: must be < layers = 48 (Megatron keeps at least one block's "
        "activations on the GPU)",
        "row 4 (m22b): offload_layers = 2.5: must be an integer >= 0 (blocks whose activations are offloaded to "
        "host memory) or blank",
        "row 5 (m22b): offload_layers = 8: system dgx_b300 has no host link (host_bandwidth = 0): activation "
        "offloading cannot be modelled",
        "row 6 (m22b): offload_layers = 8: Megatron-core offloads activations without a pipeline or recomputation "
        "(the run has pp = 1, recompute = full)"]
    assert [c.offload_layers for c in dm.plan(runs)] == [0, 24]
    memory = dm.predict(runs).frame["predicted_memory_gb"].to_list()
    assert memory[1] < memory[0]


def test_dropout_column(tmp_path):
    """The hidden and attention dropout of a run: blank is Megatron's default 0.1 (the 2022 A100
    runs), a preset's own value where the row names one; 0 drops the masks, so the predicted memory
    of the same run falls by the masks' bytes and nothing else changes; a value outside [0, 0.99]
    is refused in one line naming the column."""
    header = HEADER + ("dropout",)
    rows = [GOOD, {**GOOD, "dropout": "0"}, {**GOOD, "dropout": "0.1"}, {**GOOD, "dropout": "1"},
            {**GOOD, "dropout": "x"}]
    runs = dm.read_runs(write_csv(tmp_path / "dropout.csv", rows, header))
    assert runs.rows["dropout"].to_list() == [None, 0.0, 0.1]
    assert [str(e) for e in runs.errors] == [
        "row 4 (m22b): dropout = 1: must be a probability in [0, 0.99] or blank",
        "row 5 (m22b): dropout = x: must be a probability in [0, 0.99] or blank"]
    assert [dm.run_model(r).dropout for r in runs.rows.iter_rows(named=True)] == [0.1, 0.0, 0.1]
    frame = dm.predict(runs).frame
    blank, zero, tenth = frame["predicted_memory_gb"].to_list()
    assert blank == tenth > zero
    # 22B, tp 8, selective recompute, sequence parallel, b = 4: two 1-byte masks of each block's
    # b l e / tp elements (the materialized attention's dropout is recomputed, never stored), 48
    # blocks, one microbatch in flight
    assert blank - zero == pytest.approx(48 * 2 * 4 * 2048 * 6144 / 8 * 1e-9, rel=1e-12)
    assert frame["predicted_iter_s"][1] < frame["predicted_iter_s"][0]
    # a preset row takes the preset's dropout (Llama 3: none), a given cell overrides it
    assert dm.run_model({**runs.rows.row(0, named=True), "preset": "llama3_8b", "dropout": None}).dropout == 0.0
    assert dm.run_model({**runs.rows.row(0, named=True), "preset": "llama3_8b", "dropout": 0.1}).dropout == 0.1


def test_window_columns(tmp_path):
    """A run's sliding window: blank is none (or a preset's), given cells build the model with it, so under
    fused attention the same run is predicted faster and its memory is unchanged; under materialized
    attention (which computes every score) nothing changes; bad cells are one line each."""
    header = HEADER + ("attention", "window", "window_layers")
    flash = {**GOOD, "attention": "flash"}
    rows = [flash, {**flash, "window": "256", "window_layers": "24"}, {**GOOD, "attention": "standard", "window": "256"},
            {**GOOD, "attention": "standard"}, {**flash, "window": "-1"}, {**flash, "window_layers": "4"},
            {**flash, "window": "256", "window_layers": "49"}, {**flash, "window": "9" * 30},
            {**flash, "window": "0", "window_layers": "4"}]
    runs = dm.read_runs(write_csv(tmp_path / "window.csv", rows, header))
    assert [str(e) for e in runs.errors] == [
        "row 5 (m22b): window = -1: must be an integer in [0, 999,999,999] (the keys a query of a windowed block "
        "sees, 0 none) or blank",
        "row 6 (m22b): window_layers = 4: needs a window (the window column, or a preset with one)",
        "row 7 (m22b): window_layers = 49: must be <= layers = 48",
        "row 8 (m22b): window = 999999999999999999999999999999: must be an integer in [0, 999,999,999] (the keys "
        "a query of a windowed block sees, 0 none) or blank",
        "row 9 (m22b): window_layers = 4: needs a window (the window column, or a preset with one)"]
    models = [dm.run_model(r) for r in runs.rows.iter_rows(named=True)]
    assert [(m.window, m.window_layers, m.window_share) for m in models] == [
        (None, None, 0.0), (256, 24, 0.5), (256, None, 1.0), (None, None, 0.0)]
    frame = dm.predict(runs).frame
    t = frame["predicted_iter_s"].to_list()
    assert t[1] < t[0] and t[2] == t[3]
    assert frame["predicted_memory_gb"][1] == frame["predicted_memory_gb"][0]
    # a preset's window is the row's unless the row gives its own
    gpt = {**runs.rows.row(0, named=True), "preset": "gpt_oss_120b", "seq_len": 4096}
    assert (dm.run_model(gpt).window, dm.run_model(gpt).window_layers) == (128, 18)
    assert dm.run_model({**gpt, "window": 64}).window == 64
    assert (dm.run_model({**gpt, "window": 0}).window, dm.run_model({**gpt, "window": 0}).window_share) == (None, 0.0)
    # a preset with a window takes window_layers alone
    preset_rows = dm.read_runs(write_csv(tmp_path / "preset.csv", [{**flash, "preset": "gpt_oss_120b", "seq_len": "4096",
                                                                    "window_layers": "12", "heads": "", "hidden": "",
                                                                    "layers": "", "ffn": "", "vocab": ""}], header + ("preset",)))
    assert not preset_rows.errors and dm.run_model(preset_rows.rows.row(0, named=True)).window_layers == 12


def test_bias_column(tmp_path):
    """Whether a run's linears have biases: blank is true (GPT-3, the 2022 A100 runs), a preset's own
    value where the row names one (Llama 3: none); false drops the bias parameters, whose states
    are the only memory that changes; anything but a boolean is refused in one line."""
    header = HEADER + ("bias",)
    rows = [GOOD, {**GOOD, "bias": "false"}, {**GOOD, "bias": "true"}, {**GOOD, "bias": "maybe"}]
    runs = dm.read_runs(write_csv(tmp_path / "bias.csv", rows, header))
    assert runs.rows["bias"].to_list() == [True, False, True]
    assert [str(e) for e in runs.errors] == [
        "row 4 (m22b): bias = maybe: must be a boolean (true | false | 1 | 0 | yes | no)"]
    assert [dm.run_model(r).bias for r in runs.rows.iter_rows(named=True)] == [True, False, True]
    frame = dm.predict(runs).frame
    blank, none, given = frame["predicted_memory_gb"].to_list()
    assert blank == given > none and blank - none < 1e-3 * blank  # 3 biases a block: e, e and f / tp each
    assert dm.run_model({**runs.rows.row(0, named=True), "preset": "llama3_8b"}).bias is False


def test_optimizer_state_column(tmp_path):
    """`optimizer_state` reaches the engine: NeMo 24.07's Nemotron-4 340B run (optimizer in bf16) with each
    state holds K Psi / N_d of optimizer memory with K = 12 (fp32, blank), 10 (remainder) and 4 (bf16)
    bytes, in the ratios 10/12 and 4/12, and fits its 80 GB in bf16 only; a bad value is one line."""
    header = HEADER + ("grad_reduce", "optimizer_state")
    rows = [{**GOOD, "optimizer_state": "remainder"}, {**GOOD, "optimizer_state": "fp16"}]
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", rows, header))
    assert runs.rows["optimizer_state"].to_list() == ["remainder"]
    assert [str(e) for e in runs.errors] == [
        "row 2 (m22b): optimizer_state = fp16: must be one of fp32 | remainder | bf16_moments | bf16"]
    from dse.truth.runs import resolve_csv
    packaged = pl.read_csv(resolve_csv("nemo_perf_dense"), infer_schema_length=0)
    row = packaged.filter((pl.col("model") == "nemotron4-340b") & (pl.col("source_id") == "nemo-24.07"))
    assert row["optimizer_state"].to_list() == ["bf16"]
    pl.concat([row.with_columns(pl.lit(v).alias("optimizer_state")) for v in ("", "remainder", "bf16")]).write_csv(
        tmp_path / "nemotron.csv")
    frame = dm.predict(tmp_path / "nemotron.csv").frame
    assert frame["optimizer_state"].to_list() == ["fp32", "remainder", "bf16"]
    opt = frame["mem_optimizer"].to_list()
    assert opt[1] / opt[0] == pytest.approx(10 / 12, rel=1e-12) and opt[2] / opt[0] == pytest.approx(4 / 12, rel=1e-12)
    assert frame["fits"].to_list() == [False, False, True]  # 12 or 10 bytes of Adam state would not have fitted
