"""Measured-run CSVs: reading and checking each row before any compute (`read_runs`), several
files as one. The schema (columns, defaults, choices, bounds, the packaged sets) is
`dse.truth.schema`'s, re-exported here.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any

import polars as pl

from dse.spec.specs import SpecError
from dse.truth.experts import (PRESET_SHAPE, expert_checks, expert_values, number_cell, preset_spec,
                               short as _short, unmodelled_modules, whole as _int)
from dse.truth.placement import gpu_rule, resolve_gpu
from dse.truth.schema import (  # noqa: F401  (the schema's names, for callers of dse.truth.runs)
    BOOL_COLUMNS, CHOICES, CORPUS, DEFAULT_ATTENTION, DEFAULT_OVERLAP, DEFAULT_ZERO, DUPLICATE, FP8_RECIPES,
    GIB_PER_GB, INT_BOUNDS, INT_COLUMNS, NAMED_LABELS, NEAR_NAME, NOT_YET_MODELLED, OPTIONAL_COLUMNS, OUTPUT_COLUMNS,
    PACKAGED_CSV, PARTS, PRECISION_CODES, RECOMPUTE_CODES, REQUIRED_COLUMNS, SCHEMA_COLUMNS, SEQ_PAR_CODES,
    MeasuredError, MeasuredRuns, RowError, corpus_paths, packaged_sets, resolve_csv, resolve_many)
from kernels.params import RECOMPUTE_MODULES


# --------------------------------------------------------------------------------------------
# reading and checking


def _read_many(paths: list[Path]) -> MeasuredRuns:
    """Several CSVs as one set of runs: columns united (a column one file lacks is null in its
    rows, or its default for a schema column), rows numbered on in file order."""
    if not paths:
        raise MeasuredError("csv: give at least one measured-runs file")
    seen: dict[Path, Path] = {}
    for p in paths:
        key = p.resolve() if p.exists() else p
        if key in seen:
            raise MeasuredError(f"csv = {str(p)!r}: given twice (also as {str(seen[key])!r}); its runs would count "
                                "twice; give each file once ('corpus' holds " + ", ".join(CORPUS) + ")")
        seen[key] = p
    parts, errors, runs = [], [], []
    columns: list[str] = []
    labels: list[str] = []
    for p in paths:
        one, keys = _read_one(p)
        offset = len(runs)  # rows are numbered on across the files
        rows = one.rows.with_columns((pl.col("row") + offset).alias("row"))
        if "source_id" not in rows.columns:
            rows = rows.with_columns(pl.lit(p.stem, dtype=pl.Utf8).alias("source_id"))
        parts.append(rows)
        errors += [RowError(e.row + offset, e.model, e.column, e.message, file=p.name, line=e.row) for e in one.errors]
        runs += [(key, model, p.name, line) for line, (key, model) in enumerate(keys, start=1)]
        columns += [c for c in one.columns if c not in columns]
        labels += [c for c in one.labels if c not in labels]
    if "source_id" not in columns:
        columns.append("source_id")
        labels.append("source_id")
    rows = pl.concat(parts, how="diagonal_relaxed")
    repeats = []  # a run in two files, or twice in one, would count twice: one check over every file
    for row, first in _repeats([key for key, *_ in runs]).items():
        (_, model, name, line), (_, _, first_name, first_line) = runs[row - 1], runs[first - 1]
        repeats.append(RowError(row, model, DUPLICATE, _repeat_message(f"row {first} ({first_name} row {first_line})"),
                                file=name, line=line))
    rows, errors = _drop_repeats(rows, errors, repeats)
    return MeasuredRuns(rows=rows.select("row", *columns, "system"), errors=errors, columns=tuple(columns),
                        labels=tuple(labels), source=", ".join(str(p) for p in paths))


def _run_key(values: dict[str, str | None]) -> tuple[tuple[str, str], ...]:
    """A data row as the run it states: the (column, stripped text) of each nonblank cell, by column
    name. Two rows are the same run when their keys are equal: every column equal, in one file or
    across files (a blank cell and a column the other file lacks both mean the column's default)."""
    return tuple(sorted((c, t) for c, v in values.items() if (t := (v or "").strip())))


def _repeats(keys: list[tuple]) -> dict[int, int]:
    """Each row (1-based) whose `_run_key` an earlier row has -> the first row with it: a run given
    twice would count twice."""
    first: dict[tuple, int] = {}
    return {i: first[k] for i, k in enumerate(keys, start=1) if first.setdefault(k, i) != i}


def _repeat_message(first: str) -> str:
    return f"the same run as {first}, every column equal; give each run once"


def _drop_repeats(rows: pl.DataFrame, errors: list[RowError], repeats: list[RowError]):
    """`rows` without the repeated runs, and the errors with theirs, each after its row's other problems."""
    if repeats:
        rows = rows.filter(~pl.col("row").is_in([e.row for e in repeats]))
    return rows, tuple(sorted([*errors, *repeats], key=lambda e: e.row))


def _read_csv(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise MeasuredError(f"csv = {str(path)!r}: no such file")
    try:
        frame = pl.read_csv(path, infer_schema=False)
    except pl.exceptions.NoDataError:
        raise MeasuredError(f"csv = {str(path)!r}: empty file; needs a header and at least one run") from None
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MeasuredError(f"csv = {str(path)!r}: cannot be read as CSV ({first})") from None
    header = _header(path)
    twice = [c for i, c in enumerate(header) if c and c in header[:i]]  # unnamed ones (trailing commas) are no column
    if twice:
        at = [str(i + 1) for i, c in enumerate(header) if c == twice[0]]
        raise MeasuredError(f"csv = {str(path)!r}: column {twice[0]!r} appears {len(at)} times in the header "
                            f"(columns {', '.join(at)}); give each column once")
    frame = frame.rename({c: c.strip().lstrip("\ufeff").strip() for c in frame.columns})
    near = _misspelt(frame.columns)
    if near:
        raise MeasuredError(f"csv = {str(path)!r}: column {near[0]!r} is not in the schema but resembles "
                            f"{near[1]!r}, which the file does not give; rename it {near[1]!r} (else its values "
                            "are ignored), or give a label column a name unlike the schema's")
    preset = "preset" in frame.columns  # the shape columns may come from a model preset
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns and not (preset and c in PRESET_SHAPE)]
    if missing:
        raise MeasuredError(f"csv = {str(path)!r}: column {missing[0]!r} missing"
                            + (f" (also {', '.join(missing[1:])})" if missing[1:] else "")
                            + f"; required columns: {', '.join(REQUIRED_COLUMNS)}")
    reserved = [c for c in frame.columns if c in OUTPUT_COLUMNS]
    if reserved:
        raise MeasuredError(f"csv = {str(path)!r}: column {reserved[0]!r} is reserved for the output "
                            f"({', '.join(OUTPUT_COLUMNS)}); rename it")
    if frame.height == 0:
        raise MeasuredError(f"csv = {str(path)!r}: no data rows; needs at least one run under the header")
    return frame


def _misspelt(columns) -> tuple[str, str] | None:
    """The first column outside the schema whose name nearly is a schema column the file does not give
    (difflib's ratio of lower-case names >= `NEAR_NAME`: `precison`, `Precision`), with that column; a label
    column's name is unlike every schema column's."""
    import difflib

    absent = [c for c in SCHEMA_COLUMNS if c not in columns]
    for col in columns:
        if col and col not in SCHEMA_COLUMNS:
            close = difflib.get_close_matches(col.lower(), absent, n=1, cutoff=NEAR_NAME)
            if close:
                return col, close[0]
    return None


def _header(path: Path) -> list[str]:
    """The column names of the CSV's header row as written (stripped, without a byte-order mark),
    duplicates kept (Polars renames a second one)."""
    with path.open(newline="", encoding="utf-8", errors="replace") as fh:
        first = next(csv.reader(fh), [])
    return [c.strip().lstrip("\ufeff").strip() for c in first]


def _is_stage(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return value in (0.0, 1.0, 2.0, 3.0)


def _parse_row(raw: dict[str, str | None], labels: tuple[str, ...]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Typed values of one row, and its problems as (column, "value: what is valid"): each value
    read (`_read_values`), then the values checked against each other (`_cross_checks`)."""
    row, bad, text = _read_values(raw, labels)
    _cross_checks(row, bad, text)
    return row, bad


def _read_values(raw: dict[str, str | None], labels: tuple[str, ...]):
    """(typed values, problems, the stripped text of each column) of one row, column by column:
    integers, choices, booleans, the GPU's system, the ZeRO stage and the measured time."""
    row: dict[str, Any] = {}
    bad: list[tuple[str, str]] = []
    text = {k: (v.strip() if isinstance(v, str) else "") for k, v in raw.items()}

    def shown(col: str) -> str:
        return text[col] if text[col] else "''"

    row["model"] = text["model"]
    if not text["model"]:
        bad.append(("model", "'': must be a non-empty label"))
    spec = preset_spec(text.get("preset", ""), row, bad)
    # a shape column left to a preset that is not one: unknown, said once by the preset's own line
    unknown_preset = spec is None and bool(text.get("preset"))
    for col in INT_COLUMNS:
        if not text.get(col):
            if (spec is not None or unknown_preset) and col in PRESET_SHAPE:
                row[col] = getattr(spec, PRESET_SHAPE[col]) if spec is not None else None
                continue
            if col in OPTIONAL_COLUMNS:
                row[col] = OPTIONAL_COLUMNS[col]  # kv_heads: filled in below
                continue
            bad.append((col, "'': required, must be an integer >= 1"))
            continue
        value = _int(text[col])
        if value is None:
            bad.append((col, f"{shown(col)}: must be an integer >= 1"))
        elif value > INT_BOUNDS[col]:
            bad.append((col, f"{_short(text[col])}: must be an integer in [1, {INT_BOUNDS[col]:,}]"))
            value = None
        row[col] = value
    if row.get("kv_heads") is None and "kv_heads" not in [c for c, _ in bad]:
        row["kv_heads"] = row.get("heads")
    for col, valid in CHOICES.items():
        value = text.get(col, "").lower()
        if not value and spec is not None and col in PRESET_SHAPE:
            value = getattr(spec, PRESET_SHAPE[col])
        if not value and col in OPTIONAL_COLUMNS:
            value = OPTIONAL_COLUMNS[col]
        if value is None:  # attention: filled in below, from the system
            row[col] = None
            continue
        if value not in valid:
            bad.append((col, f"{shown(col)}: must be one of {' | '.join(valid)}"))
        row[col] = value
    sp = text["sequence_parallel"].lower()
    if sp not in SEQ_PAR_CODES:
        bad.append(("sequence_parallel", f"{shown('sequence_parallel')}: must be a boolean "
                                         "(true | false | 1 | 0 | yes | no)"))
    row["sequence_parallel"] = bool(SEQ_PAR_CODES.get(sp, 0))
    row["gpu"] = text["gpu"]
    try:
        row["system"] = resolve_gpu(text["gpu"])
    except SpecError:
        row["system"] = None
        bad.append(("gpu", f"{shown('gpu')}: {gpu_rule()}"))
    if row.get("attention") is None:
        row["attention"] = DEFAULT_ATTENTION.get(row["system"], "flash")
    zero = (text.get("zero") or "").strip()
    framework = row.get("framework") if row.get("framework") in DEFAULT_ZERO else "megatron"
    row["zero"] = DEFAULT_ZERO[framework] if not zero else (int(float(zero)) if _is_stage(zero) else None)
    if row["zero"] is None:
        bad.append(("zero", f"{shown('zero')}: must be a ZeRO stage 0 | 1 | 2 | 3"))
    for col, default in BOOL_COLUMNS.items():
        value = (text.get(col) or "").lower()
        if not value and spec is not None and col in PRESET_SHAPE:
            row[col] = bool(getattr(spec, PRESET_SHAPE[col]))
        elif not value:
            by_gpu = DEFAULT_OVERLAP.get(row["system"], True) and framework == "megatron"
            row[col] = by_gpu if default is None else default
        elif value in SEQ_PAR_CODES:
            row[col] = bool(SEQ_PAR_CODES[value])
        else:
            bad.append((col, f"{shown(col)}: must be a boolean (true | false | 1 | 0 | yes | no)"))
            row[col] = False
    try:
        measured = float(text["measured_iter_s"])
    except ValueError:
        measured = math.nan
    if not (math.isfinite(measured) and measured > 0):
        bad.append(("measured_iter_s", f"{shown('measured_iter_s')}: must be a number > 0 (seconds)"))
    row["measured_iter_s"] = measured
    number_cell(text, row, bad, "memory_gib", "a number > 0 (GiB per GPU) or blank")
    number_cell(text, row, bad, "dropout", "a probability in [0, 0.99] or blank", high=0.99, low_open=False)
    for col, what in (("window", "the keys a query of a windowed block sees, 0 none"),
                      ("window_layers", "the blocks with that window")):
        cell, row[col] = (text.get(col) or "").strip(), None
        if cell:
            row[col] = int(cell) if cell.isdigit() and len(cell) <= 9 else None
            if row[col] is None:
                bad.append((col, f"{_short(cell)}: must be an integer in [0, 999,999,999] ({what}) or blank"))
    no_window = row["window"] == 0 or (not (text.get("window") or "").strip() and not (spec and spec.window))
    # an unreadable window cell is reported above, once; a window left to a preset that is not one is unknown
    if row["window_layers"] is not None and no_window and not (unknown_preset and row["window"] is None):
        bad.append(("window_layers", f"{row['window_layers']}: needs a window (the window column, or a preset "
                                     "with one)"))
    offload = (text.get("offload_layers") or "").strip()
    row["offload_layers"] = 0
    if offload and offload not in ("0", "0.0"):
        row["offload_layers"] = _int(offload)
        if row["offload_layers"] is None:
            bad.append(("offload_layers", f"{offload}: must be an integer >= 0 (blocks whose activations are "
                                          "offloaded to host memory) or blank"))
    expert_values(text, row, bad, spec)
    for col in labels:
        row[col] = raw[col]
    return row, bad, text


def _cross_checks(row: dict[str, Any], bad: list[tuple[str, str]], text: dict[str, str]) -> None:
    """The row's values against each other (degrees against the model's shape, the GPU count, the
    batch, context parallelism, what is not yet modelled), appended to `bad`; a column whose value
    could not be read is not cross-checked."""
    unread = {c for c, _ in bad}  # columns whose value could not be read: no cross-checks on them

    def have(*cols):
        return all(row.get(c) is not None and c not in unread for c in cols)

    if have("heads", "hidden") and row["hidden"] % row["heads"] and not row.get("preset"):
        bad.append(("heads", f"{row['heads']}: must divide hidden = {row['hidden']}"))
    layout = expert_checks(row, bad, have)
    if have("tp", "heads") and row["heads"] % row["tp"]:
        bad.append(("tp", f"{row['tp']}: must divide heads = {row['heads']}"))
    if have("tp", "hidden") and row["hidden"] % row["tp"]:
        bad.append(("tp", f"{row['tp']}: must divide hidden = {row['hidden']}"))
    # the pipeline splits Megatron's layers: the blocks, plus the embedding and the loss where the
    # run counts them as layers (the account_for_*_in_pipeline_split flags, pp > 1 only)
    slots = (int(row.get("account_for_embedding_in_pipeline_split") or 0)
             + int(row.get("account_for_loss_in_pipeline_split") or 0)) if (row.get("pp") or 1) > 1 else 0
    split = "layers" if not slots else f"layers + {slots} (the embedding and loss counted as layers)"
    if row.get("recompute_modules") and have("recompute") and row["recompute"] != "selective":
        bad.append(("recompute_modules", f"{row['recompute_modules']}: Megatron recomputes modules under "
                                         f"recompute = selective only (the run has {row['recompute']}); "
                                         "leave it blank"))
    quantized = PRECISION_CODES.get(row.get("precision"), 0) > 0
    if row.get("fp8_recipe") and have("precision") and row["precision"] != "fp8":
        bad.append(("fp8_recipe", f"{row['fp8_recipe']}: a scaling recipe of precision fp8 (the run has "
                                  f"{row['precision']}); leave it blank"))
    if row.get("fp8_param_gather") and have("precision") and not quantized:
        bad.append(("fp8_param_gather", f"true: parameters are gathered in FP8 only under quantized matmuls "
                                        f"(precision fp8, mxfp8 or nvfp4; the run has {row['precision']})"))
    elif row.get("fp8_param_gather") and row.get("fp8_recipe") == "rowwise":
        bad.append(("fp8_param_gather", "true: torchao's rowwise recipes communicate in high precision; "
                                        "the FP8 parameter allgather is tensorwise scaling's"))
    if row.get("act_fp8_store") and row.get("mlp") and row["mlp"] != "swiglu":
        bad.append(("act_fp8_store", f"true: only a gated MLP (mlp swiglu) keeps an activation input to store in "
                                     f"FP8 (the run's mlp is {row['mlp']}); leave it blank"))
    if have("nvs_size") and row.get("system"):
        from dse.spec.specs import load_system

        most = load_system(row["system"]).nvs_size
        if row["nvs_size"] > most:
            bad.append(("nvs_size", f"{row['nvs_size']}: must be <= the {most} GPUs of an NVLink domain of "
                                    f"{row['system']}"))
    if have("window_layers", "layers") and "window_layers" not in unread and row["window_layers"] > row["layers"]:
        bad.append(("window_layers", f"{row['window_layers']}: must be <= layers = {row['layers']}"))
    if row.get("offload_layers") and have("layers", "offload_layers"):
        if row["offload_layers"] >= row["layers"]:
            bad.append(("offload_layers", f"{row['offload_layers']}: must be < layers = {row['layers']} (Megatron "
                                          "keeps at least one block's activations on the GPU)"))
        elif (have("pp") and row["pp"] > 1) or (have("recompute") and row["recompute"] != "none"):
            bad.append(("offload_layers", f"{row['offload_layers']}: Megatron-core offloads activations without "
                                          f"a pipeline or recomputation (the run has pp = {row.get('pp')}, recompute = "
                                          f"{row.get('recompute')})"))
        elif row.get("system"):
            from dse.spec.specs import load_system

            if load_system(row["system"]).host_bandwidth <= 0:
                bad.append(("offload_layers", f"{row['offload_layers']}: system {row['system']} has no host link "
                                              "(host_bandwidth = 0): activation offloading cannot be modelled"))
    if layout is not None:  # the layout's places: blocks, MTP blocks and the end stages' slots
        slots = layout.mtp + layout.first_slots + layout.last_slots
        split = f"layers + {slots} (the pipeline_layout's MTP blocks and end-stage places)"
    elif row.get("mtp"):
        slots += row["mtp"]
        ends = " and the embedding and loss" if slots > row["mtp"] else ""
        split = f"layers + {slots} (the MTP blocks{ends})"
    layers = row["layers"] + slots if have("layers") else None
    if have("pp", "layers") and row["pp"] > row["layers"]:
        bad.append(("pp", f"{row['pp']}: must be <= layers = {row['layers']}"))
    elif have("pp", "layers") and slots and layers % row["pp"]:
        bad.append(("pp", f"{row['pp']}: must divide {split} = {layers}"))
    elif have("pp", "layers", "interleave") and row["interleave"] > 1 and layers % row["pp"]:
        bad.append(("interleave", f"{row['interleave']}: the interleaved schedule needs pp = {row['pp']} "
                                  f"to divide {split} = {layers}"))
    elif have("pp", "layers", "interleave") and (layers // row["pp"]) % row["interleave"]:
        bad.append(("interleave", f"{row['interleave']}: must divide "
                                  + (f"layers / pp = {layers // row['pp']}" if not slots
                                     else f"({split}) / pp = {layers // row['pp']}")))
    if have("pp", "interleave") and row["pp"] == 1 and row["interleave"] > 1:
        bad.append(("interleave", f"{row['interleave']}: model chunks interleave pipeline stages; must be 1 "
                                  "with pp = 1"))
    if have("gpus", "tp", "pp", "dp", "cp"):
        product = row["tp"] * row["pp"] * row["dp"] * row["cp"]
        if row["gpus"] != product:
            bad.append(("gpus", f"{row['gpus']}: must equal tp*pp*dp*cp = {row['tp']}*{row['pp']}*"
                                f"{row['dp']}*{row['cp']} = {product}"))
    if have("cp", "seq_len") and row["cp"] > 1 and row["seq_len"] % (2 * row["cp"]):
        bad.append(("cp", f"{row['cp']}: must split seq_len = {row['seq_len']} into 2 cp = {2 * row['cp']} equal "
                          f"chunks (Megatron's causal load balance)"))
    elif (have("cp", "seq_len", "tp") and row["cp"] > 1 and row["sequence_parallel"]
          and (row["seq_len"] // row["cp"]) % row["tp"]):
        bad.append(("cp", f"{row['cp']}: seq_len / cp = {row['seq_len'] // row['cp']} rows must divide over "
                          f"tp = {row['tp']} (sequence parallelism)"))
    elif (have("seq_len", "tp") and row["sequence_parallel"] and row["seq_len"] % row["tp"]
          and "tp" not in {c for c, _ in bad}):  # a tp already wrong is said once
        bad.append(("tp", f"{row['tp']}: sequence parallelism splits the seq_len = {row['seq_len']} tokens of a "
                          f"sequence over tp = {row['tp']} GPUs; seq_len must be a multiple of tp "
                          "(or sequence_parallel false)"))
    if have("global_batch", "dp", "micro_batch") and row["global_batch"] % (row["dp"] * row["micro_batch"]):
        bad.append(("global_batch", f"{row['global_batch']}: must be a multiple of dp*micro_batch = "
                                    f"{row['dp']}*{row['micro_batch']} = {row['dp'] * row['micro_batch']}"))
    for col, test, rule in NOT_YET_MODELLED:
        deps = {"kv_heads": ("kv_heads", "heads"), "recompute_layers": ("recompute_layers", "layers")}.get(col, (col,))
        if have(*deps) and test(row):
            unmodelled = unmodelled_modules(row.get("recompute_modules"))
            bad.append((col, f"{text.get(col) or row[col]}: " + rule.format(
                **row, modelled=" | ".join(RECOMPUTE_MODULES), unmodelled=", ".join(unmodelled))))


def read_runs(path: str | os.PathLike | list | tuple | None = None) -> MeasuredRuns:
    """Read and check a measured-runs CSV (default: the packaged one), or several as one set of
    runs (a list: rows numbered on across the files, each problem naming its file); no compute.

    Raises `MeasuredError` (one line) when a file is unusable: missing, unreadable, empty, a
    required column absent. Row problems do not raise: they are collected in `errors`, one per
    problem, and the row is left out of `rows`. A `source_id` column names each run's source for
    leave-one-source-out calibration; without it the file's name does.
    """
    if isinstance(path, (list, tuple)):
        return _read_many([Path(p) for p in path])
    runs, keys = _read_one(Path(PACKAGED_CSV if path is None else path))
    repeats = [RowError(row, keys[row - 1][1], DUPLICATE, _repeat_message(f"row {first}"))
               for row, first in _repeats([key for key, _ in keys]).items()]
    rows, errors = _drop_repeats(runs.rows, list(runs.errors), repeats)
    return MeasuredRuns(rows=rows, errors=errors, columns=runs.columns, labels=runs.labels, source=runs.source)


def _read_one(path: Path) -> tuple[MeasuredRuns, list[tuple[tuple, str]]]:
    """One CSV read and checked, repeated runs not yet looked for, and each data row's (`_run_key`,
    model label), in file order."""
    raw = _read_csv(path)
    labels = tuple(c for c in raw.columns if c not in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *BOOL_COLUMNS, "zero"))
    columns = tuple(raw.columns) + tuple(dict.fromkeys(c for c in (*OPTIONAL_COLUMNS, *BOOL_COLUMNS, "zero",
                                                                    *PRESET_SHAPE) if c not in raw.columns))
    good, errors, keys = [], [], []
    for i, values in enumerate(raw.iter_rows(named=True), start=1):
        row, bad = _parse_row(values, labels)
        label = row["model"] or "?"
        keys.append((_run_key(values), label))
        errors += [RowError(i, label, col, msg) for col, msg in bad]
        if not bad:
            good.append({"row": i, **row})
    schema = {"row": pl.Int64}
    for c in columns:
        if c in INT_COLUMNS or c in ("zero", "mtp", "offload_layers", "window", "window_layers"):
            schema[c] = pl.Int64
        elif c in ("measured_iter_s", "memory_gib", "capacity_factor", "dropout"):
            schema[c] = pl.Float64
        elif c == "sequence_parallel" or c in BOOL_COLUMNS:
            schema[c] = pl.Boolean
        else:
            schema[c] = pl.Utf8
    schema["system"] = pl.Utf8
    rows = pl.DataFrame(good, schema=schema) if good else pl.DataFrame(schema=schema)
    return MeasuredRuns(rows=rows, errors=tuple(errors), columns=columns, labels=labels, source=str(path)), keys
