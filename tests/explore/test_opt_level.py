"""The test processes compile XLA's programs at LLVM level 0 (tests/conftest.py, `DSE_TEST_XLA_OPT`),
the `dse` command at XLA's default level: both must compute the same bits, or the suite would check
numbers the command does not print.

A sample of candidates of one strategy under the default profile, each with its own randomly
perturbed system (tests/explore/test_batch_exact.py's draw), is evaluated here and in a fresh process
compiled at XLA's default level; every metric must be identical.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from dse.explore.engine import METRIC_COLUMNS
from kernels.params import PROFILES, Candidates, System, Workload

from tests.explore.test_batch_exact import batched, draw

ROOT = Path(__file__).resolve().parents[2]
M = 20_000  # candidates compared

SCRIPT = """
import sys
import dse
settings = dse.configure()
assert "xla_backend_optimization_level" not in settings.xla_flags, settings.xla_flags
import jax, numpy as np
from kernels.params import PROFILES, Candidates, System, Workload
from tests.explore.test_batch_exact import batched
data = np.load(sys.argv[1])
cut = lambda cls, key: cls(*(data[key + f] for f in cls._fields))
out = jax.device_get(batched("tp2d", PROFILES["default"], cut(Candidates, "c_"), cut(Workload, "w_"), cut(System, "s_")))
np.savez(sys.argv[2], **{k: np.asarray(getattr(out, k)) for k in out._fields})
"""


@pytest.mark.skipif(os.environ.get("DSE_TEST_XLA_OPT") == "production", reason="the tests compile at the production level")
def test_level_0_computes_the_production_level_s_bits(tmp_path):
    assert "xla_backend_optimization_level" in os.environ.get("XLA_FLAGS", "")  # this process: the tests' level
    cand, work, systems, *_ = draw("tp2d", "default", 11)
    take = lambda t: type(t)(*(np.asarray(x)[-M:] for x in t))  # the random part of the draw
    cand, work, systems = take(cand), take(work), take(systems)
    here = jax.device_get(batched("tp2d", PROFILES["default"], cand, work, systems))
    inputs = {**{"c_" + f: x for f, x in zip(Candidates._fields, cand)},
              **{"w_" + f: x for f, x in zip(Workload._fields, work)},
              **{"s_" + f: x for f, x in zip(System._fields, systems)}}
    np.savez(tmp_path / "in.npz", **inputs)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(ROOT)
    subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                   env=env, cwd=ROOT, check=True, capture_output=True, text=True)
    there = np.load(tmp_path / "out.npz")
    assert here.feasible.any() and not here.feasible.all()
    for k in METRIC_COLUMNS:
        a, b = np.asarray(getattr(here, k)), there[k]
        diff = np.nonzero(a != b)[0]
        assert len(diff) == 0, f"{k}: {len(diff)} of {M} candidates differ between the levels, first {a[diff[:3]]} vs {b[diff[:3]]}"
