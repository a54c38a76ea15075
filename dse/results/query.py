"""Questions over a dataset, as Polars expressions on a lazy scan (`dse.results.io.scan`).

    import dse.results.io, dse.query as q
    lf = dse.results.io.scan("outputs/data/seed001")
    q.optimum(lf).collect()                                   # best configuration per group
    q.compare_systems(lf, model="gpt3_1t", strategy="tp1d")   # training days: n_gpus x system/NVS
    q.best_nvs(lf, model="gpt3_1t", system="b200", strategy="tp1d", nvs_size=8)
    q.speedup(lf, baseline="tp1d")                            # 2D strategies over 1D

Every function takes a LazyFrame and returns a LazyFrame (or, for pivots, a DataFrame); filters are
keyword arguments matched against columns.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import polars as pl

from dse.explore.ranking import best_rows

#: The columns that identify a search group: one optimum per group.
GROUP = ("model", "system", "strategy", "nvs_size", "n_gpus")
CONFIG = ("n1", "n2", "n_p", "n_d", "microbatch", "n_b")
PLACEMENT = ("nvs1", "nvs2", "nvs_p", "nvs_d")


def where(lf: pl.LazyFrame, **filters: Any) -> pl.LazyFrame:
    """Rows whose columns equal the given values (a list or tuple value means 'any of'). The
    categorical candidate columns are read by name and take names or the kernels' codes (`recompute="full"` or 2,
    `seq_par=True` or 1); a name they do not have is a KeyError naming the valid ones."""
    from dse.results.io import CATEGORIES, FLAGS, decode, value_name

    lf = decode(lf)  # a search frame's codes as a dataset's names
    cols = lf.collect_schema().names()
    for k, v in filters.items():
        if v is None:
            continue
        if k not in cols:
            raise KeyError(f"{k}: not a column of the dataset; columns: {', '.join(cols)}")
        vals = list(v) if isinstance(v, (list, tuple, set)) else [v]
        if k in CATEGORIES or k in FLAGS:
            vals = [value_name(k, x) for x in vals]
        lf = lf.filter(pl.col(k).is_in(vals) if len(vals) > 1 else pl.col(k) == vals[0])
    return lf


#: Job columns a sweep may vary besides the hardware (`dse -m network=a,b`, `profile=`, `global_batch=`).
SWEPT = ("network", "profile", "global_batch")


def _grid_columns(lf: pl.LazyFrame, extra: Iterable[str] = ()) -> list[str]:
    """The columns that vary in the dataset besides `extra`, to keep groups apart: the swept job
    columns (`SWEPT`) and the hardware (a grid axis or a swept system field)."""
    from dse.results.io import HARDWARE

    have = set(lf.collect_schema().names())
    names = [h for h in (*SWEPT, *HARDWARE) if h != "nvs_size" and h in have and h not in extra]
    if not names:
        return []
    counts = lf.select([pl.col(h).n_unique().alias(h) for h in names]).collect().row(0, named=True)
    return [h for h in names if counts[h] > 1]


def varying(lf: pl.LazyFrame, extra: Iterable[str] = ()) -> list[str]:
    """The columns besides `extra` that tell a dataset's groups apart (`_grid_columns`)."""
    return _grid_columns(lf, extra)


def optimum(lf: pl.LazyFrame, by: Sequence[str] = GROUP, **filters: Any) -> pl.LazyFrame:
    """The fastest feasible row of each group (`by`, plus every swept job column and hardware
    column that varies in the dataset: network, profile, global_batch, hbm_capacity, ...), ties
    broken as in the search (`dse.explore.ranking`)."""
    lf = where(lf, **filters).filter(pl.col("feasible"))
    return best_rows(lf, list(by) + _grid_columns(lf, by))


def compare_systems(
    lf: pl.LazyFrame,
    model: str,
    strategy: str,
    metric: str = "training_days",
    **filters: Any,
) -> pl.DataFrame:
    """The optimum's `metric` per GPU count (rows) for each system and NVS size (columns)."""
    best = optimum(lf, model=model, strategy=strategy, **filters).collect()
    if best.is_empty():
        return best
    best = best.with_columns((pl.col("system") + pl.lit(" NVS") + pl.col("nvs_size").cast(pl.Utf8)).alias("system_nvs"))
    order = best.select("system", "nvs_size", "system_nvs").unique().sort(["system", "nvs_size"])["system_nvs"].to_list()
    wide = best.pivot(on="system_nvs", index="n_gpus", values=metric, aggregate_function="first").sort("n_gpus")
    return wide.select(["n_gpus"] + [c for c in order if c in wide.columns])


def best_nvs(lf: pl.LazyFrame, **filters: Any) -> pl.LazyFrame:
    """Per group, the optimum's parallel configuration and where its groups sit in the NVS domain,
    with the throughput lost by the best other placement of the same configuration (needs the
    dataset to hold that placement: top-k rows often do, every-row datasets always)."""
    lf = where(lf, **filters).filter(pl.col("feasible"))
    best = optimum(lf)
    keys = list(GROUP)
    alt = (
        lf.join(best.select(keys + list(CONFIG) + list(PLACEMENT)), on=keys + list(CONFIG), suffix="_best")
        .filter(pl.any_horizontal([pl.col(p) != pl.col(f"{p}_best") for p in PLACEMENT]))
        .group_by(keys)
        .agg(pl.col("throughput").max().alias("next_placement_throughput"))
    )
    return (
        best.join(alt, on=keys, how="left")
        .with_columns((1.0 - pl.col("next_placement_throughput") / pl.col("throughput")).alias("next_placement_loss"))
        .select(keys + list(CONFIG) + list(PLACEMENT) + ["throughput", "next_placement_loss"])
        .sort(keys)
    )


def speedup(lf: pl.LazyFrame, baseline: str = "tp1d", **filters: Any) -> pl.LazyFrame:
    """Optimum throughput of every other strategy over the baseline's, per group."""
    best = optimum(lf, **filters)
    keys = [k for k in GROUP if k != "strategy"]
    base = best.filter(pl.col("strategy") == baseline).select(keys + [pl.col("throughput").alias("base")])
    return (
        best.filter(pl.col("strategy") != baseline)
        .join(base, on=keys, how="inner")
        .with_columns((pl.col("throughput") / pl.col("base")).alias("speedup"))
        .select(keys + ["strategy", "throughput", "base", "speedup"])
        .sort(["strategy"] + keys)
    )


def summary(lf: pl.LazyFrame) -> pl.DataFrame:
    """What a dataset holds: rows, groups and the range of GPU counts per model/system/strategy."""
    return (
        lf.group_by(["model", "system", "strategy", "nvs_size", "profile"])
        .agg(
            pl.len().alias("rows"),
            pl.col("n_gpus").min().alias("n_min"),
            pl.col("n_gpus").max().alias("n_max"),
            pl.col("feasible").sum().alias("feasible_rows"),
        )
        .sort(["model", "system", "strategy", "nvs_size"])
        .collect()
    )
