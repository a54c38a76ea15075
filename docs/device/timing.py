"""What the device scripts share: a timing that leaves out the first call, and the run of one
measurement per strategy after the machine line (CPU, cores, jax, the device, the driver, the date)."""
import json
import time

import numpy as np


def timed(fn, n=20):
    """(median, min) seconds of `n` calls of fn, after one call not counted (compilation, warm-up)."""
    fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)), float(min(ts))


def per_strategy(measure, *args):
    """Print the machine line, then measure(strategy, *args) of each strategy, one JSON line each."""
    from dse.commands.bench import gpu_driver, machine

    print(json.dumps({"kind": "machine", "machine": machine(), "driver": gpu_driver(),
                      "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}), flush=True)
    for st in ("tp1d", "tp2d", "summa"):
        print(json.dumps(measure(st, *args)), flush=True)
