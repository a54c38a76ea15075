"""A search's results as frames: its top rows with every metric, every row, and the counts per group."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import polars as pl

from dse.explore.engine import METRIC_COLUMNS, run_metrics, table_rows
from dse.explore.space import COLUMNS
from dse.explore.topk import TopK
from dse.spec.network import COST_COLUMNS
from dse.spec.specs import ModelSpec
from dse.results.economics import cost_columns, resolve_economics, with_cost_columns
from dse.truth.calibration import BAND_COLUMNS
from kernels.params import Candidates, System
from kernels.units import training_days


def _metrics_frame(metrics: Mapping[str, np.ndarray], m: ModelSpec) -> dict[str, Any]:
    """Metric columns of result rows, with `training_days`: null for a model without a training set
    (no run: the dataset schema's rule, `dse.results.io`, and `dse.evaluate`'s, so the run's energy and cost
    are null too, `dse.results.economics`)."""
    out = dict(metrics)
    out["feasible"] = np.asarray(out["feasible"], dtype=bool)
    if m.samples is not None:
        out["training_days"] = training_days(m.samples, out["throughput"])
    else:
        out["training_days"] = pl.Series("training_days", [None] * len(out["throughput"]), dtype=pl.Float64)
    return out


def _beside_systems(sys_table: pl.DataFrame, system_ids: np.ndarray, data: Mapping[str, np.ndarray]) -> pl.DataFrame:
    """The columns `data` with each row's system fields before them, gathered by id (`sys_table`
    row i is system i; no join)."""
    return pl.concat([sys_table[system_ids], pl.DataFrame(data)], how="horizontal")


def _system_prices(sys_table: pl.DataFrame, economics: Any) -> tuple[np.ndarray, list]:
    """(group of each system id, groups): the price and power groups (`dse.results.economics.
    resolve_economics`; None: no preset) of the search's systems, one per system name (the points
    of a hardware grid share their base system's), and each system id's (`sys_table` row i is
    system i)."""
    names = sys_table["system"].to_list()
    index = {n: i for i, n in enumerate(dict.fromkeys(names))}
    return np.array([index[n] for n in names], dtype=np.int64), [resolve_economics(economics, n) for n in index]


def _top_frame(topk: TopK, q, prof, workload, sys_params: System, sys_table, groups, m, network,
               equipment: Mapping[str, np.ndarray], bucket: int | None, prices: tuple,
               economics: Any = None) -> pl.DataFrame:
    """The kept rows with every metric and the cost columns (`prices`: `_system_prices`), sorted by
    system, NVS size, GPU count and rank (sorted here, and each row's system fields and prices
    gathered by its id: `sys_table` row i is system i, `sys_params` its (systems,) parameters)."""
    if not len(topk.seg):
        return with_cost_columns(_empty_rows(sys_table, m, rank=True).with_columns(
            pl.lit(m.name).alias("model"), pl.lit(q.strategy).alias("strategy"), pl.lit(network).alias("network")),
            economics)
    seg, cols = topk.seg, topk.cols
    n_sys = len(sys_table)
    sys_id = seg % n_sys  # segments are group-major (`_reduce`)
    g = seg // n_sys
    rank = np.arange(len(seg)) - np.searchsorted(seg, seg, side="left") + 1
    nvs_of = np.array([k for k, _ in groups], dtype=np.int64)[g]
    n_of = np.array([n for _, n in groups], dtype=np.int64)[g]
    order = np.lexsort((rank, n_of, nvs_of, sys_id))
    # the program's rows gathered at once, padded to its size with copies of the first (`table_rows`)
    n = len(order)
    padded = np.concatenate([order, np.full(table_rows(n, bucket) - n, order[0])])
    cols, sys_id = cols[padded], sys_id[padded]
    c = Candidates(*(cols[:, j] for j in range(cols.shape[1])))
    per_row = System(*(np.asarray(x)[sys_id] for x in sys_params))
    metrics = run_metrics(q.strategy, prof, c, workload, per_row, network, m.arch, bucket=bucket)
    metrics = {k: v[:n] for k, v in metrics.items()}
    cols, sys_id = cols[:n], sys_id[:n]
    g, rank, nvs_of, n_of = g[order], rank[order], nvs_of[order], n_of[order]
    data = {"nvs_size": nvs_of, "n_gpus": n_of, "rank": rank.astype(np.int64)}
    data.update({k: cols[:, j].astype(np.int64) for j, k in enumerate(COLUMNS)})
    data.update(_metrics_frame(metrics, m))
    data.update({k: v[g] for k, v in equipment.items()})
    data.update(cost_columns(data, prices[0][sys_id], prices[1]))
    frame = _beside_systems(sys_table, sys_id, data)
    return frame.with_columns(pl.lit(m.name).alias("model"), pl.lit(q.strategy).alias("strategy"),
                              pl.lit(network).alias("network"))


def _column_order(sys_table: pl.DataFrame, rank: bool = False) -> list[str]:
    head = ["model", "strategy", "network"] + list(sys_table.columns) + ["nvs_size", "n_gpus"]
    head += ["rank"] if rank else []
    return head + list(COLUMNS) + list(METRIC_COLUMNS) + ["training_days"] + list(COST_COLUMNS) + list(BAND_COLUMNS)


def _empty_rows(sys_table: pl.DataFrame, m: ModelSpec, rank: bool = False) -> pl.DataFrame:
    schema: dict[str, Any] = {"model": pl.Utf8, "strategy": pl.Utf8, "network": pl.Utf8}
    schema.update(dict(zip(sys_table.columns, sys_table.dtypes)))
    schema.update({"nvs_size": pl.Int64, "n_gpus": pl.Int64})
    if rank:
        schema["rank"] = pl.Int64
    schema.update({c: pl.Int64 for c in COLUMNS})
    schema.update({c: (pl.Boolean if c == "feasible" else pl.Float64) for c in METRIC_COLUMNS})
    schema["training_days"] = pl.Float64
    schema.update({c: (pl.Float64 if c in ("network_cost", "network_power") else pl.Int64) for c in COST_COLUMNS})
    schema.update({c: pl.Float64 for c in BAND_COLUMNS})
    return pl.DataFrame(schema=schema)


def _rows_frame(out, cols, groups, sys_table: pl.DataFrame, m: ModelSpec, strategy: str,
               equipment: Mapping[str, np.ndarray], network: str, prices: tuple) -> pl.DataFrame:
    """Every evaluated row of a chunk (`cols`: its columns then group ids, one row each), with
    its group's network equipment (`equipment`: by group id) and its system's cost columns
    (`prices`: `_system_prices`)."""
    take = cols.shape[1]
    n_sys = out["iteration_time"].shape[0]
    gids = cols[-1]

    def each(a: np.ndarray) -> np.ndarray:  # a candidate's value on every system's row
        return a if n_sys == 1 else np.tile(a, n_sys)

    metrics = {k: out[k][:, :take].reshape(-1) for k in METRIC_COLUMNS}
    data = {
        "nvs_size": each(np.array([k for k, _ in groups], dtype=np.int64)[gids]),
        "n_gpus": each(np.array([n for _, n in groups], dtype=np.int64)[gids]),
    }
    data.update({k: each(cols[j]) for j, k in enumerate(COLUMNS)})
    data.update(_metrics_frame(metrics, m))
    data.update({k: each(v[gids]) for k, v in equipment.items()})
    sys_id = np.repeat(np.arange(n_sys), take)  # system by system, as the kernel lays them
    data.update(cost_columns(data, prices[0][sys_id], prices[1]))
    frame = _beside_systems(sys_table, sys_id, data)
    return frame.with_columns(pl.lit(m.name).alias("model"), pl.lit(strategy).alias("strategy"),
                              pl.lit(network).alias("network"))


def _counts_frame(n_cand, n_feas, groups, sys_table: pl.DataFrame) -> pl.DataFrame:
    """Candidates and feasible counts per (system, group), system by system."""
    n_sys, n_groups = n_feas.shape
    candidates = np.tile(n_cand, n_sys)
    data = {
        "nvs_size": np.tile(np.array([g[0] for g in groups], dtype=np.int64), n_sys),
        "n_gpus": np.tile(np.array([g[1] for g in groups], dtype=np.int64), n_sys),
        "candidates": candidates,
        "feasible": n_feas.reshape(-1),
        "infeasible": candidates - n_feas.reshape(-1),
    }
    return _beside_systems(sys_table, np.repeat(np.arange(n_sys), n_groups), data)
