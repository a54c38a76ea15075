"""Pure JAX cost kernels of the transformer training performance model.

Everything here is a function of arrays: candidate configurations (int64), model shape (int64) and
hardware parameters (float64) broadcast against each other, so one call evaluates a whole table of
configurations, optionally times a grid of systems. No I/O, no config parsing, no Python loop over
candidates.

Units throughout: FLOPs in TFLOP, memory and message volumes in GB (1e9 bytes), bandwidths in GB/s,
FLOP rates in TFLOP/s, times in seconds.

The kernels expect JAX's 64-bit mode (parity with the reference model needs float64 costs and
int64 shard sizes), but importing them changes no JAX option: run them under
`jax.enable_x64(True)` or after `dse.configure()` (`dse.runtime`).
"""

from kernels.params import (
    Candidates,
    Metrics,
    Workload,
    Profile,
    System,
    PROFILES,
    STRATEGIES,
)
from kernels.iteration import evaluate_candidates

__all__ = [
    "Candidates",
    "Metrics",
    "Workload",
    "Profile",
    "System",
    "PROFILES",
    "STRATEGIES",
    "evaluate_candidates",
]
