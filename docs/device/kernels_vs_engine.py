"""Runs 17, 18 and 23 (docs/gpu.md) beside what the engine charges for the same work (no GPU needed: it
reads their JSON lines). The engine's side is its own functions on the DGX H100 preset with the
shipped calibration's efficiencies for Hopper under Megatron (`conf/calibration/corpus2026.yaml`):

* a grouped expert GEMM of G experts x M tokens, K -> N: `kernels.roofline.compute_time` at the
  BF16 and the FP8 rate with its reduction length K, and, beside it, the time to read the G
  experts' weights (`memory_time`, at `hbm_eff` of the HBM bandwidth: what `_local_experts` adds to
  the layer's traffic; the layer takes the longer of the two);
* run 23's GPT-OSS 120B GEMMs (grouped experts and dense, BF16) at the same `compute_time` rate;
* the two reorders of the routed copies (`kernels.layers.regroup`): each layer's forward time,
  `kernels.block_time.direction_time`, against the measured permute and unpermute.

Usage: python docs/device/kernels_vs_engine.py"""
import json
from pathlib import Path

import jax.numpy as jnp

import dse
from dse.truth.calibration import apply_calibration, load_calibration
from kernels import layers as L
from kernels.block_time import direction_time
from kernels.params import PROFILES
from kernels.roofline import compute_time, memory_time

GPU = Path(__file__).resolve().parents[1] / "gpu"
system = apply_calibration(dse.load_system("dgx_h100"), load_calibration("corpus2026")).params()
peak = float(system.matrix_flops)
print(f"DGX H100, corpus2026 hopper/megatron: compute_eff {float(system.compute_eff):.3f}, "
      f"hbm_eff {float(system.hbm_eff):.3f}, fp8_eff {float(system.fp8_eff):.3f}")


def rate(flops_tf, k, fp8):
    """TFLOP/s the engine gives `flops_tf` TFLOP of one GEMM of reduction length k (its per-layer
    latency left out, as the measurement has none of its own)."""
    t = compute_time(jnp.float64(flops_tf), True, system, jnp.float64(k), jnp.float64(fp8)) - system.flop_latency
    return flops_tf / float(t)


print("\nrun 17, grouped expert GEMMs (TFLOP/s; weights: ms to read them at hbm_eff, against the measured ms)")
print(f"{'model':14s} {'G x M':>9s} {'K -> N':>13s} {'bf16':>6s} {'engine':>6s} {'fp8':>6s} {'engine':>6s}"
      f" {'meas ms':>8s} {'weights ms':>10s}")
for line in (GPU / "2026-11-27-h100-17-kernels.jsonl").read_text().splitlines():
    r = json.loads(line)
    if r.get("kind") != "grouped_gemm" or "bf16_s" not in r:
        continue
    g, m, k, n = r["experts"], r["m"], r["k"], r["n"]
    tf = 2.0 * g * m * k * n / 1e12
    weights_ms = 1e3 * float(memory_time(jnp.float64(g * k * n * 2 / 1e9), system))
    print(f"{r['model']:14s} {g:>3d} x {m:<5d} {k:>5d} -> {n:<5d} {r['bf16_tflops']:6.0f} {rate(tf, k, 0):6.0f}"
          f" {r.get('fp8_tflops', float('nan')):6.0f} {rate(tf, k, 1):6.0f} {1e3 * r['bf16_s']:8.3f}"
          f" {weights_ms:10.3f}")
print(f"(peak {peak:.0f} TFLOP/s BF16)")

print("\nrun 18, the reorders of the routed copies (ms, forward)")
for line in (GPU / "2026-11-27-h100-18-permute.jsonl").read_text().splitlines():
    r = json.loads(line)
    if "copies_gb" not in r:
        continue
    copies = jnp.float64(r["copies_gb"] / 2e-9)  # two-byte elements
    t = direction_time(L.regroup("permute", copies, 2e-9), True, system, PROFILES["default"], "two_tier")
    engine = 1e3 * float(t.comp + t.mem + t.comm)
    print(f"{r['model']:14s} V {r['copies_gb']:.3f} GB: engine {engine:.3f} each, {2 * engine:.3f} the pair;"
          f" measured permute {1e3 * r['permute_s']:.3f}, unpermute {1e3 * r['unpermute_s']:.3f},"
          f" the pair {1e3 * (r['permute_s'] + r['unpermute_s']):.3f}")

print("\nrun 23, GPT-OSS 120B's GEMMs, BF16 (TFLOP/s: measured, engine)")
for line in (GPU / "2026-11-28-h100-23-gpt-oss-gemms.jsonl").read_text().splitlines():
    r = json.loads(line)
    if r.get("kind") == "grouped_gemm":
        g, m, k, n = r["experts"], r["m"], r["k"], r["n"]
        print(f"{r['gemm']:6s} {g:>3d} x {m:<5d} {k:>5d} -> {n:<6d} grouped {r['grouped_tflops']:6.0f}"
              f"  engine {rate(2.0 * g * m * k * n / 1e12, k, 0):6.0f}")
    elif r.get("kind") == "gemm":
        m, k, n = r["m"], r["k"], r["n"]
        measured = "  ".join(f"{s} {r[s + '_tflops']:4.0f}" for s in ("fwd", "dgrad", "wgrad"))
        engine = "  ".join(f"{s} {rate(2.0 * m * a * b / 1e12, a, 0):4.0f}"
                           for s, a, b in (("fwd", k, n), ("dgrad", n, k), ("wgrad", m, n)))
        print(f"{r['gemm']:6s} {m:>5d} x {k:<5d} -> {n:<6d} measured {measured};  engine {engine}")
