"""Pareto fronts of result rows: the configurations no other row beats on every objective.

    import dse
    front = dse.pareto(frame, objectives=["training_days", "cost_per_run_usd", "n_gpus"])
    front = dse.pareto(lf, objectives=["iteration_time", "max:throughput"], by=["n_gpus"])

An objective is a column, minimised, or `max:column`, maximised. Row a dominates row b when a is no
worse than b in every objective and better in at least one; the front is the rows no row dominates
(within each group of `by`). Equal rows do not dominate each other, so duplicates on the front are
all kept. Rows with a null or NaN objective cannot be compared and are left out.

The algorithm: sort the rows lexicographically by the (minimised) objectives; a row can only be
dominated by a row before it, and if it is dominated at all, it is dominated by a row of the front
(dominance is transitive). So the rows are taken in that order, a block at a time, and each is
kept when no row of the running front, and no kept row before it in its block, dominates it:
O(n f d) for n rows, f front rows, d objectives. `ParetoFront` does the same as a stream: a search
offers each chunk's rows and keeps the front of all rows seen (`search.keep=pareto`).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import polars as pl

from dse.spec.checks import did_you_mean
from dse.spec.specs import SpecError

#: Objectives of `search.keep=pareto` unless given: each group's trade-off between speed and memory
#: headroom (what a planner weighs when choosing among configurations of one cluster).
DEFAULT_OBJECTIVES = ("iteration_time", "memory")
BLOCK = 512


def parse_objectives(objectives: str | Sequence[str] | None, columns: Iterable[str],
                     numeric: Iterable[str] | None = None) -> list[tuple[str, bool]]:
    """[(column, maximise)] from names like `iteration_time` or `max:throughput` (a string is
    split at commas); an unknown column or an empty list is a one-line SpecError."""
    if objectives is None:
        objectives = list(DEFAULT_OBJECTIVES)
    if isinstance(objectives, str):
        objectives = [o for o in objectives.split(",")]
    objectives = [str(o).strip() for o in objectives]
    if not objectives or any(not o for o in objectives):
        raise SpecError(f"objectives = {','.join(objectives)!r}: give at least one column, e.g. "
                        "iteration_time,memory (max:column to maximise)")
    cols = list(columns)
    valid = list(numeric) if numeric is not None else cols
    out = []
    for o in objectives:
        sense, _, name = o.rpartition(":")
        if sense not in ("", "min", "max"):
            raise SpecError(f"objective {o!r}: the prefix must be min: or max:, e.g. max:throughput")
        if name not in valid:
            raise SpecError(f"objective {name!r}: not a numeric column of the rows; {did_you_mean(name, valid)}"
                              f"valid: {', '.join(valid)}")
        out.append((name, sense == "max"))
    names = [n for n, _ in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SpecError(f"objective {dup[0]!r}: given twice")
    return out


def _numeric_columns(schema: pl.Schema | dict) -> list[str]:
    return [c for c, t in schema.items() if t.is_numeric() or t == pl.Boolean]


def _matrix(frame: pl.DataFrame, objectives: list[tuple[str, bool]]) -> np.ndarray:
    cols = [(-1.0 if mx else 1.0) * frame[c].cast(pl.Float64).fill_null(np.nan).to_numpy() for c, mx in objectives]
    return np.stack(cols, axis=1) if cols else np.zeros((len(frame), 0))


def nondominated(values: np.ndarray) -> np.ndarray:
    """A boolean mask of the rows of `values` (n x d, every objective minimised, finite) that no
    other row dominates."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    keep = np.zeros(n, dtype=bool)
    if n == 0:
        return keep
    order = np.lexsort(values.T[::-1])
    v = values[order]
    front = np.zeros((0, values.shape[1]))
    for start in range(0, n, BLOCK):
        block = v[start:start + BLOCK]
        if len(front):  # dominated by a front row: <= everywhere and < somewhere
            le = (front[:, None, :] <= block[None, :, :]).all(axis=2)
            lt = (front[:, None, :] < block[None, :, :]).any(axis=2)
            alive = ~(le & lt).any(axis=0)
        else:
            alive = np.ones(len(block), dtype=bool)
        # within the block: only earlier rows (in lexicographic order) can dominate later ones
        le = (block[:, None, :] <= block[None, :, :]).all(axis=2)
        lt = (block[:, None, :] < block[None, :, :]).any(axis=2)
        dom = le & lt & alive[:, None]
        alive &= ~dom.any(axis=0)
        keep[order[start:start + len(block)][alive]] = True
        front = np.concatenate([front, block[alive]])
    return keep


def pareto(frame: pl.DataFrame | pl.LazyFrame, objectives: str | Sequence[str] | None = None,
           by: str | Sequence[str] | None = None) -> pl.DataFrame:
    """The rows of `frame` on the Pareto front of `objectives` (minimised; `max:name` maximised),
    per group of `by` (none: one front); in the frame's order. See the module docstring."""
    if isinstance(frame, pl.LazyFrame):
        frame = frame.collect()
    if not isinstance(frame, pl.DataFrame):
        raise SpecError(f"pareto: expected a polars DataFrame or LazyFrame, got {type(frame).__name__}")
    objs = parse_objectives(objectives, frame.columns, _numeric_columns(frame.schema))
    by = [by] if isinstance(by, str) else list(by or [])
    for b in by:
        if b not in frame.columns:
            raise SpecError(f"by {b!r}: not a column of the rows; {did_you_mean(b, frame.columns)}"
                              f"valid: {', '.join(frame.columns)}")
    if frame.is_empty():
        return frame
    values = _matrix(frame, objs)
    ok = np.isfinite(values).all(axis=1)
    keep = np.zeros(len(frame), dtype=bool)
    if by:
        gid = frame.select(pl.struct(by).rank("dense").alias("g"))["g"].to_numpy()
    else:
        gid = np.zeros(len(frame), dtype=np.int64)
    idx = np.flatnonzero(ok)
    for g in np.unique(gid[idx]):
        rows = idx[gid[idx] == g]
        keep[rows[nondominated(values[rows])]] = True
    return frame.filter(pl.Series(keep))


class ParetoFront:
    """A running Pareto front per group, merged chunk by chunk: `add(frame)` with each chunk's
    rows, `frame()` for the front of every row offered. Infeasible rows (`feasible` false) are not
    solutions and are dropped. Memory holds the fronts, never the stream. `columns`: the columns the
    rows will have, to check the objectives against before any row comes."""

    def __init__(self, objectives: str | Sequence[str] | None, by: Sequence[str], feasible_only: bool = True,
                 columns: Iterable[str] | None = None):
        if columns is not None:  # a bad objective stops here, before any compute
            parse_objectives(objectives, columns)
        self.objectives = objectives
        self.by = list(by)
        self.feasible_only = feasible_only
        self.front: pl.DataFrame | None = None

    def add(self, frame: pl.DataFrame) -> None:
        if self.feasible_only and "feasible" in frame.columns:
            frame = frame.filter(pl.col("feasible"))
        if self.front is None:
            self.front = frame.clear()  # the columns, even when no row is ever kept
        if frame.is_empty():
            return
        part = pareto(frame, self.objectives, self.by)
        self.front = pareto(pl.concat([self.front, part], how="vertical_relaxed"), self.objectives, self.by)

    __call__ = add

    def frame(self, empty: pl.DataFrame | None = None) -> pl.DataFrame:
        """The front of every row offered (`empty` if no frame was offered)."""
        if self.front is None:
            return empty if empty is not None else pl.DataFrame()
        return self.front


#: The groups of a search (`dse.explore.search.run_search`): one front per system, NVS size and GPU count.
SEARCH_GROUP = ("system_id", "nvs_size", "n_gpus")
#: What `search.keep` may be.
KEEP = ("top", "pareto")


def ranked_front(front: ParetoFront, empty: pl.DataFrame) -> pl.DataFrame:
    """The search's front as its top frame: per group, `rank` 1, 2, ... by the ranking rule
    (`dse.explore.ranking`: fastest first), in the column order of `empty` (the search's empty top frame)."""
    from dse.explore.ranking import sort_order

    out = front.frame()
    if out.is_empty():
        return empty
    by, desc = sort_order(out.columns)
    out = out.sort(list(SEARCH_GROUP) + by, descending=[False] * len(SEARCH_GROUP) + desc)
    out = out.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(list(SEARCH_GROUP)).alias("rank"))
    return out.select(empty.columns)
