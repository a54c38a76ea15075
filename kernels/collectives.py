"""Collective communication times on the two-tier NVSwitch / InfiniBand network.

Seed 001 section III-B and Table A3; spec sections 3.2 and 3.3. A collective moves a volume V (GB,
always the full unsharded tensor: the gathered size of an allgather, the pre-scatter size of a
reduce-scatter, a whole panel of a broadcast/reduce, the message of a point-to-point) among a group
of n GPUs, of which tau share one NVS domain (so the group spans nodes = floor(n/tau) domains).

With alpha_f, beta_f = nvlink_latency, nvlink_bandwidth * nvlink_eff and alpha_s, beta_s the same
for InfiniBand, and the ring factor c = (n-1)/n (allgather, reduce-scatter, allreduce) or 1
(broadcast, reduce):

    V = 0 or n = 1           0
    point-to-point (n = 2)   tau = 1: alpha_s + V/beta_s;  tau > 1: alpha_f + V/beta_f
    tau = 1 (all on IB)      alpha_s (n-1) + c V / beta_s
    nodes = 1 (one domain)   alpha_f (n-1) + c V / beta_f
    otherwise (two tiers)    k max(c V / (nic_factor tau beta_s), c V / beta_f)
                               + alpha_s (nodes - 1) + alpha_f (n - nodes)

The InfiniBand bandwidth of a two-tier collective scales with the group's GPUs per domain times the
NICs per GPU (the paper's n_NIC rings). An allreduce is a reduce-scatter plus an allgather: the
default profile charges both halves on every tier (k = 2 on the whole expression); the reference
charges k = 2 on the bandwidth term of the two-tier case only (profile switch
`allreduce_doubled_only_across_tiers`). A two-tier all-to-all is timed as on a rail-optimized
fabric (`kernels.fabrics`): the InfiniBand network of seed 001 has full bisection.

The other networks (`NETWORKS`) are the fabrics of the rail-only papers (`kernels.fabrics`): the
same group is an x-by-y grid, x = tau GPUs in each of y = n / tau HB domains, with C_F =
nvlink_bandwidth * nvlink_eff, C_S = ib_bandwidth * ib_eff * nic_factor and the same latencies, and
its collectives are the hierarchical algorithms of seed 000 (Eq. 1). Every group of the search's
placements occupies the same local ranks in each of its domains (the domain holds a box of the
parallel grid, and pipeline stages snake through alternate domains), so it is rail-aligned: its
traffic between domains stays on rails and rail_only costs what rail_optimized does, except for
all-to-all, whose cross-rail shards are forwarded through the HB domain.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from kernels import fabrics
from kernels.comm_types import (  # noqa: F401  (the kinds and networks are imported from here too)
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BROADCAST,
    KINDS,
    NETWORKS,
    P2P,
    RAIL_OPTIMIZED,
    REDUCE,
    REDUCESCATTER,
    TWO_TIER,
    links_of,
)
from kernels.numerics import as_float, fdiv, recip
from kernels.params import Array, Profile, System


class Collective(NamedTuple):
    """One collective of a layer: `kind` is static, the rest are arrays. `steps` repeats it: a
    ring exchange of cp - 1 point-to-point steps (tp1d's context parallelism) is one P2P with
    steps = cp - 1, its latency paid at every step."""

    kind: str
    volume: Array  # GB, full (unsharded) tensor
    group: Array  # GPUs in the collective (int)
    local: Array  # GPUs of the group inside one NVS domain (int)
    steps: Array | float = 1.0  # times it runs back to back
    cross: Array | float = 1.0  # all-to-all: the share of its shards to other domains it sends after
    #                             deduplicating them per destination domain (`fabrics.alltoall_time`); 1: all
    context: bool = False  # static: context parallelism's K, V exchange over tp1d's cp = n2 group
    #                        (`kernels.attention.context_exchange`), traffic type CP (`kernels.traffic`)


def collective_time(
    kind: str,
    volume: Array,
    group: Array,
    local: Array,
    system: System,
    profile: Profile,
    network: str = TWO_TIER,
    cross: Array | float = 1.0,
) -> Array:
    """Time (s) of one collective on `network` (static); see the module docstring. `cross`: an
    all-to-all's deduplicated share of its shards to other domains (`Collective.cross`)."""
    if kind not in KINDS:
        raise ValueError(f"collective kind {kind!r} is not one of {KINDS}")
    if network not in NETWORKS:
        raise ValueError(f"network {network!r} is not one of {NETWORKS}")
    if network != TWO_TIER or kind == ALLTOALL:
        fabric = RAIL_OPTIMIZED if network == TWO_TIER else network
        x = as_float(local)
        return fabrics.collective_time(kind, volume, x, fdiv(group, x), links_of(system), fabric, cross=cross)
    alpha_f = system.nvlink_latency
    inv_beta_f = recip(system.nvlink_bandwidth * system.nvlink_eff)
    alpha_s = system.ib_latency
    beta_s = system.ib_bandwidth * system.ib_eff
    inv_beta_s = recip(beta_s)
    volume = jnp.asarray(volume, dtype=jnp.float64)
    group = as_float(group)
    local = as_float(local)
    active = (volume != 0) & (group > 1)

    if kind == P2P:
        t = jnp.where(local == 1, alpha_s + volume * inv_beta_s, alpha_f + volume * inv_beta_f)
        return jnp.where(active, t, 0.0)

    n = group
    tau = local
    nodes = fdiv(group, local)
    ring = 1.0 if kind in (BROADCAST, REDUCE) else (n - 1.0) * recip(jnp.maximum(n, 1.0))
    cv = ring * volume
    t_ib = alpha_s * (n - 1.0) + cv * inv_beta_s
    t_nv = alpha_f * (n - 1.0) + cv * inv_beta_f
    t_bw = jnp.maximum(cv * recip(system.nic_factor * tau * beta_s), cv * inv_beta_f)
    t_lat = alpha_s * (nodes - 1.0) + alpha_f * (n - nodes)
    if kind == ALLREDUCE:
        if profile.allreduce_doubled_only_across_tiers:
            t_mixed = 2.0 * t_bw + t_lat
        else:
            t_ib, t_nv, t_mixed = 2.0 * t_ib, 2.0 * t_nv, 2.0 * (t_bw + t_lat)
    else:
        t_mixed = t_bw + t_lat
    t = jnp.where(local == 1, t_ib, jnp.where(nodes == 1, t_nv, t_mixed))
    return jnp.where(active, t, 0.0)


def time_of(
    c: Collective, system: System, profile: Profile, scale: Array | float = 1.0, network: str = TWO_TIER
) -> Array:
    """Time of a `Collective` (all its `steps`), its volume multiplied by `scale` (1/n_b for one
    SUMMA panel)."""
    t = collective_time(c.kind, c.volume * scale, c.group, c.local, system, profile, network, c.cross)
    return t if isinstance(c.steps, float) and c.steps == 1.0 else t * c.steps


def summa_exposed(
    collectives: tuple[Collective, ...],
    panels: Array,
    t_busy: Array,
    system: System,
    profile: Profile,
    network: str = TWO_TIER,
) -> Array:
    """Exposed communication of a SUMMA layer with pipelined panels (spec section 3.3).

    One panel's set of collectives takes t_one = sum_j T(V_j / n_b, ...) (latencies paid per panel).
    The first panel is a prologue; the n_b panels then overlap the layer's whole roofline time
    t_busy = max(T_c, T_m):

        T_comm = t_one + max(n_b t_one - t_busy, 0)
    """
    inv = recip(panels)
    t_one = sum(time_of(c, system, profile, inv, network) for c in collectives)
    return t_one + jnp.maximum(panels * t_one - t_busy, 0.0)
