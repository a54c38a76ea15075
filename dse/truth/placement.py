"""Where a measured run ran: the system preset of its GPU name, and how Megatron's rank order lays its parallel groups on nodes."""

from __future__ import annotations

import math

import numpy as np

from dse.spec.specs import SpecError, system_presets

#: GPU names of measured-run tables -> system presets (case-insensitive; a preset name is accepted too).
GPU_ALIASES = {"a100-80gb": "dgx_a100_80gb", "h100-80gb": "dgx_h100", "h100-sxm": "dgx_h100",
               "h100-96gb": "grand_teton_h100", "h200-sxm": "dgx_h200", "h800": "dgx_h800", "b200": "dgx_b200",
               "gb200": "gb200_nvl72", "b300": "dgx_b300", "gb300": "gb300_nvl72"}



def resolve_gpu(name: str) -> str:
    """The system preset for a `gpu` value: an alias of `GPU_ALIASES` or a preset name, any case."""
    key = str(name).strip().lower()
    if key in GPU_ALIASES:
        return GPU_ALIASES[key]
    if key in system_presets():
        return key
    raise SpecError(f"gpu = {name!r}: {gpu_rule()}")


def gpu_rule() -> str:
    return (f"unknown; valid: {', '.join(a.upper() for a in GPU_ALIASES)} or a system preset "
            f"({', '.join(system_presets())})")


def megatron_placement(tp: int, cp: int, dp: int, pp: int, node_size: int) -> dict[str, int]:
    """GPUs of each parallel group inside one node (NVSwitch domain) under Megatron's rank order.

    Megatron numbers ranks tensor-parallel fastest, then context, then data, then pipeline, and fills
    nodes with consecutive ranks. Walking the groups in that order with the node's remaining
    capacity c (starting at `node_size`), a group of degree n that c holds a whole number of times
    (n divides c) or that fills whole nodes (c divides n) gets g = gcd(n, c) GPUs in a node and
    leaves c / g; once a group does not fit wholly (g < n), every later group gets 1, since its next
    member sits in another node. So tp=16 on 8-GPU nodes gives nvs1 = 8 (the group spans two nodes)
    and 1 for the others; tp=2, dp=4, pp=2 on 8 gives nvs1 = 2, nvs_d = 4, nvs_p = 1.

    A degree the capacity does not divide evenly (a 72-GPU NVLink domain with tp = 8 leaves room for
    9 data-parallel ranks) is laid out hierarchically: consecutive ranks fill each node, so a group
    of n > c ranks has up to c in one node (64 data-parallel ranks of stride 2 on 72 GPUs: 36 and
    28), and a group of n < c ranks that c does not hold a whole number of times straddles two nodes
    in some places (8 of stride 8 on 72: 1 and 7 for the second pipeline stage's groups) unless all
    of them fit in the first node (64 data-parallel ranks and nothing else on 72). The slowest
    group sets the pace of a collective, so it is counted as evenly split: g is the largest divisor
    of n that is at most c (n > c) or at most n / 2 (n < c): 32 and 4 in the two examples, where
    gcd(n, c) would give 4 and 1, as if nearly every member sat in its own node. A degree that shares
    no factor with the capacity and has no such divisor gets 1.

    Returns nvs1 (tensor), nvs_cp (context), nvs_d (data), nvs_p (pipeline).
    """
    degrees = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "node_size": node_size}
    for k, v in degrees.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise SpecError(f"{k} = {v!r}: must be an integer >= 1")
    out = {}
    capacity, whole = int(node_size), True
    order = (("nvs1", tp), ("nvs_cp", cp), ("nvs_d", dp), ("nvs_p", pp))
    for i, (key, n) in enumerate(order):
        n = int(n)
        later = math.prod(int(m) for _, m in order[i + 1:])  # groups of this kind, one after another
        if not whole:
            g = 1
        elif n * later <= capacity:  # every group of this kind inside the first node
            g = n
        elif capacity % n == 0 or n % capacity == 0:
            g = math.gcd(n, capacity)
        else:  # laid out hierarchically: the largest even split of the group over the nodes it spans
            bound = capacity if n > capacity else n // 2
            g = max(d for d in range(1, bound + 1) if n % d == 0) if bound >= 1 else 1
        out[key] = g
        capacity //= g  # the node's room, in groups of the levels placed so far
        whole = whole and g == n
    return {k: out[k] for k in ("nvs1", "nvs_p", "nvs_d", "nvs_cp")}
