"""Measured-run CSVs: their schema, reading and checking each row before any compute (`read_runs`).

CSV schema (one run per row; a header row names the columns, in any order):

    column             type    default         valid
    model              text    required        a label; the shape columns below are authoritative
    heads              int     required        >= 1, divides hidden
    hidden             int     required        >= 1
    layers             int     required        >= 1 (transformer blocks)
    ffn                int     required        >= 1 (MLP width)
    seq_len            int     required        >= 1; a multiple of tp with sequence parallelism (cp = 1)
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
    mlp                text    gelu            (optional column) gelu | swiglu | relu2
    precision          text    bf16            (optional column) bf16 | fp8
    cp                 int     1               (optional column) context-parallel degree (Megatron-LM's:
                                               strategy tp1d's n2; seq_len divisible by 2 cp, and
                                               seq_len / cp by tp with sequence parallelism)
    attention          text    by gpu          (optional column) flash | standard: fused flash
                                               attention, or scores and softmax materialized in HBM
                                               (`DEFAULT_ATTENTION`)
    tied_embeddings    bool    true            (optional column) the logit layer shares the
                                               embedding's weights
    bias               bool    true            (optional column) the linears have biases
                                               (`ModelSpec.bias`; with a preset: the preset's)
    dropout            float   0.1 / preset's  (optional column) hidden and attention dropout
                                               probability in [0, 0.99] (`ModelSpec.dropout`; blank:
                                               the preset's, else Megatron's default 0.1)
    tp_comm_overlap    bool    by gpu          (optional column) tensor-parallel collectives
                                               pipelined with the GEMMs (`DEFAULT_OVERLAP`); under
                                               fsdp2: PyTorch's async TP (`ASYNC_TP_EFF`), off by default
    pp_comm_overlap    bool    by gpu          (optional column) interleaved pipeline transfers
                                               overlapped with compute (`DEFAULT_OVERLAP`)
    zero               int     by framework    (optional column) 0 | 1 | 2 | 3: ZeRO stage of the
                                               model state (1: Megatron's distributed optimizer,
                                               megatron's default; 3: FSDP full sharding, fsdp2's)
    framework          text    megatron        (optional column) megatron | fsdp2: the framework
                                               that ran it (`kernels.frameworks.FRAMEWORKS`: what
                                               overlaps what, the memory reserve, its calibration)
    grad_reduce        text    fp32            (optional column) fp32 | bf16: the dtype gradients
                                               are accumulated and reduced in (Megatron-LM's and
                                               FSDP2's default fp32; NeMo's and Megatron-Bridge's
                                               recipes bf16, grad_reduce_in_fp32 = False)
    optimizer_state    text    fp32            (optional column) fp32 | remainder | bf16_moments | bf16:
                                               Adam's master weights and moments (`Profile.optimizer_state`)
    step_time          text    blank           (optional column) stated | derived: the source gives
                                               the step time, or it is derived from a published
                                               throughput (global_batch x seq_len / (tokens/s/GPU x gpus))
    recompute_layers   int     blank           (optional column) Megatron's recompute_num_layers under recompute
                                               full, method block (Profile.recompute_layers; blank: all)
    memory_gib         float   blank           (optional column) published peak memory per GPU, GiB
                                               (the output's memory_error compares the prediction)
    offload_layers     int     0               (optional column) Megatron's cpu_offloading_num_layers:
                                               blocks whose activations go to host memory
                                               (`Profile.offload_layers`), < layers, with pp = 1 and
                                               recompute none; the system needs a host link
                                               (`SystemSpec.host_bandwidth`)
    account_for_embedding_in_pipeline_split
                       bool    false           (optional column) Megatron's flag: the input embedding
                                               takes one layer's place on the first pipeline stage
    account_for_loss_in_pipeline_split
                       bool    false           (optional column) the logit layer and loss take one
                                               layer's place on the last stage

Mixture-of-experts runs have optional expert columns (`preset`, `ep`, `etp`, ...): their schema is
`dse.truth.experts`'s.

Any other column (`params_b`, `source`, ...) is a label, carried to the output as text. Every row is checked
before any compute; a bad row gives one line per problem naming the row (1-based data row and model label),
the column, the value and what is valid, and is skipped while the others are predicted. A value the engine
cannot yet honour is such an error (`NOT_YET_MODELLED`), never silently ignored; so are an integer past the
engine's bounds (`INT_BOUNDS`, read exactly however long) and a row that repeats an earlier one in every column
(it would count twice). A header that names a column twice, or the same file given twice, makes the input
unusable (`MeasuredError`).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import polars as pl

from dse.spec.specs import INT_MAX, MAX_BATCH, MAX_GPUS, MLPS, SpecError
from dse.truth.experts import (PRESET_SHAPE, expert_checks, expert_values, number_cell, preset_spec,
                               short as _short, unmodelled_modules, whole as _int)
from dse.truth.placement import gpu_rule, resolve_gpu
from kernels.eager import ELEMENTWISE, FUSED
from kernels.params import OPTIMIZER_STATES, RECOMPUTE_MODULES, Metrics

#: The packaged measured runs: Korthikanti et al. 2022 (arXiv 2205.05198) Table 5, with its source in each row.
PACKAGED_CSV = Path(__file__).resolve().parents[1] / "data" / "measured" / "korthikanti2022_table5.csv"

#: The packaged training corpus: the sets `dse calibrate --csv corpus` fits and `dse validate measured --csv corpus`
#: predicts (their sources and provenance beside each CSV, NAME.md).
CORPUS = ("korthikanti2022_table5", "nemo_perf_dense", "nvidia_perf_dense", "torchtitan_fsdp2")


def corpus_paths() -> tuple[Path, ...]:
    """The CSVs of the packaged training corpus that are present (`CORPUS`)."""
    return tuple(p for p in (PACKAGED_CSV.parent / f"{n}.csv" for n in CORPUS) if p.is_file())


def packaged_sets() -> list[str]:
    """Names of the packaged measured-run sets (their CSV stems)."""
    return sorted(p.stem for p in PACKAGED_CSV.parent.glob("*.csv"))


def resolve_csv(value) -> Path | None:
    """A measured-runs CSV from a path or the name of a packaged set (None: the calibration set)."""
    if value is None:
        return None
    return PACKAGED_CSV.parent / f"{value}.csv" if str(value) in packaged_sets() else Path(str(value))


def resolve_many(value) -> list[Path]:
    """The CSVs of one `--csv` value: 'corpus' (the packaged training corpus, `CORPUS`), a
    packaged set's name, or a path; None: the packaged default (Korthikanti et al. 2022)."""
    if value is None:
        return [PACKAGED_CSV]
    if str(value) == "corpus":
        return list(corpus_paths())
    return [resolve_csv(value)]


#: Activation recompute mode -> the engine's `recompute` candidate column.
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}

#: `precision` -> the engine's `precision` candidate column.
PRECISION_CODES = {"bf16": 0, "fp8": 1, "mxfp8": 1, "nvfp4": 2}

#: `sequence_parallel` spellings -> the engine's `seq_par` candidate column (1 on, 0 off).
SEQ_PAR_CODES = {"true": 1, "yes": 1, "1": 1, "false": 0, "no": 0, "0": 0}

#: Required columns, in the order the schema lists them.
REQUIRED_COLUMNS = ("model", "heads", "hidden", "layers", "ffn", "seq_len", "vocab", "tp", "pp", "dp",
                    "gpus", "global_batch", "micro_batch", "interleave", "recompute",
                    "sequence_parallel", "gpu", "measured_iter_s")

#: Optional columns and their value when absent or blank (kv_heads: the row's heads; attention:
#: by system; step_time and memory_gib: not given).
OPTIONAL_COLUMNS = {"kv_heads": None, "mlp": "gelu", "precision": "bf16", "cp": 1, "attention": None,
                    "framework": "megatron", "grad_reduce": "fp32", "optimizer_state": "fp32", "step_time": None, "memory_gib": None,
                    "recompute_layers": None, "preset": None, "ep": 1, "etp": None, "capacity_factor": None,
                    "mtp": 0, "pipeline_layout": None, "recompute_modules": None, "nvs_size": None,
                    "offload_layers": 0, "fp8_recipe": None, "dropout": None, "elementwise": FUSED}

#: The ZeRO stage of a run whose `zero` cell is blank, by framework: Megatron's distributed optimizer, FSDP's.
DEFAULT_ZERO = {"megatron": 1, "fsdp2": 3}

#: The attention implementation of a run whose `attention` cell is blank, by system preset: the published Megatron-LM
#: runs on A100 (2021-2022: Narayanan et al., Korthikanti et al., MT-NLG) predate fused attention in Megatron-LM and
#: materialize the score matrices; runs on later GPUs use fused flash attention. Any other preset: flash.
DEFAULT_ATTENTION = {"dgx_a100_80gb": "standard", "a100": "standard"}

#: Optional boolean columns and their value when blank (None: by system, `DEFAULT_OVERLAP`).
BOOL_COLUMNS = {"tied_embeddings": True, "bias": True, "tp_comm_overlap": None, "pp_comm_overlap": None,
                "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
                "moe_overlap": False, "moe_force_balance": True, "fp8_param_gather": False, "kv_repeat": False}

#: The communication overlaps (`Profile.tp_comm_overlap`, `pp_comm_overlap`) of a run whose cells are blank, by
#: system preset: the A100 runs (Megatron-LM 2021-2022) predate both, so off; runs on later GPUs use Megatron-core,
#: whose interleaved schedule overlaps its transfers by default and whose published recipes pipeline
#: tensor-parallel collectives with GEMMs (Transformer Engine userbuffers): on. Any other preset: on. Runs of
#: framework fsdp2: off (true on the row is PyTorch's async tensor parallelism, `kernels.frameworks.ASYNC_TP_EFF`).
DEFAULT_OVERLAP = {"dgx_a100_80gb": False, "a100": False}

#: `fp8_recipe` values: the scaling of an fp8 run's matmuls as it decides what its collectives
#: carry. tensorwise (one scale per tensor: torchao's default, Transformer Engine's current and
#: delayed scaling): torchao's float8 tensor parallelism gathers FP8 (`Profile.fp8_tp_gather`, on
#: in framework fsdp2); rowwise (torchao's rowwise recipes): every collective in high precision.
FP8_RECIPES = ("tensorwise", "rowwise")

INT_COLUMNS = ("heads", "hidden", "layers", "ffn", "seq_len", "vocab", "tp", "pp", "dp", "gpus",
               "global_batch", "micro_batch", "interleave", "kv_heads", "cp", "recompute_layers", "ep", "etp",
               "nvs_size")
#: The largest value of each integer column (`dse.spec.specs`): degrees MAX_GPUS, batch MAX_BATCH, shapes INT_MAX.
INT_BOUNDS = {**{c: INT_MAX for c in INT_COLUMNS}, **{c: MAX_GPUS for c in ("tp", "pp", "dp", "cp", "gpus", "ep", "etp", "nvs_size")},
              "global_batch": MAX_BATCH, "micro_batch": MAX_BATCH}
CHOICES = {"recompute": tuple(RECOMPUTE_CODES), "mlp": MLPS, "precision": ("bf16", "fp8", "mxfp8", "nvfp4"),
           "attention": ("flash", "standard"), "framework": ("megatron", "fsdp2"), "grad_reduce": ("fp32", "bf16"),
           "optimizer_state": tuple(OPTIMIZER_STATES), "step_time": ("stated", "derived"), "fp8_recipe": FP8_RECIPES, "elementwise": ELEMENTWISE}

#: GB (1e9 bytes, the engine's unit) in a GiB (2^30 bytes, the unit frameworks print).
GIB_PER_GB = 2.0 ** 30 / 1e9

#: Columns the output adds; an input column of one of these names would be overwritten: the prediction
#: and its parts, the engine's `Metrics` as a search's Parquet names them: seconds, then GB (`dse.results.io`).
PARTS = tuple(f for f in Metrics._fields if f.startswith(("t_", "mem_")))
OUTPUT_COLUMNS = ("row", "predicted_iter_s", "error", "predicted_memory_gb", "hbm_gb", "fits", "memory_error",
                  "profile", "system", *PARTS)

#: Values of schema columns the engine cannot yet honour: (column, test of a parsed row, what is
#: valid). Such a row is an error naming the column. Delete an entry when the engine gains the
#: mechanism, and pass the column on to the model spec or the candidate table.
NOT_YET_MODELLED: tuple[tuple[str, Callable[[dict], bool], str], ...] = (
    ("recompute_layers", lambda r: r.get("recompute_layers") is not None and r["recompute"] != "full",
     "partial recomputation (Megatron's recompute_num_layers) is modelled under full recomputation only "
     "(recompute_method block); this run's recompute is {recompute}"),
    ("recompute_modules", lambda r: bool(unmodelled_modules(r.get("recompute_modules"))),
     "recomputing Megatron's {unmodelled} is not yet modelled; the modules modelled: {modelled}"),
    ("moe_force_balance", lambda r: r.get("moe_force_balance") is False and r.get("capacity_factor") is None,
     "dropless routing without forced balance: the run's routing imbalance is not published, so its load cannot be "
     "modelled (profile.expert_imbalance takes a known one); give the run's capacity_factor under token drop, or "
     "forced balance"),
)


#: The `RowError.column` of a row that repeats an earlier one in every column.
DUPLICATE = "duplicate"


class MeasuredError(SpecError):
    """The measured-runs file as a whole is unusable (unreadable, empty, a required column missing)."""


@dataclass(frozen=True)
class RowError:
    """One problem of one CSV data row (1-based), printed as one line."""

    row: int
    model: str
    column: str
    message: str  # "value: what is valid", or the engine's own "field = value: rule" for column "engine"
    file: str = ""  # the CSV's name, where several were read together (`read_runs` of a list)
    line: int = 0  # the row within that CSV (1-based), where several were read together

    def __str__(self) -> str:
        where = f"row {self.row}" if not self.file else f"row {self.row} ({self.file} row {self.line}"
        where = where + (f", {self.model})" if self.file else f" ({self.model})")
        if self.column == "engine":
            return f"{where}: rejected by the engine: {self.message}"
        if self.column == DUPLICATE:
            return f"{where}: {self.message}"
        return f"{where}: {self.column} = {self.message}"


@dataclass(frozen=True)
class MeasuredRuns:
    """The valid rows of a measured-runs CSV (typed, optional columns filled in, `row` first) and the
    errors of the others."""

    rows: pl.DataFrame
    errors: tuple[RowError, ...]
    columns: tuple[str, ...]  # the output's input columns: the CSV's, then the absent optional ones
    labels: tuple[str, ...]   # columns outside the schema
    source: str


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
    parts, errors, offset = [], [], 0
    columns: list[str] = []
    labels: list[str] = []
    for p in paths:
        one = read_runs(p)
        rows = one.rows.with_columns((pl.col("row") + offset).alias("row"))
        if "source_id" not in rows.columns:
            rows = rows.with_columns(pl.lit(p.stem, dtype=pl.Utf8).alias("source_id"))
        parts.append(rows)
        errors += [RowError(e.row + offset, e.model, e.column, e.message, file=p.name, line=e.row) for e in one.errors]
        # every data row is either read or has an error: the last of them is the file's row count
        offset += max([*one.rows["row"].to_list(), *(e.row for e in one.errors)])
        columns += [c for c in one.columns if c not in columns]
        labels += [c for c in one.labels if c not in labels]
    if "source_id" not in columns:
        columns.append("source_id")
        labels.append("source_id")
    rows = pl.concat(parts, how="diagonal_relaxed")
    return MeasuredRuns(rows=rows.select("row", *columns, "system"), errors=tuple(errors), columns=tuple(columns),
                        labels=tuple(labels), source=", ".join(str(p) for p in paths))


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
    for col in INT_COLUMNS:
        if not text.get(col):
            if col == "interleave":
                row[col] = 1
                continue
            if spec is not None and col in PRESET_SHAPE:
                row[col] = getattr(spec, PRESET_SHAPE[col])
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
                                         f"recompute = selective only (the run has {row['recompute']}); leave it blank"))
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
    if have("nvs_size") and row.get("system"):
        from dse.spec.specs import load_system

        most = load_system(row["system"]).nvs_size
        if row["nvs_size"] > most:
            bad.append(("nvs_size", f"{row['nvs_size']}: must be <= the {most} GPUs of an NVLink domain of "
                                    f"{row['system']}"))
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
        split = f"layers + {slots} (the MTP blocks" + (" and the embedding and loss" if slots > row["mtp"] else "") + ")"
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
    path = Path(PACKAGED_CSV if path is None else path)
    raw = _read_csv(path)
    labels = tuple(c for c in raw.columns if c not in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *BOOL_COLUMNS, "zero"))
    columns = tuple(raw.columns) + tuple(dict.fromkeys(c for c in (*OPTIONAL_COLUMNS, *BOOL_COLUMNS, "zero",
                                                                    *PRESET_SHAPE) if c not in raw.columns))
    good, errors = [], []
    first: dict[tuple, int] = {}  # each row's text -> the first row with it: a repeat would count twice
    for i, values in enumerate(raw.iter_rows(named=True), start=1):
        row, bad = _parse_row(values, labels)
        text = tuple((v or "").strip() for v in values.values())
        if first.setdefault(text, i) != i:
            bad.append((DUPLICATE, f"the same run as row {first[text]}, every column equal; give each run once"))
        label = row["model"] or "?"
        errors += [RowError(i, label, col, msg) for col, msg in bad]
        if not bad:
            good.append({"row": i, **row})
    schema = {"row": pl.Int64}
    for c in columns:
        if c in INT_COLUMNS or c in ("zero", "mtp", "offload_layers"):
            schema[c] = pl.Int64
        elif c in ("measured_iter_s", "memory_gib", "capacity_factor", "dropout"):
            schema[c] = pl.Float64
        elif c == "sequence_parallel" or c in BOOL_COLUMNS:
            schema[c] = pl.Boolean
        else:
            schema[c] = pl.Utf8
    schema["system"] = pl.Utf8
    rows = pl.DataFrame(good, schema=schema) if good else pl.DataFrame(schema=schema)
    return MeasuredRuns(rows=rows, errors=tuple(errors), columns=columns, labels=labels, source=str(path))
