"""The model's dropout (`ModelSpec.dropout`, `Workload.dropout`): a dropout of probability 0 keeps
no mask, so the blocks' activations and traffic lose exactly the masks' bytes; an MoE block's MLP
output dropout runs once on its own tokens, not on the k routed copies."""

from __future__ import annotations

import numpy as np
import pytest

import dse
from kernels.iteration import layer_table
from kernels.params import PROFILES, Candidates


def cands(**kw):
    cand = dict(n1=2, n2=1, n_p=1, n_d=8, microbatch=2, nvs1=2, nvs2=1, nvs_p=1, nvs_d=4, n_b=1, interleave=1,
                recompute=0, seq_par=1, precision=0, zero=1, ep=1)
    cand.update(kw)
    return Candidates(*(np.array([cand[k]]) for k in Candidates._fields))


def f(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def tables(model, profile, moe=False, **kw):
    c = cands(**kw)
    s = dse.load_system("dgx_h100").params()
    on = dse.load_model(model, dropout=0.1)
    off = dse.load_model(model, dropout=0.0)
    return (layer_table("tp1d", c, on.workload(64), s, profile, moe=moe),
            layer_table("tp1d", c, off.workload(64), s, profile, moe=moe), on)


@pytest.mark.parametrize("flash", [True, False])
def test_no_dropout_drops_exactly_the_masks(flash):
    profile = PROFILES["default"]._replace(flash_attention=flash)
    on, off, m = tables("llama3_8b", profile)
    b, tp, l, e, h = 2, 2, m.seq_len, m.hidden, m.heads
    masks = {"dpr2": b * l // tp * e, "dpr_v": b * l // tp * e}  # sequence-parallel shards, 1 byte each
    if not flash:  # the materialized attention's dropout: its mask and its output P eps, P = b h/tp l l
        masks["attn-softmax"] = b * h // tp * l * l
    for name in on:
        da = f(on[name]["activation"]) - f(off[name]["activation"])
        dm = f(on[name]["traffic_f"]) - f(off[name]["traffic_f"])
        if name in ("dpr2", "dpr_v"):
            assert da == pytest.approx(masks[name] * 1e-9, rel=1e-12)
            assert dm == pytest.approx(masks[name] * 1e-9, rel=1e-12)
            assert f(off[name]["activation"]) == 0.0
        elif name == "attn-softmax":
            assert da == pytest.approx(masks[name] * (1e-9 + 2e-9), rel=1e-12)  # mask + dropout output
            assert dm == pytest.approx(masks[name] * (1e-9 + 2 * 2e-9), rel=1e-12)  # read P, write P and mask
        else:
            assert da == 0.0 and dm == 0.0, name


def test_moe_output_dropout_is_on_the_tokens_not_the_routed_copies():
    """Qwen3-30B-A3B routes each token to 8 experts; its block's output dropout (with the residual
    add) sees each token once, on the GPU's sequence-parallel shard."""
    on, off, m = tables("qwen3_30b_a3b", PROFILES["default"], moe=dse.load_model("qwen3_30b_a3b").arch, ep=8)
    assert "expert-dpr2" not in on
    assert f(on["dpr2"]["activation"]) == pytest.approx(2 * m.seq_len // 2 * m.hidden * 1e-9, rel=1e-12)
    assert f(off["dpr2"]["activation"]) == 0.0


def test_presets_and_bounds():
    assert dse.load_model("gpt3_175b").dropout == 0.1  # Megatron's default, GPT-3's runs
    for name in ("llama3_8b", "llama3_405b", "qwen3_235b_a22b", "deepseek_v3", "gpt_oss_120b", "mixtral_8x7b"):
        assert dse.load_model(name).dropout == 0.0, name
    with pytest.raises(dse.SpecError, match=r"model.dropout = 1.0: must be in \[0.0, 0.99\]"):
        dse.load_model("llama3_8b", dropout=1)
