"""Exact integer arithmetic in float64, the kernels' one number type, and shape-stable division.

Candidates and model shapes arrive as int64 and are converted to float64 once, at the kernel's
entry. Integers below 2**53 are exact in float64, and so are their sums, differences and products
while they stay below 2**53 (model dimensions and b * l products are below 1e10 here). Every shard
size is a floor division `fdiv`: q = floor(a / b), then one exact correction step (the remainder
a - q b is computed exactly) so that q is the integer quotient whatever rounding the division had.
Integer division would give the same numbers, but x86 has no vector instruction for it and
Python's floor semantics add sign fix-ups; the float form keeps the whole kernel one vectorized loop.

One candidate evaluated alone gives bit for bit the result it gets inside any batch. XLA's
algebraic simplifier rewrites some arithmetic only when an operand is a broadcast: a division by a
broadcast becomes a multiplication by its reciprocal, and a product with two broadcast factors,
(A * B) * C, is reassociated as A * (B * C). A batch evaluates scalars (model shape, hardware,
constants) broadcast against arrays of candidates, a single candidate does not, so the two would
round differently. Three habits close that gap: every division is written `x * recip(d)`; the
model shape and hardware are `pin`ned to the candidates' shape behind an optimization barrier at
the kernel's entry, so they are arrays, not broadcasts; and constant coefficients are folded in
Python (`x * (13.0 * TFLOP)`, not `13.0 * x * TFLOP`), so no product has two broadcast factors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def as_float(x):
    """An integer (or integer-valued) array as float64."""
    return jnp.asarray(x).astype(jnp.float64)


def fdiv(a, b):
    """floor(a / b) for non-negative integer-valued float64 arrays, exact (see module docstring)."""
    a, b = as_float(a), as_float(b)
    q = jnp.floor(a / b)
    r = a - q * b
    return q + jnp.where(r >= b, 1.0, 0.0) - jnp.where(r < 0.0, 1.0, 0.0)


def pin(tree, like):
    """Every leaf of `tree` broadcast to the shape it takes against `like`, then materialized
    (`lax.optimization_barrier`), so that XLA sees arrays instead of broadcasts (module docstring)."""
    leaves, treedef = jax.tree.flatten(tree)
    shape = jnp.shape(like)
    out = [jnp.broadcast_to(as_float(x), jnp.broadcast_shapes(jnp.shape(x), shape)) for x in leaves]
    return jax.tree.unflatten(treedef, list(lax.optimization_barrier(tuple(out))))


def recip(x):
    """1 / x, for divisions written as multiplications (see module docstring)."""
    return 1.0 / as_float(x)
