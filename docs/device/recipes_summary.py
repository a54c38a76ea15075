"""Runs 19 and 20 (docs/gpu.md) summed up from their JSON lines (no GPU needed):

* run 19: each linear layer's training step (forward, input gradient, weight gradient) in BF16 and
  in torchao's two float8 recipes with its default accumulation (the forward GEMM fast, both
  gradient GEMMs in full precision), as TFLOP/s over the three GEMMs, and the rowwise recipe's time
  over the tensorwise one's; then, per model and tensor-parallel degree, that ratio over a whole
  block's linear layers (each weighted by its count: wq, wkv twice, wo, w13 twice, w2); the casts'
  effective bandwidth;
* run 20: fused causal attention, forward + backward, as a fraction of the H100's 989 TFLOP/s BF16
  peak by backend and head width (the range over head counts and sequence lengths), each width
  beside 128; the 128-token window beside full causal attention (flex attention).

Usage: python docs/device/recipes_summary.py"""
import json
from collections import defaultdict
from pathlib import Path

GPU = Path(__file__).resolve().parents[1] / "gpu"
PEAK = 989.0
rows = [json.loads(x) for x in open(GPU / "2026-11-27-h100-19-fp8-recipes.jsonl")]
print("run 19:", rows[0]["gpu"], "torch", rows[0]["torch"])
COUNT = {"wq": 1, "wkv": 2, "wo": 1, "w13": 2, "w2": 1}
block = defaultdict(lambda: [0.0, 0.0, 0.0])  # model/tp -> bf16, tensorwise, rowwise seconds
for r in rows[1:]:
    if r["kind"] == "gemm":
        f = 3.0 * r["flops_each"]
        t = {"bf16": sum(r["bf16"]),
             "tensorwise": r["tensorwise_fast"][0] + sum(r["tensorwise_slow"][1:]),
             "rowwise": r["rowwise_fast"][0] + sum(r["rowwise_slow"][1:])}
        print(f"  {r['m']} x {r['k']:>5} -> {r['n']:<5} BF16 {f / t['bf16'] / 1e12:5.0f}  tensorwise "
              f"{f / t['tensorwise'] / 1e12:5.0f}  rowwise {f / t['rowwise'] / 1e12:5.0f} TFLOP/s  rowwise / tensorwise "
              f"{t['rowwise'] / t['tensorwise']:.3f}  ({', '.join(r['layers'])})")
        for name in r["layers"]:
            model, tp, layer = name.split("/")
            acc = block[f"{model} {tp}"]
            for i, key in enumerate(("bf16", "tensorwise", "rowwise")):
                acc[i] += COUNT[layer] * t[key]
    else:
        gbs = {k: r["bytes"] / v / 1e12 for k, v in r.items() if k.startswith("cast_") and isinstance(v, float)}
        print(f"  cast {r['rows']} x {r['cols']}: " + ", ".join(f"{k[5:]} {v:.2f} TB/s" for k, v in gbs.items()))
for key, (b, tw, rw) in block.items():
    print(f"  block {key}: the linear layers' time, tensorwise / BF16 {tw / b:.3f}, rowwise / tensorwise {rw / tw:.3f}")

rows = [json.loads(x) for x in open(GPU / "2026-11-27-h100-20-attention.jsonl")]
print("run 20:", rows[0]["gpu"], "torch", rows[0]["torch"], "cuDNN", rows[0]["cudnn"])
by = defaultdict(list)
for r in rows[1:]:
    if r["kind"] == "attention" and "fwd_bwd_tflops" in r:
        by[(r["backend"], r["d"])].append(r["fwd_bwd_tflops"] / PEAK)
for backend in ("cudnn", "flash"):
    mid = sum(by[(backend, 128)]) / len(by[(backend, 128)])
    for d in (64, 128, 192):
        v = by[(backend, d)]
        print(f"  {backend:5} head width {d:3}: {min(v):.2f}-{max(v):.2f} of the peak forward + backward "
              f"({len(v)} shapes), mean {sum(v) / len(v) / mid:.2f} of width 128's")
win = {(r["seq"], r["window"]): r for r in rows if r.get("kind") == "window" and "fwd_bwd_s" in r}
for s in sorted({k[0] for k in win}):
    full, band = win.get((s, None)), win.get((s, 128))
    if full and band:
        print(f"  flex, {s} tokens, 64 heads of 64: causal {full['fwd_bwd_tflops'] / PEAK:.2f} of the peak, a 128-token "
              f"window {band['fwd_bwd_tflops'] / PEAK:.3f}; the window's time {band['fwd_bwd_s'] / full['fwd_bwd_s']:.3f} "
              f"of causal for {128 * s / (s * (s + 1) / 2):.3f} of its FLOPs")
