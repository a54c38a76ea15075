"""Calibrations per GPU generation and framework: which group a system takes (a new generation its
predecessor's), the error band of each generation, precision and framework (none where no
measured run validated it), a calibration file of one's own, and what a file may hold."""

from __future__ import annotations

import math
import os
from dataclasses import replace

import polars as pl
import pytest

from dse.spec.specs import SpecError, load_system
from dse.truth.calibrate import write_calibration
from dse.truth.calibration import (Calibration, apply_calibration, load_calibration, profile_calibration,
                                   with_error_band)
from kernels.params import PROFILES

HOPPER = {"compute_eff": 0.7, "matmul_knee": 4.0, "hbm_eff": 0.6, "fp8_eff": 0.8}
BLACKWELL = {"compute_eff": 0.6, "matmul_knee": 5.0, "hbm_eff": 0.7, "fp8_eff": 0.75}
POOLED = {"compute_eff": 0.75, "matmul_knee": 4.5, "hbm_eff": 0.65, "fp8_eff": 0.85}


def _cal(**kw) -> Calibration:
    return Calibration(
        name="t", values=POOLED, in_sample={"mean": 0.03, "max": 0.1}, leave_one_model_out={"mean": 0.04, "max": 0.12},
        provenance={"runs": 20}, groups={"hopper/megatron": HOPPER, "blackwell/megatron": BLACKWELL},
        bands={"hopper/fp8/megatron": {"mean": 0.05, "max": 0.11, "runs": 9, "sources": 3},
               "hopper/bf16/megatron": {"mean": 0.04, "max": 0.09, "runs": 5, "sources": 2}},
        leave_one_source_out={"mean": 0.05, "max": 0.2}, **kw)


def test_a_system_takes_its_generations_group():
    cal = _cal()
    h = apply_calibration(load_system("dgx_h100"), cal)
    assert {k: getattr(h, k) for k in HOPPER} == HOPPER
    b = apply_calibration(load_system("gb200_nvl72"), cal)
    assert {k: getattr(b, k) for k in BLACKWELL} == BLACKWELL


def test_a_new_generation_takes_its_predecessors_group():
    """Blackwell Ultra has no runs of its own: it is predicted from Blackwell's calibration; a GPU
    of no known generation takes the pooled values."""
    cal = _cal()
    ultra = load_system("dgx_b200").replace(name="b300", generation="blackwell_ultra")
    assert {k: getattr(apply_calibration(ultra, cal), k) for k in BLACKWELL} == BLACKWELL
    amd = load_system("mi300x")
    assert amd.generation == ""
    assert {k: getattr(apply_calibration(amd, cal), k) for k in POOLED} == POOLED
    # an older generation than any fitted one has no predecessor with a group either
    assert cal.values_for("ampere") == POOLED


def test_bands_by_generation_precision_and_framework():
    cal = _cal()
    assert cal.band_for("hopper", "fp8")["mean"] == 0.05
    assert cal.band_for("blackwell", "fp8") is None  # fitted, but no held-out run validated it
    assert cal.band_text("blackwell_ultra", "bf16") == "not validated on blackwell_ultra/bf16/megatron"
    assert cal.band_text("hopper", "bf16").startswith("±4.0% typical, ±9.0% worst (leave-one-source-out on 5")
    # bound to the fsdp2 framework, the megatron bands do not apply
    fsdp = replace(cal, framework="fsdp2")
    assert fsdp.band_for("hopper", "fp8") is None
    frame = pl.DataFrame({"precision": [0, 1, 1]})
    out = with_error_band(frame, cal, "hopper")
    assert out["error_band"].to_list() == [0.04, 0.05, 0.05]
    assert with_error_band(frame, cal, "blackwell")["error_band"].null_count() == 3
    # a search over several presets: each row takes its own system's generation
    mixed = pl.DataFrame({"system": ["dgx_h100", "dgx_b200", "dgx_h100"], "precision": [1, 1, 0]})
    out = with_error_band(mixed, cal, {"dgx_h100": "hopper", "dgx_b200": "blackwell"})
    assert out["error_band"].to_list() == [0.05, None, 0.04]
    assert out["error_band_max"].to_list() == [0.11, None, 0.09]


def test_profile_binds_its_framework(tmp_path):
    path = write_calibration(_cal(), tmp_path / "mine.yaml")
    prof = PROFILES["fsdp2"]._replace(calibration=str(path))
    cal = profile_calibration(prof)
    assert cal.name == "mine" and cal.framework == "fsdp2"
    assert cal.groups == _cal().groups and cal.bands == _cal().bands


def test_calibration_files_are_checked(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("values: {compute_eff: .nan, matmul_knee: 1.0, hbm_eff: 0.5}\nin_sample: {}\n"
                   "leave_one_model_out: {}\n")
    with pytest.raises(SpecError, match=r"^profile.calibration = '.*bad.yaml': .* is not a calibration .*compute_eff"):
        load_calibration(str(bad))
    with pytest.raises(SpecError, match=r"no such file"):
        load_calibration(str(tmp_path / "missing.yaml"))
    nan = replace(_cal(), in_sample={"mean": math.nan, "max": math.nan})
    with pytest.raises(SpecError, match=r"not a finite number; not written"):
        write_calibration(nan, tmp_path / "nan.yaml")
    assert not (tmp_path / "nan.yaml").exists()


def test_a_calibration_file_rewritten_is_read_again(tmp_path):
    """Files are parsed once while unchanged; a rewritten one is read anew, and a loaded
    calibration changed by its caller leaves the next load as the file says."""
    path = write_calibration(_cal(), tmp_path / "mine.yaml")
    first = load_calibration(str(path))
    first.values["compute_eff"] = -1.0
    first.provenance["runs"] = -1  # a field read_calibration passes on as the file gave it
    first.in_sample["mean"] = -1.0
    again = load_calibration(str(path))
    assert again.values == _cal().values and again.provenance == _cal().provenance
    assert again.in_sample == _cal().in_sample
    changed = replace(_cal(), values={**_cal().values, "compute_eff": 0.5})
    write_calibration(changed, path)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a later write on a coarse clock
    assert load_calibration(str(path)).values["compute_eff"] == 0.5


def test_a_calibration_without_groups_validates_only_what_it_was_fitted_on():
    """A user's fit of one generation (no groups) carries bands by generation, precision and
    framework: an FP8 or FSDP2 answer under a fit of BF16 Megatron runs is not validated (it printed
    the BF16 runs' band labelled hopper/fp8/megatron); each band says which held-out error it is."""
    mine = Calibration(name="mine", values=POOLED, in_sample={"mean": 0.03, "max": 0.07},
                       leave_one_model_out={"mean": 0.046, "max": 0.10}, provenance={"runs": 6},
                       bands={"hopper/bf16/megatron": {"mean": 0.046, "max": 0.10, "runs": 6, "sources": 1,
                                                       "kind": "leave-one-model-out"}})
    assert mine.band_for("hopper", "bf16")["kind"] == "leave-one-model-out"
    assert mine.band_text("hopper", "bf16").startswith("±4.6% typical, ±10.0% worst (leave-one-model-out on 6")
    assert mine.band_for("hopper", "fp8") is None and mine.band_for("blackwell", "bf16") is None
    assert mine.band_text("hopper", "fp8") == "not validated on hopper/fp8/megatron"
    assert replace(mine, framework="fsdp2").band_for("hopper", "bf16") is None
    assert mine.band_for("hopper", "bf16", moe=True) is None
    # a file written before bands were: its leave-one-model-out band, where its runs' framework is
    old = replace(mine, bands={}, provenance={"runs": 6, "generations": ["hopper"], "frameworks": ["megatron"],
                                             "kinds": ["dense"]})
    assert old.band_for("hopper", "bf16")["kind"] == "leave-one-model-out"
    assert replace(old, framework="fsdp2").band_for("hopper", "bf16") is None


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["leave_one_model_out"].pop("max"), r"leave_one_model_out.max = None: must be a number in \[0, 100\]"),
    (lambda d: d["in_sample"].update(mean=-3), r"in_sample.mean = -3: must be a number in \[0, 100\]"),
    (lambda d: d.update(values={}), r"values: empty; a calibration holds at least one fitted field"),
    (lambda d: d.pop("in_sample"), r"in_sample: missing"),
    (lambda d: d["bands"]["hopper/fp8/megatron"].update(max="x"), r"bands.hopper/fp8/megatron.max = 'x'"),
])
def test_a_damaged_calibration_file_is_one_line_before_compute(tmp_path, edit, message):
    """Whatever a hand-edited file lacks or holds out of range is one SpecError line when it is
    loaded (a missing max crashed after the search; a negative mean printed a band of -300%)."""
    import yaml

    path = write_calibration(_cal(), tmp_path / "mine.yaml")
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    with pytest.raises(SpecError, match=r"^profile.calibration = '.*mine.yaml': .* is not a calibration \(ValueError: "
                                        + message):
        load_calibration(str(path))
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(SpecError, match=r"is not a calibration \(ValueError: not a mapping"):
        load_calibration(str(empty))


def test_a_fold_does_not_know_a_field_only_the_held_out_runs_move():
    """A held-out fit starts a field no remaining run moves where every fit starts (its effects and,
    now, its pooled value: host_moe_time when one source held every dropless MoE run was the full
    fit's, learnt from the runs it claimed to hold out)."""
    import numpy as np
    from types import SimpleNamespace

    from dse.truth.calibrate import FIELDS, Fitter

    tags = ["bf16", "bf16", "bf16+moe+dropless"]
    fitter = SimpleNamespace(design=np.ones((3, 1)), effects=[])
    every = Fitter.informed(fitter, np.array([1.0, 1.0, 1.0]), tags)
    without = Fitter.informed(fitter, np.array([1.0, 1.0, 0.0]), tags)
    host = list(FIELDS).index("host_moe_time")
    assert every[0, host] and not without[0, host]
    assert without[0, list(FIELDS).index("compute_eff")] and not without[0, list(FIELDS).index("fp8_eff")]


def test_a_users_calibration_never_takes_a_shipped_name_unasked(tmp_path, capsys):
    """Without --name, a fit of one's own runs is named after its first CSV (it was named
    korthikanti2022, and --write would have replaced the shipped file); --write with --out, or --out
    not ending in .yaml (which profile.calibration= would refuse), is one line before any fit."""
    from dse.commands.calibrate import DEFAULT_NAME, default_name, main

    assert default_name(None) == DEFAULT_NAME == "korthikanti2022"
    assert default_name(["/data/my-runs.csv", "corpus"]) == "my_runs" and default_name(["2025.csv"]) == "c_2025"
    assert main(["--csv", "corpus", "--write", "--out", str(tmp_path / "x.yaml")]) == 2
    assert capsys.readouterr().err.startswith("dse calibrate: error: --write and --out: give one")
    assert main(["--csv", "corpus", "--out", str(tmp_path / "x.txt")]) == 2
    assert "--out = " in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
