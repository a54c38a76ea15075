"""Shared fixtures of the kernel, enumeration and search tests.

`dse.configure()` runs first, as the `dse` command does: the XLA flags (no FMA on x86, one host
device per core) must be in place before JAX starts its CPU backend, and the kernel tests call the
kernels directly, under the process-wide 64-bit mode it turns on.
"""

from __future__ import annotations

import dse

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
