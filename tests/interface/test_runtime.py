"""`import dse` changes nothing in the process; `dse.configure()` applies the settings once; the
API computes in float64 without it, a search's worker thread included (run in a fresh
interpreter: the test process is configured)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = r"""
import json, os, warnings
import jax
import dse, kernels, dse.traffic, dse.figures
before = {"flags": os.environ.get("XLA_FLAGS"), "x64": jax.config.jax_enable_x64,
          "cache": jax.config.jax_compilation_cache_dir}
r = dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", profile="lbnl", n1=4, n_p=128,
                 n_d=8, microbatch=1, nvs1=4, nvs_p=2, nvs_d=1)
# a search of several chunks (evaluated in a worker thread) and of one (in this thread)
kw = dict(model="gpt3_1t", system="b200", strategy="tp1d", n_gpus="pow2:4:16384", nvs_size=[8, 64], profile="lbnl",
          top_k=3)
many, one = dse.run_search(**kw, chunk=1000), dse.run_search(**kw)
searched = [many.top["iteration_time"].to_list(), one.top["iteration_time"].to_list(),
            many.counts["feasible"].to_list() == one.counts["feasible"].to_list()]
after_api = jax.config.jax_enable_x64
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = dse.configure(compile_cache=False)
    second = dse.configure(compile_cache=False)
print(json.dumps({"before": before, "t": r["iteration_time"], "after_api": after_api,
                  "first": [first.xla_flags, first.xla_flags_effective, first.x64],
                  "same": tuple(first) == tuple(second), "warned": len(caught), "searched": searched,
                  "flags_now": os.environ.get("XLA_FLAGS")}))
"""


def test_import_has_no_side_effects_and_the_api_is_float64():
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "DSE_CPU_DEVICES", "DSE_ALLOW_FMA")}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] == {"flags": None, "x64": False, "cache": None}
    assert abs(got["t"] / 9.039049610051995 - 1) < 1e-13  # float32 would be off by ~1e-7
    assert got["after_api"] is False  # the API's 64-bit mode is scoped to its calls
    many, one, counts_equal = got["searched"]  # the worker thread that evaluates chunks in it too
    assert many == one and len(one) > 26 and counts_equal
    flags, effective, x64 = got["first"]
    # the backend had started (the evaluation above), so the flags are not applied, with a warning
    assert effective is False and got["warned"] == 1 and got["flags_now"] is None and flags == ""
    assert x64 is True and got["same"]
