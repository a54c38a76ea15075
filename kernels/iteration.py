"""Iteration assembly: layer timing, 1F1B pipeline, data parallelism, bubble, memory.

Seed 001 section III-C/D; spec sections 5 and 6. For one candidate, with L_s = d / n_p blocks per
pipeline stage and m = floor(floor(B/n_d)/b) microbatches:

    t_core   = (t_f + t_b) m L_s + t_PP                      t_f, t_b: one block, one microbatch
    t_DP     = T_AG + max(T_AG - t_f, 0)(L_s - 1) + T_RS + max(T_RS - t_b, 0)(L_s - 1)
    t_bubble = (n_p - 1) t_core / m
    t        = t_core + t_bubble + t_DP,     throughput = B / t

Memory per GPU: fp16 weights W L_s, fp16 gradients (same, unsharded), optimizer states
6 W L_s / (n_d s) (12 bytes per parameter, sharded over data parallelism and the n2
replicas: tp2d's sequence shards, tp1d's context parallelism cp), activations A L_s min(n_p, m) (the
first 1F1B stage holds n_p microbatches in flight). Feasible iff memory <= hbm_capacity. That is
ZeRO stage 1 with 2-byte gradients; the candidate's `zero` column picks the stage (`model_state`,
`data_parallel_time`: what is sharded and how often it is communicated) and
`kernels.state.StateBytes` the bytes each precision stores.

The same assembly computes the rail-only papers' model (seed 000 Eq. 2-7, profile railonly) by
switches of `kernels.params.Profile`: compute from closed-form matmul FLOPs (`compute_model`,
`gamma`, `compute_eff`), a bubble without tensor-parallel communication (`bubble_tp_comm`), one
exposed gradient allreduce (`dp_overlap`), unsharded optimizer states (ZeRO stage 0), the
slowest stage boundary in the steady state (`pipeline_slowest_link`) and the embedding and logit
FLOPs shared by all stages (`vocab_spread`). With those, T_bubble = Eq. 3 + 4 is `t_bubble`,
T_LS = Eq. 5 + 6 is `t_compute + t_tp_comm + t_pp_comm` (+ `t_ep_comm` for MoE) and T_sync = Eq. 7 is `t_dp_comm`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from kernels.blocks import (

    block_layers,

    data_parallel_group,

    embedding_layers,

    expert_data_parallel_group,

    logit_layers,

    region_rows,

)
from kernels.collectives import TWO_TIER
from kernels.numerics import as_float, fdiv, pin, recip
from kernels.params import (
    DUALPIPE,
    FLOP_COUNT,
    Arch,
    Array,
    Candidates,
    Metrics,
    Profile,
    System,
    Workload,
    arch_of,
    state_bytes,
)
from kernels.block_time import BlockCost, direction_time, layers_cost
from kernels.data_parallel import data_parallel_time, model_state, optimizer_step_time, zero_shard
from kernels.stage import (block_activation, host_wait, op_sac, pipeline_message, pipeline_p2p, recomputed,
                           split_slots, stage_candidates, stage_cost)


def to_float(c: Candidates, w: Workload) -> tuple[Candidates, Workload]:
    """Integer inputs as float64 (exact; every later floor division is `numerics.fdiv`)."""
    return Candidates(*(as_float(x) for x in c)), Workload(*(as_float(x) for x in w))


def prepare(c: Candidates, w: Workload, system: System) -> tuple[Candidates, Workload, System]:
    """Kernel entry: integers to float64, model shape and hardware pinned to the batch shape."""
    c, w = to_float(c, w)
    like = c.n1
    for x in c:
        like = like + jnp.zeros_like(x)  # the common shape of the candidate columns
    w, system = pin((w, system), jnp.zeros(jnp.broadcast_shapes(jnp.shape(like), *(jnp.shape(x) for x in system))))
    return c, w, system


def stage_counts(c: Candidates, w: Workload) -> tuple[Array, Array]:
    """(m, L_s): microbatches floor(floor(B/n_d)/b) and blocks per pipeline stage floor(d/n_p)."""
    return fdiv(fdiv(w.global_batch, c.n_d), c.microbatch), fdiv(w.depth, c.n_p)


def evaluate_candidates(  # the cost model's signature, as `block_cost`'s: one model, one set of inputs
    strategy: str,
    c: Candidates,
    w: Workload,
    system: System,
    profile: Profile,
    network: str = TWO_TIER,
    moe: bool | Arch = False,
) -> Metrics:
    """Iteration time, its breakdown, memory and feasibility of every candidate.

    `strategy`, `profile`, `network` and `moe` (the model's block shape: a bool, MoE or not, or a
    `kernels.params.Arch`) are static; every field
    of `c`, `w` and `system` may be an array, and all broadcast together. Integers are converted to
    float64 here, once (`kernels.numerics`).

    With L_s blocks on the busiest stage, m microbatches, v model chunks per stage, t_blk the
    forward + backward (+ recomputation) of one block and one microbatch, and p2p one stage
    boundary transfer, each microbatch costs a middle stage T_mid = L_s t_blk + 2 v p2p; the first
    stage adds the embedding (E), the last the logit layer and loss (H); with one stage, both:

        T_first = T_mid + E,  T_last = T_mid + H,  T_max = max(T_first, T_last)
        t_core  = m T_max                            (1F1B: the busiest stage sets the pace)
        t_bubble = ((n_p - 1) T_mid + min(E, H)) / v   (every other stage's microbatch, once;
                                                        seed 001's (n_p - 1) t_core / m without E, H)
        t = t_core + t_bubble + t_DP (+ t_opt, the optimizer step under Megatron's block)

    Under DualPipe (`Profile.pp_schedule`) the end GPUs take (T_first + T_last) / 2, the bubble is
    `dualpipe_bubble` and the memory `dualpipe_state`.

    t_DP is seed 001's data-parallel term (allgather / reduce-scatter of each block's weights,
    overlapped with the next block's compute) plus the embedding's, exposed. Memory is that of
    the first stage (n_p microbatches in flight, or m if fewer, times 1 + (n_p - 1)/(n_p v) when
    interleaved, at most m) or of the last (one microbatch, the logits), whichever is larger.

    The profile's switches for the rail-only papers' model (`kernels.params.Profile`) change
    single terms: `bubble_tp_comm` off drops the tensor-parallel communication from T_mid and E, H
    in t_bubble (seed 000 Eq. 3-4); `pipeline_slowest_link` times T_max's 2 v p2p at the slowest
    boundary (Eq. 6; the bubble keeps the mean, which over n_p - 1 boundaries is Eq. 4);
    `vocab_spread` adds (E + H) / n_p of compute to every stage instead (Eq. 10), with no
    collectives or gradient sync; `dp_overlap` off makes t_DP one allreduce of the stage's
    gradients (Eq. 7); ZeRO stage 0 (the candidate's `zero`) keeps 12 bytes per parameter of
    optimizer states on every replica (Appendix C). The ZeRO stages 0-3 set what of the model
    state is sharded and how often it is communicated (`data_parallel_time`, `model_state`).
    """
    c, w, system = prepare(c, w, system)
    if not profile.compute_eff:  # the GPUs' peak rate (the rail-only papers' F)
        system = system._replace(compute_eff=jnp.ones_like(system.compute_eff))
    if profile.fp8_rowwise:  # per-row scales: the FP8 matmuls' rate (`Profile.fp8_rowwise`)
        system = system._replace(fp8_eff=system.fp8_eff * system.fp8_rowwise_eff)
    arch = arch_of(moe)
    stages = stage_candidates(strategy, c, w, system, profile, network, arch) if arch.moe else None
    blk, blocks = stage_cost(strategy, c, w, system, profile, network, arch, stages)
    micro, _ = stage_counts(c, w)
    dual = profile.pp_schedule == DUALPIPE and profile.megatron  # DeepSeek-V3's bidirectional schedule
    work, message = _stage_work(blk, blocks, c, system, profile, network, op_sac(profile, strategy, w), dual)
    moved = None
    if profile.offload_layers and profile.megatron:
        moved, t_offload = _offload(blk, blocks, c, w, system, profile, strategy)
        work = work._replace(off=t_offload)
    vocab = _vocab_ends(strategy, c, w, system, profile, network) if profile.embeddings else None
    work, emb_weight, first_act, last_act = _vocab_shares(vocab, work, w, c, profile)
    t_mid = work.time()
    # a stage's share of fill and drain
    fill = t_mid if profile.bubble_tp_comm else work.comp + work.mem + work.pp + work.off + work.host
    work, extra = _busiest_end(vocab, work, blocks, c, w, profile, arch.split, dual)
    if profile.pipeline_slowest_link:  # the steady state waits for the slowest boundary (Eq. 6)
        work = work._replace(pp=2.0 * c.interleave * pipeline_p2p(message, c, system, profile, network, slowest=True))
    t_max = work.time()
    t_core = micro * t_max
    t_bubble = ((c.n_p - 1.0) * fill + extra) * recip(c.interleave)
    if dual:
        t_bubble = dualpipe_bubble(blk, blocks, fill, c)
    t_dp, t_opt, groups = _data_parallel(strategy, blk, blocks, emb_weight, micro, c, w, system, profile, network, arch)
    if dual:  # each GPU synchronizes the gradients of its two stages
        t_dp = t_dp * jnp.where(c.n_p > 1.0, 2.0, 1.0)
    t = t_core + t_bubble + t_dp + t_opt
    if stages is None:
        weights, grads, optimizer = _stage_state(blk, blocks, emb_weight, groups, c, w, system, profile, arch.split)
        activations = _activations(blk, blocks, micro, first_act, last_act, c, w, system, profile, strategy,
                                   arch.split, moved, dual)
    else:  # MoE: the memory of the candidate stage that holds the most, not of the slowest
        weights, grads, optimizer, activations = _largest_stage(stages, emb_weight, groups, micro, first_act,
                                                                last_act, c, w, system, profile, strategy, arch.split,
                                                                dual)
    if dual:
        weights, grads, optimizer = dualpipe_state(weights, grads, optimizer, c)
    reserved = jnp.full_like(weights, profile.memory_reserve)
    memory = weights + grads + optimizer + activations + reserved
    return Metrics(
        iteration_time=t,
        throughput=w.global_batch * recip(t),
        memory=memory,
        feasible=memory <= system.hbm_capacity,
        t_compute=micro * work.comp,
        t_memory=micro * work.mem,
        t_tp_comm=micro * jnp.maximum(work.comm - work.ep, 0.0),  # no rounding residue below zero
        t_ep_comm=micro * work.ep,
        t_dp_comm=t_dp,
        t_pp_comm=micro * work.pp,
        t_bubble=t_bubble,
        t_optimizer=t_opt,
        t_offload=micro * work.off,
        t_host=micro * work.host,
        mem_weights=weights,
        mem_grads=grads,
        mem_optimizer=optimizer,
        mem_activations=activations,
        mem_reserved=reserved,
        flops_per_gpu=micro * work.flops,
    )


class StageWork(NamedTuple):
    """One microbatch's work on the busiest stage: compute, memory and in-block communication time,
    FLOPs, the pipeline transfers of its v chunks (2 v p2p), and the expert-parallel all-to-alls
    that are part of its communication, and the exposed copies of CPU activation offloading."""

    comp: Array
    mem: Array
    comm: Array  # tensor-parallel collectives and all-to-alls
    flops: Array
    pp: Array
    ep: Array  # the all-to-alls of comm
    off: Array | float = 0.0  # exposed CPU activation offloading copies (`_offload`)
    host: Array | float = 0.0  # the blocks' wait for the host to issue them (`kernels.stage.host_wait`)

    def time(self) -> Array:
        """The stage's time per microbatch: every part but the FLOPs (the all-to-alls are in comm)."""
        return self.comp + self.mem + self.comm + self.pp + self.off + self.host


def _stage_work(blk: BlockCost, blocks: Array, c: Candidates, system: System, profile: Profile,
                network: str, sac: Array | None = None, dual: bool = False) -> tuple[StageWork, Array]:
    """The stage's blocks with their recomputation (`sac`: `kernels.stage.op_sac`), and its
    boundary transfers: (work, the message of one transfer). Under `pp_comm_overlap`, an
    interleaved transfer runs under another chunk's compute and only its excess is exposed; under
    DualPipe (`dual`) every transfer does, beside the paired chunk."""
    x_comp, x_mem, x_comm, x_flops, x_ep = recomputed(blk, c, profile, sac, blocks)
    comp = (blk.comp + x_comp) * blocks
    mem = (blk.mem + x_mem) * blocks
    comm = (blk.comm + x_comm) * blocks
    flops = (blk.flops + x_flops) * blocks
    ep = (blk.ep_comm + x_ep) * blocks
    host = host_wait(blk, blocks, comp + mem + comm, c, profile)
    message = pipeline_message(blk, c, profile)
    p2p = pipeline_p2p(message, c, system, profile, network)
    v = c.interleave
    pp = 2.0 * v * p2p
    if profile.pp_comm_overlap or dual:  # interleaved: each transfer runs under another chunk's compute
        chunk = (comp + mem + comm) * recip(2.0 * v)
        hidden = 2.0 * v * jnp.maximum(p2p - chunk, 0.0)
        pp = hidden if dual else jnp.where(v > 1.0, hidden, pp)
    return StageWork(comp, mem, comm, flops, pp, ep, host=host), message


class VocabEnds(NamedTuple):
    """The embedding (first stage, `head`) and the logit layer and loss (last stage, `tail`), with
    whether the model has a vocabulary and whether the pipeline is one stage."""

    head: BlockCost
    tail: BlockCost
    has_vocab: Array
    one_stage: Array

    def ends(self, x_head, x_tail):
        """(first stage, last stage) extras of one quantity: with one stage, both on it."""
        x_head, x_tail = self.has_vocab * x_head, self.has_vocab * x_tail
        return x_head + self.one_stage * x_tail, x_tail + self.one_stage * x_head


def _vocab_ends(strategy: str, c: Candidates, w: Workload, system: System, profile: Profile, network: str) -> VocabEnds:
    head = layers_cost(embedding_layers(strategy, c, w, system), system, profile, network)
    tail = layers_cost(logit_layers(strategy, c, w, system), system, profile, network)
    # each multi-token-prediction module computes its own logits and loss on the last stage (its
    # block is one of the stage's blocks, its eh projection 2e -> e is left out: under 1% of a block)
    tail = BlockCost(*(x * (1.0 + w.mtp) for x in tail))
    if profile.loss_fp32:  # the fp32 loss's backward transients, one loss at a time
        tail = tail._replace(activation=tail.activation + fsdp2_loss_activation(strategy, c, w, system))
    return VocabEnds(head, tail, jnp.where(w.vocab > 0.0, 1.0, 0.0), jnp.where(c.n_p == 1.0, 1.0, 0.0))


def fsdp2_loss_activation(strategy: str, c: Candidates, w: Workload, system: System) -> Array:
    """GB the loss holds under torchtitan beyond the fp32 softmax Megatron's fused loss keeps
    (`kernels.layers.cross_entropy`, 2 eps an element): torchtitan takes the cross-entropy of the
    logits cast to fp32 (`cross_entropy(pred.float(), labels)`), so at the start of the backward
    the fp32 log-probabilities saved by log-softmax, the gradient nll-loss writes for them and the
    gradient of the fp32 logits are alive at once, three fp32 tensors of the b l V / n1 local
    logits: two more than Megatron's, 4 eps an element (the two gradients once: with
    multi-token prediction the losses run their backward one after another)."""
    lam, _, _ = region_rows(c, w, strategy)
    return 4.0 * as_float(c.microbatch) * lam * fdiv(w.vocab, c.n1) * system.element_size


def _vocab_shares(vocab: VocabEnds | None, work: StageWork, w: Workload, c: Candidates,
                  profile: Profile) -> tuple[StageWork, Array, Array, Array]:
    """(work, embedding weights, first and last stage's extra activations): untied, the logit
    layer's own V e / n1 on the last stage (the same stage with one stage); under `vocab_spread`
    the vocabulary layers' work in equal shares on every stage, with no collectives."""
    if vocab is None:
        zero = jnp.zeros_like(work.comp)
        return work, zero, zero, zero
    head, tail = vocab.head, vocab.tail
    untied = 1.0 - as_float(w.tied)
    emb_weight = vocab.has_vocab * head.weight * (1.0 + untied * vocab.one_stage)
    first_act, last_act = vocab.ends(head.activation, tail.activation)
    if profile.vocab_spread:  # their work in equal shares on every stage, no collectives
        share = vocab.has_vocab * recip(c.n_p)
        work = work._replace(comp=work.comp + (head.comp + tail.comp) * share,
                             mem=work.mem + (head.mem + tail.mem) * share,
                             flops=work.flops + (head.flops + tail.flops) * share)
    return work, emb_weight, first_act, last_act


def _busiest_end(vocab: VocabEnds | None, work: StageWork, blocks: Array, c: Candidates, w: Workload,
                 profile: Profile, split: bool = False, dual: bool = False) -> tuple[StageWork, Array]:
    """The busiest stage's work and what the pipeline's fill and drain see besides the middle
    stages: (work, extra). The first stage adds the embedding E, the last the logit layer and loss
    H; where they count as layers (`split`, static: the model has the flags; `split_slots`: e, l of
    1) each end also holds e or l fewer blocks than a middle stage (t_blk one block's time), so with
    dE = E - e t_blk and dH = H - l t_blk the busiest stage is the first, the last or a middle one by
    the largest of dE, dH and 0, and the other stages add extra = dE + dH - max(dE, dH, 0) to
    (n_p - 1) T_mid: min(E, H) without the flags. Under DualPipe (`dual`) the end GPUs hold both the
    first and the last stage, half the microbatches through each: they add (dE + dH) / 2 where that
    is positive (a middle stage is otherwise the busiest), and `dualpipe_bubble` replaces extra."""
    if vocab is None or profile.vocab_spread:
        return work, jnp.zeros_like(work.comp)
    head, tail = vocab.head, vocab.tail
    if split:
        first, last_slot = split_slots(c, w)
        per_block = recip(blocks)

    def deltas(x_head, x_tail, x_stage):  # (first, last) stage minus a middle stage, of one quantity
        x_first, x_last = vocab.ends(x_head, x_tail)
        if not split:
            return x_first, x_last
        return x_first - first * x_stage * per_block, x_last - last_slot * x_stage * per_block

    d_e, d_h = deltas(head.t_f + head.t_b, tail.t_f + tail.t_b, work.comp + work.mem + work.comm + work.off)
    t_mid = work.time()
    last = (t_mid + d_h) > (t_mid + d_e)
    middle = jnp.maximum(d_e, d_h) < 0.0 if split else None  # both ends lighter than a middle stage
    if dual:  # the end GPUs' two stages against a middle one (one stage: both ends on it, dE = dH)
        middle = (d_e + d_h) < 0.0

    def busiest(x_head, x_tail, x_stage):
        x_first, x_last = deltas(x_head, x_tail, x_stage)
        pick = 0.5 * (x_first + x_last) if dual else jnp.where(last, x_last, x_first)
        return pick if middle is None else jnp.where(middle, 0.0, pick)

    if profile.bubble_tp_comm:  # fill and drain take whole stage times: the same differences
        f_e, f_h = d_e, d_h
    else:
        f_e, f_h = deltas(head.comp + head.mem, tail.comp + tail.mem, work.comp + work.mem + work.off)
    others = jnp.minimum(f_e, f_h)  # the stages other than the busiest, once each
    if split:  # a middle stage the busiest: both ends add their (negative) differences
        others = jnp.where(jnp.maximum(f_e, f_h) < 0.0, f_e + f_h, others)
    extra = (1.0 - vocab.one_stage) * vocab.has_vocab * others
    work = work._replace(comp=work.comp + busiest(head.comp, tail.comp, work.comp),
                         mem=work.mem + busiest(head.mem, tail.mem, work.mem),
                         comm=work.comm + busiest(head.comm, tail.comm, work.comm),
                         flops=work.flops + busiest(head.flops, tail.flops, work.flops))
    return work, extra


def dualpipe_bubble(blk: BlockCost, blocks: Array, stage: Array, c: Candidates) -> Array:
    """DualPipe's bubble (DeepSeek-V3 technical report Table 2): (n_p/2 - 1)(F&B + B - 3W) with
    F&B = F + B + W, one stage's microbatch `stage` = F + B + W (recomputation in B), F its forward
    and W its weight gradients, taken as the forward's compute (a GEMM's weight gradient costs its
    forward): 2 stage - F - 4 W, none without a pipeline."""
    forward = (blk.f_comp + blk.f_mem + blk.f_comm) * blocks
    wgrad = blk.f_comp * blocks
    pairs = jnp.maximum(0.5 * c.n_p - 1.0, 0.0)
    return pairs * jnp.maximum(2.0 * stage - forward - 4.0 * wgrad, 0.0)


def dualpipe_state(weights: Array, grads: Array, optimizer: Array, c: Candidates):
    """Model state under DualPipe (DeepSeek-V3 technical report Table 2): each GPU of a pipeline
    holds two stages, so twice the (largest) stage's weights and gradients; their optimizer states
    are sharded over the 2 n_d copies of each stage under ZeRO >= 1 (twice them without). Its
    activations: `_activations` (`dual`)."""
    piped = c.n_p > 1.0
    two = jnp.where(piped, 2.0, 1.0)
    sharded = jnp.where(as_float(c.zero) >= 1.0, 1.0, two)
    return weights * two, grads * two, optimizer * sharded


def _data_parallel(strategy: str, blk: BlockCost, blocks: Array, emb_weight: Array, micro: Array, c: Candidates,
                   w: Workload, system: System, profile: Profile, network: str, arch: Arch):
    """(t_DP, the optimizer step, (the data-parallel group, the experts' group)): the gradient and
    weight collectives of the stage's shared and expert weights and of the embedding
    (`data_parallel_time`), and under Megatron's block the optimizer step over each one's shard."""
    dp_group, dp_local = data_parallel_group(strategy, c)
    shared = blk.weight - blk.expert_weight
    synced_emb = jnp.zeros_like(emb_weight) if profile.vocab_spread else emb_weight  # the embedding's gradients
    e_group = e_local = None
    if arch.moe:  # expert weights: over the replicas holding the same experts, after the shared ones
        e_group, e_local = expert_data_parallel_group(c, w, strategy, profile)
    sb = state_bytes(profile)
    t_dp = data_parallel_time(c.zero, blk, shared, synced_emb, blocks, micro, as_float(c.interleave), c.n_p, dp_group,
                              dp_local, e_group, e_local, sb, system, profile, network)
    t_opt = jnp.zeros_like(t_dp)
    if profile.megatron and profile.compute_model != FLOP_COUNT:
        own = shared * blocks + emb_weight
        t_opt = optimizer_step_time(zero_shard(own, c.zero, 1, dp_group), sb, system)
        if arch.moe:
            t_opt = t_opt + optimizer_step_time(zero_shard(blk.expert_weight * blocks, c.zero, 1, e_group), sb, system)
    return t_dp, t_opt, (dp_group, e_group)


def _stage_state(blk: BlockCost, blocks: Array, emb_weight: Array, groups, c: Candidates, w: Workload,
                 system: System, profile: Profile, split: bool = False) -> tuple[Array, Array, Array]:
    """(weights, gradients, optimizer states) of the first stage (`model_state`: its blocks and the
    embedding); where the embedding takes a block's place (`split_slots`), of the first stage or a
    middle one (a block more, no embedding), whichever holds more."""
    shared = blk.weight - blk.expert_weight
    sb = state_bytes(profile)
    piped = c.n_p > 1.0
    if not (split and profile.megatron):
        return model_state(c.zero, blk, shared, emb_weight, blocks, groups[0], groups[1], sb, system, profile, piped)
    first, _ = split_slots(c, w)
    state = model_state(c.zero, blk, shared, emb_weight, blocks - first, groups[0], groups[1], sb, system, profile,
                        piped)
    middle = model_state(c.zero, blk, shared, jnp.zeros_like(emb_weight), blocks, groups[0], groups[1], sb, system,
                         profile, piped)
    heavier = (middle[0] + middle[1] + middle[2]) > (state[0] + state[1] + state[2])
    return tuple(jnp.where(heavier, m, f) for m, f in zip(middle, state))


def _largest_stage(stages, emb_weight: Array, groups, micro: Array, first_act: Array, last_act: Array,
                   c: Candidates, w: Workload, system: System, profile: Profile, strategy: str,
                   split: bool, dual: bool = False) -> tuple[Array, Array, Array, Array]:
    """(weights, gradients, optimizer states, activations) of the MoE stage candidate
    (`stage_candidates`: stage 0, the stage holding the first MoE block and the one after it)
    whose total is largest, each counted as `_stage_state` and `_activations` count the first stage
    (an upper bound for a middle one), with its own offloaded blocks. The dense-first stage and an
    all-MoE stage differ in weights (experts) and in blocks, so the one that sets the pace need not
    be the one that holds the most."""
    best = None
    for blk, n in stages:
        moved = _offloaded(n, profile)[1] if profile.offload_layers and profile.megatron else None
        parts = (*_stage_state(blk, n, emb_weight, groups, c, w, system, profile, split),
                 _activations(blk, n, micro, first_act, last_act, c, w, system, profile, strategy, split, moved,
                              dual))
        if best is None:
            best = parts
            continue
        more = sum(parts) > sum(best)
        best = tuple(jnp.where(more, x, y) for x, y in zip(parts, best))
    return best


def _offload(blk: BlockCost, blocks: Array, c: Candidates, w: Workload, system: System, profile: Profile,
             strategy: str) -> tuple[Array, Array]:
    """CPU activation offloading (`Profile.offload_layers`): (blocks whose stored activations leave
    the GPU, exposed transfer time per microbatch). k = min(offload_layers, blocks - 1) blocks move,
    one of them in transit at a time (k - 1 leave the GPU); each copy, A = the block's stored
    activations over the host link, runs beside the next block's forward and the previous one's
    backward: k (max(A/bw - t_f, 0) + max(A/bw - t_b, 0)), the iteration's `t_offload`."""
    k, moved = _offloaded(blocks, profile)
    stored, _ = block_activation(blk, c, w, system, profile, strategy, blocks)
    copy = stored * recip(system.host_bandwidth)
    exposed = k * (jnp.maximum(copy - blk.t_f, 0.0) + jnp.maximum(copy - blk.t_b, 0.0))
    return moved, exposed


def _offloaded(blocks: Array, profile: Profile) -> tuple[Array, Array]:
    """(blocks whose activations are copied to host memory, k = min(offload_layers, blocks - 1);
    blocks whose activations are off the GPU, k - 1: one copy is in transit)."""
    k = jnp.clip(jnp.minimum(as_float(profile.offload_layers), blocks - 1.0), 0.0, None)
    return k, jnp.maximum(k - 1.0, 0.0)


def _activations(blk: BlockCost, blocks: Array, micro: Array, first_act: Array, last_act: Array, c: Candidates,
                 w: Workload, system: System, profile: Profile, strategy: str, split: bool = False,
                 moved: Array | None = None, dual: bool = False) -> Array:
    """Activation memory of the first stage (n_p microbatches in flight, or m if fewer, times
    1 + (n_p - 1)/(n_p v) when interleaved, at most m: with m <= n_p the interleaved warm-up runs
    every chunk's forward before the first backward, holding all m microbatches of the whole
    stage; with the embedding's) or of the last (one microbatch, the logits), whichever is larger.
    Where the embedding and loss take blocks' places (`split_slots`), the ends hold one block fewer
    and the second stage (n_p - 1 microbatches in flight, a whole stage of blocks) may hold the most.
    `moved`: blocks whose stored activations are offloaded to host memory (`_offload`), on every
    stage. Under DualPipe (`dual`, a pipeline) an end GPU holds the first stage with n_p microbatches in
    flight and the last with one (the report's n_p + 1, Table 2), the embedding's and the logits' and
    loss's activations beside them, and one block's working memory."""
    stored, working = block_activation(blk, c, w, system, profile, strategy, blocks)
    if moved is not None:
        blocks = blocks - moved
    n_p, v = c.n_p, c.interleave
    factor = 1.0
    if profile.megatron:
        factor = jnp.where(v > 1.0, 1.0 + (n_p - 1.0) * recip(n_p * v), 1.0)

    def flight(stages):  # microbatches in flight `stages` stages from the end: never more than the m there are
        return jnp.minimum(jnp.minimum(stages, micro) * factor, micro)

    in_flight = flight(n_p)
    split = split and profile.megatron
    first_blocks = last_blocks = blocks
    if split:
        first, last = split_slots(c, w)
        first_blocks, last_blocks = blocks - first, blocks - last
    activations = stored * first_blocks * in_flight + working
    if profile.embeddings:
        activations = jnp.maximum(activations + first_act, stored * last_blocks + working + last_act)
    if split:  # the second stage: a whole stage of blocks, n_p - 1 microbatches in flight
        activations = jnp.maximum(activations, stored * blocks * flight(n_p - 1.0) + working)
    if dual:  # every GPU holds n_p + 1 of a stage's; an end's stages may hold fewer blocks (split slots)
        ends = stored * (first_blocks * in_flight + last_blocks * flight(1.0)) + working
        if profile.embeddings:
            ends = ends + first_act + last_act
        activations = jnp.where(n_p > 1.0, jnp.maximum(ends, stored * blocks * flight(n_p + 1.0) + working),
                                activations)
    return activations


def layer_table(
    strategy: str, c: Candidates, w: Workload, system: System, profile: Profile, network: str = TWO_TIER,
    moe: bool | Arch = False,
) -> dict[str, dict[str, Array]]:
    """Per-layer accounting of one block and microbatch, keyed by layer name (for reports/tests);
    `moe`: the MoE block (its expert MLP layers are named expert-fc1 ...)."""
    c, w, system = prepare(c, w, system)
    out = {}
    for x in block_layers(strategy, c, w, system, profile, moe):
        if x.expert:
            x = x._replace(name=f"expert-{x.name}")
        f = direction_time(x, True, system, profile, network)
        b = direction_time(x, False, system, profile, network)
        out[x.name] = {
            "flops_f": x.flops_f,
            "flops_b": x.flops_b,
            "weight": x.weight,
            "activation": x.activation,
            "traffic_f": x.traffic_f,
            "traffic_b": x.traffic_b,
            "t_f": f.comp + f.mem + f.comm,
            "t_b": b.comp + b.mem + b.comm,
            "comm_f": f.comm,
            "comm_b": b.comm,
        }
    return out
