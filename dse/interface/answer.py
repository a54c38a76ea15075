"""The console answer of a study (`dse`, `dse -m`): the best configurations per strategy, the best
line of the whole question and, where nothing fits, the least memory any candidate needs."""

from __future__ import annotations

from typing import Mapping

import polars as pl

from dse.explore.search import run_search
from dse.interface.table import render_frame, with_context_columns, with_mechanisms
from dse.results import io

SHOW = ["n_gpus", "rank", "n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p", "nvs_d", "n_b",
        "iteration_time", "throughput", "memory", "training_days"]


def unvalidated(job, row) -> str:
    """The answer line's note where no measured run validates the calibration behind a row: its
    generation, precision and framework; "" without a calibration."""
    from dse.truth.calibration import profile_calibration
    from dse.interface.reproduce import decoded

    cal = profile_calibration(job.profile)
    if cal is None:
        return ""
    precision = decoded("precision", row.get("precision") or 0)
    return f" ({cal.band_text(job.system.generation, precision, job.model.arch.moe)}: no error band)"


def band_note(job, row) -> str:
    """The answer line's error band of a row: " (calibrated: ±x% typical, ±y% worst on measured
    runs)" from its `error_band` columns (`dse.truth.calibration.with_error_band`), else that no
    measured run validates its regime (`unvalidated`); "" without a calibration."""
    if row.get("error_band") is not None:
        return (f" (calibrated: ±{100 * row['error_band']:.1f}% typical, ±{100 * row['error_band_max']:.1f}% worst "
                "on measured runs)")
    return unvalidated(job, row)


def no_days(job) -> str:
    """What a time line says where the model has no training length (no training days, and no
    per-run energy or cost): how to give it one."""
    return (f" (no training days: model {job.model.name} has no training length; set model.training_tokens or "
            "model.training_samples)")


def system_status(job) -> str:
    """The answer line's note on a system preset that is not a shipped system (`SystemSpec.status`)."""
    from dse.spec.specs import SYSTEM_STATUS

    status = getattr(job.system, "status", "")
    if not status:
        return ""
    return f" [system {job.system.name}: {SYSTEM_STATUS[status]} (NVS {job.system.nvs_size})]"


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


def grid_columns(grid: Mapping) -> list[str]:
    """The hardware fields a `search.grid` varies (a field, or a field of a group of fields varied
    together), in the dataset's column order."""
    return [c for c in io.HARDWARE if c in grid or any(isinstance(v, Mapping) and c in v for v in grid.values())]


def shared_rows(top: pl.DataFrame, strategies) -> pl.Expr:
    """Rows of `top` that another searched strategy owns: tp2d with n2 = 1 is tp1d without context
    parallelism (the same configuration, the same time and memory), shown once, as tp1d's."""
    if "tp1d" in strategies and "n2" in top.columns:
        return (pl.col("strategy") == "tp2d") & (pl.col("n2") == 1)
    return pl.lit(False)


def ties(top: pl.DataFrame) -> pl.DataFrame:
    """`top` with a column `tie`: whether the row's time is within the error band of the fastest
    row of its GPU count (and hardware group) across strategies, so its lead is not measurable.
    Null where the rows carry no band."""
    if "error_band" not in top.columns or top.is_empty() or top["error_band"].null_count() == len(top):
        return top.with_columns(pl.lit(None, dtype=pl.Boolean).alias("tie"))
    keys = [c for c in ("nvs_size", *io.HARDWARE, "n_gpus") if c in top.columns]
    fastest = pl.col("iteration_time").min().over(keys)
    band = pl.col("error_band").filter(pl.col("iteration_time") == fastest).first().over(keys)
    # the reference is one row, the first of the fastest; a row as fast as it is a tie too
    index = pl.int_range(pl.len()).over(keys)
    reference = index.filter(pl.col("iteration_time") == fastest).first().over(keys)
    return top.with_columns(((pl.col("iteration_time") <= fastest * (1 + band))
                             & (index != reference)).alias("tie"))


def answer(top: pl.DataFrame, job, searched: Mapping[str, int] | None = None,
           smallest: Mapping[str, tuple] | None = None) -> str:
    """The console answer: the best configurations per strategy and GPU count (`output.show` of
    each; 0: only the best line), then one best line for the whole question, with its complete
    configuration and the `dse eval` command that reproduces it. A configuration two strategies
    share is shown once (`shared_rows`); rows within the best's error band are marked as ties.
    `searched`: the candidates each strategy enumerated (0: no configuration exists, which is not
    "nothing fits"); `smallest`: for a strategy where nothing fits, the least memory any candidate
    needs (`smallest_memory`), said against the capacity."""
    if top.is_empty():
        top = pl.DataFrame(schema={"strategy": pl.Utf8, "rank": pl.Int64, "n_gpus": pl.Int64,
                                   "throughput": pl.Float64})
    grid_cols = grid_columns(job.grid)
    if len(job.nvs_sizes) > 1:
        grid_cols = ["nvs_size"] + grid_cols
    top = top.filter(pl.col("rank").is_not_null()) if top["rank"].null_count() < len(top) else top
    shared = top.filter(shared_rows(top, job.strategies))
    top = ties(top.filter(~shared_rows(top, job.strategies)))
    parts, shown = [], []
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
            elif strategy == "tp2d" and len(shared):
                parts.append("tp2d: its fastest configurations have n2 = 1, which are tp1d's (above)")
            else:
                parts.append(f"{strategy}: nothing fits in {job.system.hbm_capacity:g} GB at any GPU count asked")
            continue
        if not job.show:
            continue
        own = " with n2 > 1 (n2 = 1 is tp1d, above)" if strategy == "tp2d" and len(shared) else ""
        if many:
            t = t.filter(pl.col("rank") == pl.col("rank").min().over(grid_cols + ["n_gpus"])).sort(grid_cols + ["n_gpus"])
            title = f"{strategy}: fastest configuration{own} per " + ", ".join(grid_cols + ["GPU count"])
        else:
            front = len(t)
            t = t.sort(grid_cols + ["n_gpus", "rank"]).with_columns(
                pl.int_range(1, pl.len() + 1).over(grid_cols + ["n_gpus"]).alias("rank"))
            t = t.filter(pl.col("rank") <= job.show)
            title = f"{strategy}: the {job.show} fastest configurations{own}"
            if job.keep == "pareto":
                title = (f"{strategy}: the Pareto front of {', '.join(job.objectives)} ({front} rows; "
                         f"the {min(job.show, front)} fastest of each group shown)")
        shown.append(t.select("strategy", *[c for c in grid_cols + ["n_gpus"] if c in t.columns], "tie"))
        t, cols = with_mechanisms(t, cols)
        t, cols = with_context_columns(t, cols, strategy)  # tp1d: n2 is cp, shown when used
        if t["tie"].any():
            cols = cols + ["tie"]
        parts.append(render_frame(t, cols, title=title, formats={
            "iteration_time": ".5g", "throughput": ".5g", "memory": ".4g", "training_days": ".3g"}))
    # one line for the whole question, however many groups it has; its ties are those of the rows shown
    line = best_line(top, job, grid_cols, pl.concat(shown, how="diagonal_relaxed") if shown else None)
    if line:
        parts.append(line)
    return "\n\n".join(parts)


def fastest(top: pl.DataFrame, strategies) -> dict | None:
    """The row of `top` with the highest throughput; between equal ones, the strategy asked first
    (tp1d before tp2d: the simpler name of a shared configuration). None when `top` is empty."""
    if top.is_empty() or "throughput" not in top.columns:
        return None
    order = {s: i for i, s in enumerate(strategies)}
    return top.with_columns(pl.col("strategy").replace_strict(order, default=len(order)).alias("_order")).sort(
        ["throughput", "_order"], descending=[True, False]).drop("_order").row(0, named=True)


def best_line(top: pl.DataFrame, job, grid_cols, shown: pl.DataFrame | None = None) -> str:
    """The answer to the whole question: the fastest configuration over every strategy, GPU count
    and hardware point, its complete configuration, its error band and the ties within it, its
    network, and the `dse eval` command that gives the same time. `shown`: the rows the tables
    above print (strategy, grid columns, n_gpus, tie), whose ties the line counts; None (no table
    printed, `output.show` 0): the ties among every row kept."""
    from dse.interface.reproduce import eval_command, plan

    r = fastest(top, job.strategies)
    if r is None:
        return ""
    td = r.get("training_days")
    days = f", {td:.3g} days for the training set" if td is not None and td == td else no_days(job)
    status = band_note(job, r) + system_status(job)
    rows = top if shown is None else shown
    same = rows.filter(pl.col("n_gpus") == r["n_gpus"], *[pl.col(c) == r[c] for c in grid_cols])
    n_ties = int(same["tie"].sum() or 0) if "tie" in same.columns else 0
    where = "kept" if shown is None else "shown"
    tie = (f"; {n_ties} other configuration{'s' if n_ties > 1 else ''} {where} {'are' if n_ties > 1 else 'is'} "
           "within that band (tie)" if n_ties else "")
    cost = r.get("network_cost")
    net = (f"; network {r['network']}: {r['network_switches']:,} switch{'es' * (r['network_switches'] != 1)}, "
           f"{cost / 1e6:.4g} M USD, "
           f"{r['network_power'] / 1e3:.4g} kW" if cost is not None and cost == cost
           and r.get("network_power") is not None else f"; network {r.get('network', job.network.name)}")
    hw = "".join(f" {c}={r[c]:g}" for c in grid_cols)
    batch = f", global batch {job.global_batch}" + (f" ({job.batch_source})" if job.batch_source != "given" else "")
    return (f"best: {plan(r, r['strategy'])} on {r['n_gpus']} GPUs{hw}{batch}: "
            f"{r['iteration_time']:.4g} s per iteration, {r['throughput']:.4g} samples/s{days}{status}{tie}{net}\n"
            f"reproduce: {eval_command(job, r, r['strategy'], tuple(grid_cols))}")
