"""The expert columns of measured-run CSVs (`dse.truth.runs`): a model preset for the architecture,
expert parallelism, Megatron-core's MoE settings; read and checked per row before any compute.

Mixture-of-experts runs (optional columns):

    preset             text    blank           a model preset (`dse.spec.specs.model_presets`): the
                                               architecture, experts included; the shape columns
                                               (heads, hidden, layers, ffn, vocab, kv_heads, mlp,
                                               tied_embeddings) may then be left out, and where
                                               given must equal the preset's
    ep                 int     1               expert-parallel degree: divides the preset's experts,
                                               and with etp divides the stage's tp * cp * dp GPUs
    etp                int     tp              expert tensor-parallel degree, 1 or tp (Megatron's
                                               default: tp; 1: whole experts per GPU, the expert
                                               group folded over the tensor-parallel ranks)
    capacity_factor    float   blank           token drop with each expert padded to capacity_factor
                                               times its even share (routed slots = top_k x factor);
                                               blank: dropless
    moe_force_balance  bool    true            the run forces balanced routing (NVIDIA's performance
                                               runs); false is honoured with token drop (padded to
                                               capacity: every expert's load is its capacity);
                                               dropless unbalanced routing is refused (not yet modelled)
    moe_overlap        bool    false           all-to-alls overlapped with another microbatch's compute
                                               (Megatron's overlap_moe_expert_parallel_comm)
    token_dispatcher   text    the profile's   Megatron-core's token dispatcher: alltoall, deepep or
                                               hybridep (`Profile.moe_dispatcher`)
    mtp                int     0               DeepSeek's multi-token-prediction modules trained with
                                               the model (their blocks on the last stage)
    nvs_size           int     the system's    GPUs of the job per NVLink domain, where the scheduler
                                               gave it fewer than the system has (NVIDIA's GB200
                                               scripts ask Slurm for segments of at most 18 nodes
                                               that divide the job: 64 of an NVL72's GPUs for 256)
    pipeline_layout    text    blank           Megatron's pipeline_model_parallel_layout
                                               (`dse.spec.layout`): its stages must be pp * interleave
    recompute_modules  text    core_attn       Megatron's --recompute-modules (';'-separated) of the
                                               selective mode: core_attn, layernorm (rmsnorm),
                                               mla_up_proj, mlp, moe_act (`Profile.recompute_modules`);
                                               moe and shared_experts are refused (not yet modelled)
    precision mxfp8 runs the FP8 rate (MX block scaling, 32-element blocks; the scale factors' bytes
    are not counted); nvfp4 the system's NVFP4 rate, its quantized tensors at `NVFP4_BYTES` a value.
"""

from __future__ import annotations

import math
import re
from typing import Any

from dse.spec.checks import SpecError
from kernels.params import RECOMPUTE_MODULES, module_names


def short(text: str) -> str:
    """A cell as an error message quotes it: whole up to 40 characters, else its start and length."""
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text)} characters)"


def whole(text: str) -> int | None:
    """A positive integer written as 8 or 8.0 (digits read exactly, however many); None otherwise."""
    if re.fullmatch(r"\+?[0-9]+", text):
        value = int(text)
    else:
        try:
            number = float(text)
        except ValueError:
            return None
        if not math.isfinite(number) or not number.is_integer():
            return None
        value = int(number)
    return value if value >= 1 else None


def number_cell(text: dict[str, str], row: dict[str, Any], bad: list[tuple[str, str]], col: str, valid: str,
                low: float = 0.0, high: float = math.inf, low_open: bool = True) -> None:
    """An optional number of column `col` in (low, high] (`low_open`) or [low, high] into `row`
    (None when blank or not such a number, the latter a problem saying it must be `valid`)."""
    cell = (text.get(col) or "").strip()
    row[col] = None
    if not cell:
        return
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and (value > low if low_open else value >= low) and value <= high:
        row[col] = value
    else:
        bad.append((col, f"{cell}: must be {valid}"))


#: Shape columns a row with a `preset` may leave out (the preset's value), and the preset's field
#: of each.
PRESET_SHAPE = {"heads": "heads", "hidden": "hidden", "layers": "depth", "ffn": "ffn", "vocab": "vocab",
                "kv_heads": "kv_heads", "mlp": "mlp", "tied_embeddings": "tied_embeddings", "bias": "bias"}

#: Megatron's --recompute-modules the engine models (`kernels.params.RECOMPUTE_MODULES`), and the
#: other names recipes give them (rmsnorm: the layernorm module of an RMSNorm model).
MODULE_ALIASES = {"rmsnorm": "layernorm"}


def run_modules(text) -> tuple[str, ...]:
    """The recompute modules of a `recompute_modules` cell, aliases resolved, sorted."""
    return tuple(sorted({MODULE_ALIASES.get(m, m) for m in module_names(text)}))


def unmodelled_modules(text) -> tuple[str, ...]:
    """The modules of a `recompute_modules` cell the engine does not model."""
    return tuple(m for m in run_modules(text) if m not in RECOMPUTE_MODULES)


def modules_profile(text) -> str:
    """The `Profile.recompute_modules` of a `recompute_modules` cell: `run_modules` joined by '+';
    blank: Megatron's default, core_attn."""
    return "+".join(run_modules(text)) or "core_attn"


def preset_spec(name: str, row: dict[str, Any], bad: list[tuple[str, str]]):
    """The `ModelSpec` of a row's `preset` (None when blank or unknown, the latter a problem)."""
    from dse.spec.specs import load_model, model_presets

    row["preset"] = name or None
    if not name:
        return None
    if name not in model_presets():
        bad.append(("preset", f"{name}: not a model preset; valid: {', '.join(model_presets())}"))
        return None
    return load_model(name)


def expert_values(text: dict[str, str], row: dict[str, Any], bad: list[tuple[str, str]], spec) -> None:
    """The expert columns of a row: mtp, capacity_factor, pipeline_layout, recompute_modules; and a
    given shape column checked against the preset's value."""
    mtp = (text.get("mtp") or "").strip()
    row["mtp"] = 0
    if mtp:
        value = whole(mtp) if mtp not in ("0", "0.0") else 0
        if value is None or value > 64:
            bad.append(("mtp", f"{mtp}: must be an integer in [0, 64] (multi-token-prediction modules)"))
        else:
            row["mtp"] = value
    number_cell(text, row, bad, "capacity_factor", "a number > 0 (token drop) or blank (dropless)")
    row["pipeline_layout"] = (text.get("pipeline_layout") or "").strip() or None
    row["recompute_modules"] = (text.get("recompute_modules") or "").strip() or None
    if spec is None:
        return
    for col, field_name in PRESET_SHAPE.items():
        given = (text.get(col) or "").strip()
        want = getattr(spec, field_name)
        if given and col not in {c for c, _ in bad} and str(row.get(col)).lower() != str(want).lower():
            bad.append((col, f"{given}: preset {spec.name!r} has {field_name} = {want}; leave it blank or equal"))


def expert_checks(row: dict[str, Any], bad: list[tuple[str, str]], have):
    """The expert columns against the preset and the degrees: ep divides the experts and, with etp,
    the stage's GPUs; etp is 1 or tp; the pipeline layout is one the kernels model and matches pp x
    interleave, the layers and mtp. Returns the parsed layout (or None)."""
    from dse.explore.space import expert_span
    from dse.spec.layout import parse_layout
    from dse.spec.specs import load_model

    unknown = "preset" in {c for c, _ in bad}  # the preset's own line says so: its experts are unknown
    spec = load_model(row["preset"]) if row.get("preset") and not unknown else None
    experts = spec.experts if spec is not None else None
    if have("ep") and row["ep"] > 1 and not experts and not unknown:
        bad.append(("ep", f"{row['ep']}: the model has no experts" + (" (give its preset)" if spec is None else "")
                    + "; must be 1"))
    elif have("ep") and experts and experts % row["ep"]:
        bad.append(("ep", f"{row['ep']}: must divide the preset's experts = {experts}"))
    if row.get("etp") is None and have("tp"):
        row["etp"] = row["tp"]  # Megatron's default: the tensor-parallel degree
    if have("etp", "tp") and row["etp"] not in (1, row["tp"]):
        bad.append(("etp", f"{row['etp']}: must be 1 or tp = {row['tp']} (other expert tensor-parallel degrees are "
                           "not yet modelled)"))
    elif have("ep", "etp", "tp", "cp", "dp") and experts:
        stage = row["tp"] * row["cp"] * row["dp"]
        span, _ = expert_span("tp1d", row["tp"], row["cp"], row["dp"], expert_tp=row["etp"] == row["tp"])
        if span % row["ep"]:  # the rule of the engine's expert group, etp = tp or 1
            bad.append(("ep", f"{row['ep']}: ep * etp = {row['ep'] * row['etp']} must divide the stage's "
                              f"tp * cp * dp = {stage} GPUs"))
    if not row.get("pipeline_layout"):
        return None
    try:
        layout = parse_layout(row["pipeline_layout"], "pipeline_layout")
    except SpecError as exc:
        bad.append(("pipeline_layout", f"{short(row['pipeline_layout'])}: {str(exc).split(': ', 1)[-1]}"))
        return None
    if any(row.get(k) for k in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")):
        bad.append(("pipeline_layout", f"{short(row['pipeline_layout'])}: places the embedding and loss itself; "
                                       "the account_for_*_in_pipeline_split flags must be false"))
    if have("pp", "interleave") and row["pp"] * row["interleave"] != layout.stages:
        bad.append(("pipeline_layout", f"{short(row['pipeline_layout'])}: has {layout.stages} stages; must be "
                                       f"pp * interleave = {row['pp']} * {row['interleave']}"))
    if have("layers") and (layout.layers != row["layers"] or layout.mtp != (row.get("mtp") or 0)):
        bad.append(("pipeline_layout", f"{short(row['pipeline_layout'])}: places {layout.layers} blocks and "
                                       f"{layout.mtp} MTP blocks; the run has layers = {row['layers']} and "
                                       f"mtp = {row.get('mtp') or 0}"))
    return layout
