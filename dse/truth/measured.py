"""Measured training runs: read them from a CSV, lay them out as Megatron does, predict each one.

    import dse.truth.measured as dm
    runs = dm.read_runs()                 # the packaged CSV (Korthikanti et al. 2022 Table 5)
    runs.errors                           # one line per bad row: reported, and the row skipped
    result = dm.predict(runs)             # one engine call per (model shape, system, global batch)
    result.frame                          # every input column + predicted_iter_s, error, profile, system

CSV schema (one run per row; a header row names the columns, in any order):

    column             type    default         valid
    model              text    required        a label; the shape columns below are authoritative
    heads              int     required        >= 1, divides hidden
    hidden             int     required        >= 1
    layers             int     required        >= 1 (transformer blocks)
    ffn                int     required        >= 1 (MLP width)
    seq_len            int     required        >= 1
    vocab              int     required        >= 1
    tp, pp, dp         int     required        >= 1; tp divides heads and hidden; pp <= layers (divides it when interleaved)
    gpus               int     required        tp * pp * dp * cp
    global_batch       int     required        a multiple of dp * micro_batch (sequences)
    micro_batch        int     required        >= 1
    interleave         int     blank = 1       divides layers / pp; 1 when pp = 1 (model chunks per stage)
    recompute          text    required        none | selective | full
    sequence_parallel  bool    required        true | false | 1 | 0 | yes | no
    gpu                text    required        a system preset or an alias (GPU_ALIASES)
    measured_iter_s    float   required        > 0, seconds per iteration
    kv_heads           int     heads           (optional column) key/value heads
    mlp                text    gelu            (optional column) gelu | swiglu
    precision          text    bf16            (optional column) bf16 | fp8
    cp                 int     1               (optional column) context-parallel degree (Megatron-LM's:
                                               strategy tp1d's n2; seq_len divisible by 2 cp, and
                                               seq_len / cp by tp with sequence parallelism)
    attention          text    by gpu          (optional column) flash | standard: fused flash
                                               attention, or scores and softmax materialized in HBM
                                               (`DEFAULT_ATTENTION`)
    tied_embeddings    bool    true            (optional column) the logit layer shares the
                                               embedding's weights
    tp_comm_overlap    bool    by gpu          (optional column) tensor-parallel collectives
                                               pipelined with the GEMMs (`DEFAULT_OVERLAP`)
    pp_comm_overlap    bool    by gpu          (optional column) interleaved pipeline transfers
                                               overlapped with compute (`DEFAULT_OVERLAP`)
    zero               int     1               (optional column) 0 | 1 | 2 | 3: ZeRO stage of the
                                               model state (1: Megatron's distributed optimizer;
                                               3: FSDP full sharding)

Any other column (`params_b`, `source`, ...) is a label, carried to the output as text. Every row is
checked before any compute; a bad row gives one line per problem naming the row (1-based data row and
model label), the column, the value and what is valid, and is skipped while the others are predicted.
A value the engine cannot yet honour is such an error (`NOT_YET_MODELLED`), never silently ignored.
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import polars as pl

from dse.spec.specs import ModelSpec, SpecError, load_system
from dse.truth.placement import gpu_rule, megatron_placement, resolve_gpu

#: The packaged measured runs: Korthikanti et al. 2022 (arXiv 2205.05198) Table 5, with its source
#: in each row.
PACKAGED_CSV = Path(__file__).resolve().parents[1] / "data" / "measured" / "korthikanti2022_table5.csv"

#: Measured runs held out of calibration: published H100 FP8 runs (NVIDIA NeMo 24.12 performance
#: summary). `dse calibrate` never reads them; `dse validate measured --csv nemo2412_h100_fp8`
#: reports how far the calibrated model is from them.
HELD_OUT_CSV = PACKAGED_CSV.parent / "nemo2412_h100_fp8.csv"


def packaged_sets() -> list[str]:
    """Names of the packaged measured-run sets (their CSV stems)."""
    return sorted(p.stem for p in PACKAGED_CSV.parent.glob("*.csv"))


def resolve_csv(value) -> Path | None:
    """A measured-runs CSV from a path or the name of a packaged set (None: the calibration set)."""
    if value is None:
        return None
    text = str(value)
    if text in packaged_sets():
        return PACKAGED_CSV.parent / f"{text}.csv"
    return Path(text)


#: The engine's strategy for Megatron's 1D tensor parallelism, and the profile predictions use by
#: default.
STRATEGY = "tp1d"
PROFILE = "default"

#: Activation recompute mode -> the engine's `recompute` candidate column.
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}

#: `precision` -> the engine's `precision` candidate column.
PRECISION_CODES = {"bf16": 0, "fp8": 1}

#: `sequence_parallel` spellings -> the engine's `seq_par` candidate column (1 on, 0 off).
SEQ_PAR_CODES = {"true": 1, "yes": 1, "1": 1, "false": 0, "no": 0, "0": 0}

#: Required columns, in the order the schema lists them.
REQUIRED_COLUMNS = ("model", "heads", "hidden", "layers", "ffn", "seq_len", "vocab", "tp", "pp", "dp",
                    "gpus", "global_batch", "micro_batch", "interleave", "recompute",
                    "sequence_parallel", "gpu", "measured_iter_s")

#: Optional columns and their value when absent or blank (kv_heads: the row's heads).
OPTIONAL_COLUMNS = {"kv_heads": None, "mlp": "gelu", "precision": "bf16", "cp": 1, "attention": None}

#: The attention implementation of a run whose `attention` cell is blank, by system preset: the
#: published Megatron-LM runs on A100 (2021-2022: Narayanan et al., Korthikanti et al., MT-NLG)
#: predate fused attention in Megatron-LM and materialize the score matrices; runs on later GPUs
#: use fused flash attention. Any other preset: flash.
DEFAULT_ATTENTION = {"dgx_a100_80gb": "standard", "a100": "standard"}

#: Optional boolean columns and their value when blank (None: by system, `DEFAULT_OVERLAP`).
BOOL_COLUMNS = {"tied_embeddings": True, "tp_comm_overlap": None, "pp_comm_overlap": None}

#: The communication overlaps (`Profile.tp_comm_overlap`, `pp_comm_overlap`) of a run whose cells
#: are blank, by system preset: the A100 runs (Megatron-LM 2021-2022) predate both, so off; runs on
#: later GPUs use Megatron-core, whose interleaved schedule overlaps its transfers by default and
#: whose published recipes pipeline tensor-parallel collectives with GEMMs (Transformer Engine
#: userbuffers): on. Any other preset: on.
DEFAULT_OVERLAP = {"dgx_a100_80gb": False, "a100": False}

INT_COLUMNS = ("heads", "hidden", "layers", "ffn", "seq_len", "vocab", "tp", "pp", "dp", "gpus",
               "global_batch", "micro_batch", "interleave", "kv_heads", "cp")
CHOICES = {"recompute": tuple(RECOMPUTE_CODES), "mlp": ("gelu", "swiglu"), "precision": ("bf16", "fp8"),
           "attention": ("flash", "standard")}

#: Columns the output adds; an input column of one of these names would be overwritten.
OUTPUT_COLUMNS = ("row", "predicted_iter_s", "error", "profile", "system")

#: Values of schema columns the engine cannot yet honour: (column, test of a parsed row, what is
#: valid). Such a row is an error naming the column. Delete an entry when the engine gains the
#: mechanism, and pass the column on to the model spec or the candidate table.
NOT_YET_MODELLED: tuple[tuple[str, Callable[[dict], bool], str], ...] = ()


class MeasuredError(SpecError):
    """The measured-runs file as a whole is unusable (unreadable, empty, a required column missing)."""


@dataclass(frozen=True)
class RowError:
    """One problem of one CSV data row (1-based), printed as one line."""

    row: int
    model: str
    column: str
    message: str  # "value: what is valid", or the engine's own "field = value: rule" for column "engine"

    def __str__(self) -> str:
        if self.column == "engine":
            return f"row {self.row} ({self.model}): rejected by the engine: {self.message}"
        return f"row {self.row} ({self.model}): {self.column} = {self.message}"


@dataclass(frozen=True)
class MeasuredRuns:
    """The valid rows of a measured-runs CSV (typed, optional columns filled in, `row` first) and the
    errors of the others."""

    rows: pl.DataFrame
    errors: tuple[RowError, ...]
    columns: tuple[str, ...]  # the output's input columns: the CSV's, then the absent optional ones
    labels: tuple[str, ...]   # columns outside the schema
    source: str


class EngineCall(NamedTuple):
    """One `dse.evaluate_many` call: the runs sharing a model shape, system and global batch."""

    rows: tuple[int, ...]  # CSV data rows, in table order
    model: ModelSpec
    system: str
    nvs_size: int
    global_batch: int
    table: dict[str, np.ndarray]
    flash: bool = True  # the runs' attention is fused flash attention (else materialized)
    tp_overlap: bool = False  # tensor-parallel collectives pipelined with GEMMs (Profile.tp_comm_overlap)
    pp_overlap: bool = False  # interleaved pipeline transfers overlapped (Profile.pp_comm_overlap)
    strategy: str = STRATEGY  # tp1d, context-parallel runs included (Megatron's cp is tp1d's n2)


@dataclass(frozen=True)
class Prediction:
    """The predicted runs (`frame`) and every row that was not predicted, with why (`errors`)."""

    frame: pl.DataFrame
    errors: tuple[RowError, ...]
    profile: str


# --------------------------------------------------------------------------------------------
# reading and checking


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
    frame = frame.rename({c: c.strip().lstrip("\ufeff").strip() for c in frame.columns})
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
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


def _int(text: str) -> int | None:
    """A positive integer written as 8 or 8.0; None otherwise."""
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or not value.is_integer() or value < 1:
        return None
    return int(value)


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
    for col in INT_COLUMNS:
        if not text.get(col):
            if col == "interleave":
                row[col] = 1
                continue
            if col in OPTIONAL_COLUMNS:
                row[col] = OPTIONAL_COLUMNS[col]  # kv_heads: filled in below
                continue
            bad.append((col, "'': required, must be an integer >= 1"))
            continue
        value = _int(text[col])
        if value is None:
            bad.append((col, f"{shown(col)}: must be an integer >= 1"))
        row[col] = value
    if row.get("kv_heads") is None and "kv_heads" not in [c for c, _ in bad]:
        row["kv_heads"] = row.get("heads")
    for col, valid in CHOICES.items():
        value = text.get(col, "").lower()
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
    row["zero"] = 1 if not zero else (int(float(zero)) if _is_stage(zero) else None)
    if row["zero"] is None:
        bad.append(("zero", f"{shown('zero')}: must be a ZeRO stage 0 | 1 | 2 | 3"))
    for col, default in BOOL_COLUMNS.items():
        value = (text.get(col) or "").lower()
        if not value:
            row[col] = DEFAULT_OVERLAP.get(row["system"], True) if default is None else default
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

    if have("heads", "hidden") and row["hidden"] % row["heads"]:
        bad.append(("heads", f"{row['heads']}: must divide hidden = {row['hidden']}"))
    if have("tp", "heads") and row["heads"] % row["tp"]:
        bad.append(("tp", f"{row['tp']}: must divide heads = {row['heads']}"))
    if have("tp", "hidden") and row["hidden"] % row["tp"]:
        bad.append(("tp", f"{row['tp']}: must divide hidden = {row['hidden']}"))
    if have("pp", "layers") and row["pp"] > row["layers"]:
        bad.append(("pp", f"{row['pp']}: must be <= layers = {row['layers']}"))
    elif have("pp", "layers", "interleave") and row["interleave"] > 1 and row["layers"] % row["pp"]:
        bad.append(("interleave", f"{row['interleave']}: the interleaved schedule needs pp = {row['pp']} "
                                  f"to divide layers = {row['layers']}"))
    elif have("pp", "layers", "interleave") and (row["layers"] // row["pp"]) % row["interleave"]:
        bad.append(("interleave", f"{row['interleave']}: must divide layers / pp = "
                                  f"{row['layers'] // row['pp']}"))
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
    if have("global_batch", "dp", "micro_batch") and row["global_batch"] % (row["dp"] * row["micro_batch"]):
        bad.append(("global_batch", f"{row['global_batch']}: must be a multiple of dp*micro_batch = "
                                    f"{row['dp']}*{row['micro_batch']} = {row['dp'] * row['micro_batch']}"))
    for col, test, rule in NOT_YET_MODELLED:
        deps = ("kv_heads", "heads") if col == "kv_heads" else (col,)
        if have(*deps) and test(row):
            bad.append((col, f"{text.get(col) or row[col]}: {rule.format(**row)}"))


def read_runs(path: str | os.PathLike | None = None) -> MeasuredRuns:
    """Read and check a measured-runs CSV (default: the packaged one); no compute.

    Raises `MeasuredError` (one line) when the file is unusable: missing, unreadable, empty, a
    required column absent. Row problems do not raise: they are collected in `errors`, one per
    problem, and the row is left out of `rows`.
    """
    path = Path(PACKAGED_CSV if path is None else path)
    raw = _read_csv(path)
    labels = tuple(c for c in raw.columns if c not in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *BOOL_COLUMNS, "zero"))
    columns = tuple(raw.columns) + tuple(c for c in (*OPTIONAL_COLUMNS, *BOOL_COLUMNS, "zero")
                                         if c not in raw.columns)
    good, errors = [], []
    for i, values in enumerate(raw.iter_rows(named=True), start=1):
        row, bad = _parse_row(values, labels)
        label = row["model"] or "?"
        errors += [RowError(i, label, col, msg) for col, msg in bad]
        if not bad:
            good.append({"row": i, **row})
    schema = {"row": pl.Int64}
    for c in columns:
        if c in INT_COLUMNS or c == "zero":
            schema[c] = pl.Int64
        elif c == "measured_iter_s":
            schema[c] = pl.Float64
        elif c == "sequence_parallel" or c in BOOL_COLUMNS:
            schema[c] = pl.Boolean
        else:
            schema[c] = pl.Utf8
    schema["system"] = pl.Utf8
    rows = pl.DataFrame(good, schema=schema) if good else pl.DataFrame(schema=schema)
    return MeasuredRuns(rows=rows, errors=tuple(errors), columns=columns, labels=labels, source=str(path))


# --------------------------------------------------------------------------------------------
# candidate tables and prediction

SHAPE = ("heads", "hidden", "layers", "ffn", "seq_len", "vocab")


def model_name(label: str) -> str:
    """A model label as a spec name: runs of characters other than letters and digits become '_'."""
    return re.sub(r"[^0-9A-Za-z]+", "_", label).strip("_").lower() or "model"


def candidate_table(rows: pl.DataFrame, node_size: int) -> dict[str, np.ndarray]:
    """The engine's candidate columns for checked runs on nodes of `node_size` GPUs: n1 = tp,
    n2 = cp (Megatron-LM's context parallelism is strategy tp1d's n2: the sequence in 2 cp
    load-balanced chunks, K and V passed around a ring), n_p = pp, n_d = dp,
    microbatch, the Megatron placement (nvs1, nvs2 = nvs_cp, nvs_p, nvs_d), interleave, recompute
    (`RECOMPUTE_CODES`), seq_par (1 = sequence parallel) and precision (0 bf16, 1 fp8); n_b = 1."""
    places = [megatron_placement(r["tp"], r["cp"], r["dp"], r["pp"], node_size)
              for r in rows.iter_rows(named=True)]
    col = lambda name: rows[name].to_numpy().astype(np.int64)  # noqa: E731
    ones = np.ones(rows.height, dtype=np.int64)
    return {
        "n1": col("tp"), "n2": col("cp"), "n_p": col("pp"), "n_d": col("dp"), "microbatch": col("micro_batch"),
        "nvs1": np.array([p["nvs1"] for p in places], dtype=np.int64),
        "nvs2": np.array([p["nvs_cp"] for p in places], dtype=np.int64),
        "nvs_p": np.array([p["nvs_p"] for p in places], dtype=np.int64),
        "nvs_d": np.array([p["nvs_d"] for p in places], dtype=np.int64),
        "n_b": ones.copy(), "interleave": col("interleave"),
        "recompute": np.array([RECOMPUTE_CODES[v] for v in rows["recompute"]], dtype=np.int64),
        "seq_par": rows["sequence_parallel"].cast(pl.Int64).to_numpy(),
        "precision": np.array([PRECISION_CODES[v] for v in rows["precision"]], dtype=np.int64),
        "zero": col("zero"),
    }


def plan(runs: MeasuredRuns) -> list[EngineCall]:
    """The engine calls that predict `runs`: one per (model shape, system, global batch), rows in CSV
    order within each, calls in the order of their first row."""
    calls = []
    keys = [*SHAPE, "kv_heads", "mlp", "tied_embeddings", "system", "global_batch", "attention",
            "tp_comm_overlap", "pp_comm_overlap"]
    for _, group in runs.rows.group_by(keys, maintain_order=True):
        first = group.row(0, named=True)
        model = ModelSpec(name=model_name(first["model"]), seq_len=first["seq_len"], hidden=first["hidden"],
                          heads=first["heads"], depth=first["layers"], ffn=first["ffn"], vocab=first["vocab"],
                          kv_heads=first["kv_heads"], mlp=first["mlp"], tied_embeddings=first["tied_embeddings"])
        nvs_size = load_system(first["system"]).nvs_size
        calls.append(EngineCall(rows=tuple(group["row"].to_list()), model=model, system=first["system"],
                                nvs_size=nvs_size, global_batch=first["global_batch"],
                                table=candidate_table(group, nvs_size), flash=first["attention"] == "flash",
                                tp_overlap=first["tp_comm_overlap"], pp_overlap=first["pp_comm_overlap"]))
    return calls


def run_profile(profile, call: EngineCall):
    """The engine profile that predicts `call`: `profile` with the runs' attention implementation
    and communication overlaps (a profile without Megatron's block has one model of each only)."""
    from dse.explore.engine import profile_of
    from kernels.params import Profile

    prof = profile_of(profile)
    if isinstance(prof, Profile) and prof.megatron:
        return prof._replace(flash_attention=call.flash, tp_comm_overlap=call.tp_overlap,
                             pp_comm_overlap=call.pp_overlap)
    return prof


def _evaluate(call: EngineCall, profile: str, rows: slice | None = None) -> np.ndarray:
    from dse.api import evaluate_many

    table = call.table if rows is None else {k: v[rows] for k, v in call.table.items()}
    frame = evaluate_many(table, model=call.model, system=call.system, strategy=call.strategy,
                          profile=run_profile(profile, call),
                          global_batch=call.global_batch, nvs_size=call.nvs_size)
    return frame["iteration_time"].to_numpy()


def predict(runs: MeasuredRuns | str | os.PathLike | None = None, profile: str = PROFILE) -> Prediction:
    """Predict the iteration time of every checked run: one `dse.evaluate_many` call per `plan` entry
    (strategy tp1d, the system preset's node as the NVS domain).

    Returns the predicted rows with every input column, `predicted_iter_s`, `error` (predicted /
    measured - 1), `profile` and `system`, and the rows not predicted with why: the reading's errors,
    then any the engine raised (a group the engine rejects is retried row by row, so each rejected
    row is named and the others are still predicted).
    """
    from dse.explore.engine import profile_name, profile_of

    if not isinstance(runs, MeasuredRuns):
        runs = read_runs(runs)
    name = profile_name(profile_of(profile))
    labels = dict(zip(runs.rows["row"].to_list(), runs.rows["model"].to_list()))
    predicted: dict[int, float] = {}
    errors = list(runs.errors)
    for call in plan(runs):
        try:
            times = _evaluate(call, profile)
        except SpecError:
            times = []
            for i, row in enumerate(call.rows):
                try:
                    times.append(_evaluate(call, profile, slice(i, i + 1))[0])
                except SpecError as exc:
                    times.append(math.nan)
                    errors.append(RowError(row, labels[row], "engine", str(exc)))
        for row, t in zip(call.rows, times):
            if not math.isnan(t):
                predicted[row] = float(t)
    errors.sort(key=lambda e: e.row)
    kept = runs.rows.filter(pl.col("row").is_in(list(predicted)))
    frame = kept.select("row", *runs.columns, "system").with_columns(
        pl.Series("predicted_iter_s", [predicted[r] for r in kept["row"]], dtype=pl.Float64))
    frame = frame.with_columns(
        (pl.col("predicted_iter_s") / pl.col("measured_iter_s") - 1.0).alias("error"),
        pl.lit(name, dtype=pl.Utf8).alias("profile"),
    ).select("row", *runs.columns, "predicted_iter_s", "error", "profile", "system")
    return Prediction(frame=frame, errors=tuple(errors), profile=name)


def write_parquet(prediction: Prediction, path: str | os.PathLike, source: str = "") -> Path:
    """Write `prediction.frame` as Parquet, atomically (a temporary file beside `path`, then renamed);
    file metadata key `dse.truth.measured`: the profile, the source CSV and the rows not predicted."""
    import pyarrow.parquet as pq

    from dse import __version__

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = prediction.frame.to_arrow()
    meta = {"dse_version": __version__, "profile": prediction.profile, "strategy": STRATEGY,
            "source": source, "errors": [str(e) for e in prediction.errors]}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           b"dse.truth.measured": json.dumps(meta).encode()})
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
