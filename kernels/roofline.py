"""Roofline time primitives (seed 001 section III-A; spec section 3.1).

A layer in one direction (forward or backward) with F TFLOP and M GB of HBM traffic takes

    T_c = flop_latency + F / (compute_eff * peak)      peak = tensor-core or vector rate
    T_m = M / (hbm_eff * hbm_bandwidth)

and, with its exposed communication T_comm, t = max(T_c, T_m) + T_comm. The bookkeeping splits t
into compute T_c, exposed memory max(T_m - T_c, 0) and communication, which add up to t exactly.
"""

from __future__ import annotations

import jax.numpy as jnp

from kernels.numerics import recip
from kernels.params import NVFP4_BYTES, Array, System


def compute_time(flops: Array, tensor: bool, system: System, gemm_dim: Array | None = None,
                 fp8: Array | None = None, eff: Array | None = None) -> Array:
    """T_c of a layer: fixed per-layer latency plus FLOPs at the efficient peak.

    `tensor` (static) picks the tensor-core peak (matmuls, flash attention) or the vector peak
    (bias, GELU, dropout, LayerNorm). For a GEMM whose reduction length is `gemm_dim` = K the
    efficiency saturates with it, compute_eff * K / (K + K_0): each output tile loads and stores
    its operands and accumulators once however long its K loop, so a short loop spends a larger
    share of its time outside the tensor cores (None: compute_eff flat, as in seed 001). That
    per-tile cost is data movement and the loop's work is tensor-core time, so the knee K_0 is a
    number of machine balances: K_0 = matmul_knee x peak / hbm_bandwidth (`gemm_knee`), the same
    fitted matmul_knee on every GPU and at every precision.
    `fp8` (0/1 array, matmuls only): the FP8 rate, and the knee scaled by the same factor (the
    per-tile overhead it stands for takes the same time at either rate).
    `eff`: the fraction of the peak reached, in place of compute_eff (a fused attention kernel,
    whose efficiency is its own: `Profile.attention_eff`); no efficiency curve then.
    """
    peak = system.matrix_flops if tensor else system.vector_flops
    if eff is not None:
        return system.flop_latency + flops * recip(peak * eff)
    knee = gemm_knee(system)
    if fp8 is not None:
        speedup = fp8_speedup(system, fp8)
        peak = peak * speedup
        knee = knee * speedup
    if gemm_dim is None:
        return system.flop_latency + flops * recip(peak * system.compute_eff)
    dim = jnp.maximum(gemm_dim, 1.0)
    return system.flop_latency + flops * (dim + knee) * recip(peak * system.compute_eff * dim)


def gemm_knee(system: System) -> Array:
    """K_0, the reduction length at which a BF16 GEMM reaches half of compute_eff:
    matmul_knee machine balances, K_0 = matmul_knee x matrix_flops / hbm_bandwidth in FLOP per
    byte (TFLOP/s over GB/s, times 1000). A GPU whose tensor cores outgrow its memory needs
    longer K loops to hide each tile's loads: A100 80GB 153 FLOP/B, H100 SXM 295."""
    return system.matmul_knee * (1000.0 * system.matrix_flops) * recip(system.hbm_bandwidth)


def fp8_speedup(system: System, fp8: Array) -> Array:
    """The factor on the matmul rate of a matmul of precision code `fp8` (`kernels.params.PRECISIONS`):
    1 for bf16 (0), fp8_eff matrix_flops_fp8 / matrix_flops for FP8 (1), fp4_eff matrix_flops_fp4 /
    matrix_flops for NVFP4 (2); an efficiency below 1 is what quantizing and scaling the inputs
    costs those GEMMs beyond BF16's (calibrated, 1 by default)."""
    fp4 = _nvfp4(fp8)
    eight = quantized(fp8) - fp4  # 1 for FP8
    return (eight * (system.fp8_eff * system.matrix_flops_fp8 * recip(system.matrix_flops) - 1.0)
            + fp4 * (system.fp4_eff * system.matrix_flops_fp4 * recip(system.matrix_flops) - 1.0) + 1.0)


def quantized(code: Array) -> Array:
    """1 where a matmul's precision code is a quantized one (FP8 or NVFP4), else 0."""
    return jnp.clip(code, 0.0, 1.0)


def _nvfp4(code: Array) -> Array:
    """1 where a matmul's precision code is NVFP4 (2), else 0."""
    return jnp.clip(code - 1.0, 0.0, 1.0)


def quantized_bytes(code: Array) -> Array:
    """Bytes a quantized tensor stores per element at precision code `code`: 1 for FP8, NVFP4_BYTES
    for NVFP4 (0 for bf16, which stores no quantized copy)."""
    return quantized(code) - _nvfp4(code) * (1.0 - NVFP4_BYTES)


def narrowed(code: Array) -> Array:
    """Share of a 2-byte operand's bytes a matmul of precision code `code` no longer moves, reading
    (or sending) it quantized: 1 - quantized_bytes / 2, 0.5 under FP8, 0 for bf16."""
    return quantized(code) - 0.5 * quantized_bytes(code)


def matmul_time(flops: Array, system: System, slowdown: float = 1.0, fp8: Array | None = None) -> Array:
    """Compute time of matmul FLOPs in the flop_count model (seed 000 Appendix B, Eq. 10):

        T = slowdown F / (compute_eff * peak)

    at the tensor-core peak (the FP8 rate where `fp8` is 1), `slowdown` (static: the profile's
    gamma for the attention block, else 1) times slower; no efficiency curve, no latency. The
    rail-only papers' F is the peak itself (profile switch `compute_eff` off sets compute_eff to 1).
    """
    peak = system.matrix_flops
    if fp8 is not None:
        peak = peak * fp8_speedup(system, fp8)
    if slowdown != 1.0:
        flops = flops * float(slowdown)
    return flops * recip(peak * system.compute_eff)


def memory_time(traffic: Array, system: System) -> Array:
    """T_m of a layer: HBM traffic at the efficient HBM bandwidth."""
    return traffic * recip(system.hbm_bandwidth * system.hbm_eff)


def exposed_memory(t_compute: Array, t_memory: Array) -> Array:
    """The part of the memory time that compute does not hide: max(T_m - T_c, 0)."""
    return jnp.maximum(t_memory - t_compute, 0.0)
