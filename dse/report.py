"""The figures of seed 001 and of the rail-only papers, drawn from a dataset (`dse.io.scan`) with
matplotlib.

Each figure is one function `figX(lf, out, ...) -> Path`: it takes a lazy scan of a dataset, picks
the optimum of every group it draws (the fastest feasible row: a dataset of top-k rows or of every
row gives the same figure), writes a PNG to `out` and returns its path. Nothing here computes a
cost; a dataset that lacks what a figure needs raises `MissingData`, whose message names the
missing columns or groups.

    fig4   optimal configuration and time breakdown vs GPU count (B200, NVS 8)   dse -m sweep=fig4
    fig5   training days vs GPU count per GPU generation and NVS size            dse -m sweep=seed001
    figA4  speedup of the 2D strategies over 1D TP for GPT3-1T                   dse -m sweep=seed001
    figA5  training days over FLOP rate x HBM (capacity and bandwidth)           dse -m sweep=fig_a5
    figA6  training days over HBM capacity x HBM bandwidth                       dse -m sweep=fig_a6
    fig8   iteration time vs HB-domain size K, ideal K = N dashed (seed 002)     dse -m sweep=railonly_k
    fig9   iteration time vs NIC bandwidth per HB-domain bandwidth, K = 8, 256   dse -m sweep=railonly_bandwidth
    fig10  iteration time and relative performance to the ideal vs global batch  dse -m sweep=railonly_batch

The rail-only figures (seed 002 Fig. 8-10, seed 000 Fig. 9-11) draw the optimum of each point on a
rail-only network against the ideal cluster, network any_to_any (one HB domain holds every GPU).

Strategies: seed 001 draws GPT3-1T with 1D TP and ViT-ERA5 with 2D TP (Fig. 4, 5; 1D TP cannot fit
the ViT). `strategy="paper"` follows that; `"best"` takes the fastest of every strategy in the
dataset for each point; a strategy name draws that strategy for every model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import polars as pl
from matplotlib.colors import LogNorm, Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator, NullFormatter

from dse.io import HARDWARE

#: strategy of each model in the seed-001 figures
PAPER_STRATEGY = {"gpt3_1t": "tp1d", "vit_era5": "tp2d", "gpt3_175b": "tp1d"}
STRATEGY_CHOICES = ("paper", "best", "tp1d", "tp2d", "summa")
METRICS = {"training_days": "training time (days)", "iteration_time": "time per iteration (s)"}

MODEL_LABEL = {"gpt3_1t": "GPT3-1T", "vit_era5": "ViT-ERA5", "gpt3_175b": "GPT3-175B", "gpt_146b": "GPT-146B"}
STRATEGY_LABEL = {"tp1d": "1D TP", "tp2d": "2D TP", "summa": "2D TP SUMMA"}
SYSTEM_LABEL = {"a100": "A100", "h200": "H200", "b200": "B200", "b200_next": "B200-next"}
GENERATIONS = ("a100", "h200", "b200", "b200_next")
SYSTEM_COLOR = {"a100": "tab:blue", "h200": "tab:orange", "b200": "tab:green", "b200_next": "tab:red"}
NVS_STYLE = {4: ("o", ":"), 8: ("s", "--"), 16: ("D", "-."), 64: ("^", "-")}

#: time components of an iteration (they sum to iteration_time), in drawing order
BREAKDOWN = (
    ("t_compute", "compute", "#4c72b0"),
    ("t_memory", "exposed memory", "#8172b3"),
    ("t_tp_comm", "TP comm", "#dd8452"),
    ("t_dp_comm", "DP comm", "#55a868"),
    ("t_pp_comm", "PP comm", "#937860"),
    ("t_bubble", "PP bubble", "#c44e52"),
)

#: candidate columns, the tie-break after throughput (as in the search)
CANDIDATE = ("n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p", "nvs_d", "n_b")
GRID_FIELDS = tuple(h for h in HARDWARE if h != "nvs_size")
DPI = 90


class MissingData(ValueError):
    """The dataset lacks the columns or rows a figure needs. The message completes the sentence
    "dataset DIR ...", e.g. "has no rows for model=gpt3_1t system=b200 nvs_size=8"."""


# ----------------------------------------------------------------------------------------------
# selection


def _label(mapping: Mapping[str, str], key: Any) -> str:
    return mapping.get(key, str(key))


def _describe(filters: Mapping[str, Any]) -> str:
    parts = []
    for k, v in filters.items():
        if isinstance(v, (list, tuple, set)):
            v = ",".join(str(x) for x in v)
        parts.append(f"{k}={v}")
    return " ".join(parts)


def _require_columns(lf: pl.LazyFrame, columns: Iterable[str]) -> None:
    have = set(lf.collect_schema().names())
    missing = [c for c in columns if c not in have]
    if missing:
        raise MissingData(f"lacks columns {', '.join(missing)}")


def _where(lf: pl.LazyFrame, filters: Mapping[str, Any]) -> pl.LazyFrame:
    for k, v in filters.items():
        if isinstance(v, (list, tuple, set)):
            lf = lf.filter(pl.col(k).is_in(list(v)))
        else:
            lf = lf.filter(pl.col(k) == v)
    return lf


def _rows(lf: pl.LazyFrame, **filters: Any) -> pl.DataFrame:
    """Feasible rows matching `filters`; MissingData naming the group when there are none."""
    _require_columns(lf, list(filters) + ["feasible", "throughput"])
    df = _where(lf, filters).collect()
    if df.is_empty():
        raise MissingData(f"has no rows for {_describe(filters)} (not searched, or nothing fits)")
    feasible = df.filter(pl.col("feasible"))
    if feasible.is_empty():
        raise MissingData(f"has no feasible rows for {_describe(filters)}")
    for col in ("profile", "global_batch"):
        if col in feasible.columns and feasible[col].n_unique() > 1:
            values = ", ".join(str(v) for v in sorted(feasible[col].unique().to_list()))
            raise MissingData(f"mixes {col} {values} for {_describe(filters)}; keep one per dataset")
    return feasible


def _varying(df: pl.DataFrame, fields: Iterable[str] = GRID_FIELDS) -> list[str]:
    return [f for f in fields if f in df.columns and df[f].n_unique() > 1]


def _single_hardware(df: pl.DataFrame, what: str) -> None:
    """Each system of `df` must be one hardware point (no grid axis)."""
    for (system,), part in df.group_by(["system"]):
        grid = _varying(part)
        if grid:
            raise MissingData(f"has a hardware grid for system={system} ({', '.join(grid)} vary); "
                              f"{what} needs one point per system")


def _optimum(df: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """The fastest row of each group `keys` (ties broken by the candidate columns)."""
    order = ["throughput"] + [c for c in CANDIDATE if c in df.columns]
    return (df.sort(order, descending=[True] + [False] * (len(order) - 1))
              .unique(subset=list(keys), keep="first", maintain_order=True)
              .sort(list(keys)))


def _strategy_filter(model: str, strategy: str) -> dict[str, Any]:
    if strategy not in STRATEGY_CHOICES:
        raise ValueError(f"strategy = {strategy!r}: one of {', '.join(STRATEGY_CHOICES)}")
    if strategy == "best":
        return {}
    if strategy == "paper":
        return {"strategy": PAPER_STRATEGY.get(model, "tp1d")}
    return {"strategy": strategy}


def _strategy_title(df: pl.DataFrame) -> str:
    names = [s for s in STRATEGY_LABEL if s in set(df["strategy"].to_list())]
    return "best of " + ", ".join(_label(STRATEGY_LABEL, s) for s in names) if len(names) > 1 else \
        _label(STRATEGY_LABEL, names[0] if names else "")


def _system_order(systems: Iterable[str]) -> list[str]:
    systems = set(systems)
    return [s for s in GENERATIONS if s in systems] + sorted(systems - set(GENERATIONS))


def _system_colors(systems: Sequence[str]) -> dict[str, Any]:
    extra = iter(["tab:purple", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan"])
    return {s: SYSTEM_COLOR.get(s) or next(extra, "black") for s in systems}


def _nvs_style(nvs: int) -> tuple[str, str]:
    return NVS_STYLE.get(int(nvs), ("v", "-"))


def _log2_gpu_axis(ax, counts: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(counts))
    ax.set_xticklabels([_gpus(n) for n in counts], fontsize=8)
    ax.minorticks_off()


def _gpus(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def _save(fig: Figure, out: str | Path, dpi: int) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    return out


# ----------------------------------------------------------------------------------------------
# Fig. 4


def fig4(
    lf: pl.LazyFrame,
    out: str | Path,
    *,
    system: str = "b200",
    nvs_size: int = 8,
    models: Sequence[str] = ("gpt3_1t", "vit_era5"),
    strategy: str = "paper",
    breakdown: str = "fraction",
    dpi: int = DPI,
) -> Path:
    """Seed 001 Fig. 4: for each model, the optimal configuration vs GPU count (top: n_d, n1 [x n2],
    n_p and the number of microbatches as grouped bars on a log axis, memory per GPU as dots on a
    second axis) and its time breakdown (bottom: compute, exposed memory, TP/DP/PP communication,
    bubble as stacked bars, fractions of the iteration or seconds; iteration time as dots)."""
    if breakdown not in ("fraction", "seconds"):
        raise ValueError(f"breakdown = {breakdown!r}: 'fraction' or 'seconds'")
    _require_columns(lf, ["model", "strategy", "system", "nvs_size", "n_gpus", "microbatches", "memory",
                          "hbm_capacity", "iteration_time"] + list(CANDIDATE) + [c for c, _, _ in BREAKDOWN])
    panels = []
    for model in models:
        filters = {"model": model, **_strategy_filter(model, strategy), "system": system, "nvs_size": nvs_size}
        df = _rows(lf, **filters)
        _single_hardware(df, "fig4")
        panels.append((model, _optimum(df, ["n_gpus"])))

    fig = Figure(figsize=(6.2 * len(panels), 7.6), layout="constrained")
    axes = fig.subplots(2, len(panels), squeeze=False, height_ratios=[1.0, 1.0])
    for j, (model, best) in enumerate(panels):
        counts = best["n_gpus"].to_list()
        x = np.arange(len(counts))
        two_d = bool((best["n2"] > 1).any())
        bars = [("n_d", "DP $n_d$", "#4c72b0")]
        if two_d:
            bars += [("n1", "TP $n_1$", "#dd8452"), ("n2", "TP $n_2$", "#e5ae38")]
        else:
            bars += [("n1", "TP $n_t$", "#dd8452")]
        bars += [("n_p", "PP $n_p$", "#55a868"), ("microbatches", "microbatches $m$", "#8c8c8c")]
        top, bottom = axes[0, j], axes[1, j]
        width = 0.84 / len(bars)
        for k, (col, label, color) in enumerate(bars):
            top.bar(x + (k - (len(bars) - 1) / 2) * width, best[col].to_numpy(), width,
                    bottom=0.5, label=label, color=color)
        top.set_yscale("log", base=2)
        # headroom above the tallest bar for the legend
        high = int(np.ceil(np.log2(max(2, int(best["microbatches"].max())))))
        top.set_ylim(0.5, 2.0 ** (high + 5))
        top.set_yticks([2 ** k for k in range(0, high + 1, 2)], [str(2 ** k) for k in range(0, high + 1, 2)])
        top.minorticks_off()
        top.set_ylabel("parallel degree / microbatches")
        top.set_xticks(x, [_gpus(n) for n in counts], fontsize=8)
        top.set_xlim(-0.6, len(counts) - 0.4)
        mem = top.twinx()
        cap = float(best["hbm_capacity"].max())
        mem.plot(x, best["memory"].to_numpy(), "o", color="black", ms=6, label="memory per GPU")
        mem.axhline(cap, color="black", lw=0.8, ls="--")
        mem.text(len(counts) - 0.45, cap, f"HBM {cap:g} GB", ha="right", va="bottom", fontsize=7)
        mem.set_ylim(0, cap * 1.4)
        mem.set_ylabel("memory per GPU (GB)")
        top.set_title(f"{_label(MODEL_LABEL, model)}, {_strategy_title(best)} on "
                      f"{_label(SYSTEM_LABEL, system)}, NVS {nvs_size}", fontsize=10)
        handles, labels = top.get_legend_handles_labels()
        h2, l2 = mem.get_legend_handles_labels()
        top.legend(handles + h2, labels + l2, fontsize=7, ncol=3, loc="upper left", framealpha=0.8)

        t = best["iteration_time"].to_numpy()
        base = np.zeros(len(counts))
        for col, label, color in BREAKDOWN:
            v = best[col].to_numpy()
            v = v / t if breakdown == "fraction" else v
            bottom.bar(x, v, 0.7, bottom=base, label=label, color=color)
            base = base + v
        bottom.set_xticks(x, [_gpus(n) for n in counts], fontsize=8)
        bottom.set_xlim(-0.6, len(counts) - 0.4)
        bottom.set_xlabel("number of GPUs")
        if breakdown == "fraction":
            bottom.set_ylim(0, 1.0)
            bottom.set_ylabel("fraction of iteration time")
            it = bottom.twinx()
            it.plot(x, t, "o", color="black", ms=6, label="time per iteration")
            it.set_yscale("log")
            it.set_ylabel("time per iteration (s)")
            h2, l2 = it.get_legend_handles_labels()
        else:
            bottom.set_yscale("log")
            bottom.set_ylabel("time per iteration (s)")
            h2, l2 = [], []
    handles, labels = axes[1, 0].get_legend_handles_labels()
    fig.legend(handles + h2, labels + l2, fontsize=8, ncol=len(labels) + len(l2), loc="outside lower center")
    return _save(fig, out, dpi)


# ----------------------------------------------------------------------------------------------
# Fig. 5


def fig5(
    lf: pl.LazyFrame,
    out: str | Path,
    *,
    models: Sequence[str] = ("gpt3_1t", "vit_era5"),
    strategy: str = "paper",
    metric: str = "training_days",
    dpi: int = DPI,
) -> Path:
    """Seed 001 Fig. 5: training time vs GPU count, one line per (GPU, NVS size): color = GPU
    generation, marker and line style = NVS size; one panel per model (GPT3-1T with 1D TP on
    top, ViT-ERA5 with 2D TP below), log-log."""
    _check_metric(metric)
    _require_columns(lf, ["model", "strategy", "system", "nvs_size", "n_gpus", metric])
    panels = []
    for model in models:
        df = _rows(lf, model=model, **_strategy_filter(model, strategy))
        _single_hardware(df, "fig5")
        panels.append((model, _optimum(df, ["system", "nvs_size", "n_gpus"])))
    systems = _system_order(s for _, b in panels for s in b["system"].unique().to_list())
    colors = _system_colors(systems)
    nvs_all = sorted({int(v) for _, b in panels for v in b["nvs_size"].unique().to_list()})

    fig = Figure(figsize=(7.6, 4.0 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (model, best) in zip(axes, panels):
        for system in systems:
            for nvs in nvs_all:
                part = best.filter((pl.col("system") == system) & (pl.col("nvs_size") == nvs)).sort("n_gpus")
                if part.is_empty():
                    continue
                marker, ls = _nvs_style(nvs)
                ax.plot(part["n_gpus"].to_numpy(), part[metric].to_numpy(), marker=marker, ls=ls,
                        color=colors[system], ms=4.5, lw=1.3)
        counts = sorted(best["n_gpus"].unique().to_list())
        _log2_gpu_axis(ax, counts)
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_ylabel(METRICS[metric])
        ax.set_title(f"{_label(MODEL_LABEL, model)} with {_strategy_title(best)}", fontsize=10)
    axes[-1].set_xlabel("number of GPUs")
    handles = [Patch(color=colors[s], label=_label(SYSTEM_LABEL, s)) for s in systems]
    handles += [Line2D([], [], color="black", marker=_nvs_style(n)[0], ls=_nvs_style(n)[1], label=f"NVS{n}")
                for n in nvs_all]
    axes[0].legend(handles=handles, fontsize=8, ncol=2, loc="upper right")
    return _save(fig, out, dpi)


# ----------------------------------------------------------------------------------------------
# Fig. A4


def figA4(
    lf: pl.LazyFrame,
    out: str | Path,
    *,
    model: str = "gpt3_1t",
    baseline: str = "tp1d",
    strategies: Sequence[str] = ("summa", "tp2d"),
    dpi: int = DPI,
) -> Path:
    """Seed 001 Fig. A4: speedup in training time of each 2D strategy over 1D TP vs GPU count,
    colored by GPU generation and marked by NVS size (GPU counts where both are feasible)."""
    _require_columns(lf, ["model", "strategy", "system", "nvs_size", "n_gpus", "iteration_time"])
    keys = ["system", "nvs_size", "n_gpus"]
    base = _rows(lf, model=model, strategy=baseline)
    _single_hardware(base, "figA4")
    base = _optimum(base, keys).select(keys + [pl.col("iteration_time").alias("t_base")])
    panels = []
    for s in strategies:
        other = _rows(lf, model=model, strategy=s)
        _single_hardware(other, "figA4")
        joined = _optimum(other, keys).join(base, on=keys, how="inner").with_columns(
            (pl.col("t_base") / pl.col("iteration_time")).alias("speedup"))
        if joined.is_empty():
            raise MissingData(f"has no GPU count where both {baseline} and {s} are feasible for model={model}")
        panels.append((s, joined))
    systems = _system_order(s for _, j in panels for s in j["system"].unique().to_list())
    colors = _system_colors(systems)
    nvs_all = sorted({int(v) for _, j in panels for v in j["nvs_size"].unique().to_list()})

    fig = Figure(figsize=(5.2 * len(panels), 4.2), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    for ax, (s, joined) in zip(axes, panels):
        ax.axhline(1.0, color="black", lw=0.8)
        for system in systems:
            for nvs in nvs_all:
                part = joined.filter((pl.col("system") == system) & (pl.col("nvs_size") == nvs)).sort("n_gpus")
                if part.is_empty():
                    continue
                marker, ls = _nvs_style(nvs)
                ax.plot(part["n_gpus"].to_numpy(), part["speedup"].to_numpy(), marker=marker, ls=ls,
                        color=colors[system], ms=5, lw=1.0, alpha=0.9)
        _log2_gpu_axis(ax, sorted(joined["n_gpus"].unique().to_list()))
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("number of GPUs")
        ax.set_title(f"{_label(MODEL_LABEL, model)}: {_label(STRATEGY_LABEL, s)} over "
                     f"{_label(STRATEGY_LABEL, baseline)}", fontsize=10)
    axes[0].set_ylabel(f"speedup (time {_label(STRATEGY_LABEL, baseline)} / time 2D)")
    handles = [Patch(color=colors[s], label=_label(SYSTEM_LABEL, s)) for s in systems]
    handles += [Line2D([], [], color="black", marker=_nvs_style(n)[0], ls=_nvs_style(n)[1], label=f"NVS{n}")
                for n in nvs_all]
    axes[-1].legend(handles=handles, fontsize=8, ncol=2, loc="upper right")
    return _save(fig, out, dpi)


# ----------------------------------------------------------------------------------------------
# Fig. A5, A6: heatmaps over a hardware grid


def _check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise ValueError(f"metric = {metric!r}: one of {', '.join(METRICS)}")


def _grid_rows(lf: pl.LazyFrame, model: str, strategy: str, n_gpus: int | None, nvs_size: int,
               what: str) -> tuple[pl.DataFrame, int]:
    """Feasible rows of one model on the grid at one GPU count (the only one, if n_gpus is None)."""
    filters = {"model": model, **_strategy_filter(model, strategy), "nvs_size": nvs_size}
    if n_gpus is None:
        counts = _where(lf, filters).select(pl.col("n_gpus").unique()).collect()["n_gpus"].to_list()
        if len(counts) != 1:
            raise MissingData(f"has GPU counts {sorted(counts) or 'none'} for {_describe(filters)}; "
                              f"{what} needs one: give n_gpus")
        n_gpus = int(counts[0])
    df = _rows(lf, **filters, n_gpus=n_gpus)
    return df, n_gpus


def _one_system(df: pl.DataFrame, what: str) -> None:
    systems = sorted(df["system"].unique().to_list())
    if len(systems) > 1:
        raise MissingData(f"has systems {', '.join(systems)} at the same GPU count; {what} draws the hardware "
                          f"grid of one system")


def _axis_values(df: pl.DataFrame, col: str) -> np.ndarray:
    return np.array(sorted(df[col].unique().to_list()), dtype=float)


def _index(values: np.ndarray, column: pl.Series) -> np.ndarray:
    idx = np.searchsorted(values, column.to_numpy())
    return np.clip(idx, 0, len(values) - 1)


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
    _check_metric(metric)
    _require_columns(lf, ["model", "strategy", "nvs_size", "n_gpus", metric, "hbm_capacity", "hbm_bandwidth",
                          "matrix_flops", "vector_flops"])
    data = []
    for model in models:
        df, n = _grid_rows(lf, model, strategy, n_gpus, nvs_size, "figA5")
        data.append((model, df, n))
    every = pl.concat([_where(lf, {"model": m, "nvs_size": nvs_size, "n_gpus": n}).collect()
                       for m, _, n in data], how="diagonal_relaxed")
    _one_system(every, "figA5")
    for a, b in (("hbm_capacity", "hbm_bandwidth"), ("matrix_flops", "vector_flops")):
        pairs = every.select(a, b).unique()
        if every[a].n_unique() < 2:
            raise MissingData(f"has one {a} value ({every[a][0]:g}); figA5 needs a grid over {a} "
                              f"and {'matrix_flops' if a == 'hbm_capacity' else 'hbm_capacity'}")
        if pairs.height != every[a].n_unique():
            raise MissingData(f"has {a} and {b} varying independently; figA5 needs them moving together "
                              f"(a zipped grid axis)")
    caps, flops = _axis_values(every, "hbm_capacity"), _axis_values(every, "matrix_flops")
    bw_of = dict(every.select("hbm_capacity", "hbm_bandwidth").unique().iter_rows())
    vec_of = dict(every.select("matrix_flops", "vector_flops").unique().iter_rows())
    other = _varying(every, [f for f in GRID_FIELDS if f not in ("hbm_capacity", "hbm_bandwidth",
                                                                  "matrix_flops", "vector_flops")])
    if other:
        raise MissingData(f"varies {', '.join(other)} as well; figA5 needs only FLOP rate and HBM to vary")

    fig = Figure(figsize=(6.0 * len(data), 5.4), layout="constrained")
    axes = fig.subplots(1, len(data), squeeze=False)[0]
    from dse.specs import load_system

    gens = [load_system(g) for g in GENERATIONS]
    for ax, (model, df, n) in zip(axes, data):
        best = _optimum(df, ["hbm_capacity", "matrix_flops"])
        z = np.full((len(flops), len(caps)), np.nan)
        z[_index(flops, best["matrix_flops"]), _index(caps, best["hbm_capacity"])] = best[metric].to_numpy()
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
                txt = f"{_label(SYSTEM_LABEL, g.name)}" + (f"\n{v:.3g}" if np.isfinite(v) else "\nn/a")
                right, up = ic[0] < len(caps) / 2, jf[0] < len(flops) / 2
                ax.annotate(txt, (ic[0], jf[0]), xytext=(7 if right else -7, 5 if up else -5),
                            textcoords="offset points", fontsize=7, ha="left" if right else "right",
                            va="bottom" if up else "top",
                            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "alpha": 0.75, "lw": 0})
        ax.set_title(f"{_label(MODEL_LABEL, model)}, {_strategy_title(best)}, {n} GPUs, NVS {nvs_size}",
                     fontsize=10)
    net = every.row(0, named=True)
    fig.suptitle(f"network fixed: NVLink {net['nvlink_bandwidth']:g} GB/s, IB {net['ib_bandwidth']:g} GB/s; "
                 f"grey: nothing fits", fontsize=9)
    return _save(fig, out, dpi)


def figA6(
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
    _check_metric(metric)
    _require_columns(lf, ["model", "strategy", "nvs_size", "n_gpus", metric, "hbm_capacity", "hbm_bandwidth"])
    data = []
    for model in models:
        df, n = _grid_rows(lf, model, strategy, n_gpus, nvs_size, "figA6")
        data.append((model, df, n))
    every = pl.concat([_where(lf, {"model": m, "nvs_size": nvs_size, "n_gpus": n}).collect()
                       for m, _, n in data], how="diagonal_relaxed")
    _one_system(every, "figA6")
    caps, bws = _axis_values(every, "hbm_capacity"), _axis_values(every, "hbm_bandwidth")
    if len(caps) < 2 or len(bws) < 2:
        raise MissingData(f"has {len(caps)} hbm_capacity x {len(bws)} hbm_bandwidth values; figA6 needs a grid "
                          f"over both")
    pairs = every.select("hbm_capacity", "hbm_bandwidth").unique().height
    if pairs != len(caps) * len(bws):
        raise MissingData(f"has {pairs} (hbm_capacity, hbm_bandwidth) pairs, not the {len(caps)} x {len(bws)} "
                          f"product; figA6 needs a full grid")
    other = _varying(every, [f for f in GRID_FIELDS if f not in ("hbm_capacity", "hbm_bandwidth")])
    if other:
        raise MissingData(f"varies {', '.join(other)} as well; figA6 needs only HBM capacity and bandwidth to vary")
    from dse.specs import load_system

    ref = load_system(reference)
    fig = Figure(figsize=(6.0 * len(data), 5.0), layout="constrained")
    axes = fig.subplots(1, len(data), squeeze=False)[0]
    for ax, (model, df, n) in zip(axes, data):
        best = _optimum(df, ["hbm_capacity", "hbm_bandwidth"])
        z = np.full((len(bws), len(caps)), np.nan)
        z[_index(bws, best["hbm_bandwidth"]), _index(caps, best["hbm_capacity"])] = best[metric].to_numpy()
        x, y = caps, bws / 1e3
        ref_v = _interp2(z, caps, bws, ref.hbm_capacity, ref.hbm_bandwidth)
        on_grid = np.isclose(caps, ref.hbm_capacity).any() and np.isclose(bws, ref.hbm_bandwidth).any()
        cm = _heat(ax, z, x, y, _norm(z, center=ref_v), "coolwarm")
        _colorbar(fig, cm, ax, METRICS[metric], z)
        ax.set_xlabel("HBM capacity (GB)")
        ax.set_ylabel("HBM bandwidth (TB/s)")
        ax.plot(ref.hbm_capacity, ref.hbm_bandwidth / 1e3, "*", color="white", mec="black", ms=14)
        label = _label(SYSTEM_LABEL, ref.name) + (
            f"\n{'' if on_grid else '~'}{ref_v:.3g}" if np.isfinite(ref_v) else "")
        ax.annotate(label, (ref.hbm_capacity, ref.hbm_bandwidth / 1e3), xytext=(7, 4),
                    textcoords="offset points", fontsize=8,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "alpha": 0.75, "lw": 0})
        if np.isfinite(ref_v) and np.isfinite(z).sum() > 3:
            levels = [ref_v * 1.05, ref_v * 1.25]
            cs = ax.contour(x, y, np.ma.masked_invalid(z), levels=levels, colors="black", linewidths=0.9,
                            linestyles=["-", "--"])
            ax.clabel(cs, fmt={levels[0]: "+5%", levels[1]: "+25%"}, fontsize=7)
        ax.set_title(f"{_label(MODEL_LABEL, model)}, {_strategy_title(best)}, {n} GPUs, NVS {nvs_size}",
                     fontsize=10)
    hw = every.row(0, named=True)
    fig.suptitle(f"fixed: {hw['matrix_flops']:g}/{hw['vector_flops']:g} TFLOP/s, NVLink {hw['nvlink_bandwidth']:g} "
                 f"GB/s, IB {hw['ib_bandwidth']:g} GB/s; colors centred on {_label(SYSTEM_LABEL, ref.name)}'s HBM (blue: "
                 f"faster; ~: interpolated), contours +5% / +25% over it; grey: nothing fits", fontsize=9)
    return _save(fig, out, dpi)


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


# ----------------------------------------------------------------------------------------------
# Fig. 8, 9, 10 of seed 002 (Fig. 9, 10, 11 of seed 000): HB-domain studies of rail-only networks

#: network of the ideal cluster of seeds 000/002: one HB domain holds every GPU (K = N)
IDEAL = "any_to_any"
NETWORK_LABEL = {"rail_only": "rail-only", "rail_optimized": "rail-optimized", "any_to_any": "any-to-any",
                 "two_tier": "two-tier"}


def _gpu_count(lf: pl.LazyFrame, filters: Mapping[str, Any], n_gpus: int | None, what: str) -> int:
    """`n_gpus`, or the only GPU count of the rows matching `filters`."""
    if n_gpus is not None:
        return int(n_gpus)
    _require_columns(lf, list(filters) + ["n_gpus"])
    counts = sorted(_where(lf, filters).select(pl.col("n_gpus").unique()).collect()["n_gpus"].to_list())
    if not counts:
        raise MissingData(f"has no rows for {_describe(filters)} (not searched, or nothing fits)")
    if len(counts) > 1:
        raise MissingData(f"has GPU counts {', '.join(map(str, counts))} for {_describe(filters)}; "
                          f"{what} draws one: give n_gpus")
    return int(counts[0])


def _ideal(lf: pl.LazyFrame, what: str, **filters: Any) -> pl.DataFrame:
    """The optimum per GPU count of the ideal cluster (network any_to_any) among rows `filters`."""
    df = _rows(lf, **filters, network=IDEAL)
    _single_hardware(df, what)
    return _optimum(df, ["n_gpus"])


def _same_batch(a: pl.DataFrame, b: pl.DataFrame, what: str, filters: Mapping[str, Any]) -> int:
    """The one global batch of two row sets (e.g. an HB-domain sweep and its ideal)."""
    batches = sorted(set(a["global_batch"].to_list()) | set(b["global_batch"].to_list()))
    if len(batches) > 1:
        raise MissingData(f"has global batches {', '.join(map(str, batches))} for {_describe(filters)} and its "
                          f"ideal ({IDEAL}); {what} compares one batch")
    return int(batches[0])


def _k_ticks(ax, ks: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(ks))
    ax.set_xticklabels([_gpus(k) for k in ks], fontsize=8)
    ax.minorticks_off()


def _k_colors(ks: Sequence[int]) -> dict[int, Any]:
    """A color per HB-domain size, dark (small K) to light (large K) on a log scale."""
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    lo, hi = np.log2(min(ks)), np.log2(max(ks))
    return {k: cmap(0.9 * (np.log2(k) - lo) / (hi - lo) if hi > lo else 0.0) for k in ks}


def fig8(
    lf: pl.LazyFrame,
    out: str | Path,
    *,
    models: Sequence[str] = ("gpt3_1t", "gpt_146b"),
    network: str = "rail_only",
    n_gpus: Sequence[int] | None = None,
    reference_k: int = 256,
    dpi: int = DPI,
    notes: list[str] | None = None,
) -> Path:
    """Seed 002 Fig. 8 (seed 000 Fig. 9): iteration time of the optimal parallelization vs HB-domain
    size K on `network`, one line per GPU count, one panel per model; the ideal K = N (network
    any_to_any, same GPU count and batch) as a dashed line of the same color. Each legend entry
    gives the slowdown over the ideal at K = `reference_k` (the papers' GH200 domain of 256).
    `notes` (a list) receives those figures and the change of the time from K = 1 to 8 and from 8 to
    `reference_k`, as text lines."""
    _require_columns(lf, ["model", "network", "nvs_size", "n_gpus", "global_batch", "iteration_time"])
    panels = []
    for model in models:
        filters: dict[str, Any] = {"model": model, "network": network}
        if n_gpus is not None:
            filters["n_gpus"] = [int(n) for n in n_gpus]
        df = _rows(lf, **filters)
        _single_hardware(df, "fig8")
        best = _optimum(df, ["n_gpus", "nvs_size"])
        counts = sorted(best["n_gpus"].unique().to_list())
        ideal = _ideal(lf, "fig8", model=model, n_gpus=counts)
        lacking = [n for n in counts if n not in set(ideal["n_gpus"].to_list())]
        if lacking:
            raise MissingData(f"has no {IDEAL} rows (the ideal K = N) for model={model} "
                              f"n_gpus={','.join(map(str, lacking))}")
        batch = _same_batch(best, ideal, "fig8", filters)
        panels.append((model, best, ideal, counts, batch))

    fig = Figure(figsize=(5.6 * len(panels), 4.4), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (model, best, ideal, counts, batch) in zip(axes, panels):
        t_ideal = dict(ideal.select("n_gpus", "iteration_time").iter_rows())
        for i, n in enumerate(counts):
            part = best.filter(pl.col("n_gpus") == n).sort("nvs_size")
            ks, t = part["nvs_size"].to_numpy(), part["iteration_time"].to_numpy()
            label = f"{_gpus(n)} GPUs"
            at_ref = t[ks == reference_k]
            if len(at_ref):
                label += f": K={reference_k} {100 * (at_ref[0] / t_ideal[n] - 1):+.1f}% vs ideal"
            if notes is not None:
                at = dict(zip(ks.tolist(), t.tolist()))
                steps = [(a, b) for a, b in ((1, 8), (8, reference_k)) if a in at and b in at]
                notes.append(f"{model} on {n} GPUs: " + "; ".join(
                    [f"K={reference_k} {100 * (at[reference_k] / t_ideal[n] - 1):+.1f}% vs ideal"] * bool(len(at_ref))
                    + [f"K {a}->{b} {100 * (at[b] / at[a] - 1):+.1f}%" for a, b in steps]))
            ax.plot(ks, t, marker="o", ms=4, lw=1.4, color=f"C{i}", label=label)
            ax.axhline(t_ideal[n], color=f"C{i}", ls="--", lw=1.0)
        _k_ticks(ax, sorted(best["nvs_size"].unique().to_list()))
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("HB domain size K (GPUs)")
        ax.set_ylabel(METRICS["iteration_time"])
        ax.set_title(f"{_label(MODEL_LABEL, model)}, global batch {batch}, {_label(NETWORK_LABEL, network)}",
                     fontsize=10)
        handles, labels = ax.get_legend_handles_labels()
        handles.append(Line2D([], [], color="gray", ls="--", lw=1.0))
        labels.append("ideal: one HB domain, K = N")
        ax.legend(handles, labels, fontsize=7.5, loc="upper right")
    hw = panels[0][1].row(0, named=True)
    fig.suptitle(f"optimal PTD-P configuration per point; {hw['matrix_flops']:g} TFLOP/s, "
                 f"C_F {hw['nvlink_bandwidth']:g} GB/s, C_S {hw['ib_bandwidth']:g} GB/s per GPU", fontsize=9)
    return _save(fig, out, dpi)


def fig9(
    lf: pl.LazyFrame,
    out: str | Path,
    *,
    model: str = "gpt3_1t",
    ks: Sequence[int] = (8, 256),
    network: str = "rail_only",
    n_gpus: int | None = None,
    dpi: int = DPI,
    notes: list[str] | None = None,
) -> Path:
    """Seed 002 Fig. 9 (seed 000 Fig. 10): iteration time vs NIC bandwidth C_S (x axis, Gbps) for
    each HB-domain bandwidth C_F (lines, Tbps per GPU), one panel per HB-domain size in `ks`, from a
    hardware grid over nvlink_bandwidth x ib_bandwidth at one GPU count (the only one in the
    dataset unless `n_gpus` is given). Each panel states the mean gain of the largest C_F over the
    smallest (mean over C_S) and of the largest C_S over the smallest (mean over C_F)."""
    _require_columns(lf, ["model", "network", "nvs_size", "n_gpus", "global_batch", "iteration_time",
                          "nvlink_bandwidth", "ib_bandwidth"])
    ks = [int(k) for k in ks]
    filters: dict[str, Any] = {"model": model, "network": network, "nvs_size": ks}
    n = _gpu_count(lf, filters, n_gpus, "fig9")
    df = _rows(lf, **filters, n_gpus=n)
    _one_system(df, "fig9")
    for k in ks:
        if df.filter(pl.col("nvs_size") == k).is_empty():
            raise MissingData(f"has no feasible rows for model={model} network={network} nvs_size={k} n_gpus={n}")
    cfs, css = _axis_values(df, "nvlink_bandwidth"), _axis_values(df, "ib_bandwidth")
    if len(cfs) < 2 or len(css) < 2:
        raise MissingData(f"has {len(cfs)} nvlink_bandwidth x {len(css)} ib_bandwidth values for model={model} "
                          f"n_gpus={n}; fig9 needs a grid over both")
    other = _varying(df, [f for f in GRID_FIELDS if f not in ("nvlink_bandwidth", "ib_bandwidth")])
    if other:
        raise MissingData(f"varies {', '.join(other)} as well; fig9 needs only nvlink_bandwidth and "
                          f"ib_bandwidth to vary")
    best = _optimum(df, ["nvs_size", "nvlink_bandwidth", "ib_bandwidth"])

    fig = Figure(figsize=(5.2 * len(ks), 4.2), layout="constrained")
    axes = fig.subplots(1, len(ks), squeeze=False, sharey=True)[0]
    for ax, k in zip(axes, ks):
        part = best.filter(pl.col("nvs_size") == k)
        z = np.full((len(cfs), len(css)), np.nan)
        z[_index(cfs, part["nvlink_bandwidth"]), _index(css, part["ib_bandwidth"])] = \
            part["iteration_time"].to_numpy()
        for i, cf in enumerate(cfs):
            ax.plot(css * 8, z[i], marker="o", ms=4, lw=1.4, color=f"C{i}",
                    label=f"C_F {cf * 8 / 1e3:g} Tbps ({cf:g} GB/s)")
        with np.errstate(invalid="ignore"):
            gain_f = np.nanmean(1.0 - z[-1] / z[0])
            gain_s = np.nanmean(1.0 - z[:, -1] / z[:, 0])
        text = (f"time with C_F x{cfs[-1] / cfs[0]:g}: {-100 * gain_f:+.1f}% (mean over C_S)\n"
                f"time with C_S x{css[-1] / css[0]:g}: {-100 * gain_s:+.1f}% (mean over C_F)")
        if notes is not None:
            notes.append(f"{model} on {n} GPUs, K = {k}: " + text.replace("\n", "; "))
        ax.text(0.03, 0.04, text,
                transform=ax.transAxes, ha="left", va="bottom", fontsize=8,
                bbox={"boxstyle": "round,pad=0.3", "fc": "white", "alpha": 0.8, "lw": 0.5})
        ax.set_xticks(css * 8, [f"{c * 8:g}" for c in css], fontsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("NIC bandwidth C_S per GPU (Gbps)")
        ax.set_title(f"K = {k}", fontsize=10)
        ax.legend(fontsize=7.5, loc="upper right")
    axes[0].set_ylabel(METRICS["iteration_time"])
    fig.suptitle(f"{_label(MODEL_LABEL, model)}, global batch {int(best['global_batch'][0])}, {_gpus(n)} GPUs, "
                 f"{_label(NETWORK_LABEL, network)}: iteration time vs HB-domain (C_F) and NIC (C_S) bandwidth",
                 fontsize=10)
    return _save(fig, out, dpi)


def fig10(
    lf: pl.LazyFrame,
    out: str | Path,
    *,
    model: str = "gpt3_1t",
    network: str = "rail_only",
    n_gpus: int | None = None,
    ks: Sequence[int] | None = None,
    dpi: int = DPI,
    notes: list[str] | None = None,
) -> Path:
    """Seed 002 Fig. 10 (seed 000 Fig. 11): for one GPU count (the only one in the dataset unless
    `n_gpus` is given), (a) iteration time vs global batch for each HB-domain size K (all in the
    dataset unless `ks` is given) with the ideal K = N (network any_to_any) dashed, and (b) the
    relative performance ideal time / time vs global batch. Each batch is its own job."""
    _require_columns(lf, ["model", "network", "nvs_size", "n_gpus", "global_batch", "iteration_time"])
    filters: dict[str, Any] = {"model": model, "network": network}
    n = _gpu_count(lf, filters, n_gpus, "fig10")
    batches = sorted(_where(lf, {**filters, "n_gpus": n}).select(pl.col("global_batch").unique())
                     .collect()["global_batch"].to_list())
    if len(batches) < 2:
        raise MissingData(f"has global batch {', '.join(map(str, batches)) or 'none'} for {_describe(filters)} "
                          f"n_gpus={n}; fig10 needs several")
    parts = []
    for b in batches:
        df = _rows(lf, **filters, n_gpus=n, global_batch=b)
        _single_hardware(df, "fig10")
        if ks is not None:
            df = df.filter(pl.col("nvs_size").is_in([int(k) for k in ks]))
        ideal = _ideal(lf, "fig10", model=model, n_gpus=n, global_batch=b)
        t_ideal = float(ideal["iteration_time"][0])
        parts.append(_optimum(df, ["nvs_size"]).select(
            "global_batch", "nvs_size", "iteration_time",
            pl.lit(t_ideal).alias("ideal_time"),
            (pl.lit(t_ideal) / pl.col("iteration_time")).alias("relative")))
    data = pl.concat(parts)
    if ks is not None:
        lacking = sorted(set(int(k) for k in ks) - set(data["nvs_size"].to_list()))
        if lacking:
            raise MissingData(f"has no feasible rows for {_describe(filters)} n_gpus={n} "
                              f"nvs_size={','.join(map(str, lacking))}")
    k_all = sorted(data["nvs_size"].unique().to_list())
    colors = _k_colors(k_all)
    ideal = data.select("global_batch", "ideal_time").unique().sort("global_batch")

    fig = Figure(figsize=(12.0, 4.4), layout="constrained")
    ax_t, ax_r = fig.subplots(1, 2)
    for k in k_all:
        part = data.filter(pl.col("nvs_size") == k).sort("global_batch")
        x = part["global_batch"].to_numpy()
        ax_t.plot(x, part["iteration_time"].to_numpy(), marker="o", ms=3.5, lw=1.2, color=colors[k],
                  label=f"K = {_gpus(k)}")
        rel = part["relative"].to_numpy()
        if notes is not None:
            notes.append(f"{model} on {n} GPUs, K = {k}: relative performance "
                         + ", ".join(f"{b} {100 * r:.1f}%" for b, r in zip(x.tolist(), rel.tolist())))
        ax_r.plot(x, 100 * rel, marker="o", ms=3.5, lw=1.2, color=colors[k],
                  label=f"K = {_gpus(k)}: {100 * rel[0]:.0f}% -> {100 * rel[-1]:.0f}%")
    ax_t.plot(ideal["global_batch"].to_numpy(), ideal["ideal_time"].to_numpy(), color="black", ls="--", lw=1.2,
              label="ideal (K = N)")
    for ax in (ax_t, ax_r):
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches], fontsize=8)
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("global batch (sequences)")
    ax_t.set_ylim(bottom=0)
    ax_t.set_ylabel(METRICS["iteration_time"])
    ax_t.set_title("(a) iteration time", fontsize=10)
    ax_t.legend(fontsize=7, ncol=2, loc="upper left")
    ax_r.set_ylim(top=101)
    ax_r.set_ylabel("relative performance: ideal time / time (%)")
    ax_r.set_title("(b) relative performance to the ideal", fontsize=10)
    ax_r.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), title="K: smallest -> largest batch",
                title_fontsize=7)
    fig.suptitle(f"{_label(MODEL_LABEL, model)} on {_gpus(n)} GPUs, {_label(NETWORK_LABEL, network)}, "
                 f"optimal configuration per point", fontsize=10)
    return _save(fig, out, dpi)


#: figure name -> (function, the sweep whose dataset it draws)
FIGURES = {
    "fig4": (fig4, "fig4"),
    "fig5": (fig5, "seed001"),
    "figA4": (figA4, "seed001"),
    "figA5": (figA5, "fig_a5"),
    "figA6": (figA6, "fig_a6"),
    "fig8": (fig8, "railonly_k"),
    "fig9": (fig9, "railonly_bandwidth"),
    "fig10": (fig10, "railonly_batch"),
}


class DrawFigures:
    """Hydra callback: when a multirun (or a single run) ends, draw figures from its dataset.

    Configured by a sweep, e.g. in conf/sweep/seed001.yaml:

        hydra:
          callbacks:
            figures:
              _target_: dse.report.DrawFigures
              figures: [fig5, figA4]

    The PNGs go to `out_dir` (default outputs/figures/); a figure whose data is missing is reported
    in the log and skipped, so the sweep's own results are never lost to a drawing problem.
    """

    def __init__(self, figures: Sequence[str], out_dir: str = "outputs/figures"):
        unknown = [f for f in figures if f not in FIGURES]
        if unknown:
            raise ValueError(f"figures = {unknown[0]!r}: not a figure; valid: {', '.join(FIGURES)}")
        self.figures = list(figures)
        self.out_dir = Path(out_dir)

    def draw(self, config) -> list[Path]:
        import logging

        from dse.io import scan

        log = logging.getLogger("dse")
        root = Path(str(config.output.root)) / str(config.study)
        done = []
        for name in self.figures:
            try:
                path = FIGURES[name][0](scan(root), self.out_dir / f"{name}.png")
            except (MissingData, FileNotFoundError) as err:
                log.warning("%s not drawn: %s", name, err)
                continue
            log.info("%s -> %s", name, path)
            done.append(path)
        return done

    # the hooks Hydra calls (hydra.experimental.callback.Callback)
    def on_multirun_end(self, config, **kwargs) -> None:
        self.draw(config)

    def on_run_end(self, config, **kwargs) -> None:
        self.draw(config)

    def on_run_start(self, config, **kwargs) -> None:
        pass

    def on_multirun_start(self, config, **kwargs) -> None:
        pass

    def on_job_start(self, config, **kwargs) -> None:
        pass

    def on_job_end(self, config, job_return, **kwargs) -> None:
        pass

    def on_compose_config(self, config, **kwargs) -> None:
        pass
