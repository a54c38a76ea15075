"""The 1e9-evaluation sweep (SUMMA, GPT3-1T, B200, NVS 64, n = 4 ... 16384, a 160 x 11 HBM capacity x
bandwidth grid: 1,760 systems) through each stream path, twice each (the first compiles or loads
the program), with the search's phases and the device stream's statistics. One JSON line a run.
Usage: python docs/device/sweep.py [CAPACITY_POINTS]"""
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
points = int(sys.argv[1]) if len(sys.argv) > 1 else 160
kw = dict(model="gpt3_1t", system="b200", strategy="summa", n_gpus="pow2:4:16384", nvs_size=64, profile="lbnl",
          grid={"hbm_capacity": [float(x) for x in np.linspace(80, 1000, points)],
                "hbm_bandwidth": [float(x) for x in np.linspace(1000, 16000, 11)]}, max_candidates=6e9)
for path in ("device", "host", "device"):
    stream.DEVICE_STREAM = path == "device"
    for rep in range(2):
        t0 = time.perf_counter()
        res = search.run_search(**kw)
        wall = time.perf_counter() - t0
        st = res.stats
        print(json.dumps({"path": path, "run": rep, "wall_s": wall, "evaluations": st["evaluations"],
                          "evals_per_s": st["evaluations"] / wall,
                          **{k: st[k] for k in ("head_s", "stream_s", "tail_s", "compile_s", "eval_s")},
                          **st.get("device_stream", {})}), flush=True)
