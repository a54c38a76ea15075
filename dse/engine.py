"""The compiled kernels and the conversion between NumPy tables and kernel containers.

One jitted function per (strategy, profile); model shape and hardware parameters are traced
arguments, so changing the model, the system or the number of systems in a grid does not compile a
new program unless the array shapes change.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Mapping

import jax
import numpy as np

import kernels  # noqa: F401  (enables 64-bit mode)
from kernels.iteration import evaluate_candidates
from kernels.params import PROFILES, Candidates, Metrics, Profile, System, Workload

#: Candidate columns, in the order of `kernels.Candidates`.
CANDIDATE_COLUMNS = Candidates._fields
#: Metric columns, in the order of `kernels.Metrics`.
METRIC_COLUMNS = Metrics._fields


def profile_of(name: str | Profile) -> Profile:
    if isinstance(name, Profile):
        return name
    from dse.specs import check_choice

    return PROFILES[check_choice("profile", name, PROFILES)]


@lru_cache(maxsize=None)
def compiled(strategy: str, profile: Profile):
    """The jitted kernel `(Candidates, Workload, System) -> Metrics` for one strategy and profile."""

    def run(c: Candidates, w: Workload, s: System) -> Metrics:
        return evaluate_candidates(strategy, c, w, s, profile)

    return jax.jit(run)


def to_candidates(table: Mapping[str, np.ndarray]) -> Candidates:
    """Candidate columns (int64 NumPy arrays of one length) as a `Candidates` container."""
    return Candidates(*(np.ascontiguousarray(table[k], dtype=np.int64) for k in CANDIDATE_COLUMNS))


def run_metrics(
    strategy: str, profile: Profile, cands: Candidates, workload: Workload, system: System
) -> dict[str, np.ndarray]:
    """Evaluate candidates in one jitted call; metrics as NumPy arrays keyed by column name."""
    out = compiled(strategy, profile)(cands, workload, system)
    out = jax.device_get(out)
    return {k: np.asarray(v) for k, v in zip(METRIC_COLUMNS, out)}
