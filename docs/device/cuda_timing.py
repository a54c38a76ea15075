"""What the PyTorch device scripts share (gemm.py, kernels_moe_attn.py, permute.py): their machine
line and a CUDA-event timing."""
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
