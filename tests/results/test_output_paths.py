"""Every output path is checked before any compute (`dse.spec.checks.check_output_file`): a file name,
not a folder, in a folder that exists (created when missing, as the writers do; `dse calibrate --out`
refuses a missing one) and that takes a file. `dse plot --out`, `dse report --out`, `dse codesign
--path`, `dse calibrate --out/--write` and the figure functions refuse a bad one in one line."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from dse import figures
from dse.cli import main
from dse.commands import calibrate as calibrate_cmd
from dse.figures.study import plot
from dse.results import io
from dse.spec.checks import check_output_file
from dse.spec.specs import SpecError

#: A folder no process can create files in, the superuser's included (this suite runs as root).
UNWRITABLE = Path("/proc")
needs_proc = pytest.mark.skipif(not (UNWRITABLE / "self").exists(), reason="needs Linux's /proc")


@pytest.fixture
def afile(tmp_path) -> Path:
    path = tmp_path / "afile"
    path.write_text("not a folder")
    return path


@pytest.fixture
def read_only(monkeypatch):
    """Every new file refused as on a read-only folder (chmod does not stop the superuser)."""
    def refuse(self, data):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "write_bytes", refuse)


def never_read() -> pl.LazyFrame:
    """A dataset whose schema can be read but none of its rows: the path check must come first."""
    def boom(column):
        raise AssertionError("a row was read before the output path was checked")

    frame = pl.LazyFrame({"n_gpus": [8], "iteration_time": [1.0], "memory": [1.0], "feasible": [True]})
    return frame.with_columns(pl.col("n_gpus").map_batches(boom, return_dtype=pl.Int64))


# -------------------------------------------------------------------------------- the one check


@pytest.mark.parametrize("sub", ["x.png", "sub/x.png", "a/b/x.parquet"])
def test_a_file_where_a_folder_should_be(afile, sub):
    with pytest.raises(SpecError) as exc:
        check_output_file("--out", afile / sub)
    assert str(exc.value) == f"--out = '{afile / sub}': '{afile}' is a file, not a folder"


@pytest.mark.parametrize("name", ["", ".", ".."])
def test_no_file_name(name):
    with pytest.raises(SpecError) as exc:
        check_output_file("--out", name)
    assert str(exc.value) == f"--out = {name!r}: must be a file name"


def test_a_folder_is_no_file(tmp_path):
    with pytest.raises(SpecError) as exc:
        check_output_file("--path", tmp_path)
    assert str(exc.value) == f"--path = '{tmp_path}': is a folder; give a file name in it"


@needs_proc
@pytest.mark.parametrize("sub, what", [("x.png", "cannot write in the folder '/proc'"),
                                       ("dse/x.png", "cannot create the folder '/proc/dse'")])
def test_a_folder_that_takes_no_file(sub, what):
    with pytest.raises(SpecError) as exc:
        check_output_file("--out", UNWRITABLE / sub)
    assert str(exc.value).startswith(f"--out = '{UNWRITABLE / sub}': {what} (")
    assert str(exc.value).endswith("); give a writable folder")


def test_a_read_only_folder(tmp_path, read_only):
    with pytest.raises(SpecError) as exc:
        check_output_file("--out", tmp_path / "x.png")
    assert str(exc.value) == (f"--out = '{tmp_path / 'x.png'}': cannot write in the folder '{tmp_path}' "
                              "(Permission denied); give a writable folder")


def test_a_missing_folder_is_created_or_refused(tmp_path):
    with pytest.raises(SpecError) as exc:
        check_output_file("--out", tmp_path / "new" / "x.yaml", create=False)
    assert str(exc.value) == f"--out = '{tmp_path / 'new' / 'x.yaml'}': no such folder '{tmp_path / 'new'}'"
    assert not (tmp_path / "new").exists()
    assert check_output_file("--out", tmp_path / "new" / "deeper" / "x.png") == tmp_path / "new" / "deeper" / "x.png"
    assert (tmp_path / "new" / "deeper").is_dir()
    assert list((tmp_path / "new" / "deeper").iterdir()) == []  # the probe is gone


def test_an_existing_file_is_replaced_not_refused(tmp_path):
    (tmp_path / "x.png").write_text("old")
    assert check_output_file("--out", tmp_path / "x.png") == tmp_path / "x.png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.png"]


# -------------------------------------------------------------------------------------- dse plot


@pytest.mark.parametrize("kind", ["line", "scatter", "pareto", "breakdown"])
def test_plot_checks_its_output_before_reading_a_row(afile, kind):
    with pytest.raises(SpecError) as exc:
        plot(never_read(), x="n_gpus", y="iteration_time", kind=kind, out=afile / "fig.png")
    assert str(exc.value) == f"--out = '{afile / 'fig.png'}': '{afile}' is a file, not a folder"


def test_plot_into_a_missing_folder_creates_it(tmp_path):
    frame = pl.DataFrame({"n_gpus": [8, 16, 32], "iteration_time": [3.0, 2.0, 1.5], "feasible": [True] * 3})
    out = plot(frame, x="n_gpus", y="iteration_time", kind="scatter", out=tmp_path / "new" / "fig.png", dpi=40)
    assert out == tmp_path / "new" / "fig.png" and out.stat().st_size > 0


def test_cli_plot_into_a_read_only_folder(tmp_path, capsys, monkeypatch, read_only):
    monkeypatch.setattr(io, "scan", lambda root: never_read())
    assert main(["plot", str(tmp_path), "--x", "n_gpus", "--y", "iteration_time", "--out",
                 str(tmp_path / "fig.png")]) == 2
    cap = capsys.readouterr()
    assert cap.err == (f"dse plot: error: --out = '{tmp_path / 'fig.png'}': cannot write in the folder '{tmp_path}' "
                       "(Permission denied); give a writable folder\n")
    assert cap.out == ""


@needs_proc
def test_cli_plot_into_a_folder_it_cannot_create(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(io, "scan", lambda root: never_read())
    assert main(["plot", str(tmp_path), "--x", "n_gpus", "--y", "memory", "--out", "/proc/dse/fig.svg"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dse plot: error: --out = '/proc/dse/fig.svg': cannot create the folder '/proc/dse' (")
    assert len(err.splitlines()) == 1


# ------------------------------------------------------------------------------------- the figures


@pytest.mark.parametrize("name", list(figures.FIGURES))
def test_every_figure_checks_its_output_before_reading_a_row(afile, name):
    fn = figures.FIGURES[name][0]
    with pytest.raises(SpecError) as exc:
        fn(never_read(), afile / f"{name}.png")
    assert str(exc.value) == f"--out = '{afile / (name + '.png')}': '{afile}' is a file, not a folder"


def test_cli_report_into_a_folder_path(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(io, "scan", lambda root: never_read())
    assert main(["report", "fig5", "--data", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"dse report: error: --out = '{tmp_path}': is a folder; give a file name in it\n"


# ---------------------------------------------------------------------------------- dse codesign


CODESIGN = ["codesign", "model=llama3_8b", "system=h200", "n_gpus=8", "strategy=tp1d"]


def test_codesign_path_under_a_file(afile, capsys):
    assert main([*CODESIGN, "--path", str(afile / "path.parquet")]) == 2
    cap = capsys.readouterr()
    assert cap.err == f"dse codesign: error: --path = '{afile / 'path.parquet'}': '{afile}' is a file, not a folder\n"
    assert cap.out == ""


def test_codesign_path_into_a_read_only_folder(tmp_path, capsys, read_only):
    assert main([*CODESIGN, "--path", str(tmp_path / "path.parquet")]) == 2
    assert capsys.readouterr().err == (f"dse codesign: error: --path = '{tmp_path / 'path.parquet'}': cannot write "
                                       f"in the folder '{tmp_path}' (Permission denied); give a writable folder\n")


# --------------------------------------------------------------------------------- dse calibrate


def no_fit(*args, **kwargs):
    raise AssertionError("the output must be refused before any fit")


@pytest.mark.parametrize("out, message", [
    ("{tmp}/missing/cal.yaml", "--out = '{tmp}/missing/cal.yaml': no such folder '{tmp}/missing'"),
    ("{tmp}/afile/cal.yaml", "--out = '{tmp}/afile/cal.yaml': '{tmp}/afile' is a file, not a folder"),
    ("{tmp}", "--out = '{tmp}': is a folder; give a file name in it"),
])
def test_calibrate_out_is_checked_before_any_fit(tmp_path, afile, capsys, monkeypatch, out, message):
    monkeypatch.setattr(calibrate_cmd, "calibrate", no_fit)
    assert main(["calibrate", "--out", out.format(tmp=tmp_path)]) == 2
    assert capsys.readouterr().err == f"dse calibrate: error: {message.format(tmp=tmp_path)}\n"
    assert not (tmp_path / "missing").exists()


def test_calibrate_write_into_a_read_only_conf_calibration(capsys, monkeypatch, read_only):
    monkeypatch.setattr(calibrate_cmd, "calibrate", no_fit)
    folder = calibrate_cmd.calibrations.CALIBRATION_DIR
    assert main(["calibrate", "--write", "--name", "readonly_probe"]) == 2
    assert capsys.readouterr().err == (f"dse calibrate: error: --write = '{folder / 'readonly_probe.yaml'}': cannot "
                                       f"write in the folder '{folder}' (Permission denied); give a writable folder\n")
