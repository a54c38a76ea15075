"""The transformer block (MLP then self-attention, 14 layers) under each strategy.

Spec section 4.2; seed 001 Tables I (1D TP), II (2D TP, context parallel) and A2 (2D TP SUMMA).

tp1d is Megatron tensor parallelism over n1 = t with sequence-parallel LayerNorm/dropout regions;
under Megatron's block (`megatron_block`) its n2 is Megatron-LM's context-parallel degree cp: the
sequence in 2 cp chunks, rank i holding chunks i and 2 cp - 1 - i (causal load balance), weights
replicated over cp, K and V passed around a ring overlapped with attention (`context_exchange`),
gradients reduced over n_d cp (`data_parallel_group`). Seed 001's block has tp1d's n2 = 1. tp2d is
seed 001's 2D TP: heads/features over n1 and contiguous sequence shards over n2, K and V
all-gathered over n2 inside attention, not overlapped, the causal work of the busiest (last) shard
setting the pace. summa runs the four linears as SUMMA matmuls on the n2 x n1 grid with n_b panels;
its attention is tp2d's and its LayerNorms reduce row statistics over n1.
"""

from __future__ import annotations

import jax.numpy as jnp

from kernels import layers as L
from kernels.attention import (as_attention, at_kernel_eff, attention_core, attention_inputs, causal,
                               kernel_kv_heads, kv_heads_of, mask_size, repeated_kv, rho, rotated_features,
                               softmax_statistics)
from kernels.collectives import ALLGATHER, REDUCESCATTER, Collective
from kernels.eager import cast_elements, eager_kernels
from kernels.experts import (  # noqa: F401  (data_parallel_group and the expert groups, for callers)
    OUTPUT_DROPOUT, _expert_modules, _local_experts, data_parallel_group, expert_data_parallel_group,
    exchange_shares, expert_group, expert_shard, expert_tp_group, expert_workload, node_limited_share, regroup_passes)
from kernels.numerics import as_float, fdiv, recip
from kernels.params import Arch, Candidates, Profile, System, Workload, arch_of
from kernels.roofline import narrowed, quantized

#: Layer names of seed 001's block in order (MLP rows, then self-attention rows).
LAYER_NAMES = ("fc1", "fc1-bias", "act1", "dpr1", "fc2", "fc2-bias", "dpr2",
               "ln1", "qkv", "fusedla", "vproj", "vproj-bias", "dpr_v", "ln2")


def region_rows(c: Candidates, w: Workload, strategy: str):
    """(Lambda2, R, sp): the sequence rows of one context shard, floor(l/n2) (tp1d: l / cp, Megatron's
    context parallelism; all l at cp = 1); the rows of the LayerNorm / bias-dropout regions, its
    floor(Lambda2/n1) shard under sequence parallelism or all Lambda2 without; and the candidate's
    `seq_par` as a float. Used by Megatron's block and the end-stage layers only (seed 001's tp1d
    block has n2 = 1)."""
    lam = fdiv(w.seq_len, c.n2)
    sp = as_float(c.seq_par)
    return lam, sp * fdiv(lam, c.n1) + (1.0 - sp) * lam, sp


def sp_layernorm(name: str, c: Candidates, w: Workload, lam, rows, sp, eps, gathered=None, gather_bytes=1.0) -> L.Layer:
    """A LayerNorm on `rows` rows before a tensor-parallel region: under sequence parallelism the
    region is entered by an allgather of b Lambda2 e elements over n1 (a reduce-scatter backward);
    without it, no collective (the region's allreduce is the linear's). `gathered`: the features of
    the gathered tensor when they are not e (multi-head latent attention gathers its latents).
    `gather_bytes`: the share of 2-byte elements sent, below 1 where the gathers carry quantized
    tensors (`Profile.fp8_tp_gather`: torchao's float8 tensor parallelism casts the norm's output
    before the forward allgather and the row-parallel output's gradient before the backward one,
    whose volume this backward collective stands for; the reduce-scatters stay 2-byte and are the
    linears')."""
    width = as_float(w.hidden) if gathered is None else gathered
    vol = as_float(c.microbatch) * lam * width * eps * sp * gather_bytes
    return L.layernorm(name, c.microbatch, rows, w.hidden, eps,
                       comm_f=(Collective(ALLGATHER, vol, c.n1, c.nvs1),),
                       comm_b=(Collective(REDUCESCATTER, vol, c.n1, c.nvs1),))


def mlp_activation(inner, w: Workload, eps, fp8_store: bool = False) -> L.Layer:
    """The MLP's activation on `inner` local intermediate elements: GELU, or SwiGLU for a gated
    MLP (`Workload.gated`), its inputs kept in FP8 under `fp8_store` (`L.fp8_stored`).

    Clamped inputs (`Workload.glu_clamp`, GPT-OSS's swiglu_limit; the spec allows it only on a model whose
    every MLP is a routed expert's, as Megatron-core clamps only there): Megatron-core splits fc1's output
    in two, clamps the gate and the linear half in eager PyTorch and concatenates them before its fused
    gated kernel (`weighted_bias_quick_geglu_impl`, core 0.15), passes of their own, in 2-byte element
    sizes of x outputs: forward each clamp reads and writes x, the concatenation 2x, 8x more; backward
    (PyTorch's rules) the gate's clamp rebuilds its mask from its input (a comparison, then a where: 4x),
    the linear half's from two comparisons and their AND (7x), and the split's gradient concatenates the
    halves' gradients (4x; the concatenation's own is a view), 15x more; x FLOPs each way per clamp.
    Its concatenated copy is recomputed with the activation under `moe_act` and otherwise kept beside
    fc1's output, 2x eps not counted."""
    act = jnp.where(as_float(w.gated) > 0.0, 1.0, 0.0)
    glu = L.swiglu("act1", inner, eps)
    clamped = jnp.where(as_float(w.glu_clamp) > 0.0, as_float(inner), 0.0)  # x, or none
    glu = glu._replace(flops_f=glu.flops_f + 2.0 * clamped * L.TFLOP, flops_b=glu.flops_b + 2.0 * clamped * L.TFLOP,
                       traffic_f=glu.traffic_f + 8.0 * clamped * eps, traffic_b=glu.traffic_b + 15.0 * clamped * eps)
    gelu = L.gelu("act1", inner, eps)
    glu = L.fp8_stored(glu, 2.0 * as_float(inner), eps) if fp8_store else glu
    return gelu._replace(**{k: act * getattr(glu, k) + (1.0 - act) * getattr(gelu, k)
                            for k in ("flops_f", "flops_b", "traffic_f", "traffic_b", "activation")})


def bias_layer(name: str, bias: bool, *shape) -> tuple[L.Layer, ...]:
    """A bias add as its own layer (L3, `L.bias(name, *shape)`): seed 001's block, SUMMA's, Megatron's
    without `Profile.bias_fusion`; none where the model's linears have no biases (`bias`, static:
    `Arch.bias`)."""
    return (L.bias(name, *shape),) if bias else ()


def fold_bias(into: L.Layer, bias: L.Layer) -> L.Layer:
    """`into`, the elementwise kernel after a linear, adding that linear's `bias` as Megatron fuses
    it (bias-GELU, bias-SwiGLU, bias-dropout-add): the bias's FLOPs and its k weights, which the
    kernel reads forward; backward the bias gradient, a reduction of the output gradient over its
    rows, reads that gradient once more (x eps) and writes k. No pass of its own forward, no layer
    latency."""
    return into._replace(flops_f=into.flops_f + bias.flops_f, flops_b=into.flops_b + bias.flops_b,
                         traffic_f=into.traffic_f + bias.weight, traffic_b=into.traffic_b + bias.traffic_b,
                         weight=into.weight + bias.weight)


def context_parallel_block(
    c: Candidates, w: Workload, system: System, profile: Profile, strategy: str, bias: bool = True
) -> tuple[L.Layer, ...]:
    """tp1d (n2 forced to 1) and tp2d blocks.

    Lambda2 = floor(l/n2) rows per sequence shard; R = floor(Lambda2/n1) rows per sequence-parallel
    shard. Weights are sharded over n1 and replicated over n2.
    """
    one = jnp.ones_like(c.n1)
    n1, nvs1 = c.n1, c.nvs1
    n2, nvs2 = (one, one) if strategy == "tp1d" else (c.n2, c.nvs2)
    b, eps, mu = c.microbatch, system.element_size, mask_size(system, w)
    l, e, f, h = w.seq_len, w.hidden, w.ffn, w.heads
    lam = fdiv(l, n2)
    r = fdiv(lam, n1)
    ffn_local = b * lam * fdiv(f, n1)

    if not profile.reference_bias_sharding:
        fc2_bias = (r, e)
        vproj_bias = (r, e)
    elif strategy == "tp1d":
        fc2_bias = (l, e)
        vproj_bias = (l, e)
    else:
        fc2_bias = (r, e)
        vproj_bias = (lam, fdiv(e, n1))

    return (
        L.megatron_linear("fc1", b, lam, e, f, one, n1, one, nvs1, eps),
        *bias_layer("fc1-bias", bias, b, lam, fdiv(f, n1), eps),
        L.gelu("act1", ffn_local, eps),
        L.dropout("dpr1", ffn_local, eps, mu),
        L.megatron_linear("fc2", b, lam, f, e, n1, one, nvs1, one, eps),
        *bias_layer("fc2-bias", bias, b, *fc2_bias, eps),
        L.dropout("dpr2", b * r * e, eps, mu),
        L.sequence_sharded_layernorm("ln1", b, r, e, lam, n1, nvs1, eps),
        as_attention(L.megatron_linear("qkv", b, lam, e, 3 * e, one, n1, one, nvs1, eps)),
        L.flash_attention("fusedla", b, fdiv(h, n1), lam, l, fdiv(e, h), rho(system), n2, nvs2, eps),
        as_attention(L.megatron_linear("vproj", b, lam, e, e, n1, one, nvs1, one, eps)),
        *bias_layer("vproj-bias", bias, b, *vproj_bias, eps),
        L.dropout("dpr_v", b * r * e, eps, mu),
        L.sequence_sharded_layernorm("ln2", b, r, e, lam, n1, nvs1, eps),
    )


def megatron_block(c: Candidates, w: Workload, system: System, profile: Profile, strategy: str,
                   mla: bool = False, bias: bool = True) -> tuple[L.Layer, ...]:
    """tp1d and tp2d blocks as Megatron-LM runs them (profile switch `megatron`).

    Forward order: MLP (fc1 with its bias and GELU, fc2, bias + dropout + residual), then attention
    (LayerNorm, QKV, the core, out-projection, bias + dropout + residual, LayerNorm), the same
    rotation as seed 001's block. Differences from `context_parallel_block`:

    * sequence parallelism is the candidate's choice (`seq_par`): on, LayerNorms and the
      bias-dropout-residual regions work on the R = floor(Lambda2/n1) row shard and the
      tensor-parallel region is entered by an allgather and left by a reduce-scatter; off, they
      work on all Lambda2 rows, replicated, and both collectives are allreduces (the entering one in
      backward);
    * the column-parallel linears keep the input they were given, the row shard under sequence
      parallelism (Megatron allgathers it again in backward, overlapped with the input gradient);
    * no dropout on the MLP intermediate;
    * the attention core is fused flash attention (`profile.flash_attention`, seed 001's layer) or
      three materialized layers: scores, softmax + dropout, values.

    The activations add up to Korthikanti et al. 2022 (Eq. 1-2): per layer and microbatch,
    s b h (10 + 24/t + 5 a s/(h t)) bytes without sequence parallelism and s b h (34 + 5 a s/h) / t
    with it, for 2-byte elements and 1-byte masks (the score term only for materialized attention
    without recomputation; `kernels.iteration` drops it for selective and keeps block inputs only
    for full recomputation).

    `mla` (static): multi-head latent attention (DeepSeek-V2/V3) in place of the QKV projection,
    by its projection shapes, as Megatron-Core's MLA runs it: the down-projections e -> q_lora and
    e -> kv_lora + rope on the LayerNorm region's rows (the sequence shard under sequence
    parallelism), replicated over n1; the latents (q_lora + kv_lora + rope features, not the e of
    the hidden state) allgathered over n1 entering the tensor-parallel region; the column-parallel
    up-projections q_lora -> h (nope + rope) and kv_lora -> h (nope + v); the core with head
    dimension nope + rope for queries and keys and v for values; the row-parallel out-projection
    h v -> e. The latents' RMSNorms are left out.
    """
    one = jnp.ones_like(c.n1)
    n1, nvs1 = c.n1, c.nvs1
    b, eps, mu = c.microbatch, system.element_size, mask_size(system, w)
    e, f = w.hidden, w.ffn
    lam, rows, sp = region_rows(c, w, strategy)
    local = as_float(b) * rows * as_float(e)  # elements of one LayerNorm / dropout region's tensor
    gated = as_float(w.gated)
    up = as_float(f) * (1.0 + gated)  # the MLP's first projection: up (and gate, fused)
    att = repeated_kv(attention_inputs(c, w, system, strategy, lam, rows, sp, local, mla), w, n1, profile, mla,
                      as_float(b) * lam)
    qkv, core = attention_core(att, c, w, system, profile, strategy, lam)
    latent = w.q_lora_rank + w.kv_lora_rank + w.qk_rope_head_dim if mla else None  # latents gathered over n1
    inner = as_float(b) * lam * fdiv(f, n1)  # the MLP's local intermediate elements
    code = as_float(c.precision)  # the matmuls' precision code: 0 bf16, 1 FP8, 2 NVFP4
    fp8 = quantized(code)
    bl = as_float(b) * lam
    # quantizing casts (Transformer Engine): the input of fc2 and of vproj forward, the output
    # gradient of every linear backward; those of qkv and fc1 are written quantized by their LayerNorm
    activation = fp8_cast(mlp_activation(inner, w, eps, profile.act_fp8_store), fp8, inner,
                          bl * (fdiv(up, n1) + as_float(e)), eps, cast_elements(profile))
    # `Profile.bias_fusion`: each bias added by the elementwise kernel after its linear (bias-GELU or
    # bias-SwiGLU, bias-dropout-add; `fold_bias`), else a layer of its own
    def biased(into, name, *shape):  # `into` after the bias `name` of the linear before it: folded, own layer, none
        if bias and profile.bias_fusion:
            return (fold_bias(into, L.bias(name, *shape)),)
        return (*bias_layer(name, bias, *shape), into)

    # the FP8 casts of vproj's input and of the output gradients, on the layer after vproj
    casts = (bl * fdiv(att.out_in, n1), bl * (att.proj_out + as_float(e)))
    vproj_after = biased(L.dropout("dpr_v", local, eps, mu), "vproj-bias", b, rows, e, eps)
    vproj_after = (fp8_cast(vproj_after[0], fp8, *casts, eps, cast_elements(profile)), *vproj_after[1:])
    saved = narrowed(code)  # of each 2-byte operand: 0.5 under FP8, 0.72 NVFP4
    # `Profile.fp8_tp_gather`: the sequence-parallel allgathers that feed quantized matmuls (the
    # LayerNorms' outputs forward, the row-parallel outputs' gradients backward) sent quantized
    gather = 1.0 - saved if profile.fp8_tp_gather else 1.0

    def low(x):  # a quantized matmul: at the FP8 / FP4 rate, its input kept quantized for backward
        stored_input = x.activation if x.name != qkv.name or profile.flash_attention else (
            x.activation - (att.q_elems + att.kv_elems) * eps)
        operands_f, operands_b = quantized_operands(x, eps)
        return x._replace(fp8=code, activation=x.activation - saved * stored_input,
                          traffic_f=x.traffic_f - saved * operands_f, traffic_b=x.traffic_b - saved * operands_b)

    def mlp(x, frees=None):  # a layer of the MLP module (its recomputation keeps fc1's input)
        return x._replace(module="mlp", frees=frees)

    zero = jnp.zeros_like(local)
    rope = 0.0 if mla else bl * rotated_features(w, n1, att.qk_dim)
    # the out-projection's input o (casts[0] elements), which fused flash attention's backward reads
    # too (`attention_output`); the passes of an E5M6 copy charged beside vproj's casts
    vproj, o_passes, beside = attention_output(
        low(as_attention(L.megatron_linear("vproj", b, lam, att.out_in, e, n1, one, nvs1, one, eps, sp))),
        casts[0], fp8, eps, profile)
    if profile.flash_attention:  # the checkpointed fused core frees that copy of o too (its statistics: `attention_core`)
        core = (core[0]._replace(frees=core[0].frees + beside), *core[1:])
    vproj_after = (fp8_cast(vproj_after[0], fp8, *o_passes, eps, per=1.0), *vproj_after[1:])
    # the latents' down-projections read one LayerNorm output: one 2-byte tensor under bf16, which
    # the first keeps for both, else a quantized copy each (`shared_input`)
    projections = tuple(low(shared_input(x, fp8) if x.name == "kv-down" else x) for x in att.projections[:-1])
    # Megatron's layernorm recomputation (`norm_module`): a norm fused into its linear (Transformer
    # Engine's LayerNormLinear: the attention norm before QKV, the dense MLP's before fc1) is not a
    # module of its own and recomputes nothing; MLA's attention norm is, and frees the copies of its
    # output the down-projections keep
    ln1 = sp_layernorm("ln1", c, w, lam, rows, sp, eps, latent, gather)
    if mla:
        ln1 = norm_module(ln1, sum((x.activation for x in projections if x.name in ("q-down", "kv-down")), zero))
    return eager_kernels((
        mlp(low(L.megatron_linear("fc1", b, lam, e, up, one, n1, one, nvs1, eps, sp, local)), zero),
        *(mlp(x) for x in biased(activation, "fc1-bias", b, lam, fdiv(up, n1), eps)),
        mlp(low(L.megatron_linear("fc2", b, lam, f, e, n1, one, nvs1, one, eps, sp))),
        *biased(L.dropout("dpr2", local, eps, mu), "fc2-bias", b, rows, e, eps),
        ln1,
        *projections,
        low(qkv),
        *core,
        vproj,
        *vproj_after,
        sp_layernorm("ln2", c, w, lam, rows, sp, eps, None, gather),
    ), profile, as_float(b) * rows * as_float(e), inner * as_float(w.gated), rope, inner * as_float(w.relu2))


#: bytes an element of DeepSeek-V3's E5M6 copy of the attention output: 12 bits and a 4-byte scale per 128
E5M6_BYTES = 1.5 + 4.0 / 128.0


def attention_output(vproj: L.Layer, o, fp8, eps, profile: Profile):
    """(`vproj`, (forward, backward) 2-byte elements of HBM passes for `fp8_cast` at per = 1, GB the
    fused core keeps of o beside vproj's copy): what is kept of the attention output o (`o`
    elements), the out-projection's input, which fused flash attention saves for its own backward
    too; the third is what Megatron-core's checkpointed core (selective, core_attn) no longer keeps. `vproj` comes quantized from `low` (its stored input a
    quantized copy under a quantized precision, `fp8` 1, the 2-byte o under bf16).

    * Materialized attention (its backward reads probabilities and V, not o), and torchao's float8
      linears (`Profile.te_quantization` off: PyTorch FSDP2), which keep their 2-byte input, that
      same o (the engine keeps counting that framework's stored inputs as quantized copies, a
      smaller count it has always made): `vproj` as it comes.
    * Fused flash attention under Transformer Engine: the 2-byte o beside the quantized copy (under
      bf16 they are one tensor). Megatron-core 0.15+ under FP8 scaling other than delayed and under
      NVFP4 has the out-projection keep o itself instead (`set_save_original_input`): not modelled.
    * `Profile.attn_out_e5m6`: o kept once for both backwards in E5M6 (`E5M6_BYTES` an element);
      forward writes it beside the FP8 cast the GEMM reads; backward reads it once and writes the
      2-byte o flash attention's backward takes and the 1-byte copy the weight gradient takes."""
    zero = jnp.zeros_like(vproj.activation)
    if not profile.flash_attention:
        return vproj, (zero, zero), zero
    if profile.attn_out_e5m6:
        kept = o * eps * (E5M6_BYTES / 2.0)
        return (vproj._replace(activation=fp8 * kept + (1.0 - fp8) * vproj.activation),
                (o * (E5M6_BYTES / 2.0), o * ((E5M6_BYTES + 3.0) / 2.0)), zero)
    if not profile.te_quantization:
        return vproj, (zero, zero), zero
    beside = fp8 * o * eps
    return vproj._replace(activation=vproj.activation + beside), (zero, zero), beside


def shared_input(x: L.Layer, fp8) -> L.Layer:
    """`x`, a linear reading the same 2-byte tensor as a linear before it: under bf16 that one keeps
    it for both (nothing here), under a quantized precision (`fp8` 1) each keeps its own quantized
    copy (the factor commutes with `low`'s narrowing: before or after it, the same count)."""
    return x._replace(activation=fp8 * x.activation)


def norm_module(norm: L.Layer, frees) -> L.Layer:
    """`norm` as a module of its own for Megatron-core's layernorm recomputation
    (`Profile.recompute_modules` layernorm): its forward runs again in backward and its output is
    dropped, freeing every copy its readers keep of it, `frees` GB (under FP8 Megatron has them keep
    the 2-byte output rather than quantized copies, so that all of it is freed; its input, the
    residual stream, stays). A norm fused into the linear after it (Transformer Engine's
    LayerNormLinear) is no module: the recomputation leaves it alone."""
    return norm._replace(module="layernorm", frees=frees)


def quantized_operands(x: L.Layer, eps):
    """(forward, backward) HBM bytes of a Megatron linear's GEMM operands, at 2 bytes an element:
    what a quantized GEMM reads in its narrower format instead. Forward: the input b L D_i and the
    weight; backward: the weight (input gradient), the output gradient twice (both GEMMs) and the
    input (weight gradient). The outputs (activations, input and weight gradients) stay 2-byte."""
    d_i, (d_o, bl) = x.gemm_dim, x.gemm_dims_b
    return bl * d_i * eps + x.weight, x.weight + 2.0 * bl * d_o * eps + bl * d_i * eps


def fp8_cast(layer: L.Layer, fp8, forward, backward, eps, per=2.0) -> L.Layer:
    """`layer` with the HBM traffic of the FP8 casts next to it, where `fp8` (0/1) is 1: Transformer
    Engine quantizes each FP8 GEMM operand that no preceding kernel wrote in FP8, reading its
    2-byte elements and writing the 1-byte FP8 copy and its 1-byte transpose (the weight-gradient
    GEMM takes the transposed layout on Hopper): 4 bytes, `per` = 2 eps, per element (3 under eager
    operators: `kernels.eager.cast_elements`); `forward` and `backward` elements of each direction.
    A memory-bound pass, charged on the memory-bound vector layer beside it, so it costs its
    traffic at the HBM rate."""
    return layer._replace(traffic_f=layer.traffic_f + fp8 * forward * (per * eps),
                          traffic_b=layer.traffic_b + fp8 * backward * (per * eps))


def summa_block(c: Candidates, w: Workload, system: System, profile: Profile, bias: bool = True) -> tuple[L.Layer, ...]:
    """summa block: SUMMA linears and LayerNorms on the n2 x n1 grid, context-parallel attention."""
    n1, n2, nvs1, nvs2, nb = c.n1, c.n2, c.nvs1, c.nvs2, c.n_b
    b, eps, mu = c.microbatch, system.element_size, mask_size(system, w)
    l, e, f, h = w.seq_len, w.hidden, w.ffn, w.heads
    rows = fdiv(l, n2)
    ffn_local = b * rows * fdiv(f, n1)
    hid_local = b * rows * fdiv(e, n1)
    seq_shard = profile.ln2d_feature_shard_from_seq_len

    def linear(name, din, dout):
        return L.summa_linear(name, b, l, din, dout, n1, n2, nvs1, nvs2, nb, eps)

    def norm(name):
        return L.summa_layernorm(name, b, l, e, n1, n2, nvs1, eps, seq_shard)

    heads, head_dim = fdiv(h, n1), fdiv(e, h)
    attention = L.flash_attention("fusedla", b, heads, rows, l, head_dim, rho(system), n2, nvs2, eps)
    qkv_out, up, act1 = 3 * e, f, L.gelu("act1", ffn_local, eps)
    if profile.megatron:
        # causal attention over contiguous sequence shards (the busiest one sets the
        # pace, `causal`); grouped-query attention: the QKV projection
        # writes e + 2 h_kv e/h features, and only the h_kv/n1 local key/value heads are stored and
        # gathered over n2; a gated MLP's first projection writes gate and up (2f), its activation
        # is SwiGLU. With h_kv = h and GELU these are seed 001's shapes exactly.
        kv_all = kv_heads_of(w)
        qkv_out = as_float(e) + 2.0 * kv_all * head_dim
        up = as_float(f) * (1.0 + as_float(w.gated))
        act1 = mlp_activation(ffn_local, w, eps, profile.act_fp8_store)
        kv_kernel = kernel_kv_heads(w, n1, profile)
        kv = 2.0 * as_float(b) * kv_kernel * as_float(l) * head_dim * eps
        q_rows = as_float(b) * heads * rows * head_dim
        stats = softmax_statistics(b, heads, rows, eps)
        kv_rows = as_float(b) * kv_kernel * rows * head_dim
        attention = at_kernel_eff(causal(attention._replace(
            # Q, K, V and the statistics; the output is kept once, by vproj as its input (as tp1d's
            # and tp2d's core, `attention.attention_core`)
            activation=(q_rows + 2.0 * kv_rows) * eps + stats,
            comm_f=(Collective(ALLGATHER, kv, n2, nvs2),),
            comm_b=(Collective(ALLGATHER, kv, n2, nvs2), Collective(REDUCESCATTER, kv, n2, nvs2)),
            # selective recomputation checkpoints the core (as Megatron's block, `attention.attention_core`):
            # its statistics freed
            selective=True, frees=stats), w, n2), profile, head_dim, None, b, heads, rows)
    rope = as_float(b) * rows * rotated_features(w, n1, head_dim)
    return eager_kernels((
        linear("fc1", e, up),
        *bias_layer("fc1-bias", bias, b, rows, fdiv(up, n1), eps),
        act1,
        # seed 001's dropout after the MLP activation; Megatron's block has none there (its
        # hidden dropouts follow fc2 and vproj, as tp1d's and tp2d's)
        *(() if profile.megatron else (L.dropout("dpr1", ffn_local, eps, mu),)),
        linear("fc2", f, e),
        *bias_layer("fc2-bias", bias, b, rows, fdiv(e, n1), eps),
        L.dropout("dpr2", hid_local, eps, mu),
        norm("ln1"),
        as_attention(linear("qkv", e, qkv_out)),
        attention,
        as_attention(linear("vproj", e, e)),
        *bias_layer("vproj-bias", bias, b, rows, fdiv(e, n1), eps),
        L.dropout("dpr_v", hid_local, eps, mu),
        norm("ln2"),
    ), profile, hid_local, ffn_local * as_float(w.gated), rope, ffn_local * as_float(w.relu2))


def moe_block(strategy: str, c: Candidates, w: Workload, system: System, profile: Profile,
              arch: Arch = Arch(moe=True)) -> tuple[L.Layer, ...]:
    """A block whose MLP is a mixture of experts with expert parallelism (seed 002 III-C), under any
    strategy: the strategy's own dense MLP layers, run by each GPU for its E / ep experts.

    A gate routes each token to `moe_tokens` = top-k x capacity-factor expert slots: tp1d and tp2d,
    an e -> E linear replicated over the tensor-parallel group on the GPU's sequence-parallel shard;
    summa, the same linear on its grid block's e / n1 features, the partial logits allreduced over
    n1. The GPU's token shard (`expert_shard`: rows x width elements per sample) is sent to the
    experts' GPUs and back, an all-to-all over the expert-parallel group of ep data-parallel
    replicas (`expert_group`) each way:

        V_a2a = moe_tokens b rows width eps          (GB each GPU sends, dispatch and again combine)

    the same forward and backward (under `Profile.ep_dispatch_fp8` and a quantized precision the
    dispatch forward and the combine backward carry FP8, half of it). Between them each GPU runs
    the strategy's dense MLP layers (`dense_block`, the layers before `ln1` but dpr2) on moe_tokens
    times the microbatch, with weights x E / ep
    (its experts), marked `expert` so that they are synchronized over the GPUs holding the same
    expert shard (`expert_data_parallel_group`). The expert MLP runs on the expert tensor-parallel
    group (`expert_tp_group`): under ETP = TP the routed tokens of the group's n1 sequence shards,
    gathered and scattered again by the MLP's own sequence-parallel collectives, on 1/n1 of each
    expert; under ETP = 1 the GPU's own routed tokens on whole experts, with no collective. Each
    microbatch reads all its local experts' weights (`_local_experts`: a grouped GEMM over few
    tokens per expert is bound by them), and the weight gradients reduce over one expert's tokens.
    Uniform routing: every GPU processes as many expert tokens as it sends; under
    `Profile.expert_imbalance` r the busiest GPU receives r times the mean, and as every GPU waits
    for it, its expert work and all-to-all (moe_tokens r b rows width eps) are the block's. The
    experts' width is `expert_ffn` (`expert_workload`). Around the experts the GPU reorders the
    copies (`permute` into order, `unpermute` out of it with the router weights: each copy read and
    written once each way a pass, `layers.regroup`), as many passes as the dispatcher runs
    (`Profile.moe_dispatcher`, `experts.regroup_passes`: alltoall 2 and 2, 1 and 1 with one local
    expert; DeepEP and HybridEP 1 and 1), and the fused dispatchers send each token once per GPU
    holding one of its experts (`experts.dispatch_share` of the copies; alltoall every copy) and
    once per other domain (`experts.crossing_share` of the inter-domain copies cross).

    The MLP's output dropout with its residual add (dpr2) is the block's: once on the GPU's own
    tokens after the combine, not on the routed copies.

    Shared experts (`arch.shared`, static; `shared_experts` = S of them): S always-active MLPs of
    the expert width on every token of the GPU's shard, as one MLP of width S x expert_ffn (as
    DeepSeek-V3 runs them), named shared-fc1 ...; their weights are the block's ordinary
    (data-parallel) weights. They run after the combine (DeepSeek overlaps them with the
    all-to-all; not modelled).

    So per token an MoE block does the MLP work of moe_tokens + S experts of the expert width, plus
    the gate's 2 e E (`tests/kernels/test_moe_strategies.py` checks the closed form).
    """
    dense = dense_block(strategy, c, w, system, profile, arch.mla, arch.bias)
    mlp = next(i for i, x in enumerate(dense) if x.name == "ln1")  # the MLP's layers come first
    one = jnp.ones_like(c.n1)
    b, eps = c.microbatch, system.element_size
    e = w.hidden
    rows, width = expert_shard(strategy, c, w)
    n_e, x_e = expert_group(c, w, strategy, profile)
    per_gpu = w.experts * recip(n_e)  # experts held by one GPU
    etp, etp_local = expert_tp_group(strategy, c, profile)
    # the expert MLP's tokens per microbatch: the routed copies of the etp sequence shards its
    # expert tensor-parallel group gathers (all n1 under ETP = TP, its own under ETP = 1)
    # the busiest rank's routed tokens (`Profile.expert_imbalance`: 1, balanced routing)
    load = w.moe_tokens * profile.expert_imbalance
    routed = c._replace(microbatch=b * load)
    if strategy != "summa" and not profile.expert_tp:
        routed = c._replace(microbatch=b * load * recip(c.n1), n1=etp, nvs1=etp_local)
    def inner(layers):  # an MLP's layers but its output dropout (with the residual add): the block's, once per
        # token. The output bias that dropout adds (`fold_bias`) is the expert's own, added in its fc2 GEMM's
        # epilogue: a 2-byte weight (no FP8 copy), carried on the activation layer, which has none either
        out_bias = next(x.weight for x in layers[:mlp] if x.name == OUTPUT_DROPOUT)
        return tuple(x._replace(weight=x.weight + out_bias, traffic_f=x.traffic_f + out_bias,
                                traffic_b=x.traffic_b + out_bias) if x.name == "act1" else x
                     for x in layers[:mlp] if x.name != OUTPUT_DROPOUT)

    experts = _expert_modules(tuple(
        _local_experts(x, per_gpu)
        for x in inner(dense_block(strategy, routed, expert_workload(w), system, profile, arch.mla, arch.bias))
    ))
    shared = ()
    if arch.shared:
        shared = tuple(x._replace(name=f"shared-{x.name}", module="shared_experts", frees=None) for x in inner(
            dense_block(strategy, c, expert_workload(w, w.shared_experts), system, profile, arch.mla, arch.bias)))
    # once per token, without a dense MLP's output bias (the experts add their own): the dense block's
    # own where the model has no biases, else that of the block without them
    plain = dense if not arch.bias else dense_block(strategy, c, w, system, profile, arch.mla, bias=False)
    output_dropout = tuple(x for x in plain[:mlp] if x.name == OUTPUT_DROPOUT)
    copies = load * b * rows * width  # elements of the routed copies each GPU sends and receives
    share, cross = exchange_shares(profile, w, n_e, x_e)  # what the exchange carries, what crosses domains
    volume = copies * share * eps
    # `Profile.ep_dispatch_fp8`: the exchanges into the experts (dispatch forward, combine backward)
    # in FP8 under a quantized precision, the others BF16
    into = volume * (1.0 - narrowed(jnp.minimum(as_float(c.precision), 1.0))) if profile.ep_dispatch_fp8 else volume
    before, after = regroup_passes(profile, per_gpu)
    if strategy == "summa":  # partial logits of the e / n1 features, allreduced over n1
        gate = L.megatron_linear("gate", b, rows, e, w.experts, c.n1, one, c.nvs1, one, eps, jnp.zeros_like(one))
    else:
        gate = L.megatron_linear("gate", b, rows, e, w.experts, one, one, one, one, eps)
    tail = dense[mlp:]
    if strategy != "summa" and profile.megatron:
        # the pre-MLP norm is a module of its own before a router (Megatron's layernorm recomputation
        # frees the copies of its output that the gate and the shared experts' fc1 keep); the shared
        # fc1 reads the tensor the gate keeps (`shared_input`)
        shared = tuple(shared_input(x, quantized(as_float(c.precision))) if x.name == "shared-fc1" else x
                       for x in shared)
        frees = gate.activation + sum((x.activation for x in shared if x.name == "shared-fc1"),
                                      jnp.zeros_like(gate.activation))
        tail = tuple(norm_module(x, frees) if x.name == "ln2" else x for x in tail)
    return (
        gate,
        L.alltoall("dispatch", into, n_e, x_e, volume_b=volume, cross=cross),
        L.regroup("permute", copies * before, eps)._replace(module="moe"),
        *experts,
        L.regroup("unpermute", copies * after, eps)._replace(module="moe"),
        L.alltoall("combine", volume, n_e, x_e, volume_b=into, cross=cross),
        *shared,
        *output_dropout,
        *tail,
    )


def block_layers(
    strategy: str, c: Candidates, w: Workload, system: System, profile: Profile, moe: bool | Arch = False
) -> tuple[L.Layer, ...]:
    """The layers of one block under `strategy` (static); `moe` (static): True or an `Arch` whose
    `moe` is set gives the MoE block; an `Arch` also says whether attention is latent (`mla`) and
    whether the linears have biases (`bias`)."""
    arch = arch_of(moe)
    if arch.moe:
        return moe_block(strategy, c, w, system, profile, arch)
    return dense_block(strategy, c, w, system, profile, arch.mla, arch.bias)


def dense_block(strategy: str, c: Candidates, w: Workload, system: System, profile: Profile,
                mla: bool = False, bias: bool = True) -> tuple[L.Layer, ...]:
    """The layers of one dense block: SUMMA's, Megatron's (`profile.megatron`) or seed 001's;
    `mla` (static): multi-head latent attention (Megatron's block only); `bias` (static): the
    linears have biases (`Arch.bias`)."""
    if mla and (strategy == "summa" or not profile.megatron):
        raise ValueError("multi-head latent attention is modelled by Megatron's block (tp1d, tp2d)")
    if strategy == "summa":
        return summa_block(c, w, system, profile, bias)
    if strategy not in ("tp1d", "tp2d"):
        raise ValueError(f"strategy {strategy!r} is not one of ('tp1d', 'tp2d', 'summa')")
    if profile.megatron:
        return megatron_block(c, w, system, profile, strategy, mla, bias)
    return context_parallel_block(c, w, system, profile, strategy, bias)


def embedding_layers(strategy: str, c: Candidates, w: Workload, system: System) -> tuple[L.Layer, ...]:
    """The input embedding on the first pipeline stage (profile switch `embeddings`).

    Megatron's vocabulary-parallel embedding: each of the n1 GPUs holds V/n1 rows (V e / n1
    weights), looks up the tokens that fall in its rows (b Lambda2 e elements written) and the
    partial embeddings are summed over the group: an allreduce, or a reduce-scatter onto the
    sequence shard under sequence parallelism. Backward scatters the gradient rows (as much
    traffic). Its weight is the logit layer's (tied embeddings).
    """
    b, eps, e = c.microbatch, system.element_size, w.hidden
    lam, _, sp = region_rows(c, w, strategy)
    x = as_float(b) * lam * as_float(e)
    weight = fdiv(w.vocab, c.n1) * as_float(e) * eps
    return (L.Layer(
        name="embedding",
        tensor=False,
        flops_f=jnp.zeros_like(x),
        flops_b=jnp.zeros_like(x),
        traffic_f=x * (2.0 * eps),
        traffic_b=x * (2.0 * eps),
        activation=jnp.zeros_like(x),
        weight=weight,
        comm_f=L.tp_reduction(x * eps, c.n1, c.nvs1, sp),
    ),)


def logit_layers(strategy: str, c: Candidates, w: Workload, system: System) -> tuple[L.Layer, ...]:
    """The final LayerNorm, the logit layer (e -> V, column-parallel over n1) and the cross-entropy
    on the last pipeline stage (profile switch `embeddings`). The logit weights are the embedding's
    (tied), counted once per stage by `embedding_layers`; here their weight is 0."""
    one = jnp.ones_like(c.n1)
    b, eps, e = c.microbatch, system.element_size, w.hidden
    lam, rows, sp = region_rows(c, w, strategy)
    local = as_float(b) * rows * as_float(e)
    norm = sp_layernorm("ln_f", c, w, lam, rows, sp, eps)
    logits = L.megatron_linear("logits", b, lam, e, w.vocab, one, c.n1, one, c.nvs1, eps, sp, local)
    ce = L.cross_entropy("cross-entropy", as_float(b) * lam * fdiv(w.vocab, c.n1), eps)
    return norm, logits._replace(weight=jnp.zeros_like(logits.weight)), ce
