"""What every figure shares: labels and colours, and the selection of the rows a figure draws.

A figure takes a lazy scan of a dataset (`dse.results.io.scan`) and draws the optimum of every group it
shows (`dse.explore.ranking.best_rows`: the fastest feasible row, ties broken as in the search, so that a
dataset of top-k rows and one of every row give the same figure). A dataset that lacks what a
figure needs raises `MissingData`, whose message names the missing columns or groups.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from dse.results.io import HARDWARE, atomic_path
from dse.results.query import where
from dse.explore.space import COLUMNS

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
    ("t_ep_comm", "EP all-to-all", "#ccb974"),
    ("t_dp_comm", "DP comm", "#55a868"),
    ("t_pp_comm", "PP comm", "#937860"),
    ("t_bubble", "PP bubble", "#c44e52"),
)

#: the candidate columns a figure shows (every one but the railonly profile's interleave)
CANDIDATE = tuple(c for c in COLUMNS if c != "interleave")
GRID_FIELDS = tuple(h for h in HARDWARE if h != "nvs_size")
DPI = 90


class MissingData(ValueError):
    """The dataset lacks the columns or rows a figure needs. The message completes the sentence
    "dataset DIR ...", e.g. "has no rows for model=gpt3_1t system=b200 nvs_size=8"."""


# ----------------------------------------------------------------------------------------------
# selection


def label_of(mapping: Mapping[str, str], key: Any) -> str:
    return mapping.get(key, str(key))


def describe(filters: Mapping[str, Any]) -> str:
    parts = []
    for k, v in filters.items():
        if isinstance(v, (list, tuple, set)):
            v = ",".join(str(x) for x in v)
        parts.append(f"{k}={v}")
    return " ".join(parts)


def require_columns(lf: pl.LazyFrame, columns: Iterable[str]) -> None:
    have = set(lf.collect_schema().names())
    missing = [c for c in columns if c not in have]
    if missing:
        raise MissingData(f"lacks columns {', '.join(missing)}")


def feasible_rows(lf: pl.LazyFrame, **filters: Any) -> pl.DataFrame:
    """Feasible rows matching `filters`; MissingData naming the group when there are none."""
    require_columns(lf, list(filters) + ["feasible", "throughput"])
    df = where(lf, **filters).collect()
    if df.is_empty():
        raise MissingData(f"has no rows for {describe(filters)} (not searched, or nothing fits)")
    feasible = df.filter(pl.col("feasible"))
    if feasible.is_empty():
        raise MissingData(f"has no feasible rows for {describe(filters)}")
    for col in ("profile", "global_batch"):
        if col in feasible.columns and feasible[col].n_unique() > 1:
            values = ", ".join(str(v) for v in sorted(feasible[col].unique().to_list()))
            raise MissingData(f"mixes {col} {values} for {describe(filters)}; keep one per dataset")
    return feasible


def varying(df: pl.DataFrame, fields: Iterable[str] = GRID_FIELDS) -> list[str]:
    return [f for f in fields if f in df.columns and df[f].n_unique() > 1]


def single_hardware(df: pl.DataFrame, what: str) -> None:
    """Each system of `df` must be one hardware point (no grid axis)."""
    for (system,), part in df.group_by(["system"]):
        grid = varying(part)
        if grid:
            raise MissingData(f"has a hardware grid for system={system} ({', '.join(grid)} vary); "
                              f"{what} needs one point per system")


def strategy_filter(model: str, strategy: str) -> dict[str, Any]:
    if strategy not in STRATEGY_CHOICES:
        raise ValueError(f"strategy = {strategy!r}: one of {', '.join(STRATEGY_CHOICES)}")
    if strategy == "best":
        return {}
    if strategy == "paper":
        return {"strategy": PAPER_STRATEGY.get(model, "tp1d")}
    return {"strategy": strategy}


def strategy_title(df: pl.DataFrame) -> str:
    names = [s for s in STRATEGY_LABEL if s in set(df["strategy"].to_list())]
    return "best of " + ", ".join(label_of(STRATEGY_LABEL, s) for s in names) if len(names) > 1 else \
        label_of(STRATEGY_LABEL, names[0] if names else "")


def check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise ValueError(f"metric = {metric!r}: one of {', '.join(METRICS)}")


def one_system(df: pl.DataFrame, what: str) -> None:
    systems = sorted(df["system"].unique().to_list())
    if len(systems) > 1:
        raise MissingData(f"has systems {', '.join(systems)} at the same GPU count; {what} draws the hardware "
                          f"grid of one system")


def axis_values(df: pl.DataFrame, col: str) -> np.ndarray:
    return np.array(sorted(df[col].unique().to_list()), dtype=float)


def grid_index(values: np.ndarray, column: pl.Series) -> np.ndarray:
    idx = np.searchsorted(values, column.to_numpy())
    return np.clip(idx, 0, len(values) - 1)


# ----------------------------------------------------------------------------------------------
# drawing


def system_order(systems: Iterable[str]) -> list[str]:
    systems = set(systems)
    return [s for s in GENERATIONS if s in systems] + sorted(systems - set(GENERATIONS))


def system_colors(systems: Sequence[str]) -> dict[str, Any]:
    extra = iter(["tab:purple", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan"])
    return {s: SYSTEM_COLOR.get(s) or next(extra, "black") for s in systems}


def nvs_style(nvs: int) -> tuple[str, str]:
    return NVS_STYLE.get(int(nvs), ("v", "-"))


def log2_axis(ax, counts: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(counts))
    ax.set_xticklabels([gpus_label(n) for n in counts], fontsize=8)
    ax.minorticks_off()


def gpus_label(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def save(fig: Figure, out: str | Path, dpi: int) -> Path:
    """Write `fig` to `out` in the format its suffix names (PNG without one), atomically
    (`dse.results.io.atomic_path`)."""
    out = Path(out)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=dpi, format=out.suffix.lstrip(".") or "png")
    return out


def system_nvs_handles(systems: Sequence[str], colors: Mapping[str, Any], nvs_sizes: Sequence[int]) -> list:
    """Legend entries: a colour per system, a marker and line style per NVS size."""
    handles = [Patch(color=colors[s], label=label_of(SYSTEM_LABEL, s)) for s in systems]
    handles += [Line2D([], [], color="black", marker=nvs_style(n)[0], ls=nvs_style(n)[1], label=f"NVS{n}")
                for n in nvs_sizes]
    return handles
