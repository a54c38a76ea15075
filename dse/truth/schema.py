"""The measured-run CSV schema: its columns, their defaults, choices and bounds, the packaged sets, and
the records a reading gives (`dse.truth.runs` reads and checks the rows).

CSV schema (one run per row; a header row names the columns, in any order):

    column             type    default         valid
    model              text    required        a label; the shape columns below are authoritative
    heads              int     required        >= 1, divides hidden
    hidden             int     required        >= 1
    layers             int     required        >= 1 (transformer blocks)
    ffn                int     required        >= 1 (MLP width)
    seq_len            int     required        >= 1; a multiple of tp with sequence parallelism (cp = 1)
    vocab              int     required        >= 1
    tp, pp, dp         int     required        >= 1; tp divides heads and hidden; pp <= layers (divides
                                               it when interleaved)
    gpus               int     required        tp * pp * dp * cp
    global_batch       int     required        a multiple of dp * micro_batch (sequences)
    micro_batch        int     required        >= 1
    recompute          text    required        none | selective | full
    sequence_parallel  bool    required        true | false | 1 | 0 | yes | no
    gpu                text    required        a system preset or an alias (GPU_ALIASES)
    measured_iter_s    float   required        > 0, seconds per iteration
    interleave         int     1               (optional column) model chunks per pipeline stage: divides
                                               layers / pp; 1 when pp = 1
    kv_heads           int     heads           (optional column) key/value heads
    mlp                text    gelu            (optional column) gelu | swiglu | relu2
    precision          text    bf16            (optional column) bf16 | fp8 | mxfp8 | nvfp4 (nvfp4: on a
                                               system with an NVFP4 rate)
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
    doubt              text    blank           (optional column) a doubt the source states about the
                                               run's configuration (its printed layout differs from
                                               the recipe's at that release, say): predicted and
                                               reported, but `dse calibrate` neither fits it nor
                                               counts it in its errors (it prints them apart)
    recompute_layers   int     blank           (optional column) Megatron's recompute_num_layers under recompute
                                               full, method block (Profile.recompute_layers; blank: all)
    memory_gib         float   blank           (optional column) published peak memory per GPU, GiB
                                               (the output's memory_error compares the prediction)
    window             int     blank           (optional column) sliding-window attention: the keys a query
                                               of a windowed block sees (`ModelSpec.window`; 0: none, over
                                               a preset's; blank: the preset's, else none)
    window_layers      int     blank           (optional column) the blocks with that window, <= layers
                                               (needs a window, the row's or its preset's; blank: the
                                               preset's, else every block)
    offload_layers     int     0               (optional column) Megatron's cpu_offloading_num_layers:
                                               blocks whose activations go to host memory
                                               (`Profile.offload_layers`), < layers, with pp = 1 and
                                               recompute none; the system needs a host link
                                               (`SystemSpec.host_bandwidth`)
    act_fp8_store      bool    false           (optional column) a gated MLP keeps its activation's input
                                               as FP8 copies (Megatron-core's
                                               --activation-func-fp8-input-store: `Profile.act_fp8_store`)
    account_for_embedding_in_pipeline_split
                       bool    false           (optional column) Megatron's flag: the input embedding
                                               takes one layer's place on the first pipeline stage
    account_for_loss_in_pipeline_split
                       bool    false           (optional column) the logit layer and loss take one
                                               layer's place on the last stage

Mixture-of-experts runs have optional expert columns (`preset`, `ep`, `etp`, ...): their schema is
`dse.truth.experts`'s.

Any other column (`params_b`, `source`, ...) is a label, carried to the output as text; `source_id` and
`doubt` are labels read by name (`NAMED_LABELS`). A column whose name is not the schema's but nearly is
(`precison`, `Precision`: similarity >= `NEAR_NAME` to a schema column the file does not give) is refused,
not read as a label while the runs take that column's default. Every row is checked before any compute; a bad row gives
one line per problem naming the row (1-based data row and model label), the column, the value and what is
valid, and is skipped while the others are predicted. A value the engine cannot yet honour is such an error
(`NOT_YET_MODELLED`), never silently ignored; so are an integer past the engine's bounds (`INT_BOUNDS`, read
exactly however long) and a row that repeats an earlier one in every column, in its file or in another file
read with it (it would count twice). A header that names a column twice, or the same file given twice,
makes the input unusable (`MeasuredError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import polars as pl

from dse.spec.specs import INT_MAX, MAX_BATCH, MAX_GPUS, MLPS, SpecError
from dse.truth.experts import unmodelled_modules
from kernels.eager import ELEMENTWISE, FUSED
from kernels.experts import MOE_DISPATCHERS
from kernels.params import OPTIMIZER_STATES, Metrics

#: The packaged measured runs: Korthikanti et al. 2022 (arXiv 2205.05198) Table 5, with its source in each row.
PACKAGED_CSV = Path(__file__).resolve().parents[1] / "data" / "measured" / "korthikanti2022_table5.csv"

#: The packaged training corpus: the sets `dse calibrate --csv corpus` fits and `dse validate measured --csv corpus`
#: predicts (their sources and provenance beside each CSV, NAME.md).
CORPUS = ("korthikanti2022_table5", "nemo_perf_dense", "nvidia_perf_dense", "torchtitan_fsdp2")


def has_doubt(values) -> list[bool]:
    """Which of a `doubt` column's values state a doubt (nonblank text; blank or null: none): the
    one reading `dse calibrate` (not fitted, not counted) and `dse validate measured` (shown apart) share."""
    return [d is not None and bool(str(d).strip()) for d in values]


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
                    "gpus", "global_batch", "micro_batch", "recompute", "sequence_parallel", "gpu", "measured_iter_s")

#: Optional columns and their value when absent or blank (kv_heads: the row's heads; attention:
#: by system; step_time and memory_gib: not given).
OPTIONAL_COLUMNS = {"interleave": 1, "kv_heads": None, "mlp": "gelu", "precision": "bf16", "cp": 1, "attention": None,
                    "framework": "megatron", "grad_reduce": "fp32", "optimizer_state": "fp32", "step_time": None,
                    "memory_gib": None,
                    "recompute_layers": None, "preset": None, "ep": 1, "etp": None, "capacity_factor": None,
                    "mtp": 0, "pipeline_layout": None, "recompute_modules": None, "nvs_size": None,
                    "offload_layers": 0, "fp8_recipe": None, "dropout": None, "elementwise": FUSED,
                    "window": None, "window_layers": None, "token_dispatcher": None}

#: The ZeRO stage of a run whose `zero` cell is blank, by framework: Megatron's distributed optimizer, FSDP's.
DEFAULT_ZERO = {"megatron": 1, "fsdp2": 3}

#: The attention implementation of a run whose `attention` cell is blank, by system preset: the published Megatron-LM
#: runs on A100 (2021-2022: Narayanan et al., Korthikanti et al., MT-NLG) predate fused attention in Megatron-LM and
#: materialize the score matrices; runs on later GPUs use fused flash attention. Any other preset: flash.
DEFAULT_ATTENTION = {"dgx_a100_80gb": "standard", "a100": "standard"}

#: Optional boolean columns and their value when blank (None: by system, `DEFAULT_OVERLAP`).
BOOL_COLUMNS = {"tied_embeddings": True, "bias": True, "tp_comm_overlap": None, "pp_comm_overlap": None,
                "account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False,
                "moe_overlap": False, "moe_force_balance": True, "fp8_param_gather": False, "kv_repeat": False,
                "act_fp8_store": False}

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
INT_BOUNDS = {**{c: INT_MAX for c in INT_COLUMNS},
              **{c: MAX_GPUS for c in ("tp", "pp", "dp", "cp", "gpus", "ep", "etp", "nvs_size")},
              "global_batch": MAX_BATCH, "micro_batch": MAX_BATCH}
CHOICES = {"recompute": tuple(RECOMPUTE_CODES), "mlp": MLPS, "precision": ("bf16", "fp8", "mxfp8", "nvfp4"),
           "attention": ("flash", "standard"), "framework": ("megatron", "fsdp2"), "grad_reduce": ("fp32", "bf16"),
           "optimizer_state": tuple(OPTIMIZER_STATES), "step_time": ("stated", "derived"), "fp8_recipe": FP8_RECIPES,
           "elementwise": ELEMENTWISE, "token_dispatcher": MOE_DISPATCHERS}

#: Label columns read by name: the run's source for leave-one-source-out calibration (blank: the file's
#: name), and a doubt its source states (`has_doubt`).
NAMED_LABELS = ("source_id", "doubt")

#: Every column name the schema reads (the expert columns included).
SCHEMA_COLUMNS = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *BOOL_COLUMNS, "zero", *NAMED_LABELS)

#: The similarity (difflib's ratio, of lower-case names) from which a column outside the schema is taken
#: for a misspelt schema column (`precison`, `Precision`, `kv_head`) and refused, not read as a label.
NEAR_NAME = 0.85

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
