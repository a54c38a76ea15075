"""ZeRO stages 0-3 (Rajbhandari et al. 2020) as the `zero` candidate axis, and the bytes each
precision stores (`kernels.state.StateBytes`).

The memory tests count the parameters of a tiny model by hand and compare the model state per GPU
with the paper's closed forms (Fig. 1, section 5: Psi parameters, K = 12 bytes of Adam state, N_d
data-parallel GPUs) and with Megatron-LM's distributed-optimizer table (bf16 parameters, fp32
gradients: 18 bytes unsharded, 6 + 12/d sharded). The communication tests use one block per
pipeline stage, where no block hides another's collectives, so each stage's closed form is exact.
"""

from __future__ import annotations

import numpy as np
import pytest

import dse
from dse.cli import main
from dse.explore.engine import space_options
from dse.results.io import schema
from dse.explore.placement import enumerate_space
from dse.explore.space import Question
from dse.spec.specs import SpecError, load_model, load_system
from kernels.params import PROFILES, StateBytes

E, F, DEPTH = 256, 1024, 4
TINY = dict(name="tiny", seq_len=256, hidden=E, heads=4, depth=DEPTH, ffn=F)  # no vocabulary: blocks only
# One Megatron block by hand (n1 = 1): QKV 3 e^2 (no bias), out-projection e^2 + e, fc1 e f + f,
# fc2 f e + e, two LayerNorms 2 e each.
PSI_BLOCK = 3 * E * E + (E * E + E) + (E * F + F) + (F * E + E) + 2 * (2 * E)
PSI = DEPTH * PSI_BLOCK  # 3,155,968 parameters
LINEAR_BLOCK = 3 * E * E + E * E + 2 * E * F  # the four FP8 linears' weights
BF16_GRADS = PROFILES["default"]._replace(grad_reduce_in_bf16=True)


def state(profile, zero, n_d=4, **kw):
    """Weights, gradients, optimizer states in bytes per GPU (n1 = n_p = 1, one NVS domain)."""
    args = dict(model=TINY, system="b200", nvs_size=8, strategy="tp1d", profile=profile, global_batch=8,
                n_d=n_d, microbatch=1, zero=zero)
    args.update(kw)
    r = dse.evaluate(**args)
    return r, r["mem_weights"] * 1e9, r["mem_grads"] * 1e9, r["mem_optimizer"] * 1e9


def test_hand_count_of_the_tiny_model():
    assert PSI_BLOCK == 788_992 and PSI == 3_155_968
    r, w, _, _ = state(BF16_GRADS, 1)
    assert w == pytest.approx(2 * PSI, rel=1e-12)


@pytest.mark.parametrize("n_d", [2, 4, 8])
def test_memory_matches_zero_closed_forms(n_d):
    """Rajbhandari et al. Fig. 1 with 2-byte gradients and K = 12; ZeRO-3 adds two gathered
    blocks of 2-byte weights (the current and the prefetched one)."""
    k, n = 12, n_d
    expected = {
        0: (2 * PSI, 2 * PSI, k * PSI),                       # (2 + 2 + K) Psi
        1: (2 * PSI, 2 * PSI, k * PSI / n),                   # 2 Psi + 2 Psi + K Psi / N_d
        2: (2 * PSI, 2 * PSI / n, k * PSI / n),               # 2 Psi + (2 + K) Psi / N_d
        3: (2 * PSI / n + 2 * 2 * PSI_BLOCK, 2 * PSI / n, k * PSI / n),  # (2 + 2 + K) Psi / N_d + buffer
    }
    for zero, (w, g, o) in expected.items():
        _, mw, mg, mo = state(BF16_GRADS, zero, n_d=n_d)
        assert (mw, mg, mo) == pytest.approx((w, g, o), rel=1e-12), zero
    # without prefetch one gathered block
    _, mw, _, _ = state(BF16_GRADS._replace(fsdp_prefetch=False), 3, n_d=n_d)
    assert mw == pytest.approx(2 * PSI / n + 2 * PSI_BLOCK, rel=1e-12)


def test_megatron_bytes_per_parameter():
    """The default profile stores Megatron's fp32 main gradients: its distributed-optimizer guide
    counts 18 bytes per parameter without sharding and 6 + 12/d with it (bf16 parameters)."""
    for n_d in (2, 4, 8):
        _, w, g, o = state("default", 0, n_d=n_d)
        assert w + g + o == pytest.approx(18 * PSI, rel=1e-12)
        _, w, g, o = state("default", 1, n_d=n_d)
        assert (w, g, o) == pytest.approx((2 * PSI, 4 * PSI, 12 * PSI / n_d), rel=1e-12)
        assert w + g + o == pytest.approx((6 + 12 / n_d) * PSI, rel=1e-12)
        _, w, g, o = state("default", 2, n_d=n_d)
        assert w + g + o == pytest.approx((2 + 16 / n_d) * PSI, rel=1e-12)
    assert StateBytes().optimizer == 12.0 and StateBytes().grad == 4.0


def test_fp8_weight_copies():
    """FP8 linears add 1 byte per linear weight per copy Transformer Engine caches: two on Hopper
    (a transposed copy for the input-gradient GEMM), one on Blackwell."""
    for system, copies in (("dgx_h100", 2), ("dgx_b200", 1)):
        assert load_system(system).fp8_weight_copies == copies
        kw = dict(system=system, nvs_size=8)
        _, w16, _, _ = state("default", 1, **kw)
        _, w8, _, _ = state("default", 1, precision="fp8", **kw)
        assert w8 - w16 == pytest.approx(copies * DEPTH * LINEAR_BLOCK, rel=1e-9)
        # ZeRO-3: no persistent FP8 cache, the gathered blocks carry theirs
        _, w3, _, _ = state("default", 3, precision="fp8", **kw)
        assert w3 == pytest.approx(2 * PSI / 4 + 2 * (2 * PSI_BLOCK + copies * LINEAR_BLOCK), rel=1e-12)


@pytest.mark.parametrize("profile", ["default", "lbnl"])
def test_memory_decreases_with_the_stage(profile):
    kw = dict(model="gpt3_175b", system="b200", nvs_size=8, strategy="tp1d", profile=profile, global_batch=1536,
              n1=8, n_p=8, n_d=16, microbatch=1, nvs1=8, nvs_p=1, nvs_d=1)
    mem = [dse.evaluate(zero=z, **kw)["memory"] for z in range(4)]
    assert mem[0] > mem[1] > mem[2] > mem[3]


def one_block_per_stage(profile, zero, global_batch=2, **kw):
    """The tiny model on 4 pipeline stages of one block, n_d = 2: t_DP of each stage's formula."""
    args = dict(model=TINY, system="b200", nvs_size=8, strategy="tp1d", profile=profile,
                global_batch=global_batch, n_p=DEPTH, n_d=2, microbatch=1, zero=zero)
    args.update(kw)
    return dse.evaluate(**args)


def test_stage3_moves_one_and_a_half_times_stage1():
    """m = 1, one block per stage: stage 1 is T_AG + T_RS, stage 3 2 T_AG + T_RS; with 2-byte
    gradients an allgather and a reduce-scatter of the same bytes take the same time, so the ratio
    is Rajbhandari's 3 Psi / 2 Psi."""
    for profile in (BF16_GRADS, BF16_GRADS._replace(fsdp_prefetch=False)):
        t1 = one_block_per_stage(profile, 1)["t_dp_comm"]
        t3 = one_block_per_stage(profile, 3)["t_dp_comm"]
        assert t1 > 0 and t3 == pytest.approx(1.5 * t1, rel=1e-12)
    # fp32 gradients: the reduce-scatter is wider, the extra allgather of 2-byte parameters the same
    t_ag = one_block_per_stage(BF16_GRADS, 1)["t_dp_comm"] / 2
    t1 = one_block_per_stage("default", 1)["t_dp_comm"]
    t3 = one_block_per_stage("default", 3)["t_dp_comm"]
    assert t1 > 2 * t_ag and t3 == pytest.approx(t1 + t_ag, rel=1e-12)


@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_stage2_reduce_scatters_every_microbatch(m):
    """t_DP(stage 2) = T_AG + m T_RS against stage 1's T_AG + T_RS (T_AG = T_RS = t_1 / 2)."""
    t1 = one_block_per_stage(BF16_GRADS, 1, global_batch=2 * m)["t_dp_comm"]
    t2 = one_block_per_stage(BF16_GRADS, 2, global_batch=2 * m)["t_dp_comm"]
    assert t2 == pytest.approx(t1 / 2 + m * t1 / 2, rel=1e-12)


def test_stage3_without_prefetch_is_linear_in_microbatches():
    profile = BF16_GRADS._replace(fsdp_prefetch=False)
    kw = dict(model="gpt3_175b", system="b200", nvs_size=8, strategy="tp1d", profile=profile, n1=8, n_p=8,
              n_d=16, microbatch=1, nvs1=8, nvs_p=1, nvs_d=1, zero=3)
    t = {m: dse.evaluate(global_batch=16 * m, **kw)["t_dp_comm"] for m in (8, 16)}
    assert t[16] == pytest.approx(2 * t[8], rel=1e-12)
    # prefetch hides part of it
    assert dse.evaluate(global_batch=128, **{**kw, "profile": BF16_GRADS})["t_dp_comm"] < t[8]


def test_zero0_and_zero1_take_the_same_time():
    """Stage 0's allreduce and stage 1's reduce-scatter + allgather move the same bytes with 2-byte
    gradients; the seed-001 model (no optimizer step) then has the same iteration time."""
    kw = dict(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", global_batch=4096, n1=4, n_p=128,
              n_d=8, microbatch=1, nvs1=4, nvs_p=2, nvs_d=1)
    r0, r1 = (dse.evaluate(profile="lbnl", zero=z, **kw) for z in (0, 1))
    assert r0["iteration_time"] == r1["iteration_time"] and r0["t_dp_comm"] == r1["t_dp_comm"]
    assert r1["iteration_time"] == pytest.approx(9.039049610051995, rel=1e-12)  # spec section 10
    r0, r1 = (dse.evaluate(profile=BF16_GRADS, zero=z, **kw) for z in (0, 1))
    assert r0["t_dp_comm"] == r1["t_dp_comm"]
    # the Adam step updates every parameter without sharding, 1/n_d of them with it
    assert r0["t_optimizer"] == pytest.approx(8 * r1["t_optimizer"], rel=1e-12)
    # fp32 gradients: plain DDP allreduces 4-byte gradients, the distributed optimizer allgathers
    # 2-byte parameters
    r0, r1 = (dse.evaluate(profile="default", zero=z, **kw) for z in (0, 1))
    assert r0["t_dp_comm"] > r1["t_dp_comm"]


def test_moe_experts_follow_the_stage():
    kw = dict(model="deepspeed_moe_1p3b", system="dgx_a100_seed000", strategy="tp1d", global_batch=1024,
              n_d=128, microbatch=1, nvs1=1, nvs_p=1, nvs_d=8)  # 8 microbatches
    r = {z: dse.evaluate(zero=z, **kw) for z in range(4)}
    assert r[0]["memory"] > r[1]["memory"] > r[2]["memory"] > r[3]["memory"]
    assert r[2]["t_dp_comm"] > r[1]["t_dp_comm"] and r[3]["t_dp_comm"] > r[2]["t_dp_comm"]
    assert r[3]["t_optimizer"] == r[1]["t_optimizer"] < r[0]["t_optimizer"]


def test_search_enumerates_each_profiles_stages():
    m = load_model("gpt3_175b")
    for name, stages in (("lbnl", {1}), ("railonly", {0}), ("default", {1, 2, 3})):
        q = Question(m, "tp1d", 1536, **space_options(PROFILES[name]))
        t = enumerate_space(q, 256, 8)
        assert set(np.unique(t["zero"])) == stages, name
        # one data-parallel GPU: the stages coincide, only the first is kept
        # (the data-parallel group is n_d times tp1d's cp, its n2)
        alone = (t["n_d"] * t["n2"]) == 1
        assert set(np.unique(t["zero"][alone])) <= {min(stages) if name != "railonly" else 0}
    q = Question(m, "tp1d", 1536, **space_options(PROFILES["default"]._replace(zero="any")))
    assert set(np.unique(enumerate_space(q, 256, 8)["zero"])) == {0, 1, 2, 3}
    assert schema()["zero"].is_integer()


def test_search_answer_names_the_stage():
    top = dse.search(model="gpt3_175b", system="b200", nvs_size=8, strategy="tp1d", n_gpus=256, global_batch=1536,
                     top_k=3)
    assert set(top["zero"].unique()) <= {1, 2, 3} and len(top)


def test_bad_zero_is_one_line_error(capsys):
    args = ["model=gpt3_1t", "system=b200", "system.nvs_size=8", "strategy=tp1d", "n1=4", "n_p=128", "n_d=8",
            "nvs1=4", "nvs_p=2", "nvs_d=1"]
    assert main(["eval", *args, "zero=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "zero = 4" in err and "0 (none)" in err and "3 (+ parameters)" in err
    assert main(["search", "profile.zero=5", "n_gpus=64"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "profile.zero = '5'" in err and "any, auto" in err
    with pytest.raises(SpecError, match=r"^zero = 'x': must be 0 \(none\)"):
        dse.evaluate(model=TINY, system="b200", zero="x")
    with pytest.raises(SpecError, match=r"zero = 7: must be 0 \(none\)"):
        dse.evaluate_many({"n1": [1], "n_p": [1], "n_d": [1], "microbatch": [1], "nvs1": [1], "nvs_p": [1],
                           "nvs_d": [1], "zero": [7]}, model=TINY, system="b200", strategy="tp1d")


#: `profile.optimizer_state` -> Adam's bytes per parameter (master + moments) and the update's HBM bytes per
#: parameter with fp32 gradients (reads and writes of the states, the gradient read, the 2-byte weight written,
#: and read as well where no whole fp32 master copy is kept).
OPTIMIZER_BYTES = {"fp32": (12, 2 * 12 + 4 + 2), "remainder": (2 + 8, 2 * 10 + 4 + 2 + 2),
                   "bf16_moments": (4 + 4, 2 * 8 + 4 + 2), "bf16": (0 + 4, 2 * 4 + 4 + 2 + 2)}


@pytest.mark.parametrize("name", list(OPTIMIZER_BYTES))
@pytest.mark.parametrize("zero", [0, 1, 3])
def test_optimizer_state_bytes(name, zero):
    """Each optimizer state's bytes per parameter in the closed forms: K Psi (ZeRO 0) or K Psi / N_d,
    weights and gradients unchanged; the optimizer step's time in proportion to its HBM bytes."""
    k, step_bytes = OPTIMIZER_BYTES[name]
    n_d = 4
    prof = PROFILES["default"]._replace(optimizer_state=name)
    r, w, g, o = state(prof, zero, n_d=n_d)
    ref, w0, g0, _ = state(PROFILES["default"], zero, n_d=n_d)
    assert (w, g) == (w0, g0)
    assert o == pytest.approx(k * PSI / (1 if zero == 0 else n_d), rel=1e-12)
    assert r["t_optimizer"] / ref["t_optimizer"] == pytest.approx(step_bytes / 30, rel=1e-12)


def test_bad_optimizer_state_is_one_line_error(capsys):
    assert main(["eval", "model=gpt3_1t", "system=b200", "strategy=tp1d", "n1=4", "n_p=128", "n_d=8", "nvs1=4",
                 "nvs_p=2", "nvs_d=1", "profile.optimizer_state=fp16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "profile.optimizer_state = 'fp16'" in err and "bf16_moments" in err
    with pytest.raises(SpecError, match=r"profile.optimizer_state = 'int8'"):
        dse.evaluate(model=TINY, system="b200", profile=PROFILES["default"]._replace(optimizer_state="int8"))
