"""Writers of a GPU-pair traffic matrix (`dse.traffic.pairs.PairTraffic`): a long Parquet table and
heat maps as PNG (seed 000 Figures 4-5), each written atomically (`dse.results.io.atomic_path`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
from matplotlib import colormaps
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from dse.results.io import atomic_path
from dse.traffic.pairs import PairTraffic
from dse.traffic.per_gpu import TYPE_NAMES
from kernels.traffic import LINKS
from kernels.units import BYTES_PER_GB


def pair_frame(pt: PairTraffic) -> pl.DataFrame:
    """Long format, one row per (src, dst, type) with traffic: src, dst (ranks), type (TP, CP, DP,
    PP, EP), bytes (bytes per iteration, float), link (hb, rail, cross), src/dst domain and rail."""
    cls = pt.link_class()
    parts = []
    for t, m in pt.matrices.items():
        src, dst = np.nonzero(m)
        parts.append(pl.DataFrame({
            "src": src.astype(np.int64), "dst": dst.astype(np.int64),
            "type": np.full(len(src), t), "bytes": m[src, dst] * BYTES_PER_GB,
            "link": np.array(LINKS, dtype=object)[cls[src, dst]].astype(str),
            "src_domain": pt.domain[src], "dst_domain": pt.domain[dst],
            "src_rail": pt.rail[src], "dst_rail": pt.rail[dst],
        }, schema={"src": pl.Int64, "dst": pl.Int64, "type": pl.Utf8, "bytes": pl.Float64, "link": pl.Utf8,
                   "src_domain": pl.Int64, "dst_domain": pl.Int64, "src_rail": pl.Int64, "dst_rail": pl.Int64}))
    return pl.concat(parts)


def write_parquet(pt: PairTraffic, path) -> Path:
    """`pair_frame` as Parquet, written atomically; file metadata key `dse.traffic` holds the
    configuration and the per-GPU summary as JSON."""
    table = pair_frame(pt).to_arrow()
    meta = {"config": pt.config, "forward": pt.forward, "per_gpu_gb": {k: v for k, v in pt.per_gpu.items()
                                                                      if isinstance(v, (int, float))}}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           b"dse.traffic": json.dumps(meta, default=str).encode()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def plot(pt: PairTraffic, path, dpi: int = 90, types: tuple[str, ...] | None = None) -> Path:
    """Heatmaps of the pair matrices (seed 000 Figures 4-5): one panel per type with traffic (or
    `types`) and the total, GB per iteration on one log colour scale, zero pairs blank; HB domains
    outlined in orange, domain boundaries as thin lines. Written atomically as PNG."""
    names = [t for t in TYPE_NAMES if (types is None and pt.matrices[t].any()) or (types and t in types)]
    panels = [(t, pt.matrices[t]) for t in names] + [("total", pt.total())]
    positive = np.concatenate([m[m > 0] for _, m in panels])
    vmin, vmax = (positive.min(), positive.max()) if positive.size else (1e-3, 1.0)
    vmin = max(vmin, vmax * 1e-8)
    if vmin >= vmax:
        vmin = vmax / 10.0
    norm = LogNorm(vmin=vmin, vmax=vmax)
    n, k = pt.place.n, pt.place.per_domain
    fig = Figure(figsize=(3.8 * len(panels) + 0.9, 4.3))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    cmap = colormaps["viridis"].with_extremes(bad="white")
    image = None
    for ax, (title, m) in zip(axes, panels):
        image = ax.imshow(np.ma.masked_less_equal(m, 0.0), cmap=cmap, norm=norm, interpolation="nearest",
                          extent=(-0.5, n - 0.5, n - 0.5, -0.5))
        for b in range(k, n, k):
            ax.axhline(b - 0.5, color="0.85", lw=0.4)
            ax.axvline(b - 0.5, color="0.85", lw=0.4)
        for start in range(0, n, k):
            ax.add_patch(Rectangle((start - 0.5, start - 0.5), k, k, fill=False, ec="tab:orange", lw=0.7, alpha=0.8))
        share = m.sum() / max(pt.total().sum(), 1e-300)
        ax.set_title(f"{title} ({100 * share:.3g}% of bytes)" if title != "total" else "total", fontsize=10)
        ax.set_xlabel("destination GPU", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("source GPU", fontsize=8)
    c = pt.config
    n2 = "cp" if c["strategy"] == "tp1d" else "n2"  # tp1d's n2 is its context-parallel degree
    fig.suptitle(
        f"{c['model']} on {c['system']}, {c['strategy']} n1={c['n1']} {n2}={c['n2']} n_p={c['n_p']} n_d={c['n_d']} "
        f"b={c['microbatch']}, {n} GPUs in HB domains of {k} (orange), {pt.network}"
        + (" (forwarded)" if pt.forward else ""), fontsize=10)
    fig.subplots_adjust(left=0.05, right=0.9, bottom=0.14, top=0.82, wspace=0.25)
    cax = fig.add_axes((0.915, 0.16, 0.012, 0.64))
    bar = fig.colorbar(image, cax=cax)
    bar.set_label("GB per iteration", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    return Path(path)
