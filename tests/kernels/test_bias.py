"""The model's biases (`ModelSpec.bias`, static in `Arch.bias`) and Megatron's bias fusions
(`Profile.bias_fusion`): a model without biases carries no bias weights, FLOPs or traffic; with
the fusions on, each bias rides the elementwise kernel after its linear (no layer, no forward
pass of its own; backward its gradient's reduction still reads the output gradient); off, each is
seed 001's L3 layer. Values are closed forms of the shapes, written out here."""

from __future__ import annotations

import pytest

import dse
from helpers import first as f, one_candidate
from kernels.iteration import layer_table
from kernels.params import PROFILES

DEFAULT = PROFILES["default"]
UNFUSED = DEFAULT._replace(bias_fusion=False)
EPS = 2e-9  # GB per 2-byte element
TFLOP = 1e-12


#: tp 2 with sequence parallelism, b = 2, no recomputation, BF16 (a layer table's candidate)
CANDIDATE = dict(n1=2, n2=1, n_p=1, n_d=8, microbatch=2, nvs1=2, nvs2=1, nvs_p=1, nvs_d=4, n_b=1, interleave=1,
                 recompute=0, seq_par=1, precision=0, zero=1, ep=1)


def table(model, profile, bias, moe=False, **kw):
    m = dse.load_model(model, bias=bias)
    s = dse.load_system("dgx_h100").params()
    c = one_candidate(CANDIDATE, **kw)
    arch = m.arch if moe else m.arch._replace(moe=False)
    return layer_table("tp1d", c, m.workload(64), s, profile, moe=arch), m


def total(t, key):
    return sum(f(x[key]) for x in t.values())


def test_fused_biases_ride_the_elementwise_kernels():
    """Llama 3 8B's shapes with biases, tp 2, sequence parallel, b = 2: fc1's bias (b l 2f / tp
    elements under SwiGLU) on the activation, fc2's and the out-projection's (b l / tp x e) on their
    bias-dropout-adds; each adds its elements' FLOPs each way and its k weights, read forward, and
    backward its gradient's reduction reads the x output-gradient elements and writes k."""
    on, m = table("llama3_8b", DEFAULT, True)
    off, _ = table("llama3_8b", DEFAULT, False)
    b, tp, l, e, ff = 2, 2, m.seq_len, m.hidden, m.ffn
    assert not any(name.endswith("-bias") for name in on)
    biases = {"act1": (b * l * 2 * ff // tp, 2 * ff // tp), "dpr2": (b * l // tp * e, e), "dpr_v": (b * l // tp * e, e)}
    for name in on:
        keys = ("flops_f", "flops_b", "traffic_f", "traffic_b", "weight")
        delta = {k: f(on[name][k]) - f(off[name][k]) for k in keys}
        if name in biases:
            x, k = biases[name]
            assert delta["flops_f"] == pytest.approx(x * TFLOP, rel=1e-12) and delta["flops_b"] == delta["flops_f"]
            assert delta["traffic_f"] == pytest.approx(k * EPS, rel=1e-12)
            assert delta["traffic_b"] == pytest.approx((x + k) * EPS, rel=1e-12)
            assert delta["weight"] == pytest.approx(k * EPS, rel=1e-12)
        else:
            assert all(v == 0.0 for v in delta.values()), name


def test_unfused_biases_are_their_own_layers():
    """Without the fusions each bias is an L3 layer, M = (x + k) eps each way, and the block's
    forward traffic is larger than the fused one's by exactly the three biased tensors; backward,
    weights and FLOPs agree. A model without biases has no bias layers either way, so the same
    layers and times (no per-layer latency of a bias it does not have)."""
    fused, m = table("llama3_8b", DEFAULT, True)
    unfused, _ = table("llama3_8b", UNFUSED, True)
    b, tp, l, e, ff = 2, 2, m.seq_len, m.hidden, m.ffn
    assert [n for n in unfused if n.endswith("-bias")] == ["fc1-bias", "fc2-bias", "vproj-bias"]
    assert list(unfused).index("fc1-bias") == list(unfused).index("act1") - 1
    assert f(unfused["fc2-bias"]["traffic_f"]) == pytest.approx((b * l // tp * e + e) * EPS, rel=1e-12)
    tensors = b * l * 2 * ff // tp + 2 * (b * l // tp * e)
    assert total(unfused, "traffic_f") - total(fused, "traffic_f") == pytest.approx(tensors * EPS, rel=1e-9)
    for key in ("traffic_b", "weight", "flops_f", "flops_b"):
        assert total(unfused, key) == pytest.approx(total(fused, key), rel=1e-12), key
    none_fused, _ = table("llama3_8b", DEFAULT, False)
    none_unfused, _ = table("llama3_8b", UNFUSED, False)
    assert list(none_unfused) == list(none_fused) and not any(n.endswith("-bias") for n in none_fused)
    for key in ("traffic_f", "traffic_b", "weight", "flops_f", "flops_b", "t_f", "t_b"):
        assert total(none_unfused, key) == pytest.approx(total(none_fused, key), rel=1e-12), key
    for strategy in ("tp1d", "summa"):  # seed 001's block and SUMMA's: no bias layers without biases
        for profile in (PROFILES["lbnl"], DEFAULT):
            m = dse.load_model("llama3_8b")
            s = dse.load_system("dgx_h100").params()
            names = layer_table(strategy, one_candidate(CANDIDATE), m.workload(64), s, profile, moe=m.arch)
            assert not any(n.endswith("-bias") for n in names), (strategy, profile.megatron)


def test_expert_biases_are_the_experts():
    """GPT-OSS-120B's experts have biases: with ep 8 each GPU holds 16 whole experts, whose fc1
    (2 x 2880 gated) and fc2 (2880) biases are their weights, 2-byte ones (the quantizable GEMM
    layers carry none of them); the block's token-level output dropout carries none (the dense MLP
    it stands for does not exist)."""
    on, m = table("gpt_oss_120b", DEFAULT, True, moe=True, n1=1, nvs1=1, n_d=8, nvs_d=8, ep=8)
    off, _ = table("gpt_oss_120b", DEFAULT, False, moe=True, n1=1, nvs1=1, n_d=8, nvs_d=8, ep=8)
    per_gpu, e, ff = m.experts // 8, m.hidden, m.expert_width
    expert = sum(f(on[n]["weight"]) - f(off[n]["weight"]) for n in on if n.startswith("expert-"))
    assert expert == pytest.approx(per_gpu * (2 * ff + e) * EPS, rel=1e-12)
    for gemm in ("expert-fc1", "expert-fc2"):
        assert f(on[gemm]["weight"]) == f(off[gemm]["weight"])
    assert f(on["dpr2"]["weight"]) == 0.0
    assert f(on["dpr_v"]["weight"]) - f(off["dpr_v"]["weight"]) == pytest.approx(e * EPS, rel=1e-12)


def test_parameter_counts_and_presets():
    """Llama 3 8B's biases would be 32 x (2 x 14336 + 4096 + 4096) parameters; its preset has none,
    GPT-3's and GPT-OSS's have them."""
    with_bias = dse.load_model("llama3_8b", bias=True).params
    assert with_bias - dse.load_model("llama3_8b").params == 32 * (2 * 14336 + 4096 + 4096)
    for name in ("llama3_8b", "llama3_70b", "llama3_405b", "qwen3_30b_a3b", "qwen3_235b_a22b", "deepseek_v3",
                 "kimi_k2", "mixtral_8x7b", "mixtral_8x22b"):
        assert dse.load_model(name).bias is False, name
    assert dse.load_model("gpt3_175b").bias is True and dse.load_model("gpt_oss_120b").bias is True
    with pytest.raises(dse.SpecError, match=r"model.bias = 'yes': must be true or false"):
        dse.load_model("llama3_8b", bias="yes")
