"""MoE mechanisms of today's recipes: expert tensor parallelism (ETP = TP or 1) and the expert
group folded over a stage's GPUs, the local experts' weight reads and the grouped GEMM's
weight-gradient reduction, the all-to-all overlap switch, multi-token prediction and explicit
pipeline layouts. Expected values are closed forms written out here or brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dse
from dse.explore.space import Question, with_experts
from dse.spec.layout import parse_layout
from dse.spec.specs import SpecError, load_model
from kernels.block_time import direction_time, layers_cost
from kernels.blocks import block_layers, expert_data_parallel_group, expert_group
from kernels.iteration import layer_table, prepare
from helpers import first, one_candidate
from kernels.params import PROFILES, Candidates

EPS = 2e-9  # GB per bf16 element
DEFAULT = PROFILES["default"]
NO_ETP = DEFAULT._replace(expert_tp=False)


f = first  # the first element of a kernel output

#: the one candidate these tests change field by field
BASE = dict(n1=2, n2=1, n_p=1, n_d=4, microbatch=1, nvs1=2, nvs2=1, nvs_p=1, nvs_d=4, n_b=1, interleave=1,
            recompute=1, seq_par=1, precision=0, zero=1, ep=8)


def cands(**kw) -> Candidates:
    return one_candidate(BASE, **kw)


def table(model, c, profile=DEFAULT, system="dgx_h100"):
    m = load_model(model) if isinstance(model, str) else model
    s = dse.load_system(system).params()
    return layer_table("tp1d", c, m.workload(64), s, profile, "two_tier", m.arch)


QWEN = "qwen3_30b_a3b"  # e = 2048, 128 experts of width 768, top-8, SwiGLU, l = 4096


def test_expert_tensor_parallel_one_keeps_whole_experts_without_tp_collectives():
    """ETP = 1: each GPU holds E / ep whole experts and runs its own sequence-parallel shard's routed
    tokens through them; ETP = TP: 1/n1 of each expert on the n1 shards' tokens. Same FLOPs either
    way (the work is only divided differently), n1 times the weights, and no expert collective."""
    m = load_model(QWEN)
    c = cands(ep=8)  # n1 = 2, ep = 8 over n1 n_d = 8 GPUs with ETP = 1; over n_d = 4 ... not valid: ETP = TP uses ep 4
    one = table(m, c, NO_ETP)
    tp = table(m, cands(ep=4), DEFAULT)
    rows = 4096 // 2  # the sequence-parallel shard
    tokens = 8 * rows  # top-8 routed copies of the shard
    fc1 = 2 * 768  # gate and up
    assert f(one["expert-fc1"]["flops_f"]) == pytest.approx(tokens * fc1 * (2 * 2048 - 1) * 1e-12, rel=1e-12)
    # the same routed work per GPU under ETP = TP: twice the tokens (both shards) on half the width
    assert f(tp["expert-fc1"]["flops_f"]) == pytest.approx(2 * tokens * (fc1 // 2) * (2 * 2048 - 1) * 1e-12, rel=1e-12)
    assert f(one["expert-fc1"]["weight"]) == pytest.approx(128 / 8 * 2048 * fc1 * EPS, rel=1e-12)
    assert f(tp["expert-fc1"]["weight"]) == pytest.approx(128 / 4 * 2048 * (fc1 // 2) * EPS, rel=1e-12)
    for name in ("expert-fc1", "expert-fc2"):  # no expert collective under ETP = 1 (times of the layer's own)
        assert f(one[name]["comm_f"]) == 0 and f(one[name]["comm_b"]) == 0
    assert f(tp["expert-fc2"]["comm_f"]) > 0  # ETP = TP: the row-parallel output reduce-scattered


def test_expert_group_folds_over_the_stage():
    """Megatron's expert rank order: etp fastest, then ep over the stage's remaining GPUs. With ETP
    = 1, tp 2 and 4 data-parallel replicas all in one 8-GPU domain, ep 8 is the whole stage inside
    the domain and each expert lives on one GPU; ETP = TP with ep 4 groups the 4 replicas."""
    m = load_model(QWEN)
    w = m.workload(64)
    c = cands(ep=8)
    s = dse.load_system("dgx_h100").params()
    cf, wf, _ = prepare(c, w, s)
    n_e, x_e = expert_group(cf, wf, "tp1d", NO_ETP)
    assert (f(n_e), f(x_e)) == (8, 8)
    group, local = expert_data_parallel_group(cf, wf, "tp1d", NO_ETP)
    assert (f(group), f(local)) == (1, 1)
    c4, _, _ = prepare(cands(ep=4), w, s)
    assert tuple(map(f, expert_group(c4, wf, "tp1d", DEFAULT))) == (4, 4)
    assert tuple(map(f, expert_data_parallel_group(c4, wf, "tp1d", DEFAULT))) == (1, 1)
    # 2 replicas per domain (nvs_d = 2): the ETP = 1 group of 8 has nvs1 nvs_d = 4 GPUs in a domain
    c2, _, _ = prepare(cands(ep=8, nvs_d=2), w, s)
    assert tuple(map(f, expert_group(c2, wf, "tp1d", NO_ETP))) == (8, 4)


def test_local_experts_weights_are_read_every_microbatch():
    """A grouped GEMM over E / ep local experts reads every one of their weights forward and twice
    backward (weights and weight gradients), and its weight gradient reduces over one expert's
    tokens: the HBM traffic grows with the experts held, the FLOPs do not."""
    m = load_model(QWEN)
    few, many = table(m, cands(ep=8), NO_ETP), table(m, cands(ep=2, n_d=4), NO_ETP)
    w_one = 2048 * 2 * 768 * EPS  # one expert's fc1 (gate and up)
    tokens = 8 * (4096 // 2)
    acts = (tokens * 2048 + tokens * 2 * 768) * EPS  # the linear's input and output
    assert f(few["expert-fc1"]["traffic_f"]) == pytest.approx(acts + 16 * w_one, rel=1e-12)
    assert f(many["expert-fc1"]["traffic_f"]) == pytest.approx(acts + 64 * w_one, rel=1e-12)
    assert f(many["expert-fc1"]["traffic_b"]) - f(few["expert-fc1"]["traffic_b"]) == pytest.approx(2 * 48 * w_one, rel=1e-12)
    assert f(many["expert-fc1"]["flops_f"]) == f(few["expert-fc1"]["flops_f"])


def test_weight_gradient_reduces_over_one_experts_tokens():
    m = load_model(QWEN)
    c = cands(ep=8)
    s = dse.load_system("dgx_h100").params()
    cf, wf, sf = prepare(c, m.workload(64), s)
    layers = {x.name: x for x in block_layers("tp1d", cf, wf, sf, NO_ETP, m.arch)}
    tokens = 8 * (4096 // 2)
    assert f(layers["fc1"].gemm_dims_b[1]) == pytest.approx(tokens / 16, rel=1e-12)  # 16 local experts
    assert f(layers["fc1"].gemm_dim) == 2048


def test_alltoall_overlap_exposes_only_the_excess_over_the_block_compute():
    """ep_comm_overlap: per direction the all-to-alls show max(A - C, 0), C the block's other
    compute and exposed HBM time; brute force over the layer times. Shown on a slow network (the
    all-to-all across InfiniBand) where A > C, and on NVLink where it hides."""
    m = load_model(QWEN)
    s = dse.load_system("dgx_h100").params()
    for nvs_d, hidden in ((1, False), (8, True)):
        c = cands(n1=1, nvs1=1, n_d=8, nvs_d=nvs_d, ep=8, microbatch=2)
        cf, wf, sf = prepare(c, m.workload(64), s)
        layers = block_layers("tp1d", cf, wf, sf, DEFAULT, m.arch)
        off = layers_cost(layers, sf, DEFAULT, "two_tier")
        on = layers_cost(layers, sf, DEFAULT._replace(ep_comm_overlap=True), "two_tier")
        exposed = 0.0
        for forward in (True, False):
            times = [direction_time(x, forward, sf, DEFAULT, "two_tier") for x in layers]
            a2a = sum(f(t.comm) for t, x in zip(times, layers) if x.name in ("dispatch", "combine"))
            busy = sum(f(t.comp + t.mem) for t, x in zip(times, layers) if x.name not in ("dispatch", "combine"))
            exposed += max(a2a - busy, 0.0) - a2a
        assert f(on.comm) - f(off.comm) == pytest.approx(exposed, rel=1e-9, abs=1e-15)
        assert (f(on.comm) == pytest.approx(f(off.comm) - a2a_total(layers, sf))) == hidden


def a2a_total(layers, s) -> float:
    return sum(f(direction_time(x, d, s, DEFAULT, "two_tier").comm) for x in layers
               for d in (True, False) if x.name in ("dispatch", "combine"))


def test_multi_token_prediction_adds_a_block_and_a_loss():
    """mtp = 1 on one stage: one more (MoE) block and one more final norm, logit layer and loss per
    microbatch: the FLOPs per GPU grow by the model with one more block's (brute force) and by the
    logit layers' own FLOPs (`kernels.blocks.logit_layers`), times the 8 microbatches."""
    from kernels.blocks import logit_layers

    base = load_model(QWEN, depth=4)
    point = dict(system="dgx_h100", nvs_size=8, strategy="tp1d", global_batch=64, n1=1, n_p=1, n_d=8, microbatch=1,
                 nvs1=1, nvs_p=1, nvs_d=8, ep=8)
    flops = {k: dse.evaluate(model=m, **point)["flops_per_gpu"] for k, m in
             (("base", base), ("mtp", load_model(base, mtp=1)), ("deeper", load_model(base, depth=5)))}
    s = dse.load_system("dgx_h100").params()
    cf, wf, sf = prepare(cands(n1=1, nvs1=1, n_d=8, nvs_d=8, ep=8), base.workload(64), s)
    logit = sum(f(x.flops_f + x.flops_b) for x in logit_layers("tp1d", cf, wf, sf))
    assert flops["mtp"] - flops["base"] == pytest.approx(flops["deeper"] - flops["base"] + 8 * logit, rel=1e-9)


def test_layout_strings():
    ds = parse_layout("Et*4|(t*4|)*14tmL")
    assert ds == (16, 4, 0, 2, 61, 1)
    assert parse_layout("Et|(tt|)*30mL") == (32, 2, 1, 1, 61, 1)
    assert parse_layout("Et*3|t*3|t*2L") == (3, 3, 0, 1, 8, 0)
    for bad, match in (("tE|tL", "the embedding E must open the first stage"),
                       ("Et|tLt", "the loss L must appear once, at the end of the last stage"),
                       ("Et*2|t*3|t*2|t*2L", "the middle stages hold \\[2, 3\\] blocks"),
                       ("Em|tL", "MTP blocks m are modelled on the last stage only"),
                       ("Et|(t|tL", "a '\\(' is never closed"),
                       ("Et|xL", "'x' at position 4 is not a layout symbol")):
        with pytest.raises(SpecError, match=match):
            parse_layout(bad)


def test_deepseek_layout_splits_its_stages():
    """DeepSeek-V3's recipe layout on pp 16: 4 blocks on the first 15 stages, the last one holding
    1 block, the MTP block and the loss. The model with that layout evaluates; a candidate whose
    n_p x interleave is not the layout's 16 stages is refused in one line."""
    m = load_model("deepseek_v3", mtp=1, pipeline_layout="Et*4|(t*4|)*14tmL")
    assert m.split_slots == (0, 2) and m.workload(16).depth == 62
    point = dict(model=m, system="gb200_nvl72", nvs_size=64, strategy="tp1d", global_batch=2048, n1=1, n_p=16,
                 n_d=16, microbatch=1, nvs1=1, nvs_p=4, nvs_d=16, ep=16, recompute="selective")
    r = dse.evaluate(**point)
    assert math.isfinite(r["iteration_time"]) and r["iteration_time"] > 0
    with pytest.raises(SpecError, match=r"^n_p = 8: with interleave = 1, n_p \* interleave must be the 16 stages"):
        dse.evaluate(**{**point, "n_p": 8, "n_d": 32})
    with pytest.raises(SpecError, match=r"places 61 blocks and 1 MTP blocks; the model has depth = 61 and mtp = 0"):
        load_model("deepseek_v3", pipeline_layout="Et*4|(t*4|)*14tmL")


@pytest.mark.parametrize("expert_tp", [True, False])
def test_search_enumerates_every_ep_of_the_stage(expert_tp):
    """Brute force: the default rule's ep are exactly the divisors of E that divide n2 n_d (experts
    sharded over tensor parallelism) or n1 n2 n_d (whole experts)."""
    m = load_model(QWEN)
    q = Question(m, "tp1d", 512, expert_tp=expert_tp)
    cfg = {"n1": np.array([1, 2, 4, 2]), "n2": np.array([1, 1, 2, 4]), "n_p": np.array([1, 2, 1, 1]),
           "n_d": np.array([16, 4, 2, 6])}
    out = with_experts(q, cfg)
    got = sorted(zip(*(out[k].tolist() for k in ("n1", "n2", "n_d", "ep"))))
    want = sorted((n1, n2, nd, ep) for n1, n2, nd in zip(cfg["n1"], cfg["n2"], cfg["n_d"])
                  for ep in range(1, 129) if 128 % ep == 0 and (nd * n2 * (1 if expert_tp else n1)) % ep == 0)
    assert got == want


def test_ep_beyond_the_data_parallel_replicas():
    """ETP = 1 (profile.expert_tp false) accepts ep over tp x dp; ETP = TP refuses it in one line."""
    point = dict(model=QWEN, system="dgx_h100", nvs_size=8, strategy="tp1d", global_batch=64, n1=2, n_p=1, n_d=4,
                 microbatch=1, nvs1=2, nvs_p=1, nvs_d=4, ep=8)
    with pytest.raises(SpecError, match=r"^ep = 8: must divide n2\*n_d = 4 \(the experts are sharded"):
        dse.evaluate(**point)
    custom = dse.api.profile_of("default")._replace(expert_tp=False)
    r = dse.evaluate(**point, profile=custom)
    assert math.isfinite(r["iteration_time"])


# ------------------------------------------------------------------ Megatron's recompute modules


def block_and_layers(model, c, profile):
    m = load_model(model) if isinstance(model, str) else model
    s = dse.load_system("dgx_h100").params()
    cf, wf, sf = prepare(c, m.workload(64), s)
    layers = block_layers("tp1d", cf, wf, sf, profile, m.arch)
    return layers_cost(layers, sf, profile, "two_tier"), {x.name: x for x in layers}, sf


@pytest.mark.parametrize("modules, names, frees", [
    # the attention norm is fused into QKV (nothing recomputed); the pre-MLP norm before the router
    # keeps its input and frees its output, the copy the gate keeps: b (l / n1) e bf16 elements
    ("layernorm", ("ln2",), lambda x: 1 * (4096 // 2) * 2048 * EPS),
    # the experts' activation function keeps fc1's output and frees its own output, fc2's input
    ("moe_act", ("act1",), lambda x: x["fc2"].activation),
    # the dense MLP keeps its input (fc1's stored input) and frees the rest
    ("mlp", ("fc1", "act1", "fc2"), None),
])
def test_recompute_modules(modules, names, frees):
    """Under selective recomputation with Megatron's --recompute-modules, the block's recomputed
    forward is the listed layers' forward time (brute force over the layers), and the memory it
    frees is each module's output as written out per module."""
    model = QWEN if modules != "mlp" else "llama3_8b"
    c = cands(ep=4) if model == QWEN else cands(ep=1)
    prof = DEFAULT._replace(recompute_modules=modules)
    blk, layers, s = block_and_layers(model, c, prof)
    base, _, _ = block_and_layers(model, c, DEFAULT)
    times = [direction_time(layers[n], True, s, prof, "two_tier") for n in names]
    assert f(blk.sel_comp) == pytest.approx(sum(f(t.comp) for t in times), rel=1e-12)
    want = frees(layers) if frees else layers["act1"].activation + layers["fc2"].activation
    assert f(blk.sel_activation) == pytest.approx(f(want), rel=1e-12) and f(want) > 0
    # core_attn under fused attention frees the fp32 softmax statistics of b (h / n1) l query rows
    rows = 4096 if model == QWEN else 8192  # both models have 32 heads, here over n1 = 2
    assert f(base.sel_activation) == pytest.approx(1 * (32 // 2) * rows * 2 * EPS, rel=1e-12)
    assert f(blk.t_f) == f(base.t_f) and f(blk.activation) == f(base.activation)


def test_recompute_mla_up_projections():
    """mla_up_proj frees the full queries, keys and values the up-projections write: b l (h/n1)
    (nope + rope) elements of queries and as many of keys (their rotary part, one per token
    repeated into every head, freed with them), b l (h/n1) v of values."""
    m = load_model("deepseek_v3", depth=4)
    c = cands(n1=2, nvs1=2, ep=4)
    blk, layers, _ = block_and_layers(m, c, DEFAULT._replace(recompute_modules="mla_up_proj"))
    b, lam, heads = 1, 4096, 128 // 2
    want = b * lam * heads * (128 + 64) * EPS + b * lam * heads * (128 + 64 + 128) * EPS
    assert f(blk.sel_activation) == pytest.approx(want, rel=1e-12)


def test_search_with_a_layout_keeps_its_stage_count():
    """A model with an explicit pipeline layout is searched only where n_p x interleave is the
    layout's 16 stages (pp 16; 8 x 2; 4 x 4; ...), MTP blocks counted with the layers."""
    from dse.explore.space import configurations

    m = load_model("deepseek_v3", mtp=1, pipeline_layout="Et*4|(t*4|)*14tmL")
    cfg = configurations(Question(m, "tp1d", 2048), 256)
    assert len(cfg["n_p"]) > 0 and set((cfg["n_p"] * cfg["interleave"]).tolist()) == {16}
    assert {(int(p), int(v)) for p, v in zip(cfg["n_p"], cfg["interleave"])} >= {(16, 1), (8, 2), (4, 4)}


@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_alltoalls_are_their_own_time_term(recompute):
    """t_ep_comm: the dispatch and combine all-to-alls of every block of the stage, every
    microbatch, forward and backward (and the forward again under full recomputation), brute force
    over the layer times; t_tp_comm keeps only the tensor-parallel collectives, and the terms (the
    host's wait of dropless blocks among them) still add up to the iteration. A dense model and ep = 1 have none."""
    m = load_model(QWEN)  # 48 MoE blocks, no dense-first layer
    point = dict(model=m, system="dgx_h100", nvs_size=8, strategy="tp1d", global_batch=64, n1=2, n_p=1, n_d=8,
                 microbatch=2, nvs1=2, nvs_p=1, nvs_d=4, ep=8, recompute=recompute)
    custom = DEFAULT._replace(expert_tp=False)
    r = dse.evaluate(**point, profile=custom)
    c = cands(n_d=8, nvs_d=4, microbatch=2, recompute=2 if recompute == "full" else 1)
    cf, wf, sf = prepare(c, m.workload(64), dse.load_system("dgx_h100").params())
    layers = block_layers("tp1d", cf, wf, sf, custom, m.arch)
    per_block = a2a_total(layers, sf)
    if recompute == "full":
        per_block += sum(f(direction_time(x, True, sf, DEFAULT, "two_tier").comm) for x in layers
                         if x.name in ("dispatch", "combine"))
    micro = 64 // 8 // 2
    assert r["t_ep_comm"] == pytest.approx(micro * 48 * per_block, rel=1e-12)
    assert r["t_tp_comm"] > 0.0
    no_tp = dse.evaluate(**{**point, "n1": 1, "nvs1": 1, "n_d": 16, "nvs_d": 8}, profile=custom)
    assert no_tp["t_tp_comm"] == 0.0 and no_tp["t_ep_comm"] > 0.0  # all its communication is all-to-all
    parts = ("t_compute", "t_memory", "t_tp_comm", "t_ep_comm", "t_dp_comm", "t_pp_comm", "t_bubble", "t_optimizer",
             "t_offload", "t_host")
    assert sum(r[k] for k in parts) == pytest.approx(r["iteration_time"], rel=1e-12)
    assert dse.evaluate(**{**point, "ep": 1}, profile=custom)["t_ep_comm"] == 0.0
    dense = dict(point, model="llama3_8b")
    dense.pop("ep")
    assert dse.evaluate(**dense)["t_ep_comm"] == 0.0


def test_routing_imbalance_loads_the_busiest_rank():
    """profile.expert_imbalance r: the busiest expert-parallel rank receives r times the mean routed
    tokens, so its expert GEMMs do r times the FLOPs and store r times the activations, and its
    all-to-all moves r times the volume (bandwidth term: the difference of two imbalances is linear
    in r); the gate and the attention, on the rank's own tokens, are unchanged."""
    m = load_model(QWEN)
    c = cands(ep=4)
    one, more = table(m, c), table(m, c, DEFAULT._replace(expert_imbalance=1.5))
    for name in ("expert-fc1", "expert-fc2"):
        assert f(more[name]["flops_f"]) == pytest.approx(1.5 * f(one[name]["flops_f"]), rel=1e-12)
        assert f(more[name]["activation"]) == pytest.approx(1.5 * f(one[name]["activation"]), rel=1e-12)
    for name in ("gate", "qkv"):
        assert f(more[name]["flops_f"]) == f(one[name]["flops_f"])
    a2a = [f(table(m, c, DEFAULT._replace(expert_imbalance=r))["dispatch"]["comm_f"]) for r in (1.0, 2.0, 3.0)]
    assert a2a[2] - a2a[1] == pytest.approx(a2a[1] - a2a[0], rel=1e-9) and a2a[1] > a2a[0]


def test_routing_imbalance_is_checked_in_one_line(capsys):
    from dse.cli import main

    args = ["eval", "model=qwen3_30b_a3b", "system=dgx_h100", "strategy=tp1d", "n_d=8", "nvs1=1", "nvs_p=1",
            "nvs_d=8", "global_batch=64", "ep=8"]
    assert main(args + ["profile.expert_imbalance=0.8"]) == 2
    err = capsys.readouterr().err
    assert err == "dse eval: error: profile.expert_imbalance = 0.8: must be in [1.0, 64.0]\n"


@pytest.mark.parametrize("precision, sent", [(0, 2.0), (1, 1.0), (2, 1.0)])
def test_fp8_dispatch_halves_the_exchanges_into_the_experts(precision, sent):
    """ep_dispatch_fp8 (DeepSeek-V3): the dispatch forward and the combine backward carry FP8, one
    byte an element under a quantized precision (NVFP4 runs too); the combine forward and the
    dispatch backward stay two bytes. Volumes in closed form: the GPU's sequence-parallel shard of
    b l / n1 tokens, top-8 copies, e features."""
    m = load_model(QWEN)
    c = cands(n1=1, nvs1=1, n_d=8, nvs_d=8, ep=8, microbatch=2, precision=precision)
    s = dse.load_system("dgx_h100").params()
    cf, wf, sf = prepare(c, m.workload(64), s)
    plain = {x.name: x for x in block_layers("tp1d", cf, wf, sf, NO_ETP, m.arch)}
    fp8 = {x.name: x for x in block_layers("tp1d", cf, wf, sf, NO_ETP._replace(ep_dispatch_fp8=True), m.arch)}
    copies = 8 * 2 * 4096 * 2048  # routed elements each GPU sends per microbatch
    for name in ("dispatch", "combine"):
        assert f(plain[name].comm_f[0].volume) == f(plain[name].comm_b[0].volume) == pytest.approx(copies * EPS)
    assert f(fp8["dispatch"].comm_f[0].volume) == pytest.approx(copies * sent * 1e-9, rel=1e-12)
    assert f(fp8["combine"].comm_b[0].volume) == pytest.approx(copies * sent * 1e-9, rel=1e-12)
    assert f(fp8["dispatch"].comm_b[0].volume) == f(fp8["combine"].comm_f[0].volume) == pytest.approx(copies * EPS)
    assert f(fp8["dispatch"].traffic_f) == pytest.approx(2 * copies * sent * 1e-9, rel=1e-12)
    # the exchange times follow: less or equal with the switch, equal under BF16
    t = {k: sum(f(direction_time(x, d, sf, DEFAULT, "two_tier").comm) for x in layers.values()
                for d in (True, False) if x.name in ("dispatch", "combine"))
         for k, layers in (("plain", plain), ("fp8", fp8))}
    assert (t["fp8"] < t["plain"]) == (precision > 0) and t["fp8"] <= t["plain"]


def test_node_limited_routing_share_and_two_step_time():
    """ep_node_limit M: of a token's k routed copies bound for other domains only m = min(M, k, y)
    cross, so the share is m / k (DeepSeek-V3 on 8 domains, M = 4, k = 8: 1/2), and the exchange
    runs the two-step schedule with that share of its inter-domain step (closed form)."""
    from kernels import fabrics
    from kernels.blocks import node_limited_share
    from kernels.comm_types import RAIL_OPTIMIZED, links_of

    m = load_model("deepseek_v3")
    w = m.workload(64)
    prof = NO_ETP._replace(ep_node_limit=4)
    assert f(node_limited_share(prof, w, 64.0, 8.0)) == pytest.approx(0.5, rel=1e-15)
    assert f(node_limited_share(prof, w, 16.0, 8.0)) == pytest.approx(2 / 8, rel=1e-15)  # 2 domains only
    assert node_limited_share(NO_ETP, w, 64.0, 8.0) == 1.0  # off
    links = links_of(dse.load_system("dgx_h800").params())
    v, x, y = 3.0, 8.0, 8.0
    d = v / (x * y)
    want = (x - 1) * (links.alpha_f + y * d / links.c_f) + (y - 1) * (links.alpha_s + x * d * 0.5 / links.c_s)
    got = fabrics.alltoall_time(v, x, y, links, RAIL_OPTIMIZED, 0.5)
    assert f(got) == pytest.approx(want, rel=1e-14)
    assert f(got) < f(fabrics.alltoall_time(v, x, y, links, RAIL_OPTIMIZED))  # fewer bytes over the NICs


@pytest.mark.parametrize("strategy", ["tp1d", "tp2d", "summa"])
def test_routed_copies_are_reordered_around_the_experts(strategy):
    """Megatron's DeepEP dispatcher gathers the received copies into expert order before the experts and
    takes them out of it after (`permute`, `unpermute`): each of the GPU's routed copies read and
    written once, forward and backward, and nothing else (the other dispatchers' passes:
    tests/kernels/test_dispatchers.py). Qwen3-30B-A3B (e = 2048, top-8), one
    sequence of l = 4096 tokens a microbatch on each of 8 data-parallel GPUs (ETP = 1): 8 l e
    elements of copies; each layer takes the longer of its FLOP latency and 2 V at hbm_eff of the
    H100's HBM bandwidth, in closed form."""
    m = load_model(QWEN)
    c = cands(n1=1, nvs1=1, n_d=8, nvs_d=8, ep=8, microbatch=1)
    s = dse.load_system("dgx_h100").params()
    cf, wf, sf = prepare(c, m.workload(64), s)
    layers = block_layers(strategy, cf, wf, sf, NO_ETP._replace(moe_dispatcher="deepep"), m.arch)
    names = [x.name for x in layers]
    assert names.index("dispatch") < names.index("permute") < names.index("fc1")
    assert names.index("fc2") < names.index("unpermute") < names.index("combine")
    v = 8 * 4096 * 2048 * EPS  # GB of routed copies (two-byte elements)
    bw = 3350.0 * f(sf.hbm_eff)  # GB/s
    for name in ("permute", "unpermute"):
        x = layers[names.index(name)]
        assert f(x.traffic_f) == f(x.traffic_b) == pytest.approx(2 * v, rel=1e-12)
        assert f(x.flops_f) == f(x.flops_b) == f(x.activation) == f(x.weight) == 0.0
        for forward in (True, False):
            t = direction_time(x, forward, sf, NO_ETP, "two_tier")
            assert f(t.comp + t.mem + t.comm) == pytest.approx(max(f(sf.flop_latency), 2 * v / bw), rel=1e-12)
