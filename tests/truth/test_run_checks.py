"""Measured runs and calibrations that cannot be right are refused in one line before any compute: a
sequence split below one token, a header with a column twice, integers past the engine's bounds, a
run or a file given twice, a calibration that cannot be estimated, NaN or infinity in a calibration."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import dse
import dse.truth.measured as dm
from dse.cli import main
from dse.commands import calibrate as calibrate_cmd
from dse.spec.specs import SpecError
from dse.truth import calibration as calibrations
from dse.truth.calibrate import check_estimable, check_runs, write_calibration
from dse.truth.calibration import Calibration, load_calibration
from dse.truth.runs import MeasuredError, resolve_csv
from helpers import GOOD, HEADER, write_csv


def errors_of(tmp_path, *changes) -> list[str]:
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", [{**GOOD, **c} for c in changes]))
    return [str(e) for e in runs.errors]


def no_fit(*args, **kwargs):
    raise AssertionError("a refused calibration must not be fitted")


# -------------------------------------------------------------------------------- sequence shards


@pytest.mark.parametrize("seq_len, tp", [("4", "8"), ("2047", "8"), ("12", "8"), ("1", "2")])
def test_sequence_parallelism_needs_whole_tokens_per_gpu(tmp_path, seq_len, tp):
    (got,) = errors_of(tmp_path, dict(seq_len=seq_len, tp=tp, gpus=tp))
    assert got == (f"row 1 (m22b): tp = {tp}: sequence parallelism splits the seq_len = {seq_len} tokens of a "
                   f"sequence over tp = {tp} GPUs; seq_len must be a multiple of tp (or sequence_parallel false)")


@pytest.mark.parametrize("change", [dict(seq_len="4", sequence_parallel="false"),  # no split of the sequence
                                    dict(seq_len="8"), dict(seq_len="2048")])
def test_whole_tokens_per_gpu_are_valid(tmp_path, change):
    assert errors_of(tmp_path, change) == []


def test_a_tp_already_wrong_is_said_once(tmp_path):
    assert errors_of(tmp_path, dict(tp="3", gpus="3")) == ["row 1 (m22b): tp = 3: must divide heads = 64"]


def test_validate_measured_refuses_the_row(tmp_path, capsys):
    path = write_csv(tmp_path / "runs.csv", [{**GOOD, "seq_len": "4"}])
    assert main(["validate", "measured", "--csv", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["row 1 (m22b): tp = 8: sequence parallelism splits the seq_len = 4 tokens of a sequence over "
                   "tp = 8 GPUs; seq_len must be a multiple of tp (or sequence_parallel false)",
                   f"dse validate measured: error: csv = '{path}': no run could be predicted (1 problem(s) listed "
                   "above)"]


# ---------------------------------------------------------------------------------------- the header


@pytest.mark.parametrize("header, column, at", [
    ((*HEADER[:8], "tp", *HEADER[8:]), "tp", "8, 9"),
    ((*HEADER, "gpu"), "gpu", "17, 20"),
    ((*HEADER, " source "), "source", "19, 20"),
    (("model", *HEADER), "model", "1, 2"),
])
def test_a_column_twice_in_the_header(tmp_path, header, column, at):
    path = tmp_path / "runs.csv"
    path.write_text(",".join(header) + "\n" + ",".join(GOOD.get(c.strip(), "x") for c in header) + "\n")
    with pytest.raises(MeasuredError) as exc:
        dm.read_runs(path)
    assert str(exc.value) == (f"csv = '{path}': column {column!r} appears 2 times in the header (columns {at}); "
                              "give each column once")


def test_unnamed_columns_of_trailing_commas_are_no_repeat(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(",".join((*HEADER, "", "")) + "\n" + ",".join((*(GOOD[c] for c in HEADER), "", "")) + "\n")
    runs = dm.read_runs(path)
    assert runs.errors == () and runs.rows.height == 1


@pytest.mark.parametrize("text, problem", [
    ("", "empty file; needs a header and at least one run"),
    ("\n\n\n", "empty file; needs a header and at least one run"),
    (",".join(HEADER) + "\n", "no data rows; needs at least one run under the header"),
])
def test_empty_file_and_header_only(tmp_path, capsys, text, problem):
    path = tmp_path / "runs.csv"
    path.write_text(text)
    assert main(["validate", "measured", "--csv", str(path)]) == 2
    assert capsys.readouterr().err == f"dse validate measured: error: csv = '{path}': {problem}\n"


# ------------------------------------------------------------------------------------------- numbers


@pytest.mark.parametrize("column, value, rule", [
    ("layers", "99999999999999999999", "must be an integer in [1, 1,099,511,627,776]"),
    ("hidden", "9223372036854775808", "must be an integer in [1, 1,099,511,627,776]"),
    ("tp", "33554432", "must be an integer in [1, 16,777,216]"),
    ("gpus", "1e30", "must be an integer in [1, 16,777,216]"),
    ("global_batch", "8589934592", "must be an integer in [1, 4,294,967,296]"),
    ("micro_batch", "99999999999999999999999", "must be an integer in [1, 4,294,967,296]"),
    ("tp", "0", "must be an integer >= 1"),
    ("pp", "-1", "must be an integer >= 1"),
    ("dp", "1.5", "must be an integer >= 1"),
    ("seq_len", "nan", "must be an integer >= 1"),
    ("heads", "inf", "must be an integer >= 1"),
    ("vocab", "0x10", "must be an integer >= 1"),
])
def test_integers_out_of_range(tmp_path, column, value, rule):
    lines = errors_of(tmp_path, {column: value})
    assert lines[0] == f"row 1 (m22b): {column} = {value}: {rule}"


def test_integers_written_exactly(tmp_path):
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", [{**GOOD, "vocab": "1099511627775"}]))
    assert runs.errors == () and runs.rows["vocab"].to_list() == [1099511627775]


@pytest.mark.parametrize("column, value, rule", [
    ("measured_iter_s", "nan", "must be a number > 0 (seconds)"),
    ("measured_iter_s", "inf", "must be a number > 0 (seconds)"),
    ("measured_iter_s", "-1.5", "must be a number > 0 (seconds)"),
    ("precision", "fp4", "must be one of bf16 | fp8"),
    ("gpu", "Z100", None),
])
def test_other_impossible_values(tmp_path, column, value, rule):
    header = HEADER if column in HEADER else (*HEADER, column)
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", [{**GOOD, column: value}], header))
    (got,) = [str(e) for e in runs.errors]
    assert got.startswith(f"row 1 (m22b): {column} = {value}: " + (rule or ""))


# ------------------------------------------------------------------------------------------- repeats


def test_a_repeated_row_is_refused_and_the_first_kept(tmp_path):
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", [GOOD, {**GOOD, "recompute": "full"}, GOOD]))
    assert [str(e) for e in runs.errors] == ["row 3 (m22b): the same run as row 1, every column equal; give each "
                                             "run once"]
    assert runs.rows["row"].to_list() == [1, 2]


def test_a_file_given_twice_is_refused(tmp_path):
    path = write_csv(tmp_path / "runs.csv", [GOOD])
    with pytest.raises(MeasuredError) as exc:
        dm.read_runs([path, tmp_path / "." / "runs.csv"])
    assert str(exc.value).startswith(f"csv = '{tmp_path / 'runs.csv'}': given twice (also as '{path}'); its runs "
                                     "would count twice; give each file once")


def test_the_corpus_and_one_of_its_sets_is_refused(capsys):
    assert main(["calibrate", "--csv", "corpus", "--csv", "korthikanti2022_table5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dse calibrate: error: csv = '{resolve_csv('korthikanti2022_table5')}': given twice")


@pytest.mark.parametrize("flag", ["--ridge", "--pair-ridge"])
@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_ridge_that_is_no_weight_is_refused(capsys, flag, value):
    assert main(["calibrate", flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dse calibrate: error: {flag} = ") and err.endswith("must be a finite number >= 0")
    assert "\n" not in err


def test_the_ridge_asked_for_is_the_fit_s(monkeypatch, capsys):
    """`--ridge W` and `--pair-ridge F` reach the fit (stopped there: the values are what this checks)."""
    import dse.truth.calibrate as cal

    seen = {}

    def stop(*args, **kwargs):
        seen.update(kwargs)
        raise dse.SpecError("stopped before fitting")

    monkeypatch.setattr(cal, "Fitter", stop)
    assert main(["calibrate", "--ridge", "0.05", "--pair-ridge", "3"]) == 2
    assert seen["ridge"] == 0.05 and seen["pair_ridge"] == 3.0
    assert capsys.readouterr().err.strip() == "dse calibrate: error: stopped before fitting"


def test_the_summary_gives_each_kind_by_generation_and_framework(monkeypatch, capsys):
    """Beside the bands, `dse calibrate` prints each kind's held-out-by-source errors by generation
    and by framework (the fit replaced by a result whose errors are known: 10% and 30% for the two
    Hopper runs, 20% for the Blackwell one)."""
    import numpy as np

    from dse.truth.calibrate import Result

    def fit(runs, **kwargs):
        e = {"mean": 0.2, "max": 0.3}
        doubtful = {"runs": 1, "predicted": {"mean": 0.5, "max": 0.5}, "leave_one_source_out": {"mean": 0.9, "max": 0.9}}
        cal = Calibration(name="x", values={"compute_eff": 0.8}, in_sample=e, leave_one_model_out=e,
                          provenance={"runs": 3, "doubtful": doubtful, "sources": ["s1", "s2", "s3"]}, leave_one_source_out=e)
        # a fourth Hopper run with a stated doubt, 90% off held out: in none of the groups' errors
        keys = ["hopper/fp8/megatron", "hopper/bf16/fsdp2", "blackwell/fp8/megatron", "hopper/fp8/megatron"]
        ones = np.ones(4)
        return Result(cal, ["a", "b", "c", "d"], ["s1", "s2", "s3", "s4"], keys, ones, ones, ones,
                      np.array([1.1, 0.7, 1.2, 1.9]), {}, np.array([False, False, False, True]))

    monkeypatch.setattr(calibrate_cmd, "calibrate", fit)
    assert main(["calibrate"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == ("  dense leave-one-source-out by generation: blackwell 20.0% / 20.0% (1 run), hopper 20.0% / "
                       "30.0% (2 runs); by framework: fsdp2 30.0% / 30.0% (1 run), megatron 15.0% / 20.0% (2 runs)")
    assert out[-3].startswith("3 runs: in-sample mean |error| 20.0%") and "(3 sources)" in out[-3]
    assert out[-2] == ("  and 1 run with a stated doubt (column doubt), not fitted nor counted above: predicted by "
                       "the fit 50.0% / 50.0%, leave-one-source-out 90.0% / 90.0% (mean / max)")
    assert sum(line.rstrip().endswith("yes") for line in out) == 1  # the per-run table marks it


# --------------------------------------------------------------------- calibrations that cannot be estimated


@pytest.mark.parametrize("labels, sources, precisions, message", [
    (["a", "a"], ["s", "s"], ["bf16"] * 2,
     "the 2 valid run(s) are all of model 'a'; the calibration's error is leave-one-model-out, which needs runs of "
     "at least 2 models"),
    (["a", "a", "b"], ["s"] * 3, ["bf16"] * 3,
     "leaving out model 'a' leaves 1 run(s) to fit 3 fields (compute_eff, matmul_knee, hbm_eff); every held-out "
     "fit needs at least 3: add runs"),
    (["a", "b", "c", "d"], ["s"] * 4, ["fp8"] * 4,
     "leaving out model 'a' leaves 3 run(s) to fit 4 fields (compute_eff, matmul_knee, hbm_eff, fp8_eff); every "
     "held-out fit needs at least 4: add runs"),
    (["a", "b", "c", "d", "e"], ["s", "s", "s", "t", "t"], ["bf16"] * 5,
     "leaving out source 's' leaves 2 run(s) to fit 3 fields (compute_eff, matmul_knee, hbm_eff); every held-out "
     "fit needs at least 3: add runs"),
])
def test_calibrations_that_cannot_be_estimated(labels, sources, precisions, message):
    with pytest.raises(SpecError) as exc:
        check_estimable(labels, sources, precisions)
    assert str(exc.value) == message


def test_a_calibration_that_can_be_estimated():
    check_estimable(["a", "a", "b", "b", "c", "c"], ["s"] * 6, ["bf16"] * 6)
    check_runs(dm.read_runs())  # the packaged runs: 8 runs of 4 models


def test_calibrate_on_one_model_is_refused_before_any_fit(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(calibrate_cmd, "calibrate", no_fit)
    path = write_csv(tmp_path / "one.csv", [GOOD, {**GOOD, "recompute": "full", "sequence_parallel": "false"}])
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--csv", str(path), "--out", str(out)]) == 2
    cap = capsys.readouterr()
    assert cap.err == (f"dse calibrate: error: csv = '{path}': the 2 valid run(s) are all of model 'm22b'; the "
                       "calibration's error is leave-one-model-out, which needs runs of at least 2 models\n")
    assert cap.out == "" and not out.exists()


def test_calibrate_with_no_valid_run_lists_the_rows_then_refuses(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(calibrate_cmd, "calibrate", no_fit)
    path = write_csv(tmp_path / "bad.csv", [{**GOOD, "seq_len": "4"}])
    assert main(["calibrate", "--csv", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "dse calibrate: skipped row 1 (m22b): tp = 8: sequence parallelism splits the seq_len = 4 tokens of a "
        "sequence over tp = 8 GPUs; seq_len must be a multiple of tp (or sequence_parallel false)",
        f"dse calibrate: error: csv = '{path}': no valid measured run to fit"]


def test_calibrate_write_into_a_folder_it_cannot_write_is_refused_before_any_fit(capsys, monkeypatch):
    monkeypatch.setattr(calibrate_cmd, "calibrate", no_fit)
    monkeypatch.setattr(calibrations, "CALIBRATION_DIR", calibrations.Path("/proc/dse-calibration"))
    assert main(["calibrate", "--write", "--name", "mine"]) == 2
    assert capsys.readouterr().err == (
        "dse calibrate: error: --write = '/proc/dse-calibration/mine.yaml': cannot create the folder "
        "'/proc/dse-calibration' (No such file or directory); give a writable folder\n")


# ------------------------------------------------------------------------ NaN and inf in a calibration


def _cal(**changes) -> Calibration:
    base = Calibration(name="t", values={"compute_eff": 0.75, "matmul_knee": 4.5, "hbm_eff": 0.65},
                       in_sample={"mean": 0.03, "max": 0.1}, leave_one_model_out={"mean": 0.04, "max": 0.12},
                       provenance={"runs": 20}, groups={"hopper/megatron": {"compute_eff": 0.7}},
                       bands={"hopper/bf16/megatron": {"mean": 0.05, "max": 0.11, "runs": 9, "sources": 3}},
                       leave_one_source_out={"mean": 0.05, "max": 0.2})
    return replace(base, **changes)


@pytest.mark.parametrize("changes, key", [
    (dict(leave_one_model_out={"mean": math.nan, "max": 0.1}), "leave_one_model_out.mean = nan"),
    (dict(leave_one_source_out={"mean": 0.1, "max": math.inf}), "leave_one_source_out.max = inf"),
    (dict(groups={"hopper/megatron": {"compute_eff": math.nan}}), "groups.hopper/megatron.compute_eff = nan"),
    (dict(bands={"hopper/bf16/megatron": {"mean": math.nan, "max": 0.1, "runs": 2, "sources": 1}}),
     "bands.hopper/bf16/megatron.mean = nan"),
])
def test_a_calibration_is_never_stored_as_nan(tmp_path, changes, key):
    with pytest.raises(SpecError) as exc:
        write_calibration(_cal(**changes), tmp_path / "t.yaml")
    assert str(exc.value) == (f"calibration 't': {key} is not a finite number; not written (a calibration is never "
                              "stored as NaN)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("old, new, key", [
    ("mean: 0.03", "mean: .nan", "in_sample.mean = nan"),
    ("max: 0.12", "max: .inf", "leave_one_model_out.max = inf"),
    ("max: 0.11", "max: -.inf", "bands.hopper/bf16/megatron.max = -inf"),
    ("compute_eff: 0.7\n", "compute_eff: .nan\n", "groups.hopper/megatron.compute_eff = nan"),
])
def test_a_calibration_file_with_nan_or_inf_is_refused_in_one_line(tmp_path, capsys, old, new, key):
    path = write_calibration(_cal(), tmp_path / "t.yaml")
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(SpecError) as exc:
        load_calibration(str(path))
    assert str(exc.value) == (f"profile.calibration = '{path}': {path} is not a calibration (SpecError: {key}: must "
                              "be a finite number)")
    assert main(["calibrate", "--show", str(path)]) == 2
    assert capsys.readouterr().err == f"dse calibrate: error: {exc.value}\n"


def test_a_run_with_a_stated_doubt_is_neither_fitted_nor_counted(tmp_path):
    """A run whose `doubt` column is filled moves no fitted value (its measured time tripled, the
    calibration is the same to the bit) and is in none of the errors (the in-sample mean is the other
    runs' own), while it is still predicted and reported apart."""
    import csv

    import numpy as np

    from dse.truth.calibrate import calibrate

    base = list(csv.DictReader(dm.PACKAGED_CSV.open()))
    results = []
    for factor in (1.0, 3.0):
        rows = [dict(r, doubt="") for r in base]
        rows[2].update(doubt="printed layout differs from the recipe's",
                       measured_iter_s=repr(float(base[2]["measured_iter_s"]) * factor))
        path = tmp_path / f"runs{factor:g}.csv"
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        results.append(calibrate(str(path), steps=40, fold_steps=20))
    one, three = results
    assert one.calibration.values == three.calibration.values
    assert one.calibration.leave_one_model_out == three.calibration.leave_one_model_out
    assert one.calibration.provenance["runs"] == 7 and one.doubt.sum() == 1
    at = int(np.flatnonzero(three.doubt)[0])  # the runs are in the engine calls' order
    assert three.measured[at] == pytest.approx(3.0 * float(base[2]["measured_iter_s"]), rel=1e-12)
    ok = ~one.doubt
    e = np.abs(one.fitted[ok] / one.measured[ok] - 1.0)
    assert one.calibration.in_sample["mean"] == pytest.approx(e.mean(), rel=1e-12)
    assert one.calibration.in_sample["max"] == pytest.approx(e.max(), rel=1e-12)
    d3 = three.calibration.provenance["doubtful"]
    assert d3["runs"] == 1 and np.isfinite(three.held_out[at])
    assert three.fitted[at] == one.fitted[at]  # the same prediction of it, whatever was measured
    assert d3["predicted"]["mean"] == pytest.approx(abs(three.fitted[at] / three.measured[at] - 1.0), abs=1e-6)


def test_validate_reports_the_runs_with_a_stated_doubt_apart(tmp_path, capsys):
    """`dse validate measured` predicts a run with a stated doubt like any other, marks it in its table
    and gives its error and the others' apart on the summary line."""
    import csv

    import numpy as np
    import polars as pl

    base = list(csv.DictReader(dm.PACKAGED_CSV.open()))
    rows = [dict(r, doubt="stale layout" if i == 5 else "") for i, r in enumerate(base)]
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    out_path = tmp_path / "out.parquet"
    assert main(["validate", "measured", "--csv", str(path), "--out", str(out_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    frame = pl.read_parquet(out_path)
    assert frame["doubt"].to_list().count("stale layout") == 1  # carried into the Parquet output
    e = np.abs(frame["error"].to_numpy())
    d = np.array([x == "stale layout" for x in frame["doubt"].to_list()])
    assert (f"of them 1 with a stated doubt (column doubt): mean {100 * e[d].mean():.1f}%, max {100 * e[d].max():.1f}%, "
            f"7 without: mean {100 * e[~d].mean():.1f}%, max {100 * e[~d].max():.1f}%; ") in out[-1]
    assert sum(line.rstrip().endswith("yes") for line in out) == 1


def test_a_summary_of_runs_all_in_doubt_is_one_line():
    """Every run with a stated doubt: the summary says none is without one instead of failing."""
    import polars as pl

    from dse.commands.validate_measured import summary

    frame = pl.DataFrame({"error": [0.1, -0.3], "fits": [True, True], "memory_error": [None, None],
                          "doubt": ["stale layout", "batch contradicts"]},
                         schema_overrides={"memory_error": pl.Float64})
    assert summary(frame, "default", "corpus2026") == (
        "2 runs: mean |error| 20.0%, max |error| 30.0% (profile default, calibration corpus2026); of them 2 with a "
        "stated doubt (column doubt): mean 20.0%, max 30.0%, none without; 0 predicted not to fit in HBM")
