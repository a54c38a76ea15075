"""Per-layer accounting: FLOPs, HBM traffic, stored activations, weights, collectives.

Seed 001 Tables I, II, A2; spec section 4.1. Every quantity is per GPU and per microbatch of b
samples. Shard sizes are floor divisions of int64 (ViT's l = 64800 floors once a split reaches 64);
products are then formed in float64, since e.g. b*l*f*e overflows int64 for ViT at large b.

Matmul FLOP convention: (r x k)(k x c) costs r c (2k - 1), except the forward SUMMA product, charged
r c 2k. FLOPs are returned in TFLOP, bytes in GB (tensor elements times `element_size`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from kernels.collectives import (
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BROADCAST,
    REDUCE,
    REDUCESCATTER,
    Collective,
)
from kernels.numerics import as_float, fdiv, recip
from kernels.params import Array

TFLOP = 1e-12  # FLOPs are counted in units of 1e12


class Layer(NamedTuple):
    """Cost record of one layer for one microbatch on one GPU.

    `tensor` selects the tensor-core or the vector peak; `panels` is the SUMMA panel count n_b for
    layers whose broadcasts are pipelined against their compute, None for plain layers.
    """

    name: str
    tensor: bool
    flops_f: Array  # TFLOP
    flops_b: Array  # TFLOP
    traffic_f: Array  # GB of HBM traffic, forward
    traffic_b: Array  # GB, backward
    activation: Array  # GB kept for the backward pass
    weight: Array  # GB of fp16 weights (the weight gradient has the same size)
    comm_f: tuple[Collective, ...] = ()
    comm_b: tuple[Collective, ...] = ()
    panels: Array | None = None
    expert: bool = False  # weights of an expert (synchronized over the expert-data-parallel group)
    selective: bool = False  # forward recomputed in backward under selective recomputation
    gemm_dim: Array | None = None  # reduction length K of the forward GEMM (efficiency curve)
    overlap_b: Array | None = None  # TFLOP of the weight-gradient GEMM, which the backward
    #                                  collectives overlap (Megatron); the rest of F_b is the input gradient
    gemm_dims_b: tuple | None = None  # reduction lengths of (input-gradient, weight-gradient) GEMMs
    fp8: Array | None = None  # the matmul's precision code (Megatron's block: 1 FP8, 2 NVFP4), else None / 0
    matmul: tuple | None = None  # (forward, backward) TFLOP of its matmuls at 2 m n k each, the
    #                              closed-form count of seed 000 Appendix B (profile compute_model
    #                              flop_count); None: no matmul (vector-unit work only)
    attention: bool = False  # part of the attention block (QKV, core, out-projection): slowed by
    #                          the profile's gamma under the flop_count model
    eff: tuple | None = None  # (forward, backward) fraction of the tensor peak its FLOPs reach, in
    #                           place of the system's compute_eff (fused attention, Megatron's block)
    hides: tuple | None = None  # (forward, backward) fractions of the layer's own busy time
    #                             max(T_c, T_m) that its collectives run under (tp1d's context-parallel
    #                             ring: the K, V exchange overlaps the attention steps); None: none
    module: str = ""  # the Megatron-core recompute module it belongs to (`kernels.params.RECOMPUTE_MODULES`)
    frees: Array | None = None  # GB of activations its module's recomputation frees on its account
    #                             (None: its own `activation`): a module keeps its input and drops
    #                             what its layers produce (`kernels.block_time.recomputes`)


def _matmul(mnk):
    """(forward, backward) TFLOP of a matmul of m n k multiply-adds: 2 m n k forward, 4 m n k
    backward (input and weight gradients), the closed-form count of seed 000 Appendix B."""
    return mnk * (2.0 * TFLOP), mnk * (4.0 * TFLOP)


def tp_reduction(volume, group, local, seq_par=None) -> tuple[Collective, ...]:
    """The collective that leaves a tensor-parallel region: a reduce-scatter of `volume` over the
    group under sequence parallelism, an allreduce without it. `seq_par` is a 0/1 array (per
    candidate) or None (always sequence parallel, seed 001); both kinds are listed with the volume
    of the other masked to 0, which costs exactly 0."""
    if seq_par is None:
        return (Collective(REDUCESCATTER, volume, group, local),)
    sp = as_float(seq_par)
    return (Collective(REDUCESCATTER, volume * sp, group, local),
            Collective(ALLREDUCE, volume * (1.0 - sp), group, local))


def megatron_linear(
    name: str,
    b,
    seq,
    din,
    dout,
    s_in,
    s_out,
    local_in,
    local_out,
    eps,
    seq_par=None,
    stored_input=None,
) -> Layer:
    """(L1) Megatron linear din -> dout, row-parallel over s_in or column-parallel over s_out.

    `seq` is the local sequence length (l, or floor(l/n2) under context parallelism). With
    D_i = floor(din/s_in), D_o = floor(dout/s_out), bL = b seq:

        F_f = bL D_o (2 D_i - 1)
        F_b = bL D_i (2 D_o - 1) + D_i D_o (2 bL - 1)          (input grad + weight grad)
        W = D_i D_o eps;  A = bL D_i eps                      (the TP-gathered input)
        M_f = (bL D_i + bL D_o) eps + W
        M_b = W + bL D_i eps + 2 bL D_o eps + W + A
        forward:  reduce-scatter of b seq dout eps over s_in  (row-parallel output)
        backward: reduce-scatter of b seq din eps over s_out  (column-parallel input grad)

    `seq_par` (0/1 array): the reductions are allreduces where it is 0 (`tp_reduction`).
    `stored_input`: elements of the input kept for backward, when not the whole local input (under
    sequence parallelism Megatron keeps the sequence shard and allgathers it again in backward,
    overlapped with the input-gradient GEMM).
    Megatron launches the backward reduction of a column-parallel linear's input gradient
    asynchronously and computes the weight gradient meanwhile: `overlap_b` is that GEMM's F_b
    share, D_i D_o (2 bL - 1), which hides as much of the backward collective under Megatron's
    block (`kernels.block_time.direction_time`).
    """
    d_i = fdiv(din, s_in)
    d_o = fdiv(dout, s_out)
    bl = as_float(b) * as_float(seq)
    weight = d_i * d_o * eps
    act = bl * d_i * eps if stored_input is None else as_float(stored_input) * eps
    return Layer(
        name=name,
        tensor=True,
        flops_f=bl * d_o * (2.0 * d_i - 1.0) * TFLOP,
        flops_b=(bl * d_i * (2.0 * d_o - 1.0) + d_i * d_o * (2.0 * bl - 1.0)) * TFLOP,
        traffic_f=(bl * d_i + bl * d_o) * eps + weight,
        traffic_b=weight + bl * d_i * eps + 2.0 * bl * d_o * eps + weight + act,
        activation=act,
        weight=weight,
        comm_f=tp_reduction(bl * as_float(dout) * eps, s_in, local_in, seq_par),
        comm_b=tp_reduction(bl * as_float(din) * eps, s_out, local_out, seq_par),
        gemm_dim=d_i,
        overlap_b=d_i * d_o * (2.0 * bl - 1.0) * TFLOP,
        gemm_dims_b=(d_o, bl),
        matmul=_matmul(bl * d_i * d_o),
    )


def summa_linear(name: str, b, seq_len, din, dout, n1, n2, nvs1, nvs2, panels, eps) -> Layer:
    """(L2) SUMMA linear din -> dout on an n2 x n1 grid (sequence over n2, features over n1).

    With L = floor(l/n2), D_o = floor(dout/n1), n_b panels:

        F_f = 2 b L D_o din                          (forward product charged r c 2k)
        F_b = b L din (2 D_o - 1) + din D_o (2 b L - 1)
        W = floor(din/n2) D_o eps;  A = b L floor(din/n1) eps
        M_f = (b L din + din D_o + n_b b L D_o) eps      (output block touched once per panel)
        M_b = 2 (din D_o + n_b b L D_o + b L din) eps
        X = b L din eps (activation panels), Y = din D_o eps (weight panels)
        forward:  broadcast X over n1, broadcast Y over n2
        backward: broadcast Y over n2, reduce X over n1, broadcast X over n1, reduce Y over n2

    The collectives are pipelined over the n_b panels (`collectives.summa_exposed`). Each panel
    step's forward GEMM reduces over din / n_b features (the efficiency curve's K); the input and
    weight gradients reduce over D_o and b L.
    """
    rows = fdiv(seq_len, n2)
    d_o = fdiv(dout, n1)
    d_in = as_float(din)
    bl = as_float(b) * rows
    nb = as_float(panels)
    x = bl * d_in * eps
    y = d_in * d_o * eps
    return Layer(
        name=name,
        tensor=True,
        flops_f=bl * d_o * d_in * (2.0 * TFLOP),
        flops_b=(bl * d_in * (2.0 * d_o - 1.0) + d_in * d_o * (2.0 * bl - 1.0)) * TFLOP,
        traffic_f=(bl * d_in + d_in * d_o + nb * bl * d_o) * eps,
        traffic_b=2.0 * (d_in * d_o + nb * bl * d_o + bl * d_in) * eps,
        activation=bl * fdiv(din, n1) * eps,
        weight=fdiv(din, n2) * d_o * eps,
        comm_f=(
            Collective(BROADCAST, x, n1, nvs1),
            Collective(BROADCAST, y, n2, nvs2),
        ),
        comm_b=(
            Collective(BROADCAST, y, n2, nvs2),
            Collective(REDUCE, x, n1, nvs1),
            Collective(BROADCAST, x, n1, nvs1),
            Collective(REDUCE, y, n2, nvs2),
        ),
        panels=nb,
        gemm_dim=d_in * recip(nb),
        overlap_b=d_in * d_o * (2.0 * bl - 1.0) * TFLOP,
        gemm_dims_b=(d_o, bl),
        matmul=_matmul(bl * d_o * d_in),
    )


def bias(name: str, b, rows, width, eps) -> Layer:
    """(L3) Bias add on a local (b, rows, width) tensor: F = b R K each way, M = (b R K + K) eps."""
    k = as_float(width)
    x = as_float(b) * as_float(rows) * k
    return Layer(
        name=name,
        tensor=False,
        flops_f=x * TFLOP,
        flops_b=x * TFLOP,
        traffic_f=(x + k) * eps,
        traffic_b=(x + k) * eps,
        activation=jnp.zeros_like(x),
        weight=k * eps,
    )


def elementwise(name: str, elements, eps, flops: tuple[float, float], traffic: tuple[float, float],
                stored: float) -> Layer:
    """A vector layer over x local elements, its costs per element: F_f, F_b = flops x; M_f, M_b =
    traffic x eps (tensor elements read and written); A = stored x eps."""
    x = as_float(elements)
    return Layer(
        name=name,
        tensor=False,
        flops_f=x * (flops[0] * TFLOP),
        flops_b=x * (flops[1] * TFLOP),
        traffic_f=x * (traffic[0] * eps),
        traffic_b=x * (traffic[1] * eps),
        activation=x * (stored * eps),
        weight=jnp.zeros_like(x),
    )


def gelu(name: str, elements, eps) -> Layer:
    """(L4) GELU on x local elements: F_f = 8x, F_b = 13x, M_f = 2x eps, M_b = 3x eps, A = x eps."""
    return elementwise(name, elements, eps, flops=(8.0, 13.0), traffic=(2.0, 3.0), stored=1.0)


def dropout(name: str, elements, eps, mask_eps) -> Layer:
    """(L5) Dropout on x local elements: F = x, M = 2x eps + x mu, A = x mu (1-byte mask)."""
    x = as_float(elements)
    traffic = 2.0 * x * eps + x * mask_eps
    return Layer(
        name=name,
        tensor=False,
        flops_f=x * TFLOP,
        flops_b=x * TFLOP,
        traffic_f=traffic,
        traffic_b=traffic,
        activation=x * mask_eps,
        weight=jnp.zeros_like(x),
    )


def layernorm(
    name: str,
    b,
    rows,
    width,
    eps,
    comm_f: tuple[Collective, ...],
    comm_b: tuple[Collective, ...],
) -> Layer:
    """(L6/L7) LayerNorm over `rows` local rows of `width` features, x = b R width:

        F_f = 9x;  F_b = 8x + 4 b R (width - 1)
        M_f = (2x + 2 b R + 2 width) eps;  M_b = (5x + 2 width) eps
        A = x eps;  W = 2 width eps (gain and shift)

    The collectives differ by variant: `sequence_sharded_layernorm` and `summa_layernorm`.
    """
    br = as_float(b) * as_float(rows)
    k = as_float(width)
    x = br * k
    return Layer(
        name=name,
        tensor=False,
        flops_f=x * (9.0 * TFLOP),
        flops_b=(8.0 * x + 4.0 * br * (k - 1.0)) * TFLOP,
        traffic_f=(2.0 * x + 2.0 * br + 2.0 * k) * eps,
        traffic_b=(5.0 * x + 2.0 * k) * eps,
        activation=x * eps,
        weight=2.0 * k * eps,
        comm_f=comm_f,
        comm_b=comm_b,
    )


def sequence_sharded_layernorm(name: str, b, rows, hidden, gathered_rows, s, local, eps) -> Layer:
    """(L6) LayerNorm on a sequence shard of `rows` rows, full hidden width.

    Forward allgathers (backward reduce-scatters) the b x gathered_rows x e tensor over the s GPUs
    of the TP group, entering (leaving) the tensor-parallel region.
    """
    vol = as_float(b) * as_float(gathered_rows) * as_float(hidden) * eps
    return layernorm(
        name,
        b,
        rows,
        hidden,
        eps,
        comm_f=(Collective(ALLGATHER, vol, s, local),),
        comm_b=(Collective(REDUCESCATTER, vol, s, local),),
    )


def summa_layernorm(name: str, b, seq_len, hidden, n1, n2, nvs1, eps, shard_from_seq_len: bool) -> Layer:
    """(L7) LayerNorm on a SUMMA block of floor(l/n2) rows by floor(e/n1) features.

    Only the row statistics travel: forward allreduce of 2 b floor(l/n2) elements over n1 (mean
    and variance), backward allreduce of floor(2e/n1) + floor(2 b l/n2) elements.
    `shard_from_seq_len` reproduces the reference, whose feature shard is floor(l/n1).
    """
    rows = fdiv(seq_len, n2)
    width = fdiv(seq_len if shard_from_seq_len else hidden, n1)
    fwd = 2.0 * as_float(b) * as_float(rows) * eps
    bwd = (fdiv(2.0 * hidden, n1) + fdiv(2.0 * b * seq_len, n2)) * eps
    return layernorm(
        name,
        b,
        rows,
        width,
        eps,
        comm_f=(Collective(ALLREDUCE, fwd, n1, nvs1),),
        comm_b=(Collective(ALLREDUCE, bwd, n1, nvs1),),
    )


def flash_attention(name: str, b, heads, q_rows, seq_len, head_dim, rho, n2, nvs2, eps, v_dim=None) -> Layer:
    """(L8) Fused flash attention with recompute, H local heads, L_q local query rows, keys and
    values over the full length l, head dimension q of queries and keys, u of values (`v_dim`;
    None: u = q, seed 001's layer; multi-head latent attention has q = 192, u = 128).

    rho = matrix / vector peak: softmax and dropout FLOPs are scaled by rho so that, timed at the
    tensor-core rate, they cost what they would at the vector rate. With P = b H L_q l:

        logits  Lg = P (2q - 1);  softmax S = rho (2P + b H L_q (l - 1));  dropout D = rho P
        F_f = Lg + S + D + b H L_q u (2l - 1)
        F_b = b H L_q q (2l - 1) + b H l q (2 L_q - 1) + rho (3P + b H L_q (l - 1)) + D
              + b H L_q l (2u - 1) + b H l u (2 L_q - 1) + (Lg + S + D)     (dQ, dK, softmax, dropout,
              dP, dV, recompute)
        A = (2 b H L_q (q + u) + 2 b H L_q) eps      (Q, K, V, output; RNG state and softmax statistics)
        M_f = (b H L_q (q + u) + b H l (q + u) + b H L_q) eps;  M_b = (b H l (q + u) + b H L_q (q + u)) eps + A

    Under context parallelism (n2 > 1) K and V (G = b H l (q + u) eps) are allgathered over n2
    forward, allgathered and their gradients reduce-scattered backward. With n2 = 1, L_q = l this is
    the 1D layer exactly.
    """
    bh = as_float(b) * as_float(heads)
    lq = as_float(q_rows)
    lk = as_float(seq_len)
    q = as_float(head_dim)
    u = q if v_dim is None else as_float(v_dim)
    qu = q + u
    p = bh * lq * lk
    logits = p * (2.0 * q - 1.0)
    softmax = rho * (2.0 * p + bh * lq * (lk - 1.0))
    drop = rho * p
    attend = bh * lq * u * (2.0 * lk - 1.0)
    q_grad = bh * lq * q * (2.0 * lk - 1.0)
    k_grad = bh * lk * q * (2.0 * lq - 1.0)
    v_grad = bh * lk * u * (2.0 * lq - 1.0)
    flops_f = logits + softmax + drop + attend
    flops_b = (
        q_grad
        + k_grad
        + rho * (3.0 * p + bh * lq * (lk - 1.0))
        + drop
        + bh * lq * lk * (2.0 * u - 1.0)
        + v_grad
        + (logits + softmax + drop)
    )
    act = (2.0 * bh * lq * qu + 2.0 * bh * lq) * eps
    kv = bh * lk * qu * eps
    return Layer(
        name=name,
        tensor=True,
        flops_f=flops_f * TFLOP,
        flops_b=flops_b * TFLOP,
        traffic_f=(bh * lq * qu + bh * lk * qu + bh * lq) * eps,
        traffic_b=(bh * lk * qu + bh * lq * qu) * eps + act,
        activation=act,
        weight=jnp.zeros_like(act),
        comm_f=(Collective(ALLGATHER, kv, n2, nvs2),),
        comm_b=(Collective(ALLGATHER, kv, n2, nvs2), Collective(REDUCESCATTER, kv, n2, nvs2)),
        # Q K^T and P V forward; Q K^T recomputed, dQ, dK (over q) and dP, dV (over u) backward
        matmul=(p * (2.0 * qu) * TFLOP, p * (6.0 * q + 4.0 * u) * TFLOP),
        attention=True,
    )


def alltoall(name: str, volume, group, local, volume_b=None, cross=1.0) -> Layer:
    """Token exchange of an MoE block (dispatch to the experts, or combine back): every GPU of the
    expert-parallel group sends `volume` GB in all forward, and `volume_b` (None: as much) backward
    (the gradients of the tokens); `cross` < 1: deduplicated per destination domain
    (`Collective.cross`). No FLOPs; the send and receive buffers are read and written once each way
    (traffic 2 V). Seed 002 section III-C."""
    v = as_float(volume)
    v_b = v if volume_b is None else as_float(volume_b) + jnp.zeros_like(v)
    return Layer(
        name=name,
        tensor=False,
        flops_f=jnp.zeros_like(v),
        flops_b=jnp.zeros_like(v),
        traffic_f=2.0 * v,
        traffic_b=2.0 * v_b,
        activation=jnp.zeros_like(v),
        weight=jnp.zeros_like(v),
        comm_f=(Collective(ALLTOALL, v, group, local, cross=cross),),
        comm_b=(Collective(ALLTOALL, v_b, group, local, cross=cross),),
    )


def regroup(name: str, elements, eps) -> Layer:
    """One local reorder of an MoE block's x routed token-copy elements (Megatron-core's token
    dispatchers, `moe_utils.permute` / `unpermute`, fused or not): `permute` gathers the received
    copies into expert order before the experts, `unpermute` takes them out of it after (weighting
    each copy by its router probability); every element is read once and written once, forward and
    backward alike: M_f = M_b = 2x eps. No FLOPs, no stored activation."""
    return elementwise(name, elements, eps, flops=(0.0, 0.0), traffic=(2.0, 2.0), stored=0.0)


def attention_scores(name: str, b, heads, q_rows, seq_len, head_dim, eps, comm_f=(), comm_b=()) -> Layer:
    """Scores S = Q K^T of the attention core, materialized in HBM (Megatron-LM without fused
    attention). H local heads, L_q query rows, keys over l, head dimension q, P = b H L_q l:

        F_f = P (2q - 1);  F_b = b H L_q q (2l - 1) + b H l q (2 L_q - 1)        (dQ, dK)
        M_f = (b H L_q q + b H l q + P) eps;  M_b = (P + b H L_q q + b H l q) eps + (b H L_q q + b H l q) eps

    Recomputed under selective recomputation.
    """
    bh = as_float(b) * as_float(heads)
    lq, lk, q = as_float(q_rows), as_float(seq_len), as_float(head_dim)
    p = bh * lq * lk
    qk = bh * lq * q + bh * lk * q
    return Layer(
        name=name,
        tensor=True,
        flops_f=p * (2.0 * q - 1.0) * TFLOP,
        flops_b=(bh * lq * q * (2.0 * lk - 1.0) + bh * lk * q * (2.0 * lq - 1.0)) * TFLOP,
        traffic_f=(qk + p) * eps,
        traffic_b=(p + qk + qk) * eps,
        activation=jnp.zeros_like(p),
        weight=jnp.zeros_like(p),
        comm_f=comm_f,
        comm_b=comm_b,
        selective=True,
        matmul=_matmul(p * q),
        attention=True,
    )


def attention_softmax(name: str, b, heads, q_rows, seq_len, eps, mask_eps, dropout=1.0) -> Layer:
    """Scale, causal mask, softmax and dropout of the materialized scores, P = b H L_q l elements:

        F_f = 5P (softmax 4P, dropout P);  F_b = 5P
        M_f = (4P) eps + P mu   (softmax reads and writes P, dropout reads P, writes P and the mask)
        M_b = (5P) eps + P mu
        A = P (2 eps + mu)      (softmax output, dropout output, mask: Korthikanti's 5 a s^2 b)

    `dropout` 0 (the model's `Workload.dropout`): no dropout pass, its P eps read and written each
    way and its output not kept, and `mask_eps` is then 0 too (`kernels.attention.mask_size`).
    Recomputed (and its activation not stored) under selective recomputation.
    """
    p = as_float(b) * as_float(heads) * as_float(q_rows) * as_float(seq_len)
    d = as_float(dropout)
    return Layer(
        name=name,
        tensor=False,
        flops_f=p * ((4.0 + d) * TFLOP),
        flops_b=p * ((4.0 + d) * TFLOP),
        traffic_f=p * ((2.0 + 2.0 * d) * eps) + p * mask_eps,
        traffic_b=p * ((3.0 + 2.0 * d) * eps) + p * mask_eps,
        activation=p * ((1.0 + d) * eps) + p * mask_eps,
        weight=jnp.zeros_like(p),
        selective=True,
        attention=True,
    )


def attention_values(name: str, b, heads, q_rows, seq_len, head_dim, eps) -> Layer:
    """O = softmax(S) V of the materialized attention core, P = b H L_q l:

        F_f = b H L_q q (2l - 1);  F_b = P (2q - 1) + b H l q (2 L_q - 1)         (dP, dV)
        M_f = (P + b H l q + b H L_q q) eps;  M_b = (b H L_q q + P + b H l q + P + b H l q) eps
    Recomputed with the scores under selective recomputation (Megatron checkpoints the whole
    attention core; its inputs Q, K, V are kept by the QKV layer, `kernels.blocks.megatron_block`).
    """
    bh = as_float(b) * as_float(heads)
    lq, lk, q = as_float(q_rows), as_float(seq_len), as_float(head_dim)
    p = bh * lq * lk
    return Layer(
        name=name,
        tensor=True,
        flops_f=bh * lq * q * (2.0 * lk - 1.0) * TFLOP,
        flops_b=(p * (2.0 * q - 1.0) + bh * lk * q * (2.0 * lq - 1.0)) * TFLOP,
        traffic_f=(p + bh * lk * q + bh * lq * q) * eps,
        traffic_b=(bh * lq * q + p + bh * lk * q + p + bh * lk * q) * eps,
        activation=jnp.zeros_like(p),
        weight=jnp.zeros_like(p),
        selective=True,
        matmul=_matmul(p * q),
        attention=True,
    )


def cross_entropy(name: str, elements, eps) -> Layer:
    """Softmax cross-entropy over the local vocabulary shard of the logits, x = b l V / n1 elements,
    computed in fp32 (2 eps per element) as Megatron's vocabulary-parallel loss does:

        F_f = 5x (max, exp, sum, log, pick);  F_b = 2x (softmax minus one-hot)
        M_f = (x eps + 2x eps) (read the logits, write the fp32 softmax kept for backward)
        M_b = (2x eps + x eps) (read it, write the logit gradient);  A = 2x eps

    The row maximum and sum are allreduced over the tensor-parallel group (b l scalars each, small
    enough to leave out).
    """
    return elementwise(name, elements, eps, flops=(5.0, 2.0), traffic=(3.0, 3.0), stored=2.0)


def fp8_stored(layer: Layer, elements, eps) -> Layer:
    """`layer` keeping its `elements` stored inputs as 1-byte FP8 copies for the backward
    (`Profile.act_fp8_store`: Megatron-core's --activation-func-fp8-input-store), half their 2-byte
    eps: a cast pass forward reads them at 2 bytes and writes the copy at 1 (1.5 eps an element),
    and one before the backward casts the copy back (as much)."""
    cast = elements * (1.5 * eps)
    return layer._replace(activation=layer.activation - elements * (0.5 * eps), traffic_f=layer.traffic_f + cast,
                          traffic_b=layer.traffic_b + cast)


def swiglu(name: str, elements, eps) -> Layer:
    """(L4') SwiGLU on x local output elements: silu(gate) * up, from the 2x elements of the fused
    gate/up projection. F_f = 5x (sigmoid ~3, two products); F_b = 8x; M_f = (2x + x) eps;
    M_b = (2x + x + 2x) eps (read both inputs and the output gradient, write both input gradients);
    A = 2x eps (both inputs)."""
    return elementwise(name, elements, eps, flops=(5.0, 8.0), traffic=(3.0, 5.0), stored=2.0)
