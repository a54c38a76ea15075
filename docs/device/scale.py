"""Whole searches from a few million to a billion evaluations, warm, with each search's phases and
the device stream's statistics: where a search's rate stops being paced by its fixed costs. Two
families: Megatron's 1D space of the default profile (GPT3-1T on B200, n = 4 ... 16384, NVS 8 and
72: recompute, precision, ZeRO and context-parallel axes, 7.0M candidates a system) over 1, 8 and
64 HBM capacities; and seed 001's SUMMA sweep (NVS 64, 570,844 candidates a system) over 1, 16 and
160 capacities x 11 bandwidths. Each search once to compile, then the best of two; the middle
search of each family also through the host path, its top rows and counts compared with the
device stream's ("same"). One JSON line a search. Usage: python docs/device/scale.py [SCALE]  (SCALE divides the grids' sizes: 1 on a GPU)"""
import importlib
import json
import sys
import time

import numpy as np

import dse  # noqa: F401  (configures JAX)

search = importlib.import_module("dse.explore.search")
stream = importlib.import_module("dse.explore.stream")  # its DEVICE_STREAM picks the path

from dse.commands.bench import gpu_driver, machine  # noqa: E402

print(json.dumps({"kind": "machine", "machine": machine(), "driver": gpu_driver(),
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}), flush=True)
scale = int(sys.argv[1]) if len(sys.argv) > 1 else 1


def family(name):
    if name == "tp1d_default":
        base = dict(model="gpt3_1t", system="b200", strategy="tp1d", n_gpus="pow2:4:16384", nvs_size=[8, 72],
                    profile="default", max_candidates=6e9)
        for p in (1, 8, 64):
            p = max(1, p // scale)
            yield dict(base, grid={"hbm_capacity": [float(x) for x in np.linspace(80, 384, p)]} if p > 1 else None)
    else:
        base = dict(model="gpt3_1t", system="b200", strategy="summa", n_gpus="pow2:4:16384", nvs_size=64,
                    profile="lbnl", max_candidates=6e9)
        for p in (1, 16, 160):
            p = max(1, p // scale)
            yield dict(base, grid={"hbm_capacity": [float(x) for x in np.linspace(80, 1000, p)],
                                   "hbm_bandwidth": [float(x) for x in np.linspace(1000, 16000, 11)]})


def same(kw, res):
    """The search through the host path: its wall time and whether its answer is the device stream's."""
    from polars.testing import assert_frame_equal

    before = stream.DEVICE_STREAM
    stream.DEVICE_STREAM = False
    try:
        t0 = time.perf_counter()
        host = search.run_search(**kw)
        wall = time.perf_counter() - t0
    finally:
        stream.DEVICE_STREAM = before
    try:
        assert_frame_equal(host.top, res.top)
        assert_frame_equal(host.counts, res.counts)
        ok = True
    except AssertionError:
        ok = False
    return {"host_path_first_s": wall, "same": ok}


for name in ("tp1d_default", "summa_lbnl"):
    for at, kw in enumerate(family(name)):
        t0 = time.perf_counter()
        search.run_search(**kw)
        first = time.perf_counter() - t0
        best = None
        for _ in range(2):
            t0 = time.perf_counter()
            res = search.run_search(**kw)
            wall = time.perf_counter() - t0
            if best is None or wall < best[0]:
                best = (wall, res.stats)
        wall, st = best
        print(json.dumps({"family": name, "systems": int(np.prod([len(v) for v in (kw["grid"] or {}).values()])),
                          "evaluations": st["evaluations"], "first_s": first, "wall_s": wall,
                          "evals_per_s": st["evaluations"] / wall,
                          **{k: st[k] for k in ("head_s", "stream_s", "tail_s", "eval_s")},
                          **st.get("device_stream", {}), **(same(kw, res) if at == 1 else {})}), flush=True)
