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
`kernels.params.StateBytes` the bytes each precision stores.

The same assembly computes the rail-only papers' model (seed 000 Eq. 2-7, profile railonly) by
switches of `kernels.params.Profile`: compute from closed-form matmul FLOPs (`compute_model`,
`gamma`, `compute_eff`), a bubble without tensor-parallel communication (`bubble_tp_comm`), one
exposed gradient allreduce (`dp_overlap`), unsharded optimizer states (ZeRO stage 0), the
slowest stage boundary in the steady state (`pipeline_slowest_link`) and the embedding and logit
FLOPs shared by all stages (`vocab_spread`). With those, T_bubble = Eq. 3 + 4 is `t_bubble`,
T_LS = Eq. 5 + 6 is `t_compute + t_tp_comm + t_pp_comm` and T_sync = Eq. 7 is `t_dp_comm`.
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
from kernels.collectives import (
    ALLGATHER,
    ALLREDUCE,
    P2P,
    REDUCESCATTER,
    TWO_TIER,
    collective_time,
    summa_exposed,
    time_of,
)
from kernels.layers import Layer
from kernels.numerics import as_float, fdiv, pin, recip
from kernels.params import (
    FLOP_COUNT,
    Arch,
    Array,
    Candidates,
    Metrics,
    Profile,
    StateBytes,
    System,
    Workload,
    arch_of,
    state_bytes,
)
from kernels.roofline import compute_time, exposed_memory, matmul_time, memory_time


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


class LayerTime(NamedTuple):
    """Time of one layer in one direction, split so that comp + mem + comm = total."""

    comp: Array  # T_c, including the per-layer FLOP latency
    mem: Array  # max(T_m - T_c, 0)
    comm: Array  # exposed communication


def direction_time(
    layer: Layer, forward: bool, system: System, profile: Profile, network: str = TWO_TIER
) -> LayerTime:
    """Roofline plus communication of one layer in one direction (spec 3.1, 3.3, 3.4); under the
    flop_count compute model (`Profile.compute_model`), its matmuls' closed-form FLOPs at the peak
    (`roofline.matmul_time`), no HBM time, its collectives all exposed."""
    if profile.compute_model == FLOP_COUNT:
        return _flop_count_time(layer, forward, system, profile, network)
    flops, traffic, comm = (
        (layer.flops_f, layer.traffic_f, layer.comm_f)
        if forward
        else (layer.flops_b, layer.traffic_b, layer.comm_b)
    )
    dim = layer.gemm_dim if profile.megatron else None
    fp8 = layer.fp8 if profile.megatron else None
    eff = None if layer.eff is None or not profile.megatron else layer.eff[0 if forward else 1]
    if eff is not None:
        t_c = compute_time(flops, layer.tensor, system, eff=eff)
    elif not forward and dim is not None and layer.gemm_dims_b is not None:
        # the input-gradient GEMM reduces over the output features, the weight gradient over tokens
        t_c = (compute_time(flops - layer.overlap_b, layer.tensor, system, layer.gemm_dims_b[0], fp8)
               + compute_time(layer.overlap_b, layer.tensor, system, layer.gemm_dims_b[1], fp8)
               - system.flop_latency)
    else:
        t_c = compute_time(flops, layer.tensor, system, dim, fp8)
    t_m = memory_time(traffic, system)
    if layer.panels is None:
        t_comm = sum((time_of(k, system, profile, 1.0, network) for k in comm), jnp.zeros_like(t_c))
        if layer.hides is not None:  # overlapped with the layer's own steps: only the excess shows
            t_comm = jnp.maximum(t_comm - layer.hides[0 if forward else 1] * jnp.maximum(t_c, t_m), 0.0)
        if not forward and profile.megatron and layer.overlap_b is not None:
            wgrad_dim = layer.gemm_dims_b[1] if layer.gemm_dims_b is not None else dim
            hidden = compute_time(layer.overlap_b, layer.tensor, system, wgrad_dim, fp8) - system.flop_latency
            reduced = jnp.maximum(t_comm - hidden, 0.0)
            # under tp_comm_overlap a group inside one domain is overlapped per block instead
            # (`tp_overlapped`); one spanning domains keeps Megatron's asynchronous reduction
            t_comm = jnp.where(in_one_domain(layer), t_comm, reduced) if profile.tp_comm_overlap else reduced
    else:
        t_comm = summa_exposed(comm, layer.panels, jnp.maximum(t_c, t_m), system, profile, network)
    return LayerTime(t_c, exposed_memory(t_c, t_m), t_comm)


def _flop_count_time(layer: Layer, forward: bool, system: System, profile: Profile, network: str) -> LayerTime:
    """`direction_time` of the flop_count model (seed 000 Appendix B, Eq. 6): the layer's matmul
    FLOPs (`Layer.matmul`) at the peak, gamma times slower in the attention block; every
    collective exposed (SUMMA's panels still pipelined against that compute)."""
    comm = layer.comm_f if forward else layer.comm_b
    zero = jnp.zeros_like(layer.flops_f)
    if layer.matmul is None:
        t_c = zero
    else:
        slowdown = profile.gamma if layer.attention else 1.0
        t_c = matmul_time(layer.matmul[0 if forward else 1], system, slowdown, layer.fp8) + zero
    if layer.panels is None:
        t_comm = sum((time_of(k, system, profile, 1.0, network) for k in comm), zero)
    else:
        t_comm = summa_exposed(comm, layer.panels, t_c, system, profile, network)
    return LayerTime(t_c, zero, t_comm)


class BlockCost(NamedTuple):
    """Sums over the layers of one block (or of the embedding / logit layers), one microbatch.

    The `sel_*` fields are the forward of the layers that selective recomputation runs again in
    backward (the materialized attention scores and softmax; none under flash attention), and
    `sel_activation` what those layers would store. `f_*` are the forward alone (what full
    recomputation runs again)."""

    t_f: Array  # forward time
    t_b: Array  # backward time
    comp: Array  # forward + backward compute
    mem: Array  # forward + backward exposed memory
    comm: Array  # forward + backward TP communication
    flops: Array  # forward + backward TFLOP
    weight: Array  # GB
    activation: Array  # GB
    pipeline_message: Array  # GB sent between stages per microbatch (the output of ln1)
    expert_weight: Array  # GB of the weights above that belong to experts (MoE)
    fp8_weight: Array  # GB (2-byte units) of the weights above whose matmuls run in FP8
    f_comp: Array  # forward compute
    f_mem: Array  # forward exposed memory
    f_comm: Array  # forward TP communication
    f_flops: Array  # forward TFLOP
    sel_comp: Array
    sel_mem: Array
    sel_comm: Array
    sel_flops: Array
    sel_activation: Array


def block_cost(
    strategy: str,
    c: Candidates,
    w: Workload,
    system: System,
    profile: Profile,
    network: str = TWO_TIER,
    moe: bool | Arch = False,
) -> BlockCost:
    """Time, FLOPs and memory of one block for one microbatch (`moe`, static: `arch_of`).

    For an MoE model, the stage's average block when every moe_every-th block is an MoE block and
    none is dense-first: (1 - 1/moe_every) dense + (1/moe_every) MoE, field by field (`stage_cost`
    weighs the busiest stage's own mix).
    """
    arch = arch_of(moe)
    dense = layers_cost(block_layers(strategy, c, w, system, profile, arch._replace(moe=False)), system, profile,
                        network)
    if not arch.moe:
        return dense
    sparse = layers_cost(block_layers(strategy, c, w, system, profile, arch), system, profile, network)
    return mix(dense, sparse, recip(w.moe_every))


def mix(dense: BlockCost, sparse: BlockCost, f: Array) -> BlockCost:
    """The average block of a stage whose blocks are a share f MoE, 1 - f dense: d + f (s - d)."""
    return BlockCost(*(d + f * (s - d) for d, s in zip(dense, sparse)))


def stage_mixes(c: Candidates, w: Workload) -> list[tuple[Array, Array]]:
    """(blocks, MoE share) of the pipeline stages that can set the pace of an MoE model.

    The d blocks are split in order over n_p stages, the first r = d mod n_p of them one block
    deeper (Megatron's uneven stages; r = 0 when n_p divides d): stage s holds
    n_s = floor(d/n_p) + [s < r] blocks from block a_s = s floor(d/n_p) + min(s, r). The first k =
    dense_layers blocks are dense, and every moe_every-th block after them is MoE, so stage s holds
    j_s = clip(k - a_s, 0, n_s) dense-first blocks and an MoE share f_s = (n_s - j_s) / (n_s
    moe_every) of its blocks (exact for whole alternations, which the enumeration keeps when
    moe_every > 1; k > 0 needs moe_every = 1).

    Stages before the one holding block k (call it s_1) are all dense-first and no deeper than
    stage 0; stages after s_1 are all MoE and no deeper than s_1 + 1. So the busiest stage is one of
    stage 0, s_1 and s_1 + 1 (when it exists), whichever way a dense and an MoE block compare;
    these three are returned, stage 0 first. With k = 0 every stage has the share 1/moe_every and
    stage 0 is the deepest (today's stage average).
    """
    d, p, k = w.depth, c.n_p, w.dense_layers
    lo = fdiv(d, p)
    r = d - lo * p
    hi = lo + jnp.where(r > 0.0, 1.0, 0.0)
    s1 = jnp.where(k < r * hi, fdiv(k, hi), r + fdiv(k - r * hi, lo))
    out = []
    for s in (jnp.zeros_like(s1), s1, jnp.minimum(s1 + 1.0, p - 1.0)):
        n = lo + jnp.where(s < r, 1.0, 0.0)
        j = jnp.clip(k - (s * lo + jnp.minimum(s, r)), 0.0, n)
        f = jnp.where(j == 0.0, recip(w.moe_every), (n - j) * recip(n * w.moe_every))
        out.append((n, f))
    return out


def stage_cost(
    strategy: str, c: Candidates, w: Workload, system: System, profile: Profile, network: str, arch: Arch
) -> tuple[BlockCost, Array]:
    """(average block, blocks) of the pipeline stage that sets the pace: for a dense model every
    block and the deepest stage (`stage_blocks`); for an MoE model, of the candidate stages of
    `stage_mixes` the one whose blocks take longest, forward, backward and recomputation (stage 0
    on ties: for dense_layers = 0 exactly the stage average of `block_cost`). The iteration's
    memory is that stage's too (the first stage's microbatches in flight), and the embedding and
    logit layers are added to it as to the first and last stage: an upper bound when the pace is set
    by a middle stage."""
    if not arch.moe:
        return block_cost(strategy, c, w, system, profile, network, arch), stage_blocks(c, w, profile)
    dense = layers_cost(block_layers(strategy, c, w, system, profile, arch._replace(moe=False)), system, profile,
                        network)
    sparse = layers_cost(block_layers(strategy, c, w, system, profile, arch), system, profile, network)
    best = None
    for n, f in stage_mixes(c, w):
        blk = mix(dense, sparse, f)
        extra = _recomputed(blk, c, profile)
        t = n * (blk.t_f + blk.t_b + extra[0] + extra[1] + extra[2])
        if best is None:
            best = (blk, n, t)
            continue
        more = t > best[2]
        best = (BlockCost(*(jnp.where(more, x, y) for x, y in zip(blk, best[0]))),
                jnp.where(more, n, best[1]), jnp.where(more, t, best[2]))
    return best[0], best[1]


def in_one_domain(layer) -> Array:
    """1.0 where every collective of `layer` stays inside one NVS domain (local = group), else 0."""
    inside = 1.0
    for col in layer.comm_f + layer.comm_b:
        inside = inside * jnp.where(col.local >= col.group, 1.0, 0.0)
    return inside


def tp_overlapped(layers, times: list[LayerTime]) -> list[LayerTime]:
    """`times` with the tensor-parallel collectives pipelined with the GEMMs (`Profile.tp_comm_overlap`):
    the collectives of the linears and of the LayerNorms that enter and leave the tensor-parallel
    regions (sequence parallelism) are exposed only where they outlast the linears' GEMMs,
    max(sum comm - sum GEMM, 0), shared among them in proportion to their own. Transformer
    Engine's overlap exchanges through NVLink peer memory, so a tensor-parallel group that spans
    NVS domains (nvs1 < n1) keeps every collective exposed."""
    overlappable = [x.gemm_dim is not None or x.name.startswith("ln") for x in layers]
    comm = sum((t.comm for t, k in zip(times, overlappable) if k), jnp.zeros_like(times[0].comm))
    gemm = sum((t.comp for t, x in zip(times, layers) if x.gemm_dim is not None), jnp.zeros_like(comm))
    share = jnp.maximum(comm - gemm, 0.0) * recip(jnp.where(comm > 0.0, comm, 1.0))
    # userbuffers are NVLink peer memory: only a tensor-parallel group inside one domain overlaps
    inside = jnp.ones_like(comm)
    for x, k in zip(layers, overlappable):
        if k:
            inside = inside * in_one_domain(x)
    share = jnp.where(inside > 0.0, share, 1.0)
    return [t._replace(comm=t.comm * share) if k else t for t, k in zip(times, overlappable)]


def layers_cost(layers, system: System, profile: Profile, network: str) -> BlockCost:
    """`BlockCost` of a sequence of layers (the pipeline message is the output of `ln1`, if any)."""
    fwd = [direction_time(x, True, system, profile, network) for x in layers]
    bwd = [direction_time(x, False, system, profile, network) for x in layers]
    summa = any(x.panels is not None for x in layers)  # SUMMA pipelines its broadcasts itself
    if profile.tp_comm_overlap and profile.megatron and profile.compute_model != FLOP_COUNT and not summa:
        fwd, bwd = tp_overlapped(layers, fwd), tp_overlapped(layers, bwd)

    def total(parts):
        out = parts[0]
        for p in parts[1:]:
            out = out + p
        return out

    def pick(parts, keep):
        zero = jnp.zeros_like(parts[0])
        return total([p if k else zero for p, k in zip(parts, keep)])

    sel = [x.selective for x in layers]
    ln1 = next((x for x in layers if x.name == "ln1"), None)
    f_comp = total([x.comp for x in fwd])
    f_mem = total([x.mem for x in fwd])
    f_comm = total([x.comm for x in fwd])
    return BlockCost(
        t_f=total([x.comp + x.mem + x.comm for x in fwd]),
        t_b=total([x.comp + x.mem + x.comm for x in bwd]),
        comp=f_comp + total([x.comp for x in bwd]),
        mem=f_mem + total([x.mem for x in bwd]),
        comm=f_comm + total([x.comm for x in bwd]),
        flops=total([x.flops_f + x.flops_b for x in layers]),
        weight=total([x.weight for x in layers]),
        activation=total([x.activation for x in layers]),
        pipeline_message=ln1.activation if ln1 is not None else jnp.zeros_like(f_comp),
        expert_weight=total([x.weight if x.expert else jnp.zeros_like(x.weight) for x in layers]),
        fp8_weight=total([x.weight * x.fp8 if x.fp8 is not None else jnp.zeros_like(x.weight) for x in layers]),
        f_comp=f_comp,
        f_mem=f_mem,
        f_comm=f_comm,
        f_flops=total([x.flops_f for x in layers]),
        sel_comp=pick([x.comp for x in fwd], sel),
        sel_mem=pick([x.mem for x in fwd], sel),
        sel_comm=pick([x.comm for x in fwd], sel),
        sel_flops=pick([x.flops_f for x in layers], sel),
        sel_activation=pick([x.activation for x in layers], sel),
    )


def pipeline_message(blk: BlockCost, c: Candidates, profile: Profile) -> Array:
    """GB one GPU sends across a stage boundary per microbatch: seed 001's ln1 activation; under
    Megatron's block, the activation's 1/n1 share (the sequence shard under sequence parallelism;
    without it Megatron's scatter-gather split, each tensor-parallel rank sending 1/n1 of the
    replicated tensor and the receivers allgathering it inside their domain, left uncharged)."""
    if not profile.megatron:
        return blk.pipeline_message
    sp = as_float(c.seq_par)
    return blk.pipeline_message * (sp + (1.0 - sp) * recip(c.n1))


def pipeline_p2p(
    message: Array, c: Candidates, system: System, profile: Profile, network: str = TWO_TIER,
    slowest: bool = False,
) -> Array:
    """Mean time of one stage-boundary transfer (spec 5.3); `slowest` (static): the time of the
    slowest boundary instead, the InfiniBand one when the pipeline spans domains (seed 000 Eq. 6).

    Of the n_p - 1 links, n_p/nvs_p - 1 cross InfiniBand and the rest stay inside a domain. With
    nvs_p = 1 all links are InfiniBand point-to-points. The reference times the InfiniBand links as
    a 1-GPU collective, i.e. free (profile switch `pipeline_ib_links_free`).
    """
    one = jnp.ones_like(c.n_p)
    two = 2.0 * one
    ib = collective_time(P2P, message, two, one, system, profile, network)
    nvs = collective_time(P2P, message, two, two, system, profile, network)
    links = c.n_p - 1.0
    slow = fdiv(c.n_p, c.nvs_p) - 1.0
    slow_cost = 0.0 if profile.pipeline_ib_links_free else ib
    if slowest:
        mixed = jnp.where(slow > 0.0, slow_cost, nvs)
    else:
        per_link = recip(jnp.maximum(links, 1.0))
        mixed = (links - slow) * per_link * nvs + slow * per_link * slow_cost
    p = jnp.where(c.nvs_p == 1, ib, mixed)
    return jnp.where(c.n_p == 1, 0.0, p)


def optimizer_step_time(weights: Array, sb: StateBytes, system: System) -> Array:
    """Time of the Adam update of `weights` GB of (2-byte) parameters on one GPU: memory-bound,
    its HBM bytes per parameter at the efficient HBM bandwidth. It reads the fp32 master weight,
    both moments and the gradient, and writes the three states and the 2-byte weight:
    2 K + grad + weight bytes per parameter (`StateBytes`: 30 with fp32 gradients). Under ZeRO
    stages 1-3 each GPU updates its data-parallel shard (`zero_shard`)."""
    per_weight_byte = (2.0 * sb.optimizer + sb.grad + sb.weight) / sb.weight
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


def zero_schedule(zero_stage, micro, grad_width):
    """(allgather width, allgathers, reduce-scatters) of a block's weights per iteration under each
    ZeRO stage, widths per parameter byte (`grad_width`: gradient bytes per parameter byte): stage 0
    allgathers the reduced gradients (an allreduce), 1 the parameters once; stage 2 reduce-scatters
    every microbatch; stage 3 gathers the parameters forward and backward every microbatch. The one
    schedule of the data-parallel time and of the traffic accounting."""
    ag_width = jnp.where(zero_stage == 0.0, grad_width, 1.0)
    ag_rounds = jnp.where(zero_stage == 3.0, 2.0 * micro, 1.0)
    rs_rounds = jnp.where(zero_stage >= 2.0, micro, 1.0)
    return ag_width, ag_rounds, rs_rounds


def data_parallel_time(
    zero_stage: Array, blk: BlockCost, shared: Array, synced_emb: Array, blocks: Array, micro: Array,
    dp_group: Array, dp_local: Array, e_group, e_local, sb: StateBytes, system: System, profile: Profile,
    network: str = TWO_TIER,
) -> Array:
    """Exposed time of one iteration's data-parallel synchronization under each ZeRO stage.

    T_AG allgathers one block's 2-byte parameters over the data-parallel group, T_RS
    reduce-scatters its gradients at their stored width (fp32 main grads by default: twice the
    parameter bytes; `StateBytes.grad`); expert weights add theirs over the expert-data-parallel
    group (the same stage). With m microbatches, L_s blocks, t_f / t_b one block's forward /
    backward (`overlapped`: the seed-001 sweep, T + max(T - t_hide, 0)(L_s - 1)):

        stage 0, 1:  ov(T_AG, t_f) + ov(T_RS, t_b)                once per iteration
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
    ag_width, ag_rounds, rs_rounds = zero_schedule(zero_stage, micro, g)

    def ag(volume, group, local):
        return collective_time(ALLGATHER, volume * ag_width, group, local, system, profile, network)

    def rs(volume, group, local):
        return collective_time(REDUCESCATTER, volume * g, group, local, system, profile, network)

    if profile.dp_overlap:
        t_ag = ag(shared, dp_group, dp_local)
        t_rs = rs(shared, dp_group, dp_local)
        if e_group is not None:
            t_ag = t_ag + ag(blk.expert_weight, e_group, e_local)
            t_rs = t_rs + rs(blk.expert_weight, e_group, e_local)
        forward = overlapped(t_ag, blk.t_f, blocks)
        sharded = forward + rs_rounds * overlapped(t_rs, blk.t_b, blocks)
        if profile.fsdp_prefetch:
            full = micro * (forward + overlapped(t_ag + t_rs, blk.t_b, blocks))
        else:
            full = micro * blocks * (2.0 * t_ag + t_rs)
        t_dp = jnp.where(zero_stage == 3.0, full, sharded)
        if profile.embeddings:
            t_dp = (t_dp + ag_rounds * ag(synced_emb, dp_group, dp_local)
                    + rs_rounds * rs(synced_emb, dp_group, dp_local))
        return t_dp
    # one allreduce of the stage's gradients after the last backward, exposed (Eq. 7)
    stage = shared * blocks + synced_emb
    t_ar = collective_time(ALLREDUCE, stage * g, dp_group, dp_local, system, profile, network)
    t_each = ag_rounds * ag(stage, dp_group, dp_local) + rs_rounds * rs(stage, dp_group, dp_local)
    if e_group is not None:
        experts = blk.expert_weight * blocks
        t_ar = t_ar + collective_time(ALLREDUCE, experts * g, e_group, e_local, system, profile, network)
        t_each = (t_each + ag_rounds * ag(experts, e_group, e_local)
                  + rs_rounds * rs(experts, e_group, e_local))
    return jnp.where(zero_stage >= 2.0, t_each, t_ar)


def model_state(
    zero_stage: Array, blk: BlockCost, shared: Array, emb_weight: Array, blocks: Array, dp_group: Array,
    e_group, sb: StateBytes, system: System, profile: Profile,
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
    `fp8_weight_copies` per parameter; under stage 3 only the gathered blocks carry them.
    Psi_blk is the largest module gathered at once: a block, or the stage's embedding.
    """
    g = sb.grad / sb.weight
    k = sb.optimizer / sb.weight
    fp8 = sb.fp8_copy / sb.weight * system.fp8_weight_copies  # per 2-byte weight GB
    dense = shared * blocks + emb_weight  # synchronized over dp_group
    experts = blk.expert_weight * blocks if e_group is not None else jnp.zeros_like(dense)
    weights = blk.weight * blocks + emb_weight
    fp8_cache = fp8 * blk.fp8_weight * blocks

    def sharded(stage):  # the dense and expert parameters' GB after stage `stage`'s sharding
        out = zero_shard(dense, zero_stage, stage, dp_group)
        if e_group is not None:
            out = out + zero_shard(experts, zero_stage, stage, e_group)
        return out

    gathered = (zero_stage == 3.0) & (dp_group > 1.0)
    buffer = (1.0 + float(profile.fsdp_prefetch)) * (jnp.maximum(blk.weight, emb_weight) + fp8 * blk.fp8_weight)
    weights = jnp.where(gathered, sharded(3) + buffer, weights + fp8_cache)
    grads = jnp.where(zero_stage >= 2.0, g * sharded(2), g * (blk.weight * blocks + emb_weight))
    optimizer = zero_shard(k * dense, zero_stage, 1, dp_group)
    if e_group is not None:
        optimizer = optimizer + zero_shard(k * experts, zero_stage, 1, e_group)
    return weights, grads, optimizer


def stage_blocks(c: Candidates, w: Workload, profile: Profile) -> Array:
    """Blocks on the busiest pipeline stage: floor(d/n_p) for seed 001's model (n_p divides d),
    ceil(d/n_p) for Megatron's, whose first stages take the remainder when n_p does not divide d."""
    if profile.megatron:
        return fdiv(w.depth + c.n_p - 1.0, c.n_p)
    return fdiv(w.depth, c.n_p)


def _recomputed(blk: BlockCost, c: Candidates, profile: Profile):
    """(comp, mem, comm, flops) of one block that recomputation adds to its backward: the whole
    forward under full recomputation, the selective layers' forward under selective, nothing under
    none. Seed 001's model (profile `megatron` off) has its recomputation inside its layers."""
    zero = jnp.zeros_like(blk.t_f)
    if not profile.megatron:
        return zero, zero, zero, zero
    full = c.recompute == 2.0
    sel = c.recompute == 1.0

    def pick(f, s):
        return jnp.where(full, f, jnp.where(sel, s, zero))

    return (pick(blk.f_comp, blk.sel_comp), pick(blk.f_mem, blk.sel_mem),
            pick(blk.f_comm, blk.sel_comm), pick(blk.f_flops, blk.sel_flops))


def block_activation(blk: BlockCost, c: Candidates, w: Workload, system: System, profile: Profile,
                     strategy: str) -> tuple[Array, Array]:
    """(stored per block and microbatch in flight, working set of the block being recomputed), GB.

    None stores every layer's activations, selective all but the recomputed layers', full only the
    block's input (its sequence shard under sequence parallelism, b R e elements; SUMMA's n2 x n1
    block of it) while the block under recomputation holds all of its own once.
    """
    zero = jnp.zeros_like(blk.activation)
    if not profile.megatron:
        return blk.activation, zero
    full = c.recompute == 2.0
    sel = c.recompute == 1.0
    stored = jnp.where(sel, blk.activation - blk.sel_activation, blk.activation)
    lam, rows, _ = region_rows(c, w, strategy)
    if strategy == "summa":
        block_input = as_float(c.microbatch) * lam * fdiv(w.hidden, c.n1)
    else:
        block_input = as_float(c.microbatch) * rows * as_float(w.hidden)
    block_input = block_input * system.element_size
    return jnp.where(full, block_input, stored), jnp.where(full, blk.activation, zero)


def evaluate_candidates(
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

    t_DP is seed 001's data-parallel term (allgather / reduce-scatter of each block's weights,
    overlapped with the next block's compute) plus the embedding's, exposed. Memory is that of
    the first stage (n_p microbatches in flight, or m if fewer, times 1 + (n_p - 1)/(n_p v) when
    interleaved) or of the last (one microbatch, the logits), whichever is larger.

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
    arch = arch_of(moe)
    blk, blocks = stage_cost(strategy, c, w, system, profile, network, arch)
    micro, _ = stage_counts(c, w)
    n_p, v = c.n_p, c.interleave
    zero = jnp.zeros_like(blk.t_f)

    x_comp, x_mem, x_comm, x_flops = _recomputed(blk, c, profile)
    comp = (blk.comp + x_comp) * blocks
    mem = (blk.mem + x_mem) * blocks
    comm = (blk.comm + x_comm) * blocks
    flops = (blk.flops + x_flops) * blocks
    message = pipeline_message(blk, c, profile)
    p2p = pipeline_p2p(message, c, system, profile, network)
    pp = 2.0 * v * p2p
    if profile.pp_comm_overlap:  # interleaved: each transfer runs under another chunk's compute
        chunk = (comp + mem + comm) * recip(2.0 * v)
        pp = jnp.where(v > 1.0, 2.0 * v * jnp.maximum(p2p - chunk, 0.0), pp)

    if profile.embeddings:
        has_vocab = jnp.where(w.vocab > 0.0, 1.0, 0.0)
        head = layers_cost(embedding_layers(strategy, c, w, system), system, profile, network)
        tail = layers_cost(logit_layers(strategy, c, w, system), system, profile, network)
        one_stage = jnp.where(n_p == 1.0, 1.0, 0.0)

        def ends(x_head, x_tail):  # (first stage, last stage) extras of one quantity
            x_head, x_tail = has_vocab * x_head, has_vocab * x_tail
            return x_head + one_stage * x_tail, x_tail + one_stage * x_head

        # untied: the logit layer's own V e / n1 on the last stage (the same stage with one stage)
        untied = 1.0 - as_float(w.tied)
        emb_weight = has_vocab * head.weight * (1.0 + untied * one_stage)
        first_act, last_act = ends(head.activation, tail.activation)
        if profile.vocab_spread:  # their work in equal shares on every stage, no collectives
            share = has_vocab * recip(n_p)
            comp = comp + (head.comp + tail.comp) * share
            mem = mem + (head.mem + tail.mem) * share
            flops = flops + (head.flops + tail.flops) * share
    else:
        emb_weight = first_act = last_act = zero
    t_mid = comp + mem + comm + pp
    fill = t_mid if profile.bubble_tp_comm else comp + mem + pp  # a stage's share of fill and drain

    if profile.embeddings and not profile.vocab_spread:
        e_time, h_time = ends(head.t_f + head.t_b, tail.t_f + tail.t_b)
        last = (t_mid + h_time) > (t_mid + e_time)

        def busiest(x_head, x_tail):
            first_x, last_x = ends(x_head, x_tail)
            return jnp.where(last, last_x, first_x)

        comp = comp + busiest(head.comp, tail.comp)
        mem = mem + busiest(head.mem, tail.mem)
        comm = comm + busiest(head.comm, tail.comm)
        flops = flops + busiest(head.flops, tail.flops)
        # the other end's extra, which the pipeline's fill and drain see once
        if profile.bubble_tp_comm:
            e_fill, h_fill = head.t_f + head.t_b, tail.t_f + tail.t_b
        else:
            e_fill, h_fill = head.comp + head.mem, tail.comp + tail.mem
        extra = (1.0 - one_stage) * has_vocab * jnp.minimum(e_fill, h_fill)
    else:
        extra = zero
    if profile.pipeline_slowest_link:  # the steady state waits for the slowest boundary (Eq. 6)
        pp = 2.0 * v * pipeline_p2p(message, c, system, profile, network, slowest=True)
    t_max = comp + mem + comm + pp
    t_core = micro * t_max
    t_pp = micro * pp
    t_bubble = ((n_p - 1.0) * fill + extra) * recip(v)

    dp_group, dp_local = data_parallel_group(strategy, c)
    shared = blk.weight - blk.expert_weight
    synced_emb = zero if profile.vocab_spread else emb_weight  # the embedding's gradients
    e_group = e_local = None
    if arch.moe:  # expert weights: over the replicas holding the same experts, after the shared ones
        e_group, e_local = expert_data_parallel_group(c, w, strategy)
    sb = state_bytes(profile)
    t_dp = data_parallel_time(c.zero, blk, shared, synced_emb, blocks, micro, dp_group, dp_local, e_group, e_local,
                              sb, system, profile, network)
    t_opt = jnp.zeros_like(t_dp)
    if profile.megatron and profile.compute_model != FLOP_COUNT:
        own = shared * blocks + emb_weight
        t_opt = optimizer_step_time(zero_shard(own, c.zero, 1, dp_group), sb, system)
        if arch.moe:
            t_opt = t_opt + optimizer_step_time(zero_shard(blk.expert_weight * blocks, c.zero, 1, e_group), sb, system)
    t = t_core + t_bubble + t_dp + t_opt

    weights, grads, optimizer = model_state(c.zero, blk, shared, emb_weight, blocks, dp_group, e_group, sb,
                                            system, profile)
    stored, working = block_activation(blk, c, w, system, profile, strategy)
    in_flight = jnp.minimum(n_p, micro)
    if profile.megatron:
        in_flight = in_flight * jnp.where(v > 1.0, 1.0 + (n_p - 1.0) * recip(n_p * v), 1.0)
    activations = stored * blocks * in_flight + working
    if profile.embeddings:
        activations = jnp.maximum(activations + first_act, stored * blocks + working + last_act)
    reserved = jnp.full_like(weights, profile.memory_reserve)
    memory = weights + grads + optimizer + activations + reserved
    return Metrics(
        iteration_time=t,
        throughput=w.global_batch * recip(t),
        memory=memory,
        feasible=memory <= system.hbm_capacity,
        t_compute=micro * comp,
        t_memory=micro * mem,
        t_tp_comm=micro * comm,
        t_dp_comm=t_dp,
        t_pp_comm=t_pp,
        t_bubble=t_bubble,
        t_optimizer=t_opt,
        mem_weights=weights,
        mem_grads=grads,
        mem_optimizer=optimizer,
        mem_activations=activations,
        mem_reserved=reserved,
        flops_per_gpu=micro * flops,
    )


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
