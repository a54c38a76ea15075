"""Measured mixture-of-experts runs: the expert columns of `dse validate measured` (preset, ep, etp,
capacity_factor, mtp, pipeline_layout, recompute_modules, moe_overlap, moe_force_balance,
nvs_size, precisions mxfp8 and nvfp4), their one-line refusals, and the packaged corpus."""

from __future__ import annotations

import math

import polars as pl
import pytest

import dse
import dse.truth.measured as dm
from dse.explore.engine import profile_of
from helpers import packaged_runs, write_csv

HEADER = ("model", "preset", "seq_len", "tp", "pp", "cp", "ep", "etp", "dp", "gpus", "global_batch", "micro_batch",
          "interleave", "recompute", "recompute_modules", "sequence_parallel", "precision", "gpu", "nvs_size",
          "measured_iter_s", "mtp", "pipeline_layout", "capacity_factor", "moe_force_balance", "moe_overlap",
          "grad_reduce", "heads")
#: Qwen3-30B-A3B on 8 B200 GPUs, ETP = 1 (a Megatron-Bridge recipe's layout)
QWEN = dict(model="qwen3-30b", preset="qwen3_30b_a3b", seq_len="4096", tp="1", pp="1", cp="1", ep="8", etp="",
            dp="8", gpus="8", global_batch="512", micro_batch="4", interleave="1", recompute="none",
            sequence_parallel="true", precision="mxfp8", gpu="B200", measured_iter_s="9.8", grad_reduce="bf16")


def errors(tmp_path, *changes) -> list[str]:
    runs = dm.read_runs(write_csv(tmp_path / "moe.csv", [{**QWEN, **c} for c in changes], HEADER))
    return [str(e) for e in runs.errors]


@pytest.mark.parametrize("change, line", [
    (dict(preset="qwen4"), "row 1 (qwen3-30b): preset = qwen4: not a model preset; valid: "),
    (dict(heads="16"), "row 1 (qwen3-30b): heads = 16: preset 'qwen3_30b_a3b' has heads = 32; leave it blank or equal"),
    (dict(ep="3"), "row 1 (qwen3-30b): ep = 3: must divide the preset's experts = 128"),
    (dict(ep="16"), "row 1 (qwen3-30b): ep = 16: ep * etp = 16 must divide the stage's tp * cp * dp = 8 GPUs"),
    (dict(tp="2", dp="4", etp="4"), "row 1 (qwen3-30b): etp = 4: must be 1 or tp = 2"),
    (dict(moe_force_balance="false"), "row 1 (qwen3-30b): moe_force_balance = false: dropless routing without "
                                      "forced balance: the run's routing imbalance is not published"),
    (dict(recompute="selective", recompute_modules="moe;moe_act"),
     "row 1 (qwen3-30b): recompute_modules = moe;moe_act: recomputing Megatron's moe is not yet modelled; "
     "the modules modelled: core_attn | layernorm | mla_up_proj | mlp | moe_act"),
    (dict(recompute_modules="moe_act"), "row 1 (qwen3-30b): recompute_modules = moe_act: Megatron recomputes "
                                        "modules under recompute = selective only (the run has none)"),
    (dict(nvs_size="16"), "row 1 (qwen3-30b): nvs_size = 16: must be <= the 8 GPUs of an NVLink domain of dgx_b200"),
    (dict(capacity_factor="-1"), "row 1 (qwen3-30b): capacity_factor = -1: must be a number > 0 (token drop)"),
    (dict(mtp="x"), "row 1 (qwen3-30b): mtp = x: must be an integer in [0, 64]"),
    (dict(pp="2", dp="4", ep="4", pipeline_layout="Et*24|t*24"),
     "row 1 (qwen3-30b): pipeline_layout = Et*24|t*24: the loss L must appear once, at the end of the last stage"),
    (dict(pp="2", dp="4", ep="4", pipeline_layout="Et*12|(t*12|)*2t*12L"),
     "row 1 (qwen3-30b): pipeline_layout = Et*12|(t*12|)*2t*12L: has 4 stages; must be pp * interleave = 2 * 1"),
])
def test_expert_columns_refused_in_one_line(tmp_path, change, line):
    got = errors(tmp_path, change)
    assert any(e.startswith(line) for e in got), got


def test_good_row_and_its_defaults(tmp_path):
    """A preset fills the shape; etp blank is tp (Megatron's default); mxfp8 runs the FP8 rate."""
    runs = dm.read_runs(write_csv(tmp_path / "moe.csv", [QWEN], HEADER))
    assert not runs.errors
    row = runs.rows.row(0, named=True)
    assert (row["hidden"], row["layers"], row["heads"], row["etp"], row["ep"], row["mtp"]) == (2048, 48, 32, 1, 8, 0)


def test_prediction_is_the_engine_on_the_same_configuration(tmp_path):
    """The CSV columns reach the engine as the same configuration `dse.evaluate` takes: preset at the
    run's sequence length, ep, ETP = 1 as profile.expert_tp false, overlap, recompute modules, the
    domain of nvs_size, bf16 gradients."""
    row = {**QWEN, "tp": "2", "dp": "4", "etp": "1", "moe_overlap": "true", "recompute": "selective",
           "recompute_modules": "layernorm;moe_act", "seq_len": "2048", "global_batch": "64"}
    pred = dm.predict(dm.read_runs(write_csv(tmp_path / "moe.csv", [row], HEADER)))
    assert not pred.errors
    prof = profile_of("default")._replace(expert_tp=False, ep_comm_overlap=True, grad_reduce_in_bf16=True,
                                          recompute_modules="layernorm+moe_act")
    want = dse.evaluate(model=dse.load_model("qwen3_30b_a3b", seq_len=2048), system="dgx_b200", nvs_size=8,
                        strategy="tp1d", global_batch=64, profile=prof, n1=2, n_p=1, n_d=4, microbatch=4, nvs1=2,
                        nvs_p=1, nvs_d=4, ep=8, recompute="selective", precision="fp8")
    assert pred.frame["predicted_iter_s"][0] == pytest.approx(want["iteration_time"], rel=1e-12)
    assert pred.frame["predicted_memory_gb"][0] == pytest.approx(want["memory"], rel=1e-12)
    # and so are the prediction's parts (the all-to-alls hidden by the overlap: t_ep_comm 0 in both)
    for part in ("t_compute", "t_memory", "t_tp_comm", "t_ep_comm", "t_dp_comm", "t_bubble", "mem_weights",
                 "mem_optimizer", "mem_activations"):
        assert pred.frame[part][0] == pytest.approx(want[part], rel=1e-12)


def test_an_nvfp4_run_is_the_engine_at_nvfp4(tmp_path):
    """precision nvfp4 reaches the engine as precision code 2 (the system's NVFP4 rate); on a GPU
    without one the prediction is refused in one line."""
    pred = dm.predict(dm.read_runs(write_csv(tmp_path / "moe.csv", [{**QWEN, "precision": "nvfp4"}], HEADER)))
    assert not pred.errors
    want = dse.evaluate(model=dse.load_model("qwen3_30b_a3b", seq_len=4096), system="dgx_b200", nvs_size=8,
                        strategy="tp1d", global_batch=512, profile=profile_of("default")._replace(
                            expert_tp=False, grad_reduce_in_bf16=True),
                        n1=1, n_p=1, n_d=8, microbatch=4, nvs1=1, nvs_p=1, nvs_d=8, ep=8, recompute="none",
                        precision="nvfp4")
    assert pred.frame["predicted_iter_s"][0] == pytest.approx(want["iteration_time"], rel=1e-12)
    hopper = dm.predict(dm.read_runs(write_csv(tmp_path / "h.csv", [{**QWEN, "precision": "nvfp4", "gpu": "H100-SXM"}],
                                               HEADER)))
    assert any("has no NVFP4 rate" in str(e) for e in hopper.errors), hopper.errors


@pytest.mark.slow
def test_packaged_moe_corpus():
    """The packaged MoE runs: at least 40 predicted, every refusal one of the named, unmodelled or
    inconsistent cases (no engine rejection), and each prediction finite. (Slow: minutes of compiling
    the corpus's engine programs; the default suite runs `test_packaged_moe_corpus_sample`.)"""
    runs = dm.read_runs(dm.PACKAGED_CSV.parent / "nvidia_perf_moe.csv")
    pred = dm.predict(runs)
    assert pred.frame.height >= 40
    assert all(e.column != "engine" for e in pred.errors), [str(e) for e in pred.errors]
    assert all(math.isfinite(v) and v > 0 for v in pred.frame["predicted_iter_s"])
    assert set(pred.frame["preset"]) >= {"deepseek_v3", "qwen3_30b_a3b", "qwen3_235b_a22b", "gpt_oss_120b"}


#: A few (preset, gpu) pairs of the packaged MoE runs that between them hold every preset, GPU and
#: precision of the corpus and need four engine programs: the default suite's sample (the runs of one
#: program share it, so a pair's several runs cost no more than one)
FEW = (("deepseek_v3", "B200"), ("qwen3_235b_a22b", "H100-SXM"), ("gpt_oss_120b", "H100-SXM"),
       ("qwen3_30b_a3b", "GB200"), ("mixtral_8x7b", "GB200"), ("mixtral_8x22b", "GB200"))


@pytest.mark.parametrize("pairs", [
    pytest.param(FEW, id="few"),
    # every (preset, gpu, precision) stratum: ~20 engine programs, minutes of compiling
    pytest.param(None, id="every-stratum", marks=pytest.mark.slow)])
def test_packaged_moe_corpus_sample(pairs):
    """`test_packaged_moe_corpus`'s properties on a stratified sample of the packaged MoE runs: the
    first run of each (preset, gpu, precision) the corpus has (of the (preset, gpu) `pairs` only, in
    the default suite), every one predicted (no engine rejection, each prediction finite), the sample
    holding every preset, GPU and precision of the corpus."""
    full = dm.read_runs(dm.PACKAGED_CSV.parent / "nvidia_perf_moe.csv")
    where = () if pairs is None else (pl.struct("preset", "gpu").is_in([dict(preset=p, gpu=g) for p, g in pairs]),)
    runs = packaged_runs("nvidia_perf_moe.csv", *where, one_per=("preset", "gpu", "precision"))
    strata = set(full.rows.select("preset", "gpu", "precision").iter_rows())
    if pairs is None:
        assert set(runs.rows.select("preset", "gpu", "precision").iter_rows()) == strata and len(strata) >= 20
    else:
        got = set(runs.rows.select("preset", "gpu", "precision").iter_rows())
        assert got == {s for s in strata if s[:2] in pairs} and {s[:2] for s in got} == set(pairs)
    assert runs.rows.height == len(set(runs.rows.select("preset", "gpu", "precision").iter_rows()))
    pred = dm.predict(runs)
    assert all(e.column != "engine" for e in pred.errors), [str(e) for e in pred.errors]
    assert sorted(pred.frame["row"]) == sorted(runs.rows["row"])  # every sampled run predicted
    assert all(math.isfinite(v) and v > 0 for v in pred.frame["predicted_iter_s"])
    assert set(pred.frame["preset"]) >= {"deepseek_v3", "qwen3_30b_a3b", "qwen3_235b_a22b", "gpt_oss_120b"}
    assert set(pred.frame["preset"]) == set(full.rows["preset"])
    assert set(pred.frame["gpu"]) == set(full.rows["gpu"]) >= {"B200", "GB200", "H100-SXM"}
    assert set(pred.frame["precision"]) == set(full.rows["precision"]) >= {"bf16", "fp8", "mxfp8"}


def test_each_stated_doubt_is_a_contradiction_its_source_records():
    """The packaged MoE runs' `doubt` column is filled exactly where the row's `source` records that
    the printed configuration contradicts the recipe's (a `NOTE`, a value called inconsistent or
    doubtful, a config that differs from the page or does not match it), not where a value is merely
    unstated; and the valid runs left to fit hold every preset, GPU and precision the valid runs do, and
    at least the issue's 40 runs."""
    import csv
    import re

    rows = list(csv.DictReader((dm.PACKAGED_CSV.parent / "nvidia_perf_moe.csv").open()))
    said = re.compile(r"\bNOTE\b|inconsistent|doubtful|differs from the page|does not match")
    for r in rows:
        contradicted = bool(said.search(r["source"]))
        assert bool(r["doubt"].strip()) == contradicted, (r["source_id"], r["model"], r["gpu"], r["doubt"])
    valid = dm.read_runs(dm.PACKAGED_CSV.parent / "nvidia_perf_moe.csv").rows  # the rows read without error
    clear = valid.filter(pl.col("doubt").is_null() | (pl.col("doubt").str.strip_chars() == ""))
    assert clear.height >= 40
    for column in ("preset", "gpu", "precision"):
        assert set(clear[column]) == set(valid[column]), column
