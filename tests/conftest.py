"""Shared fixtures of the kernel, enumeration and search tests.

`dse.configure()` runs first, as the `dse` command does: the XLA flags (no FMA on x86, one host
device per core) must be in place before JAX starts its CPU backend, and the kernel tests call the
kernels directly, under the process-wide 64-bit mode it turns on.
"""

from __future__ import annotations

import os

import dse

#: LLVM optimization level of the test processes' XLA programs (`DSE_TEST_XLA_OPT`, default 0). The
#: tests' programs run on small arrays, so compiling them dominates the suite: at level 0 XLA compiles
#: them about a fifth faster and they compute the same bits (XLA's CPU backend does not reassociate
#: floating point at any level; tests/explore/test_opt_level.py compares the two levels bit for bit).
#: `DSE_TEST_XLA_OPT=production` compiles as the `dse` command does (XLA's default level).
TEST_XLA_OPT = os.environ.get("DSE_TEST_XLA_OPT", "0")
if TEST_XLA_OPT not in ("0", "1", "2", "3", "production"):
    raise SystemExit(f"DSE_TEST_XLA_OPT = {TEST_XLA_OPT!r}: expected 0, 1, 2, 3 or production")
if TEST_XLA_OPT != "production" and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_backend_optimization_level={TEST_XLA_OPT}").strip()

#: No kept programs in the test processes (`DSE_KEEP_PROGRAMS=0`; JAX's persistent cache stays on and the
#: workers share their compilations through it): a test process compiles most programs once, so keeping
#: each (serializing it, loading it back and running it) costs more than it returns: with a cold cache
#: on this 2-core machine the suite ran in 402 s and 404 s, against 433 s and 438 s keeping them
#: (`DSE_KEEP_PROGRAMS=1 python -m pytest -q`). tests/explore/test_caches.py keeps them in a folder of
#: its own.
os.environ.setdefault("DSE_KEEP_PROGRAMS", "0")

dse.configure()  # must precede any JAX computation

import pytest

from dse.truth import reference
from dse.spec.specs import load_model, load_system

#: The stored seed-001 results (tests/reference/lbnl/*.json), loaded once at collection.
REFERENCE_FILES = reference.load_all()


def pytest_generate_tests(metafunc):
    """A test that takes `ref_file` runs once per stored reference file."""
    if "ref_file" in metafunc.fixturenames:
        metafunc.parametrize("ref_file", REFERENCE_FILES, ids=[r.path.stem for r in REFERENCE_FILES],
                             scope="module")


@pytest.fixture(scope="session")
def reference_files():
    return REFERENCE_FILES


@pytest.fixture(scope="session")
def gpt3_1t():
    return load_model("gpt3_1t")


@pytest.fixture(scope="session")
def vit_era5():
    return load_model("vit_era5")


@pytest.fixture(scope="session")
def b200():
    return load_system("b200")
