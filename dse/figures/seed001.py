"""The figures of seed 001: the optimal configuration and its time breakdown (Fig. 4), training
time per GPU generation and NVS size (Fig. 5), and the speedup of the 2D strategies (Fig. A4).

Strategies: seed 001 draws GPT3-1T with 1D TP and ViT-ERA5 with 2D TP (Fig. 4, 5; 1D TP cannot fit
the ViT). `strategy="paper"` follows that; `"best"` takes the fastest of every strategy in the
dataset for each point; a strategy name draws that strategy for every model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from dse.figures.common import (
    BREAKDOWN,
    CANDIDATE,
    DPI,
    METRICS,
    MODEL_LABEL,
    STRATEGY_LABEL,
    SYSTEM_LABEL,
    MissingData,
    check_metric,
    feasible_rows,
    gpus_label,
    label_of,
    log2_axis,
    nvs_style,
    require_columns,
    save,
    single_hardware,
    strategy_filter,
    strategy_title,
    system_colors,
    system_nvs_handles,
    system_order,
)
from dse.explore.ranking import best_rows
from dse.spec.checks import check_output_file


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
    out = check_output_file("--out", out)  # before any row is read
    if breakdown not in ("fraction", "seconds"):
        raise ValueError(f"breakdown = {breakdown!r}: 'fraction' or 'seconds'")
    require_columns(lf, ["model", "strategy", "system", "nvs_size", "n_gpus", "microbatches", "memory",
                          "hbm_capacity", "iteration_time"] + list(CANDIDATE) + [c for c, _, _ in BREAKDOWN])
    panels = []
    for model in models:
        filters = {"model": model, **strategy_filter(model, strategy), "system": system, "nvs_size": nvs_size}
        df = feasible_rows(lf, **filters)
        single_hardware(df, "fig4")
        panels.append((model, best_rows(df, ["n_gpus"])))

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
        top.set_xticks(x, [gpus_label(n) for n in counts], fontsize=8)
        top.set_xlim(-0.6, len(counts) - 0.4)
        mem = top.twinx()
        cap = float(best["hbm_capacity"].max())
        mem.plot(x, best["memory"].to_numpy(), "o", color="black", ms=6, label="memory per GPU")
        mem.axhline(cap, color="black", lw=0.8, ls="--")
        mem.text(len(counts) - 0.45, cap, f"HBM {cap:g} GB", ha="right", va="bottom", fontsize=7)
        mem.set_ylim(0, cap * 1.4)
        mem.set_ylabel("memory per GPU (GB)")
        top.set_title(f"{label_of(MODEL_LABEL, model)}, {strategy_title(best)} on "
                      f"{label_of(SYSTEM_LABEL, system)}, NVS {nvs_size}", fontsize=10)
        handles, labels = top.get_legend_handles_labels()
        h2, l2 = mem.get_legend_handles_labels()
        top.legend(handles + h2, labels + l2, fontsize=7, ncol=3, loc="upper left", framealpha=0.8)

        t = best["iteration_time"].to_numpy()
        base = np.zeros(len(counts))
        for col, label, color in BREAKDOWN:
            v = best[col].fill_null(0.0).to_numpy()  # t_ep_comm: null in schema-8 files
            if col == "t_ep_comm" and not v.any():  # a dense model's: not in the legend
                continue
            v = v / t if breakdown == "fraction" else v
            bottom.bar(x, v, 0.7, bottom=base, label=label, color=color)
            base = base + v
        bottom.set_xticks(x, [gpus_label(n) for n in counts], fontsize=8)
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
    return save(fig, out, dpi)


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
    out = check_output_file("--out", out)  # before any row is read
    check_metric(metric)
    require_columns(lf, ["model", "strategy", "system", "nvs_size", "n_gpus", metric])
    panels = []
    for model in models:
        df = feasible_rows(lf, model=model, **strategy_filter(model, strategy))
        single_hardware(df, "fig5")
        panels.append((model, best_rows(df, ["system", "nvs_size", "n_gpus"])))
    systems = system_order(s for _, b in panels for s in b["system"].unique().to_list())
    colors = system_colors(systems)
    nvs_all = sorted({int(v) for _, b in panels for v in b["nvs_size"].unique().to_list()})

    fig = Figure(figsize=(7.6, 4.0 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (model, best) in zip(axes, panels):
        for system in systems:
            for nvs in nvs_all:
                part = best.filter((pl.col("system") == system) & (pl.col("nvs_size") == nvs)).sort("n_gpus")
                if part.is_empty():
                    continue
                marker, ls = nvs_style(nvs)
                ax.plot(part["n_gpus"].to_numpy(), part[metric].to_numpy(), marker=marker, ls=ls,
                        color=colors[system], ms=4.5, lw=1.3)
        counts = sorted(best["n_gpus"].unique().to_list())
        log2_axis(ax, counts)
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_ylabel(METRICS[metric])
        ax.set_title(f"{label_of(MODEL_LABEL, model)} with {strategy_title(best)}", fontsize=10)
    axes[-1].set_xlabel("number of GPUs")
    handles = system_nvs_handles(systems, colors, nvs_all)
    axes[0].legend(handles=handles, fontsize=8, ncol=2, loc="upper right")
    return save(fig, out, dpi)


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
    out = check_output_file("--out", out)  # before any row is read
    require_columns(lf, ["model", "strategy", "system", "nvs_size", "n_gpus", "iteration_time"])
    keys = ["system", "nvs_size", "n_gpus"]
    base = feasible_rows(lf, model=model, strategy=baseline)
    single_hardware(base, "figA4")
    base = best_rows(base, keys).select(keys + [pl.col("iteration_time").alias("t_base")])
    panels = []
    for s in strategies:
        other = feasible_rows(lf, model=model, strategy=s)
        single_hardware(other, "figA4")
        joined = best_rows(other, keys).join(base, on=keys, how="inner").with_columns(
            (pl.col("t_base") / pl.col("iteration_time")).alias("speedup"))
        if joined.is_empty():
            raise MissingData(f"has no GPU count where both {baseline} and {s} are feasible for model={model}")
        panels.append((s, joined))
    systems = system_order(s for _, j in panels for s in j["system"].unique().to_list())
    colors = system_colors(systems)
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
                marker, ls = nvs_style(nvs)
                ax.plot(part["n_gpus"].to_numpy(), part["speedup"].to_numpy(), marker=marker, ls=ls,
                        color=colors[system], ms=5, lw=1.0, alpha=0.9)
        log2_axis(ax, sorted(joined["n_gpus"].unique().to_list()))
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("number of GPUs")
        ax.set_title(f"{label_of(MODEL_LABEL, model)}: {label_of(STRATEGY_LABEL, s)} over "
                     f"{label_of(STRATEGY_LABEL, baseline)}", fontsize=10)
    axes[0].set_ylabel(f"speedup (time {label_of(STRATEGY_LABEL, baseline)} / time 2D)")
    handles = system_nvs_handles(systems, colors, nvs_all)
    axes[-1].legend(handles=handles, fontsize=8, ncol=2, loc="upper right")
    return save(fig, out, dpi)
