"""The rules every spec field obeys: the config tree's location, the engine's bounds (GPUs, batch,
kept rows, GPU counts), the physical ranges of hardware fields, and building a spec dataclass from a
mapping with each field checked in one line (`spec_from_mapping`, `_validate`). `dse.spec.specs`
declares the specs with these rules (its names re-exported there).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import field
from pathlib import Path
from typing import Any, Mapping

from dse.spec.checks import INT_MAX, SpecError, _in_range, check_float, check_int


def _conf_dir() -> Path:
    """The config tree: the installed package `dse.conf`, or `conf/` beside `dse/` in a checkout."""
    try:
        import dse.conf

        return Path(dse.conf.__file__).resolve().parent
    except ImportError:
        return Path(__file__).resolve().parents[2] / "conf"


CONF_DIR = _conf_dir()


#: GPUs in one job and in one NVS domain, at most (16,777,216).
MAX_GPUS = 1 << 24
#: Samples in one global batch, at most (its divisors are enumerated).
MAX_BATCH = 1 << 32
#: Configurations kept per group of a search, at most.
MAX_TOP_K = 100_000
#: GPU counts in one job, at most (each is a group of the search).
MAX_GPU_COUNTS = 4096

# Field rules: (kind, low, high). "int": integer in [low, min(high, INT_MAX)]; "pos": float > 0;
# "frac": float in (0, 1]; "nonneg": float >= 0; "phys": float in [low, high], a physical range.
_POS, _FRAC, _NONNEG = ("pos", 0.0, math.inf), ("frac", 0.0, 1.0), ("nonneg", 0.0, math.inf)

#: Physical ranges of the hardware fields (`SystemSpec`), wide enough for any GPU, past or
#: planned, and narrow enough that no time or memory under- or overflows float64: rates in
#: TFLOP/s and GB/s from 1e-3 (1 GFLOP/s, 1 MB/s) to 1e6 (1 EFLOP/s, 1 PB/s) per GPU, HBM from
#: 1e-3 to 1e6 GB, latencies from 0 to 1 s, element sizes from 0.1 to 64 bytes (in GB).
_RATE, _LATENCY, _ELEMENT = ("phys", 1e-3, 1e6), ("phys", 0.0, 1.0), ("phys", 1e-10, 6.4e-8)


def _rule(kind, low=0.0, high=math.inf):
    return field(metadata={"rule": (kind, low, high)})


def _validate(section: str, obj) -> None:
    for f in dataclasses.fields(obj):
        rule = f.metadata.get("rule")
        if rule is None:
            continue
        kind, low, high = rule
        value = getattr(obj, f.name)
        if value is None and f.default is None:
            continue
        where = f"{section}.{f.name}"
        if kind == "int":
            object.__setattr__(obj, f.name, check_int(where, value, int(low), int(min(high, INT_MAX))))
            continue
        low_open = kind not in ("phys", "nonneg")  # physical ranges and >= 0 are closed below
        low = 0.0 if kind == "nonneg" else low
        if type(value) is float and math.isfinite(value) and _in_range(value, low, high, low_open):
            continue  # already a float in range (a preset's, a grid point's): check_float would change nothing
        object.__setattr__(obj, f.name, check_float(where, value, low, high, low_open))


def spec_from_mapping(cls, section: str, data: Mapping[str, Any], noun: str | None = None):
    """Build the spec dataclass `cls` from a mapping; an unknown or missing field is a one-line
    SpecError naming `section.field` and the valid (or needed) fields, in declaration order."""
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    unknown = sorted(set(data) - set(names), key=str)  # a YAML key may be a number
    if unknown:
        raise SpecError(f"{section}.{unknown[0]}: unknown field; valid fields: {', '.join(names)}")
    missing = [f.name for f in fields if f.name not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise SpecError(f"{section}.{missing[0]}: missing; {noun or 'a ' + section} needs {', '.join(missing)}")
    return cls(**dict(data))
