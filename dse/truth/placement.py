"""Where a measured run ran: the system preset of its GPU name, and how Megatron's rank order lays its parallel groups on nodes."""

from __future__ import annotations

import math

import numpy as np

from dse.spec.specs import SpecError, system_presets

#: GPU names of measured-run tables -> system presets (case-insensitive; a preset name is accepted too).
GPU_ALIASES = {"a100-80gb": "dgx_a100_80gb", "h100-80gb": "dgx_h100", "h100-sxm": "dgx_h100"}



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
    capacity c (starting at `node_size`), a group of degree n gets g = gcd(n, c) GPUs in a node and
    leaves c / g; once a group does not fit wholly (g < n), every later group gets 1, since its next
    member sits in another node. So tp=16 on 8-GPU nodes gives nvs1 = 8 (the group spans two nodes)
    and 1 for the others; tp=2, dp=4, pp=2 on 8 gives nvs1 = 2, nvs_d = 4, nvs_p = 1. A degree that
    shares no factor with the capacity (tp=3 on 8) gets 1: its groups straddle nodes unevenly and are
    counted as wholly across nodes.

    Returns nvs1 (tensor), nvs_cp (context), nvs_d (data), nvs_p (pipeline).
    """
    degrees = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "node_size": node_size}
    for k, v in degrees.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise SpecError(f"{k} = {v!r}: must be an integer >= 1")
    out = {}
    capacity, whole = int(node_size), True
    for key, n in (("nvs1", tp), ("nvs_cp", cp), ("nvs_d", dp), ("nvs_p", pp)):
        g = math.gcd(int(n), capacity) if whole else 1
        out[key] = g
        capacity //= g
        whole = whole and g == n
    return {k: out[k] for k in ("nvs1", "nvs_p", "nvs_d", "nvs_cp")}
