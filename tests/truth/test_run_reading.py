"""Reading measured runs from several files and from columns a user names: a run given in two files
is refused as one given twice in one file; a column whose name nearly is the schema's is refused,
not read as a label; a row naming a preset that is not one gets one line; interleave may be left
out."""

from __future__ import annotations

import csv

import pytest

import dse.truth.measured as dm
from dse.cli import main
from dse.spec.specs import model_presets
from helpers import GOOD, HEADER, write_csv

REPEAT = "the same run as row {first} ({file} row {line}), every column equal; give each run once"


# ------------------------------------------------------------------------- a run in two files


def test_a_run_in_two_files_is_refused_naming_both_and_the_first_kept(tmp_path):
    a = write_csv(tmp_path / "a.csv", [GOOD, {**GOOD, "model": "other"}])
    b = write_csv(tmp_path / "b.csv", [{**GOOD, "recompute": "full"}, {**GOOD, "model": "other"}, GOOD])
    runs = dm.read_runs([a, b])
    assert [str(e) for e in runs.errors] == [
        "row 4 (b.csv row 2, other): " + REPEAT.format(first=2, file="a.csv", line=2),
        "row 5 (b.csv row 3, m22b): " + REPEAT.format(first=1, file="a.csv", line=1)]
    assert runs.rows["row"].to_list() == [1, 2, 3]
    assert runs.rows["model"].to_list() == ["m22b", "other", "m22b"]
    assert runs.rows["recompute"].to_list() == ["selective", "selective", "full"]


def test_a_repeat_within_one_of_several_files_names_its_file(tmp_path):
    a = write_csv(tmp_path / "a.csv", [{**GOOD, "model": "other"}])
    b = write_csv(tmp_path / "b.csv", [GOOD, {**GOOD, "recompute": "full"}, GOOD])
    runs = dm.read_runs([a, b])
    assert [str(e) for e in runs.errors] == ["row 4 (b.csv row 3, m22b): " + REPEAT.format(first=2, file="b.csv",
                                                                                           line=1)]
    assert runs.rows["row"].to_list() == [1, 2, 3]


def test_the_same_run_whatever_the_column_order_or_a_blank_for_a_column_left_out(tmp_path):
    """Every column equal, as within one file: the columns' order and a blank cell of a column the
    other file does not have do not make another run; a label that differs does (the rule of one file)."""
    a = write_csv(tmp_path / "a.csv", [GOOD])
    b = write_csv(tmp_path / "b.csv", [GOOD, {**GOOD, "source": "elsewhere"}], tuple(reversed(HEADER)) + ("cp",))
    runs = dm.read_runs([a, b])
    assert [str(e) for e in runs.errors] == ["row 2 (b.csv row 1, m22b): " + REPEAT.format(first=1, file="a.csv",
                                                                                           line=1)]
    assert runs.rows["row"].to_list() == [1, 3]
    # the rule within one file is the same: a label that differs is another row
    one = dm.read_runs(write_csv(tmp_path / "one.csv", [GOOD, {**GOOD, "source": "elsewhere"}]))
    assert one.errors == () and one.rows.height == 2


def test_rows_copied_from_a_packaged_set_count_once(tmp_path, capsys):
    """The QA case: three rows of nvidia_perf_dense copied verbatim into a file read with the set."""
    packaged = dm.PACKAGED_CSV.parent / "nvidia_perf_dense.csv"
    with packaged.open(newline="") as fh:
        header, *rows = list(csv.reader(fh))
    assert dm.read_runs(packaged).errors == ()  # the set alone reads cleanly: the errors below are the copies'
    copied = tmp_path / "copied.csv"
    with copied.open("w", newline="") as fh:
        csv.writer(fh).writerows([header, *rows[10:13]])  # the set's data rows 11, 12, 13
    runs = dm.read_runs([copied, packaged])
    model = header.index("model")
    assert [str(e) for e in runs.errors] == [
        f"row {3 + line} (nvidia_perf_dense.csv row {line}, {rows[line - 1][model]}): "
        + REPEAT.format(first=line - 10, file="copied.csv", line=line - 10) for line in (11, 12, 13)]
    assert runs.rows.height == len(rows)  # 3 copies + the set, less the 3 repeats
    # and the command says so, one line each, on stderr (of the small Table 5 set: the command
    # predicts every run it keeps, and Table 5's eight cost one engine program, the 39 above several)
    table5 = dm.PACKAGED_CSV.parent / "korthikanti2022_table5.csv"
    with table5.open(newline="") as fh:
        header5, *rows5 = list(csv.reader(fh))
    copied5 = tmp_path / "copied5.csv"
    with copied5.open("w", newline="") as fh:
        csv.writer(fh).writerows([header5, *rows5[3:6]])  # the set's data rows 4, 5, 6
    expected = [str(e) for e in dm.read_runs([copied5, table5]).errors]
    assert len(expected) == 3 and all("korthikanti2022_table5.csv row" in e for e in expected)
    assert main(["validate", "measured", "--csv", str(copied5), "--csv", "korthikanti2022_table5"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "the same run as" in line] == expected


# --------------------------------------------------------------------------- misspelt columns


@pytest.mark.parametrize("typo, column", [
    ("precison", "precision"), ("Precision", "precision"), ("kv_head", "kv_heads"), ("doubts", "doubt"),
    ("recompute_layer", "recompute_layers"), ("source_di", "source_id"), ("Interleave", "interleave"),
])
def test_a_misspelt_optional_column_is_refused_not_read_as_a_label(tmp_path, typo, column):
    path = write_csv(tmp_path / "runs.csv", [{**GOOD, typo: "x"}], tuple(c for c in HEADER if c != column) + (typo,))
    with pytest.raises(dm.MeasuredError) as exc:
        dm.read_runs(path)
    assert str(exc.value) == (f"csv = '{path}': column {typo!r} is not in the schema but resembles {column!r}, "
                              f"which the file does not give; rename it {column!r} (else its values are ignored), "
                              "or give a label column a name unlike the schema's")


def test_a_misspelt_required_column_is_named_before_the_missing_one(tmp_path):
    header = tuple("micro-batch" if c == "micro_batch" else c for c in HEADER)
    path = write_csv(tmp_path / "runs.csv", [{**GOOD, "micro-batch": "4"}], header)
    with pytest.raises(dm.MeasuredError, match=r"column 'micro-batch' is not in the schema but resembles "
                                               r"'micro_batch'"):
        dm.read_runs(path)


def test_a_misspelt_column_stops_the_command_in_one_line(tmp_path, capsys):
    path = write_csv(tmp_path / "runs.csv", [{**GOOD, "precison": "fp8"}], HEADER + ("precison",))
    assert main(["validate", "measured", "--csv", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [f"dse validate measured: error: csv = '{path}': column 'precison' is not in the "
                                "schema but resembles 'precision', which the file does not give; rename it "
                                "'precision' (else its values are ignored), or give a label column a name unlike "
                                "the schema's"]


@pytest.mark.parametrize("label", ["params_b", "notes", "container", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
                                   "fsdp", "seq_length_note"])
def test_label_columns_unlike_the_schema_are_kept(tmp_path, label):
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", [{**GOOD, label: "x y"}], HEADER + (label,)))
    assert runs.errors == ()
    assert runs.labels == ("source", label)
    assert runs.rows[label].to_list() == ["x y"]


def test_a_near_name_beside_the_column_it_resembles_is_a_label(tmp_path):
    """Only a schema column the file does not give can be misspelt: beside `precision`, `precison`
    is a label and `precision` is read."""
    header = HEADER + ("precision", "precison")
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", [{**GOOD, "precision": "bf16", "precison": "note"}], header))
    assert runs.errors == () and runs.labels == ("source", "precison")
    assert runs.rows["precision"].to_list() == ["bf16"]


# ------------------------------------------------------------------------------- unknown preset

MOE_HEADER = ("model", "preset", "seq_len", "tp", "pp", "cp", "ep", "interleave", "dp", "gpus", "global_batch",
              "micro_batch", "recompute", "sequence_parallel", "precision", "gpu", "measured_iter_s", "window_layers")
MIXTRAL = dict(model="mixtral-8x7b", preset="mixtral_8x8b", seq_len="4096", tp="1", pp="1", cp="1", ep="8",
               interleave="1", dp="64", gpus="64", global_batch="256", micro_batch="2", recompute="none",
               sequence_parallel="true", precision="fp8", gpu="H100-SXM", measured_iter_s="2.30")


def test_an_unknown_preset_is_one_line_not_one_per_column_it_would_give(tmp_path):
    runs = dm.read_runs(write_csv(tmp_path / "moe.csv", [MIXTRAL, {**MIXTRAL, "preset": "mixtral_8x7b"}], MOE_HEADER))
    assert [str(e) for e in runs.errors] == [
        f"row 1 (mixtral-8x7b): preset = mixtral_8x8b: not a model preset; valid: {', '.join(model_presets())}"]
    assert "mixtral_8x7b" in model_presets() and runs.rows["row"].to_list() == [2]


def test_an_unknown_preset_keeps_the_rows_other_problems(tmp_path):
    """What does not hang on the preset is still said: a bad GPU, a GPU count off the degrees, a
    window_layers without a window of the row's own."""
    rows = [{**MIXTRAL, "gpu": "H900"}, {**MIXTRAL, "gpus": "63"}, {**MIXTRAL, "window_layers": "4"}]
    runs = dm.read_runs(write_csv(tmp_path / "moe.csv", rows, MOE_HEADER))
    lines = [str(e) for e in runs.errors]
    assert [line.split(":")[0] for line in lines] == ["row 1 (mixtral-8x7b)"] * 2 + ["row 2 (mixtral-8x7b)"] * 2 + [
        "row 3 (mixtral-8x7b)"]
    assert [line.split(": ", 1)[1].split(" = ")[0] for line in lines] == ["preset", "gpu", "preset", "gpus", "preset"]
    assert lines[3] == "row 2 (mixtral-8x7b): gpus = 63: must equal tp*pp*dp*cp = 1*1*64*1 = 64"


# ------------------------------------------------------------------------------- interleave


def test_interleave_may_be_left_out_and_is_then_1(tmp_path):
    given = write_csv(tmp_path / "given.csv", [GOOD])
    left_out = write_csv(tmp_path / "left_out.csv", [GOOD], tuple(c for c in HEADER if c != "interleave"))
    runs = dm.read_runs(left_out)
    assert runs.errors == () and runs.rows["interleave"].to_list() == [1]
    assert "interleave" in runs.columns and "interleave" not in runs.labels
    (one,), (other,) = dm.plan(dm.read_runs(given)), dm.plan(runs)
    assert one.table["interleave"].tolist() == other.table["interleave"].tolist() == [1]


# ------------------------------------------------------------------------------- the reference


def test_the_docs_schema_table_lists_every_column_and_choice_the_schema_reads():
    """docs/accuracy.md's table of the CSV schema: a row for every column read by name, every
    choice of precision, and interleave optional (default 1), as the reader has them."""
    import re
    from pathlib import Path

    from dse.truth.schema import CHOICES, REQUIRED_COLUMNS, SCHEMA_COLUMNS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "accuracy.md").read_text()
    table = doc[doc.index("| column | type | default | valid |"):]
    lines = table[:table.index("\n\n")].splitlines()[2:]
    named = {c for line in lines for c in re.findall(r"`([a-z0-9_*]+)`", line.split("|")[1])}
    assert sorted(set(SCHEMA_COLUMNS) - named) == []
    precision = next(line for line in lines if line.startswith("| `precision` |"))
    assert CHOICES["precision"] == ("bf16", "fp8", "mxfp8", "nvfp4")
    assert all(f"`{p}`" in precision for p in CHOICES["precision"])
    assert "interleave" not in REQUIRED_COLUMNS
    assert next(line for line in lines if line.startswith("| `interleave` |")).startswith("| `interleave` | int | 1 |")
