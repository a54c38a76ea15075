"""What the device scripts share: a timing that leaves out the first call, and the run of one
measurement per strategy after the machine line (CPU, cores, jax, the device, the driver, the date)."""
import importlib
import json
import time

import numpy as np


def one_call(strategy, call):
    """The host path's program in calls of `call` candidates (lbnl, one B200) and one call's
    candidates for it, as `dse bench`'s kernel lines lay them out: (kernel, block, workload, systems)."""
    from dse.commands.bench import chunk_calls

    importlib.import_module("dse.explore.stream").STREAM_SIZES = (call, call)
    kern, blocks, w, systems = chunk_calls(strategy, call, 1, "lbnl", evaluations=1 << 30)
    return kern, blocks[0], w, systems


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
