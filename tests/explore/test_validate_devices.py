"""`dse validate devices`: the row-by-row comparison of a search here and on the host CPU."""

import importlib

import numpy as np
import polars as pl
import pytest

from dse.commands import validate_devices as vd
from dse.spec.specs import SpecError

search_mod = importlib.import_module("dse.explore.search")


def test_relative_difference_closed_forms():
    one_ulp = np.nextafter(1.0, 2.0)
    a = np.array([1.0, 0.0, np.inf, np.inf, 1.0, np.nan, np.nan, 0.0, -2.0, 3.0])
    b = np.array([one_ulp, 0.0, np.inf, -np.inf, np.inf, np.nan, 1.0, 1e-300, -2.0, -3.0])
    got = vd.relative_difference(a, b)
    want = [2.0 ** -52 / one_ulp, 0.0, 0.0, np.inf, np.inf, 0.0, np.inf, 1.0, 0.0, 2.0]
    assert got.tolist() == want


def frame(**cols):
    base = {"system_id": [0, 0, 1, 1], "n_gpus": [64, 128, 64, 128], "n1": [1, 2, 1, 2],
            "t": [1.0, 2.5, 3.0e-3, 7.0], "note": ["a", "b", "c", "d"], "fits": [True, False, True, True]}
    base.update(cols)
    return pl.DataFrame(base)


KEYS = ["system_id", "n_gpus", "n1"]


def test_compare_matches_rows_in_any_order():
    a = frame()
    c = vd.compare(a, a.reverse(), KEYS)
    assert c.problems == [] and c.rows == 4 and c.max_rel == 0.0


def test_compare_reports_a_float_beyond_rtol_with_its_row():
    b = frame(t=[1.0, 2.5, 3.0e-3 * (1 + 3e-14), 7.0])
    c = vd.compare(frame(), b.reverse(), KEYS, rtol=1e-14, what="tp1d rows")
    assert c.column == "t" and c.max_rel == pytest.approx(3e-14, rel=1e-2)
    assert len(c.problems) == 1
    assert c.problems[0].startswith(f"tp1d rows: t differs by up to {c.max_rel:.3g} relative in 1 rows (rtol 1e-14; ")
    assert f"worst at system_id=1, n_gpus=64, n1=1: 0.003 here, {3.0e-3 * (1 + 3e-14)!r} on the host CPU" in c.problems[0]
    loose = vd.compare(frame(), b, KEYS, rtol=1e-13)
    assert loose.problems == [] and loose.column == "t" and loose.max_rel == c.max_rel


@pytest.mark.parametrize("change, words", [
    ({"t": [1.0, 2.5, None, 7.0]}, "t is null in 1 rows of one run only"),
    ({"t": [1.0, np.nan, 3.0e-3, 7.0]}, "t is NaN in 1 rows of one run only"),
    ({"t": [1.0, 2.5, 3.0e-3, np.inf]}, "t differs by up to inf relative"),
    ({"note": ["a", "b", "x", "d"]}, "note differ in 1 rows"),
    ({"fits": [True, True, True, True]}, "fits differ in 1 rows"),
    ({"n1": [1, 2, 1, 4]}, "the rows themselves differ in 1 rows"),
])
def test_compare_reports_each_kind_of_difference(change, words):
    c = vd.compare(frame(), frame(**change), KEYS)
    assert len(c.problems) == 1 and words in c.problems[0]


def test_compare_reports_other_rows_or_columns():
    assert "4 rows here, 3 on the host CPU" in vd.compare(frame(), frame().head(3), KEYS).problems[0]
    other = frame().with_columns(pl.col("n1").cast(pl.Float64))
    assert "of other types: ['n1']" in vd.compare(frame(), other, KEYS).problems[0]
    assert "in one only: ['extra']" in vd.compare(frame(), frame().with_columns(extra=pl.lit(1)), KEYS).problems[0]


def test_a_small_question_agrees_between_two_processes(capsys):
    """Both runs on the CPU (no accelerator in CI): every row of the search in both, bit for bit."""
    from dse.explore.bounds import exact_candidates

    argv = ["strategy=tp1d", "profile=lbnl", "n_gpus=[64,128]", "system.nvs_size=8"]
    assert vd.main(argv) == 0
    out = capsys.readouterr().out
    plan = search_mod.plan_search(model="gpt3_1t", system="b200", strategy="tp1d", n_gpus=[64, 128], nvs_size=8,
                                  profile="lbnl")
    rows = exact_candidates(plan.question, plan.n_gpus, plan.nvs_sizes)
    assert rows > 100
    assert f"1 strategy, {rows:,} rows: max relative difference 0.00e+00, rtol 1e-14: everything agrees" in out
    assert "both runs are on the CPU" in out


def test_bad_input_is_refused_before_either_run(monkeypatch, capsys):
    def no_child(*a, **k):
        raise AssertionError("the child process was started")

    monkeypatch.setattr(vd.subprocess, "run", no_child)
    with pytest.raises(SpecError, match="strategy=foo"):
        vd.main(["strategy=foo"])
    assert vd.main(["--rtol", "-1"]) == 2
    assert "--rtol = -1.0: expected a finite number >= 0" in capsys.readouterr().err
