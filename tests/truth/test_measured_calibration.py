"""`dse validate measured --calibration NAME|PATH`: the runs predicted under a calibration other than
the profile's (a shipped one, a file of one's own as `dse calibrate --out` writes it, or none),
named in the summary line; a bad one is one line before any compute."""

from __future__ import annotations

import json

import polars as pl
import pyarrow.parquet as pq
import pytest

import dse.truth.measured as dm
from dse.cli import main
from dse.commands import validate_measured as vm
from dse.spec.specs import SpecError
from helpers import GOOD, write_csv

#: A calibration of one's own, in the format `dse calibrate --out` writes (values far from the
#: shipped calibrations', so that a prediction that ignored it could not match).
MINE = """\
values: {compute_eff: 0.55, matmul_knee: 3.0, hbm_eff: 0.6}
in_sample: {mean: 0.03, max: 0.06}
leave_one_model_out: {mean: 0.04, max: 0.09}
provenance: {data: mine.csv, runs: 6, gpus: dgx_a100_80gb, generations: [ampere], frameworks: [megatron]}
"""

#: `GOOD` (Korthikanti et al. 2022 Table 5's 22B: tp 8 on one DGX A100, micro-batch 4, selective
#: recompute, sequence parallel) as `dse eval` asks it: Megatron 22B's preset is the run's shape; the
#: run's CSV leaves attention, TP and PP overlaps at their defaults (standard attention, no overlaps).
EVAL = ["model=megatron_22b", "system=dgx_a100_80gb", "strategy=tp1d", "n1=8", "n_p=1", "n_d=1", "microbatch=4",
        "global_batch=4", "nvs1=8", "nvs_p=1", "nvs_d=1", "recompute=selective", "seq_par=true", "precision=bf16",
        "zero=1", "profile.flash_attention=false", "profile.tp_comm_overlap=false",
        "profile.pp_comm_overlap=false"]


@pytest.fixture
def run_csv(tmp_path):
    return write_csv(tmp_path / "runs.csv", [GOOD])


def validated(capsys, tmp_path, csv, *argv: str) -> tuple[float, str, dict]:
    """(the run's predicted iteration time s, the summary line, the Parquet file's metadata) of
    `dse validate measured --csv CSV ARGV --out ...`."""
    out = tmp_path / "pred.parquet"
    assert main(["validate", "measured", "--csv", str(csv), *argv, "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    frame = pl.read_parquet(out)
    assert frame.height == 1
    meta = json.loads(pq.read_schema(out).metadata[b"dse.truth.measured"])
    return frame["predicted_iter_s"][0], lines[-1], meta


def evaluated(capsys, *overrides: str) -> float:
    """The iteration time s `dse eval --json` gives `EVAL` with `overrides`."""
    assert main(["eval", *EVAL, *overrides, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["iteration_time"]


def test_none_and_the_default_differ_and_are_named(capsys, tmp_path, run_csv):
    """The same run without a calibration (the system preset's own efficiencies) and under the
    profile's (corpus2026): two predictions, each summary naming its calibration, each equal to
    `dse eval` under the same `profile.calibration`."""
    default, line, meta = validated(capsys, tmp_path, run_csv)
    assert line.startswith("1 runs: mean |error| ") and "(profile default, calibration corpus2026)" in line
    assert meta["profile"] == "default" and meta["calibration"] == "corpus2026"
    none, line, meta = validated(capsys, tmp_path, run_csv, "--calibration", "none")
    assert "(profile default, calibration none)" in line and meta["calibration"] == "none"
    assert abs(none / default - 1) > 0.01  # corpus2026 moves the A100's efficiencies by more than that
    assert default == pytest.approx(evaluated(capsys), rel=1e-12)
    assert none == pytest.approx(evaluated(capsys, "profile.calibration=none"), rel=1e-12)
    # the shipped calibration named explicitly is the default
    named, line, _ = validated(capsys, tmp_path, run_csv, "--calibration", "corpus2026")
    assert named == default and "(profile default, calibration corpus2026)" in line


def test_a_calibration_file_of_ones_own(capsys, tmp_path, run_csv):
    """A calibration file (`dse calibrate --out`'s format): the run predicted under it equals
    `dse eval` of the same configuration under `profile.calibration=FILE` (an independent path: the
    configuration, the profile's switches and the calibration given by hand), and neither the
    default's prediction nor the uncalibrated one; the summary names the file."""
    path = tmp_path / "mine.yaml"
    path.write_text(MINE)
    mine, line, meta = validated(capsys, tmp_path, run_csv, "--calibration", str(path))
    assert f"(profile default, calibration {path})" in line and meta["calibration"] == str(path)
    assert mine == pytest.approx(evaluated(capsys, f"profile.calibration={path}"), rel=1e-12)
    others = [dm.predict(str(run_csv), calibration=c).frame["predicted_iter_s"][0] for c in (None, "none")]
    assert all(abs(mine / o - 1) > 0.01 for o in others), (mine, others)


def test_the_api_takes_the_calibration_too(run_csv, tmp_path):
    """`dse.truth.measured.predict(runs, calibration=...)`: the calibration it applied in its result;
    the profile column stays the profile's name."""
    path = tmp_path / "mine.yaml"
    path.write_text(MINE)
    default = dm.predict(str(run_csv))
    mine = dm.predict(str(run_csv), calibration=str(path))
    assert default.calibration == "corpus2026" and mine.calibration == str(path)
    assert set(mine.frame["profile"]) == {"default"}
    with pytest.raises(SpecError, match=r"^profile.calibration = 'nope': no such calibration; valid: "):
        dm.predict(str(run_csv), calibration="nope")


@pytest.mark.parametrize("given, words", [
    ("nope", "calibration = 'nope': no such calibration; valid: corpus2026, korthikanti2022, none or a file FILE.yaml"),
    ("missing.yaml", "calibration = 'missing.yaml': no such file"),
    ("../x", "calibration = '../x': must be a calibration name ("),
    ("BAD", "is not a calibration ("),
], ids=["name", "no-file", "not-a-name", "not-a-calibration"])
def test_a_bad_calibration_is_one_line(capsys, tmp_path, run_csv, monkeypatch, given, words):
    """A calibration that does not load: the loader's error, said of this option, on one line, exit
    status 2, nothing predicted (`predict` is never called)."""
    if given == "BAD":
        given = str(tmp_path / "bad.yaml")
        (tmp_path / "bad.yaml").write_text("values: {compute_eff: 7}\n")
    monkeypatch.setattr(vm, "predict", lambda *a, **k: pytest.fail("predicted despite a bad calibration"))
    assert vm.main(["--csv", str(run_csv), "--calibration", given]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.startswith("dse validate measured: error: calibration = ") and words in cap.err
    assert cap.err.count("\n") == 1
