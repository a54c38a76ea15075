"""The console answer of a study (`dse`, `dse -m`): the best configurations per strategy, the best
line of the whole question and, where nothing fits, the least memory any candidate needs."""

from __future__ import annotations

from typing import Mapping

import polars as pl

from dse.explore.search import run_search
from dse.interface.table import MECHANISMS, render_frame, with_context_columns, with_mechanisms
from dse.results import io

SHOW = ["n_gpus", "rank", "n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p", "nvs_d", "n_b",
        "iteration_time", "throughput", "memory", "training_days"]


def unvalidated(job, row) -> str:
    """The answer line's note where no measured run validates the calibration behind a row: its
    generation, precision and framework; "" without a calibration."""
    from dse.truth.calibration import profile_calibration
    from kernels.params import PRECISIONS

    cal = profile_calibration(job.profile)
    if cal is None:
        return ""
    precision = PRECISIONS[int(row.get("precision") or 0)]
    return f" ({cal.band_text(job.system.generation, precision)}: no error band)"


def smallest_memory(job, strategy: str) -> tuple[float, int, float]:
    """When nothing fits: (the least memory per GPU of any candidate, its GPU count, the HBM
    capacity it was held to), by a second pass that keeps only the memory column's minimum."""
    best = [float("inf"), 0, job.system.hbm_capacity]

    def keep(rows: pl.DataFrame) -> None:
        i = rows["memory"].arg_min()
        if i is not None and rows["memory"][i] < best[0]:
            r = rows.row(i, named=True)
            best[:] = [r["memory"], r["n_gpus"], r.get("hbm_capacity", job.system.hbm_capacity)]

    run_search(model=job.model, system=job.system, strategy=strategy, n_gpus=job.n_gpus, nvs_size=job.nvs_sizes,
               profile=job.profile, global_batch=job.global_batch, network=job.network, top_k=1, grid=job.grid,
               chunk=job.chunk, keep_rows=keep, max_candidates=job.max_candidates)
    return tuple(best)


def answer(top: pl.DataFrame, job, searched: Mapping[str, int] | None = None,
           smallest: Mapping[str, tuple] | None = None) -> str:
    """The console answer: the best configurations per strategy and GPU count (`output.show` of
    each; 0: only the best line). `searched`: the candidates each strategy enumerated (0: no
    configuration exists, which is not "nothing fits"); `smallest`: for a strategy where nothing
    fits, the least memory any candidate needs (`smallest_memory`), said against the capacity."""
    if top.is_empty():
        top = pl.DataFrame(schema={"strategy": pl.Utf8, "rank": pl.Int64, "n_gpus": pl.Int64,
                                   "throughput": pl.Float64})
    grid_cols = [c for c in io.HARDWARE if c in job.grid or any(
        isinstance(v, Mapping) and c in v for v in job.grid.values())]
    if len(job.nvs_sizes) > 1:
        grid_cols = ["nvs_size"] + grid_cols
    top = top.filter(pl.col("rank").is_not_null()) if top["rank"].null_count() < len(top) else top
    parts = []
    groups = top.select([c for c in ["strategy"] + grid_cols + ["n_gpus"] if c in top.columns]).unique().height
    many = groups > 6
    for strategy in job.strategies:
        t = top.filter(pl.col("strategy") == strategy)
        cols = [c for c in SHOW if c in t.columns]
        if strategy != "summa":
            cols = [c for c in cols if c != "n_b"]
        cols = grid_cols + cols
        if t.is_empty():
            if (searched or {}).get(strategy, -1) == 0:
                parts.append(f"{strategy}: no configuration exists at any GPU count asked (see the notes above)")
            elif strategy in (smallest or {}):
                need, n, cap = smallest[strategy]
                parts.append(f"{strategy}: nothing fits: the smallest configuration needs {need:.4g} GB per GPU "
                             f"(at {n} GPUs) and the HBM holds {cap:g} GB; use more GPUs, more HBM or a smaller "
                             "global batch")
            else:
                parts.append(f"{strategy}: nothing fits in {job.system.hbm_capacity:g} GB at any GPU count asked")
            continue
        if not job.show:
            continue
        if many:
            t = t.filter(pl.col("rank") == 1).sort(grid_cols + ["n_gpus"])
            title = f"{strategy}: fastest configuration per " + ", ".join(grid_cols + ["GPU count"])
        else:
            front = len(t)
            t = t.filter(pl.col("rank") <= job.show).sort(grid_cols + ["n_gpus", "rank"])
            title = f"{strategy}: the {job.show} fastest configurations"
            if job.keep == "pareto":
                title = (f"{strategy}: the Pareto front of {', '.join(job.objectives)} ({front} rows; "
                         f"the {min(job.show, front)} fastest of each group shown)")
        t, cols = with_mechanisms(t, cols)
        t, cols = with_context_columns(t, cols, strategy)  # tp1d: n2 is cp, shown when used
        parts.append(render_frame(t, cols, title=title, formats={
            "iteration_time": ".5g", "throughput": ".5g", "memory": ".4g", "training_days": ".3g"}))
    best = top.filter(pl.col("rank") == 1).sort("throughput", descending=True)
    if len(best) and not many:
        r = best.row(0, named=True)
        td = r.get("training_days")
        days = f", {td:.3g} days for the training set" if td is not None and td == td else ""
        mech = "".join(f" {k}={names[r[k]] if names else r[k]}" for k, (unused, names) in MECHANISMS.items()
                       if k in r and r[k] != unused)
        band = (f" (calibrated: ±{100 * r['error_band']:.1f}% typical, ±{100 * r['error_band_max']:.1f}% worst "
                "on measured runs)" if r.get("error_band") is not None else unvalidated(job, r))
        second = "cp" if r["strategy"] == "tp1d" else "n2"  # tp1d's n2 is Megatron's context parallelism
        cost = r.get("network_cost")
        net = (f"; network {r['network']}: {r['network_switches']:,} switches, {cost / 1e6:.4g} M USD, "
               f"{r['network_power'] / 1e3:.4g} kW" if cost is not None and cost == cost
               and r.get("network_power") is not None else f"; network {r.get('network', job.network.name)}")
        parts.append(f"best: {r['strategy']} n1={r['n1']} {second}={r['n2']} n_p={r['n_p']} n_d={r['n_d']} "
                     f"microbatch={r['microbatch']}{mech} on {r['n_gpus']} GPUs: {r['iteration_time']:.4g} s per "
                     f"iteration, {r['throughput']:.4g} samples/s{days}{band}{net}")
    return "\n\n".join(parts)


