"""Does wave quantization explain run 14's narrow GEMMs? (No GPU needed: reads the JSON lines.)

Run 14 (docs/gpu.md) timed cuBLAS matmuls of Llama 3 block shapes on an H100 SXM. The engine's
GEMM efficiency depends on the reduction length K alone, eff(K) = c K / (K + K_0) with
K_0 = knee x peak / HBM bandwidth. A GPU runs a GEMM as output tiles spread over its SMs in waves;
the last wave runs partly empty, so the useful share of the launched work is

    waves(M, N) = M N / (T_M T_N ceil(ceil(M / T_M) ceil(N / T_N) / SMs) SMs)

(also the padding of M and N up to whole tiles). This script fits (c, knee) by grid search, with
and without that factor, to the measured BF16 and FP8 rates of the transformer shapes (M = 8,192
tokens) and prints each shape's measured and fitted efficiency and the mean and worst |error|.

    python3 docs/device/gemm_waves.py [docs/gpu/2026-11-26-h100-14-gemm.jsonl]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parents[1] / "gpu" / "2026-11-26-h100-14-gemm.jsonl"
SMS = 132  # H100 SXM
TILES = {"none": None, "128x128": (128, 128), "128x256": (128, 256)}
PEAK = {"bf16": 989.0, "fp8": 1979.0}  # TFLOP/s, dense, H100 SXM
HBM = 3350.0  # GB/s


def waves(m: int, n: int, tile) -> float:
    if tile is None:
        return 1.0
    tm, tn = tile
    tiles = math.ceil(m / tm) * math.ceil(n / tn)
    return m * n / (tm * tn * math.ceil(tiles / SMS) * SMS)


def curve(k: int, c: float, knee: float, peak: float) -> float:
    return c * k / (k + knee * peak * 1000.0 / HBM)


def fit(rows, precision: str, tile):
    peak, best = PEAK[precision], None
    for c in (x / 1000 for x in range(500, 1001, 5)):
        for knee in (x / 10 for x in range(1, 80)):
            errs = [abs(curve(r["k"], c, knee, peak) * waves(r["m"], r["n"], tile) * peak
                        / r[f"{precision}_tflops"] - 1.0) for r in rows]
            mean = sum(errs) / len(errs)
            if best is None or mean < best[0]:
                best = (mean, max(errs), c, knee)
    return best


def main(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if '"m"' in line]
    rows = [r for r in rows if r["m"] >= 8192]  # the warm shapes (run 14 leaves the first three out)
    for precision in ("bf16", "fp8"):
        fits = {name: fit(rows, precision, tile) for name, tile in TILES.items()}
        for name, (mean, worst, c, knee) in fits.items():
            print(f"{precision} tiles {name:8s} SMs {SMS}: c {c:.3f} knee {knee:4.1f}  "
                  f"mean |error| {100 * mean:4.1f}%  max {100 * worst:4.1f}%")
        _, _, c, knee = fits["128x256"]
        _, _, c0, knee0 = fits["none"]
        print(f"  {'M x K -> N':26s} measured  K only  K x waves")
        for r in rows:
            measured = r[f"{precision}_tflops"] / PEAK[precision]
            print(f"  {r['m']:5d} x {r['k']:5d} -> {r['n']:5d}      {measured:6.3f}  "
                  f"{curve(r['k'], c0, knee0, PEAK[precision]):6.3f}  "
                  f"{curve(r['k'], c, knee, PEAK[precision]) * waves(r['m'], r['n'], (128, 256)):9.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else RUN)
