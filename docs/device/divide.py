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

from dse.explore.engine import profile_of, space_options, stack_systems
from dse.explore.placement import enumerate_space
from dse.explore.space import Question
from dse.explore.stream import candidate_form, search_kernel
from dse.runtime import float64
from dse.spec.specs import load_model, load_system
from kernels.params import Candidates
from timing import per_strategy, timed


AS_BUILT = partial(lax_internal._nary_lower_hlo, hlo.divide)


def _float_as_multiply(ctx, x, y, **kw):
    op = hlo.multiply if np.issubdtype(ctx.avals_out[0].dtype, np.floating) else hlo.divide
    return lax_internal._nary_lower_hlo(op, ctx, x, y, **kw)


@float64
def measure(strategy, call):
    m, s = load_model("gpt3_1t"), load_system("b200")
    prof = profile_of("lbnl")
    q = Question(m, strategy, 4096, **space_options(prof))
    cand = enumerate_space(q, 16384, 64)
    kern = search_kernel(strategy, prof, 1, packed=candidate_form(q, [16384]), evaluations=1 << 30)
    idx = np.arange(kern.chunk) % len(cand["n1"])
    blk = jax.device_put(kern.block(np.stack([cand[f][idx] for f in Candidates._fields])))
    w, sy = jax.device_put(m.workload(4096)), jax.device_put(stack_systems([s.params()]))
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
