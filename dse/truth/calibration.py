"""Calibrations: fitted efficiencies that a profile applies to every system.

A calibration (`conf/calibration/NAME.yaml`, written by `dse calibrate`, see `dse.truth.calibrate`) holds
values of `FIELDS` with the errors that validated them and their provenance; the default profile
names one (`profile.calibration`) and `apply_calibration` puts its values into each system before
the kernels run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dse.spec.specs import CONF_DIR, SpecError, SystemSpec

#: The fitted fields and their physical ranges (lo, hi).
FIELDS: dict[str, tuple[float, float]] = {
    "compute_eff": (0.3, 1.0),
    "matmul_knee": (0.0, 32.0),  # in machine balances (kernels.roofline.gemm_knee)
    "hbm_eff": (0.3, 1.0),
}

CALIBRATION_DIR = CONF_DIR / "calibration"
NONE = "none"


@dataclass(frozen=True)
class Calibration:
    """Fitted efficiencies with the errors that validated them."""

    name: str
    values: dict[str, float]
    in_sample: dict[str, float]  # mean and max |error| of the fit on every run
    leave_one_model_out: dict[str, float]  # mean and max |error| of the held-out predictions
    provenance: dict[str, Any]

    def band(self) -> str:
        """The error band a prediction of this calibration carries, in words."""
        lomo = self.leave_one_model_out
        return (f"±{100 * lomo['mean']:.1f}% typical, ±{100 * lomo['max']:.1f}% worst "
                f"(leave-one-model-out on {self.provenance.get('runs', '?')} measured runs, "
                f"{self.provenance.get('gpus', '?')})")


def calibration_names() -> list[str]:
    return sorted(p.stem for p in CALIBRATION_DIR.glob("*.yaml"))


def load_calibration(name: str) -> Calibration | None:
    """The calibration `name` (a file of conf/calibration/), or None for 'none'."""
    if name in (None, NONE, ""):
        return None
    if not isinstance(name, str) or not name.isidentifier():
        raise SpecError(f"profile.calibration = {name!r}: must be a calibration name "
                        f"({', '.join(calibration_names()) or 'none shipped'}) or 'none'")
    path = CALIBRATION_DIR / f"{name}.yaml"
    if not path.is_file():
        raise SpecError(f"profile.calibration = {name!r}: no such calibration; valid: "
                        f"{', '.join(calibration_names() + [NONE])}")
    import yaml  # here: only a calibrated profile reads YAML (imported when first needed)

    data = yaml.safe_load(path.read_text())
    return Calibration(name=name, values={k: float(v) for k, v in data["values"].items()},
                       in_sample=data["in_sample"], leave_one_model_out=data["leave_one_model_out"],
                       provenance=data.get("provenance", {}))


def apply_calibration(system: SystemSpec, calibration: Calibration | None) -> SystemSpec:
    """`system` with the calibrated efficiencies (unchanged without a calibration)."""
    if calibration is None:
        return system
    return system.replace(**calibration.values)


#: The error band a prediction carries: the leave-one-model-out mean and max |error| of the
#: calibration behind it (fractions; null without a calibration).
BAND_COLUMNS = ("error_band", "error_band_max")


def with_error_band(frame, calibration: Calibration | None):
    """`frame` (Polars) with the `BAND_COLUMNS` of `calibration`."""
    import polars as pl

    lomo = calibration.leave_one_model_out if calibration is not None else {}
    return frame.with_columns(pl.lit(lomo.get("mean"), dtype=pl.Float64).alias("error_band"),
                              pl.lit(lomo.get("max"), dtype=pl.Float64).alias("error_band_max"))


def profile_calibration(profile, swept: tuple[str, ...] = ()) -> Calibration | None:
    """The calibration a profile applies (None for none, or a profile without one). A field the
    user sweeps or sets that the calibration would replace is an error, never silently dropped."""
    cal = load_calibration(getattr(profile, "calibration", NONE))
    if cal is not None:
        clash = [f for f in swept if f in cal.values]
        if clash:
            raise SpecError(f"search.grid.{clash[0]}: set by the profile's calibration {cal.name!r}; "
                            "add profile.calibration=none to sweep it yourself")
    return cal


