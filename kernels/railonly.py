"""The rail-only papers' iteration-time model in their own letters: an independent closed form.

The engine computes this model as `profile=railonly` (`kernels.params.PROFILES`: switches of
`kernels.iteration.evaluate_candidates`) and never calls this module; `dse validate railonly` and
the tests evaluate both and compare them term by term. The two differ only where the engine counts
Megatron's block: its bias and LayerNorm parameters (6 h + 4 h / t per block against the 13 h / t
of S_T below) in the gradient sync and the weight memory, the logit layer's activations on the last
stage, and, under full recomputation, the recomputed forward's tensor-parallel collectives.

Seed 000 section 5 (Eq. 2-7), Appendices B and C; seed 002 section VI (Eq. 6-11). One iteration of
Megatron 1F1B training (interleaved over v model chunks) on p pipeline stages, t-way tensor (and
sequence) parallelism and d-way data parallelism; each degree splits into a factor inside an HB
domain and one across domains: p = p_h p_l, t = t_h t_l, d = d_h d_l. With m = B / (d b)
microbatches of b samples, e bytes per element, S_T = 12 h^2 + 13 h parameters per block:

    T_iter   = T_bubble + T_LS + T_sync                                               (Eq. 2)
    T_bubble = (p-1) t(b) / v                                                          (Eq. 3)
             + 2 (p_l-1) P2P_nic(D_p) + 2 p_l (p_h-1) P2P_hb(D_p)                       (Eq. 4)
    T_LS     = m t(b)                                                                  (Eq. 5)
             + 8 (l/p) m AGtime(D_t, t_h, t_l) + 2 m v P2P_*(D_p)                      (Eq. 6)
    T_sync   = 2 AGtime(D_d, d_h, d_l)                                                 (Eq. 7)

    D_t = e b h s (the allgathered activation of a block), D_p = D_t / t (a stage boundary
    message), D_d = e (l/p) S_T / t (one stage's gradients); P2P_* crosses domains when p_l > 1.

The collectives are those of `kernels.fabrics` (latency per step included; the seed adds the
propagation delay without printing it). The PTD-P mapping is rail-aligned, so rail_only and
rail_optimized give the same time; any_to_any is the ideal K = N. With p = 1 there is no pipeline
traffic at all (Eq. 6 would charge 2 m v D_p / C_F).

Microbatch compute time (Appendix B, Eq. 10): t(b) = b (M_FF + gamma M_Attn) / (F p t), with
M_FF, M_Attn the FLOPs of one sample through the whole model (forward, backward, recompute) and
gamma = 1/0.4 the attention slowdown. Per sample, per block, with V the vocabulary:

    recompute   attention block (QKV, out-projection, core)     MLP         logits (once)
    none        24 s h^2 + 12 s^2 h                               48 s h^2    6 s h V
    selective   24 s h^2 + 16 s^2 h                               48 s h^2    6 s h V
    full        32 s h^2 + 16 s^2 h                               64 s h^2    6 s h V

The selective row is Korthikanti et al. 2022 (Eq. 8) as we use it: the model FLOPs
72 B s l h^2 (1 + s/(6h) + V/(12 h l)) plus one recomputed forward of the attention core (4 B s^2 h
per block), i.e. 72 B s l h^2 (1 + 2s/(9h) + V/(12 h l)); the full row is 96 B s l h^2
(1 + s/(6h) + V/(16 h l)). M_Attn is the whole attention block (its projections included), the
reading that reproduces seed 000 Table 4.

Memory per GPU (Appendix C constraint 19, after Korthikanti et al. 2022): 16 bytes per parameter
(fp16 weights and gradients, fp32 master weights and two Adam moments) for (l/p) S_T / t block
parameters plus the V h / t embedding shard, and the activations of the first stage, which holds
p microbatches of l/p blocks: 34 s b h l / t bytes (selective recompute with sequence parallelism;
none: s b h l (34 + 5 a s / h) / t; full: 2 s b h l / t), scaled by 1 + (p-1)/(p v) when
interleaved (v > 1) and by min(m, p)/p when fewer than p microbatches are in flight.

Units: FLOPs in TFLOP, rates in TFLOP/s, volumes and memory in GB, bandwidths in GB/s, times in s.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from kernels.fabrics import RAIL_ONLY, Links, allgather_time, allreduce_time, check_fabric, p2p_time
from kernels.params import Array

TFLOP = 1e-12
GB = 1e-9

SELECTIVE = "selective"
FULL = "full"
NONE = "none"
RECOMPUTE = (SELECTIVE, FULL, NONE)

#: Attention slowdown of seed 000 Appendix B: attention runs at 40% of the GEMM rate.
GAMMA = 1.0 / 0.4

#: Bytes of weights, gradients and optimizer state per parameter (mixed-precision Adam).
STATE_BYTES = 16.0


class Parallelism(NamedTuple):
    """Candidate PTD-P configurations (int64 arrays, one element per candidate; seed 000 Table 1).

    p, t, d     pipeline, tensor (+ sequence) and data-parallel degrees
    b           microbatch size (samples)
    v           interleaved model chunks per stage (1: plain 1F1B)
    p_h, t_h, d_h
                the part of p, t, d inside one HB domain (p_l = p / p_h etc. across domains)
    """

    p: Array
    t: Array
    d: Array
    b: Array
    v: Array
    p_h: Array
    t_h: Array
    d_h: Array


class Transformer(NamedTuple):
    """GPT model shape and global batch (integers)."""

    layers: Array  # l
    hidden: Array  # h
    heads: Array  # a
    seq_len: Array  # s
    vocab: Array  # V (logit layer FLOPs, embedding memory)
    global_batch: Array  # B, samples per iteration


class Cluster(NamedTuple):
    """GPUs, HB domains and network (floats, except the integer sizes)."""

    peak_flops: Array  # F, TFLOP/s per GPU (the GEMM rate)
    c_f: Array  # GB/s per GPU inside an HB domain
    c_s: Array  # GB/s per GPU on the NIC network
    alpha_f: Array  # s per HB transfer step
    alpha_s: Array  # s per NIC transfer step
    hb_size: Array  # K, GPUs per HB domain (int)
    gpus: Array  # N, GPUs of the cluster (int)
    memory: Array = jnp.inf  # R, GB per GPU
    gamma: Array = GAMMA  # attention slowdown
    element_size: Array = 2.0 * GB  # GB per activation / weight element (fp16)

    def links(self) -> Links:
        return Links(self.c_f, self.c_s, self.alpha_f, self.alpha_s)


class IterationTime(NamedTuple):
    """Per-candidate results (s unless noted). The six time components add up to
    `iteration_time`."""

    iteration_time: Array
    bubble_compute: Array  # Eq. 3
    bubble_comm: Array  # Eq. 4
    last_stage_compute: Array  # Eq. 5
    last_stage_tp: Array  # Eq. 6, tensor-parallel allgathers and reduce-scatters
    last_stage_pp: Array  # Eq. 6, pipeline sends and receives
    sync: Array  # Eq. 7
    microbatch_time: Array  # t(b)
    microbatches: Array  # m (int)
    memory: Array  # GB per GPU
    valid: Array  # constraints 11-18 of Appendix C
    fits: Array  # constraint 19: memory <= R
    feasible: Array  # valid & fits


def _f(x) -> Array:
    return jnp.asarray(x).astype(jnp.float64)


def _check_recompute(recompute: str) -> str:
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute = {recompute!r}: must be one of {', '.join(RECOMPUTE)}")
    return recompute


def sample_flops(w: Transformer, recompute: str = SELECTIVE) -> tuple[Array, Array]:
    """(M_FF, M_Attn): TFLOP of one sample through the model, forward + backward + recompute.

    See the module docstring for the table; M_FF holds the MLPs and the logit layer, M_Attn the
    attention blocks (projections and core).
    """
    _check_recompute(recompute)
    l, h, s, voc = _f(w.layers), _f(w.hidden), _f(w.seq_len), _f(w.vocab)
    gemm_attn, gemm_mlp, core = {
        NONE: (24.0, 48.0, 12.0),
        SELECTIVE: (24.0, 48.0, 16.0),
        FULL: (32.0, 64.0, 16.0),
    }[recompute]
    m_attn = l * (gemm_attn * s * h * h + core * s * s * h)
    m_ff = l * gemm_mlp * s * h * h + 6.0 * s * h * voc
    return m_ff * TFLOP, m_attn * TFLOP


def iteration_flops(w: Transformer, recompute: str = SELECTIVE) -> Array:
    """TFLOP of one iteration (B samples) as executed: B (M_FF + M_Attn)."""
    m_ff, m_attn = sample_flops(w, recompute)
    return _f(w.global_batch) * (m_ff + m_attn)


def microbatch_time(
    c: Parallelism, w: Transformer, hw: Cluster, recompute: str = SELECTIVE
) -> Array:
    """t(b) = b (M_FF + gamma M_Attn) / (F p t): forward + backward of one microbatch on one GPU
    (seed 000 Appendix B, Eq. 10)."""
    m_ff, m_attn = sample_flops(w, recompute)
    return _f(c.b) * (m_ff + hw.gamma * m_attn) / (hw.peak_flops * _f(c.p) * _f(c.t))


def block_parameters(w: Transformer) -> Array:
    """S_T = 12 h^2 + 13 h parameters of one transformer block (QKV, projection, MLP, biases,
    two LayerNorms)."""
    h = _f(w.hidden)
    return 12.0 * h * h + 13.0 * h


def memory_per_gpu(
    c: Parallelism, w: Transformer, hw: Cluster, recompute: str = SELECTIVE
) -> Array:
    """GB per GPU of the first pipeline stage: model state and activations (module docstring)."""
    params, acts = memory_parts(c, w, hw, recompute)
    return (STATE_BYTES * params + acts) * GB


def memory_parts(
    c: Parallelism, w: Transformer, hw: Cluster, recompute: str = SELECTIVE
) -> tuple[Array, Array]:
    """(parameters held per GPU, activation bytes per GPU) of the first pipeline stage."""
    _check_recompute(recompute)
    p, t, b, v = _f(c.p), _f(c.t), _f(c.b), _f(c.v)
    l, h, a, s = _f(w.layers), _f(w.hidden), _f(w.heads), _f(w.seq_len)
    params = (l / p) * block_parameters(w) / t + _f(w.vocab) * h / t
    per_layer = {
        SELECTIVE: 34.0,
        NONE: 34.0 + 5.0 * a * s / h,
        FULL: 2.0,
    }[recompute]
    m = _f(microbatches(c, w))
    in_flight = jnp.minimum(m, p) / p
    interleave = jnp.where(v > 1.0, 1.0 + (p - 1.0) / (p * v), 1.0)
    acts = per_layer * s * b * h * l / t * interleave * in_flight
    return params, acts


def microbatches(c: Parallelism, w: Transformer) -> Array:
    """m = B / (d b) (integer; constraint 13)."""
    return jnp.asarray(w.global_batch) // jnp.maximum(jnp.asarray(c.d) * jnp.asarray(c.b), 1)


def _one(z: Array) -> Array:
    """A divisor that is never 0 (rows where it would be are invalid anyway)."""
    return jnp.maximum(z, 1)


def valid_mask(c: Parallelism, w: Transformer, hw: Cluster) -> Array:
    """Constraints 11-18 of seed 000 Appendix C, as a boolean array:

        p d t = N;  p_h t_h d_h = K;  p_h | p, t_h | t, d_h | d  (p = p_l p_h etc.)
        all degrees, v, b >= 1;  d b | B (m b = B/d, m integer)
        l / (p v), s / t, h / t, B / d integers

    plus what Megatron needs besides: t divides the heads, and m is a multiple of p when v > 1
    (the interleaved schedule). The ideal K = N is hb_size = gpus with p_h, t_h, d_h = p, t, d.
    """
    p, t, d, b, v = (jnp.asarray(z) for z in (c.p, c.t, c.d, c.b, c.v))
    ph, th, dh = (jnp.asarray(z) for z in (c.p_h, c.t_h, c.d_h))
    l, h, a, s, B = (
        jnp.asarray(z) for z in (w.layers, w.hidden, w.heads, w.seq_len, w.global_batch)
    )
    k, n = jnp.asarray(hw.hb_size), jnp.asarray(hw.gpus)
    positive = (p >= 1) & (t >= 1) & (d >= 1) & (b >= 1) & (v >= 1)
    positive &= (ph >= 1) & (th >= 1) & (dh >= 1)
    m = B // _one(d * b)
    ok = positive
    ok &= p * d * t == n
    ok &= ph * th * dh == k
    ok &= (p % _one(ph) == 0) & (t % _one(th) == 0) & (d % _one(dh) == 0)
    ok &= l % _one(p * v) == 0
    ok &= (s % _one(t) == 0) & (h % _one(t) == 0) & (a % _one(t) == 0)
    ok &= (B % _one(d) == 0) & (B % _one(d * b) == 0) & (m >= 1)
    ok &= (v == 1) | (m % _one(p) == 0)
    return ok


def iteration_time(
    c: Parallelism,
    w: Transformer,
    hw: Cluster,
    fabric: str = RAIL_ONLY,
    recompute: str = SELECTIVE,
) -> IterationTime:
    """T_iter = T_bubble + T_LS + T_sync of every candidate (seed 000 Eq. 2-7; module docstring).

    `fabric` and `recompute` are static strings. All fields of `c`, `w`, `hw` broadcast; the time
    of a row that is not `valid` is computed but meaningless.
    """
    check_fabric(fabric)
    links = hw.links()
    p, t, v = _f(c.p), _f(c.t), _f(c.v)
    ph = jnp.asarray(c.p_h)
    pl = jnp.asarray(c.p) // jnp.maximum(ph, 1)
    tl = jnp.asarray(c.t) // jnp.maximum(jnp.asarray(c.t_h), 1)
    dl = jnp.asarray(c.d) // jnp.maximum(jnp.asarray(c.d_h), 1)
    m_int = microbatches(c, w)
    m = _f(m_int)
    eps = hw.element_size

    tb = microbatch_time(c, w, hw, recompute)
    d_t = eps * _f(c.b) * _f(w.hidden) * _f(w.seq_len)
    d_p = d_t / t
    d_d = eps * (_f(w.layers) / p) * block_parameters(w) / t

    p2p_nic = p2p_time(d_p, 1, 2, links, fabric)
    p2p_hb = p2p_time(d_p, 2, 1, links, fabric)
    bubble_compute = (p - 1.0) * tb / v
    bubble_comm = 2.0 * (_f(pl) - 1.0) * p2p_nic + 2.0 * _f(pl) * (_f(ph) - 1.0) * p2p_hb

    ls_compute = m * tb
    ls_tp = 8.0 * (_f(w.layers) / p) * m * allgather_time(d_t, c.t_h, tl, links, fabric)
    boundary = jnp.where(pl > 1, p2p_nic, p2p_hb)
    ls_pp = jnp.where(jnp.asarray(c.p) > 1, 2.0 * m * v * boundary, 0.0)

    sync = allreduce_time(d_d, c.d_h, dl, links, fabric)

    total = bubble_compute + bubble_comm + ls_compute + ls_tp + ls_pp + sync
    mem = memory_per_gpu(c, w, hw, recompute)
    valid = valid_mask(c, w, hw)
    fits = mem <= hw.memory
    return IterationTime(
        iteration_time=total,
        bubble_compute=bubble_compute,
        bubble_comm=bubble_comm,
        last_stage_compute=ls_compute,
        last_stage_tp=ls_tp,
        last_stage_pp=ls_pp,
        sync=sync,
        microbatch_time=tb,
        microbatches=m_int,
        memory=mem,
        valid=valid,
        fits=fits,
        feasible=valid & fits,
    )
