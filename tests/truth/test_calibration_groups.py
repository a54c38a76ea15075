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
