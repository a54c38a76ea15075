"""Megatron-LM's context parallelism as strategy tp1d's degree cp (its n2), against closed forms.

The mechanism (Transformer Engine's `AttnFuncWithCPAndKVP2P`, Megatron-LM's default; Dubey et al.
2024 section 3.3.2 for the all-gather variant): the sequence in 2 cp chunks, rank i holding chunks
i and 2 cp - 1 - i, so every rank does 1/cp of the causal attention; weights replicated over cp,
gradients reduced over n_d cp; K and V passed around a ring whose steps overlap the attention core.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import dse
from dse.api import evaluate, evaluate_many
from dse.cli import main
from dse.explore.engine import profile_of
from dse.truth.measured import plan, predict
from dse.truth.runs import read_runs, resolve_many
from dse.explore.placement import enumerate_space
from dse.explore.space import MIN_SHARD, Question
from dse.spec.specs import SpecError, load_model, load_system
from kernels.blocks import data_parallel_group, megatron_block
from kernels.collectives import P2P, collective_time
from kernels.iteration import layer_table, prepare
from kernels.params import PROFILES, Candidates

DEFAULT = PROFILES["default"]
PLAIN = DEFAULT._replace(calibration="none")  # the kernels see the system's own efficiencies

# --------------------------------------------------------------------------------------------------
# cp = 1 is tp1d as it was

#: main's numbers, recorded before context parallelism existed (commit e9b3fa6, branch main), with
#: `dse.evaluate(**case)` and `repr()` of each metric, in a `dse.configure()`d process:
#: independent values, not recomputed by this code.
MAIN = [
    (dict(model="gpt3_1t", system="b200", nvs_size=4, strategy="tp1d", profile="default", global_batch=4096,
          n1=4, n2=1, n_p=32, n_d=32, microbatch=2, interleave=4, nvs1=4, nvs2=1, nvs_p=1, nvs_d=1),
     dict(iteration_time=8.779372918841384, memory=181.66238464000006, t_tp_comm=0.4279158247619049,
          t_dp_comm=0.37498604042699857, t_compute=6.619910071295397, mem_activations=141.81924864000004,
          mem_optimizer=3.0722688000000007, flops_per_gpu=12985.422336353122)),
    (dict(model="llama3_70b", system="dgx_h100", nvs_size=8, strategy="tp1d", profile="default",
          global_batch=1024, n1=8, n2=1, n_p=4, n_d=32, microbatch=1, nvs1=8, nvs2=1, nvs_p=1, nvs_d=1,
          recompute="full"),
     dict(iteration_time=11.209968044079842, memory=15.578290688000003, t_tp_comm=2.633200539085905,
          t_dp_comm=0.05689121478103033, t_compute=7.250044206842981, mem_activations=1.640235008,
          mem_optimizer=0.8518333440000002, flops_per_gpu=5109.730734715047)),
    (dict(model="llama3_8b", system="dgx_h100", nvs_size=8, strategy="tp1d", profile="default",
          global_batch=512, n1=2, n2=1, n_p=1, n_d=64, microbatch=1, nvs1=2, nvs2=1, nvs_p=1, nvs_d=4,
          recompute="selective", seq_par=False),
     dict(iteration_time=2.884725675933376, memory=47.76641945600001, t_tp_comm=0.11338288660317461,
          t_dp_comm=0.018623270400000003, t_compute=2.378167409527441, mem_activations=26.948403200000005,
          mem_optimizer=0.753045504, flops_per_gpu=1735.1591964783418)),
]


#: The default profile as it was at e9b3fa6: its calibration (conf/calibration/korthikanti2022.yaml
#: then: compute_eff 0.871605, a GEMM knee of 779.705787 elements, hbm_eff 0.579563), 2-byte
#: gradients, no fused-attention efficiency of its own, no communication overlaps, each bias a pass of
#: its own. Later mechanisms change the default's numbers; with them switched off, cp = 1 must still be
#: main's tp1d.
THEN = DEFAULT._replace(calibration="none", attention_eff=0.0, tp_comm_overlap=False, pp_comm_overlap=False,
                        grad_reduce_in_bf16=True, bias_fusion=False, dp_chunked=False)


def then_system(name):
    import dataclasses

    s = load_system(name)
    knee = 779.705787 / (1000.0 * s.matrix_flops / s.hbm_bandwidth)  # elements -> machine balances
    return dataclasses.replace(s, compute_eff=0.871605, hbm_eff=0.579563, matmul_knee=knee)


@pytest.mark.parametrize("case,expected", MAIN, ids=["gpt3_1t", "llama3_70b-full", "llama3_8b-no-sp"])
def test_cp_one_is_tp1d_of_main(case, expected):
    # the presets as they were then: Megatron's default dropout, masks kept (model.dropout), biases
    case = {**case, "profile": THEN, "system": then_system(case["system"]),
            "model": load_model(case["model"], dropout=0.1, bias=True)}
    # main's selective mode recomputed nothing under fused attention, as none does; today's checkpoints the core
    if case.get("recompute", "selective") == "selective":
        case["recompute"] = "none"
    r = evaluate(**case)
    for k, v in expected.items():
        # the iteration time includes the optimizer step, whose HBM traffic now reads 2-byte
        # gradients as 2 bytes (28 bytes per parameter, 30 at e9b3fa6): a few 1e-5 of it
        rel = 1e-4 if k == "iteration_time" else 1e-13
        assert r[k] == pytest.approx(v, rel=rel, abs=0), k


# --------------------------------------------------------------------------------------------------
# the block, by hand

B200 = load_system("b200").params()


def block(model: str, strategy="tp1d", profile=PLAIN, **kw):
    """The layers of Megatron's block for one candidate, by name (inputs prepared as the kernel does)."""
    col = dict(n1=1, n2=1, n_p=1, n_d=1, microbatch=1, nvs1=1, nvs2=1, nvs_p=1, nvs_d=1, n_b=1)
    col.update(kw)
    m = load_model(model)
    c, w, s = prepare(Candidates(**{k: np.int64(v) for k, v in col.items()}), m.workload(64), B200)
    return {x.name: x for x in megatron_block(c, w, s, profile, strategy)}, m


def table(model: str, strategy="tp1d", profile=PLAIN, system=B200, **kw):
    col = dict(n1=1, n2=1, n_p=1, n_d=1, microbatch=1, nvs1=1, nvs2=1, nvs_p=1, nvs_d=1, n_b=1)
    col.update(kw)
    c = Candidates(**{k: np.int64(v) for k, v in col.items()})
    out = layer_table(strategy, c, load_model(model).workload(64), system, profile)
    return {k: {f: float(np.asarray(v)) for f, v in d.items()} for k, d in out.items()}


def test_attention_flops_halve_with_cp_two():
    """Balanced causal attention: with cp = 2 each GPU has L_q = l/2 query rows against all l keys,
    keeping (l + 1)/(2l) of their scores, 1/2 of the causal total. Forward (linear in L_q):

        F_f = keep [P (2q - 1) + rho (2P + b H L_q (l - 1)) + rho P + b H L_q q (2l - 1)],  P = b H L_q l
    """
    one = table("gpt3_1t", n1=4, nvs1=4)["fusedla"]
    two = table("gpt3_1t", n1=4, n2=2, nvs1=4, nvs2=2)["fusedla"]
    m = load_model("gpt3_1t")
    b, l, q, heads = 1, m.seq_len, m.hidden // m.heads, m.heads // 4
    rho = float(B200.matrix_flops / B200.vector_flops)
    lq = l // 2
    p = b * heads * lq * l
    keep = (l + 1) / (2 * l)
    f_f = keep * (p * (2 * q - 1) + rho * (2 * p + b * heads * lq * (l - 1)) + rho * p
                  + b * heads * lq * q * (2 * l - 1)) * 1e-12
    assert two["flops_f"] == pytest.approx(f_f, rel=1e-12)
    assert two["flops_f"] == pytest.approx(one["flops_f"] / 2, rel=1e-12)
    # backward: dK and dV reduce over L_q rows (the 2 L_q - 1 convention), within 1/l of a half
    assert two["flops_b"] == pytest.approx(one["flops_b"] / 2, rel=1.0 / l)


def test_kv_ring_volume_and_steps():
    """A p2p ring step sends this GPU's K and V chunk: 2 b (kv_heads/n1) (l/cp) head_dim eps bytes;
    forward cp - 1 steps, backward cp steps carrying 2 (cp - 1) chunks in all."""
    cp, n1, b = 4, 4, 2
    layers, m = block("llama3_70b", n1=n1, n2=cp, microbatch=b, nvs1=n1, nvs2=2)
    core = layers["fusedla"]
    head_dim = m.hidden // m.heads
    chunk = 2 * b * (m.kv_heads // n1) * (m.seq_len // cp) * head_dim * 2e-9  # GB, 2-byte elements
    assert chunk == pytest.approx(2 * 2 * 2 * 2048 * 128 * 2e-9)  # by hand: 4.194304e-3 GB
    (fwd,), (bwd,) = core.comm_f, core.comm_b
    assert fwd.kind == P2P and bwd.kind == P2P
    assert float(fwd.volume) == pytest.approx(chunk, rel=1e-15)
    assert float(fwd.steps) == cp - 1
    assert float(bwd.volume) * float(bwd.steps) == pytest.approx(2 * (cp - 1) * chunk, rel=1e-15)
    assert float(bwd.steps) == cp
    # across domains (nvs2 = 2 < cp) a step is paced by the NIC hop; in one domain by NVLink
    assert float(fwd.group) == 2 and float(fwd.local) == 1
    inside = block("llama3_70b", n1=n1, n2=cp, microbatch=b, nvs1=n1, nvs2=cp)[0]["fusedla"].comm_f[0]
    assert float(inside.local) == 2
    hides = [float(x) for x in core.hides]
    assert hides == [(cp - 1) / cp, 1.0]


def test_exposed_ring_is_zero_when_attention_is_longer():
    """Llama 3 70B at 128k tokens, cp = 4 in one NVLink domain: each attention step outlasts its K, V
    transfer, so nothing is exposed; GPT3-1T at 2k tokens across the NIC: the excess shows,
    (cp - 1) T_step - (cp - 1)/cp T_attention."""
    long = load_model("llama3_70b").workload(64)._replace(seq_len=131072)
    c = Candidates(**{k: np.int64(v) for k, v in dict(n1=8, n2=4, n_p=1, n_d=1, microbatch=1, nvs1=8, nvs2=4,
                                                      nvs_p=1, nvs_d=1, n_b=1).items()})
    big = load_system("gb200_nvl72").params()
    core = layer_table("tp1d", c, long, big, PLAIN)["fusedla"]
    assert float(core["comm_f"]) == 0.0 and float(core["comm_b"]) == 0.0
    assert float(core["t_f"]) > 0.0

    cp = 2
    core = table("gpt3_1t", n1=4, n2=cp, nvs1=4, nvs2=1, microbatch=2)["fusedla"]
    layers, m = block("gpt3_1t", n1=4, n2=cp, nvs1=4, nvs2=1, microbatch=2)
    step = float(collective_time(P2P, layers["fusedla"].comm_f[0].volume, 2.0, 1.0, B200, PLAIN))
    busy = core["t_f"] - core["comm_f"]  # compute and exposed HBM time of the core
    assert core["comm_f"] > 0.0
    assert core["comm_f"] == pytest.approx((cp - 1) * step - (cp - 1) / cp * busy, rel=1e-12)


def test_allgather_variant_is_tp2ds_exchange():
    """profile.cp_comm = allgather: K, V of the whole sequence all-gathered over cp, dK, dV
    reduce-scattered, nothing hidden: the same collectives as tp2d's."""
    ag = DEFAULT._replace(cp_comm="allgather")
    one, _ = block("gpt3_1t", n1=4, n2=2, nvs1=4, nvs2=2, profile=ag)
    two, _ = block("gpt3_1t", "tp2d", n1=4, n2=2, nvs1=4, nvs2=2, profile=ag)
    a, b = one["fusedla"], two["fusedla"]
    assert a.hides is None
    assert [x.kind for x in a.comm_b] == [x.kind for x in b.comm_b] == ["allgather", "reducescatter"]
    for x, y in zip(a.comm_f + a.comm_b, b.comm_f + b.comm_b):
        assert float(x.volume) == float(y.volume) and float(x.group) == float(y.group) == 2.0
    with pytest.raises(SpecError, match=r"^profile.cp_comm = 'ring': must be one of allgather, p2p$"):
        from dse.interface.app import profile_from_mapping
        profile_from_mapping({"cp_comm": "ring"})


@pytest.mark.parametrize("cp_comm", ["allgather", "p2p"])
def test_repeated_kv_exchanges_and_keeps_every_query_heads_kv(cp_comm):
    """profile.kv_repeat (torchtitan's Llama until 2026-01: repeat_kv ahead of SDPA): Llama 3 70B at
    tp 8, cp 4, l = 8192 has h / n1 = 8 query heads and kv / n1 = 1 key/value head a GPU, so the
    context exchange moves 8x the K and V (per token 2 x 8 x 128 elements of 2 bytes against 2 x 1 x
    128) and the kernel keeps 8 heads of K and V for backward:

        allgather: 2 x 1 x 128 x 8192 x 2 B = 4,194,304 B without, 33,554,432 B with;
        activation (lam = 2048 rows): Q 8 x 2048 x 128 and K, V 2 x 1 x 2048 x 128 elements of 2 B,
        fp32 statistics 8 x 2048 x 2 x 2 B: 5,308,416 B without, K, V 2 x 8 x 2048 x 128: 12,648,448 B with.
    """
    prof = PLAIN._replace(cp_comm=cp_comm)
    off, _ = block("llama3_70b", n1=8, n2=4, nvs1=8, nvs2=1, profile=prof)
    on, _ = block("llama3_70b", n1=8, n2=4, nvs1=8, nvs2=1, profile=prof._replace(kv_repeat=True))
    a, b = off["fusedla"], on["fusedla"]
    assert float(a.activation) == pytest.approx(5_308_416e-9, rel=1e-12)
    assert float(b.activation) == pytest.approx(12_648_448e-9, rel=1e-12)
    gathered = 2 * 1 * 128 * 8192 * 2e-9  # one kv head's K and V of the whole sequence
    if cp_comm == "allgather":
        assert [float(x.volume) for x in a.comm_f + a.comm_b] == pytest.approx([gathered] * 3, rel=1e-12)
        assert [float(x.volume) for x in b.comm_f + b.comm_b] == pytest.approx([8 * gathered] * 3, rel=1e-12)
    else:  # a ring step carries one chunk of l / cp tokens forward, 2 (cp - 1) / cp of one backward
        assert [float(x.volume) for x in b.comm_f + b.comm_b] == pytest.approx(
            [8 * gathered / 4, 8 * gathered / 4 * 2 * 3 / 4], rel=1e-12)
    # the projections are the same matmuls either way
    assert float(on["qkv"].flops_f) == float(off["qkv"].flops_f)
    assert float(on["qkv"].activation) == float(off["qkv"].activation)


@pytest.mark.parametrize("model", ["gpt3_1t", "deepseek_v3"])
def test_repeated_kv_changes_nothing_without_grouped_query_attention(model):
    """A model with a K and V per query head (multi-head attention; latent attention's up-projected
    heads) repeats nothing: every layer of its block is the same under profile.kv_repeat."""
    off = table(model, n1=4, n2=2, nvs1=4, nvs2=2)
    on = table(model, n1=4, n2=2, nvs1=4, nvs2=2, profile=PLAIN._replace(kv_repeat=True))
    assert on == off


def test_torchtitan_runs_repeat_kv():
    """The packaged torchtitan runs (commits of 2024-04 to 2025-07, before its 2026-01 switch to
    SDPA's enable_gqa) are read with kv_repeat on and predicted with it; every other set has it off."""
    calls = plan(read_runs(resolve_many("corpus")))
    titan = [c for c in calls if c.framework == "fsdp2"]
    assert titan and all(c.kv_repeat for c in titan)
    assert not any(c.kv_repeat for c in calls if c.framework == "megatron")


def test_tp2d_pays_its_busiest_shard():
    """tp2d's contiguous shards are not balanced: the last of n2 shards keeps
    ((n2 - 1) L + (L + 1)/2) / l of its L l scores (L = l / n2), against tp1d's (l + 1) / (2l)."""
    l, n2 = 2048, 2
    lam = l // n2
    tp1d = table("gpt3_1t", n1=4, n2=n2, nvs1=4, nvs2=n2)["fusedla"]
    tp2d = table("gpt3_1t", "tp2d", n1=4, n2=n2, nvs1=4, nvs2=n2)["fusedla"]
    busiest = ((n2 - 1) * lam + (lam + 1) / 2) / l
    assert tp2d["flops_f"] / tp1d["flops_f"] == pytest.approx(busiest / ((l + 1) / (2 * l)), rel=1e-12)
    # n2 = 1 is one balanced sequence in both
    assert table("gpt3_1t", "tp2d", n1=4, nvs1=4)["fusedla"] == table("gpt3_1t", n1=4, nvs1=4)["fusedla"]


# --------------------------------------------------------------------------------------------------
# the iteration


GPT = dict(model="gpt3_1t", system="b200", nvs_size=4, strategy="tp1d", global_batch=4096, n1=4, n_p=32,
           microbatch=2, interleave=4, nvs1=4, nvs2=1, nvs_p=1, nvs_d=1)


def test_activation_memory_scales_with_one_over_cp():
    """Every activation of the block is on l/cp rows (l/(cp n1) in the sequence-parallel regions);
    the pipeline holds as many microbatches: memory of activations ~ 1/cp."""
    acts = {cp: evaluate(**GPT, n2=cp, n_d=32 // cp)["mem_activations"] for cp in (1, 2, 4)}
    assert acts[2] == pytest.approx(acts[1] / 2, rel=1e-9)
    assert acts[4] == pytest.approx(acts[1] / 4, rel=1e-9)


def test_gradients_are_reduced_over_dp_times_cp():
    """Weights are replicated over cp: the data-parallel group of tp1d is n_d cp GPUs (nvs_d nvs2 per
    domain), so cp = 2 with n_d = 16 shards the optimizer as n_d = 32 does, with the same weights."""
    c = Candidates(**{k: np.float64(v) for k, v in dict(n1=4, n2=2, n_p=32, n_d=16, microbatch=2, nvs1=2,
                                                        nvs2=2, nvs_p=1, nvs_d=1, n_b=1).items()})
    group, local = data_parallel_group("tp1d", c)
    assert (float(group), float(local)) == (32.0, 2.0)
    a, b = evaluate(**GPT, n2=1, n_d=32), evaluate(**GPT, n2=2, n_d=16)
    assert b["mem_weights"] == a["mem_weights"]
    assert b["mem_optimizer"] == pytest.approx(a["mem_optimizer"], rel=1e-15)
    # both synchronize the same weights over 32 GPUs on the NIC: the allgather and reduce-scatter
    # are the same collectives, only their overlap with a (shorter) block differs
    assert b["t_dp_comm"] >= a["t_dp_comm"] > 0.0


# --------------------------------------------------------------------------------------------------
# the enumeration


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def brute_force_count(m, batch: int, n: int, nvs: int) -> int:
    """Candidates of tp1d under the default rule, counted with itertools from the rules as written
    (dse.explore.space's docstring): degrees, microbatch, interleave, recompute (selective, full), ZeRO
    stages, placements."""
    l, e, h, depth = m.seq_len, m.hidden, m.heads, m.depth
    g = n if n <= nvs else max(d for d in divisors(n) if d <= nvs)
    total = 0
    for n1, cp, n_p, n_d in itertools.product(divisors(n), repeat=4):
        if n1 * cp * n_p * n_d != n or h % n1 or e % n1 or m.kv_heads % n1 or 3 * e // n1 < MIN_SHARD:
            continue
        if cp > 1 and (l % (2 * cp) or l // cp < MIN_SHARD or (l // cp) % n1):
            continue
        if n_p > depth or batch % n_d:
            continue
        for b in divisors(batch // n_d):
            if (b * l) % n1:
                continue
            micro = batch // n_d // b
            for v in divisors(depth):
                if (depth // n_p) % v or (v > 1 and (depth % n_p or n_p == 1 or micro % n_p)):
                    continue
                if n <= nvs:
                    places = 1
                else:
                    places = sum(1 for a, c2, p, d in itertools.product(divisors(g), repeat=4)
                                 if a * c2 * p * d == g and not (n1 % a or cp % c2 or n_p % p or n_d % d))
                stages = 3 if n_d * cp > 1 else 1  # ZeRO 1, 2, 3 where the data-parallel group n_d cp > 1
                total += 3 * stages * places  # recompute none, selective and full
    return total


@pytest.mark.parametrize("n,nvs", [(16, 4), (32, 8), (64, 64), (24, 8), (12, 8)])
def test_enumeration_counts_by_brute_force(n, nvs):
    m = load_model({"name": "tiny", "seq_len": 1024, "hidden": 1536, "heads": 12, "depth": 6, "ffn": 6144})
    q = Question(m, "tp1d", 48, "default")
    t = enumerate_space(q, n, nvs)
    assert len(t["n1"]) == brute_force_count(m, 48, n, nvs)
    assert np.all(t["n1"] * t["n2"] * t["n_p"] * t["n_d"] == n)
    assert (t["n2"] > 1).any()
    cp = t["n2"][t["n2"] > 1]
    assert np.all(1024 % (2 * cp) == 0) and np.all(1024 // cp >= MIN_SHARD)
    assert np.all((1024 // cp) % t["n1"][t["n2"] > 1] == 0)  # l / (cp n1) rows per sequence-parallel region
    validate = dse.api.validate_candidates
    validate(t, m, nvs, "tp1d", 48, "default")


def test_non_causal_models_split_into_cp_chunks():
    """Without a causal mask there is nothing to balance: cp | l suffices (not 2 cp | l). l = 258:
    cp = 2 gives 129 rows per GPU, allowed for a bidirectional model, not for a causal one."""
    shape = {"name": "enc", "seq_len": 258, "hidden": 1536, "heads": 12, "depth": 4, "ffn": 6144}
    both = load_model({**shape, "causal": False})
    causal = load_model(shape)
    assert set(enumerate_space(Question(both, "tp1d", 64, "default"), 8, 8)["n2"].tolist()) == {1, 2}
    assert set(enumerate_space(Question(causal, "tp1d", 64, "default"), 8, 8)["n2"].tolist()) == {1}


def test_lbnl_and_railonly_keep_n2_one(gpt3_1t):
    for profile in ("lbnl", "railonly"):
        q = Question(gpt3_1t, "tp1d", 4096, profile)
        assert not q.context_parallel
        t = enumerate_space(q, 4096, 8)
        assert len(t["n1"]) and np.all(t["n2"] == 1) and np.all(t["nvs2"] == 1)
    q = Question(gpt3_1t, "tp1d", 4096, "default")
    assert q.context_parallel and (enumerate_space(q, 4096, 8)["n2"] > 1).any()
    with pytest.raises(SpecError, match="context parallelism is strategy tp1d's degree"):
        Question(gpt3_1t, "tp1d", 4096, "lbnl", context_parallel=True)


# --------------------------------------------------------------------------------------------------
# bad input: one SpecError line, before any compute


@pytest.mark.parametrize("changes,message", [
    (dict(n2=3, n_d=8), "cp = 3 (tp1d's n2): the context-parallel degree must split model.seq_len = 2048 into 2 cp = 6 "
                        "equal chunks (causal load balance); cp must divide 1024"),
    (dict(n2=2, n_d=16, profile="lbnl", interleave=1), "cp = 2 (tp1d's n2): context parallelism is modelled "
                                                       "by Megatron's block (profile default), not by "
                                                       "profile 'lbnl'; must be 1"),
    (dict(n2=2, n_d=16, profile="railonly", interleave=1), "cp = 2 (tp1d's n2): context parallelism is "
                                                           "modelled by Megatron's block (profile default), "
                                                           "not by profile 'railonly'; must be 1"),
    (dict(n2=2, n1=5, nvs1=1, n_d=16, interleave=1),
     "cp = 2 (tp1d's n2): the l / cp = 1024 rows of a context shard must divide over n1 = 5 (sequence parallelism); "
     "choose cp with l / cp a multiple of n1, or seq_par=false"),
    (dict(n2=2, n_d=16, nvs2=4, nvs1=1), "nvs2 = 4: must divide n2 = 2"),
])
def test_bad_context_parallel_input(changes, message):
    with pytest.raises(SpecError) as err:
        evaluate(**{**GPT, "n_d": 32, **changes})
    assert str(err.value) == message


def test_cli_cp_alias_and_errors(capsys):
    args = ["strategy=tp1d", "n1=4", "n_p=32", "n_d=16", "microbatch=2", "interleave=4", "nvs1=4", "nvs2=1",
            "nvs_p=1", "nvs_d=1"]
    assert main(["eval", "cp=2", *args, "--json"]) == 0
    out = capsys.readouterr().out
    import json
    r = json.loads(out)
    assert r["n2"] == 2 and r["n_gpus"] == 4096
    assert r["iteration_time"] == evaluate(**GPT, n2=2, n_d=16)["iteration_time"]
    for bad, line in [
        (["cp=3", *args], "dse eval: error: cp = 3 (tp1d's n2): the context-parallel degree must split model.seq_len = 2048"),
        (["cp=2", "profile=lbnl", *args, "interleave=1"],
         "dse eval: error: cp = 2 (tp1d's n2): context parallelism is modelled by Megatron's block"),
        (["cp=2", "n2=4", *args], "dse eval: error: cp = 2: cp is tp1d's n2, which is given as n2 = 4"),
        (["cp=2", *[a.replace("tp1d", "tp2d") for a in args]],
         "dse eval: error: cp = 2: cp is strategy tp1d's context-parallel degree (its n2); strategy 'tp2d'"),
    ]:
        assert main(["eval", *bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith(line) and err.count("\n") == 1, err


# --------------------------------------------------------------------------------------------------
# measured runs


HEADER = ("model", "heads", "hidden", "layers", "ffn", "seq_len", "vocab", "tp", "pp", "dp", "gpus", "global_batch",
          "micro_batch", "interleave", "recompute", "sequence_parallel", "gpu", "measured_iter_s", "cp")
RUN = dict(model="m", heads="64", hidden="8192", layers="8", ffn="28672", seq_len="32768", vocab="128256", tp="8",
           pp="1", dp="1", gpus="16", global_batch="8", micro_batch="1", interleave="1", recompute="selective",
           sequence_parallel="true", gpu="H100-SXM", measured_iter_s="10", cp="2")


def write(path, rows):
    path.write_text("\n".join([",".join(HEADER)] + [",".join(r[k] for k in HEADER) for r in rows]) + "\n")
    return path


def test_measured_cp_is_tp1d(tmp_path):
    rows = [RUN, {**RUN, "model": "cp1", "cp": "1", "gpus": "8"},
            {**RUN, "model": "bad-chunks", "cp": "3", "gpus": "24"},
            {**RUN, "model": "bad-gpus", "gpus": "8"}]
    path = write(tmp_path / "runs.csv", rows)
    calls = plan(dse.truth.measured.read_runs(path))
    assert [c.strategy for c in calls] == ["tp1d"]
    assert list(calls[0].table["n2"]) == [2, 1] and list(calls[0].table["nvs2"]) == [1, 1]
    res = predict(path)
    t = dict(zip(res.frame["model"], res.frame["predicted_iter_s"]))
    assert t["m"] < t["cp1"]  # twice the GPUs on the same batch
    assert [str(e) for e in res.errors] == [
        "row 3 (bad-chunks): cp = 3: must split seq_len = 32768 into 2 cp = 6 equal chunks "
        "(Megatron's causal load balance)",
        "row 4 (bad-gpus): gpus = 8: must equal tp*pp*dp*cp = 8*1*1*2 = 16"]


def test_measured_cp_matches_evaluate(tmp_path):
    """A measured run with cp is the tp1d candidate n2 = cp with Megatron's placement."""
    path = write(tmp_path / "runs.csv", [RUN])
    res = predict(path)
    m = {"name": "m", "seq_len": 32768, "hidden": 8192, "heads": 64, "depth": 8, "ffn": 28672, "vocab": 128256}
    r = evaluate_many({"n1": [8], "n2": [2], "n_p": [1], "n_d": [1], "microbatch": [1], "nvs1": [8], "nvs2": [1],
                       "nvs_p": [1], "nvs_d": [1]}, model=m, system="dgx_h100", strategy="tp1d",
                      global_batch=8, profile=profile_of("default"))
    assert res.frame["predicted_iter_s"][0] == r["iteration_time"][0]
    assert math.isfinite(r["iteration_time"][0])
