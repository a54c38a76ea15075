"""A figure of any study: columns of a dataset against each other (`dse plot`).

    from dse.results import io
    from dse.figures.study import plot
    plot(io.scan("outputs/data/default"), x="n_gpus", y="training_days", color="system",
         kind="line", out="outputs/figures/days.png", study="default")

Kinds (feasible rows only, unless `include_infeasible`):

    line       y of each x, one line per colour value; a point is the optimum's y (`agg=best`: the
               fastest feasible row of its x, colour and facet, `dse.explore.ranking`), or the min, max or
               mean of y over the rows of the point
    bar        the same points as grouped bars (x as categories)
    scatter    every row
    pareto     every row in grey and, per colour value, the Pareto front of x and y (both
               minimised; `max:col` maximises, `dse.pareto`) as a step line
    breakdown  the optimum of each x (default n_gpus) as stacked bars: the nine time components
               (y = iteration_time, the default) or the five memory components (y = memory)

`facet` draws one panel per value of a column. The categorical candidate columns are drawn by name
(recompute none/selective/full, precision bf16/fp8, seq_par false/true), from a dataset's names or
a search frame's codes alike (`dse.results.io.decode`). The title names the study and the values the
dataset sweeps (the columns that vary among model, system, strategy, NVS size, GPU count, network,
profile, global batch and the hardware grid fields). A bad column or kind is a one-line SpecError
naming it and what is valid.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from dse.figures.common import DPI
from dse.results import units
from dse.results.io import HARDWARE, atomic_path, decode
from dse.results.pareto import pareto, parse_objectives
from dse.explore.ranking import best_rows
from dse.spec.checks import check_output_file, did_you_mean
from dse.spec.specs import SpecError

KINDS = ("line", "scatter", "bar", "pareto", "breakdown")
AGGS = ("best", "min", "max", "mean")
FORMATS = ("png", "svg")
#: columns whose values a study sweeps (named in the title when they vary)
SWEPT = ("model", "system", "strategy", "nvs_size", "n_gpus", "network", "profile", "global_batch")

TIME_PARTS = (("t_compute", "compute", "#4c72b0"), ("t_memory", "exposed memory", "#8172b3"),
              ("t_tp_comm", "TP comm", "#dd8452"), ("t_ep_comm", "EP all-to-all", "#ccb974"),
              ("t_dp_comm", "DP comm", "#55a868"),
              ("t_pp_comm", "PP comm", "#937860"), ("t_bubble", "PP bubble", "#c44e52"),
              ("t_optimizer", "optimizer", "#da8bc3"), ("t_offload", "offload copies", "#8c8c8c"),
              ("t_host", "host issue", "#64b5cd"))
MEMORY_PARTS = (("mem_weights", "weights", "#4c72b0"), ("mem_grads", "gradients", "#55a868"),
                ("mem_optimizer", "optimizer states", "#dd8452"), ("mem_activations", "activations", "#c44e52"),
                ("mem_reserved", "framework reserve", "#8c8c8c"))


def _check_column(flag: str, name: str | None, columns: Sequence[str]) -> None:
    if name is not None and name not in columns:
        raise SpecError(f"{flag} {name}: not a column of the dataset; {did_you_mean(name, columns)}columns: "
                        f"{', '.join(columns)}")


def swept_values(frame: pl.DataFrame, limit: int = 6) -> list[str]:
    """'column=v1,v2' for each swept column with more than one value (ranges when many)."""
    grid = [h for h in HARDWARE if h != "nvs_size" and h in frame.columns]
    if grid and "system" in frame.columns:  # a hardware field is swept when it varies within a system
        per = frame.group_by("system").agg([pl.col(h).n_unique() for h in grid]).select(grid).max().row(0, named=True)
        grid = [h for h in grid if per[h] > 1]
    out = []
    for c in list(SWEPT) + grid:
        if c not in frame.columns:
            continue
        vals = frame[c].drop_nulls().unique().sort().to_list()
        if len(vals) <= 1 and c not in ("model", "system"):
            continue

        def fmt(v):
            return f"{v:g}" if isinstance(v, float) else str(v)

        text = ",".join(fmt(v) for v in vals) if len(vals) <= limit else \
            f"{fmt(vals[0])}…{fmt(vals[-1])} ({len(vals)} values)"
        out.append(f"{c}={text}")
    return out


def title_of(frame: pl.DataFrame, study: str, filters: Mapping[str, Any] | None = None, width: int = 90) -> str:
    """The study's name (and the filters), then its swept values, wrapped at `width` characters."""
    parts = swept_values(frame)
    where = " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                     for k, v in (filters or {}).items())
    head = f"study {study}" + (f" ({where})" if where else "")
    return "\n".join([head] + textwrap.wrap("; ".join(parts), width)) if parts else head


def _points(frame: pl.DataFrame, x: str, y: str, keys: list[str], agg: str) -> pl.DataFrame:
    """One row per (keys, x): the optimum's y, or an aggregate of y."""
    by = keys + [x]
    if agg == "best":
        return best_rows(frame, by).select(by + [y])
    fn = {"min": pl.col(y).min(), "max": pl.col(y).max(), "mean": pl.col(y).mean()}[agg]
    return frame.group_by(by).agg(fn).sort(by)


def _log_axis(values: np.ndarray) -> bool:
    """Powers of two spanning a factor 4 or more (GPU counts, sizes): a log2 axis."""
    v = values[np.isfinite(values)]
    if len(v) < 3 or (v <= 0).any():
        return False
    return bool(np.all(np.log2(v) == np.round(np.log2(v))) and v.max() / v.min() >= 4)


def _label(col: str) -> str:
    """An axis label: the column's name and its unit (`dse.results.units`)."""
    unit = units.unit(col)
    return col.replace("_", " ") + (f" ({unit})" if unit else "")


#: Line styles and markers of successive series, so that series that coincide stay visible.
STYLES = (("-", "o"), ("--", "s"), ("-.", "^"), (":", "D"), ((0, (5, 1)), "v"), ((0, (1, 1)), "x"))


def plot(lf: pl.LazyFrame | pl.DataFrame, *, x: str | None = None, y: str | None = None, color: str | None = None,
         facet: str | None = None, kind: str = "line", out: str | Path | None = None, study: str = "study",
         filters: Mapping[str, Any] | None = None, agg: str = "best", fmt: str | None = None,
         include_infeasible: bool = False, dpi: int = DPI) -> Path:
    """Draw one figure of a dataset (module docstring) and write it atomically; returns its path.
    `fmt` png or svg (None: from the suffix of `out`, else png); `out` None: outputs/figures/."""
    if kind not in KINDS:
        raise SpecError(f"--kind {kind}: unknown; valid: {', '.join(KINDS)}")
    if agg not in AGGS:
        raise SpecError(f"--agg {agg}: unknown; valid: {', '.join(AGGS)}")
    # the figure's folder, before any row is read: created when missing, as the writer would
    check_output_file("--out", Path(out) if out is not None else Path("outputs/figures") / f"{study}.png")
    frame = decode(lf.collect() if isinstance(lf, pl.LazyFrame) else lf)  # a search frame's codes by name
    columns = frame.columns
    numeric = [c for c, t in frame.schema.items() if t.is_numeric()]
    if kind == "breakdown":
        x = x or "n_gpus"
        y = y or "iteration_time"
        if y not in ("iteration_time", "memory"):
            raise SpecError(f"--y {y}: a breakdown splits iteration_time (its nine times) or memory (its five "
                            "parts); valid: iteration_time, memory")
    for flag, v in (("--x", x), ("--y", y)):
        if v is None:
            raise SpecError(f"{flag}: required for --kind {kind}; give a column, e.g. --x n_gpus --y training_days")
    x_col, y_col = x, y
    if kind == "pareto":
        objs = parse_objectives([x, y], columns, numeric)
        (x_col, x_max), (y_col, y_max) = objs
    for flag, v in (("--x", x_col), ("--y", y_col), ("--color", color), ("--facet", facet)):
        _check_column(flag, v, columns)
    if kind in ("line", "scatter", "pareto") or (kind == "bar" and agg != "best"):
        if y_col not in numeric:
            raise SpecError(f"--y {y_col}: not a numeric column; {did_you_mean(y_col, numeric)}numeric columns: "
                            f"{', '.join(numeric)}")
    if kind in ("scatter", "pareto") and x_col not in numeric:
        raise SpecError(f"--x {x_col}: not a numeric column; {did_you_mean(x_col, numeric)}numeric columns: "
                        f"{', '.join(numeric)}")
    if not include_infeasible and "feasible" in columns:
        frame = frame.filter(pl.col("feasible"))
    if frame.is_empty():
        where = " ".join(f"{k}={v}" for k, v in (filters or {}).items())
        raise SpecError(f"dataset of study {study!r} has no feasible rows" + (f" where {where}" if where else "")
                        + " to plot")
    fmt = (fmt or (Path(out).suffix.lstrip(".").lower() if out else "") or "png")
    if fmt not in FORMATS:
        raise SpecError(f"--format {fmt}: unknown; valid: {', '.join(FORMATS)}")
    if out is None:
        name = f"{study}_{kind}_{y_col}_vs_{x_col}" + (f"_by_{color}" if color else "") + (f"_per_{facet}" if facet else "")
        out = Path("outputs/figures") / f"{name}.{fmt}"
    out = Path(out)
    if out.suffix.lstrip(".").lower() != fmt:
        out = out.with_suffix(f".{fmt}")

    facets = frame[facet].unique().sort().to_list() if facet else [None]
    ncol = min(len(facets), 3)
    nrow = math.ceil(len(facets) / ncol)
    fig = Figure(figsize=(5.2 * ncol, 3.9 * nrow + 0.5), dpi=dpi, layout="constrained")
    axes = fig.subplots(nrow, ncol, squeeze=False).ravel()
    colors = frame[color].unique().sort().to_list() if color else [None]
    cmap = [f"C{i % 10}" for i in range(len(colors))]
    for ax, fv in zip(axes, facets):
        part = frame if facet is None else frame.filter(pl.col(facet) == fv)
        if kind == "breakdown":
            _breakdown(ax, part, x_col, y_col, [facet] if facet else [])
        else:
            for cv, c in zip(colors, cmap):
                sub = part if color is None else part.filter(pl.col(color) == cv)
                if sub.is_empty():
                    continue
                label = None if color is None else f"{color}={cv}"
                _draw(ax, kind, sub, x_col, y_col, c, label, agg, colors, cv, color,
                      objs if kind == "pareto" else None)
            if color is not None:
                ax.legend(fontsize=8)
        if facet is not None:
            ax.set_title(f"{facet}={fv}", fontsize=10)
        xs = part[x_col].to_numpy() if x_col in numeric else np.array([])
        if kind in ("line", "scatter", "pareto") and xs.size and _log_axis(xs.astype(float)):
            ax.set_xscale("log", base=2)
        ax.set_xlabel(_label(x_col) + (" (maximised)" if kind == "pareto" and x_max else ""))
        ax.set_ylabel(_label(y_col) + (" (maximised)" if kind == "pareto" and y_max else "")
                      if kind != "breakdown" else ("seconds per iteration" if y_col == "iteration_time" else "GB per GPU"))
        ax.grid(True, alpha=0.3)
    for ax in axes[len(facets):]:
        ax.set_visible(False)
    fig.suptitle(title_of(frame, study, filters, width=int(60 * ncol)), fontsize=10)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format=fmt)
    return out


def _draw(ax, kind, sub, x, y, c, label, agg, colors, cv, color, objs) -> None:
    if kind == "scatter":
        ax.scatter(sub[x].to_numpy(), sub[y].to_numpy(), s=10, color=c, label=label, alpha=0.7)
    elif kind == "pareto":
        ax.scatter(sub[x].to_numpy(), sub[y].to_numpy(), s=6, color="0.75", zorder=1)
        spec = [f"{'max:' if mx else ''}{col}" for col, mx in objs]
        front = pareto(sub, spec).sort(x)
        fx, fy = front[x].to_numpy(), front[y].to_numpy()
        ax.step(fx, fy, where="post", color=c, zorder=2)
        ax.scatter(fx, fy, s=22, color=c, label=(label or "Pareto front") + f" ({len(front)} rows)", zorder=3)
        if color is None:
            ax.legend(fontsize=8)
    else:
        pts = _points(sub, x, y, [], agg)
        if kind == "line":  # each series its own dash and marker, so coinciding ones stay visible
            i = colors.index(cv) if cv in colors else 0
            dash, marker = STYLES[i % len(STYLES)]
            ax.plot(pts[x].to_numpy(), pts[y].to_numpy(), linestyle=dash, marker=marker,
                    markersize=max(7 - i, 3), markerfacecolor="none" if i else c, color=c, label=label)
        else:  # bar: categories of x, one bar per colour value
            cats = [str(v) for v in pts[x].to_list()]
            k, i = len(colors), colors.index(cv)
            width = 0.8 / k
            pos = _bar_positions(ax, cats)
            ax.bar(pos + (i - (k - 1) / 2) * width, pts[y].to_numpy(), width=width, color=c, label=label)


def _bar_positions(ax, cats: list[str]) -> np.ndarray:
    """Positions of categories on a shared categorical x axis (kept on the axes between series)."""
    known = getattr(ax, "_dse_categories", [])
    for cat in cats:
        if cat not in known:
            known.append(cat)
    ax._dse_categories = known
    ax.set_xticks(range(len(known)), known, rotation=30 if len(known) > 6 else 0)
    return np.array([known.index(cat) for cat in cats], dtype=float)


def _breakdown(ax, part: pl.DataFrame, x: str, y: str, keys: list[str]) -> None:
    parts = TIME_PARTS if y == "iteration_time" else MEMORY_PARTS
    best = best_rows(part, keys + [x]).sort(x)
    # a part every bar lacks is left out of the stack and the legend (the all-to-alls of a dense
    # model; null in files of schema 8 and before, whose TP comm holds them)
    have = [p for p in parts if p[0] in best.columns and best[p[0]].fill_null(0.0).abs().sum() > 0.0]
    cats = [str(v) for v in best[x].to_list()]
    pos = np.arange(len(cats))
    bottom = np.zeros(len(cats))
    for col, name, c in have:
        v = best[col].fill_null(0.0).to_numpy().astype(float)
        ax.bar(pos, v, bottom=bottom, color=c, label=name, width=0.7)
        bottom += v
    ax.set_xticks(pos, cats, rotation=30 if len(cats) > 6 else 0)
    ax.legend(fontsize=7, ncol=2)
