"""What the PyTorch device scripts share (gemm.py, kernels_moe_attn.py, permute.py, fp8_recipes.py,
attention_dims.py, context_attention.py, gpt_oss_gemms.py): their machine line, raising the clock
from idle, a CUDA-event timing and the timing of an attention kernel forward and forward + backward."""
import json
import subprocess
import time

import torch


def machine_line(**extra) -> None:
    """Print the GPU (name, driver, clocks, power limit), torch's and CUDA's versions and the date as
    one JSON line."""
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"kind": "machine", "gpu": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
                      **extra, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}), flush=True)


def timed(fn, n=30, warm=5):
    """Median seconds of `n` calls of fn, each between two CUDA events, after `warm` calls not counted."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def warm_clock(seconds: float = 2.0) -> None:
    """Large BF16 matmuls for `seconds`, so that what is timed next does not run while the GPU's
    clock is still rising from idle."""
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        for _ in range(20):
            x @ x
        torch.cuda.synchronize()


def attention_times(attend, q, k, v, dout):
    """(forward seconds, forward + backward seconds) of `attend(q, k, v)`: the forward without
    gradients, then the forward and the gradients of q, k, v for the output gradient `dout`, each
    by `timed`."""
    def forward():
        with torch.no_grad():
            attend(q, k, v)

    def both():
        torch.autograd.grad(attend(q, k, v), (q, k, v), dout)
    return timed(forward), timed(both)
