"""What PyTorch FSDP2 as torchtitan runs it holds (framework fsdp2): torchtitan's operator-level
selective checkpointing, its fp32 loss, and the stage kept gathered under a pipeline. Expected
values are counted by hand from the models' shapes and the frameworks' code, and the published
peak memory of torchtitan's runs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import dse
import dse.truth.measured as dm
from dse.explore.engine import stack_systems
from dse.spec.specs import load_model, load_system
from dse.truth.runs import PACKAGED_CSV
from kernels.block_time import BlockCost
from kernels.iteration import fsdp2_loss_activation, prepare
from kernels.params import PROFILES, Candidates
from kernels.stage import op_sac_activation, op_sac_share, recomputed


def candidate(**kw):
    base = dict(n1=1, n2=1, n_p=1, n_d=8, microbatch=2, nvs1=1, nvs2=1, nvs_p=1, nvs_d=8, n_b=1, interleave=1,
                recompute=1, seq_par=1, precision=0, zero=3, ep=1)
    return Candidates(**{k: np.float64(v) for k, v in {**base, **kw}.items()})


def inputs(model: str, **kw):
    w = load_model(model).workload(64)
    s = stack_systems([load_system("dgx_h100").params()])
    return prepare(candidate(**kw), w, s)


def test_op_sac_stores_the_block_input_q_v_the_attention_output_w1_and_w2():
    # Llama 3 8B, one tensor-parallel rank, microbatch 2 x 8,192 tokens: per token the block's input
    # 4096, q 4096, v 8 x 128 = 1024, the attention output 4096, w1 14,336, w2 4096: 31,744 bf16
    c, w, s = inputs("llama3_8b")
    assert float(op_sac_activation(c, w, s, "tp1d")[0]) == pytest.approx(2 * 8192 * 31744 * 2 / 1e9, rel=1e-12)
    # Llama 3 70B over 8 tensor-parallel ranks with sequence parallelism, microbatch 1: the block's
    # input and the two reduce-scatters' outputs on the 1,024-row sequence shard (3 x 8192 each),
    # over all 8,192 rows (8192 + 1024 + 8192 + 28,672) / 8 and w2's partial sums, 8192
    c, w, s = inputs("llama3_70b", n1=8, microbatch=1)
    expected = (1024 * 8192 * 3 + 8192 * ((8192 + 1024 + 8192 + 28672) / 8 + 8192)) * 2 / 1e9
    assert float(op_sac_activation(c, w, s, "tp1d")[0]) == pytest.approx(expected, rel=1e-12)


def test_the_fp32_loss_holds_two_more_fp32_copies_of_the_local_logits():
    c, w, s = inputs("llama3_8b")
    assert float(fsdp2_loss_activation("tp1d", c, w, s)[0]) == pytest.approx(8 * 2 * 8192 * 128256 / 1e9, rel=1e-12)
    c, w, s = inputs("llama3_70b", n1=8, microbatch=1)  # vocabulary-parallel logits: V / 8 a rank
    assert float(fsdp2_loss_activation("tp1d", c, w, s)[0]) == pytest.approx(8 * 8192 * 128256 / 8 / 1e9, rel=1e-12)


def test_a_pipelined_stage_stays_gathered_and_accumulates_fp32_gradients():
    """Llama 3.1 405B over tp 8, pp 8, FSDP 8: the first stage holds 16 of the 126 blocks and the
    input embedding, 6.638B parameters a tensor-parallel rank (from the spec's parameter count):
    gathered in bf16 for the whole step (13.28 GB) beside its fp32 shard's bf16-equivalent 1/8,
    and its gradients accumulated unsharded in fp32 (26.55 GB) beside the reduced fp32 shard."""
    m = load_model("llama3_405b")
    emb = m.vocab * m.hidden
    per_block = (m.total_params - 2 * emb) / m.depth
    stage = (16 * per_block + emb) / 8  # parameters of a tensor-parallel rank of the first stage
    gb = stage * 2 / 1e9
    point = dict(model="llama3_405b", system="dgx_h100", profile="fsdp2", n1=8, n_d=8, microbatch=1, global_batch=64,
                 recompute="full", precision="bf16", zero=3, nvs1=8, nvs_p=1, nvs_d=1)
    piped = dse.evaluate(**point, n_p=8)
    assert piped["mem_weights"] == pytest.approx(gb + gb / 8, rel=1e-3)
    assert piped["mem_grads"] == pytest.approx(2 * gb + 2 * gb / 8, rel=1e-3)
    # Megatron's FSDP under a pipeline keeps only the gathered block and its prefetch
    megatron = dse.evaluate(**{**point, "profile": "default"}, n_p=8)
    assert megatron["mem_weights"] < gb / 8 + 2 * per_block / 8 * 2 / 1e9 * 1.01


def test_torchtitan_s_published_peak_memory():
    """torchtitan's H100 runs (peak reserved GiB, their own tables): every one within 20%, and
    their mean within 8%; each of them fits in its 96 GB GPU."""
    from helpers import packaged_runs

    # predict only those runs: the H100 ones that publish their memory
    runs = packaged_runs("torchtitan_fsdp2.csv", pl.col("memory_gib").is_not_null(), pl.col("gpu") == "H100-96GB")
    frame = dm.predict(runs).frame.filter(pl.col("memory_gib").is_not_null())
    h100 = frame.filter(pl.col("gpu") == "H100-96GB")
    # the interleaved 405B run among them since its pipeline split is expressed; 069bae2's three runs
    assert h100.height == 21
    err = h100["memory_error"].to_numpy()
    assert np.abs(err).max() <= 0.20 and np.abs(err).mean() <= 0.08
    assert h100["fits"].all()


def test_op_sac_runs_again_wk_wo_and_w3():
    """Llama 3 8B: of the per-token matmul work e (q + 2 kv + q + 3 f) = e 53,248 the recomputed
    wk, wo, w3 are e (1024 + 4096 + 14336) = e 19,456; an MoE model keeps Megatron's reading (-1)."""
    _, w, _ = inputs("llama3_8b")
    assert float(op_sac_share(w)[0]) == pytest.approx(19456 / 53248, rel=1e-12)
    _, w, _ = inputs("mixtral_8x7b")
    assert float(op_sac_share(w)[0]) == -1.0


def test_op_sac_recomputation_is_that_share_of_the_forward_outside_the_attention_core():
    """`recomputed` under selective with the op-SAC share: s of the forward's compute, HBM time and
    FLOPs without the attention core's, half its collectives (the all-gathers; the reduce-scatters
    are kept); under full the whole forward; a share of -1 is Megatron's selective layers."""
    f = dict(f_comp=10.0, f_mem=4.0, f_comm=6.0, f_flops=100.0, f_ep_comm=0.0,
             sel_comp=3.0, sel_mem=1.0, sel_comm=2.0, sel_flops=30.0, sel_ep_comm=0.0)
    blk = BlockCost(**{k: np.float64(f.get(k, 1.0)) for k in BlockCost._fields})
    fsdp2 = PROFILES["fsdp2"]
    s = np.float64(0.25)
    sel = recomputed(blk, candidate(recompute=1), fsdp2, s)
    assert [float(x) for x in sel] == [0.25 * 7.0, 0.25 * 3.0, 0.5 * 4.0, 0.25 * 70.0, 0.0]
    assert [float(x) for x in recomputed(blk, candidate(recompute=2), fsdp2, s)] == [10.0, 4.0, 6.0, 100.0, 0.0]
    assert [float(x) for x in recomputed(blk, candidate(recompute=1), fsdp2, np.float64(-1.0))] == [3.0, 1.0, 2.0, 30.0, 0.0]
    assert [float(x) for x in recomputed(blk, candidate(recompute=0), fsdp2, s)] == [0.0] * 5


def test_under_fsdp2_selective_costs_time_between_none_and_full():
    point = dict(model="llama3_8b", system="dgx_h100", profile="fsdp2", n_d=8, microbatch=1, global_batch=16,
                 precision="bf16", zero=3)
    t = {r: dse.evaluate(**point, recompute=r) for r in ("none", "selective", "full")}
    assert t["none"]["iteration_time"] < t["selective"]["iteration_time"] < t["full"]["iteration_time"]
    assert t["none"]["mem_activations"] > t["selective"]["mem_activations"] > t["full"]["mem_activations"]


def test_without_sequence_parallelism_the_all_reduces_are_not_kept():
    c, w, s = inputs("llama3_70b", n1=8, microbatch=1, seq_par=0)
    expected = (8192 * 8192 + 8192 * ((8192 + 1024 + 8192 + 28672) / 8 + 8192)) * 2 / 1e9
    assert float(op_sac_activation(c, w, s, "tp1d")[0]) == pytest.approx(expected, rel=1e-12)


def test_torchao_caches_no_fp8_weight_copies():
    """Under FSDP2 the weights hold the same bytes in FP8 as in bf16 (torchao casts each weight per
    matmul and caches no copy; torchtitan's Llama 3.1 8B on 8 and 128 H100s measured 0.2 GiB less
    under FP8); Megatron's FSDP (Transformer Engine) adds, for the gathered block and its prefetch,
    the Hopper system's two 1-byte copies of each quantized weight: Llama 3 8B's block, e (q + 2 kv
    + q) + 3 e f = 4096 (4096 + 2048 + 4096) + 3 x 4096 x 14336 = 218,103,808 weights."""
    point = dict(model="llama3_8b", system="dgx_h100", n_d=8, microbatch=1, global_batch=16, recompute="full",
                 zero=3, nvs_d=8)
    fsdp2 = {p: dse.evaluate(**point, profile="fsdp2", precision=p) for p in ("bf16", "fp8")}
    assert fsdp2["fp8"]["mem_weights"] == fsdp2["bf16"]["mem_weights"]
    megatron = {p: dse.evaluate(**point, profile="default", precision=p) for p in ("bf16", "fp8")}
    block = 4096 * (4096 + 2048 + 4096) + 3 * 4096 * 14336
    copies = 2 * block * 1 * 2 / 1e9  # two copies of a byte a weight, for the block and its prefetch
    assert megatron["fp8"]["mem_weights"] - megatron["bf16"]["mem_weights"] == pytest.approx(copies, rel=1e-9)
    # the switch decides, not the framework's name: Megatron's profile with torchao's linears caches none
    from kernels.params import PROFILES

    torchao = dse.evaluate(**point, profile=PROFILES["default"]._replace(te_quantization=False), precision="fp8")
    assert torchao["mem_weights"] == megatron["bf16"]["mem_weights"]
