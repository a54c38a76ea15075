"""How configurations rank: one rule for the search's top-k, the optimum of a query and of a figure.

A configuration ranks above another when its throughput is higher; among equal throughputs, the
one whose candidate columns (`dse.explore.space.COLUMNS`, in that order) are smaller comes first. The
rule is total, so every optimum is one well-defined row whether a dataset holds the top-k rows of
each group or every row, in any order.

`lexsort_keys` is the rule for NumPy arrays (the streaming top-k of `dse.search`); `best_rows`
for Polars frames (`dse.results.query`, `dse.figures`).
"""

from __future__ import annotations

from typing import Sequence, TypeVar

import numpy as np
import polars as pl

from dse.explore.space import COLUMNS

#: The score, higher first, and the tie-break, each column lower first.
SCORE = "throughput"
TIE_BREAK = COLUMNS

Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


def lexsort_keys(segment: np.ndarray, score: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, ...]:
    """Keys for `np.lexsort` ordering rows by segment, then the rule: `score` (the throughput)
    descending, then the columns of `cols` (rows x TIE_BREAK columns) ascending, first column first."""
    return tuple(cols[:, j] for j in range(cols.shape[1] - 1, -1, -1)) + (-score, segment)


def sort_order(columns: Sequence[str]) -> tuple[list[str], list[bool]]:
    """(by, descending) of the rule for a frame with `columns` (tie-break columns it lacks are skipped)."""
    by = [SCORE] + [c for c in TIE_BREAK if c in columns]
    return by, [True] + [False] * (len(by) - 1)


def best_rows(frame: Frame, keys: Sequence[str]) -> Frame:
    """The best row of each group `keys` under the rule, sorted by `keys`."""
    names = frame.collect_schema().names() if isinstance(frame, pl.LazyFrame) else frame.columns
    by, descending = sort_order(names)
    return (frame.sort(by, descending=descending)
            .unique(subset=list(keys), keep="first", maintain_order=True)
            .sort(list(keys)))
