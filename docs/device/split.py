"""Where a kernel call's time goes on an accelerator: host-to-device copy of the candidates, the
program on device-resident inputs, and the device-to-host copy of its outputs (GPT3-1T, B200,
the bench's kernel workload, calls of CALL candidates, one system). Prints one JSON line per
strategy. Usage: python docs/device/split.py [CALL]"""
import importlib
import sys

import jax
import numpy as np

import dse
from dse.commands.bench import kernel_stream
from dse.runtime import float64
from timing import per_strategy, timed


@float64
def split(strategy, call):
    S = importlib.import_module("dse.explore.search")  # the module (dse.search is also the API's function)
    S.STREAM_SIZES = (call, call)
    stream, info = kernel_stream(strategy, call, 1, "lbnl")
    from dse.explore.engine import profile_of, stack_systems
    from dse.explore.stream import search_kernel, candidate_form
    from dse.explore.placement import enumerate_space
    from dse.explore.space import Question
    from dse.spec.specs import load_model, load_system
    from kernels.params import Candidates
    m, s = load_model("gpt3_1t"), load_system("b200")
    prof = profile_of("lbnl")
    from dse.explore.engine import space_options
    q = Question(m, strategy, 4096, **space_options(prof))
    cand = enumerate_space(q, 16384, 64)
    kern = search_kernel(strategy, prof, 1, packed=candidate_form(q, [16384]), evaluations=1 << 30)
    idx = np.arange(kern.chunk) % len(cand["n1"])
    blk = kern.block(np.stack([cand[f][idx] for f in Candidates._fields]))
    systems = stack_systems([s.params()])
    w = m.workload(4096)
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
