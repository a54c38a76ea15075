"""`dse search`'s best line carries the error band of its best row, as `dse`'s does: the calibrated
band of its system's generation and its precision, that nothing validates that regime, or nothing
without a calibration (`dse.interface.answer.band_note`)."""

from __future__ import annotations

import re

import pytest

from dse.cli import main
from dse.truth.calibration import load_calibration

#: A small question: Megatron 22B (Korthikanti et al. 2022 Table 5) on 64 GPUs, tp1d, the fastest row.
QUESTION = ["model=megatron_22b", "n_gpus=64", "strategy=tp1d", "search.top_k=1"]

#: A calibration of one's own as `dse calibrate --out` writes it, fitted on Hopper only (no groups):
#: its leave-one-model-out errors are the band of a dense Hopper answer, and nothing else is validated.
HOPPER_ONLY = """\
values: {compute_eff: 0.8, matmul_knee: 6.0, hbm_eff: 0.8}
in_sample: {mean: 0.031, max: 0.062}
leave_one_model_out: {mean: 0.0437, max: 0.0981}
provenance: {data: mine.csv, runs: 6, gpus: dgx_h100, generations: [hopper], frameworks: [megatron], kinds: [dense]}
"""


def best(capsys, *overrides: str) -> str:
    """The best line of `dse search` on `QUESTION` with `overrides` (the line, not its reproduce line)."""
    assert main(["search", *QUESTION, *overrides]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("best: ")]
    assert len(lines) == 1
    return lines[0]


def calibrated(mean: float, worst: float) -> str:
    return f" (calibrated: ±{100 * mean:.1f}% typical, ±{100 * worst:.1f}% worst on measured runs)"


def test_a_validated_regime_prints_its_band(capsys):
    """A100 in BF16 under Megatron is validated by the default calibration (corpus2026): the line
    ends with that regime's leave-one-source-out band, after the configuration's time and rate."""
    line = best(capsys, "system=dgx_a100_80gb")
    band = load_calibration("corpus2026").band_for("ampere", "bf16")
    assert band is not None
    assert re.search(r"on 64 GPUs of dgx_a100_80gb \(NVS 8\): [\d.]+ s per iteration, [\d.]+ samples/s \(", line)
    assert line.endswith(calibrated(band["mean"], band["max"]))
    assert "precision=bf16" in line


def test_an_unvalidated_regime_says_so(capsys):
    """H100 in BF16 under Megatron has no dense measured run in the default calibration: the line
    says so rather than printing a band."""
    line = best(capsys, "system=dgx_h100")
    assert load_calibration("corpus2026").band_for("hopper", "bf16") is None
    assert line.endswith(" (not validated on hopper/bf16/megatron: no error band)")
    assert "calibrated:" not in line


def test_the_band_is_the_best_rows_system(capsys):
    """Several systems searched as one axis: the band is that of the system the best row runs on
    (the H100, faster than the A100 and not validated), not the first system's (validated)."""
    line = best(capsys, "system=dgx_a100_80gb,dgx_h100", "system.nvs_size=8")
    assert " GPUs of dgx_h100 " in line
    assert line.endswith(" (not validated on hopper/bf16/megatron: no error band)")


def test_a_precision_of_its_own_band(capsys):
    """FP8 on an H100 is validated where BF16 is not: the band follows the best row's precision."""
    line = best(capsys, "system=dgx_h100", "profile.precision=fp8")
    band = load_calibration("corpus2026").band_for("hopper", "fp8")
    assert "precision=fp8" in line and band is not None
    assert line.endswith(calibrated(band["mean"], band["max"]))


def test_without_a_calibration_no_band(capsys):
    """profile.calibration=none: no calibration, so neither a band nor "not validated"; the line ends
    with the configuration's rate, as before bands were printed."""
    line = best(capsys, "system=dgx_a100_80gb", "profile.calibration=none")
    assert "calibrated" not in line and "validated" not in line
    assert re.search(r"s per iteration, [\d.]+ samples/s$", line)


@pytest.mark.parametrize("system, note", [
    ("dgx_h100", calibrated(0.0437, 0.0981)),
    ("dgx_b200", " (not validated on blackwell/bf16/megatron: no error band)"),
], ids=["hopper", "blackwell"])
def test_a_calibration_of_ones_own(tmp_path, capsys, system, note):
    """A user's calibration file (`profile.calibration=FILE.yaml`) fitted on Hopper only: a Hopper
    answer carries the file's leave-one-model-out band, a Blackwell answer says it is not validated."""
    path = tmp_path / "mine.yaml"
    path.write_text(HOPPER_ONLY)
    line = best(capsys, f"system={system}", f"profile.calibration={path}")
    assert line.endswith(note)


@pytest.mark.parametrize("system", ["dgx_a100_80gb", "dgx_h100"], ids=["validated", "not-validated"])
def test_the_same_band_as_dse(tmp_path, capsys, system):
    """`dse` and `dse search` answer the same question with the same best configuration and the same
    band text (README: every answer prints its band)."""
    from dse.interface.app import run_job
    from dse.interface.overrides import compose

    said: list[str] = []
    run_job(compose([*QUESTION, f"system={system}", f"output.root={tmp_path}", "output.write=false",
                     "search.progress=false", "output.show=0"]), echo=said.append)
    answer = next(ln for ln in "\n".join(said).splitlines() if ln.startswith("best: "))
    line = best(capsys, f"system={system}")
    band = re.search(r" \((calibrated: [^)]*|not validated [^)]*)\)", line)
    assert band and band.group(0) in answer
    assert line.split(" on 64 GPUs")[0] == answer.split(" on 64 GPUs")[0]  # the same configuration
