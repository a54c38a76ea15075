"""Data parallelism and model state under each ZeRO stage: gradient and weight collectives, their overlap with compute, the optimizer step and the bytes of weights, gradients and optimizer states."""

from __future__ import annotations

import jax.numpy as jnp

from kernels.collectives import ALLGATHER, ALLREDUCE, REDUCESCATTER, TWO_TIER, collective_time
from kernels.numerics import recip
from kernels.params import Array, Profile, StateBytes, System
from kernels.roofline import memory_time
from kernels.block_time import BlockCost


def optimizer_step_time(weights: Array, sb: StateBytes, system: System) -> Array:
    """Time of the Adam update of `weights` GB of (2-byte) parameters on one GPU: memory-bound,
    its HBM bytes per parameter at the efficient HBM bandwidth. It reads the fp32 master weight,
    both moments and the gradient, and writes the three states and the 2-byte weight:
    2 K + grad + weight bytes per parameter (`StateBytes`: 30 with fp32 gradients). Without a
    whole fp32 master copy (`Profile.optimizer_state` remainder or bf16) it reads the 2-byte weight
    too. Under ZeRO stages 1-3 each GPU updates its data-parallel shard (`zero_shard`)."""
    per_weight_byte = (2.0 * sb.optimizer + sb.grad + sb.update_weight_bytes) / sb.weight
    return memory_time(weights * per_weight_byte, system)


def zero_shard(x: Array, zero: Array, stage: int, group: Array) -> Array:
    """`x` (a model-state size) divided over the data-parallel `group` where the candidate's ZeRO
    stage is at least `stage` (optimizer states from 1, gradients from 2, parameters at 3)."""
    return jnp.where(zero >= stage, x * recip(group), x)


def overlapped(t_comm: Array, t_hide: Array, blocks: Array) -> Array:
    """One sweep of per-block collectives over the stage's L_s blocks, each issued while the
    neighbouring block computes for t_hide: the first exposed, each later one by what exceeds
    t_hide (seed 001 section III-D),  T + max(T - t_hide, 0)(L_s - 1)."""
    return t_comm + jnp.maximum(t_comm - t_hide, 0.0) * (blocks - 1.0)


def chunked(t_comm: Array, t_hide: Array, blocks: Array, v: Array, n_p: Array) -> Array:
    """`overlapped` under Megatron's interleaved schedule (v > 1 model chunks of L_s / v blocks on each
    stage, 1F1B over n_p stages): a chunk's collective is issued with its last microbatch (the gradients'
    reduction after its last backward, the parameters' gather before its first forward), and n_p
    microbatches of a neighbouring chunk, n_p (L_s / v) t_hide, run between two chunks' last ones (the
    schedule's groups of n_p microbatches; Megatron-core's interleaved schedule synchronizes each chunk's
    gradients, and gathers its parameters, on their own). Each block's collective is issued once its
    compute is done and one stream serializes them (first in, first out): the last chunk's own sweep is
    exposed, or the backlog the earlier windows leave, whichever is larger (the latest finish over the
    issue times, linear within a chunk and across chunks, so taken at the first and the last block),

        max(ov(T, t_hide, L_s / v),  L_s T - ((v - 1) n_p L_s / v + L_s / v - 1) t_hide);

    v = 1 is `overlapped` exactly: its backlog, at most the sweep, is left out."""
    per = blocks * recip(v)
    backlog = blocks * t_comm - ((v - 1.0) * n_p * per + per - 1.0) * t_hide
    return jnp.maximum(overlapped(t_comm, t_hide, per), jnp.where(v > 1.0, backlog, 0.0))


def allgathered(zero_stage, weight, sent, grad_width):
    """GB a block's data-parallel allgather moves of `weight` GB of 2-byte parameters: under ZeRO 0
    the second half of the gradients' allreduce (`grad_width` bytes per parameter byte), under 1-3
    the parameters as sent (`sent`: `kernels.block_time.gathered`, 1-byte copies under
    `Profile.fp8_param_gather`). The one rule of the data-parallel time and both traffic accountings."""
    return jnp.where(zero_stage == 0.0, weight * grad_width, sent)


def zero_schedule(zero_stage, micro):
    """(allgathers, reduce-scatters) of a block's weights per iteration under each ZeRO stage: stage
    0 allgathers the reduced gradients once (an allreduce), 1 the parameters once; stage 2
    reduce-scatters every microbatch; stage 3 gathers the parameters forward and backward every
    microbatch (what each allgather moves: `allgathered`). The one schedule of the data-parallel
    time and of the traffic accounting."""
    ag_rounds = jnp.where(zero_stage == 3.0, 2.0 * micro, 1.0)
    rs_rounds = jnp.where(zero_stage >= 2.0, micro, 1.0)
    return ag_rounds, rs_rounds


def data_parallel_time(
    zero_stage: Array, blk: BlockCost, shared: Array, synced_emb: Array, blocks: Array, micro: Array, v: Array,
    n_p: Array, dp_group: Array, dp_local: Array, e_group, e_local, sb: StateBytes, system: System, profile: Profile,
    network: str = TWO_TIER,
) -> Array:
    """Exposed time of one iteration's data-parallel synchronization under each ZeRO stage.

    T_AG allgathers one block's 2-byte parameters over the data-parallel group (those of quantized
    matmuls in their 1-byte copy under `Profile.fp8_param_gather`: `BlockCost.gathered_weight`), T_RS
    reduce-scatters its gradients at their stored width (fp32 main grads by default: twice the
    parameter bytes; `StateBytes.grad`); expert weights add theirs over the expert-data-parallel
    group (the same stage). With m microbatches, L_s blocks, t_f / t_b one block's forward /
    backward (`overlapped`: the seed-001 sweep, T + max(T - t_hide, 0)(L_s - 1)):

        stage 0, 1:  ov(T_AG, t_f) + ov(T_RS, t_b)                once per iteration; under the
                                                                  interleaved schedule (v > 1
                                                                  chunks of n_p stages) `chunked`
                                                                  (`Profile.dp_chunked`)
        stage 2:     ov(T_AG, t_f) + m ov(T_RS, t_b)              gradients cannot accumulate
                                                                  unsharded: every microbatch's
                                                                  backward reduce-scatters them
        stage 3:     m [ov(T_AG, t_f) + ov(T_AG + T_RS, t_b)]     parameters gathered before each
                                                                  block's forward and again before
                                                                  its backward, every microbatch
                     m L_s (2 T_AG + T_RS)                        without `fsdp_prefetch`: exposed

    Stage 1 is seed 001's model (Megatron's distributed optimizer: reduce-scatter of gradients,
    allgather of updated parameters). Stage 0 (plain DDP) allreduces the gradient buffer, a
    reduce-scatter and an allgather both at the gradient width: with 2-byte gradients exactly
    stage 1's time, with fp32 gradients its allgather moves twice the bytes. Per iteration the
    volumes are Rajbhandari et al. 2020 section 7: 2 Psi for stages 0-2 at m = 1, 3 Psi for
    stage 3; stages 2 and 3 pay theirs per microbatch, so with a pipeline (n_p > 1, m >= n_p
    microbatches) the costs grow with m. The embedding's collectives are exposed, as many times.

    Without `dp_overlap` (seed 000 Eq. 7) every collective of the stage's weights is exposed:
    stage 0, 1: one allreduce of the gradients; stage 2: one allgather and m reduce-scatters;
    stage 3: m (2 allgathers + a reduce-scatter).
    """
    g = sb.grad / sb.weight  # gradient bytes per parameter byte
    ag_rounds, rs_rounds = zero_schedule(zero_stage, micro)

    def ag(volume, group, local, sent):
        return collective_time(ALLGATHER, allgathered(zero_stage, volume, sent, g), group, local, system, profile,
                               network)

    def rs(volume, group, local):
        return collective_time(REDUCESCATTER, volume * g, group, local, system, profile, network)

    if profile.dp_overlap:
        t_ag = ag(shared, dp_group, dp_local, blk.gathered_weight)
        t_rs = rs(shared, dp_group, dp_local)
        if e_group is not None:
            t_ag = t_ag + ag(blk.expert_weight, e_group, e_local, blk.gathered_expert)
            t_rs = t_rs + rs(blk.expert_weight, e_group, e_local)
        forward = overlapped(t_ag, blk.t_f, blocks)
        sharded = forward + rs_rounds * overlapped(t_rs, blk.t_b, blocks)
        if profile.dp_chunked:  # stages 0 and 1 synchronize once, chunk by chunk under the interleaved schedule
            once = chunked(t_ag, blk.t_f, blocks, v, n_p) + chunked(t_rs, blk.t_b, blocks, v, n_p)
            sharded = jnp.where(zero_stage <= 1.0, once, sharded)
        if profile.fsdp_prefetch:
            full = micro * (forward + overlapped(t_ag + t_rs, blk.t_b, blocks))
        else:
            full = micro * blocks * (2.0 * t_ag + t_rs)
        t_dp = jnp.where(zero_stage == 3.0, full, sharded)
        if profile.embeddings:
            t_dp = (t_dp + ag_rounds * ag(synced_emb, dp_group, dp_local, synced_emb)
                    + rs_rounds * rs(synced_emb, dp_group, dp_local))
        return t_dp
    # one allreduce of the stage's gradients after the last backward, exposed (Eq. 7)
    stage = shared * blocks + synced_emb
    t_ar = collective_time(ALLREDUCE, stage * g, dp_group, dp_local, system, profile, network)
    t_each = (ag_rounds * ag(stage, dp_group, dp_local, blk.gathered_weight * blocks + synced_emb)
              + rs_rounds * rs(stage, dp_group, dp_local))
    if e_group is not None:
        experts = blk.expert_weight * blocks
        t_ar = t_ar + collective_time(ALLREDUCE, experts * g, e_group, e_local, system, profile, network)
        t_each = (t_each + ag_rounds * ag(experts, e_group, e_local, blk.gathered_expert * blocks)
                  + rs_rounds * rs(experts, e_group, e_local))
    return jnp.where(zero_stage >= 2.0, t_each, t_ar)


def model_state(
    zero_stage: Array, blk: BlockCost, shared: Array, emb_weight: Array, blocks: Array, dp_group: Array,
    e_group, sb: StateBytes, system: System, profile: Profile, pipelined: Array | None = None,
) -> tuple[Array, Array, Array]:
    """(weights, gradients, optimizer states) per GPU in GB, under each ZeRO stage.

    With Psi the parameters on this GPU's pipeline stage and tensor shard, N its data-parallel
    group (the expert weights: their own group), K = 12 bytes of Adam state (`StateBytes`) and
    G the gradient width (2 or 4 bytes), Rajbhandari et al. 2020 (Fig. 1, section 5.1):

        stage 0:  2 Psi + G Psi + K Psi
        stage 1:  2 Psi + G Psi + K Psi / N        (Megatron's distributed optimizer; seed 001)
        stage 2:  2 Psi + (G + K) Psi / N
        stage 3:  (2 + G + K) Psi / N + (1 + prefetch) 2 Psi_blk   (gathered blocks; N > 1)

    With G = 2 these are the paper's (2 + 2 + K) Psi forms; with G = 4, Megatron's 18 and
    6 + 12/N bytes per parameter. Under FP8 matmuls (`Candidates.precision`) the weights add the
    FP8 copies Transformer Engine caches of the FP8 linears' weights, 1 byte times the system's
    `fp8_weight_copies` per parameter; under stage 3 only the gathered blocks carry them. Under
    `Profile.fp8_param_gather` in Megatron (`--fp8-param-gather`: Transformer Engine creates those
    linears' parameters as FP8 tensors, the optimizer keeps their fp32 master copy) no 2-byte copy
    of them is held: their FP8 copies only, and under stage 3 (Megatron-FSDP) their shards hold the
    quantized bytes their allgather sends. PyTorch FSDP2 with torchao's float8 all-gather keeps
    high-precision shards and gathered blocks: unchanged. torchao's float8 linears
    (`Profile.te_quantization` off: framework fsdp2) cache no FP8 copy of their weights: each matmul
    casts its weight when it reads it and frees the cast after (one linear's transient, not counted), so the weights add nothing
    under FP8 (torchtitan's Llama 3.1 8B on 8 and on 128 H100s, the same configuration in bf16
    and FP8 in the packaged torchtitan_fsdp2 runs: 0.2 GiB less under FP8 in both).
    Psi_blk is the largest module gathered at once: a block, or the stage's embedding.

    PyTorch FSDP2 under a pipeline (`pipelined`: n_p > 1, framework fsdp2) keeps the stage gathered
    instead: torchtitan does not reshard parameters after the forward when pipelining
    (`fsdp_reshard_after_forward` "default"), and PyTorch's pipeline stage turns resharding after
    the backward and the gradients' reduction off for every microbatch but the last, so the
    stage's gradients accumulate unsharded in the reduction dtype (fp32): stage 3 then holds
    2 Psi (+ its FP8 copies) + (2 + G + K) Psi / N + 4 Psi.
    """
    g = sb.grad / sb.weight
    k = sb.optimizer / sb.weight
    fp8 = sb.fp8_copy / sb.weight * system.fp8_weight_copies  # per 2-byte weight GB
    if not profile.te_quantization:  # torchao casts each weight per matmul and caches no copy
        fp8 = jnp.zeros_like(fp8)
    dense = shared * blocks + emb_weight  # synchronized over dp_group
    experts = blk.expert_weight * blocks if e_group is not None else jnp.zeros_like(dense)
    weights = blk.weight * blocks + emb_weight
    fp8_cache = fp8 * blk.fp8_weight * blocks

    def sharded(stage, dense, experts):  # the parameters' GB after stage `stage`'s sharding
        out = zero_shard(dense, zero_stage, stage, dp_group)
        if e_group is not None:
            out = out + zero_shard(experts, zero_stage, stage, e_group)
        return out

    if profile.fp8_param_gather and profile.te_quantization:  # Megatron's FP8 parameters: no 2-byte copy
        resident = weights + fp8_cache - blk.quantized_weight * blocks
        shards = sharded(3, blk.gathered_weight * blocks + emb_weight, blk.gathered_expert * blocks)  # as sent
        largest = jnp.maximum(blk.weight - blk.quantized_weight + fp8 * blk.fp8_weight, emb_weight)
    else:
        resident = weights + fp8_cache
        shards = sharded(3, dense, experts)
        largest = jnp.maximum(blk.weight, emb_weight) + fp8 * blk.fp8_weight  # a gathered block or the embedding
    gathered = (zero_stage == 3.0) & (dp_group > 1.0)
    buffer = (1.0 + float(profile.fsdp_prefetch)) * largest
    accumulated = jnp.zeros_like(weights)
    if profile.pp_gathered and pipelined is not None:  # the whole stage gathered, fp32 gradients kept
        kept = gathered & pipelined
        buffer = jnp.where(kept, resident, buffer)
        accumulated = jnp.where(kept, 2.0 * weights, accumulated)
    grads = jnp.where(zero_stage >= 2.0, g * sharded(2, dense, experts), g * weights) + accumulated
    weights = jnp.where(gathered, shards + buffer, resident)
    optimizer = zero_shard(k * dense, zero_stage, 1, dp_group)
    if e_group is not None:
        optimizer = optimizer + zero_shard(k * experts, zero_stage, 1, e_group)
    return weights, grads, optimizer
