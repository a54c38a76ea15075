"""Does a fused attention kernel's rate grow with the keys each query row sees? (No GPU: reads run 20.)

Run 20 (docs/gpu.md) timed causal attention forward + backward at 4,096 and 8,192 tokens (cuDNN,
FlashAttention-2) and torch's flex attention with and without a 128-key sliding window on an H100.
A row of causal attention over l tokens sees (l + 1) / 2 keys on average, a windowed one F(l) / l
(F as `kernels.attention.causal` counts it). If the rate is proportional to K / (K + K_0), each pair of
measurements gives K_0; this prints it for each backend and head width, and what a knee fitted on flex's
window predicts for flex's causal rates.

    python3 docs/device/attention_knee.py [docs/gpu/2026-11-27-h100-20-attention.jsonl]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

RUN = Path(__file__).resolve().parents[1] / "gpu" / "2026-11-27-h100-20-attention.jsonl"


def keys_per_row(seq: int, window: int | None) -> float:
    """The mean keys a query row sees: causal (l + 1) / 2, or F(l) / l under a window of W keys."""
    if window is None or window >= seq:
        return (seq + 1) / 2
    return (window * (window + 1) / 2 + (seq - window) * window) / seq


def knee(k_a: float, rate_a: float, k_b: float, rate_b: float) -> float:
    """K_0 such that rate_a / rate_b = [k_a / (k_a + K_0)] / [k_b / (k_b + K_0)]."""
    r = rate_a / rate_b
    return (k_a * k_b - r * k_b * k_a) / (r * k_b - k_a)


def main(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    causal = defaultdict(list)
    for r in rows:
        if r.get("kind") == "attention":
            causal[(r["backend"], r["d"], r["seq"])].append(r["fwd_bwd_tflops"])
    for backend in ("cudnn", "flash"):
        for d in (64, 128, 192):
            short = sum(causal[(backend, d, 4096)]) / len(causal[(backend, d, 4096)])
            long = sum(causal[(backend, d, 8192)]) / len(causal[(backend, d, 8192)])
            k0 = knee(keys_per_row(4096, None), short, keys_per_row(8192, None), long)
            print(f"{backend:5s} d {d:3d}: causal {short:6.1f} TFLOP/s at 4,096 tokens, {long:6.1f} at 8,192 "
                  f"(ratio {short / long:.3f}): K_0 {k0:5.0f} keys")
    flex = {(r["seq"], r["window"]): r["fwd_bwd_tflops"] for r in rows if r.get("kind") == "window"}
    fits = []
    for seq in (4096, 8192):
        ratio = flex[(seq, 128)] / flex[(seq, None)]
        k0 = knee(keys_per_row(seq, 128), flex[(seq, 128)], keys_per_row(seq, None), flex[(seq, None)])
        fits.append(k0)
        print(f"flex  d  64: window 128 at {seq:,} tokens runs at {ratio:.3f} of causal's rate "
              f"({keys_per_row(seq, 128):.1f} against {keys_per_row(seq, None):.1f} keys a row): K_0 {k0:5.0f} keys")
    k0 = sum(fits) / len(fits)
    rate = lambda k: k / (k + k0)  # noqa: E731
    predicted = rate(keys_per_row(4096, None)) / rate(keys_per_row(8192, None))
    print(f"flex  d  64: with K_0 {k0:.0f}, causal at 4,096 over 8,192 tokens {predicted:.3f} predicted, "
          f"{flex[(4096, None)] / flex[(8192, None)]:.3f} measured")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else RUN)
