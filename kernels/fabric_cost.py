"""Switch and transceiver counts, cost and power of rail-optimized and rail-only NIC fabrics.

Seed 000 section 6.5 and Table 2; seed 002 section V-E, Eq. 4-5 and Table II; seed 003 "Network Cost
and Power Analysis". A cluster of N GPUs sits in HB domains of K GPUs, one NIC port per GPU; a rail
is the set of N/K GPUs with the same local rank in every domain. Each fabric is "a minimum layer
Clos network with the provided switch radix" (seed 002 V-E) with full bisection bandwidth:

- rail-optimized ("SOTA"): one Clos over all N GPUs;
- rail-only: one Clos per rail, K rails of R = N/K GPUs each, no spine joining the rails.

Folded Clos of radix k over H hosts (k even; a switch of a lower tier splits its ports k/2 down and
k/2 up, a top-tier switch points all k down):

    capacity of t tiers  C_t = k (k/2)^(t-1) = 2 (k/2)^t          (C_1 = k: one switch)
    tiers                t   = min { t >= 1 : H <= C_t }
    switches             N_SW = (t - 1) ceil(H / (k/2)) + ceil(H / k)
    transceivers         N_TR = 2 t H
    switch ports         P    = k N_SW

Full bisection puts H links between every pair of adjacent levels (NICs -> tier 1 -> ... -> tier t),
so a tier below the top needs H down and H up ports and the top tier H down ports, which gives the
switch count. Every link is optical with a transceiver at both ends, the NIC end included: t link
levels of H links make 2 t H transceivers. (Counting switch-to-switch links only would give
4N = 131072 for N = 32768 at radix 64, one transceiver per switch port 163840; Table 2 prints
196608 = 6N.)

Rail-only with R = N/K GPUs per rail and t_R = tiers(R, k):

    t_R = 1   a rail fits one switch; floor(k/R) whole rails share a switch, partitioned between
              them:                         N_SW = ceil(K / floor(k/R))
    t_R >= 2  the K rails' Clos networks share partitioned switches tier by tier:
                                            N_SW = (t_R - 1) ceil(N / (k/2)) + ceil(N / k)
    N_TR = 2 t_R N

Sharing is what Table 2 needs at N = 32768, k = 256: two 128-GPU rails on each 256-port switch, 128
switches. The multi-tier count is the per-tier port-count minimum; it differs from K separate Clos
networks, K ((t_R - 1) ceil(R / (k/2)) + ceil(R / k)), only when R is not a multiple of k (separate
rails would strand part-used switches). Every multi-tier rail of Table 2 fills its switches. With
K = 1 (a single rail) rail-only equals rail-optimized; for N a multiple of K it never needs more
switches, ports or transceivers.

Table 2 (K = 256) by this rule, N = 32768:
    k =  64: SOTA t = 3 (2 * 32^2 = 2048 < N <= 2 * 32^3), N_SW = 2 * 1024 + 512 = 2560, N_TR = 6N;
             rail R = 128, t_R = 2, N_SW = 1024 + 512 = 1536, N_TR = 4N = 131072
    k = 128: SOTA t = 3, N_SW = 2 * 512 + 256 = 1280; rail t_R = 1, one rail per switch, 256, 2N
    k = 256: SOTA t = 2 (N = 2 * 128^2), N_SW = 256 + 128 = 384, N_TR = 4N; rail t_R = 1, two rails
             per switch, 128, 2N
and N = 65536 likewise (5120/3072, 2560/1536, 1280/256 switches).

Cost and power (seed 002 Eq. 4-5) charge each switch its price (power) per port times its radix and
each transceiver its own:

    total = price_port k N_SW + price_TR N_TR = price_port P + price_TR N_TR

Integers are int64 (importing `kernels` turns on 64-bit mode); totals are float64. All functions
broadcast over arrays of N, K and k. The caller keeps N a multiple of K, K <= N and k even >= 4.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax

from kernels.params import Array


class Fabric(NamedTuple):
    """Equipment of one NIC fabric (int64 arrays, broadcast shape of the inputs)."""

    tiers: Array  # switch tiers (of each rail's Clos for rail-only)
    switches: Array  # N_SW
    ports: Array  # switch ports, radix * N_SW
    transceivers: Array  # N_TR


def _int(x) -> Array:
    return jnp.asarray(x, dtype=jnp.int64)


def _ceil_div(a: Array, b: Array) -> Array:
    return -(-a // b)


def _needs_tier(state) -> Array:
    hosts, half, tiers, capacity = state
    return (hosts > capacity) & (half > 1)


def _tiers_cond(state) -> Array:
    return jnp.any(_needs_tier(state))


def _tiers_body(state):
    hosts, half, tiers, capacity = state
    grow = _needs_tier(state)
    tiers = jnp.where(grow, tiers + 1, tiers)
    return hosts, half, tiers, jnp.where(grow, capacity * half, capacity)


def clos_tiers(hosts, radix) -> Array:
    """t = min{t >= 1 : H <= 2 (k/2)^t}: tiers of a minimum-tier folded Clos (module docstring).

    Grows the capacity k (k/2)^(t-1) one tier at a time, in integers, until every element fits. A
    radix below 4 cannot grow past one switch and is left at one tier.
    """
    hosts, radix = jnp.broadcast_arrays(_int(hosts), _int(radix))
    state = (hosts, radix // 2, jnp.ones_like(hosts), radix)
    return lax.while_loop(_tiers_cond, _tiers_body, state)[2]


def clos_switches(hosts, radix, tiers=None) -> Array:
    """N_SW = (t - 1) ceil(H / (k/2)) + ceil(H / k) of a t-tier folded Clos over H hosts."""
    hosts, radix = _int(hosts), _int(radix)
    tiers = clos_tiers(hosts, radix) if tiers is None else _int(tiers)
    half = jnp.maximum(radix // 2, 1)
    return (tiers - 1) * _ceil_div(hosts, half) + _ceil_div(hosts, radix)


def transceivers(hosts, tiers) -> Array:
    """N_TR = 2 t H: H links per level over t levels, a transceiver at each end of each link."""
    return 2 * _int(tiers) * _int(hosts)


def rail_optimized(gpus, radix) -> Fabric:
    """The rail-optimized ("SOTA") fabric: one full-bisection Clos over all N GPUs."""
    gpus, radix = jnp.broadcast_arrays(_int(gpus), _int(radix))
    tiers = clos_tiers(gpus, radix)
    switches = clos_switches(gpus, radix, tiers)
    return Fabric(tiers, switches, radix * switches, transceivers(gpus, tiers))


def rail_only(gpus, hb_domain, radix) -> Fabric:
    """The rail-only fabric: K = hb_domain rails of N/K GPUs, one Clos per rail, no spine.

    One-tier rails pack floor(k/R) to a switch; multi-tier rails share partitioned switches tier by
    tier (module docstring).
    """
    gpus, hb_domain, radix = jnp.broadcast_arrays(_int(gpus), _int(hb_domain), _int(radix))
    per_rail = gpus // hb_domain
    tiers = clos_tiers(per_rail, radix)
    rails_per_switch = jnp.maximum(radix // jnp.maximum(per_rail, 1), 1)
    packed = _ceil_div(hb_domain, rails_per_switch)
    pooled = clos_switches(gpus, radix, tiers)
    switches = jnp.where(tiers == 1, packed, pooled)
    return Fabric(tiers, switches, radix * switches, transceivers(gpus, tiers))


def equipment_total(fabric: Fabric, per_port, per_transceiver) -> Array:
    """Seed 002 Eq. 4 (cost) and Eq. 5 (power): per_port P + per_transceiver N_TR.

    `per_port` is the price (or power) of one switch port, so a switch costs per_port * radix;
    units are those of the arguments (USD, W).
    """
    per_port = jnp.asarray(per_port, dtype=jnp.float64)
    per_transceiver = jnp.asarray(per_transceiver, dtype=jnp.float64)
    return per_port * fabric.ports + per_transceiver * fabric.transceivers


def savings(baseline, alternative) -> Array:
    """Fraction saved by `alternative` over `baseline`: 1 - alternative / baseline."""
    baseline = jnp.asarray(baseline, dtype=jnp.float64)
    return 1.0 - jnp.asarray(alternative, dtype=jnp.float64) / baseline
