"""Exact integer arithmetic in float64, the kernels' one number type.

Candidates and model shapes arrive as int64 and are converted to float64 once, at the kernel's
entry. Every shard size is then a floor division done as floor(a / b) in float64, which is exact for
non-negative integers a < 2**52 and b >= 1: a / b either is an integer k (representable, so rounding
returns it) or lies at least 1/b below k + 1, a gap that round-to-nearest cannot cross while
a (k + 1) / k < 2**52. Model dimensions and b * l products are below 1e10 here. Integer division
would give the same numbers, but x86 has no vector instruction for it and Python's floor semantics
add sign fix-ups; the float form keeps the whole kernel in one vectorized loop.
"""

from __future__ import annotations

import jax.numpy as jnp


def as_float(x):
    """An integer (or integer-valued) array as float64."""
    return jnp.asarray(x).astype(jnp.float64)


def fdiv(a, b):
    """floor(a / b) for non-negative integer-valued float64 arrays (exact, see module docstring)."""
    return jnp.floor(as_float(a) / as_float(b))
