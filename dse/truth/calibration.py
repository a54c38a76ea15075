"""Calibrations: fitted efficiencies that a profile applies to every system.

A calibration (`conf/calibration/NAME.yaml`, written by `dse calibrate`, see `dse.truth.calibrate`) holds
values of `FIELDS` with the errors that validated them and their provenance; the default profile
names one (`profile.calibration`) and `apply_calibration` puts its values into each system before
the kernels run.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from functools import lru_cache
import math
from pathlib import Path
from typing import Any, Mapping

from dse.spec.checks import check_finite
from dse.spec.specs import CONF_DIR, GENERATIONS, SpecError, SystemSpec

#: The fitted fields and their physical ranges (lo, hi).
FIELDS: dict[str, tuple[float, float]] = {
    "compute_eff": (0.3, 1.0),
    "matmul_knee": (0.0, 32.0),  # in machine balances (kernels.roofline.gemm_knee)
    "hbm_eff": (0.3, 1.0),
    "fp8_eff": (0.3, 1.0),  # FP8 matmuls relative to BF16's efficiency (kernels.roofline.fp8_speedup)
    "fp4_eff": (0.2, 1.0),  # NVFP4 matmuls relative to BF16's efficiency (the same)
    "fp8_rowwise_eff": (0.3, 1.0),  # FP8 matmuls scaled per row relative to fp8_eff (`Profile.fp8_rowwise`)
    "host_moe_time": (0.0, 0.03),  # s to issue a dropless MoE block, forward + backward (kernels.stage.host_wait)
}

CALIBRATION_DIR = CONF_DIR / "calibration"
NONE = "none"


def group_key(generation: str, framework: str) -> str:
    """The key of a calibration group: "hopper/megatron"."""
    return f"{generation}/{framework}"


def band_key(generation: str, precision: str, framework: str, moe: bool = False) -> str:
    """The key of an error band: "hopper/fp8/megatron", and "hopper/fp8/megatron/moe" for the
    mixture-of-experts runs of the same generation, precision and framework (their errors are
    not the dense runs', and an MoE answer carries its own)."""
    return f"{generation}/{precision}/{framework}" + ("/moe" if moe else "")


def band_parts(key: str) -> tuple[str, str, str, bool]:
    """(generation, precision, framework, moe) of a band key (`band_key`'s inverse)."""
    generation, precision, framework, *rest = key.split("/")
    return generation, precision, framework, rest == ["moe"]


def kind(moe: bool) -> str:
    """How a band names the model kind: "MoE" or "dense"."""
    return "MoE" if moe else "dense"


@dataclass(frozen=True)
class Calibration:
    """Fitted efficiencies with the errors that validated them.

    `values` are the pooled fit (every run); `groups` the values of each GPU generation and
    framework ("hopper/megatron"), fitted together as effects on the pooled values; `bands` the
    leave-one-source-out errors of the runs of each generation, precision and framework
    ("hopper/fp8/megatron": mean, max, runs, sources, and which held-out error, `kind`). A
    calibration without groups (one fit of one generation) applies its `values` everywhere; its band
    is the band of the answer's generation, precision and framework where it has one, none elsewhere
    (a file without bands, written before they were: its leave-one-model-out errors, for the
    generations, frameworks and kinds of model it was fitted on).
    `framework` is the framework of the profile that applies it (`profile_calibration`)."""

    name: str
    values: dict[str, float]
    in_sample: dict[str, float]  # mean and max |error| of the fit on every run
    leave_one_model_out: dict[str, float]  # mean and max |error| of the held-out predictions
    provenance: dict[str, Any]
    groups: dict[str, dict[str, float]] = field(default_factory=dict)
    bands: dict[str, dict[str, Any]] = field(default_factory=dict)
    leave_one_source_out: dict[str, float] = field(default_factory=dict)
    framework: str = "megatron"

    def group_for(self, generation: str) -> tuple[str, str] | None:
        """(the generation whose group applies, its key) for a system of `generation` under this
        calibration's framework: the generation's own group, else its nearest predecessor's (a
        new generation is predicted from its predecessor's calibration); None without one."""
        if generation in GENERATIONS:
            for g in reversed(GENERATIONS[:GENERATIONS.index(generation) + 1]):
                key = group_key(g, self.framework)
                if key in self.groups:
                    return g, key
        return None

    def values_for(self, generation: str) -> dict[str, float]:
        """The fitted values a system of `generation` takes (the pooled values without a group)."""
        found = self.group_for(generation)
        return dict(self.groups[found[1]]) if found else dict(self.values)

    def band_for(self, generation: str, precision: str, moe: bool = False) -> dict[str, Any] | None:
        """The error band of a prediction for a system of `generation` at `precision` under this
        calibration's framework, of a dense model or a mixture of experts (`moe`): the
        leave-one-source-out mean and max |error| of its measured runs of that kind; None where no
        such run validated it. A calibration without groups: its leave-one-model-out band, for the
        generations it was fitted on and the kinds of model it was fitted on (dense without a record)."""
        if not self.groups and not self.bands:  # a file written before bands were: its runs' kinds
            fitted = self.provenance.get("generations") or []
            if fitted and generation not in fitted:
                return None
            if self.framework not in (self.provenance.get("frameworks") or [self.framework]):
                return None
            if kind(moe) not in (self.provenance.get("kinds") or ["dense"]):
                return None
            return {**self.leave_one_model_out, "runs": self.provenance.get("runs"), "kind": "leave-one-model-out"}
        band = self.bands.get(band_key(generation, precision, self.framework, moe))
        return None if band is None else {"kind": "leave-one-source-out", **band}

    def band_text(self, generation: str, precision: str, moe: bool = False) -> str:
        """The band in words: "±x% typical, ±y% worst (...)" or "not validated on g/p/framework"
        (with " MoE" for a mixture of experts)."""
        band = self.band_for(generation, precision, moe)
        where = f"{generation or 'this GPU'}/{precision}/{self.framework}" + (" MoE" if moe else "")
        if band is None:
            return f"not validated on {where}"
        return (f"±{100 * band['mean']:.1f}% typical, ±{100 * band['max']:.1f}% worst ({band['kind']} on "
                f"{band.get('runs', '?')} measured runs, {where})")

    def band(self) -> str:
        """The error band of the calibration as a whole, in words."""
        if self.groups:
            loso = self.leave_one_source_out
            return (f"±{100 * loso['mean']:.1f}% typical, ±{100 * loso['max']:.1f}% worst (leave-one-source-out on "
                    f"{self.provenance.get('runs', '?')} measured runs; per generation, precision and framework: "
                    f"dse calibrate --show {self.name})")
        lomo = self.leave_one_model_out
        return (f"±{100 * lomo['mean']:.1f}% typical, ±{100 * lomo['max']:.1f}% worst "
                f"(leave-one-model-out on {self.provenance.get('runs', '?')} measured runs, "
                f"{self.provenance.get('gpus', '?')})")


def calibration_names() -> list[str]:
    return sorted(p.stem for p in CALIBRATION_DIR.glob("*.yaml"))


def load_calibration(name: str) -> Calibration | None:
    """The calibration `name`: a file of conf/calibration/, or a path to a calibration file of
    one's own (ending in .yaml, as `dse calibrate --out` writes it); None for 'none'."""
    if name in (None, NONE, ""):
        return None
    import yaml  # here: only a calibrated profile reads YAML (imported when first needed)

    given = name
    if isinstance(name, str) and name.endswith((".yaml", ".yml")):
        path = Path(name).expanduser()
        if not path.is_file():
            raise SpecError(f"profile.calibration = {name!r}: no such file")
        name = path.stem
    else:
        if not isinstance(name, str) or not name.isidentifier():
            raise SpecError(f"profile.calibration = {name!r}: must be a calibration name "
                            f"({', '.join(calibration_names()) or 'none shipped'}), a file FILE.yaml or 'none'")
        path = CALIBRATION_DIR / f"{name}.yaml"
        if not path.is_file():
            raise SpecError(f"profile.calibration = {name!r}: no such calibration; valid: "
                            f"{', '.join(calibration_names() + [NONE])} or a file FILE.yaml")
    try:
        st = path.stat()
        data = copy.deepcopy(_parsed(str(path), st.st_mtime_ns, st.st_size))  # the Calibration may be changed
        return read_calibration(name, data)
    except (yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SpecError(f"profile.calibration = {given!r}: {path} is not a calibration "
                        f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


@lru_cache(maxsize=32)
def _parsed(path: str, mtime_ns: int, size: int):
    """A calibration file's YAML, parsed once while the file is unchanged (its modification time
    and size in the key): every search reads its profile's calibration, and parsing it took about a
    tenth of a small search's planning."""
    import yaml

    return yaml.safe_load(Path(path).read_text())


def read_calibration(name: str, data: dict) -> Calibration:
    """A `Calibration` from the mapping `write_calibration` writes; every value finite and in its
    field's range."""
    def checked(values: dict, where: str) -> dict[str, float]:
        out = {}
        for k, v in values.items():
            if k not in FIELDS:
                raise ValueError(f"{where}.{k}: not a calibrated field ({', '.join(FIELDS)})")
            x = float(v)
            lo, hi = FIELDS[k]
            if not (math.isfinite(x) and lo <= x <= hi):
                raise ValueError(f"{where}.{k} = {v!r}: must be a number in [{lo}, {hi}]")
            out[k] = x
        return out

    def error(value: Any, where: str, required: bool = True) -> dict[str, Any]:
        """An error record: a mapping with mean and max, fractions in [0, 100] (the band answers print)."""
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            raise ValueError(f"{where}: must be a mapping with mean and max (fractions of the measured time)")
        for k in ("mean", "max"):
            x = value.get(k)
            if not isinstance(x, (int, float)) or isinstance(x, bool) or not (0.0 <= x <= 100.0):
                raise ValueError(f"{where}.{k} = {x!r}: must be a number in [0, 100] (a fraction of the measured time)")
        return dict(value)

    if not isinstance(data, dict):
        raise ValueError("not a mapping of values, in_sample, leave_one_model_out, ... (as dse calibrate writes)")
    check_finite("", data)  # the errors and bands too: NaN or inf anywhere is no calibration
    missing = [k for k in ("values", "in_sample", "leave_one_model_out") if k not in data]
    if missing:
        raise ValueError(f"{missing[0]}: missing (a calibration holds values, in_sample and leave_one_model_out)")
    if not isinstance(data["values"], dict) or not data["values"]:
        raise ValueError("values: empty; a calibration holds at least one fitted field "
                         f"({', '.join(FIELDS)})")
    return Calibration(
        name=name, values=checked(data["values"], "values"), in_sample=error(data["in_sample"], "in_sample"),
        leave_one_model_out=error(data["leave_one_model_out"], "leave_one_model_out"),
        provenance=data.get("provenance") or {},
        groups={k: checked(v, f"groups.{k}") for k, v in (data.get("groups") or {}).items()},
        bands={k: error(v, f"bands.{k}") for k, v in (data.get("bands") or {}).items()},
        leave_one_source_out=error(data.get("leave_one_source_out"), "leave_one_source_out", required=False))


def user_fields(system: SystemSpec) -> tuple[str, ...]:
    """The calibrated fields (`FIELDS`) a system preset's user set apart from the preset
    (`system.compute_eff=0.5`): those whose value differs from the preset's. () for a system
    that is no preset (its file's values are its own efficiencies, which a calibration replaces)."""
    from dse.spec import specs

    return _user_fields(str(specs.CONF_DIR), system.name, tuple(getattr(system, k) for k in FIELDS))


@lru_cache(maxsize=4096)
def _user_fields(conf_dir: str, name: str, values: tuple) -> tuple[str, ...]:
    """`user_fields` of a system named `name` whose `FIELDS` hold `values`, once per distinct
    system: a hardware grid of 80,000 points shares a handful (the preset directory is listed
    and the preset read once, not per point)."""
    from dse.spec.specs import load_system, system_presets

    if name not in system_presets():
        return ()
    preset = load_system(name)
    return tuple(k for k, v in zip(FIELDS, values) if v != getattr(preset, k))


def apply_calibration(system: SystemSpec, calibration: Calibration | None) -> SystemSpec:
    """`system` with the calibrated efficiencies of its generation and the calibration's framework
    (`Calibration.values_for`; unchanged without a calibration), except the fields its user set
    (`user_fields`): a value asked for is the value answered for."""
    if calibration is None:
        return system
    keep = set(user_fields(system))
    return system.replace(**{k: v for k, v in calibration.values_for(system.generation).items() if k not in keep})


#: The error band a prediction carries: the mean and max |error| of the held-out predictions of
#: the measured runs of its generation, precision and framework (fractions; null where none
#: validated it, or without a calibration).
BAND_COLUMNS = ("error_band", "error_band_max")


def with_error_band(frame, calibration: Calibration | None, generation: str | Mapping[str, str] = "",
                    moe: bool = False):
    """`frame` (Polars) with the `BAND_COLUMNS` of `calibration`: per row by its system's
    generation (`generation`: one for every row, or system name -> generation, read from the
    `system` column: a search over several presets) and its `precision` column (codes of
    `kernels.params.PRECISIONS`; bf16 without one), the bands of a mixture of experts where `moe`."""
    import polars as pl

    from kernels.params import PRECISIONS

    if calibration is None:
        return frame.with_columns(pl.lit(None, dtype=pl.Float64).alias("error_band"),
                                  pl.lit(None, dtype=pl.Float64).alias("error_band_max"))
    by_system = isinstance(generation, Mapping) and "system" in frame.columns
    gens = generation if by_system else {None: generation if isinstance(generation, str) else ""}
    has_precision = "precision" in frame.columns
    mean, worst = pl.lit(None, dtype=pl.Float64), pl.lit(None, dtype=pl.Float64)
    for system, gen in gens.items():
        for code, name in enumerate(PRECISIONS if has_precision else PRECISIONS[:1]):
            band = calibration.band_for(gen, name, moe)
            if band is None:
                continue
            cond = pl.lit(True)
            if by_system:
                cond = cond & (pl.col("system") == system)
            if has_precision:
                cond = cond & (pl.col("precision") == code)
            mean = pl.when(cond).then(pl.lit(float(band["mean"]))).otherwise(mean)
            worst = pl.when(cond).then(pl.lit(float(band["max"]))).otherwise(worst)
    return frame.with_columns(mean.cast(pl.Float64).alias("error_band"), worst.cast(pl.Float64).alias("error_band_max"))


def profile_calibration(profile, swept: tuple[str, ...] = ()) -> Calibration | None:
    """The calibration a profile applies, bound to the profile's framework (None for none, or a
    profile without one). A field the user sweeps or sets that the calibration would replace is an
    error, never silently dropped."""
    cal = load_calibration(getattr(profile, "calibration", NONE))
    if cal is not None:
        cal = replace(cal, framework=getattr(profile, "framework", "megatron"))
        fitted = set(cal.values).union(*(set(v) for v in cal.groups.values()))
        clash = [f for f in swept if f in fitted]
        if clash:
            raise SpecError(f"search.grid.{clash[0]}: set by the profile's calibration {cal.name!r}; "
                            "add profile.calibration=none to sweep it yourself")
    return cal


