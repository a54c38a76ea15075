"""What Megatron-core with Transformer Engine keeps for backward around quantized linears, in closed
form: the attention output flash attention saves beside the out-projection's quantized copy, one
2-byte copy of a tensor two bf16 linears read, and the layernorm recomputation's reach (the norms
that are modules of their own, and the copies of their outputs it frees)."""

from __future__ import annotations

import pytest

import dse
from dse.spec.specs import load_model
from kernels.block_time import direction_time, layers_cost
from kernels.blocks import block_layers
from kernels.iteration import prepare
from helpers import first, one_candidate
from kernels.params import PROFILES

EPS = 2e-9  # GB a 2-byte element
DEFAULT, FSDP2 = PROFILES["default"], PROFILES["fsdp2"]
BASE = dict(n1=2, n2=1, n_p=1, n_d=4, microbatch=1, nvs1=2, nvs2=1, nvs_p=1, nvs_d=4, n_b=1, interleave=1,
            recompute=1, seq_par=1, precision=0, zero=1, ep=1)
f = first


def block(model, profile=DEFAULT, **kw):
    """(the block's cost, its layers by name) of `model` on a DGX H100 under tp1d, n1 = 2 with
    sequence parallelism, microbatch 1 (`BASE` with the changes `kw`)."""
    m = load_model(model) if isinstance(model, str) else model
    s = dse.load_system("dgx_h100").params()
    cf, wf, sf = prepare(one_candidate(BASE, **kw), m.workload(64), s)
    layers = block_layers("tp1d", cf, wf, sf, profile, m.arch)
    return layers_cost(layers, sf, profile, "two_tier"), {x.name: x for x in layers}, sf


# Llama 3 8B: l = 8192, e = 4096, 32 heads of 128; on n1 = 2 the out-projection reads b l e / 2 elements
O_ELEMENTS = 1 * 8192 * 4096 // 2


@pytest.mark.parametrize("precision, profile, bytes_per", [
    (0, DEFAULT, 2.0),  # bf16: o is the tensor both keep
    (1, DEFAULT, 3.0),  # FP8: flash attention's 2-byte o beside vproj's 1-byte copy
    (1, DEFAULT._replace(flash_attention=False), 1.0),  # materialized attention keeps no o: the copy alone
    (1, FSDP2, 1.0),  # PyTorch FSDP2's float8 linears: the engine's count of one quantized input
])
def test_out_projection_keeps_the_attention_output(precision, profile, bytes_per):
    _, layers, _ = block("llama3_8b", profile, precision=precision)
    assert f(layers["vproj"].activation) == pytest.approx(O_ELEMENTS * bytes_per * 1e-9, rel=1e-12)


def test_layernorm_recompute_leaves_fused_norms_alone():
    """A dense block's two norms are fused into QKV and fc1 (Transformer Engine's LayerNormLinear):
    Megatron's layernorm recomputation has nothing to recompute or free there."""
    for precision in (0, 1):
        base, _, _ = block("llama3_8b", precision=precision)
        blk, layers, _ = block("llama3_8b", DEFAULT._replace(recompute_modules="layernorm"), precision=precision)
        assert f(blk.sel_activation) == 0.0 and f(blk.sel_comp) == 0.0 and f(blk.sel_mem) == 0.0
        assert f(blk.activation) == f(base.activation) and layers["ln1"].module == layers["ln2"].module == ""


# DeepSeek-V3 (an MoE block: MLA, one shared expert): e = 7168, l = 4096; the norms' row shard on n1 = 2
ROWS_E = 1 * (4096 // 2) * 7168


@pytest.mark.parametrize("precision, readers", [
    # bf16: q-down keeps the attention norm's output for both down-projections, the gate the
    # pre-MLP norm's for itself and the shared expert's fc1: 2 + 0 + 2 + 0 bytes an element
    (0, {"q-down": 2.0, "kv-down": 0.0, "gate": 2.0, "shared-fc1": 0.0}),
    # FP8: a 1-byte copy for each quantized linear, the router's 2-byte input
    (1, {"q-down": 1.0, "kv-down": 1.0, "gate": 2.0, "shared-fc1": 1.0}),
])
def test_norm_outputs_kept_once_and_freed_by_layernorm_recompute(precision, readers):
    m = load_model("deepseek_v3", depth=4)
    base, layers, s = block(m, precision=precision, ep=4)
    for name, bytes_per in readers.items():
        assert f(layers[name].activation) == pytest.approx(ROWS_E * bytes_per * 1e-9, rel=1e-12), name
    prof = DEFAULT._replace(recompute_modules="layernorm")
    blk, layers, s = block(m, prof, precision=precision, ep=4)
    assert f(blk.sel_activation) == pytest.approx(ROWS_E * sum(readers.values()) * 1e-9, rel=1e-12)
    # the two norms' forwards run again, nothing else
    norms = [direction_time(layers[n], True, s, prof, "two_tier") for n in ("ln1", "ln2")]
    assert f(blk.sel_comp) == pytest.approx(sum(f(t.comp) for t in norms), rel=1e-12) and f(blk.sel_comp) > 0
    assert f(blk.activation) == f(base.activation)


E5M6 = DEFAULT._replace(attn_out_e5m6=True)


@pytest.mark.parametrize("precision, bytes_per", [(1, 1.5 + 4 / 128), (0, 2.0)])
def test_one_e5m6_copy_of_the_attention_output(precision, bytes_per):
    """profile.attn_out_e5m6 (DeepSeek-V3's E5M6 attention output): under FP8 o is kept once, at 12
    bits and a 4-byte scale per 128 elements, where Transformer Engine keeps 3 bytes; its passes
    (forward the copy written, backward it read and the 2-byte o and the 1-byte copy written) are
    charged on the vector layer after the out-projection. bf16 keeps its one o either way."""
    _, base, _ = block("llama3_8b", precision=precision)
    _, layers, _ = block("llama3_8b", E5M6, precision=precision)
    assert f(layers["vproj"].activation) == pytest.approx(O_ELEMENTS * bytes_per * 1e-9, rel=1e-12)
    kept = O_ELEMENTS * (1.5 + 4 / 128) * 1e-9 * precision
    more_f = f(layers["dpr_v"].traffic_f) - f(base["dpr_v"].traffic_f)
    more_b = f(layers["dpr_v"].traffic_b) - f(base["dpr_v"].traffic_b)
    assert more_f == pytest.approx(kept, abs=1e-15) and more_b == pytest.approx(kept + O_ELEMENTS * 3e-9 * precision,
                                                                                abs=1e-15)


def test_the_e5m6_copy_needs_megatrons_block_and_flash_attention():
    from dse.spec.specs import SpecError

    point = dict(model="llama3_8b", system="dgx_h100", strategy="tp1d", n_d=8, microbatch=1, global_batch=8,
                 precision="fp8")
    for profile in (PROFILES["lbnl"]._replace(attn_out_e5m6=True), E5M6._replace(flash_attention=False)):
        with pytest.raises(SpecError, match=r"^profile.attn_out_e5m6 = true: the one E5M6 copy of the attention "
                                            r"output is modelled under Megatron's block with fused flash attention"):
            dse.evaluate(**point, profile=profile)
