"""Plain-text tables for the console: aligned columns, numbers right-aligned, no truncation."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from dse.spec.checks import TP1D_NAMES
from kernels.params import PRECISIONS, RECOMPUTE


def fmt_value(v: Any, spec: str | None = None) -> str:
    """One cell: `spec` is a format spec ('.4g', '.2%', ...); floats default to 6 significant digits."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and math.isnan(v):
        return "-"
    if spec:
        try:
            return format(v, spec)
        except (TypeError, ValueError):
            return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.6g}"
    return str(v)


def render(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str] | None = None,
    formats: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    title: str | None = None,
) -> str:
    """Render rows (dicts) as an aligned text table."""
    formats = dict(formats or {})
    headers = dict(headers or {})
    if columns is None:
        columns = list(rows[0].keys()) if rows else []
    cells = [[fmt_value(r.get(c), formats.get(c)) for c in columns] for r in rows]
    heads = [headers.get(c, c) for c in columns]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(heads)]
    numeric = [
        all(_is_number(r.get(c)) for r in rows) and bool(rows) for c in columns
    ]

    def line(vals):
        out = []
        for v, w, num in zip(vals, widths, numeric):
            out.append(v.rjust(w) if num else v.ljust(w))
        return "  ".join(out).rstrip()

    parts = []
    if title:
        parts.append(title)
    parts.append(line(heads))
    parts.append("  ".join("-" * w for w in widths))
    parts.extend(line(r) for r in cells)
    return "\n".join(parts)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) or v is None


def render_frame(frame, columns=None, formats=None, headers=None, title=None) -> str:
    """Render a Polars DataFrame."""
    cols = list(columns) if columns is not None else frame.columns
    return render(frame.select(cols).to_dicts(), cols, formats, headers, title)


#: Candidate axes beyond the degrees and placements: their value when unused (the kernels' code)
#: and their names by code (None: printed as the number).
MECHANISMS = {
    "interleave": (1, None),
    "recompute": (1, RECOMPUTE),
    "seq_par": (1, ("off", "on")),
    "precision": (0, PRECISIONS),
    "zero": (1, None),
    "ep": (1, None),  # expert-parallel degree (MoE models)
}


def mechanism_names(frame, column: str):
    """A mechanism column as the names it prints with: from the kernels' integer codes (a search
    frame), a dataset's names (Enum or string) or its booleans (seq_par); a column without names
    (interleave, zero, ep) as it is."""
    import polars as pl

    names = MECHANISMS[column][1]
    col = frame[column]
    if names is None:
        return col
    if col.dtype == pl.Boolean:
        col = col.cast(pl.Int64)
    if col.dtype.is_integer():
        return col.replace_strict(list(range(len(names))), list(names), return_dtype=pl.Utf8)
    return col.cast(pl.Utf8)


def with_mechanisms(frame, cols: Sequence[str], after: str = "microbatch"):
    """(frame, cols) with the mechanism columns that differ from their unused value anywhere in
    `frame` inserted after `after`, by name (`mechanism_names`: a search frame's codes and a
    dataset's names print alike), so that rows which differ only in them never print alike."""
    shown = []
    for c, (unused, names) in MECHANISMS.items():
        if c in frame.columns and frame.height:
            values = mechanism_names(frame, c)
            if (values != (names[unused] if names else unused)).any():
                shown.append(c)
                frame = frame.with_columns(values.alias(c))
    cols = list(cols)
    at = cols.index(after) + 1 if after in cols else len(cols)
    return frame, cols[:at] + shown + cols[at:]


#: tp1d's n2 and nvs2 as printed: Megatron's context-parallel degree and its GPUs per domain.
CONTEXT_NAMES = TP1D_NAMES


def with_context_columns(frame, cols: Sequence[str], strategy: str):
    """(frame, cols) as a strategy's table prints them: tp1d's n2 is its context-parallel degree, so
    its n2 and nvs2 print as cp and nvs_cp when some row has cp > 1 and are left out otherwise; the
    2D strategies keep n2 and nvs2."""
    if strategy != "tp1d":
        return frame, list(cols)
    if frame.height and "n2" in frame.columns and (frame["n2"] > 1).any():
        frame = frame.rename({k: v for k, v in CONTEXT_NAMES.items() if k in frame.columns})
        return frame, [CONTEXT_NAMES.get(c, c) for c in cols]
    return frame, [c for c in cols if c not in CONTEXT_NAMES]
