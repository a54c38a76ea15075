"""Measured training runs: read them from a CSV, lay them out as Megatron does, predict each one.

    import dse.truth.measured as dm
    runs = dm.read_runs()                 # the packaged CSV (Korthikanti et al. 2022 Table 5)
    runs.errors                           # one line per bad row: reported, and the row skipped
    result = dm.predict(runs)             # one engine call per (model shape, system, global batch)
    dm.predict(runs, calibration="none")  # under another calibration (a name, a FILE.yaml, none)
    result.frame                          # every input column + predicted_iter_s, error, profile, system

The CSV schema is `dse.truth.schema`'s; reading and checking the rows `dse.truth.runs`'s (the names
callers use re-exported here).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl

from dse.spec.specs import PIPELINE_SPLIT_FIELDS, ModelSpec, SpecError, load_system
from dse.truth.experts import modules_profile
from dse.truth.placement import megatron_placement, resolve_gpu  # noqa: F401  (dm.resolve_gpu, for callers)
from dse.truth.runs import (  # noqa: F401  (the schema's names callers use as dm.*)
    CORPUS, GIB_PER_GB, PACKAGED_CSV, PRECISION_CODES, RECOMPUTE_CODES, REQUIRED_COLUMNS, MeasuredError,
    MeasuredRuns, PARTS, RowError, corpus_paths, read_runs)

#: The engine's strategy for Megatron's 1D tensor parallelism, and the profile predictions use by
#: default.
STRATEGY = "tp1d"
PROFILE = "default"

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
    framework: str = "megatron"  # what overlaps what (`kernels.frameworks.FRAMEWORKS`)
    grad_bf16: bool = False  # gradients accumulated and reduced in bf16 (Profile.grad_reduce_in_bf16)
    optimizer_state: str = "fp32"  # Adam's master weights and moments (Profile.optimizer_state)
    expert_tp: bool = True  # experts sharded over the tensor-parallel group (etp = tp; Profile.expert_tp)
    ep_overlap: bool = False  # all-to-alls overlapped with another microbatch (Profile.ep_comm_overlap)
    recompute_modules: str = "core_attn"  # what the selective mode recomputes (Profile.recompute_modules)
    offload_layers: int = 0  # blocks whose activations go to host memory (Profile.offload_layers)
    recompute_layers: int = 0  # blocks of each chunk full recomputation recomputes, 0 all (Profile.recompute_layers)
    fp8_recipe: str | None = None  # an fp8 run's scaling (`FP8_RECIPES`; rowwise: collectives in high precision)
    fp8_param_gather: bool = False  # parameters allgathered in FP8 (Profile.fp8_param_gather)
    kv_repeat: bool = False  # K, V repeated to every query head before attention (Profile.kv_repeat)
    act_fp8_store: bool = False  # a gated MLP's activation input kept in FP8 (Profile.act_fp8_store)
    elementwise: str = "fused"  # fused kernels, or PyTorch's eager operators (Profile.elementwise)
    dropless: bool = True  # MoE routing without a capacity factor (Profile.moe_dropless): a blank capacity_factor
    dispatcher: str | None = None  # Megatron-core's token dispatcher (Profile.moe_dispatcher); None: the profile's

    @property
    def rowwise(self) -> bool:
        """The runs' FP8 matmuls are scaled per row (`fp8_recipe` rowwise; the reader allows a recipe on
        fp8 runs only): `Profile.fp8_rowwise` on, their collectives in high precision."""
        return self.fp8_recipe == "rowwise"


@dataclass(frozen=True)
class Prediction:
    """The predicted runs (`frame`) and every row that was not predicted, with why (`errors`)."""

    frame: pl.DataFrame
    errors: tuple[RowError, ...]
    profile: str
    calibration: str = "none"  # the calibration the predictions applied: a name, a FILE.yaml or "none"


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
    (`RECOMPUTE_CODES`), seq_par (1 = sequence parallel) and precision (0 bf16, 1 fp8 and mxfp8, 2 nvfp4); n_b = 1."""
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
        "zero": col("zero"), "ep": col("ep"),
    }


def plan(runs: MeasuredRuns) -> list[EngineCall]:
    """The engine calls that predict `runs`: one per (model shape, system, global batch), rows in CSV
    order within each, calls in the order of their first row."""
    calls = []
    keys = [*SHAPE, "kv_heads", "mlp", "tied_embeddings", "bias", "system", "global_batch", "attention",
            "tp_comm_overlap", "pp_comm_overlap", "framework", "grad_reduce", "optimizer_state", *PIPELINE_SPLIT_FIELDS,
            "preset", "capacity_factor", "mtp", "pipeline_layout", "moe_overlap", "expert_tp", "nvs_size", "modules",
            "offload_layers", "fp8_recipe", "fp8_param_gather", "kv_repeat", "act_fp8_store", "elementwise", "dropout",
            "window", "window_layers", "partial", "token_dispatcher"]
    rows = runs.rows.with_columns((pl.col("etp") == pl.col("tp")).alias("expert_tp"),
                                  pl.col("recompute_modules").map_elements(modules_profile, return_dtype=pl.Utf8)
                                  .fill_null("core_attn").alias("modules"),
                                  pl.col("recompute_layers").fill_null(0).alias("partial"))
    for _, group in rows.group_by(keys, maintain_order=True):
        first = group.row(0, named=True)
        calls.append(EngineCall(rows=tuple(group["row"].to_list()), model=run_model(first), system=first["system"],
                                nvs_size=(nvs_size := first["nvs_size"] or load_system(first["system"]).nvs_size),
                                global_batch=first["global_batch"],
                                table=candidate_table(group, nvs_size), flash=first["attention"] == "flash",
                                tp_overlap=first["tp_comm_overlap"], pp_overlap=first["pp_comm_overlap"],
                                framework=first["framework"], grad_bf16=first["grad_reduce"] == "bf16",
                                optimizer_state=first["optimizer_state"],
                                expert_tp=first["expert_tp"], ep_overlap=first["moe_overlap"],
                                recompute_modules=first["modules"], offload_layers=first["offload_layers"],
                                fp8_recipe=first["fp8_recipe"], fp8_param_gather=first["fp8_param_gather"],
                                kv_repeat=first["kv_repeat"], act_fp8_store=first["act_fp8_store"],
                                elementwise=first["elementwise"], dropless=first["capacity_factor"] is None,
                                recompute_layers=first["partial"], dispatcher=first["token_dispatcher"]))
    return calls


def run_model(row: dict) -> ModelSpec:
    """The model of a checked run: its preset (experts and all) at the run's sequence length, capacity
    factor, MTP modules, pipeline layout and dropout; without a preset, the dense model of its shape columns
    (biases as its `bias` column says)."""
    split = {k: row[k] for k in PIPELINE_SPLIT_FIELDS}
    recipe = {k: row[k] for k in ("dropout", "window", "window_layers") if row.get(k) is not None}  # over the preset's
    if recipe.get("window") == 0:  # no window, over a preset's
        recipe.update(window=None, window_layers=None)
    if row.get("preset"):
        from dse.spec.specs import load_model

        spec = load_model(row["preset"])
        changes = dict(seq_len=row["seq_len"], mtp=row.get("mtp") or 0, pipeline_layout=row.get("pipeline_layout"),
                       **split, **recipe)
        if row.get("capacity_factor") is not None and spec.moe:
            changes["capacity_factor"] = row["capacity_factor"]
        return load_model(spec, **changes)
    return ModelSpec(name=model_name(row["model"]), seq_len=row["seq_len"], hidden=row["hidden"],
                     heads=row["heads"], depth=row["layers"], ffn=row["ffn"], vocab=row["vocab"],
                     kv_heads=row["kv_heads"], mlp=row["mlp"], tied_embeddings=row["tied_embeddings"],
                     bias=row["bias"], mtp=row.get("mtp") or 0, pipeline_layout=row.get("pipeline_layout"),
                     **split, **recipe)


def run_profile(profile, call: EngineCall):
    """The engine profile that predicts `call`: `profile` as the runs' framework runs it
    (`kernels.params.with_framework`), with their attention implementation, communication overlaps,
    gradient dtype, optimizer state, K and V repetition, FP8 activation inputs, elementwise kernels,
    dropless or token-drop routing, token dispatcher, partial recomputation and FP8 recipes (rowwise
    scaling: its own matmul rate, every collective in high precision; a profile without Megatron's block
    has one model of each only)."""
    from dse.explore.engine import profile_of
    from kernels.frameworks import tp_overlap_switches
    from kernels.params import Profile, with_framework

    prof = profile_of(profile)
    if isinstance(prof, Profile) and prof.megatron:
        framed = with_framework(prof, call.framework)
        return framed._replace(
            flash_attention=call.flash, pp_comm_overlap=call.pp_overlap, grad_reduce_in_bf16=call.grad_bf16,
            optimizer_state=call.optimizer_state,
            expert_tp=call.expert_tp, ep_comm_overlap=call.ep_overlap, recompute_modules=call.recompute_modules,
            offload_layers=call.offload_layers, fp8_param_gather=call.fp8_param_gather, kv_repeat=call.kv_repeat,
            recompute_layers=call.recompute_layers, act_fp8_store=call.act_fp8_store,
            elementwise=call.elementwise, moe_dropless=call.dropless,
            moe_dispatcher=call.dispatcher or framed.moe_dispatcher,
            fp8_tp_gather=framed.fp8_tp_gather and not call.rowwise, fp8_rowwise=call.rowwise,
            **tp_overlap_switches(call.framework, call.tp_overlap))
    return prof


def _evaluate(call: EngineCall, profile, rows: slice | None = None) -> np.ndarray:
    """(iteration time s, memory GB per GPU, HBM GB, then the prediction's `PARTS`: seconds that sum
    to the time, GB that sum to the memory) of the call's runs, one row each, under `profile` (a name
    or a `Profile`, its calibration included) as `run_profile` frames it."""
    from dse.api import evaluate_many

    table = call.table if rows is None else {k: v[rows] for k, v in call.table.items()}
    frame = evaluate_many(table, model=call.model, system=call.system, strategy=call.strategy,
                          profile=run_profile(profile, call),
                          global_batch=call.global_batch, nvs_size=call.nvs_size)
    hbm = np.full(frame.height, load_system(call.system).hbm_capacity, dtype=np.float64)
    return np.stack([frame["iteration_time"].to_numpy(), frame["memory"].to_numpy(), hbm,
                     *(frame[c].to_numpy() for c in PARTS)], axis=1)


def predict(runs: MeasuredRuns | str | os.PathLike | None = None, profile: str = PROFILE,
            calibration: str | None = None) -> Prediction:
    """Predict the iteration time of every checked run: one `dse.evaluate_many` call per `plan` entry
    (strategy tp1d, the system preset's node as the NVS domain), under `calibration` (a calibration
    of conf/calibration/, a FILE.yaml as `dse calibrate --out` writes it, or "none": the systems' own
    efficiencies; None: the profile's own, `Profile.calibration`), checked before any compute.

    Returns the predicted rows with every input column, `predicted_iter_s`, `error` (predicted /
    measured - 1), `profile`, `system` and the prediction's `PARTS` (t_compute ... mem_reserved), and
    the rows not predicted with why: the reading's errors,
    then any the engine raised (a group the engine rejects is retried row by row, so each rejected
    row is named and the others are still predicted).
    """
    from dse.explore.engine import profile_name, profile_of
    from dse.truth.calibration import NONE, load_calibration

    prof = profile_of(profile)
    name = profile_name(prof)
    if calibration is not None:
        load_calibration(calibration)  # a bad name or file: the loader's one line, before any compute
        prof = prof._replace(calibration=calibration or NONE)
    if not isinstance(runs, MeasuredRuns):
        runs = read_runs(runs)
    labels = dict(zip(runs.rows["row"].to_list(), runs.rows["model"].to_list()))
    predicted: dict[int, np.ndarray] = {}
    errors = list(runs.errors)
    for call in plan(runs):
        try:
            values = list(_evaluate(call, prof))
        except SpecError:
            values = []
            for i, row in enumerate(call.rows):
                try:
                    values.append(_evaluate(call, prof, slice(i, i + 1))[0])
                except SpecError as exc:
                    values.append(None)
                    errors.append(RowError(row, labels[row], "engine", str(exc)))
        for row, v in zip(call.rows, values):
            if v is not None:
                predicted[row] = v
    errors.sort(key=lambda e: e.row)
    kept = runs.rows.filter(pl.col("row").is_in(list(predicted)))
    got = np.array([predicted[r] for r in kept["row"]], dtype=np.float64).reshape(-1, 3 + len(PARTS))
    frame = kept.select("row", *runs.columns, "system").with_columns(
        pl.Series("predicted_iter_s", got[:, 0], dtype=pl.Float64),
        pl.Series("predicted_memory_gb", got[:, 1], dtype=pl.Float64),
        pl.Series("hbm_gb", got[:, 2], dtype=pl.Float64),
        *(pl.Series(c, got[:, 3 + i], dtype=pl.Float64) for i, c in enumerate(PARTS)))
    frame = frame.with_columns(
        (pl.col("predicted_iter_s") / pl.col("measured_iter_s") - 1.0).alias("error"),
        (pl.col("predicted_memory_gb") <= pl.col("hbm_gb")).alias("fits"),
        (pl.col("predicted_memory_gb") / (pl.col("memory_gib") * GIB_PER_GB) - 1.0).alias("memory_error"),
        pl.lit(name, dtype=pl.Utf8).alias("profile"),
    ).select("row", *runs.columns, "predicted_iter_s", "error", "predicted_memory_gb", "hbm_gb", "fits",
             "memory_error", "profile", "system", *PARTS)
    return Prediction(frame=frame, errors=tuple(errors), profile=name,
                      calibration=getattr(prof, "calibration", NONE) or NONE)


def write_parquet(prediction: Prediction, path: str | os.PathLike, source: str = "") -> Path:
    """Write `prediction.frame` as Parquet, atomically (a temporary file beside `path`, then renamed);
    file metadata key `dse.truth.measured`: the profile, its calibration, the source CSV and the rows
    not predicted."""
    import pyarrow.parquet as pq

    from dse import __version__

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = prediction.frame.to_arrow()
    meta = {"dse_version": __version__, "profile": prediction.profile, "calibration": prediction.calibration,
            "strategy": STRATEGY,
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
