"""Where a whole search's host time goes: cProfile of one warm search (GPT3-1T, default 1D space,
B200 at SYSTEMS HBM capacities), the functions by their own time. Usage:
python docs/device/profile_search.py [SYSTEMS]"""
import cProfile
import importlib
import pstats
import sys

import numpy as np

import dse  # noqa: F401  (configures JAX)

search = importlib.import_module("dse.explore.search")
p = int(sys.argv[1]) if len(sys.argv) > 1 else 64
kw = dict(model="gpt3_1t", system="b200", strategy="tp1d", n_gpus="pow2:4:16384", nvs_size=[8, 72], profile="default",
          max_candidates=6e9, grid={"hbm_capacity": [float(x) for x in np.linspace(80, 384, p)]} if p > 1 else None)
search.run_search(**kw)
prof = cProfile.Profile()
prof.enable()
res = search.run_search(**kw)
prof.disable()
print({k: v for k, v in res.stats.items() if k not in ("notes", "empty")})
pstats.Stats(prof).sort_stats("tottime").print_stats(25)
