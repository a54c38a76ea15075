"""Pareto fronts (`dse.pareto`): exactly the non-dominated rows, against a brute-force O(n^2) check,
with ties and duplicates; streamed chunk by chunk; in the search (`keep="pareto"`) and in
`dse query DATASET pareto`."""

from __future__ import annotations

import sys

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse.spec.specs import SpecError

P = sys.modules["dse.results.pareto"]  # the module (dse.pareto is the function)


def brute_force(values: np.ndarray) -> np.ndarray:
    """Row i is kept iff no row j is <= in every objective and < in one (rows with NaN left out)."""
    n = len(values)
    ok = np.isfinite(values).all(axis=1)
    keep = np.zeros(n, dtype=bool)
    for i in range(n):
        if not ok[i]:
            continue
        keep[i] = not any(ok[j] and np.all(values[j] <= values[i]) and np.any(values[j] < values[i])
                          for j in range(n) if j != i)
    return keep


# small integer ranges: many ties and duplicate rows
matrices = st.integers(1, 4).flatmap(lambda d: st.lists(
    st.lists(st.one_of(st.integers(0, 4).map(float), st.just(float("nan"))), min_size=d, max_size=d),
    min_size=0, max_size=40))


@settings(max_examples=150, deadline=None)
@given(matrices, st.integers(1, 7), st.lists(st.booleans(), min_size=4, max_size=4))
def test_front_is_exactly_the_non_dominated_rows(rows, block, maximise):
    d = len(rows[0]) if rows else 2
    values = np.array(rows, dtype=float).reshape(len(rows), d)
    names = [f"f{j}" for j in range(d)]
    frame = pl.DataFrame({n: values[:, j] for j, n in enumerate(names)}).with_row_index("i")
    spec = [("max:" if maximise[j] else "") + n for j, n in enumerate(names)]
    sense = np.array([-1.0 if maximise[j] else 1.0 for j in range(d)])
    old, P.BLOCK = P.BLOCK, block  # blocks of a few rows exercise the merge of block and front
    try:
        got = dse.pareto(frame, objectives=spec)
    finally:
        P.BLOCK = old
    expect = np.flatnonzero(brute_force(values * sense))
    assert got["i"].to_list() == expect.tolist()  # the same rows, in the frame's order


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 5)), max_size=50),
       st.integers(1, 9))
def test_groups_and_streaming_give_the_same_front(rows, chunk):
    frame = pl.DataFrame(rows, schema={"g": pl.Int64, "a": pl.Int64, "b": pl.Int64}, orient="row").with_row_index("i")
    whole = dse.pareto(frame, ["a", "b"], by="g")
    expect = []
    for g in sorted(set(frame["g"].to_list())):
        part = frame.filter(pl.col("g") == g)
        keep = brute_force(part.select("a", "b").to_numpy().astype(float))
        expect += part["i"].filter(pl.Series(keep)).to_list()
    assert sorted(whole["i"].to_list()) == sorted(expect)
    front = P.ParetoFront(["a", "b"], ["g"])
    for start in range(0, max(len(frame), 1), chunk):
        front.add(frame.slice(start, chunk))
    assert sorted(front.frame()["i"].to_list()) == sorted(expect)


def test_lazy_frames_and_a_hand_example():
    lf = pl.LazyFrame({"t": [3.0, 1.0, 2.0, 2.0, 1.0, 4.0], "m": [1.0, 3.0, 2.0, 2.0, 4.0, 1.0]})
    got = dse.pareto(lf, ["t", "m"])
    # (1,4) is dominated by (1,3); (4,1) by (3,1); the two (2,2) tie and both stay
    assert got.rows() == [(3.0, 1.0), (1.0, 3.0), (2.0, 2.0), (2.0, 2.0)]
    assert dse.pareto(lf, ["max:t", "m"]).rows() == [(4.0, 1.0)]  # the largest t with the least m


@pytest.mark.parametrize("objectives, words", [
    (["iteration_time", "nope"], "objective 'nope': not a numeric column"),
    ("", "give at least one column"),
    (["best:t"], "the prefix must be min: or max:"),
    (["t", "t"], "objective 't': given twice"),
])
def test_bad_objectives_are_one_line(objectives, words):
    frame = pl.DataFrame({"t": [1.0], "iteration_time": [1.0]})
    with pytest.raises(SpecError) as err:
        dse.pareto(frame, objectives)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_search_keeps_each_groups_front():
    kw = dict(model="llama3_8b", system="dgx_h100", strategy="tp1d", n_gpus=[8, 16], chunk=512)
    objectives = ["iteration_time", "memory", "cost_per_run_usd"]
    res = dse.run_search(**kw, keep="pareto", objectives=objectives, keep_rows=True)
    every = res.rows.filter(pl.col("feasible"))
    expect = dse.pareto(every, objectives, by=["system_id", "nvs_size", "n_gpus"])
    key = ["n_gpus", "n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p", "nvs_d", "interleave",
           "recompute", "seq_par", "zero"]
    assert len(res.top) == len(expect) > 2
    assert res.top.select(key).sort(key).equals(expect.select(key).sort(key))
    # rank 1 of each group is the search's fastest row of that group
    top1 = dse.run_search(**kw, top_k=1).top
    first = res.top.filter(pl.col("rank") == 1).sort("n_gpus")
    # two compiled programs: configurations whose times tie mathematically (twins such as one
    # layout's ZeRO stages 1 and 2) may differ by an ulp, so either may come first; the fastest
    # time is the same to that ulp
    assert first["iteration_time"].to_list() == pytest.approx(top1.sort("n_gpus")["iteration_time"].to_list(),
                                                              rel=1e-14)
    assert set(sys.modules["dse.results.economics"].ECONOMY_COLUMNS) <= set(res.top.columns)
    with pytest.raises(SpecError, match="objective 'speed'"):
        dse.run_search(**kw, keep="pareto", objectives=["speed"])
    with pytest.raises(SpecError, match="search.keep = 'all'"):
        dse.run_search(**kw, keep="all")
