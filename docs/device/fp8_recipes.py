"""The three GEMMs of a linear layer's training step (forward, input gradient, weight gradient) as
torchao's float8 recipes run them through PyTorch, beside BF16: FP8 E4M3 `torch._scaled_mm` with
one scale per tensor (the tensorwise recipe) and with one scale per row of the left operand and per
column of the right (the rowwise recipe), each with fast accumulation on and off (torchao's default
configuration accumulates the forward GEMM fast and both gradient GEMMs in full precision).

Shapes: the linear layers of Llama 3.1 8B, 70B and 405B as torchtitan splits them (wq, wk, wv, wo,
w1, w3, w2 separately) at tensor parallelism 1 and 8, M tokens each (16,384). Each GEMM in the
operand layouts the step has (row-major left, column-major right): forward x (M, K) @ W^T, input
gradient dy (M, N) @ W, weight gradient dy^T (N, M) @ x. Each the median of 20 calls after 3 (CUDA
events), after 2 s of large matmuls to raise the clock. Then torch.compile'd casts of an activation
to FP8 the way each recipe scales it (one amax for the tensor; one per row; one per column with the
output transposed, as the weight gradient's operand), effective bandwidth over bytes read + written.

One JSON line a (shape, recipe), a machine line first.
Usage: python docs/device/fp8_recipes.py [M]"""
import json
import sys
import time

import torch
from cuda_timing import machine_line, timed, warm_clock

dev = torch.device("cuda")
M = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
machine_line(tokens=M)
E4M3 = torch.float8_e4m3fn

MODELS = {"llama3_8b": (4096, 1024, 14336), "llama3_70b": (8192, 1024, 28672), "llama3_405b": (16384, 1024, 53248)}
shapes = {}  # (k, n) -> names
for name, (h, kv, f) in MODELS.items():
    for tp in (1, 8):
        for layer, k, n in (("wq", h, h // tp), ("wkv", h, kv // tp), ("wo", h // tp, h), ("w13", h, f // tp),
                            ("w2", f // tp, h)):
            shapes.setdefault((k, n), []).append(f"{name}/tp{tp}/{layer}")

warm_clock()


def fp8(rows, cols):
    return (torch.randn(rows, cols, device=dev, dtype=torch.bfloat16) * 0.5).to(E4M3)


def gemm_set(m, k, n):
    """Seconds of the three GEMMs in BF16 and in each FP8 recipe and accumulation."""
    out = {}
    x, w, dy = (torch.randn(r, c, device=dev, dtype=torch.bfloat16) for r, c in ((m, k), (n, k), (m, n)))
    wt, dyt, xt = w.t().contiguous(), dy.t().contiguous(), x.t().contiguous()
    out["bf16"] = [timed(lambda: x @ w.t(), 20, 3), timed(lambda: dy @ w, 20, 3), timed(lambda: dyt @ x, 20, 3)]
    del x, w, dy, wt, dyt, xt
    x8, w8, dy8 = fp8(m, k), fp8(n, k), fp8(m, n)
    wt8, dyt8, xt8 = fp8(k, n), fp8(n, m), fp8(k, m)
    one = torch.ones((), device=dev, dtype=torch.float32)
    # (left, right as column-major, rows of left, columns of right)
    ops = [(x8, w8.t(), m, n), (dy8, wt8.t(), m, k), (dyt8, xt8.t(), n, k)]
    for recipe in ("tensorwise", "rowwise"):
        for fast in (True, False):
            ts = []
            for left, right, r, c in ops:
                if recipe == "tensorwise":
                    sa, sb = one, one
                else:
                    sa = torch.ones(r, 1, device=dev, dtype=torch.float32)
                    sb = torch.ones(1, c, device=dev, dtype=torch.float32)
                try:
                    ts.append(timed(lambda: torch._scaled_mm(left, right, scale_a=sa, scale_b=sb,
                                                             out_dtype=torch.bfloat16, use_fast_accum=fast), 20, 3))
                except Exception as e:  # a recipe this torch lacks: say so
                    ts.append(repr(e)[:160])
            out[f"{recipe}_{'fast' if fast else 'slow'}"] = ts
    return out


for (k, n), names in shapes.items():
    row = {"kind": "gemm", "m": M, "k": k, "n": n, "layers": names, "flops_each": 2.0 * M * k * n}
    row.update(gemm_set(M, k, n))
    print(json.dumps(row), flush=True)


# the casts, compiled as a recipe's scaling makes them (one kernel or two per cast)
def cast_tensorwise(x):
    s = 448.0 / x.abs().amax().float().clamp(min=1e-12)
    return (x.float() * s).clamp(-448, 448).to(E4M3), s


def cast_tensorwise_t(x):
    s = 448.0 / x.abs().amax().float().clamp(min=1e-12)
    return (x.float() * s).clamp(-448, 448).to(E4M3).t().contiguous(), s


def cast_rowwise(x):
    s = 448.0 / x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
    return (x.float() * s).clamp(-448, 448).to(E4M3), s


def cast_colwise_t(x):
    s = 448.0 / x.abs().amax(dim=0, keepdim=True).float().clamp(min=1e-12)
    return (x.float() * s).clamp(-448, 448).to(E4M3).t().contiguous(), s


deadline = time.perf_counter() + float(90)
for cols in (1024, 3584, 8192, 14336):
    x = torch.randn(M, cols, device=dev, dtype=torch.bfloat16)
    row = {"kind": "cast", "rows": M, "cols": cols, "bytes": M * cols * 3}
    for fn in (cast_tensorwise, cast_tensorwise_t, cast_rowwise, cast_colwise_t):
        if time.perf_counter() > deadline:
            row[fn.__name__] = "skipped: time"
            continue
        try:
            c = torch.compile(fn, dynamic=False)
            row[fn.__name__] = timed(lambda: c(x), 20, 3)
        except Exception as e:
            row[fn.__name__] = repr(e)[:160]
    print(json.dumps(row), flush=True)
