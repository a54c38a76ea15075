"""FP8 matmuls scaled per row (`Profile.fp8_rowwise`, torchao's rowwise recipes): they run at the
system's `fp8_rowwise_eff` of fp8_eff, which is the same as a system whose fp8_eff is the product;
BF16 is untouched; a measured run's `fp8_recipe` rowwise sets the switch."""

from __future__ import annotations

from dataclasses import asdict

import pytest

import dse
from kernels.params import PROFILES

FSDP2 = PROFILES["fsdp2"]._replace(calibration="none")
POINT = dict(model="llama3_8b", strategy="tp1d", global_batch=8, n1=1, n_p=1, n_d=8, nvs_d=8, microbatch=1,
             zero=3, recompute="selective")


def run(precision: str, rowwise: bool, fp8_eff: float, rowwise_eff: float = 1.0):
    system = asdict(dse.load_system("dgx_h100"))
    system.update(fp8_eff=fp8_eff, fp8_rowwise_eff=rowwise_eff)
    return dse.evaluate(**POINT, system=system, precision=precision, profile=FSDP2._replace(fp8_rowwise=rowwise))


def test_rowwise_matmuls_run_at_their_share_of_fp8_eff():
    assert run("fp8", True, 0.8, 0.5)["iteration_time"] == run("fp8", False, 0.4)["iteration_time"]
    assert run("fp8", True, 0.8, 0.5)["iteration_time"] > run("fp8", False, 0.8)["iteration_time"]
    assert run("fp8", True, 0.8, 1.0) == run("fp8", False, 0.8)


def test_bf16_is_untouched():
    assert run("bf16", True, 0.8, 0.5) == run("bf16", False, 0.8)


def test_a_rowwise_run_sets_the_switch():
    import polars as pl

    from dse.truth.measured import plan, run_profile
    from helpers import packaged_runs

    runs = packaged_runs("torchtitan_fsdp2.csv", pl.col("precision") == "fp8", one_per=("fp8_recipe", "tp"))
    calls = plan(runs)
    assert {c.fp8_recipe for c in calls} == {"tensorwise", "rowwise"}
    for call in calls:
        prof = run_profile("default", call)
        assert prof.fp8_rowwise == (call.fp8_recipe == "rowwise")
        assert prof.fp8_tp_gather == (call.fp8_recipe != "rowwise")


@pytest.mark.parametrize("value", [0.0, 1.5])
def test_the_field_is_checked(value):
    from dse.spec.specs import SpecError

    with pytest.raises(SpecError, match=rf"^system.fp8_rowwise_eff = {value:g}"):
        run("fp8", True, 0.8, value)


def test_the_shipped_calibration_prices_rowwise_matmuls_from_the_rowwise_runs(tmp_path):
    """corpus2026 fits fp8_rowwise_eff from the runs scaled per row (torchtitan's, the only runs that
    move it): below 1, and with it those runs' predicted times lie closer to their measured ones than
    at 1 (the same calibration with the field set to 1 in every group)."""
    import polars as pl
    import yaml

    from dse.truth.calibration import CALIBRATION_DIR, load_calibration
    from dse.truth.measured import predict
    from helpers import packaged_runs

    cal = load_calibration("corpus2026")
    assert 0.3 < cal.groups["hopper/fsdp2"]["fp8_rowwise_eff"] < 0.9
    data = yaml.safe_load((CALIBRATION_DIR / "corpus2026.yaml").read_text())
    for values in (data["values"], *data["groups"].values()):
        values["fp8_rowwise_eff"] = 1.0
    (tmp_path / "at_one.yaml").write_text(yaml.safe_dump(data))
    runs = packaged_runs("torchtitan_fsdp2.csv", pl.col("fp8_recipe") == "rowwise", one_per=("tp", "async_tp"))
    assert set(runs.rows["tp"]) == {1, 8}
    fitted = predict(runs, "default").frame["error"].abs().mean()
    at_one = predict(runs, PROFILES["default"]._replace(calibration=str(tmp_path / "at_one.yaml"))).frame["error"]
    assert fitted < at_one.abs().mean()
    assert (at_one < 0).all()  # at tensorwise speed every rowwise run is predicted too fast
