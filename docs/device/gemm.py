"""Matmul rates on this GPU as PyTorch's cuBLAS runs them: BF16 (torch.matmul) and FP8 E4M3 with
per-tensor scales (torch._scaled_mm, BF16 output), square sizes and the GEMMs of Llama 3 8B/70B
blocks at 8,192 tokens (forward shapes: tokens x in -> out). Each the median of 50 timed calls after
10 warm-up calls (CUDA events). One JSON line a shape, a machine line first.
Usage: python docs/device/gemm.py"""
import json

import torch
from cuda_timing import machine_line, timed

dev = torch.device("cuda")
machine_line()

SHAPES = [(n, n, n) for n in (1024, 2048, 4096, 8192, 16384)]
for name, h, kv, f in (("llama3_8b", 4096, 1024, 14336), ("llama3_70b", 8192, 1024, 28672)):
    for tp in (1, 8):
        t = 8192
        SHAPES += [(t, h, (h + 2 * kv) // tp), (t, h // tp, h), (t, h, 2 * f // tp), (t, f // tp, h)]


for m, k, n in SHAPES:
    flops = 2.0 * m * k * n
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    row = {"m": m, "k": k, "n": n}
    row["bf16_s"] = timed(lambda: torch.matmul(x, w.t()), n=50, warm=10)
    try:
        x8 = x.to(torch.float8_e4m3fn)
        w8 = w.to(torch.float8_e4m3fn)
        one = torch.ones((), device=dev, dtype=torch.float32)
        row["fp8_s"] = timed(lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                              n=50, warm=10)
    except Exception as e:  # an older torch or no FP8 path: say so
        row["fp8_error"] = repr(e)[:200]
    for p in ("bf16", "fp8"):
        if p + "_s" in row:
            row[p + "_tflops"] = flops / row[p + "_s"] / 1e12
    print(json.dumps(row), flush=True)
