"""Megatron's block and schedule in the default profile, against closed forms.

Activation memory per recompute mode and sequence-parallel choice: Korthikanti et al. 2022
(arXiv 2205.05198) Eq. 1-2 and Section 5; interleaved 1F1B bubble: Narayanan et al. 2021
(arXiv 2104.04473) Section 2.2.2, (p - 1) / (v m) of the ideal time; full recomputation: one more
forward pass of every block.
"""

from __future__ import annotations

import numpy as np
import pytest

import dse
from dse.truth.calibrate import Fitter, _in_order, calibrate
from dse.truth.calibration import FIELDS, load_calibration
from dse.truth.measured import plan, predict, read_runs
from dse.truth.runs import resolve_many
from kernels.params import PROFILES

# A GPT shape whose shards are exact: s, h, a divisible by t = 8.
MODEL = dict(name="gpt_test", seq_len=2048, hidden=4096, heads=32, depth=4, ffn=16384, vocab=51200)
SYSTEM = "dgx_a100_80gb"
S, H, A, L = 2048, 4096, 32, 4
PLAIN = PROFILES["default"]._replace(embeddings=False, memory_reserve=0.0, calibration="none")


def activations(recompute: int, seq_par: int, flash: bool = False, t: int = 8, b: int = 2) -> float:
    """mem_activations (bytes) of one pipeline stage holding all L blocks, one microbatch."""
    prof = PLAIN._replace(flash_attention=flash)
    r = dse.evaluate(model=MODEL, system=SYSTEM, profile=prof, global_batch=b, n1=t, microbatch=b,
                     recompute=recompute, seq_par=seq_par)
    return r["mem_activations"] * 1e9


@pytest.mark.parametrize("t", [1, 8])
def test_activation_memory_matches_korthikanti(t):
    """Bytes per block and microbatch of b sequences (2-byte activations, 1-byte dropout masks):
    none 34 sbh/t + 5 a s^2 b/t with sequence parallelism, sbh (10 + 24/t) + 5 a s^2 b / t without;
    selective drops the 5 a s^2 b/t term; full keeps 2 sbh/t per block plus one block whole."""
    b = 2
    sbh = S * b * H
    scores = 5.0 * A * S * S * b / t
    assert activations(0, 1, t=t) == pytest.approx(L * (34.0 * sbh / t + scores), rel=1e-12)
    assert activations(0, 0, t=t) == pytest.approx(L * (sbh * (10.0 + 24.0 / t) + scores), rel=1e-12)
    assert activations(1, 1, t=t) == pytest.approx(L * 34.0 * sbh / t, rel=1e-12)
    assert activations(1, 0, t=t) == pytest.approx(L * sbh * (10.0 + 24.0 / t), rel=1e-12)
    assert activations(2, 1, t=t) == pytest.approx(L * 2.0 * sbh / t + 34.0 * sbh / t + scores, rel=1e-12)


def test_flash_attention_never_stores_scores():
    """Fused attention keeps Q, K, V and its fp32 softmax statistics (a s b / t values of 4 bytes),
    never the s x s scores. Selective recomputation checkpoints the core as Megatron-core does
    whatever its kernel (core_attn): the checkpoint keeps Q, K, V, its inputs, and drops the
    statistics, which the core's forward makes again in backward."""
    b, t = 2, 8
    sbh = S * b * H
    stats = 2.0 * 2.0 * A * S * b / t
    assert activations(0, 1, flash=True) == pytest.approx(L * (34.0 * sbh / t + stats), rel=1e-12)
    assert activations(1, 1, flash=True) == pytest.approx(L * 34.0 * sbh / t, rel=1e-12)


@pytest.mark.parametrize("recompute", [0, 1])
def test_summa_megatron_block_on_one_gpu_keeps_korthikanti_activations(recompute):
    """SUMMA's grid of one GPU (n1 = n2 = 1) runs Megatron's block as tp1d at t = 1 does: per block
    and microbatch 34 s b h bytes, plus the fused core's fp32 statistics without recomputation. The
    attention output is kept once (the out-projection's input), and no dropout follows the MLP
    activation (seed 001's block has one there; Megatron's has not)."""
    b = 2
    sbh = S * b * H
    stats = 2.0 * 2.0 * A * S * b
    prof = PLAIN._replace(flash_attention=True)
    r = dse.evaluate(model=MODEL, system=SYSTEM, profile=prof, strategy="summa", global_batch=b, n1=1, n2=1,
                     n_b=1, microbatch=b, recompute=recompute, seq_par=1)
    expected = L * (34.0 * sbh + (stats if recompute == 0 else 0.0))
    assert r["mem_activations"] * 1e9 == pytest.approx(expected, rel=1e-12)


def test_selective_runs_the_fused_core_forward_again():
    """Under fused attention, selective recomputation adds the core's forward FLOPs to backward: per
    block and microbatch the causal kernel's forward, 2 x 2 b s^2 h / (2 t) for Q K^T and P V over
    the kept half of the score matrix, plus its softmax terms; nothing else of the block.
    Full recomputation adds the whole forward."""
    b, t = 2, 8
    prof = PLAIN._replace(flash_attention=True)

    def flops(recompute):
        r = dse.evaluate(model=MODEL, system=SYSTEM, profile=prof, global_batch=b, n1=t, microbatch=b,
                         recompute=recompute, seq_par=1)
        return r["flops_per_gpu"]

    core_matmuls = 2.0 * 2.0 * b * S * S * H / t / 2.0 * L / 1e12  # TFLOP, causal half
    extra = flops(1) - flops(0)
    assert extra > core_matmuls  # the matmuls and the kernel's softmax
    assert extra < 1.1 * core_matmuls  # and no other layer of the block
    assert flops(2) - flops(0) > 10.0 * extra


@pytest.mark.parametrize("v", [1, 2, 4])
def test_interleaved_bubble_fraction(v):
    """Bubble / ideal time = (p - 1) / (v m) (Narayanan et al. 2021 Section 2.2.2)."""
    p, m = 4, 16
    model = dict(MODEL, depth=16)
    r = dse.evaluate(model=model, system=SYSTEM, profile=PLAIN, global_batch=m, n1=2, n_p=p, microbatch=1,
                     nvs1=2, nvs_p=4, nvs_d=1, interleave=v)
    ideal = r["t_compute"] + r["t_memory"] + r["t_tp_comm"] + r["t_pp_comm"]
    assert r["t_bubble"] / ideal == pytest.approx((p - 1) / (v * m), rel=1e-12)


def test_interleaved_activations_in_flight_never_exceed_the_microbatches():
    """The first stage holds min(n_p, m) microbatches of its blocks' activations, times
    1 + (n_p - 1)/(n_p v) under the interleaved schedule (Narayanan et al. 2021 Section 2.2: the
    warm-up runs (n_p - 1) 2 + (v - 1) n_p chunk forwards ahead), but never more than the m
    microbatches there are: with m = n_p every chunk's forward runs before the first backward.
    Per-microbatch stage activations S and the working set W come from two 1F1B runs (m = 1 and
    m = n_p: S + W and n_p S + W)."""
    p, v = 4, 2
    model = dict(MODEL, depth=16)

    def memory(m, interleave):
        return dse.evaluate(model=model, system=SYSTEM, profile=PLAIN, global_batch=m, n1=2, n_p=p, microbatch=1,
                            nvs1=2, nvs_p=4, nvs_d=1, interleave=interleave)["mem_activations"]

    one, full = memory(1, 1), memory(p, 1)
    stage = (full - one) / (p - 1)
    working = one - stage
    assert memory(16, v) == pytest.approx(stage * p * (1 + (p - 1) / (p * v)) + working, rel=1e-12)
    assert memory(p, v) == pytest.approx(stage * p + working, rel=1e-12)  # 5.5 chunk-microbatches capped at 4
    assert memory(16, 1) == pytest.approx(full, rel=1e-12)


def test_full_recompute_runs_the_forward_again():
    """Full recomputation costs one more forward of every block: with fused attention (which
    recomputes its core in any mode) the executed matmul FLOPs grow from 3 to 4 forward passes."""
    kw = dict(model=MODEL, system=SYSTEM, profile=PLAIN, global_batch=1, n1=8, microbatch=1)
    sel = dse.evaluate(recompute="selective", **kw)
    full = dse.evaluate(recompute="full", **kw)
    assert full["flops_per_gpu"] / sel["flops_per_gpu"] == pytest.approx(4.0 / 3.0, rel=0.02)
    assert full["iteration_time"] > sel["iteration_time"]


def test_uneven_pipeline_stages_take_the_ceiling():
    """A depth that n_p does not divide: the busiest stage has ceil(d / n_p) blocks."""
    model = dict(MODEL, depth=10)
    kw = dict(model=model, system=SYSTEM, profile=PLAIN, global_batch=8, n1=2, microbatch=1, nvs1=2, nvs_d=1)
    four = dse.evaluate(n_p=4, nvs_p=4, **kw)  # ceil(10/4) = 3 blocks on the busiest stage
    three = dse.evaluate(model=dict(MODEL, depth=12), system=SYSTEM, profile=PLAIN, global_batch=8, n1=2,
                         microbatch=1, nvs1=2, nvs_d=1, n_p=4, nvs_p=4)  # 3 blocks on every stage
    assert four["t_compute"] == pytest.approx(three["t_compute"], rel=1e-12)


def test_lbnl_refuses_the_new_axes():
    with pytest.raises(dse.SpecError, match="recompute = 2: profile 'lbnl'"):
        dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, profile="lbnl", n1=8, n_p=128, n_d=4, nvs1=8,
                     nvs_p=1, nvs_d=1, recompute="full")
    with pytest.raises(dse.SpecError, match="interleave = 2: profile 'lbnl'"):
        dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, profile="lbnl", n1=8, n_p=128, n_d=4, nvs1=8,
                     nvs_p=1, nvs_d=1, interleave=2)


def test_calibration_gradient_matches_finite_differences():
    runs = read_runs()
    calls = plan(runs)
    measured = np.array(_in_order(runs, calls, "measured_iter_s"))  # the fit's order
    fit = Fitter(calls, measured)
    theta = fit.start({"compute_eff": 0.85, "matmul_knee": 2.0, "hbm_eff": 0.6})
    assert theta.shape == (1, len(FIELDS))  # one generation, one framework: the pooled row only
    w = np.ones(len(measured))
    value, grad = fit.loss_and_grad(theta, w)
    for i in range(len(FIELDS)):
        d = np.zeros_like(theta)
        d[0, i] = 1e-6
        fd = (fit.loss_and_grad(theta + d, w)[0] - fit.loss_and_grad(theta - d, w)[0]) / 2e-6
        assert float(grad[0, i]) == pytest.approx(float(fd), rel=1e-5, abs=1e-10)


def test_calibration_loss_sums_the_batches_of_every_engine_call():
    """The loss compiled batch by batch is the weighted mean squared log error of the predicted
    runs, computed here in numpy from `predict`, plus the ridge on the effects (a pair's `pair_ridge`
    times heavier): over runs of two generations and frameworks (several engine batches, effect rows),
    some runs weighted out."""
    runs = read_runs(resolve_many("corpus"))
    calls = plan(runs)[:5]  # A100 runs in one engine batch, an H100 run in another: two compiled batches
    measured = np.array(_in_order(runs, calls, "measured_iter_s"))  # the fit's order
    effects = ["generation:ampere", "framework:megatron", "group:ampere/megatron"]
    fit = Fitter(calls, measured, effects=effects, ridge=0.01, pair_ridge=7.0)
    assert len(fit._parts) > 1
    rng = np.random.default_rng(0)
    theta = fit.start({"compute_eff": 0.8, "matmul_knee": 3.0, "hbm_eff": 0.7}) + 0.1 * rng.standard_normal(
        (4, len(FIELDS)))
    w = (rng.random(len(measured)) > 0.3).astype(np.float64)
    r = np.log(fit.predict(theta) / measured)
    expected = (np.sum(w * r * r) / np.sum(w) + 0.01 * np.sum(theta[1:3] ** 2)
                + 0.01 * 7.0 * np.sum(theta[3] ** 2))
    assert float(fit.loss_and_grad(theta, w)[0]) == pytest.approx(expected, rel=1e-12)


def test_held_out_folds_forget_what_only_the_held_out_runs_taught():
    """A leave-one-out fold starts from the fit on every run, but an effect that only the held-out
    runs take (the A100's here, when every A100 run is held out), and fp8_eff of an effect whose FP8
    runs are all held out, restart at 0 (no effect), and so does the pooled value of a field no
    remaining run moves (where every fit starts): the fold cannot keep what it learnt from the runs
    it is to predict. Checked at zero Adam steps, where the fold is its start."""
    from dse.truth.calibrate import _held_out, _groups, run_groups

    runs = read_runs(resolve_many("corpus"))
    calls = plan(runs)[:5]  # A100 BF16 runs and H100 FP8 runs
    measured = np.array(_in_order(runs, calls, "measured_iter_s"))  # the fit's order
    gens, _ = run_groups(calls)
    precisions = _groups(runs, calls)[2]
    assert {"ampere", "hopper"} <= set(gens) and {"bf16", "fp8"} <= set(precisions)
    effects = ["generation:ampere", "generation:hopper", "framework:megatron"]
    fit = Fitter(calls, measured, effects=effects)
    theta = np.arange(1.0, 1.0 + 4 * len(FIELDS)).reshape(4, len(FIELDS))
    folds: dict = {}
    held = _held_out(fit, theta, gens, precisions, 0, "generation", folds)
    fp8 = list(FIELDS).index("fp8_eff")
    unmoved = [list(FIELDS).index(f) for f in ("fp4_eff", "fp8_rowwise_eff", "host_moe_time")]
    # no run moves fp4_eff (none is NVFP4), fp8_rowwise_eff (none is scaled per row) nor host_moe_time
    # (none is a dropless MoE run): they restart at 0, the pooled row's and every effect's
    assert "nvfp4" not in precisions
    for fold in folds.values():
        assert np.all(fold[:, unmoved] == 0.0)
    kept = [j for j in range(len(FIELDS)) if j not in unmoved]
    without_ampere, without_hopper = folds["generation:ampere"], folds["generation:hopper"]
    assert np.all(without_ampere[1] == 0.0)  # no A100 run left: the A100's effect is gone
    assert np.array_equal(without_ampere[[0, 2, 3]][:, kept], theta[[0, 2, 3]][:, kept])
    assert np.all(without_hopper[2] == 0.0)
    # the only FP8 runs are the H100's: without them fp8_eff is not informed, pooled or any effect's
    assert without_hopper[3, fp8] == 0.0 and without_hopper[0, fp8] == 0.0
    assert without_ampere[0, fp8] == theta[0, fp8]  # the H100's FP8 runs still move it
    rest = [j for j in kept if j != fp8]
    assert np.array_equal(without_hopper[3, rest], theta[3, rest])
    assert held.shape == measured.shape and np.all(np.isfinite(held))


def test_shipped_calibration_is_reproduced_and_validated():
    """`dse calibrate` on the packaged runs gives the shipped values, and the default profile under
    that calibration predicts those runs to the errors the file records (measured times are the
    independent values); under its own (corpus2026) within the issue's 3.5% mean."""
    shipped = load_calibration("korthikanti2022")
    res = calibrate(steps=400)
    # BF16 runs only: fp8_eff is not identified, so the calibration leaves it out
    assert set(res.calibration.values) == set(shipped.values) == {"compute_eff", "matmul_knee", "hbm_eff"}
    for k in shipped.values:
        assert res.calibration.values[k] == pytest.approx(shipped.values[k], rel=1e-3)
    # fitted on Table 5 alone: in sample within the bands, leave-one-model-out mean <= 3.5%
    # and its worst what the file records (8.3%: the 22B model with full recomputation, predicted from
    # the three larger ones); the max of 8% holds under the default's calibration
    # (`test_default_calibration_holds_table5_leave_one_model_out`, slow)
    assert res.calibration.in_sample["mean"] <= 0.035 and res.calibration.in_sample["max"] <= 0.08
    assert res.calibration.leave_one_model_out["mean"] <= 0.035
    for k in ("mean", "max"):
        assert res.calibration.leave_one_model_out[k] == pytest.approx(shipped.leave_one_model_out[k], rel=1e-2)
    pred = predict(profile=PROFILES["default"]._replace(calibration="korthikanti2022"))
    err = np.abs(pred.frame["error"].to_numpy())
    assert err.mean() == pytest.approx(shipped.in_sample["mean"], abs=2e-3)
    assert np.abs(predict().frame["error"].to_numpy()).mean() <= 0.035  # the default's calibration (corpus2026)
    every = {c: v for c, v in shipped.values.items()}
    assert all(FIELDS[k][0] <= every[k] <= FIELDS[k][1] for k in every)


def test_the_fit_predicts_what_validate_prints():
    """`dse calibrate` fits the very predictions `dse validate measured` makes: at the same
    efficiencies both give the same iteration time for every run, runs whose embedding and loss
    take pipeline places (Megatron's split flags, a static block shape of the kernels) included."""
    import dataclasses

    import polars as pl

    from dse.api import evaluate_many
    from dse.truth.calibrate import _to_theta
    from dse.truth.measured import run_profile
    from dse.truth.runs import resolve_many

    runs = read_runs(resolve_many("nvidia_perf_dense"))
    rows = runs.rows.filter((pl.col("model") == "llama3.1-405b") & (pl.col("system") == "gb200_nvl72")
                            & (pl.col("precision") == "fp8")).head(3)
    assert rows["account_for_embedding_in_pipeline_split"].to_list() == [True] * 3
    calls = plan(dataclasses.replace(runs, rows=rows, errors=()))
    plain = PROFILES["default"]._replace(calibration="none")  # the system's own efficiencies, no file
    values = {"compute_eff": 0.7, "matmul_knee": 5.0, "hbm_eff": 0.5, "fp8_eff": 0.7, "fp4_eff": 0.6}
    printed = np.concatenate([evaluate_many(
        c.table, model=c.model, system=dse.load_system(c.system, nvs_size=c.nvs_size, **values), strategy=c.strategy,
        profile=run_profile(plain, c), global_batch=c.global_batch, nvs_size=c.nvs_size)["iteration_time"].to_numpy()
        for c in calls])
    fit = Fitter(calls, rows["measured_iter_s"].to_numpy(), profile=plain)
    # the logit round trip moves each efficiency by ~1e-16 of itself
    assert np.asarray(fit.predict(_to_theta(values)[None, :])) == pytest.approx(printed, rel=1e-12)


@pytest.mark.slow
def test_default_calibration_holds_table5_leave_one_model_out():
    """The issue's target for the 2022 A100 runs under the default profile's calibration (corpus2026,
    as `dse calibrate --csv corpus --steps 800 --fold-steps 300` fits it): each Table 5 model predicted
    by a fit without that model's runs, mean |error| <= 3.5%, max <= 8%."""
    from dse.truth.runs import corpus_paths

    res = calibrate(list(corpus_paths()), name="corpus2026", steps=800, fold_steps=300)
    table5 = np.array([s == "korthikanti2022_table5" for s in res.sources])
    errors = np.abs(res.held_out[table5] / res.measured[table5] - 1.0)
    assert table5.sum() == 8
    assert errors.mean() <= 0.035 and errors.max() <= 0.08
