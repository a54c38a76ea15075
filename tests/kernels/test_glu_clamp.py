"""Clamped gated-MLP inputs (`model.glu_clamp`, GPT-OSS's swiglu_limit; `kernels.blocks.mlp_activation`):
Megatron-core clamps the gate and the linear half in passes of their own before its fused kernel. The
activation layer of a clamped model against the same model unclamped, pass by pass."""

from __future__ import annotations

import numpy as np
import pytest

import dse
from dse.explore.engine import profile_of
from dse.spec.specs import SpecError, load_model
from kernels.iteration import layer_table
from kernels.layers import TFLOP
from kernels.params import Candidates


def act_layer(model, name: str = "expert-act1") -> dict:
    system = dse.load_system("dgx_h100").params()
    ones = {f: np.int64(1) for f in Candidates._fields}
    c = Candidates(**{**ones, "recompute": np.int64(0), "seq_par": np.int64(0), "precision": np.int64(0)})  # bf16
    table = layer_table("tp1d", c, model.workload(64), system, profile_of("default"), moe=model.arch)
    return {k: float(v) for k, v in table[name].items() if k in ("flops_f", "flops_b", "traffic_f", "traffic_b",
                                                                     "activation")}


def test_the_clamps_are_two_passes_forward_and_backward_and_a_concatenation():
    """x output elements: SwiGLU reads 2x and writes x forward (3x eps); each clamp reads and writes x, the
    concatenation reads and writes 2x (8x eps more); backward, in PyTorch's rules, the gate's clamp compares
    its input (read x, write a 1-byte mask) and selects the gradient (read the mask and x, write x): 4x eps;
    the linear half's two comparisons, their AND and the select: 7x eps; the split's gradient concatenates
    the halves' gradients (read 2x, write 2x): 15x eps more; one FLOP an element per clamp each way; the
    concatenated copy the fused kernel keeps is not counted (documented)."""
    assert load_model("gpt_oss_120b").glu_clamp == 7.0
    clamped = load_model("gpt_oss_120b", bias=False)  # no bias folded into the activation's traffic
    plain = load_model(clamped, glu_clamp=None)
    a, b = act_layer(clamped), act_layer(plain)
    eps = 2e-9  # GB per bf16 element
    x = b["traffic_f"] / (3.0 * eps)
    assert x == pytest.approx(4096 * 4 * 2880, rel=0.01)  # one sample's routed copies (top 4), all experts local
    assert a["traffic_f"] - b["traffic_f"] == pytest.approx(8.0 * x * eps, rel=1e-9)
    mask = eps / 2.0  # a bool
    gate = (x * eps + x * mask) + (x * mask + x * eps + x * eps)
    linear = 2 * (x * eps + x * mask) + 3 * x * mask + (x * mask + x * eps + x * eps)
    split = 2 * x * eps + 2 * x * eps
    assert a["traffic_b"] - b["traffic_b"] == pytest.approx(gate + linear + split, rel=1e-9)
    assert a["flops_f"] - b["flops_f"] == pytest.approx(2.0 * x * TFLOP, rel=1e-9)
    assert a["flops_b"] - b["flops_b"] == pytest.approx(2.0 * x * TFLOP, rel=1e-9)
    assert a["activation"] == b["activation"]


def test_a_clamp_needs_a_gated_mlp_of_routed_experts_only():
    with pytest.raises(SpecError) as err:
        load_model("gpt3_175b", glu_clamp=7.0)
    assert str(err.value) == ("model.glu_clamp = 7.0: clamps a gated MLP's inputs; needs model.mlp = 'swiglu' "
                              "(not 'gelu')")
    for name in ("llama3_8b", "deepseek_v3"):  # a dense MLP; dense first blocks and shared experts
        with pytest.raises(SpecError, match="clamps the routed experts' inputs only"):
            load_model(name, glu_clamp=7.0)
    assert load_model("llama3_8b").glu_clamp is None and load_model("qwen3_30b_a3b", glu_clamp=7.0).glu_clamp == 7.0
