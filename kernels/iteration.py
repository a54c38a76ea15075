"""Iteration assembly: layer timing, 1F1B pipeline, data parallelism, bubble, memory.

Seed 001 section III-C/D; spec sections 5 and 6. For one candidate, with L_s = d / n_p blocks per
pipeline stage and m = floor(floor(B/n_d)/b) microbatches:

    t_core   = (t_f + t_b) m L_s + t_PP                      t_f, t_b: one block, one microbatch
    t_DP     = T_AG + max(T_AG - t_f, 0)(L_s - 1) + T_RS + max(T_RS - t_b, 0)(L_s - 1)
    t_bubble = (n_p - 1) t_core / m
    t        = t_core + t_bubble + t_DP,     throughput = B / t

Memory per GPU: fp16 weights W L_s, fp16 gradients (same, unsharded), optimizer states
6 W L_s / (n_d s) (12 bytes per parameter, sharded over data parallelism and, for tp2d, the n2
replicas), activations A L_s min(n_p, m) (the first 1F1B stage holds n_p microbatches in flight).
Feasible iff memory <= hbm_capacity.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from kernels.blocks import block_layers, data_parallel_group, expert_data_parallel_group
from kernels.collectives import (
    ALLGATHER,
    P2P,
    REDUCESCATTER,
    TWO_TIER,
    collective_time,
    summa_exposed,
    time_of,
)
from kernels.layers import Layer
from kernels.numerics import as_float, fdiv, pin, recip
from kernels.params import Array, Candidates, Metrics, Profile, RailOnlyProfile, System, Workload
from kernels.roofline import compute_time, exposed_memory, memory_time


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
    """Roofline plus communication of one layer in one direction (spec 3.1, 3.3, 3.4)."""
    flops, traffic, comm = (
        (layer.flops_f, layer.traffic_f, layer.comm_f)
        if forward
        else (layer.flops_b, layer.traffic_b, layer.comm_b)
    )
    t_c = compute_time(flops, layer.tensor, system)
    t_m = memory_time(traffic, system)
    if layer.panels is None:
        t_comm = sum((time_of(k, system, profile, 1.0, network) for k in comm), jnp.zeros_like(t_c))
    else:
        t_comm = summa_exposed(comm, layer.panels, jnp.maximum(t_c, t_m), system, profile, network)
    return LayerTime(t_c, exposed_memory(t_c, t_m), t_comm)


class BlockCost(NamedTuple):
    """Sums over the 14 layers of one block, for one microbatch."""

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


def block_cost(
    strategy: str,
    c: Candidates,
    w: Workload,
    system: System,
    profile: Profile,
    network: str = TWO_TIER,
    moe: bool = False,
) -> BlockCost:
    """Time, FLOPs and memory of one block for one microbatch.

    For an MoE model (`moe`, static) every moe_every-th block is an MoE block: the cost of the
    stage's average block, (1 - 1/moe_every) dense + (1/moe_every) MoE, field by field (exact for
    the sums over a stage, whose blocks the enumeration keeps a whole number of alternations).
    """
    if moe:
        dense = _block_cost(block_layers(strategy, c, w, system, profile), system, profile, network)
        sparse = _block_cost(block_layers(strategy, c, w, system, profile, moe=True), system, profile, network)
        f = recip(w.moe_every)
        return BlockCost(*(d + f * (s - d) for d, s in zip(dense, sparse)))
    return _block_cost(block_layers(strategy, c, w, system, profile), system, profile, network)


def _block_cost(layers, system: System, profile: Profile, network: str) -> BlockCost:
    fwd = [direction_time(x, True, system, profile, network) for x in layers]
    bwd = [direction_time(x, False, system, profile, network) for x in layers]

    def total(parts):
        out = parts[0]
        for p in parts[1:]:
            out = out + p
        return out

    t_f = total([x.comp + x.mem + x.comm for x in fwd])
    t_b = total([x.comp + x.mem + x.comm for x in bwd])
    ln1 = next(x for x in layers if x.name == "ln1")
    return BlockCost(
        t_f=t_f,
        t_b=t_b,
        comp=total([x.comp for x in fwd]) + total([x.comp for x in bwd]),
        mem=total([x.mem for x in fwd]) + total([x.mem for x in bwd]),
        comm=total([x.comm for x in fwd]) + total([x.comm for x in bwd]),
        flops=total([x.flops_f + x.flops_b for x in layers]),
        weight=total([x.weight for x in layers]),
        activation=total([x.activation for x in layers]),
        pipeline_message=ln1.activation,
        expert_weight=total([x.weight if x.expert else jnp.zeros_like(x.weight) for x in layers]),
    )


def pipeline_p2p(
    message: Array, c: Candidates, system: System, profile: Profile, network: str = TWO_TIER
) -> Array:
    """Mean time of one stage-boundary transfer (spec 5.3).

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
    per_link = recip(jnp.maximum(links, 1.0))
    mixed = (links - slow) * per_link * nvs + slow * per_link * slow_cost
    p = jnp.where(c.nvs_p == 1, ib, mixed)
    return jnp.where(c.n_p == 1, 0.0, p)


def evaluate_candidates(
    strategy: str,
    c: Candidates,
    w: Workload,
    system: System,
    profile: Profile,
    network: str = TWO_TIER,
    moe: bool = False,
) -> Metrics:
    """Iteration time, its breakdown, memory and feasibility of every candidate.

    `strategy`, `profile`, `network` and `moe` (the model has MoE blocks) are static; every field
    of `c`, `w` and `system` may be an array, and all broadcast together. Integers are converted to
    float64 here, once (`kernels.numerics`).
    """
    if isinstance(profile, RailOnlyProfile):
        if strategy != "tp1d":
            raise ValueError(f"profile railonly models Megatron PTD-P: strategy must be tp1d, not {strategy!r}")
        from kernels.railonly import as_metrics

        c, w, system = prepare(c, w, system)
        return as_metrics(c, w, system, profile, network)
    c, w, system = prepare(c, w, system)
    blk = block_cost(strategy, c, w, system, profile, network, moe)
    micro, blocks = stage_counts(c, w)
    n_p = c.n_p
    per_stage = micro * blocks

    t_pp = 2.0 * micro * pipeline_p2p(blk.pipeline_message, c, system, profile, network)
    t_core = (blk.t_f + blk.t_b) * per_stage + t_pp

    dp_group, dp_local = data_parallel_group(strategy, c)
    shared = blk.weight - blk.expert_weight
    t_ag = collective_time(ALLGATHER, shared, dp_group, dp_local, system, profile, network)
    t_rs = collective_time(REDUCESCATTER, shared, dp_group, dp_local, system, profile, network)
    if moe:  # expert weights: over the replicas holding the same experts, after the shared ones
        e_group, e_local = expert_data_parallel_group(c, w)
        t_ag = t_ag + collective_time(ALLGATHER, blk.expert_weight, e_group, e_local, system, profile, network)
        t_rs = t_rs + collective_time(REDUCESCATTER, blk.expert_weight, e_group, e_local, system, profile, network)
    t_dp = (
        t_ag
        + jnp.maximum(t_ag - blk.t_f, 0.0) * (blocks - 1.0)
        + t_rs
        + jnp.maximum(t_rs - blk.t_b, 0.0) * (blocks - 1.0)
    )
    t_bubble = (n_p - 1.0) * t_core * recip(micro)
    t = t_core + t_bubble + t_dp

    weights = blk.weight * blocks
    optimizer = 6.0 * (shared * blocks) * recip(dp_group)  # sharded over the data-parallel group
    if moe:
        optimizer = optimizer + 6.0 * (blk.expert_weight * blocks) * recip(e_group)
    activations = blk.activation * blocks * jnp.minimum(n_p, micro)
    memory = weights + weights + optimizer + activations
    return Metrics(
        iteration_time=t,
        throughput=w.global_batch * recip(t),
        memory=memory,
        feasible=memory <= system.hbm_capacity,
        t_compute=blk.comp * per_stage,
        t_memory=blk.mem * per_stage,
        t_tp_comm=blk.comm * per_stage,
        t_dp_comm=t_dp,
        t_pp_comm=t_pp,
        t_bubble=t_bubble,
        mem_weights=weights,
        mem_grads=weights,
        mem_optimizer=optimizer,
        mem_activations=activations,
        flops_per_gpu=blk.flops * per_stage,
    )


def layer_table(
    strategy: str, c: Candidates, w: Workload, system: System, profile: Profile, network: str = TWO_TIER,
    moe: bool = False,
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
