"""Public Python API: evaluate one configuration or a whole table of them.

    import dse
    r = dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", profile="lbnl",
                     global_batch=4096, n1=4, n2=1, n_p=128, n_d=8, microbatch=1,
                     nvs1=4, nvs2=1, nvs_p=2, nvs_d=1)
    r["iteration_time"], r["throughput"], r["memory"], r["feasible"]

`evaluate_many` takes columns (a mapping of arrays or a Polars DataFrame) and evaluates every row in
one jitted call. Units: seconds per iteration, samples per second, GB (1e9 bytes) per GPU.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import polars as pl

from dse.truth.calibration import apply_calibration, profile_calibration, with_error_band
from dse.explore.engine import (
    CANDIDATE_COLUMNS,
    profile_name,
    profile_of,
    run_metrics,
    space_profile,
    to_candidates,
    zero_stages,
)
from dse.explore.space import dualpipe_rules, expert_span
from dse.runtime import float64
from dse.spec.checks import (check_offloaded_candidates, check_precision_rates, check_sequence_shards, check_switches,
                             TP1D_NAMES, tp1d_aliases)
from dse.spec.specs import (
    MAX_BATCH,
    MAX_GPUS,
    ModelSpec,
    SpecError,
    SystemSpec,
    check_block,
    check_choice,
    check_int,
    load_model,
    load_system,
)
from kernels.params import DUALPIPE, PRECISIONS, RECOMPUTE, STRATEGIES
from kernels.units import training_days

#: Columns that may be left out of a candidate table, and their value then (zero: None, the
#: profile's usual ZeRO stage, `dse.explore.engine.zero_stages`; ep: gcd(n_d, E) for an MoE model,
#: `expert_parallel_default`).
OPTIONAL_COLUMNS = {"n2": 1, "nvs2": 1, "n_b": 1, "interleave": 1, "recompute": 1, "seq_par": 1, "precision": 0,
                    "zero": None, "ep": 1}

#: What `zero` may be, for the error messages.
ZERO_VALID = "0 (none), 1 (optimizer states), 2 (+ gradients) or 3 (+ parameters)"


def recompute_code(value: int | str) -> int:
    """The code of a recompute mode (`kernels.params.RECOMPUTE`) from its name or code."""
    if isinstance(value, str) and value in RECOMPUTE:
        return RECOMPUTE.index(value)
    if not isinstance(value, bool) and value in (0, 1, 2):
        return int(value)
    raise SpecError(f"recompute = {value!r}: must be one of {', '.join(RECOMPUTE)} (or 0, 1, 2)")


def precision_code(value: int | str) -> int:
    """The code of a matmul precision (`kernels.params.PRECISIONS`) from its name or code."""
    if isinstance(value, str) and value in PRECISIONS:
        return PRECISIONS.index(value)
    if not isinstance(value, bool) and value in range(len(PRECISIONS)):
        return int(value)
    raise SpecError(f"precision = {value!r}: must be one of {', '.join(PRECISIONS)} (or 0 ... {len(PRECISIONS) - 1})")


def seq_par_code(value: int | bool) -> int:
    """Sequence parallelism as a code, 1 (on) or 0 (off), from a boolean or its code."""
    if value not in (True, False, 0, 1):
        raise SpecError(f"seq_par = {value!r}: must be true or false (1 or 0)")
    return int(value)


def zero_code(value: int | str | None, profile="default") -> int:
    """The ZeRO stage (`kernels.params.ZERO_STAGES`) from 0-3 or "0"-"3"; None: the profile's
    usual stage (the first it searches)."""
    if value is None:
        return zero_stages(profile_of(profile))[0]
    if isinstance(value, str) and value.strip() in ("0", "1", "2", "3"):
        return int(value)
    if not isinstance(value, bool) and value in (0, 1, 2, 3):
        return int(value)
    raise SpecError(f"zero = {value!r}: must be {ZERO_VALID}")


def _specs(model, system, nvs_size) -> tuple[ModelSpec, SystemSpec]:
    m = load_model(model)
    s = load_system(system, nvs_size=nvs_size)
    return m, s


def models_context_parallel(profile) -> bool:
    """Whether `profile` models tp1d's n2 as context parallelism: Megatron's block (not seed 001's,
    not profile railonly's PTD-P)."""
    prof = profile_of(profile)
    return bool(prof.megatron) and space_profile(prof) != "railonly"


def check_context_parallel(table: Mapping[str, np.ndarray], model: ModelSpec, profile) -> None:
    """tp1d's n2 is Megatron-LM's context-parallel degree cp (`kernels.attention.context_exchange`):
    modelled by Megatron's block (not seed 001's, not profile railonly's PTD-P) for dense models;
    cp > 1 splits the sequence into 2 cp equal chunks (cp when not causal) and, with sequence
    parallelism, l / cp rows over n1. A bad row raises one SpecError line naming n2 = cp."""
    n1, n2, sp = table["n1"], table["n2"], table["seq_par"]
    prof = profile_of(profile)
    name = profile_name(prof)
    single = len(n1) == 1

    def fail(mask, message):
        if mask.any():
            i = int(np.argmax(mask))
            raise SpecError(("" if single else f"candidate {i}: ") + message(i))

    cp = n2 > 1
    if not models_context_parallel(prof):
        fail(cp, lambda i: f"cp = {n2[i]} (tp1d's n2): context parallelism is modelled by Megatron's "
                           f"block (profile default), not by profile {name!r}; must be 1")
        nvs2 = table["nvs2"]
        fail(nvs2 != 1, lambda i: f"nvs_cp = {nvs2[i]} (tp1d's nvs2): tp1d has no context-parallel group under "
                                  f"profile {name!r}, must be 1")
        return
    l = model.seq_len
    chunks = 2 * n2 if model.causal else n2
    what, whole = ("2 cp", l // 2) if model.causal else ("cp", l)
    fail(cp & (l % chunks != 0),
         lambda i: f"cp = {n2[i]} (tp1d's n2): the context-parallel degree must split model.seq_len = {l} into {what} = "
                   f"{chunks[i]} equal chunks" + (" (causal load balance)" if model.causal else "")
                   + (f"; cp must divide {whole}" if whole * (2 if model.causal else 1) == l
                      else "; a causal model needs an even seq_len for cp > 1"))
    rows = l // np.maximum(n2, 1)
    fail(cp & (sp == 1) & (rows % n1 != 0),
         lambda i: f"cp = {n2[i]} (tp1d's n2): the l / cp = {rows[i]} rows of a context shard must divide over n1 = {n1[i]} "
                   "(sequence parallelism); choose cp with l / cp a multiple of n1, or seq_par=false")


def _failure(table: Mapping[str, np.ndarray]):
    """`fail(mask, message)`: raise a SpecError naming the first row of `mask` (and its number when
    the table has several) with message(row)."""
    single = len(table["n1"]) == 1

    def fail(mask: np.ndarray, message) -> None:
        if mask.any():
            i = int(np.argmax(mask))
            where = "" if single else f"candidate {i}: "
            raise SpecError(where + message(i))

    return fail


def _check_ranges(table, fail) -> None:
    """Every column an integer in its range, and the GPU count and domain share below MAX_GPUS."""
    for k in CANDIDATE_COLUMNS:
        col = table[k]
        if k not in ("recompute", "seq_par", "precision", "zero"):
            fail(col < 1, lambda i, k=k, col=col: f"{k} = {col[i]}: must be an integer >= 1")
        fail(col > MAX_GPUS, lambda i, k=k, col=col: f"{k} = {col[i]}: must be an integer in [1, {MAX_GPUS:,}]")
    # products in float64 (exact far beyond the bound, never wrapping as int64 would)
    for group, names in (("n_gpus", ("n1", "n2", "n_p", "n_d")), ("NVS share", ("nvs1", "nvs2", "nvs_p", "nvs_d"))):
        prod = np.prod([table[k].astype(np.float64) for k in names], axis=0)
        fail(prod > MAX_GPUS, lambda i, names=names, group=group: (
            f"{' x '.join(f'{k} = {table[k][i]}' for k in names)}: the {group} is {prod[i]:.4g}, "
            f"above {MAX_GPUS:,} GPUs"))


def _check_modes(table, model: ModelSpec, strategy: str, prof, fail) -> None:
    """Recomputation, sequence parallelism, ZeRO stage and precision: codes the profile and the
    strategy model, and the block the profile builds."""
    n1 = table["n1"]
    rc, sp = table["recompute"], table["seq_par"]
    megatron = prof.megatron
    fail((rc < 0) | (rc > 2), lambda i: f"recompute = {rc[i]}: must be 0 (none), 1 (selective) or 2 (full)")
    fail((sp < 0) | (sp > 1), lambda i: f"seq_par = {sp[i]}: must be 0 (off) or 1 (sequence parallel)")
    zs = table["zero"]
    fail((zs < 0) | (zs > 3), lambda i: f"zero = {zs[i]}: must be {ZERO_VALID}")
    pr = table["precision"]
    fail((pr < 0) | (pr >= len(PRECISIONS)),
         lambda i: f"precision = {pr[i]}: must be " + ", ".join(f"{k} ({p})" for k, p in enumerate(PRECISIONS)))
    if not megatron:
        fail(pr != 0, lambda i: f"precision = {pr[i]}: profile {profile_name(prof)!r} models bf16 matmuls only; "
                                "must be 0 (the default profile models fp8 too)")
    if strategy == "summa":
        fail(pr != 0, lambda i: f"precision = {pr[i]}: strategy 'summa' models bf16 matmuls only; must be 0")
    if not megatron:
        name = profile_name(prof)
        fail(rc != 1, lambda i: f"recompute = {rc[i]}: profile {name!r} models selective recomputation only; "
                                "must be 1 (the default profile models 0, 1, 2)")
        fail(sp != 1, lambda i: f"seq_par = {sp[i]}: profile {name!r} models sequence parallelism only; must be 1")
    if strategy == "summa":
        fail(sp != 1, lambda i: f"seq_par = {sp[i]}: SUMMA shards its LayerNorms over both grid dimensions; must be 1")
    check_block(model, strategy, megatron, profile_name(prof))
    if megatron and strategy != "summa":
        fail(model.kv_heads % n1 != 0,
             lambda i: f"n1 = {n1[i]}: must divide model.kv_heads = {model.kv_heads} (each GPU holds whole "
                       "key/value heads)")


def _check_schedule(table, model: ModelSpec, strategy: str, prof, global_batch: int, fail) -> None:
    """The interleaved schedule: only under Megatron's block, dividing the blocks per stage, with
    a microbatch count that is a multiple of n_p; DualPipe (`Profile.pp_schedule`): no interleaving,
    an even n_p (or 1) and an even microbatch count >= n_p."""
    n_p, n_d, b, v = table["n_p"], table["n_d"], table["microbatch"], table["interleave"]
    if not prof.megatron:
        fail(v != 1, lambda i: f"interleave = {v[i]}: profile {profile_name(prof)!r} has no interleaved schedule; must be 1")
    else:
        if space_profile(prof) == "railonly" and strategy != "tp1d":
            raise SpecError(f"strategy = {strategy!r}: profile 'railonly' models Megatron PTD-P, strategy must be tp1d")
        # the layers the stages split: the blocks, plus the embedding and loss where they count as
        # layers (the pipeline-split flags, with n_p > 1)
        slots = model.pipeline_slots
        layers = np.where(n_p > 1, model.pipeline_places, model.depth + model.mtp)  # MTP blocks are stage blocks
        what = "model.depth" if not model.mtp else "model.depth + model.mtp"
        what = what if not slots else f"{what} + {slots} (the pipeline-split layers)"
        per_stage = layers // np.maximum(table["n_p"], 1)
        fail((v > 1) & (layers % np.maximum(n_p, 1) != 0),
             lambda i: f"interleave = {v[i]}: needs n_p = {n_p[i]} to divide {what} = {layers[i]}")
        fail(per_stage % v != 0,
             lambda i: f"interleave = {v[i]}: must divide the " + (
                 f"blocks per stage, depth / n_p = {per_stage[i]}" if not slots
                 else f"layers per stage, ({what}) / n_p = {per_stage[i]}"))
        m_count = (global_batch // np.maximum(n_d, 1)) // np.maximum(b, 1)
        fail((v > 1) & ((n_p == 1) | (m_count % np.maximum(n_p, 1) != 0)),
             lambda i: f"interleave = {v[i]}: the interleaved schedule needs n_p > 1 and the microbatch count "
                       f"{m_count[i]} to be a multiple of n_p = {n_p[i]}")
        if prof.pp_schedule == DUALPIPE:  # two stages a GPU, half the microbatches from each end
            broken = dualpipe_rules(n_p, m_count, v)
            fail(broken["interleave"], lambda i: f"interleave = {v[i]}: profile.pp_schedule = 'dualpipe' has no "
                                                 "virtual stages; must be 1")
            fail(broken["n_p"],
                 lambda i: f"n_p = {n_p[i]}: profile.pp_schedule = 'dualpipe' pairs stage i with stage n_p - 1 - i; "
                           "n_p must be even (or 1)")
            fail(broken["microbatches"],
                 lambda i: f"microbatch count = {m_count[i]} (global batch / n_d / microbatch): "
                           f"profile.pp_schedule = 'dualpipe' feeds half from each end; must be even and >= n_p = "
                           f"{n_p[i]}")


def _check_degrees(table, model: ModelSpec, strategy: str, prof, global_batch: int, fail) -> None:
    """SUMMA's panels, context parallelism, the degrees against the model's shape (heads, hidden,
    sequence, depth, experts, MoE alternations) and the batch."""
    n1, n2, n_p, n_d, b = (table[k] for k in ("n1", "n2", "n_p", "n_d", "microbatch"))
    megatron = prof.megatron
    nb = table["n_b"]
    if strategy != "summa":
        fail(nb != 1, lambda i: f"n_b = {nb[i]}: only strategy 'summa' has panels; n_b must be 1 for {strategy!r}")
    else:  # panels of e / n_b columns, each a multiple of the grid's larger side (seed 001 III-E)
        side = np.maximum(n1, n2)
        fail((nb % side != 0) | (model.hidden % nb != 0),
             lambda i: f"n_b = {nb[i]}: SUMMA's panel count must be a multiple of max(n1, n2) = {side[i]} "
                       f"that divides model.hidden = {model.hidden}")
    if strategy == "tp1d":
        check_context_parallel(table, model, prof)
    fail(model.heads % n1 != 0,
         lambda i: f"n1 = {n1[i]}: must divide model.heads = {model.heads}")
    fail(model.hidden % n1 != 0,
         lambda i: f"n1 = {n1[i]}: must divide model.hidden = {model.hidden}")
    fail(n2 > model.seq_len,
         lambda i: f"n2 = {n2[i]}: must be <= model.seq_len = {model.seq_len}")
    if strategy == "summa":
        fail(model.hidden % n2 != 0,
             lambda i: f"n2 = {n2[i]}: SUMMA splits weight rows over n2, must divide model.hidden = {model.hidden}")
    lay = model.layout
    if lay is not None:
        v = table["interleave"]
        fail(n_p * v != lay.stages,
             lambda i: f"n_p = {n_p[i]}: with interleave = {v[i]}, n_p * interleave must be the {lay.stages} stages "
                       f"of model.pipeline_layout = {model.pipeline_layout!r}")
    if megatron:  # uneven stages: the first ones take ceil(depth / n_p) blocks
        fail(n_p > model.depth, lambda i: f"n_p = {n_p[i]}: must be <= model.depth = {model.depth}")
    else:
        fail(model.depth % n_p != 0,
             lambda i: f"n_p = {n_p[i]}: must divide model.depth = {model.depth}")
    ep = table["ep"]
    if not model.moe:
        fail(ep != 1, lambda i: f"ep = {ep[i]}: model {model.name!r} has no experts; must be 1")
    else:
        fail(model.experts % ep != 0,
             lambda i: f"ep = {ep[i]}: must divide model.experts = {model.experts}")
        expert_tp = strategy == "summa" or prof.expert_tp
        span, what = expert_span(strategy, n1, n2, n_d, expert_tp)
        why = ("the experts are sharded over the tensor-parallel group and spread over the other GPUs of a stage"
               if expert_tp else "profile.expert_tp false: whole experts on every GPU of a stage")
        fail(span % ep != 0, lambda i: f"ep = {ep[i]}: must divide {what} = {span[i]} ({why})")
    if model.moe and (model.moe_every > 1 or not megatron):
        fail(model.depth % np.maximum(n_p, 1) != 0,
             lambda i: f"n_p = {n_p[i]}: must divide model.depth = {model.depth} for an MoE model with "
                       f"moe_every = {model.moe_every}")
        stage = model.depth // np.maximum(n_p, 1)
        fail(stage % model.moe_every != 0,
             lambda i: f"n_p = {n_p[i]}: each stage must hold whole dense/MoE alternations "
                       f"(depth / n_p = {stage[i]} is not a multiple of moe_every = {model.moe_every})")
    fail(global_batch % n_d != 0,
         lambda i: f"n_d = {n_d[i]}: must divide global_batch = {global_batch}")
    per_replica = global_batch // n_d
    fail(per_replica % b != 0,
         lambda i: f"microbatch = {b[i]}: must divide global_batch / n_d = {per_replica[i]}")


def _check_placement(table, nvs_size: int, fail) -> None:
    """Each group's GPUs in a domain divide its degree, and together fit in one NVS domain."""
    for g, deg in (("nvs1", "n1"), ("nvs2", "n2"), ("nvs_p", "n_p"), ("nvs_d", "n_d")):
        t, d = table[g], table[deg]
        fail(d % t != 0, lambda i, g=g, deg=deg, t=t, d=d: f"{g} = {t[i]}: must divide {deg} = {d[i]}")
    prod = table["nvs1"] * table["nvs2"] * table["nvs_p"] * table["nvs_d"]
    fail(prod > nvs_size,
         lambda i: f"nvs1*nvs2*nvs_p*nvs_d = {prod[i]}: the GPUs placed in one NVS domain must be <= nvs_size = {nvs_size}")


def validate_candidates(
    table: Mapping[str, np.ndarray], model: ModelSpec, nvs_size: int, strategy: str, global_batch: int,
    profile: str = "default",
) -> None:
    """Check every row of a candidate table; raise `SpecError` naming the first bad row and field.

    A valid configuration: positive integer degrees; n1 divides heads and hidden; n2 <= seq_len
    (summa: n2 divides hidden; tp1d: n2 = cp, `check_context_parallel`); n_p divides depth; n_d divides the global batch and
    the microbatch divides the per-replica batch; each group's GPUs in a domain (nvs1, nvs2, nvs_p,
    nvs_d) divide its degree, and together fit in one NVS domain.
    """
    fail = _failure(table)
    _check_ranges(table, fail)
    prof = profile_of(profile)
    _check_modes(table, model, strategy, prof, fail)
    _check_schedule(table, model, strategy, prof, global_batch, fail)
    _check_degrees(table, model, strategy, prof, global_batch, fail)
    check_sequence_shards(table, model, strategy, fail)  # at least one token of a sequence per GPU
    _check_placement(table, nvs_size, fail)


def expert_parallel_default(model: ModelSpec, n_d: np.ndarray) -> np.ndarray:
    """The expert-parallel degree of rows that leave `ep` out: gcd(n_d, E) for an MoE model (the
    experts over as many replicas as divide both, the group `dse` used before ep was a column, and
    what profiles lbnl and railonly search), 1 for a dense model."""
    n_d = np.asarray(n_d, dtype=np.int64)
    if not model.moe:
        return np.ones_like(n_d)
    return np.gcd(n_d, np.int64(model.experts))


def _table(candidates, strategy: str, zero: int = 1, model: ModelSpec | None = None) -> dict[str, np.ndarray]:
    if isinstance(candidates, pl.DataFrame):
        candidates = {c: candidates[c].to_numpy() for c in candidates.columns}
    if not isinstance(candidates, Mapping):
        raise SpecError(f"candidates: must be a mapping of columns or a polars DataFrame, got {type(candidates).__name__}")
    extra = [k for k in candidates if k not in CANDIDATE_COLUMNS]
    if extra:
        raise SpecError(f"candidates.{extra[0]}: not a candidate column; valid: {', '.join(CANDIDATE_COLUMNS)}")
    lengths = set()
    table = {}
    for k in CANDIDATE_COLUMNS:
        if k not in candidates:
            if k in OPTIONAL_COLUMNS and not (k == "n_b" and strategy == "summa"):
                continue
            raise SpecError(f"candidates.{k}: missing; a candidate table needs {', '.join(CANDIDATE_COLUMNS)}")
        col = np.asarray(candidates[k])
        if col.ndim == 0:
            col = col.reshape(1)
        if col.ndim != 1:
            raise SpecError(f"candidates.{k}: must be one-dimensional, got shape {col.shape}")
        if col.dtype.kind == "f" and np.all(np.isfinite(col)) and np.all(col == np.round(col)):
            col = col.astype(np.int64)
        if col.dtype.kind not in "iu":
            raise SpecError(f"candidates.{k}: must hold integers, got dtype {col.dtype}")
        table[k] = col.astype(np.int64)
        lengths.add(len(col))
    if len(lengths) > 1:
        raise SpecError(f"candidates: columns have different lengths {sorted(lengths)}")
    n = lengths.pop()
    if "ep" not in table and model is not None:
        table["ep"] = expert_parallel_default(model, np.maximum(table["n_d"], 1))
    for k, v in OPTIONAL_COLUMNS.items():
        table.setdefault(k, np.full(n, zero if v is None else v, dtype=np.int64))
    return table


@float64
def evaluate_many(
    candidates,
    *,
    model: str | Mapping | ModelSpec,
    system: str | Mapping | SystemSpec,
    strategy: str,
    profile: str = "default",
    global_batch: int = 4096,
    nvs_size: int | None = None,
    validate: bool = True,
    network: str | Mapping | Any = "two_tier",
    economics: Any = None,
) -> pl.DataFrame:
    """Evaluate every row of a candidate table in one jitted call.

    `candidates` holds the columns n1, n2, n_p, n_d, microbatch, nvs1, nvs2, nvs_p, nvs_d, n_b
    (n2, nvs2 default to 1; n_b defaults to 1 except for summa), and optionally interleave,
    recompute, seq_par, precision and zero (the ZeRO stage; left out: the profile's usual one). Returns a DataFrame with the
    candidate columns, `n_gpus` and every metric of `kernels.Metrics`, plus `training_days` when the
    model has a training-set size, and the network with the equipment, cost and power of its NIC
    fabric for the job's GPUs (`dse.spec.network`), and the run's cost, energy and power
    (`dse.results.economics`; `economics`: a preset of conf/economics, a mapping of fields over the
    system's preset, or an `EconomicsSpec`; None: the system's preset).
    """
    from dse.results.economics import check_economics, with_cost_columns
    from dse.spec.network import load_network, with_network_columns

    strategy = check_choice("strategy", strategy, STRATEGIES)
    prof = profile_of(profile)
    global_batch = check_int("global_batch", global_batch, 1, MAX_BATCH)
    net = load_network(network)
    m, s = _specs(model, system, nvs_size)
    cal = profile_calibration(prof)
    s = apply_calibration(s, cal)
    check_economics(economics)
    table = _table(candidates, strategy, zero_code(None, prof), m)
    check_precision_rates("precision", table["precision"], [s])
    check_switches(prof, [s])
    check_offloaded_candidates(prof, table["n_p"], table["recompute"])
    if validate:
        validate_candidates(table, m, s.nvs_size, strategy, global_batch, prof)
    metrics = run_metrics(strategy, prof, to_candidates(table), m.workload(global_batch),
                          net.apply(s).params(), net.name, m.arch)
    frame = {k: table[k] for k in CANDIDATE_COLUMNS}
    frame["n_gpus"] = table["n1"] * table["n2"] * table["n_p"] * table["n_d"]
    frame.update(metrics)
    if m.samples is not None:
        frame["training_days"] = training_days(m.samples, metrics["throughput"])
    frame["nvs_size"] = np.full(len(table["n1"]), s.nvs_size, dtype=np.int64)
    out = with_error_band(with_network_columns(pl.DataFrame(frame), net, space_profile(prof)), cal, s.generation, m.arch.moe)
    return with_cost_columns(out, economics, s.name)


def evaluate(
    *,
    model: str | Mapping | ModelSpec,
    system: str | Mapping | SystemSpec,
    strategy: str = "tp1d",
    profile: str = "default",
    nvs_size: int | None = None,
    global_batch: int = 4096,
    n1: int = 1,
    n2: int = 1,
    n_p: int = 1,
    n_d: int = 1,
    microbatch: int = 1,
    nvs1: int | None = None,
    nvs2: int | None = None,
    nvs_p: int | None = None,
    nvs_d: int | None = None,
    n_b: int | None = None,
    interleave: int = 1,
    recompute: int | str = "selective",
    seq_par: int | bool = True,
    precision: int | str = "bf16",
    zero: int | str | None = None,
    network: str | Mapping | Any = "two_tier",
    ep: int | None = None,
    economics: Any = None,
    cp: int | None = None,
    nvs_cp: int | None = None,
) -> dict[str, Any]:
    """Evaluate one configuration; returns a dict of its inputs and metrics (Python scalars).

    The NVS assignment (nvs1, nvs2, nvs_p, nvs_d: GPUs of each group inside one NVS domain) may be
    left out when the whole job fits in one domain; it then defaults to the degrees. Strategy tp1d
    names its n2 and nvs2 `cp` and `nvs_cp` (Megatron's context parallelism), as `dse eval` does:
    either name may be given, not both with different values; without context parallelism
    (cp = 1) its nvs2 is 1 wherever the job runs. `zero` is the
    ZeRO stage, 0-3 (None: the profile's usual stage, 1; the rail-only papers' 0). `ep`, the
    expert-parallel degree of an MoE model, defaults to gcd(n_d, E) (1 for a dense model).
    `economics`: the prices and powers of the cost columns (`dse.results.economics`).
    """
    strategy = check_choice("strategy", strategy, STRATEGIES)
    named = tp1d_aliases(strategy, {"cp": cp, "nvs_cp": nvs_cp}, {"n2": n2, "nvs2": nvs2})
    n2, nvs2 = named["n2"], named["nvs2"]
    s = load_system(system, nvs_size=nvs_size)
    point = {"n1": n1, "n2": n2, "n_p": n_p, "n_d": n_d, "microbatch": microbatch}
    point = {k: check_int(k, v) for k, v in point.items()}
    if n_b is None:
        if strategy == "summa":
            raise SpecError("n_b: missing; strategy 'summa' needs the SUMMA panel count n_b >= 1")
        n_b = 1
    elif strategy != "summa" and n_b != 1:
        raise SpecError(f"n_b = {n_b}: only strategy 'summa' has panels; leave n_b out for {strategy!r}")
    point["n_b"] = check_int("n_b", n_b)
    point["interleave"] = check_int("interleave", interleave)
    point["recompute"] = recompute_code(recompute)
    point["seq_par"] = seq_par_code(seq_par)
    point["precision"] = precision_code(precision)
    point["zero"] = zero_code(zero, profile)
    if ep is not None:
        point["ep"] = check_int("ep", ep)
    assignment = {"nvs1": nvs1, "nvs2": nvs2, "nvs_p": nvs_p, "nvs_d": nvs_d}
    n_gpus = point["n1"] * point["n2"] * point["n_p"] * point["n_d"]
    degree = {"nvs1": "n1", "nvs2": "n2", "nvs_p": "n_p", "nvs_d": "n_d"}
    if strategy == "tp1d" and assignment["nvs2"] is None and (point["n2"] == 1 or not models_context_parallel(profile)):
        # no context parallelism (or a profile without it, which refuses cp > 1 below): nothing to place;
        # cp > 1 takes the rule of every group
        assignment["nvs2"] = 1
    for k, v in assignment.items():  # a given share larger than the domain, named before any missing one
        if v is not None and check_int(k, v) > s.nvs_size:
            name = TP1D_NAMES.get(k, k) if strategy == "tp1d" else k
            raise SpecError(f"{name} = {v}: more GPUs of one group in an NVS domain than it holds; "
                            f"must be <= nvs_size = {s.nvs_size}")
    if n_gpus <= s.nvs_size:  # the whole job sits in one domain: each group entirely
        assignment = {k: point[degree[k]] if v is None else v for k, v in assignment.items()}
    elif any(v is None for v in assignment.values()):
        missing = next(k for k, v in assignment.items() if v is None)
        named = TP1D_NAMES if strategy == "tp1d" else {}
        names = ", ".join(named.get(k, k) for k in assignment)
        shown = named.get(missing, missing)
        raise SpecError(
            f"{shown}: missing; the job's {n_gpus} GPUs span NVS domains of {s.nvs_size}, "
            f"so give the GPUs of each group per domain ({names})")
    point.update({k: check_int(k, v) for k, v in assignment.items()})
    frame = evaluate_many({k: np.array([v]) for k, v in point.items()}, model=model, system=s,
                          strategy=strategy, profile=profile, global_batch=global_batch, network=network,
                          economics=economics)
    row = frame.row(0, named=True)
    row["feasible"] = bool(row["feasible"])
    return row
