"""Seed 002 Fig. 8-10 (seed 000 Fig. 9-11): HB-domain studies of rail-only networks.

Each figure draws the optimum of every point on a rail-only network against the ideal cluster,
network any_to_any (one HB domain holds every GPU, K = N): iteration time vs HB-domain size K
(Fig. 8), vs NIC and HB-domain bandwidth (Fig. 9) and vs global batch (Fig. 10). The figures whose
numbers the README quotes hand them back as text lines (`notes`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dse.figures.common import (
    DPI,
    GRID_FIELDS,
    METRICS,
    MODEL_LABEL,
    MissingData,
    axis_values,
    describe,
    feasible_rows,
    gpus_label,
    grid_index,
    label_of,
    log2_axis,
    one_system,
    require_columns,
    save,
    single_hardware,
    varying,
)
from dse.results.query import where
from dse.explore.ranking import best_rows
from dse.spec.checks import check_output_file
from kernels.comm_types import ANY_TO_ANY

#: network of the ideal cluster of seeds 000/002: one HB domain holds every GPU (K = N)
IDEAL = ANY_TO_ANY
NETWORK_LABEL = {"rail_only": "rail-only", "rail_optimized": "rail-optimized", "any_to_any": "any-to-any",
                 "two_tier": "two-tier"}


def _gpu_count(lf: pl.LazyFrame, filters: Mapping[str, Any], n_gpus: int | None, what: str) -> int:
    """`n_gpus`, or the only GPU count of the rows matching `filters`."""
    if n_gpus is not None:
        return int(n_gpus)
    require_columns(lf, list(filters) + ["n_gpus"])
    counts = sorted(where(lf, **filters).select(pl.col("n_gpus").unique()).collect()["n_gpus"].to_list())
    if not counts:
        raise MissingData(f"has no rows for {describe(filters)} (not searched, or nothing fits)")
    if len(counts) > 1:
        raise MissingData(f"has GPU counts {', '.join(map(str, counts))} for {describe(filters)}; "
                          f"{what} draws one: give n_gpus")
    return int(counts[0])


def _ideal(lf: pl.LazyFrame, what: str, **filters: Any) -> pl.DataFrame:
    """The optimum per GPU count of the ideal cluster (network any_to_any) among rows `filters`."""
    df = feasible_rows(lf, **filters, network=IDEAL)
    single_hardware(df, what)
    return best_rows(df, ["n_gpus"])


def _same_batch(a: pl.DataFrame, b: pl.DataFrame, what: str, filters: Mapping[str, Any]) -> int:
    """The one global batch of two row sets (e.g. an HB-domain sweep and its ideal)."""
    batches = sorted(set(a["global_batch"].to_list()) | set(b["global_batch"].to_list()))
    if len(batches) > 1:
        raise MissingData(f"has global batches {', '.join(map(str, batches))} for {describe(filters)} and its "
                          f"ideal ({IDEAL}); {what} compares one batch")
    return int(batches[0])


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
    out = check_output_file("--out", out)  # before any row is read
    require_columns(lf, ["model", "network", "nvs_size", "n_gpus", "global_batch", "iteration_time"])
    panels = []
    for model in models:
        filters: dict[str, Any] = {"model": model, "network": network}
        if n_gpus is not None:
            filters["n_gpus"] = [int(n) for n in n_gpus]
        df = feasible_rows(lf, **filters)
        single_hardware(df, "fig8")
        best = best_rows(df, ["n_gpus", "nvs_size"])
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
            label = f"{gpus_label(n)} GPUs"
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
        log2_axis(ax, sorted(best["nvs_size"].unique().to_list()))
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("HB domain size K (GPUs)")
        ax.set_ylabel(METRICS["iteration_time"])
        ax.set_title(f"{label_of(MODEL_LABEL, model)}, global batch {batch}, {label_of(NETWORK_LABEL, network)}",
                     fontsize=10)
        handles, labels = ax.get_legend_handles_labels()
        handles.append(Line2D([], [], color="gray", ls="--", lw=1.0))
        labels.append("ideal: one HB domain, K = N")
        ax.legend(handles, labels, fontsize=7.5, loc="upper right")
    hw = panels[0][1].row(0, named=True)
    fig.suptitle(f"optimal PTD-P configuration per point; {hw['matrix_flops']:g} TFLOP/s, "
                 f"C_F {hw['nvlink_bandwidth']:g} GB/s, C_S {hw['ib_bandwidth']:g} GB/s per GPU", fontsize=9)
    return save(fig, out, dpi)


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
    out = check_output_file("--out", out)  # before any row is read
    require_columns(lf, ["model", "network", "nvs_size", "n_gpus", "global_batch", "iteration_time",
                          "nvlink_bandwidth", "ib_bandwidth"])
    ks = [int(k) for k in ks]
    filters: dict[str, Any] = {"model": model, "network": network, "nvs_size": ks}
    n = _gpu_count(lf, filters, n_gpus, "fig9")
    df = feasible_rows(lf, **filters, n_gpus=n)
    one_system(df, "fig9")
    for k in ks:
        if df.filter(pl.col("nvs_size") == k).is_empty():
            raise MissingData(f"has no feasible rows for model={model} network={network} nvs_size={k} n_gpus={n}")
    cfs, css = axis_values(df, "nvlink_bandwidth"), axis_values(df, "ib_bandwidth")
    if len(cfs) < 2 or len(css) < 2:
        raise MissingData(f"has {len(cfs)} nvlink_bandwidth x {len(css)} ib_bandwidth values for model={model} "
                          f"n_gpus={n}; fig9 needs a grid over both")
    other = varying(df, [f for f in GRID_FIELDS if f not in ("nvlink_bandwidth", "ib_bandwidth")])
    if other:
        raise MissingData(f"varies {', '.join(other)} as well; fig9 needs only nvlink_bandwidth and "
                          f"ib_bandwidth to vary")
    best = best_rows(df, ["nvs_size", "nvlink_bandwidth", "ib_bandwidth"])

    fig = Figure(figsize=(5.2 * len(ks), 4.2), layout="constrained")
    axes = fig.subplots(1, len(ks), squeeze=False, sharey=True)[0]
    for ax, k in zip(axes, ks):
        part = best.filter(pl.col("nvs_size") == k)
        z = np.full((len(cfs), len(css)), np.nan)
        z[grid_index(cfs, part["nvlink_bandwidth"]), grid_index(css, part["ib_bandwidth"])] = \
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
    fig.suptitle(f"{label_of(MODEL_LABEL, model)}, global batch {int(best['global_batch'][0])}, {gpus_label(n)} GPUs, "
                 f"{label_of(NETWORK_LABEL, network)}: iteration time vs HB-domain (C_F) and NIC (C_S) bandwidth",
                 fontsize=10)
    return save(fig, out, dpi)


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
    out = check_output_file("--out", out)  # before any row is read
    require_columns(lf, ["model", "network", "nvs_size", "n_gpus", "global_batch", "iteration_time"])
    filters: dict[str, Any] = {"model": model, "network": network}
    n = _gpu_count(lf, filters, n_gpus, "fig10")
    batches = sorted(where(lf, **{**filters, "n_gpus": n}).select(pl.col("global_batch").unique())
                     .collect()["global_batch"].to_list())
    if len(batches) < 2:
        raise MissingData(f"has global batch {', '.join(map(str, batches)) or 'none'} for {describe(filters)} "
                          f"n_gpus={n}; fig10 needs several")
    parts = []
    for b in batches:
        df = feasible_rows(lf, **filters, n_gpus=n, global_batch=b)
        single_hardware(df, "fig10")
        if ks is not None:
            df = df.filter(pl.col("nvs_size").is_in([int(k) for k in ks]))
        ideal = _ideal(lf, "fig10", model=model, n_gpus=n, global_batch=b)
        t_ideal = float(ideal["iteration_time"][0])
        parts.append(best_rows(df, ["nvs_size"]).select(
            "global_batch", "nvs_size", "iteration_time",
            pl.lit(t_ideal).alias("ideal_time"),
            (pl.lit(t_ideal) / pl.col("iteration_time")).alias("relative")))
    data = pl.concat(parts)
    if ks is not None:
        lacking = sorted(set(int(k) for k in ks) - set(data["nvs_size"].to_list()))
        if lacking:
            raise MissingData(f"has no feasible rows for {describe(filters)} n_gpus={n} "
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
                  label=f"K = {gpus_label(k)}")
        rel = part["relative"].to_numpy()
        if notes is not None:
            notes.append(f"{model} on {n} GPUs, K = {k}: relative performance "
                         + ", ".join(f"{b} {100 * r:.1f}%" for b, r in zip(x.tolist(), rel.tolist())))
        ax_r.plot(x, 100 * rel, marker="o", ms=3.5, lw=1.2, color=colors[k],
                  label=f"K = {gpus_label(k)}: {100 * rel[0]:.0f}% -> {100 * rel[-1]:.0f}%")
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
    fig.suptitle(f"{label_of(MODEL_LABEL, model)} on {gpus_label(n)} GPUs, {label_of(NETWORK_LABEL, network)}, "
                 f"optimal configuration per point", fontsize=10)
    return save(fig, out, dpi)
