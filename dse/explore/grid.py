"""The hardware axis of a search: systems, and grids of their fields (`search.grid`)."""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from dse.spec.checks import check_unique
from dse.spec.specs import SpecError, SystemSpec, check_int, load_system

MAX_GRID_POINTS = 100_000  # hardware points of one search (systems x grid), and points of one grid axis



def _axis_values(where: str, spec: Any) -> list[float]:
    """Values of one grid field: a list, 'linspace:A:B:N', 'geomspace:A:B:N' or 'path:V1,...,Vk:N'
    (N points piecewise-linear through the anchors V1..Vk, evenly spaced in anchor index)."""
    if isinstance(spec, str):
        kind, _, rest = spec.partition(":")
        try:
            if kind in ("linspace", "geomspace"):
                a, b, n = rest.split(":")
                n = check_int(f"{where} points", int(n), 1, MAX_GRID_POINTS)
                fn = np.linspace if kind == "linspace" else np.geomspace
                return [float(v) for v in fn(float(a), float(b), n)]
            if kind == "path":
                anchors, n = rest.rsplit(":", 1)
                vals = [float(v) for v in anchors.split(",")]
                n = check_int(f"{where} points", int(n), 1, MAX_GRID_POINTS)
                t = np.linspace(0.0, len(vals) - 1.0, n)
                return [float(v) for v in np.interp(t, np.arange(len(vals)), vals)]
        except SpecError:
            raise
        except ValueError:
            pass
        raise SpecError(f"{where} = {spec!r}: expected a list, 'linspace:A:B:N', 'geomspace:A:B:N' or 'path:V1,...,Vk:N'")
    try:
        vals = [float(v) for v in spec]
    except (TypeError, ValueError):
        raise SpecError(f"{where} = {spec!r}: expected a list of numbers") from None
    if not vals:
        raise SpecError(f"{where} = []: give at least one value")
    return vals


def grid_axes(grid: Mapping[str, Any] | None) -> list[tuple[tuple[str, ...], list[tuple[float, ...]]]]:
    """Parse a hardware grid into axes. Each axis is (fields, points): a plain entry
    `field: values` is a one-field axis; `name: {field: values, field2: values}` is a zipped axis
    whose fields move together (equal lengths). The grid is the product of its axes."""
    fields = [f for f in SystemSpec.__dataclass_fields__ if f not in ("name", "generation")]
    axes = []
    for key, spec in (grid or {}).items():
        if isinstance(spec, Mapping):
            names = tuple(spec)
            cols = [_axis_values(f"grid.{key}.{f}", spec[f]) for f in names]
            if len({len(c) for c in cols}) != 1:
                raise SpecError(f"grid.{key}: the fields of a zipped axis need equal lengths, got "
                                + ", ".join(f"{f}={len(c)}" for f, c in zip(names, cols)))
            points = list(zip(*cols))
        else:
            names = (key,)
            points = [(v,) for v in _axis_values(f"grid.{key}", spec)]
        repeated = next((p for i, p in enumerate(points) if p in points[:i]), None)
        if repeated is not None:  # it would be searched, and its rows ranked, twice
            shown = repeated[0] if len(repeated) == 1 else dict(zip(names, repeated))
            raise SpecError(f"grid.{key}: {shown} is given twice; give each point once")
        for f in names:
            if f == "nvs_size":
                raise SpecError("grid.nvs_size: the NVS size changes the candidates; give system.nvs_size (nvs_size= in Python) a list instead")
            if f not in fields:
                raise SpecError(f"grid.{f}: not a system field; valid: {', '.join(fields)}")
        axes.append((names, points))
    seen = [f for names, _ in axes for f in names]
    dup = sorted({f for f in seen if seen.count(f) > 1})
    if dup:
        raise SpecError(f"grid.{dup[0]}: appears in more than one axis")
    return axes


def check_grid_fields(system: SystemSpec, grid: Mapping[str, Any] | None) -> None:
    """A grid replaces its fields' values on every system, so a field the question also sets apart
    from its system preset (`system.hbm_capacity=50` beside `search.grid.hbm_capacity=[96]`) would
    be dropped in silence: one SpecError line instead. A system that is no preset has no values to
    tell apart and passes."""
    from dse.spec.specs import preset_names, read_preset

    if not grid or system.name not in preset_names("system"):
        return
    preset = load_system(dict(read_preset("system", system.name)))
    for names, _ in grid_axes(grid):
        for f in names:
            mine, theirs = getattr(system, f), getattr(preset, f)
            if mine != theirs:
                raise SpecError(f"search.grid.{f}: the grid replaces system.{f} = {mine:g}, given apart from the "
                                f"preset's {theirs:g}; give its values in the grid or drop the grid's {f}")


def system_grid(
    system: str | Mapping | SystemSpec | Sequence,
    grid: Mapping[str, Any] | None = None,
) -> tuple[list[SystemSpec], pl.DataFrame]:
    """The hardware axis: base systems crossed with a grid of field overrides (`grid_axes`).

    Returns the validated specs and a table with one row per system (`system_id`, `system`, and
    one column per grid field).
    """
    bases = list(system) if isinstance(system, (list, tuple)) else [system]
    if not bases:
        raise SpecError("system = []: give at least one system")
    specs = [load_system(s) for s in bases]
    check_unique("system", [s.name for s in specs], "system")  # one system twice: its rows twice
    axes = grid_axes(grid)
    total = len(specs) * math.prod(len(points) for _, points in axes)
    if total > MAX_GRID_POINTS:
        raise SpecError(f"search.grid: {total:,} hardware points (systems x grid); at most {MAX_GRID_POINTS:,} in one search")
    keys = [f for names, _ in axes for f in names]
    out, rows = [], []
    for base in specs:
        for combo in itertools.product(*(points for _, points in axes)):
            values = [v for point in combo for v in point]
            change = dict(zip(keys, values))
            spec = base.replace(**change) if change else base
            rows.append({"system_id": len(out), "system": base.name, **change})
            out.append(spec)
    return out, pl.DataFrame(rows)
