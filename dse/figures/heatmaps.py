"""Seed 001's hardware studies as heat maps over a hardware grid of one system: training time over
FLOP rate x HBM (Fig. A5) and over HBM capacity x HBM bandwidth (Fig. A6), with the colour scale,
colour bar and interpolation they need.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import polars as pl
from matplotlib.colors import LogNorm, Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullFormatter

from dse.figures.common import (
    DPI,
    GENERATIONS,
    GRID_FIELDS,
    METRICS,
    MODEL_LABEL,
    SYSTEM_LABEL,
    MissingData,
    axis_values,
    check_metric,
    describe,
    feasible_rows,
    grid_index,
    label_of,
    one_system,
    require_columns,
    save,
    strategy_filter,
    strategy_title,
    varying,
)
from dse.results.query import where
from dse.explore.ranking import best_rows
from dse.spec.specs import load_system
from dse.spec.checks import check_output_file


def _grid_rows(lf: pl.LazyFrame, model: str, strategy: str, n_gpus: int | None, nvs_size: int,
               what: str) -> tuple[pl.DataFrame, int]:
    """Feasible rows of one model on the grid at one GPU count (the only one, if n_gpus is None)."""
    filters = {"model": model, **strategy_filter(model, strategy), "nvs_size": nvs_size}
    if n_gpus is None:
        counts = where(lf, **filters).select(pl.col("n_gpus").unique()).collect()["n_gpus"].to_list()
        if len(counts) != 1:
            raise MissingData(f"has GPU counts {sorted(counts) or 'none'} for {describe(filters)}; "
                              f"{what} needs one: give n_gpus")
        n_gpus = int(counts[0])
    df = feasible_rows(lf, **filters, n_gpus=n_gpus)
    return df, n_gpus


def _grid_data(lf: pl.LazyFrame, models: Sequence[str], strategy: str, n_gpus: int | None, nvs_size: int,
               what: str) -> tuple[list[tuple[str, pl.DataFrame, int]], pl.DataFrame]:
    """(model, feasible rows, GPU count) of each model, and every row of those groups, which must
    be the hardware grid of one system."""
    data = [(model, *_grid_rows(lf, model, strategy, n_gpus, nvs_size, what)) for model in models]
    every = pl.concat([where(lf, model=m, nvs_size=nvs_size, n_gpus=n).collect() for m, _, n in data],
                      how="diagonal_relaxed")
    one_system(every, what)
    return data, every


def _heat(ax, z: np.ndarray, x: np.ndarray, y: np.ndarray, norm, cmap: str):
    cm = ax.pcolormesh(x, y, np.ma.masked_invalid(z), shading="nearest", cmap=cmap, norm=norm)
    ax.set_facecolor("#d0d0d0")  # cells with no feasible configuration
    return cm


def _norm(values: np.ndarray, center: float = float("nan")):
    """Color scale of a heatmap: diverging around `center` (a reference system's value) when given,
    else logarithmic over a wide range, else linear."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return Normalize(0.0, 1.0)
    lo, hi = float(v.min()), float(v.max())
    if np.isfinite(center):
        # symmetric in ratio around the center, so that x% faster and x% slower look alike
        r = min(2.0, max(1.05, hi / center, center / lo))
        return TwoSlopeNorm(vcenter=center, vmin=center / r, vmax=center * r)
    if hi > 2.0 * lo:
        return LogNorm(lo, hi)
    return Normalize(lo, hi if hi > lo else lo * 1.01)


def _colorbar(fig: Figure, cm, ax, label: str, values: np.ndarray):
    """A colorbar with plain tick labels (1, 2, 5, 10, ... on a log scale)."""
    norm = cm.norm
    v = values[np.isfinite(values)]
    extend = "max" if v.size and float(v.max()) > norm.vmax * (1 + 1e-9) else "neither"
    cb = fig.colorbar(cm, ax=ax, shrink=0.9, extend=extend)
    if isinstance(norm, LogNorm):
        ticks = _nice_ticks(norm.vmin, norm.vmax, (1, 2, 3, 5))
        if len(ticks) < 4:
            ticks = _nice_ticks(norm.vmin, norm.vmax, tuple(range(1, 10)))
    else:
        ticks = [t for t in MaxNLocator(7).tick_values(norm.vmin, norm.vmax) if norm.vmin <= t <= norm.vmax]
        if isinstance(norm, TwoSlopeNorm):
            step = ticks[1] - ticks[0] if len(ticks) > 1 else 0.0
            ticks = sorted([t for t in ticks if abs(t - norm.vcenter) > 0.45 * step] + [norm.vcenter])
    cb.set_ticks(ticks)
    cb.set_ticklabels([f"{t:.3g}" for t in ticks])
    cb.ax.yaxis.set_minor_formatter(NullFormatter())
    cb.set_label(label)
    return cb


def _nice_ticks(lo: float, hi: float, mantissas: Sequence[int]) -> list[float]:
    out = []
    for k in range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1):
        out += [m * 10.0 ** k for m in mantissas if lo <= m * 10.0 ** k <= hi]
    return out


def figA5(
    lf: pl.LazyFrame,
    out: str | Path,
    *,
    models: Sequence[str] = ("gpt3_1t", "vit_era5"),
    n_gpus: int | None = 8192,
    nvs_size: int = 8,
    strategy: str = "paper",
    metric: str = "training_days",
    dpi: int = DPI,
) -> Path:
    """Seed 001 Fig. A5: training time over a grid of GPUs interpolated between generations:
    x = HBM capacity and bandwidth (moving together), y = matrix and vector FLOP rate (moving
    together; labelled by the matrix rate), network fixed; one panel per model. Generations on the
    grid's diagonal are marked."""
    out = check_output_file("--out", out)  # before any row is read
    check_metric(metric)
    require_columns(lf, ["model", "strategy", "nvs_size", "n_gpus", metric, "hbm_capacity", "hbm_bandwidth",
                          "matrix_flops", "vector_flops"])
    data, every = _grid_data(lf, models, strategy, n_gpus, nvs_size, "figA5")
    for a, b in (("hbm_capacity", "hbm_bandwidth"), ("matrix_flops", "vector_flops")):
        pairs = every.select(a, b).unique()
        if every[a].n_unique() < 2:
            raise MissingData(f"has one {a} value ({every[a][0]:g}); figA5 needs a grid over {a} "
                              f"and {'matrix_flops' if a == 'hbm_capacity' else 'hbm_capacity'}")
        if pairs.height != every[a].n_unique():
            raise MissingData(f"has {a} and {b} varying independently; figA5 needs them moving together "
                              f"(a zipped grid axis)")
    caps, flops = axis_values(every, "hbm_capacity"), axis_values(every, "matrix_flops")
    bw_of = dict(every.select("hbm_capacity", "hbm_bandwidth").unique().iter_rows())
    vec_of = dict(every.select("matrix_flops", "vector_flops").unique().iter_rows())
    other = varying(every, [f for f in GRID_FIELDS if f not in ("hbm_capacity", "hbm_bandwidth",
                                                                  "matrix_flops", "vector_flops")])
    if other:
        raise MissingData(f"varies {', '.join(other)} as well; figA5 needs only FLOP rate and HBM to vary")

    fig = Figure(figsize=(6.0 * len(data), 5.4), layout="constrained")
    axes = fig.subplots(1, len(data), squeeze=False)[0]
    gens = [load_system(g) for g in GENERATIONS]
    for ax, (model, df, n) in zip(axes, data):
        best = best_rows(df, ["hbm_capacity", "matrix_flops"])
        z = np.full((len(flops), len(caps)), np.nan)
        z[grid_index(flops, best["matrix_flops"]), grid_index(caps, best["hbm_capacity"])] = best[metric].to_numpy()
        xi, yi = np.arange(len(caps)), np.arange(len(flops))
        cm = _heat(ax, z, xi, yi, _norm(z), "coolwarm")
        _colorbar(fig, cm, ax, METRICS[metric], z)
        ax.set_xticks(xi, [f"{c:.0f}\n{bw_of[c] / 1e3:.1f}" for c in caps], fontsize=7)
        ax.set_yticks(yi, [f"{f:.0f} / {vec_of[f]:.0f}" for f in flops], fontsize=6.5)
        ax.set_xlabel("HBM capacity (GB) / bandwidth (TB/s)")
        ax.set_ylabel("matrix / vector FLOP rate (TFLOP/s)")
        for g in gens:
            ic = np.flatnonzero(np.isclose(caps, g.hbm_capacity, rtol=1e-6))
            jf = np.flatnonzero(np.isclose(flops, g.matrix_flops, rtol=1e-6))
            if len(ic) and len(jf):
                ax.plot(ic[0], jf[0], "*", color="white", mec="black", ms=13)
                v = z[jf[0], ic[0]]
                txt = f"{label_of(SYSTEM_LABEL, g.name)}" + (f"\n{v:.3g}" if np.isfinite(v) else "\nn/a")
                right, up = ic[0] < len(caps) / 2, jf[0] < len(flops) / 2
                ax.annotate(txt, (ic[0], jf[0]), xytext=(7 if right else -7, 5 if up else -5),
                            textcoords="offset points", fontsize=7, ha="left" if right else "right",
                            va="bottom" if up else "top",
                            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "alpha": 0.75, "lw": 0})
        ax.set_title(f"{label_of(MODEL_LABEL, model)}, {strategy_title(best)}, {n} GPUs, NVS {nvs_size}",
                     fontsize=10)
    net = every.row(0, named=True)
    fig.suptitle(f"network fixed: NVLink {net['nvlink_bandwidth']:g} GB/s, IB {net['ib_bandwidth']:g} GB/s; "
                 f"grey: nothing fits", fontsize=9)
    return save(fig, out, dpi)


def figA6(  # figA5's parameters and the reference system: two panels of one kind of study
    lf: pl.LazyFrame,
    out: str | Path,
    *,
    models: Sequence[str] = ("gpt3_1t", "vit_era5"),
    n_gpus: int | None = 8192,
    nvs_size: int = 8,
    strategy: str = "paper",
    metric: str = "training_days",
    reference: str = "b200",
    dpi: int = DPI,
) -> Path:
    """Seed 001 Fig. A6: training time over HBM capacity x HBM bandwidth with the compute and
    network of one system fixed; one panel per model. The `reference` system's HBM point is marked
    and contours show +5% and +25% over its time."""
    out = check_output_file("--out", out)  # before any row is read
    check_metric(metric)
    require_columns(lf, ["model", "strategy", "nvs_size", "n_gpus", metric, "hbm_capacity", "hbm_bandwidth"])
    data, every = _grid_data(lf, models, strategy, n_gpus, nvs_size, "figA6")
    caps, bws = axis_values(every, "hbm_capacity"), axis_values(every, "hbm_bandwidth")
    if len(caps) < 2 or len(bws) < 2:
        raise MissingData(f"has {len(caps)} hbm_capacity x {len(bws)} hbm_bandwidth values; figA6 needs a grid "
                          f"over both")
    pairs = every.select("hbm_capacity", "hbm_bandwidth").unique().height
    if pairs != len(caps) * len(bws):
        raise MissingData(f"has {pairs} (hbm_capacity, hbm_bandwidth) pairs, not the {len(caps)} x {len(bws)} "
                          f"product; figA6 needs a full grid")
    other = varying(every, [f for f in GRID_FIELDS if f not in ("hbm_capacity", "hbm_bandwidth")])
    if other:
        raise MissingData(f"varies {', '.join(other)} as well; figA6 needs only HBM capacity and bandwidth to vary")
    ref = load_system(reference)
    fig = Figure(figsize=(6.0 * len(data), 5.0), layout="constrained")
    axes = fig.subplots(1, len(data), squeeze=False)[0]
    for ax, (model, df, n) in zip(axes, data):
        best = best_rows(df, ["hbm_capacity", "hbm_bandwidth"])
        z = np.full((len(bws), len(caps)), np.nan)
        z[grid_index(bws, best["hbm_bandwidth"]), grid_index(caps, best["hbm_capacity"])] = best[metric].to_numpy()
        x, y = caps, bws / 1e3
        ref_v = _interp2(z, caps, bws, ref.hbm_capacity, ref.hbm_bandwidth)
        on_grid = np.isclose(caps, ref.hbm_capacity).any() and np.isclose(bws, ref.hbm_bandwidth).any()
        cm = _heat(ax, z, x, y, _norm(z, center=ref_v), "coolwarm")
        _colorbar(fig, cm, ax, METRICS[metric], z)
        ax.set_xlabel("HBM capacity (GB)")
        ax.set_ylabel("HBM bandwidth (TB/s)")
        ax.plot(ref.hbm_capacity, ref.hbm_bandwidth / 1e3, "*", color="white", mec="black", ms=14)
        label = label_of(SYSTEM_LABEL, ref.name) + (
            f"\n{'' if on_grid else '~'}{ref_v:.3g}" if np.isfinite(ref_v) else "")
        ax.annotate(label, (ref.hbm_capacity, ref.hbm_bandwidth / 1e3), xytext=(7, 4),
                    textcoords="offset points", fontsize=8,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "alpha": 0.75, "lw": 0})
        if np.isfinite(ref_v) and np.isfinite(z).sum() > 3:
            levels = [ref_v * 1.05, ref_v * 1.25]
            cs = ax.contour(x, y, np.ma.masked_invalid(z), levels=levels, colors="black", linewidths=0.9,
                            linestyles=["-", "--"])
            ax.clabel(cs, fmt={levels[0]: "+5%", levels[1]: "+25%"}, fontsize=7)
        ax.set_title(f"{label_of(MODEL_LABEL, model)}, {strategy_title(best)}, {n} GPUs, NVS {nvs_size}",
                     fontsize=10)
    hw = every.row(0, named=True)
    fig.suptitle(f"fixed: {hw['matrix_flops']:g}/{hw['vector_flops']:g} TFLOP/s, NVLink {hw['nvlink_bandwidth']:g} "
                 f"GB/s, IB {hw['ib_bandwidth']:g} GB/s; colors centred on {label_of(SYSTEM_LABEL, ref.name)}'s HBM (blue: "
                 f"faster; ~: interpolated), contours +5% / +25% over it; grey: nothing fits", fontsize=9)
    return save(fig, out, dpi)


def _interp2(z: np.ndarray, xs: np.ndarray, ys: np.ndarray, x: float, y: float) -> float:
    """Bilinear interpolation of z[y, x] on a rectilinear grid (nan outside it)."""
    if not (xs[0] <= x <= xs[-1] and ys[0] <= y <= ys[-1]):
        return float("nan")
    i = int(np.clip(np.searchsorted(xs, x) - 1, 0, len(xs) - 2))
    j = int(np.clip(np.searchsorted(ys, y) - 1, 0, len(ys) - 2))
    tx = (x - xs[i]) / (xs[i + 1] - xs[i])
    ty = (y - ys[j]) / (ys[j + 1] - ys[j])
    c = z[j:j + 2, i:i + 2]
    return float((1 - ty) * ((1 - tx) * c[0, 0] + tx * c[0, 1]) + ty * ((1 - tx) * c[1, 0] + tx * c[1, 1]))
