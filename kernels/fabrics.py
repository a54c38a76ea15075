"""Collective times on rail-optimized, rail-only and any-to-any GPU fabrics.

Seed 000 section 3.2 (Eq. 1), section 4 and Appendices A, D; seed 002 sections III-B and IV-B
(Eq. 1-3). A cluster is a set of HB domains (NVLink/NVSwitch) of K GPUs each; the GPU of local rank
r in every domain hangs on rail r of the NIC network. The three fabrics:

    rail_optimized  rails joined by spine switches: any two GPUs in different domains talk at the
                    NIC rate C_S (full bisection).
    rail_only       no spine: only GPUs of the same rail talk over the NIC network; traffic between
                    rails is forwarded through an HB domain first (the "bandwidth tax").
    any_to_any      the ideal K = N: the whole group sits in one HB domain, every transfer runs at
                    the HB rate C_F.

A group is laid out as an x-by-y grid: x GPUs in each of y HB domains. It is *rail-aligned* when
its GPUs occupy the same x local ranks in every one of its domains, so that each grid column is one
rail.
Megatron's PTD-P mapping (seed 000 section 3.2) is rail-aligned; then the hierarchical collectives
and pipeline transfers never leave their rails and cost the same on rail_only as on rail_optimized.

A two-tier "group of n GPUs, tau of them in one domain" maps to x = tau, y = n // tau (see `grid`).

Links (all arrays, broadcast): C_F the HB-domain bandwidth per GPU, C_S the NIC bandwidth per GPU
(GB/s); alpha_F, alpha_S the latency of one HB or NIC transfer step (s). Volumes in GB, times in s.
Every kernel returns exactly 0 for a group of one GPU (x y = 1) or a zero volume.

The any_to_any bounds (any_to_any <= rail_optimized) assume what makes an HB domain one: C_F >= C_S
and alpha_F <= alpha_S for allgather, reduce-scatter, allreduce and point-to-point; C_F >= 2 C_S and
alpha_F <= alpha_S / 2 for the all-to-all (a K = N fabric has no separate NIC port to overlap with).
"""

from __future__ import annotations

import jax.numpy as jnp

from kernels.comm_types import (  # noqa: F401  (the kinds, fabrics and Links are imported from here too)
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    ANY_TO_ANY,
    BROADCAST,
    FABRICS,
    KINDS,
    P2P,
    RAIL_ONLY,
    RAIL_OPTIMIZED,
    REDUCE,
    REDUCESCATTER,
    Links,
)
from kernels.numerics import as_float, recip
from kernels.params import Array


def check_fabric(fabric: str) -> str:
    """`fabric` if it is one of FABRICS, else ValueError naming the valid ones."""
    if fabric not in FABRICS:
        raise ValueError(f"fabric = {fabric!r}: must be one of {', '.join(FABRICS)}")
    return fabric


def grid(group: Array, local: Array) -> tuple[Array, Array]:
    """(x, y) of a group of `group` GPUs with `local` of them per HB domain: x = local,
    y = group // local. `local` must divide `group`."""
    group = jnp.asarray(group)
    local = jnp.asarray(local)
    return local, group // jnp.maximum(local, 1)


def _floats(volume, x, y):
    v = jnp.asarray(volume, dtype=jnp.float64)
    xi, yi = jnp.asarray(x), jnp.asarray(y)
    active = (v != 0) & (xi * yi > 1)
    return v, xi.astype(jnp.float64), yi.astype(jnp.float64), active


def allgather_time(
    volume: Array,
    x: Array,
    y: Array,
    links: Links,
    fabric: str = RAIL_OPTIMIZED,
    aligned: Array | bool = True,
) -> Array:
    """Hierarchical AllGather of `volume` GB (the gathered size) on an x-by-y grid.

    Seed 000 Eq. 1 (seed 002 Eq. 1), with one latency per ring step. Phase 1 gathers along each
    rail (y GPUs, shards of V/(x y)), phase 2 inside each HB domain (x GPUs, shards of V/x):

        rail_optimized, rail_only (aligned):
            T = (y-1) (alpha_S + V/(x y C_S)) + (x-1) (alpha_F + V/(x C_F))
        rail_only, not rail-aligned: each phase-1 step is forwarded through the HB domain first
            T += (y-1) (alpha_F + V/(x y C_F))
        any_to_any (K = N): both phases on the HB fabric
            T = (y-1) (alpha_F + V/(x y C_F)) + (x-1) (alpha_F + V/(x C_F))

    Without latency any_to_any is the flat ring (x y - 1) V / (x y C_F). `aligned` (bool array)
    only matters on rail_only. Reduce-scatter runs the same schedule inverted
    (`reducescatter_time`).
    """
    check_fabric(fabric)
    v, xf, yf, active = _floats(volume, x, y)
    across = (yf - 1.0) * v * recip(xf * yf)
    within = (xf - 1.0) * (links.alpha_f + v * recip(xf * links.c_f))
    if fabric == ANY_TO_ANY:
        t = (yf - 1.0) * links.alpha_f + across * recip(links.c_f) + within
    else:
        t = (yf - 1.0) * links.alpha_s + across * recip(links.c_s) + within
        if fabric == RAIL_ONLY:
            tax = (yf - 1.0) * links.alpha_f + across * recip(links.c_f)
            t = t + jnp.where(jnp.asarray(aligned), 0.0, tax)
    return jnp.where(active, t, 0.0)


def reducescatter_time(
    volume: Array,
    x: Array,
    y: Array,
    links: Links,
    fabric: str = RAIL_OPTIMIZED,
    aligned: Array | bool = True,
) -> Array:
    """Hierarchical ReduceScatter of `volume` GB (the size before scattering): the AllGather
    schedule inverted, hence the same time (seed 000 section 3.2). Its parameters are
    `allgather_time`'s on purpose: the two are one schedule, named apart for their callers."""
    return allgather_time(volume, x, y, links, fabric, aligned)


def allreduce_time(
    volume: Array,
    x: Array,
    y: Array,
    links: Links,
    fabric: str = RAIL_OPTIMIZED,
    aligned: Array | bool = True,
) -> Array:
    """AllReduce of `volume` GB = ReduceScatter + AllGather (seed 000 section 3.2 and Eq. 7):
    T = 2 AGtime(V, x, y), latencies included."""
    return 2.0 * allgather_time(volume, x, y, links, fabric, aligned)


def p2p_time(
    volume: Array,
    x: Array,
    y: Array,
    links: Links,
    fabric: str = RAIL_OPTIMIZED,
    aligned: Array | bool = True,
) -> Array:
    """One message of `volume` GB between a pair of GPUs: x = 2, y = 1 (same HB domain) or
    x = 1, y = 2 (two domains); x = y = 1 is no transfer.

        same domain, or any_to_any:      alpha_F + V/C_F
        two domains, rail_optimized:     alpha_S + V/C_S
        two domains, rail_only:          alpha_S + V/C_S, plus alpha_F + V/C_F when the two GPUs
                                         are on different rails (forwarded through the sender's
                                         HB domain, seed 000 section 4)

    Pipeline stages placed on the same local ranks (seed 000 section 3.2) are rail-aligned.
    """
    check_fabric(fabric)
    v, _, yf, active = _floats(volume, x, y)
    hb = links.alpha_f + v * recip(links.c_f)
    nic = links.alpha_s + v * recip(links.c_s)
    if fabric == ANY_TO_ANY:
        across = hb
    elif fabric == RAIL_ONLY:
        across = nic + jnp.where(jnp.asarray(aligned), 0.0, hb)
    else:
        across = nic
    return jnp.where(active, jnp.where(yf > 1.0, across, hb), 0.0)


def broadcast_time(
    volume: Array,
    x: Array,
    y: Array,
    links: Links,
    fabric: str = RAIL_OPTIMIZED,
) -> Array:
    """Broadcast of `volume` GB (a whole panel) from one GPU to an x-by-y grid; a reduce to one
    GPU runs the same schedule inverted and takes the same time. The schedule a collective library
    uses on each layout:

        one domain (y = 1):   pipelined chain through the x GPUs    (x-1) alpha_F + V/C_F
        one rail (x = 1):     pipelined chain through the y GPUs    (y-1) alpha_S + V/C_S
        both:                 scatter-allgather (van de Geijn): the root scatters V into x shards
                              inside its domain, each shard runs down its own rail as a pipelined
                              chain, every domain allgathers its shards
                              2 (x-1) (alpha_F + V/(x C_F)) + (y-1) alpha_S + V/(x C_S)

    On one tier these are seed 001's two-tier broadcast times. The rail phase stays on each rail,
    so rail_only costs what rail_optimized does; any_to_any runs every phase at the HB rate
    (alpha_F, C_F). A grid of one GPU or a zero volume costs exactly 0.
    """
    check_fabric(fabric)
    v, xf, yf, active = _floats(volume, x, y)
    inv_f = recip(links.c_f)
    alpha_s, inv_s = (links.alpha_f, inv_f) if fabric == ANY_TO_ANY else (links.alpha_s, recip(links.c_s))
    chain_domain = (xf - 1.0) * links.alpha_f + v * inv_f
    chain_rail = (yf - 1.0) * alpha_s + v * inv_s
    shard = v * recip(xf)
    both = 2.0 * (xf - 1.0) * (links.alpha_f + shard * inv_f) + (yf - 1.0) * alpha_s + shard * inv_s
    t = jnp.where(yf <= 1.0, chain_domain, jnp.where(xf <= 1.0, chain_rail, both))
    return jnp.where(active, t, 0.0)


def alltoall_time(
    volume: Array,
    x: Array,
    y: Array,
    links: Links,
    fabric: str = RAIL_OPTIMIZED,
    cross: Array | float = 1.0,
) -> Array:
    """Uniform all-to-all on a rail-aligned x-by-y grid; every GPU sends `volume` GB in all,
    a shard D = V/(x y) to each member (itself included). Seed 002 Eq. 2-3, seed 000 Eq. 20-21.

    Direct schedule (each GPU sends every shard straight to its destination, HB and NIC ports in
    parallel):
        direct(C, alpha) = max((x-1) (alpha_F + D/C_F), x (y-1) (alpha + D/C))
    Two-step schedule (all-to-all inside the HB domain with shards y D, then along the rail with
    shards x D; the HB step carries the forwarded traffic, the bandwidth tax):
        two_step(C, alpha) = (x-1) (alpha_F + y D/C_F) + (y-1) (alpha + x D/C)

        rail_optimized  min(direct(C_S, alpha_S), two_step(C_S, alpha_S))   (Eq. 2 at zero latency)
        rail_only       two_step(C_S, alpha_S)                              (Eq. 3)
        any_to_any      min((x y - 1) (alpha_F + D/C_F), two_step(C_F, alpha_F))

    A fabric runs whichever schedule it supports best; with zero latency the direct one always
    wins on rail_optimized. The slowdown of rail_only over rail_optimized at zero latency is
    y (x-1) C_S / (x (y-1) C_F), which is C_S/C_F where y (x-1) = x (y-1), i.e. x = y.

    `cross` < 1 (DeepSeek-V3's node-limited dispatch, `Profile.ep_node_limit`): the tokens bound for
    another domain cross once per domain and are forwarded inside it, so the exchange runs the
    two-step schedule with its inter-domain step carrying `cross` of its shards, x D cross each,
    on every fabric (the direct schedule cannot deduplicate); `cross` = 1: as above.
    """
    check_fabric(fabric)
    v, xf, yf, active = _floats(volume, x, y)
    d = v * recip(xf * yf)
    inv_f, inv_s = recip(links.c_f), recip(links.c_s)
    hb_step = (xf - 1.0) * (links.alpha_f + yf * d * inv_f)
    deduplicated = not is_one(cross)  # static: the search's kernels without the switch keep one schedule min
    along = xf * d * as_float(cross) if deduplicated else xf * d  # an inter-domain step's shard
    if fabric == ANY_TO_ANY:
        direct = (xf * yf - 1.0) * (links.alpha_f + d * inv_f)
        two_step = hb_step + (yf - 1.0) * (links.alpha_f + along * inv_f)
    else:
        two_step = hb_step + (yf - 1.0) * (links.alpha_s + along * inv_s)
        if fabric == RAIL_ONLY:  # the two-step schedule only
            return jnp.where(active, two_step, 0.0)
        direct = jnp.maximum(
            (xf - 1.0) * (links.alpha_f + d * inv_f),
            xf * (yf - 1.0) * (links.alpha_s + d * inv_s),
        )
    t = jnp.minimum(direct, two_step)
    if deduplicated:  # the direct schedule cannot deduplicate
        t = jnp.where(as_float(cross) < 1.0, two_step, t)
    return jnp.where(active, t, 0.0)


def is_one(share) -> bool:
    """Whether an all-to-all's deduplicated share (`Collective.cross`) is the static 1.0 of no
    deduplication (a traced or array share is taken as possibly below 1)."""
    return isinstance(share, float) and share == 1.0


def collective_time(
    kind: str,
    volume: Array,
    x: Array,
    y: Array,
    links: Links,
    fabric: str = RAIL_OPTIMIZED,
    aligned: Array | bool = True,
    cross: Array | float = 1.0,
) -> Array:
    """Time (s) of one collective of `kind` (static: one of KINDS) on `fabric`.

    All-to-all groups are taken as rail-aligned (`aligned` is ignored for them); `cross` is an
    all-to-all's deduplicated share of its shards to other domains (`alltoall_time`).
    """
    if kind not in KINDS:
        raise ValueError(f"collective kind = {kind!r}: must be one of {', '.join(KINDS)}")
    if kind == ALLTOALL:
        return alltoall_time(volume, x, y, links, fabric, cross)
    if kind in (BROADCAST, REDUCE):
        return broadcast_time(volume, x, y, links, fabric)
    fn = {
        ALLGATHER: allgather_time,
        REDUCESCATTER: reducescatter_time,
        ALLREDUCE: allreduce_time,
        P2P: p2p_time,
    }[kind]
    return fn(volume, x, y, links, fabric, aligned)


def alltoall_slowdown(x: Array, y: Array, links: Links) -> Array:
    """Relative all-to-all slowdown of rail_only over rail_optimized, T_ro / T_opt - 1, for a unit
    volume (seed 002 section IV-B). Zero latency gives y (x-1) C_S / (x (y-1) C_F); with latency
    the ratio depends on the volume, and this is its value for 1 GB."""
    opt = alltoall_time(1.0, x, y, links, RAIL_OPTIMIZED)
    ro = alltoall_time(1.0, x, y, links, RAIL_ONLY)
    return jnp.where(opt > 0, ro / jnp.where(opt > 0, opt, 1.0) - 1.0, 0.0)
