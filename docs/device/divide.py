"""How much of the kernel's time on a device is float64 division: the search program (GPT3-1T,
B200, the bench's kernel workload, calls of CALL candidates, one system) timed on device-resident
inputs, 8 calls back to back, as built and with every float64 divide of the program lowered as a
multiply (wrong values, the same program otherwise: an upper bound on what removing divisions
could gain). Prints one JSON line per strategy. Usage: python docs/device/divide.py [CALL]"""
import sys
from functools import partial

import jax
import numpy as np

from jax._src.interpreters import mlir
from jax._src.lax import lax as lax_internal
from jax._src.lib.mlir.dialects import hlo

from dse.runtime import float64
from timing import one_call, per_strategy, timed


AS_BUILT = partial(lax_internal._nary_lower_hlo, hlo.divide)


def _float_as_multiply(ctx, x, y, **kw):
    op = hlo.multiply if np.issubdtype(ctx.avals_out[0].dtype, np.floating) else hlo.divide
    return lax_internal._nary_lower_hlo(op, ctx, x, y, **kw)


@float64
def measure(strategy, call):
    kern, *inputs = one_call(strategy, call)
    blk, w, sy = jax.device_put(inputs)
    out = {"strategy": strategy, "call": kern.chunk}
    for name in ("as_built", "divide_as_multiply"):
        if name == "divide_as_multiply":
            mlir.register_lowering(lax_internal.div_p, _float_as_multiply)
        try:
            prog = kern._fn.lower(blk, w, sy).compile()  # not through dse's program cache
        finally:
            mlir.register_lowering(lax_internal.div_p, AS_BUILT)

        def eight():
            jax.block_until_ready([prog(blk, w, sy) for _ in range(8)])
        t = timed(eight, 10)[0]
        out[name + "_evals_per_s"] = 8 * kern.chunk / t
    out["divides_share"] = 1 - out["as_built_evals_per_s"] / out["divide_as_multiply_evals_per_s"]
    return out


if __name__ == "__main__":
    per_strategy(measure, int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20)
