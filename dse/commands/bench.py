"""`dse bench`: candidates per second of each strategy's kernel, and of a whole search.

Kernel: one compiled chunk program (float64) evaluates real candidates (GPT3-1T, NVS 64,
n = 16384: the largest group of the seed-001 study, tiled to fill the chunk) against one system;
compile time is measured apart, then the chunk is evaluated `--repeats` times. Search: the
end-to-end rate of `run_search` (enumeration, padding, kernel, top-k reduction) over GPT3-1T,
NVS 8 and 64, n = 4 ... 16384, with its kernel already compiled. Prints the machine it ran on.

    dse bench [strategy=tp1d] [--chunk N] [--repeats N] [--systems N] [--no-search]

The strategies are the config's (`strategy=`, default all; `dse.overrides`); the flags are the
measurement's own settings.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import numpy as np

import dse
from dse.engine import chunk_kernel, profile_of, space_options, stack_systems
from dse.search import run_search
from dse.space import Question, enumerate_space
from dse.specs import load_model, load_system
from dse.table import render
from kernels.params import Candidates


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    devs = jax.devices()
    kind = devs[0].device_kind if devs[0].platform != "cpu" else f"{len(devs)} XLA host devices"
    return (f"{cpu}; {cores} cores; {platform.system()} {platform.machine()}; jax {jax.__version__} on "
            f"{devs[0].platform} ({kind}); XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; float64")


def kernel_rate(strategy: str, chunk: int, repeats: int, n_systems: int, profile="lbnl") -> dict:
    m = load_model("gpt3_1t")
    s = load_system("b200")
    prof = profile_of(profile)
    cand = enumerate_space(Question(m, strategy, 4096, **space_options(prof)), 16384, 64)
    kern = chunk_kernel(strategy, prof, chunk, n_systems, ("iteration_time", "memory"))
    idx = np.arange(kern.chunk) % len(cand["n1"])
    c = Candidates(*(np.ascontiguousarray(cand[f][idx]) for f in Candidates._fields))
    systems = stack_systems([s.replace(hbm_capacity=s.hbm_capacity * (1 + i)).params() for i in range(n_systems)])
    w = m.workload(4096)
    t0 = time.perf_counter()
    kern.lower_and_compile(w, systems)
    compile_s = time.perf_counter() - t0
    kern(c, w, systems)  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        kern(c, w, systems)
    dt = time.perf_counter() - t0
    evals = repeats * kern.chunk * n_systems
    return {"strategy": strategy, "chunk": kern.chunk, "systems": n_systems, "compile s": compile_s,
            "evaluations": evals, "seconds": dt, "M evals/s": evals / dt / 1e6}


def search_rate(strategy: str, profile="lbnl") -> dict:
    run_search(model="gpt3_1t", system="b200", strategy=strategy, n_gpus=4096, nvs_size=8, profile=profile)  # compile
    t0 = time.perf_counter()
    res = run_search(model="gpt3_1t", system="b200", strategy=strategy, n_gpus="pow2:4:16384",
                     nvs_size=[8, 64], profile=profile)
    dt = time.perf_counter() - t0
    ev = res.stats["evaluations"]
    return {"strategy": strategy, "evaluations": ev, "seconds": dt, "M evals/s": ev / dt / 1e6}


def main(argv=None) -> int:
    from dse.overrides import reject_retired_flags, resolve

    p = argparse.ArgumentParser(prog="dse bench", description=__doc__.splitlines()[0].split(": ", 1)[1],
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="strategy=tp1d|tp2d|summa|all, profile=default|lbnl|railonly")
    p.add_argument("--chunk", type=int, default=1 << 18, help="candidates per kernel call")
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--systems", type=int, default=1, help="systems on the hardware axis")
    p.add_argument("--no-search", action="store_true", help="skip the end-to-end search rate")
    argv = list(argv or [])
    reject_retired_flags(argv)
    args = p.parse_intermixed_args(argv)
    job = resolve(args.overrides).job
    strategies, profile = job.strategies, job.profile
    print(f"dse {dse.__version__} bench on: {machine()}; profile {job.profile_name}\n")
    rows = [kernel_rate(s, args.chunk, args.repeats, args.systems, profile) for s in strategies]
    print(render(rows, formats={"compile s": ".2f", "seconds": ".3f", "M evals/s": ".2f", "evaluations": ",d"},
                 title="kernel: one compiled chunk program, float64"))
    if not args.no_search:
        srows = [search_rate(s, profile) for s in strategies]
        print()
        print(render(srows, formats={"seconds": ".3f", "M evals/s": ".2f", "evaluations": ",.0f"},
                     title="search: GPT3-1T, NVS 8 and 64, n = 4..16384 (enumeration + kernel + top-k), compiled"))
    return 0
