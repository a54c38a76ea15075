"""The vocabulary of communication shared by the collective kernels: collective kinds, network
models, and the two tiers of links a GPU talks over.

`kernels.collectives` (seed 001's two-tier times, and the dispatch to the other networks) and
`kernels.fabrics` (the hierarchical algorithms of the rail-only papers) both speak it; neither
imports the other's names back, so the two modules form no cycle.
"""

from __future__ import annotations

from typing import NamedTuple

from kernels.params import Array, System

# Collective kinds (static arguments of the kernels).
ALLGATHER = "allgather"
REDUCESCATTER = "reducescatter"
ALLREDUCE = "allreduce"
BROADCAST = "broadcast"
REDUCE = "reduce"
P2P = "p2p"
ALLTOALL = "alltoall"
KINDS = (ALLGATHER, REDUCESCATTER, ALLREDUCE, BROADCAST, REDUCE, P2P, ALLTOALL)

# Network models: seed 001's two tiers, and the fabrics of the rail-only papers (`kernels.fabrics`).
TWO_TIER = "two_tier"
RAIL_OPTIMIZED = "rail_optimized"
RAIL_ONLY = "rail_only"
ANY_TO_ANY = "any_to_any"
FABRICS = (RAIL_OPTIMIZED, RAIL_ONLY, ANY_TO_ANY)
NETWORKS = (TWO_TIER,) + FABRICS


class Links(NamedTuple):
    """The two tiers of a GPU's network (floats, any broadcastable shapes)."""

    c_f: Array  # GB/s per GPU inside the HB domain
    c_s: Array  # GB/s per GPU on the NIC network
    alpha_f: Array = 0.0  # s per HB transfer step
    alpha_s: Array = 0.0  # s per NIC transfer step


def links_of(system: System) -> Links:
    """The fabric links of a system: C_F = nvlink_bandwidth nvlink_eff, C_S = ib_bandwidth ib_eff
    nic_factor (GB/s per GPU), and the NVLink and InfiniBand latencies (s)."""
    return Links(
        c_f=system.nvlink_bandwidth * system.nvlink_eff,
        c_s=system.ib_bandwidth * system.ib_eff * system.nic_factor,
        alpha_f=system.nvlink_latency,
        alpha_s=system.ib_latency,
    )
