"""Where a kernel call's time goes on an accelerator: host-to-device copy of the candidates, the
program on device-resident inputs, and the device-to-host copy of its outputs (GPT3-1T, B200,
the bench's kernel workload, calls of CALL candidates, one system). Prints one JSON line per
strategy. Usage: python docs/device/split.py [CALL]"""
import sys

import jax
import numpy as np

from dse.runtime import float64
from timing import one_call, per_strategy, timed


@float64
def split(strategy, call):
    kern, blk, w, systems = one_call(strategy, call)
    prog = kern.lower_and_compile(w, systems)
    wd, sd = kern._placed(w, systems)
    dev = jax.device_put(blk)
    out_dev = prog(dev, wd, sd)
    jax.block_until_ready(out_dev)
    r = {"strategy": strategy, "call": kern.chunk, "in_bytes": blk.nbytes,
         "out_bytes": sum(np.asarray(o).nbytes for o in out_dev)}
    r["h2d_s"] = timed(lambda: jax.block_until_ready(jax.device_put(blk)))
    r["compute_s"] = timed(lambda: jax.block_until_ready(prog(dev, wd, sd)))
    r["d2h_s"] = timed(lambda: [np.asarray(o) for o in prog(dev, wd, sd)])  # compute + copy out
    r["whole_s"] = timed(lambda: [np.asarray(o) for o in prog(blk, wd, sd)])  # as the search calls it
    # 8 calls back to back, inputs resident, outputs left on the device: the compute ceiling
    def eight():
        outs = [prog(dev, wd, sd) for _ in range(8)]
        jax.block_until_ready(outs)
    r["compute8_s"] = timed(eight, 5)
    r["compute_evals_per_s"] = 8 * kern.chunk / r["compute8_s"][0]
    r["whole_evals_per_s"] = kern.chunk / r["whole_s"][0]
    return r


if __name__ == "__main__":
    per_strategy(split, int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20)
