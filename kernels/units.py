"""Units of the cost model, and the two figures every result derives from its iteration time.

The kernels count FLOPs in TFLOP, memory and message volumes in GB (1e9 bytes), bandwidths in GB/s,
FLOP rates in TFLOP/s and times in seconds. A quantity in plain units times its constant here is in
the model's units (a layer's FLOPs times TFLOP are TFLOP; its bytes times GB are GB).
"""

from __future__ import annotations

from kernels.params import Array

TFLOP = 1e-12  # TFLOP per FLOP
GB = 1e-9  # GB per byte
BYTES_PER_GB = 1e9
GBPS_PER_GB_S = 8.0  # Gbps per GB/s
KIB = 1024  # bytes per KiB
SECONDS_PER_DAY = 86400.0


def throughput(global_batch: Array, iteration_time: Array) -> Array:
    """Samples per second: the global batch over the iteration time."""
    return global_batch / iteration_time


def training_days(samples: Array, throughput: Array) -> Array:
    """Days to train on `samples` samples (the model's training set) at `throughput` samples/s."""
    return samples / throughput / SECONDS_PER_DAY
