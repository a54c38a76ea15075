"""GPT-OSS 120B's GEMMs on this GPU, BF16 (the Megatron-Bridge GPT-OSS runs of the MoE corpus are BF16
and predicted 22-45% fast; its hidden size 2880 is no multiple of 256, its vocabulary is 201,088):
the grouped GEMM of 16 local experts (expert parallelism 8 of 128 experts) forward, fc1 2880 -> 5760
(gate and up) and fc2 2880 -> 2880, at 512 to 4,096 tokens an expert, with one expert's GEMM beside
it; the attention projections at 16,384 tokens (QKV 2880 -> 64 x 64 + 2 x 8 x 64 = 5120, out 4096 ->
2880) and the logits 2880 -> 201,088 at 4,096 tokens; each GEMM's three training products (forward,
input gradient, weight gradient) for the dense ones. FLOPs 2 M K N a product; medians of CUDA events
(30 calls after 5), after 2 s of large matmuls. One JSON line a shape, a machine line first.
Usage: python docs/device/gpt_oss_gemms.py"""
import json

import torch
from cuda_timing import machine_line, timed, warm_clock

dev, bf16 = torch.device("cuda"), torch.bfloat16
machine_line()
warm_clock()


def emit(row):
    print(json.dumps(row), flush=True)


for name, k, n in (("fc1", 2880, 5760), ("fc2", 2880, 2880)):
    for m in (512, 1024, 2048, 4096):
        g = 16
        row = {"kind": "grouped_gemm", "gemm": name, "experts": g, "m": m, "k": k, "n": n}
        try:
            x = torch.randn(g * m, k, device=dev, dtype=bf16)
            w = torch.randn(g, n, k, device=dev, dtype=bf16)
            offs = torch.arange(1, g + 1, device=dev, dtype=torch.int32) * m
            row["grouped_s"] = timed(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs))
            row["grouped_tflops"] = 2.0 * g * m * k * n / row["grouped_s"] / 1e12
            x0, w0 = x[:m].contiguous(), w[0].contiguous()
            row["one_s"] = timed(lambda: torch.matmul(x0, w0.t()))
            row["one_tflops"] = 2.0 * m * k * n / row["one_s"] / 1e12
        except Exception as e:
            row["error"] = repr(e)[:200]
        emit(row)
        x = w = None
        torch.cuda.empty_cache()

for name, m, k, n in (("qkv", 16384, 2880, 5120), ("out", 16384, 4096, 2880), ("logits", 4096, 2880, 201088)):
    row = {"kind": "gemm", "gemm": name, "m": m, "k": k, "n": n}
    try:
        x = torch.randn(m, k, device=dev, dtype=bf16)
        w = torch.randn(n, k, device=dev, dtype=bf16)
        dy = torch.randn(m, n, device=dev, dtype=bf16)
        flops = 2.0 * m * k * n
        for step, fn in (("fwd", lambda: x @ w.t()), ("dgrad", lambda: dy @ w), ("wgrad", lambda: dy.t() @ x)):
            row[f"{step}_s"] = timed(fn)
            row[f"{step}_tflops"] = flops / row[f"{step}_s"] / 1e12
    except Exception as e:
        row["error"] = repr(e)[:200]
    emit(row)
    x = w = dy = None
    torch.cuda.empty_cache()
