"""The attention of Megatron's block: the projections (grouped-query or multi-head latent
attention), the core (fused flash attention or three materialized layers) over a causal mask, and
context parallelism's exchange of K and V."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from kernels import layers as L
from kernels.collectives import ALLGATHER, P2P, REDUCESCATTER, Collective
from kernels.numerics import as_float, fdiv, recip
from kernels.params import CP_P2P, Array, Candidates, Profile, System, Workload


def rho(system: System) -> Array:
    """Tensor-core over vector peak (unscaled), the weight of vector FLOPs inside flash attention."""
    return system.matrix_flops * recip(system.vector_flops)


def as_attention(layer: L.Layer) -> L.Layer:
    """A projection of the attention block (QKV, out-projection): with the attention core, what
    the flop_count compute model slows by gamma (seed 000 Appendix B's M_Attn)."""
    return layer._replace(attention=True)


def causal(core: L.Layer, w: Workload, shards=None, cp=None) -> L.Layer:
    """Fused attention over a causal mask: the kernel skips the masked upper triangle.

    Balanced (`shards` None: one sequence, or tp1d's context parallelism, whose 2 cp chunks are
    dealt so that rank i holds chunks i and 2 cp - 1 - i): each GPU's L_q = l / cp query rows keep
    (l + 1) / (2 l) of their L_q l scores, 1/cp of the causal total l (l + 1) / 2, on every rank.

    Contiguous shards (`shards` = n2: seed 001's tp2d and SUMMA, Lambda2 = floor(l / n2) rows each):
    the last shard is the busiest and sets the pace; its rows (n2 - 1) Lambda2 ... n2 Lambda2 - 1 keep
    ((n2 - 1) Lambda2 + (Lambda2 + 1) / 2) / l of their Lambda2 l scores (2 - 1/n2 times the balanced
    share as l grows). n2 = 1 is the balanced case exactly.

    A sliding window (`Workload.window` W, on the `window_share` of the blocks, the average block taken):
    query i sees keys max(0, i - W + 1) ... i, min(i + 1, W) of them, and the kernel skips the rest, so
    rows 0 ... n - 1 keep F(n) = sum min(i + 1, W) = n (n + 1) / 2 up to n = W, then W (W + 1) / 2 +
    (n - W) W. One sequence: F(l) / l^2 of its scores. The last contiguous shard: (F(n2 Lambda2) -
    F((n2 - 1) Lambda2)) / (Lambda2 l), still the busiest (every row keeps at least as many as the one
    before). tp1d's `cp` chunks of c = l / (2 cp) rows, dealt as above, balance causal work but not a
    window's: a chunk's kept pairs are concave in its place, so the rank holding the two middle chunks
    (cp - 1 and cp) is the busiest, F(l / 2 + c) - F(l / 2 - c) of its 2 c l scores (cp = 1: F(l)).
    Under context parallelism the K, V exchange stays the whole sequence's (`context_exchange`), where a
    window needs the W - 1 keys before each chunk only. Causal attention is the window W = l: F(l) / l^2 =
    (l + 1) / (2 l), and the shard and chunk forms above give the causal ones, so one count serves both."""
    l = as_float(w.seq_len)

    def busiest(win):  # the busiest GPU's share of its scores when a query sees at most `win` keys (l: causal)
        kept = lambda n: jnp.where(n <= win, 0.5 * n * (n + 1.0), 0.5 * win * (win + 1.0) + (n - win) * win)  # noqa: E731
        if cp is not None:
            chunk = 0.5 * l * recip(as_float(cp))  # c; a rank holds 2 c rows
            return (kept(0.5 * l + chunk) - kept(0.5 * l - chunk)) * recip(2.0 * chunk * l)
        if shards is not None:
            lam = fdiv(l, shards)
            return jnp.where(shards > 1.0, (kept(shards * lam) - kept((shards - 1.0) * lam)) * recip(lam * l),
                             kept(l) * recip(l * l))
        return kept(l) * recip(l * l)

    keep = busiest(l)
    windowed = busiest(jnp.where(w.window > 0.0, jnp.minimum(as_float(w.window), l), l))
    share = jnp.where(w.window > 0.0, w.window_share, 0.0)
    keep = keep + share * (windowed - keep)
    keep = jnp.where(w.causal > 0.0, keep, 1.0)
    matmul = None if core.matmul is None else (core.matmul[0] * keep, core.matmul[1] * keep)
    return core._replace(flops_f=core.flops_f * keep, flops_b=core.flops_b * keep, matmul=matmul)


def kv_heads_of(w: Workload):
    """Key/value heads of the model: `kv_heads` (grouped-query attention), or every head."""
    return jnp.where(w.kv_heads > 0.0, w.kv_heads, w.heads)


def head_dim_of(w: Workload):
    """Width q of each attention head: `head_dim`, or hidden / heads (0). The heads' h q features
    need not be the hidden size e (Qwen3: 32 x 128 over e = 2048)."""
    return jnp.where(w.head_dim > 0.0, w.head_dim, fdiv(w.hidden, w.heads))


def context_exchange(c: Candidates, w: Workload, system: System, profile: Profile, strategy: str, kv_width):
    """(forward collectives, backward collectives, hides) of the attention core's K, V exchange
    over the sequence dimension n2 (tp2d, summa: the 2D grid's; tp1d: Megatron's cp).

    `kv_width`: K and V elements per token on this GPU, 2 (kv_heads / n1) q (latent attention:
    (h / n1)(q_k + q_v)). tp2d, and tp1d under `profile.cp_comm` = "allgather" (Llama 3, Dubey et
    al. 2024 section 3.3.2): K and V of the whole sequence, G = b kv_width l eps, all-gathered over n2
    before attention; backward all-gathers them again and reduce-scatters dK, dV; nothing hidden.

    tp1d under "p2p" (Megatron-LM with Transformer Engine's default `cp_comm_type`): a ring over
    the cp = n2 GPUs. Each step sends this GPU's current chunk of K and V,

        C = b kv_width (l / cp) eps,

    to the next rank while attention runs on it: forward cp - 1 steps of C, overlapping cp - 1 of
    the cp attention steps (hides (cp - 1) / cp of the core's time); backward cp steps carrying
    K, V and the accumulated dK, dV (the first step K, V only, the last dK, dV only: 2 (cp - 1) C
    in all, 2 (cp - 1) C / cp per step), overlapping all cp backward steps. Exposed: the excess of
    the exchange over the attention it overlaps. A step's pace is its slowest hop: NVLink when the
    whole ring is in one domain (nvs2 = cp), the NIC otherwise. cp = 1 costs exactly 0.

    tp1d's collectives are marked `Collective.context` (traffic type CP, `kernels.traffic`).
    """
    b, eps = as_float(c.microbatch), system.element_size
    n2, nvs2 = c.n2, c.nvs2
    if strategy == "tp1d" and profile.cp_comm == CP_P2P:
        chunk = b * kv_width * fdiv(w.seq_len, n2) * eps
        pair = jnp.minimum(n2, 2.0)  # a point-to-point, or none at cp = 1
        hop = jnp.where(nvs2 == n2, pair, 1.0)  # 2: inside one domain; 1: across domains
        per_step_b = chunk * (2.0 * (n2 - 1.0)) * recip(n2)
        return ((Collective(P2P, chunk, pair, hop, n2 - 1.0, context=True),),
                (Collective(P2P, per_step_b, pair, hop, n2, context=True),),
                ((n2 - 1.0) * recip(n2), jnp.ones_like(n2)))
    kv = b * kv_width * as_float(w.seq_len) * eps  # K and V, gathered over n2
    cp = strategy == "tp1d"  # tp1d's n2 is context parallelism; tp2d's and SUMMA's, tensor parallelism
    return ((Collective(ALLGATHER, kv, n2, nvs2, context=cp),),
            (Collective(ALLGATHER, kv, n2, nvs2, context=cp), Collective(REDUCESCATTER, kv, n2, nvs2, context=cp)),
            None)


class AttentionInputs(NamedTuple):
    """What Megatron's attention layers take from its projections: the projection layers (the last
    keeps Q, K, V for a materialized core), the out-projection's input
    features, this GPU's query and key/value elements, the K and V elements per token exchanged by
    context parallelism, the projections' output features per GPU, and the head dimensions (v_dim
    None: the query's)."""

    projections: tuple
    out_in: Array
    q_elems: Array
    kv_elems: Array
    kv_width: Array
    proj_out: Array
    qk_dim: Array
    v_dim: Array | None
    heads: Array


def attention_inputs(c: Candidates, w: Workload, system: System, strategy: str, lam, rows, sp, local,
                      mla: bool) -> AttentionInputs:
    """The QKV projection (grouped-query attention) or, with `mla`, the latent attention's down- and
    up-projections (`megatron_block`). Grouped-query attention with heads of width q
    (`head_dim_of`): QKV e -> (h + 2 h_kv) q, column-parallel over n1; the out-projection's input
    is the h q features of the heads (e when q = e / h)."""
    one = jnp.ones_like(c.n1)
    n1, nvs1 = c.n1, c.nvs1
    b, eps = c.microbatch, system.element_size
    e, h = w.hidden, w.heads
    heads = fdiv(h, n1)

    if mla:
        qk_dim, v_dim = w.qk_nope_head_dim + w.qk_rope_head_dim, w.v_head_dim
        br = as_float(b) * rows  # the region's rows: the down-projections' tokens
        projections = (
            L.megatron_linear("q-down", b, rows, e, w.q_lora_rank, one, one, one, one, eps),
            L.megatron_linear("kv-down", b, rows, e, w.kv_lora_rank + w.qk_rope_head_dim, one, one, one, one, eps),
            # Megatron-core's mla_up_proj recomputation keeps the latents and frees the up-projections'
            # outputs, the full queries, keys and values the attention core keeps: the keys whole, their
            # rotary part (one per token, repeated into every head) with them
            L.megatron_linear("q-up", b, lam, w.q_lora_rank, h * qk_dim, one, n1, one, nvs1, eps, sp,
                              br * w.q_lora_rank)._replace(
                module="mla_up_proj", frees=as_float(b) * lam * heads * qk_dim * eps),
            L.megatron_linear("kv-up", b, lam, w.kv_lora_rank, h * (w.qk_nope_head_dim + v_dim), one, n1, one,
                              nvs1, eps, sp, br * w.kv_lora_rank)._replace(
                module="mla_up_proj", frees=as_float(b) * lam * heads * (qk_dim + v_dim) * eps),
        )
        return AttentionInputs(
            projections=tuple(as_attention(x) for x in projections),
            out_in=h * v_dim,  # the out-projection's input features
            q_elems=as_float(b) * heads * lam * qk_dim,
            kv_elems=as_float(b) * heads * lam * (qk_dim + v_dim),  # this GPU's K and V rows
            kv_width=heads * (qk_dim + v_dim),  # K and V elements per token on this GPU
            proj_out=as_float(h * qk_dim + h * (w.qk_nope_head_dim + v_dim)) * recip(n1),  # the up-projections'
            qk_dim=qk_dim, v_dim=v_dim, heads=heads)
    head_dim = head_dim_of(w)
    q_width = jnp.where(w.head_dim > 0.0, as_float(h) * head_dim, as_float(e))  # the heads' features, h q
    kv_all = kv_heads_of(w)  # grouped-query attention: kv heads
    kv_heads = fdiv(kv_all, n1)
    qkv_out = q_width + 2.0 * kv_all * head_dim
    return AttentionInputs(
        projections=(as_attention(L.megatron_linear("qkv", b, lam, e, qkv_out, one, n1, one, nvs1, eps, sp, local)),),
        out_in=q_width,
        q_elems=as_float(b) * heads * lam * head_dim,
        kv_elems=2.0 * as_float(b) * kv_heads * lam * head_dim,  # this GPU's K and V rows
        kv_width=2.0 * kv_heads * head_dim,  # K and V elements per token on this GPU
        proj_out=fdiv(qkv_out, n1),
        qk_dim=head_dim, v_dim=None, heads=heads)


def kernel_kv_heads(w: Workload, n1, profile: Profile):
    """K and V heads a GPU's attention kernel takes: its kv_heads / n1, or with grouped-query attention's
    K and V repeated to every query head ahead of the kernel (`Profile.kv_repeat`) its h / n1."""
    return fdiv(w.heads if profile.kv_repeat else kv_heads_of(w), n1)


def rotated_features(w: Workload, n1, head_dim):
    """Query and key features a GPU's rotary embeddings turn per token, (h + kv_heads) / n1 q: the
    keys before any repetition (`kernels.eager`)."""
    return (fdiv(w.heads, n1) + fdiv(kv_heads_of(w), n1)) * head_dim


def repeated_kv(att: AttentionInputs, w: Workload, n1, profile: Profile, mla: bool, rows) -> AttentionInputs:
    """`att` with the K and V the kernel takes (`kernel_kv_heads`) on its `rows` (b L) rows: under
    `Profile.kv_repeat` it keeps, and context parallelism exchanges, every query head's K and V.
    Latent attention already has a K and V per query head; the projections are unchanged either way."""
    if not profile.kv_repeat or mla:
        return att
    width = 2.0 * kernel_kv_heads(w, n1, profile) * att.qk_dim
    return att._replace(kv_elems=rows * width, kv_width=width)


def mask_size(system: System, w: Workload) -> Array:
    """GB a dropout keeps per element for backward: the system's 1-byte mask where the model's
    dropout is on (`Workload.dropout` 1), nothing where it is 0 (a dropout of probability 0 returns
    its input: no mask is drawn or kept; today's recipes train so)."""
    return system.mask_element_size * as_float(w.dropout)


def width_factor(profile: Profile, qk_dim, v_dim) -> Array:
    """The fused kernel's efficiency at the head's mean width d = (qk + v) / 2 as a multiple of its
    value at 128 (`Profile.attention_narrow` at 64, `attention_wide` at 192; docs/gpu.md run 20 on an
    H100): linear between the measured widths, flat outside them."""
    d = 0.5 * (as_float(qk_dim) + as_float(v_dim))
    below = jnp.clip((128.0 - d) / 64.0, 0.0, 1.0)
    above = jnp.clip((d - 128.0) / 64.0, 0.0, 1.0)
    return 1.0 + (profile.attention_narrow - 1.0) * below + (profile.attention_wide - 1.0) * above


#: Query rows a thread block of the fused kernels takes (cuDNN's and FlashAttention-2's tile at head width 128).
QUERY_TILE = 128.0
#: The tiles of the configuration `Profile.attention_eff` was measured at (docs/gpu.md run 17: one sequence of
#: 8,192 tokens, 32 heads: 64 tiles a head; two of 4,096 give the same count).
REFERENCE_TILES = 2048.0


def tile_factor(profile: Profile, b, heads, rows) -> Array:
    """The fused kernel's efficiency at its parallel work as a multiple of its value at the measured
    reference: with n = b x heads x ceil(rows / 128) thread blocks (a microbatch's local heads and query
    tiles) and K = `Profile.attention_tiles`, (n / (n + K)) / (n_ref / (n_ref + K)), at most 1 (a kernel
    with fewer blocks fills the GPU's SMs for a smaller share of its time: its last wave and the causal
    tiles' unequal lengths). K reproduces run 17's measured 8-head / 32-head rate on 8,192 tokens (cuDNN
    0.783, FlashAttention-2 0.795); run 20's problems (4,096 blocks and more) ran at equal rates whatever
    their heads, as the cap says. 0: no such factor."""
    if profile.attention_tiles <= 0.0:
        return jnp.asarray(1.0)
    n = as_float(b) * heads * jnp.ceil(as_float(rows) / QUERY_TILE)
    k = profile.attention_tiles
    return jnp.minimum(n / (n + k) * ((REFERENCE_TILES + k) / REFERENCE_TILES), 1.0)


def at_kernel_eff(fused: L.Layer, profile: Profile, qk_dim, v_dim, b, heads, rows) -> L.Layer:
    """A fused attention layer at the kernel's own efficiency (`Profile.attention_eff` of the peak on
    its matmul FLOPs, forward and backward, at the head's width, `width_factor`, and at its b x heads x
    rows work, `tile_factor`), where the profile gives one; else the GEMMs' curve."""
    if profile.attention_eff <= 0.0:
        return fused
    a = (profile.attention_eff * width_factor(profile, qk_dim, qk_dim if v_dim is None else v_dim)
         * tile_factor(profile, b, heads, rows))
    return fused._replace(eff=(a * fused.flops_f * recip(fused.matmul[0]), a * fused.flops_b * recip(fused.matmul[1])))


def softmax_statistics(b, heads, rows, eps) -> Array:
    """GB of a fused attention kernel's fp32 softmax statistics (one log-sum-exp per query row and
    head, 2 eps bytes each), which it keeps for its backward."""
    return as_float(b) * heads * rows * (2.0 * eps)


def attention_core(att: AttentionInputs, c: Candidates, w: Workload, system: System, profile: Profile,
                    strategy: str, lam) -> tuple[L.Layer, tuple]:
    """(the projection layer that keeps Q, K, V, the core's layers): fused flash attention at its
    kernels' efficiency, or the three materialized layers (scores, softmax + dropout, values),
    with context parallelism's K and V exchange (`context_exchange`)."""
    b, eps, mu = c.microbatch, system.element_size, mask_size(system, w)
    l, heads, qk_dim, v_dim = w.seq_len, att.heads, att.qk_dim, att.v_dim
    qkv = att.projections[-1]  # the projection whose layer keeps Q, K, V for a materialized core
    kv_comm_f, kv_comm_b, hides = context_exchange(c, w, system, profile, strategy, att.kv_width)
    # tp1d's cp chunks are load-balanced; tp2d's contiguous shards leave the last one the busiest
    shards, cp = (None, c.n2) if strategy == "tp1d" else (c.n2, None)
    if profile.flash_attention:
        fused = at_kernel_eff(causal(L.flash_attention("fusedla", b, heads, lam, l, qk_dim, rho(system), c.n2,
                                                       c.nvs2, eps, v_dim), w, shards, cp), profile, qk_dim, v_dim,
                              b, heads, lam)
        stats = softmax_statistics(b, heads, lam, eps)
        core = (fused._replace(
            # Q, K, V and the statistics; the output is kept by vproj as its input
            activation=(att.q_elems + att.kv_elems) * eps + stats,
            comm_f=kv_comm_f, comm_b=kv_comm_b, hides=hides,
            # Megatron-core checkpoints the core under core_attn whatever its kernel: its forward (and
            # its context-parallel exchange) runs again in backward; the checkpoint keeps Q, K, V, its
            # inputs, and drops the statistics (`blocks.attention_output`'s copy of the output too)
            selective=True, frees=stats),)
        return qkv, core
    # Q, K, V: the inputs of the checkpointed core, kept (on the QKV layer's account)
    qkv = qkv._replace(activation=qkv.activation + (att.q_elems + att.kv_elems) * eps)
    core = (
        L.attention_scores("attn-scores", b, heads, lam, l, qk_dim, eps, comm_f=kv_comm_f,
                           comm_b=kv_comm_b)._replace(hides=hides),
        L.attention_softmax("attn-softmax", b, heads, lam, l, eps, mu, w.dropout),
        L.attention_values("attn-values", b, heads, lam, l, qk_dim if v_dim is None else v_dim, eps),
    )
    return qkv, core
