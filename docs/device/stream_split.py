"""Where one call of the device stream (`dse.explore.device_stream`) spends its time on an
accelerator: copying the call's tables in, the whole program (expand, evaluate, select) on
device-resident tables, the selection alone and its sort alone, and the call as the search makes
it (host tables, results fetched). GPT3-1T on B200, one system, the call of a large search, each
strategy. Prints one JSON line per strategy. Usage: python docs/device/stream_split.py [SYSTEMS]
(SYSTEMS: the hardware axis, 1 by default; the 1e9 sweep has 1,760)."""
from functools import partial

import sys

import jax
import jax.numpy as jnp
import numpy as np

from dse.commands.bench import filled_call
from dse.explore import device_stream as ds
from dse.runtime import float64
from timing import per_strategy, timed


@float64
def split(strategy, n_sys=1):
    prog, call, w, systems = filled_call(strategy, n_sys)
    caps = prog.caps
    run = prog.compiled(w, systems)
    wd, sd = jax.device_put(w), jax.device_put(systems)
    kept = np.full((n_sys, caps.runs), -np.inf)
    tables = (call.cw, call.cf, call.kb, call.kw, call.rs)
    scalars = (np.int32(call.rows), np.int32(10))
    resident = jax.device_put(tables + (kept,))

    def host_args():
        return tables + scalars + (kept, wd, sd)

    def dev_args():
        return resident[:5] + scalars + (resident[5], wd, sd)

    r = {"strategy": strategy, "systems": n_sys, "rows": caps.rows, "configs_used": call.n_configs, "configs": caps.configs,
         "words_used": call.n_words, "words": caps.words, "in_bytes": sum(a.nbytes for a in tables) + kept.nbytes}
    r["h2d_s"] = timed(lambda: jax.block_until_ready(jax.device_put(tables + (kept,))))[0]
    r["program_resident_s"] = timed(lambda: jax.block_until_ready([run(*dev_args()) for _ in range(8)]))[0] / 8
    r["program_host_tables_s"] = timed(lambda: jax.block_until_ready([run(*host_args()) for _ in range(8)]))[0] / 8

    def whole():
        ds.fetch(run(*host_args()), caps)
    r["whole_s"] = timed(whole)[0]
    f = run(*dev_args())[4]
    real = jnp.arange(caps.rows) < call.rows
    sel = jax.jit(partial(ds.select, n_runs=caps.runs, n_selected=caps.selected))
    rs, kd = resident[4], resident[5]
    r["select_s"] = timed(lambda: jax.block_until_ready([sel(f, real, rs, 10, kd) for _ in range(8)]))[0] / 8
    key = jax.device_put(np.random.default_rng(0).integers(0, 2**63, size=f.shape, dtype=np.int64).astype(np.uint64))
    sort = jax.jit(partial(jnp.sort, axis=1))
    r["sort_s"] = timed(lambda: jax.block_until_ready([sort(key) for _ in range(8)]))[0] / 8
    r["whole_evals_per_s"] = n_sys * caps.rows / r["whole_s"]
    r["program_resident_evals_per_s"] = n_sys * caps.rows / r["program_resident_s"]
    return r


if __name__ == "__main__":
    per_strategy(split, int(sys.argv[1]) if len(sys.argv) > 1 else 1)
