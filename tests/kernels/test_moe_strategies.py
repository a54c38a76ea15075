"""MoE in every strategy: the expert-parallel degree ep as a candidate axis, the all-to-all on each
strategy's token shard and on every network, and DeepSeek-V3's shared experts, expert width,
dense-first blocks and multi-head latent attention. Closed forms are written out here."""

from __future__ import annotations

import json

import math

import numpy as np
import pytest

import dse
from dse.cli import main
from dse.explore.placement import enumerate_space
from dse.explore.space import Question, configurations
from dse.spec.specs import SpecError, load_model
from kernels.collectives import ALLTOALL, collective_time
from kernels.iteration import layer_table, prepare
from kernels.stage import stage_mixes
from helpers import first, one_candidate
from kernels.params import PROFILES, Candidates

EPS = 2e-9  # GB per fp16 element


f = first  # the first element of a kernel output

#: the one candidate these tests change field by field
BASE = dict(n1=1, n2=1, n_p=1, n_d=8, microbatch=2, nvs1=1, nvs2=1, nvs_p=1, nvs_d=8, n_b=1, interleave=1,
            recompute=1, seq_par=1, precision=0, ep=8, zero=1)


def cands(**kw) -> Candidates:
    return one_candidate(BASE, **kw)


def layers(model, strategy, c, profile="default", network="two_tier", system="dgx_h100"):
    m = load_model(model) if isinstance(model, str) else model
    s = dse.load_system(system).params()
    return layer_table(strategy, c, m.workload(64), s, PROFILES[profile], network, m.arch)


# -------------------------------------------------------------------------------------------------
# published sizes


def test_deepseek_v3_total_and_active_parameters():
    m = load_model("deepseek_v3")
    assert (m.depth, m.hidden, m.heads, m.vocab, m.experts, m.shared_experts, m.moe_top_k) == (
        61, 7168, 128, 129280, 256, 1, 8)
    assert (m.dense_layers, m.ffn, m.expert_width, m.moe_blocks) == (3, 18432, 2048, 58)
    assert m.mla and m.arch.mla and m.arch.shared and m.arch.moe
    assert m.total_params == pytest.approx(671e9, rel=0.01)  # DeepSeek-V3: 671B total
    assert m.active_params == pytest.approx(37e9, rel=0.02)  # 37B activated per token
    # the count by hand: MLA projections, SwiGLU MLPs (3 e f), the gate, embeddings (untied), no
    # biases; the spec adds its blocks' two LayerNorms (gain and shift, 4 e) and the final one (2 e)
    e, h = 7168, 128
    attn = e * 1536 + e * (512 + 64) + 1536 * h * 192 + 512 * h * (128 + 128) + h * 128 * e
    dense = attn + 3 * e * 18432
    moe = attn + (256 + 1) * 3 * e * 2048 + e * 256
    by_hand = 3 * dense + 58 * moe + 2 * 129280 * e
    assert m.total_params - by_hand == (4 * 61 + 2) * e


def test_mixtral_still_its_published_size():
    m = load_model("mixtral_8x7b")
    assert m.total_params == pytest.approx(46.7e9, rel=0.01)
    assert (m.expert_width, m.shared_experts, m.dense_layers, m.attention) == (14336, 0, 0, "mha")
    assert m.active_params == pytest.approx(12.9e9, rel=0.01)  # Mistral AI: 12.9B active


# -------------------------------------------------------------------------------------------------
# the all-to-all and the expert weights, by hand


@pytest.mark.parametrize("strategy,n1,n2,rows,width", [
    ("tp1d", 2, 1, 2048 // 2, 2048),  # the sequence-parallel shard of the whole sequence
    ("tp2d", 2, 4, (2048 // 4) // 2, 2048),  # the l/n2 shard's sequence-parallel split
    ("summa", 2, 4, 2048 // 4, 2048 // 2),  # its grid block: l/n2 rows, e/n1 features
])
@pytest.mark.parametrize("network", ["two_tier", "rail_optimized", "rail_only", "any_to_any"])
def test_alltoall_volume_per_gpu(strategy, n1, n2, rows, width, network):
    """V = moe_tokens b rows width eps per GPU, dispatch and combine, each way, over the ep group."""
    m = load_model("deepspeed_moe_1p3b", moe_top_k=2, capacity_factor=1.25)  # l = e = 2048, E = 128
    c = cands(n1=n1, n2=n2, nvs1=n1, nvs2=n2 if strategy != "tp1d" else 1, n_b=max(n1, n2) if strategy == "summa"
              else 1, nvs_d=8 // (n1 * (n2 if strategy != "tp1d" else 1)) or 1)
    t = layers(m, strategy, c, network=network)
    volume = 2.5 * 2 * rows * width * EPS
    assert f(t["dispatch"]["traffic_f"]) == pytest.approx(2 * volume, rel=1e-14)
    assert f(t["combine"]["traffic_b"]) == pytest.approx(2 * volume, rel=1e-14)
    # the expert-parallel group folds over the stage's sequence (n2) and data-parallel ranks, n2
    # first (Megatron's expert rank order); SUMMA spreads it over data-parallel replicas only
    nvs_d = int(c.nvs_d[0]) * (int(c.nvs2[0]) if strategy != "summa" else 1)
    s = dse.load_system("dgx_h100").params()
    _, _, sp = prepare(c, m.workload(64), s)
    expect = collective_time(ALLTOALL, volume, 8.0, float(math.gcd(8, nvs_d)), sp, PROFILES["default"], network)
    assert f(t["dispatch"]["comm_f"]) == pytest.approx(f(expect), rel=1e-12) and f(expect) > 0
    assert f(t["combine"]["comm_b"]) == pytest.approx(f(expect), rel=1e-12)


#: each network once and each strategy at least once in the default suite (one compiled program
#: per pair): pairs whose programs other tests compile as well (tp1d's rail_only against its
#: rail_optimized, as in tests/kernels/test_moe.py; tp2d's two_tier as `test_cli_eval_prints_ep`);
#: the rest of the product runs with -m slow
_DIAGONAL = {("tp1d", "two_tier"), ("tp2d", "two_tier"), ("tp1d", "rail_optimized"), ("tp1d", "rail_only"),
             ("summa", "any_to_any")}


@pytest.mark.parametrize("strategy,network", [
    pytest.param(s, n, marks=() if (s, n) in _DIAGONAL else pytest.mark.slow)
    for s in ("tp1d", "tp2d", "summa") for n in ("two_tier", "rail_optimized", "rail_only", "any_to_any")])
def test_one_moe_candidate_per_network(strategy, network):
    kw = dict(model="deepspeed_moe_1p3b", system="dgx_a100_seed000", nvs_size=8, strategy=strategy,
              global_batch=1024, n1=2, n2=1 if strategy == "tp1d" else 2, n_p=1, microbatch=8, nvs1=2,
              nvs2=1 if strategy == "tp1d" else 2, nvs_p=1, network=network)
    kw.update(n_d=64 if strategy == "tp1d" else 32, nvs_d=4 if strategy == "tp1d" else 2)
    if strategy == "summa":
        kw["n_b"] = 2
    r = dse.evaluate(**kw)
    assert r["ep"] == math.gcd(kw["n_d"], 128) and r["feasible"]
    assert math.isfinite(r["iteration_time"]) and r["t_tp_comm"] > 0
    if network == "rail_only":  # the all-to-all's cross-rail shards are forwarded
        assert r["iteration_time"] > dse.evaluate(**{**kw, "network": "rail_optimized"})["iteration_time"]


#: tp2d's expert weights are Megatron's, as tp1d's (the default suite has tp1d and SUMMA's own)
@pytest.mark.parametrize("strategy", ["tp1d", pytest.param("tp2d", marks=pytest.mark.slow), "summa"])
def test_expert_weights_shrink_with_ep(strategy):
    """Expert weights per GPU: (E / ep) x the strategy's dense MLP weights; ep = E vs ep = 1."""
    m = load_model("deepspeed_moe_1p3b")  # e = 2048, f = 8192, E = 128, GELU
    two = strategy != "tp1d"
    base = dict(n1=2, n2=2 if two else 1, nvs1=2, nvs2=2 if two else 1, n_d=128, nvs_d=1,
                n_b=2 if strategy == "summa" else 1)
    one = layers(m, strategy, cands(**base, ep=1), profile="lbnl")
    full = layers(m, strategy, cands(**base, ep=128), profile="lbnl")
    if strategy == "summa":  # SUMMA: floor(din / n2) x floor(dout / n1) per GPU
        fc1 = (2048 // 2) * (8192 // 2) * EPS
    else:  # Megatron: e x floor(f / n1)
        fc1 = 2048 * (8192 // 2) * EPS
    assert f(one["expert-fc1"]["weight"]) == pytest.approx(128 * fc1, rel=1e-14)
    assert f(full["expert-fc1"]["weight"]) == pytest.approx(fc1, rel=1e-14)
    # the whole iteration: the expert weights of the 12 MoE blocks drop by 127/128
    kw = dict(model="deepspeed_moe_1p3b", system="a100", nvs_size=8, strategy=strategy, profile="lbnl",
              global_batch=1024, n_p=1, microbatch=1, nvs_p=1,
              **{k: v for k, v in base.items() if k != "n_b" or strategy == "summa"})
    w1 = dse.evaluate(**kw, ep=1)["mem_weights"]
    w128 = dse.evaluate(**kw, ep=128)["mem_weights"]
    per_block = sum(f(one[k]["weight"]) for k in one if k.startswith("expert-"))
    assert w1 - w128 == pytest.approx(12 * per_block * 127 / 128, rel=1e-9)


def test_expert_flops_per_token_closed_form():
    """Per token an MoE block's experts do top_k routed + S shared expert MLPs of width f_e."""
    m = load_model("deepseek_v3", seq_len=512, depth=4, dense_layers=1)
    c = cands(n_d=8, ep=8, microbatch=1)
    t = layers(m, "tp1d", c, system="dgx_h100")
    e, fe, k, S, T = 7168, 2048, 8, 1, 512  # T tokens per microbatch, n1 = 1
    # Megatron's linear convention F_f = rows D_o (2 D_i - 1); SwiGLU: gate and up fused, 2 f_e wide
    assert f(t["expert-fc1"]["flops_f"]) == pytest.approx(k * T * 2 * fe * (2 * e - 1) * 1e-12, rel=1e-12)
    assert f(t["expert-fc2"]["flops_f"]) == pytest.approx(k * T * e * (2 * fe - 1) * 1e-12, rel=1e-12)
    assert f(t["shared-fc1"]["flops_f"]) == pytest.approx(T * 2 * S * fe * (2 * e - 1) * 1e-12, rel=1e-12)
    assert f(t["shared-fc2"]["flops_f"]) == pytest.approx(T * e * (2 * S * fe - 1) * 1e-12, rel=1e-12)
    # the gate: e -> E on every token
    assert f(t["gate"]["flops_f"]) == pytest.approx(T * 256 * (2 * e - 1) * 1e-12, rel=1e-12)
    # routed + shared expert MLP FLOPs per token = (top_k + S) x one expert's 2 (3 e f_e) multiply-adds
    mlp = sum(f(t[f"{p}-{n}"]["flops_f"]) for p in ("expert", "shared") for n in ("fc1", "fc2"))
    assert mlp / T == pytest.approx((k + S) * 2 * 3 * e * fe * 1e-12, rel=1e-3)


def test_mla_projection_shapes():
    m = load_model("deepseek_v3", seq_len=512, depth=4, dense_layers=1)
    c = cands(n1=8, nvs1=8, n_d=1, nvs_d=1, ep=1, microbatch=1)
    t = layers(m, "tp1d", c)
    e, h = 7168, 128
    w = {k: round(f(v["weight"]) / EPS) for k, v in t.items()}
    assert w["q-down"] == e * 1536 and w["kv-down"] == e * (512 + 64)  # replicated over n1
    assert w["q-up"] == 1536 * h * 192 / 8 and w["kv-up"] == 512 * h * 256 / 8
    assert w["vproj"] == h * 128 * e / 8
    # the core: scores over 192 dimensions, values over 128 (P = b H l l, H = 16 heads per GPU)
    mha = layers(load_model("deepseek_v3", seq_len=512, depth=4, dense_layers=1, attention="mha",
                            q_lora_rank=None, kv_lora_rank=None, qk_rope_head_dim=None, qk_nope_head_dim=None,
                            v_head_dim=None), "tp1d", c)
    assert "qkv" in mha and "q-up" not in mha
    assert f(t["fusedla"]["flops_f"]) > f(mha["fusedla"]["flops_f"])  # head_dim 56 for MHA at e / h


def test_busiest_stage_mixes():
    import jax.numpy as jnp

    from kernels.params import Workload

    def mixes(depth, k, n_p, every=1):
        w = Workload(*(jnp.float64(v) for v in (512, 64, 4, depth, 256, 8)), moe_every=jnp.float64(every),
                     dense_layers=jnp.float64(k))
        c = Candidates(*(jnp.float64(v) for v in (1, 1, n_p, 1, 1, 1, 1, 1, 1, 1)))
        return [(f(n), f(s)) for n, s in stage_mixes(c, w)]

    # DeepSeek-V3, 16 stages: 13 of 4 blocks, 3 of 3; the first holds the 3 dense ones
    assert mixes(61, 3, 16) == [(4, 0.25), (4, 0.25), (4, 1.0)]
    # 61 stages of one block: stage 0 dense, stage 3 the first MoE
    assert mixes(61, 3, 61) == [(1, 0.0), (1, 1.0), (1, 1.0)]
    # no dense-first blocks: the stage average 1 / moe_every, the deepest stage first
    assert mixes(24, 0, 4, 2) == [(6, 0.5), (6, 0.5), (6, 0.5)]
    # the boundary: 4 dense blocks on 2-block stages fill stages 0 and 1
    assert mixes(8, 4, 4) == [(2, 0.0), (2, 1.0), (2, 1.0)]


def test_deepseek_v3_evaluates_on_uneven_stages():
    kw = dict(model="deepseek_v3", system="dgx_h100", strategy="tp1d", global_batch=1920, n1=8, n_p=16, n_d=16,
              microbatch=1, nvs1=8, nvs_p=1, nvs_d=1, recompute="full")
    r = dse.evaluate(**kw, ep=16)
    assert r["feasible"] and r["ep"] == 16 and r["iteration_time"] > 0
    # fewer expert replicas per GPU group means more expert weights per GPU
    assert dse.evaluate(**kw, ep=2)["mem_weights"] > r["mem_weights"]


# -------------------------------------------------------------------------------------------------
# the search axis


def _brute_force_eps(n_d: int, experts: int) -> set[int]:
    """The ep dividing E and the GPUs the experts spread over (n2 n_d; tp1d's cp = n2)."""
    return {x for x in range(1, experts + 1) if experts % x == 0 and n_d % x == 0}


def test_ep_enumeration_brute_force():
    m = load_model("deepspeed_moe_1p3b")
    q = Question(model=m, strategy="tp1d", global_batch=64, profile="default")
    cfg = configurations(q, 32)
    keys = [c for c in cfg if c != "ep"]
    seen: dict[tuple, set] = {}
    for i in range(len(cfg["n1"])):
        seen.setdefault(tuple(int(cfg[k][i]) for k in keys), set()).add(int(cfg["ep"][i]))
    assert seen
    nd, n2 = keys.index("n_d"), keys.index("n2")
    for key, eps in seen.items():
        assert eps == _brute_force_eps(key[nd] * key[n2], 128), key
    # lbnl keeps the implicit group gcd(n_d, E); a dense model has ep = 1
    lb = configurations(Question(model=m, strategy="tp1d", global_batch=64, profile="lbnl"), 32)
    assert (lb["ep"] == np.gcd(lb["n_d"], 128)).all()
    dense = enumerate_space(Question(model=load_model("gpt3_175b"), strategy="tp1d", global_batch=64), 32, 8)
    assert len(dense["ep"]) and (dense["ep"] == 1).all()


def test_search_reports_ep_and_prefers_a_feasible_one():
    top = dse.search(model="mixtral_8x7b", system="dgx_h100", strategy="tp1d", n_gpus=64, global_batch=64,
                     top_k=3)
    assert len(top) and "ep" in top.columns
    assert ((8 % top["ep"] == 0) & ((top["n_d"] * top["n2"]) % top["ep"] == 0)).all()


# -------------------------------------------------------------------------------------------------
# bad input: one line naming field, value and what is valid, before any compute


@pytest.mark.parametrize("kw,match", [
    (dict(ep=3), r"^ep = 3: must divide model.experts = 128$"),
    (dict(ep=64, n_d=32, nvs_d=4), r"^ep = 64: must divide n2\*n_d = 32"),
    (dict(ep=0), r"^ep = 0: must be an integer >= 1$"),
])
def test_bad_ep(kw, match):
    point = dict(model="deepspeed_moe_1p3b", system="a100", nvs_size=8, strategy="tp1d", global_batch=1024,
                 n_d=128, nvs1=1, nvs_p=1, nvs_d=8)
    point.update(kw)
    with pytest.raises(SpecError, match=match):
        dse.evaluate(**point)


def test_ep_on_a_dense_model():
    with pytest.raises(SpecError, match=r"^ep = 2: model 'gpt3_175b' has no experts; must be 1$"):
        dse.evaluate(model="gpt3_175b", system="a100", nvs_size=8, global_batch=64, n_d=2, ep=2)


@pytest.mark.parametrize("field,value,match", [
    ("shared_experts", 1, r"^model.shared_experts = 1: model 'gpt3_175b' has no experts"),
    ("expert_ffn", 1024, r"^model.expert_ffn = 1024: model 'gpt3_175b' has no experts"),
    ("dense_layers", 2, r"^model.dense_layers = 2: model 'gpt3_175b' has no experts"),
    ("q_lora_rank", 64, r"^model.q_lora_rank = 64: a field of multi-head latent attention"),
])
def test_expert_and_mla_fields_on_a_dense_model(field, value, match):
    with pytest.raises(SpecError, match=match):
        load_model("gpt3_175b", **{field: value})


@pytest.mark.parametrize("field,value,match", [
    ("shared_experts", -1, r"^model.shared_experts = -1: must be an integer >= 0$"),
    ("expert_ffn", 0, r"^model.expert_ffn = 0: must be an integer >= 1$"),
    ("dense_layers", 61, r"^model.dense_layers = 61: must be < model.depth = 61"),
    ("kv_lora_rank", 0, r"^model.kv_lora_rank = 0: must be an integer >= 1$"),
    ("attention", "gqa", r"^model.attention = 'gqa': must be one of mha, mla$"),
])
def test_bad_deepseek_fields(field, value, match):
    with pytest.raises(SpecError, match=match):
        load_model("deepseek_v3", **{field: value})


def test_mla_refused_in_summa():
    with pytest.raises(SpecError, match=r"^model.attention = 'mla': strategy 'summa'"):
        dse.search(model="deepseek_v3", system="dgx_h100", strategy="summa", n_gpus=2048, global_batch=1920)


def test_cli_eval_bad_ep(capsys):
    args = ["eval", "model=deepspeed_moe_1p3b", "system=a100", "system.nvs_size=8", "strategy=tp1d",
            "global_batch=1024", "n_d=128", "nvs1=1", "nvs_p=1", "nvs_d=8", "ep=3"]
    assert main(args) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.strip() == "dse eval: error: ep = 3: must divide model.experts = 128"


def test_cli_eval_prints_ep(capsys):
    args = ["eval", "model=deepspeed_moe_1p3b", "system=a100", "system.nvs_size=8", "strategy=tp2d",
            "global_batch=1024", "n1=2", "n2=2", "n_d=32", "nvs1=2", "nvs2=2", "nvs_p=1", "nvs_d=2", "ep=8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert " ep=8" in out
    # the all-to-alls on their own line of the time table, apart from the tensor-parallel collectives
    rows = {line.rsplit(None, 2)[0]: float(line.split()[-2]) for line in out.splitlines()
            if line.endswith("%") and "communication" in line}
    assert set(rows) == {"TP communication", "EP all-to-all communication", "DP communication",
                         "PP communication"}
    assert rows["EP all-to-all communication"] > 0.0 and rows["TP communication"] > 0.0
    assert main(args + ["--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["t_ep_comm"] == pytest.approx(rows["EP all-to-all communication"], rel=1e-5)


def test_context_parallelism_with_moe_blocks():
    """tp1d's cp with MoE blocks: each GPU routes its context shard's sequence-parallel split,
    l/(cp n1) rows of e, so the all-to-all and the experts' work per GPU fall by cp; the experts'
    weights are synchronized over (n_d cp) / ep replicas (data x context parallelism)."""
    m = load_model("mixtral_8x7b")  # l = 32768, e = 4096, top-2 of 8 experts
    c1 = cands(n1=2, nvs1=2, n2=1, nvs2=1, n_d=8, nvs_d=4, ep=8)
    c4 = cands(n1=2, nvs1=2, n2=4, nvs2=4, n_d=8, nvs_d=1, ep=8)
    t1, t4 = layers(m, "tp1d", c1), layers(m, "tp1d", c4)
    rows = 32768 // 4 // 2
    assert f(t4["dispatch"]["traffic_f"]) == pytest.approx(2 * 2.0 * 2 * rows * 4096 * EPS, rel=1e-14)
    assert f(t4["dispatch"]["traffic_f"]) == pytest.approx(f(t1["dispatch"]["traffic_f"]) / 4, rel=1e-14)
    assert f(t4["expert-fc1"]["flops_f"]) == pytest.approx(f(t1["expert-fc1"]["flops_f"]) / 4, rel=1e-12)
    from kernels.blocks import expert_data_parallel_group

    g, local = expert_data_parallel_group(c4, m.workload(64), "tp1d")
    # ep = 8 spans the 4 context ranks of a domain and 2 of the data-parallel replicas (Megatron's
    # expert rank order: tensor, then expert over context and data); the 4 GPUs holding the same
    # experts are 4 data-parallel replicas, one per domain (nvs_d = 1)
    assert f(g) == 8 * 4 / 8 and f(local) == 1
    # and the search enumerates cp for an MoE model
    t = enumerate_space(Question(m, "tp1d", 256), 256, 8)
    assert (t["n2"] > 1).any() and (t["ep"] > 1).any()
