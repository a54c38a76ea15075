"""The time of a block's layers on one microbatch: each layer's forward and backward (roofline, collectives), the dense and MoE block mix of a pipeline stage, tensor-parallel overlap."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from kernels.blocks import block_layers
from kernels.collectives import ALLTOALL, TWO_TIER, summa_exposed, time_of
from kernels.layers import Layer
from kernels.numerics import recip
from kernels.params import FLOP_COUNT, Arch, Array, Candidates, Profile, System, Workload, arch_of, recompute_modules
from kernels.roofline import (compute_time, exposed_memory, matmul_time, memory_time, narrowed, quantized,
                              quantized_bytes)


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
    backward (the attention core, materialized or fused, under core_attn, and the modules the profile
    lists: `recomputes`), and `sel_activation` what those layers free. `f_*` are the forward alone (what full
    recomputation runs again)."""

    t_f: Array  # forward time
    t_b: Array  # backward time
    comp: Array  # forward + backward compute
    mem: Array  # forward + backward exposed memory
    comm: Array  # forward + backward communication inside the block (tensor-parallel collectives, all-to-alls)
    ep_comm: Array  # the expert-parallel all-to-alls of `comm` (MoE dispatch and combine; 0 for dense blocks)
    flops: Array  # forward + backward TFLOP
    weight: Array  # GB
    activation: Array  # GB
    pipeline_message: Array  # GB sent between stages per microbatch (the output of ln1)
    expert_weight: Array  # GB of the weights above that belong to experts (MoE)
    fp8_weight: Array  # GB (2-byte units) of the weights above whose matmuls run quantized, times the
    #                    bytes a quantized element takes (1 FP8, NVFP4_BYTES NVFP4): their cached copies
    quantized_weight: Array  # GB (2-byte units) of the weights above whose matmuls run quantized
    gathered_weight: Array  # GB a parameter allgather moves of `weight` less `expert_weight`: 2 bytes a
    #                         parameter, 1 for a quantized matmul's under `Profile.fp8_param_gather`
    gathered_expert: Array  # the same of `expert_weight`
    f_comp: Array  # forward compute
    f_mem: Array  # forward exposed memory
    f_comm: Array  # forward communication
    f_ep_comm: Array  # forward all-to-alls
    f_flops: Array  # forward TFLOP
    sel_comp: Array
    sel_mem: Array
    sel_comm: Array
    sel_ep_comm: Array
    sel_flops: Array
    sel_activation: Array
    host: Array | float = 0.0  # s the host takes to issue the block's forward and backward (`Profile.moe_dropless`)


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
    if not arch.moe:
        return layers_cost(block_layers(strategy, c, w, system, profile, arch), system, profile, network)
    dense, sparse = dense_and_moe(strategy, c, w, system, profile, network, arch)
    return mix(dense, sparse, recip(w.moe_every))


def dense_and_moe(strategy: str, c: Candidates, w: Workload, system: System, profile: Profile, network: str,
                  arch: Arch) -> tuple[BlockCost, BlockCost]:
    """(a dense block, an MoE block) of an MoE model, one microbatch each; the MoE block with the host's time
    to issue it (`Profile.moe_dropless`: dropless routing synchronizes the host with the device each block, and
    its experts run outside CUDA graphs): the system's `host_moe_time`, under Megatron's block; none under
    token drop."""
    dense = layers_cost(block_layers(strategy, c, w, system, profile, arch._replace(moe=False)), system, profile,
                        network)
    sparse = layers_cost(block_layers(strategy, c, w, system, profile, arch), system, profile, network)
    if profile.moe_dropless and profile.megatron:
        sparse = sparse._replace(host=jnp.zeros_like(sparse.t_f) + system.host_moe_time)
    return dense, sparse


def mix(dense: BlockCost, sparse: BlockCost, f: Array) -> BlockCost:
    """The average block of a stage whose blocks are a share f MoE, 1 - f dense: d + f (s - d)."""
    return BlockCost(*(d + f * (s - d) for d, s in zip(dense, sparse)))


def in_one_domain(layer) -> Array:
    """1.0 where every collective of `layer` stays inside one NVS domain (local = group), else 0."""
    inside = 1.0
    for col in layer.comm_f + layer.comm_b:
        inside = inside * jnp.where(col.local >= col.group, 1.0, 0.0)
    return inside


def tp_overlapped(layers, times: list[LayerTime], profile: Profile) -> list[LayerTime]:
    """`times` with the tensor-parallel collectives pipelined with the GEMMs (`Profile.tp_comm_overlap`):
    the collectives of the linears and of the LayerNorms that enter and leave the tensor-parallel
    regions (sequence parallelism) are exposed only where they outlast the linears' GEMMs,
    max(sum comm - sum GEMM, 0) (`Profile.tp_overlap_eff` of 1; less hides less), shared among them
    in proportion to their own. A GEMM's window is its whole time, max(compute, HBM) = comp + exposed
    mem: a GEMM that turns memory-bound hides as much as before, so a faster tensor core never
    exposes more communication than it saves. Transformer
    Engine's overlap exchanges through NVLink peer memory, so a tensor-parallel group that spans
    NVS domains (nvs1 < n1) keeps every collective exposed."""
    overlappable = [x.gemm_dim is not None or x.name.startswith("ln") for x in layers]
    comm = sum((t.comm for t, k in zip(times, overlappable) if k), jnp.zeros_like(times[0].comm))
    gemm = sum((t.comp + t.mem for t, x in zip(times, layers) if x.gemm_dim is not None), jnp.zeros_like(comm))
    hidden = profile.tp_overlap_eff * jnp.minimum(comm, gemm)  # what the pipelining really hides
    share = (comm - hidden) * recip(jnp.where(comm > 0.0, comm, 1.0))
    # userbuffers are NVLink peer memory: only a tensor-parallel group inside one domain overlaps
    inside = jnp.ones_like(comm)
    for x, k in zip(layers, overlappable):
        if k:
            inside = inside * in_one_domain(x)
    share = jnp.where(inside > 0.0, share, 1.0)
    return [t._replace(comm=t.comm * share) if k else t for t, k in zip(times, overlappable)]


def recomputes(layer: Layer, modules: frozenset) -> bool:
    """Whether the selective recompute mode runs `layer`'s forward again in backward and drops what
    it frees (`Layer.frees`): a layer of the attention core, materialized or fused (`Layer.selective`),
    when the profile's `modules` (`recompute_modules`) hold core_attn, or a layer of a module they list."""
    return (layer.selective and "core_attn" in modules) or (bool(layer.module) and layer.module in modules)


def is_alltoall(layer: Layer) -> bool:
    """The layer is an MoE token exchange (its collectives are all-to-alls: dispatch, combine)."""
    return bool(layer.comm_f) and all(k.kind == ALLTOALL for k in layer.comm_f + layer.comm_b)


def ep_overlapped(layers, times: list[LayerTime]) -> list[LayerTime]:
    """`times` with the MoE all-to-alls run under another microbatch's compute
    (`Profile.ep_comm_overlap`): of the block's all-to-all time A in one direction only
    max(A - C, 0) is exposed, C the compute (and exposed HBM time) of the block's other layers,
    shared among the all-to-alls in proportion to their own."""
    a2a = [is_alltoall(x) for x in layers]
    if not any(a2a):
        return times
    zero = jnp.zeros_like(times[0].comm)
    comm = sum((t.comm for t, k in zip(times, a2a) if k), zero)
    busy = sum((t.comp + t.mem for t, k in zip(times, a2a) if not k), zero)
    share = jnp.maximum(comm - busy, 0.0) * recip(jnp.where(comm > 0.0, comm, 1.0))
    return [t._replace(comm=t.comm * share) if k else t for t, k in zip(times, a2a)]


def gathered(x: Layer, profile: Profile) -> Array:
    """GB a parameter allgather moves of layer `x`'s weight (`weight`: 2 bytes a parameter): all of it, or under
    `Profile.fp8_param_gather` (torchao's float8 FSDP allgather, Megatron's fp8_param_gather) the
    quantized copy of a quantized matmul's weight, cast before the collective."""
    if not profile.fp8_param_gather or x.fp8 is None:
        return x.weight
    return x.weight * (1.0 - narrowed(x.fp8))


def parameter_bytes(layers, profile: Profile, expert: bool):
    """(GB of the weights, GB their parameter allgather moves: `gathered`) of `layers`' expert
    layers, or of the others: what one data-parallel group synchronizes. The one sum of the block's
    cost and both traffic accountings."""
    zero = jnp.zeros_like(layers[0].weight)
    mine = [x for x in layers if x.expert == expert]
    return sum((x.weight for x in mine), zero), sum((gathered(x, profile) for x in mine), zero)


def layers_cost(layers, system: System, profile: Profile, network: str) -> BlockCost:
    """`BlockCost` of a sequence of layers (the pipeline message is the output of `ln1`, if any)."""
    fwd = [direction_time(x, True, system, profile, network) for x in layers]
    bwd = [direction_time(x, False, system, profile, network) for x in layers]
    summa = any(x.panels is not None for x in layers)  # SUMMA pipelines its broadcasts itself
    if profile.tp_comm_overlap and profile.megatron and profile.compute_model != FLOP_COUNT and not summa:
        fwd, bwd = tp_overlapped(layers, fwd, profile), tp_overlapped(layers, bwd, profile)
    if profile.ep_comm_overlap and profile.compute_model != FLOP_COUNT:
        fwd, bwd = ep_overlapped(layers, fwd), ep_overlapped(layers, bwd)

    def total(parts):
        out = parts[0]
        for p in parts[1:]:
            out = out + p
        return out

    def pick(parts, keep):
        zero = jnp.zeros_like(parts[0])
        return total([p if k else zero for p, k in zip(parts, keep)])

    modules = recompute_modules(profile)
    sel = [recomputes(x, modules) for x in layers]
    ln1 = next((x for x in layers if x.name == "ln1"), None)
    f_comp = total([x.comp for x in fwd])
    f_mem = total([x.mem for x in fwd])
    f_comm = total([x.comm for x in fwd])
    a2a = [is_alltoall(x) for x in layers]
    f_ep_comm = pick([x.comm for x in fwd], a2a)
    _, sent = parameter_bytes(layers, profile, expert=False)
    experts, sent_experts = parameter_bytes(layers, profile, expert=True)
    return BlockCost(
        t_f=total([x.comp + x.mem + x.comm for x in fwd]),
        t_b=total([x.comp + x.mem + x.comm for x in bwd]),
        comp=f_comp + total([x.comp for x in bwd]),
        mem=f_mem + total([x.mem for x in bwd]),
        comm=f_comm + total([x.comm for x in bwd]),
        ep_comm=f_ep_comm + pick([x.comm for x in bwd], a2a),
        flops=total([x.flops_f + x.flops_b for x in layers]),
        weight=total([x.weight for x in layers]),
        activation=total([x.activation for x in layers]),
        pipeline_message=ln1.activation if ln1 is not None else jnp.zeros_like(f_comp),
        expert_weight=experts,
        fp8_weight=total([x.weight * quantized_bytes(x.fp8) if x.fp8 is not None else jnp.zeros_like(x.weight)
                          for x in layers]),
        quantized_weight=total([x.weight * quantized(x.fp8) if x.fp8 is not None else jnp.zeros_like(x.weight)
                                for x in layers]),
        gathered_weight=sent,
        gathered_expert=sent_experts,
        f_comp=f_comp,
        f_mem=f_mem,
        f_comm=f_comm,
        f_ep_comm=f_ep_comm,
        f_flops=total([x.flops_f for x in layers]),
        sel_comp=pick([x.comp for x in fwd], sel),
        sel_mem=pick([x.mem for x in fwd], sel),
        sel_comm=pick([x.comm for x in fwd], sel),
        sel_ep_comm=pick([x.comm for x in fwd], [k and x for k, x in zip(sel, a2a)]),
        sel_flops=pick([x.flops_f for x in layers], sel),
        sel_activation=pick([x.activation if x.frees is None else x.frees for x in layers], sel),
    )
