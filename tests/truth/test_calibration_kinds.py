"""Dense and mixture-of-experts runs in one calibration, and the fields a user sets.

MoE runs move only the host's time of a dropless block (`MOE_FIELDS`); the efficiencies are the dense
runs' to fit, each kind's errors are a mean over its own runs, and each kind has its own error bands,
so an MoE answer never carries a band that dense runs earned. A calibrated field set on the command
line is the value answered for, never replaced by the calibration."""

from __future__ import annotations

import pytest

from dse.spec.specs import SpecError, load_system
from dse.truth.calibrate import check_estimable, fitted_fields, moving
from dse.truth.calibration import (Calibration, apply_calibration, band_key, load_calibration, user_fields,
                                   with_error_band)

TAGS = ["bf16", "fp8", "fp8+moe", "fp8+moe+dropless", "nvfp4"]


def test_moe_runs_move_only_the_host_time():
    assert moving("compute_eff", TAGS).tolist() == [True, True, False, False, True]
    assert moving("fp8_eff", TAGS).tolist() == [False, True, False, False, False]
    assert moving("host_moe_time", TAGS).tolist() == [False, False, False, True, False]
    assert fitted_fields(["fp8+moe+dropless", "bf16"]) == ["compute_eff", "matmul_knee", "hbm_eff", "host_moe_time"]


def test_only_runs_scaled_per_row_move_the_rowwise_rate():
    from dse.truth.calibrate import run_tags
    from dse.truth.measured import EngineCall
    from helpers import fake_call

    # a recipe is an fp8 run's only (the reader refuses it elsewhere: tests/kernels/test_fp8_collectives.py)
    assert [EngineCall((), None, "", 8, 1, {}, fp8_recipe=r).rowwise for r in ("rowwise", "tensorwise", None)] == \
        [True, False, False]
    tags = run_tags(["fp8", "fp8", "bf16"], [fake_call(rowwise=True), fake_call(), fake_call()])
    assert tags == ["fp8+rowwise", "fp8", "bf16"]
    assert moving("fp8_rowwise_eff", tags).tolist() == [True, False, False]
    assert moving("fp8_eff", tags).tolist() == [True, True, False]
    assert "fp8_rowwise_eff" in fitted_fields(tags) and "fp8_rowwise_eff" not in fitted_fields(tags[1:])


def test_a_fit_of_moe_runs_alone_is_refused():
    with pytest.raises(SpecError, match="all mixture-of-experts runs.*--csv corpus"):
        check_estimable(["a", "b"], ["s", "t"], ["fp8+moe+dropless", "bf16+moe"])


def _cal(bands):
    return Calibration(name="t", values={"compute_eff": 0.8}, in_sample={"mean": 0.1, "max": 0.2},
                       leave_one_model_out={"mean": 0.1, "max": 0.2}, provenance={},
                       groups={"hopper/megatron": {"compute_eff": 0.8}}, bands=bands)


def test_an_moe_answer_carries_the_moe_runs_band_or_none():
    dense = {"mean": 0.07, "max": 0.2, "runs": 31, "sources": 7}
    moe = {"mean": 0.15, "max": 0.6, "runs": 9, "sources": 3}
    both = _cal({band_key("hopper", "fp8", "megatron"): dense, band_key("hopper", "fp8", "megatron", True): moe})
    assert band_key("hopper", "fp8", "megatron", True) == "hopper/fp8/megatron/moe"
    assert both.band_for("hopper", "fp8")["mean"] == 0.07
    assert both.band_for("hopper", "fp8", moe=True)["mean"] == 0.15
    assert "±15.0% typical, ±60.0% worst" in both.band_text("hopper", "fp8", True)
    only_dense = _cal({band_key("hopper", "fp8", "megatron"): dense})
    assert only_dense.band_for("hopper", "fp8", moe=True) is None
    assert only_dense.band_text("hopper", "fp8", True) == "not validated on hopper/fp8/megatron MoE"
    import polars as pl

    frame = pl.DataFrame({"precision": [1]})  # fp8's code
    assert with_error_band(frame, both, "hopper", moe=True)["error_band_max"].to_list() == [0.6]
    assert with_error_band(frame, only_dense, "hopper", moe=True)["error_band"].to_list() == [None]
    assert with_error_band(frame, only_dense, "hopper")["error_band"].to_list() == [0.07]


def test_a_calibration_without_groups_validates_the_kinds_it_was_fitted_on():
    cal = Calibration(name="t", values={"compute_eff": 0.8}, in_sample={"mean": 0.1, "max": 0.2},
                      leave_one_model_out={"mean": 0.02, "max": 0.06}, provenance={"generations": ["ampere"]})
    assert cal.band_for("ampere", "bf16")["mean"] == 0.02
    assert cal.band_for("ampere", "bf16", moe=True) is None


def test_the_shipped_calibration_bands_moe_answers_apart():
    cal = load_calibration("corpus2026")
    moe_keys = [k for k in cal.bands if k.endswith("/moe")]
    assert moe_keys, "corpus2026 is fitted with the MoE runs: its MoE runs have bands of their own"
    for key in moe_keys:
        dense = cal.bands.get(key[:-len("/moe")])
        if dense is not None:  # an MoE band is its own runs' errors, not the dense runs'
            assert cal.bands[key]["runs"] != dense["runs"] or cal.bands[key]["mean"] != dense["mean"]
    assert set(cal.provenance["kinds"]) == {"dense", "MoE"}


def test_a_calibrated_field_the_user_sets_is_kept():
    cal = load_calibration("corpus2026")
    h100 = load_system("dgx_h100")
    calibrated = apply_calibration(h100, cal)
    mine = apply_calibration(h100.replace(compute_eff=0.5), cal)
    assert user_fields(h100) == () and user_fields(h100.replace(compute_eff=0.5)) == ("compute_eff",)
    assert mine.compute_eff == 0.5 and calibrated.compute_eff == cal.groups["hopper/megatron"]["compute_eff"]
    assert mine.hbm_eff == calibrated.hbm_eff == cal.groups["hopper/megatron"]["hbm_eff"]
    # a system that is no preset: its file's efficiencies are its own, which the calibration replaces
    other = apply_calibration(h100.replace(name="my_cluster", compute_eff=0.5), cal)
    assert other.compute_eff == calibrated.compute_eff


def test_eval_answers_for_the_efficiency_asked(capsys):
    from dse.commands import evaluate

    point = ["model=llama3_8b", "system=dgx_h100", "strategy=tp1d", "n_d=8", "nvs_d=8", "global_batch=64",
             "precision=fp8"]
    assert evaluate.main(point) == 0
    base = capsys.readouterr().out
    assert evaluate.main(point + ["system.compute_eff=0.5"]) == 0
    mine = capsys.readouterr().out
    assert "efficiencies from calibration corpus2026 but compute_eff=0.5 as set" in mine
    assert "as set" not in base

    def seconds(text, label):
        return float(next(ln for ln in text.splitlines() if ln.startswith(label)).split()[-2])

    # matmuls at 0.5 of the peak instead of the calibrated 0.82: the compute term grows by at most their
    # ratio (attention and the other kernels keep their own rates), the memory not at all
    ratio = seconds(mine, "compute") / seconds(base, "compute")
    cal = load_calibration("corpus2026").groups["hopper/megatron"]["compute_eff"]
    assert 1.2 < ratio <= cal / 0.5 + 1e-9
    assert seconds(mine, "total") == seconds(base, "total")  # the memory table's total, GB: unchanged


def test_held_out_errors_by_generation_and_framework_each_kind_apart():
    """`by_axis` groups the held-out errors by generation and by framework within each kind; the
    values here by hand: |1.10/1 - 1| = 10%, |0.80/1 - 1| = 20%, and so on."""
    import numpy as np

    from dse.truth.calibrate import by_axis

    keys = ["hopper/fp8/megatron", "hopper/bf16/fsdp2", "ampere/bf16/megatron", "hopper/fp8/megatron/moe",
            "blackwell/fp8/megatron"]
    out = by_axis(keys, np.array([1.1, 0.8, 1.0, 2.0, 1.06]), np.ones(5))
    dense, moe = out["dense"], out["MoE"]
    assert dense["generation"]["hopper"] == pytest.approx({"mean": 0.15, "max": 0.2, "runs": 2})
    assert dense["generation"]["ampere"] == pytest.approx({"mean": 0.0, "max": 0.0, "runs": 1})
    assert dense["framework"]["megatron"] == pytest.approx({"mean": 0.16 / 3, "max": 0.1, "runs": 3})
    assert dense["framework"]["fsdp2"] == pytest.approx({"mean": 0.2, "max": 0.2, "runs": 1})
    assert moe == {"generation": {"hopper": pytest.approx({"mean": 1.0, "max": 1.0, "runs": 1})},
                   "framework": {"megatron": pytest.approx({"mean": 1.0, "max": 1.0, "runs": 1})}}
    assert list(dense["generation"]) == ["ampere", "blackwell", "hopper"]  # sorted, every generation once


@pytest.mark.parametrize("parts", [("hopper", "fp8", "megatron", False), ("blackwell", "mxfp8", "fsdp2", True)])
def test_a_band_key_reads_back_as_its_parts(parts):
    from dse.truth.calibration import band_parts

    assert band_parts(band_key(*parts)) == parts
