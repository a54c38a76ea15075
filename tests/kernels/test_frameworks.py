"""The mechanisms of today's training frameworks, against closed forms and hand-derived schedules:
Megatron's pipeline-split flags (the embedding and loss taking layers' places), FP8 matmuls at a
calibrated efficiency, tensor-parallel overlap that hides only part of what it could, and the
framework switches (`kernels.frameworks.FRAMEWORKS`)."""

from __future__ import annotations

import numpy as np
import pytest

import dse
from dse.spec.specs import SpecError
from kernels.frameworks import FRAMEWORKS
from kernels.params import PROFILES, with_framework
from kernels.roofline import matmul_time

PLAIN = PROFILES["default"]._replace(memory_reserve=0.0, calibration="none")
# a large vocabulary: the logit layer and loss outweigh a block, so the last stage sets the pace
MODEL = dict(name="split_test", seq_len=1024, hidden=1024, heads=8, ffn=4096, vocab=256000, tied_embeddings=False)


def _core(depth: int, split: bool, n_p: int = 4, batch: int = 8) -> float:
    """The iteration time less the optimizer step (one data-parallel rank: no gradient sync)."""
    model = {**MODEL, "depth": depth, "account_for_embedding_in_pipeline_split": split,
             "account_for_loss_in_pipeline_split": split}
    r = dse.evaluate(model=model, system="dgx_h100", profile=PLAIN, global_batch=batch, n1=1, n_p=n_p, nvs_p=n_p,
                     microbatch=1, recompute=0)
    return r["iteration_time"] - r["t_optimizer"]


def test_pipeline_split_ends_hold_one_block_fewer():
    """With both flags a pipeline of n_p = 4 stages splits d + 2 layers: d = 6 puts 2 blocks on the
    middle stages and 1 block and the embedding (the logit layer and loss) on the first (last).
    Against d = 8 without the flags (2 blocks on every stage, the embedding and logits added to the
    ends), the busiest stage (the last: H > t_blk) is one block lighter in each of the m = 8
    microbatches, and the bubble (every other stage once: the middle ones and min(E, H) - t_blk of
    the first) one block lighter again: t(6, flags) = t(8) - (m + 1) t_blk. The block time t_blk
    comes from two depths without the flags: t(8) - t(4) = (m + n_p - 1) t_blk."""
    m, n_p = 8, 4
    t_blk = (_core(8, False) - _core(4, False)) / (m + n_p - 1)
    assert t_blk > 0.0
    assert _core(6, True) == pytest.approx(_core(8, False) - (m + 1) * t_blk, rel=1e-9)


def test_pipeline_split_needs_a_vocabulary_and_one_placement():
    """The flags need a vocabulary, and an explicit pipeline layout places the embedding and loss
    itself; an MoE model takes the flags (its stages are split with the ends' places,
    `kernels.stage.stage_mixes`)."""
    with pytest.raises(SpecError, match=r"^model.account_for_embedding_in_pipeline_split = true: needs model.vocab"):
        dse.load_model({**MODEL, "vocab": None, "depth": 6, "account_for_embedding_in_pipeline_split": True})
    with pytest.raises(SpecError, match=r"^model.account_for_loss_in_pipeline_split = true: model.pipeline_layout "
                                        r"places the embedding and the loss itself; give one or the other"):
        dse.load_model({**MODEL, "depth": 6, "account_for_loss_in_pipeline_split": True,
                        "pipeline_layout": "Et*2|t*2|t*2L"})
    moe = dse.load_model({**MODEL, "depth": 6, "experts": 8, "moe_every": 1, "account_for_loss_in_pipeline_split": True})
    assert moe.split_slots == (0, 1) and moe.arch.split


def test_pipeline_split_interleaving_divides_the_layers_with_the_ends():
    """126 blocks (Llama 3.1 405B) on 8 stages: without the flags no interleaving divides the
    stages (126 / 8 is not whole); with both, 128 layers make 16 per stage and v = 8 chunks of 2."""
    model = {**MODEL, "depth": 126}
    kw = dict(system="dgx_h100", profile=PLAIN, global_batch=64, n1=1, n_p=8, nvs_p=8, microbatch=1, interleave=8)
    with pytest.raises(SpecError, match=r"^interleave = 8: needs n_p = 8 to divide model.depth = 126"):
        dse.evaluate(model=model, **kw)
    split = {**model, "account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    assert dse.evaluate(model=split, **kw)["iteration_time"] > 0.0


def test_fp8_eff_scales_the_fp8_rate():
    """FP8 matmuls run at fp8_eff times the FP8 peak (relative to BF16's efficiency): on an H100
    (1,979 against 989 TFLOP/s) fp8_eff = 989 / 1,979 leaves them at the BF16 rate."""
    s = dse.load_system("dgx_h100").params()
    flops = 1.0
    bf16 = float(matmul_time(flops, s, fp8=np.array(0.0)))
    full = float(matmul_time(flops, s, fp8=np.array(1.0)))
    same = float(matmul_time(flops, s._replace(fp8_eff=989.0 / 1979.0), fp8=np.array(1.0)))
    assert full == pytest.approx(bf16 * 989.0 / 1979.0, rel=1e-12)
    assert same == pytest.approx(bf16, rel=1e-12)


def _tp_comm(eff: float, **system):
    from dataclasses import asdict

    fields = asdict(dse.load_system("dgx_h100"))
    fields.update(name="s", **system)
    return dse.evaluate(model={**MODEL, "depth": 2}, system=fields, profile=PLAIN._replace(tp_overlap_eff=eff, embeddings=False),
                        global_batch=1, n1=8, nvs1=8, microbatch=1)


def test_tp_overlap_eff_hides_its_share_of_what_could_hide():
    """exposed = comm - eff min(comm, GEMM): linear in eff between the fully hidden case (eff 1)
    and every collective exposed (eff 0: PyTorch's plain tensor parallelism, which has no
    asynchronous backward reduction either, so more is exposed than with the overlap off)."""
    fast = dict(nvlink_bandwidth=4500.0, nvlink_latency=0.0)  # collectives shorter than the GEMMs
    full, none, part = (_tp_comm(e, **fast)["t_tp_comm"] for e in (1.0, 0.0, 0.35))
    assert full == 0.0 and none > 0.0
    assert part == pytest.approx(0.65 * none, rel=1e-9)
    from dataclasses import asdict

    fields = {**asdict(dse.load_system("dgx_h100")), "name": "s", **fast}
    off = dse.evaluate(model={**MODEL, "depth": 2}, system=fields,
                       profile=PLAIN._replace(tp_comm_overlap=False, embeddings=False),
                       global_batch=1, n1=8, nvs1=8, microbatch=1)
    assert 0.0 < off["t_tp_comm"] < none


def test_frameworks_set_their_switches():
    """FSDP2 as torchtitan runs it: full sharding, fp32 gradient reduction, K and V all-gathered for
    context parallelism, FlashAttention-2 at 28% of the H100 peak (measured, docs/gpu.md run 17), no TP
    collective hidden; back to Megatron gives the default profile again."""
    fsdp = with_framework(PROFILES["default"], "fsdp2")
    assert (fsdp.framework, fsdp.zero, fsdp.grad_reduce_in_bf16, fsdp.cp_comm, fsdp.attention_eff) == (
        "fsdp2", "3", False, "allgather", 0.28)
    assert fsdp.tp_comm_overlap and fsdp.tp_overlap_eff == 0.0
    assert fsdp.calibration == PROFILES["default"].calibration  # the rest of the profile is kept
    assert with_framework(fsdp, "megatron") == PROFILES["default"]
    assert fsdp == PROFILES["fsdp2"]
    # seed 001's model and the rail-only papers' have no framework to change
    assert with_framework(PROFILES["lbnl"], "fsdp2") == PROFILES["lbnl"]
    assert with_framework(PROFILES["railonly"], "fsdp2") == PROFILES["railonly"]


def test_fsdp2_context_parallelism_is_exposed():
    """PyTorch's context parallelism all-gathers K and V before attention (not overlapped): with
    cp = 2 the fsdp2 profile's iteration is slower than Megatron's p2p ring, everything else equal."""
    kw = dict(model={**MODEL, "depth": 2, "seq_len": 8192}, system="dgx_h100", global_batch=2, n1=1, n2=2, nvs2=2,
              n_d=1, microbatch=1)
    mega = PLAIN._replace(attention_eff=FRAMEWORKS["fsdp2"]["attention_eff"], zero="3")
    ring = dse.evaluate(profile=mega, zero=3, **kw)
    gather = dse.evaluate(profile=mega._replace(cp_comm="allgather"), zero=3, **kw)
    assert gather["iteration_time"] > ring["iteration_time"]


def test_profile_presets_match_their_yaml():
    import yaml

    from dse.interface.app import profile_from_mapping
    from dse.spec.specs import CONF_DIR

    for name in PROFILES:
        data = yaml.safe_load((CONF_DIR / "profile" / f"{name}.yaml").read_text())
        data.pop("name")
        assert profile_from_mapping(data) == PROFILES[name], name


@pytest.mark.parametrize("point", [
    dict(n1=2, nvs1=2, n_p=2, nvs_p=1, n_d=4, nvs_d=4, zero=3, recompute="selective", precision="bf16"),
    dict(n1=2, nvs1=2, n_p=1, nvs_p=1, n_d=8, nvs_d=4, zero=3, recompute="selective", precision="fp8")])
def test_the_framework_is_its_switches_not_its_name(point):
    """No kernel reads `profile.framework`: the name alone changes nothing (it names the calibration
    group, which PLAIN has none of), and Megatron's profile given FSDP2's switches under its own name is
    FSDP2's profile, time and memory, with a pipeline (the stage kept gathered) and without (FP8: the
    weights torchao casts rather than caches)."""
    kw = dict(model="llama3_8b", system="dgx_h100", strategy="tp1d", global_batch=32, microbatch=1, **point)
    named = dse.evaluate(**kw, profile=PLAIN._replace(framework="fsdp2"))
    assert named == dse.evaluate(**kw, profile=PLAIN)
    switched = dse.evaluate(**kw, profile=PLAIN._replace(**FRAMEWORKS["fsdp2"]))
    assert switched == dse.evaluate(**kw, profile=with_framework(PLAIN, "fsdp2"))
    assert switched != named  # the switches do move it


def test_the_fp32_loss_holds_two_more_fp32_logit_tensors():
    """`loss_fp32` (torchtitan's cross-entropy of fp32 logits): two more fp32 tensors of the local logits'
    b l V / n1 elements alive at the loss's backward than Megatron's fused loss, 4 bytes x 2 each: on one
    stage without tensor parallelism, 8 b l V bytes more memory and nothing else."""
    kw = dict(model="llama3_8b", system="dgx_h100", strategy="tp1d", global_batch=8, n1=1, n_p=1, n_d=8, nvs_d=8,
              microbatch=1, zero=1, recompute="full", precision="bf16")
    base, fp32 = dse.evaluate(**kw, profile=PLAIN), dse.evaluate(**kw, profile=PLAIN._replace(loss_fp32=True))
    b, seq, vocab = 1, 8192, 128256
    assert fp32["mem_activations"] - base["mem_activations"] == pytest.approx(8 * b * seq * vocab / 1e9, rel=1e-12)
    assert fp32["iteration_time"] == base["iteration_time"]
