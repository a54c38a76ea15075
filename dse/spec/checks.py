"""The one-line error of every bad input (`SpecError`) and the checks that raise it, before any compute.

The field checks every spec uses (an integer, a finite number in a range, one of some choices, a
name, a list without repeats; `dse.spec.specs` re-exports them), and the checks of what no single
spec can see: the sequence shards of a configuration (`check_sequence_shards`), an output file a
command will write (`check_output_file`), a YAML file that does not parse (`yaml_problem`), the
numbers of a file read back (`check_finite`).
"""

from __future__ import annotations

import math
import re
import uuid
from numbers import Integral, Real
from pathlib import Path
from typing import Any, Mapping


class SpecError(ValueError):
    """A configuration value is invalid. The message is one line naming field, value and rule."""


#: The largest value of an integer field unless its rule says otherwise: far above any real
#: cluster or batch, far below int64 (2^63), so products of a few fields stay exact in int64.
INT_MAX = 1 << 40

#: A name that becomes a file or directory (study, preset, model and system names): letters,
#: digits, '_', '-' and '.', starting with a letter or digit; never a path.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_name(where: str, value: Any) -> str:
    """`value` as a name that is safe as one path component (`NAME_RE`, no '..')."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or ".." in value:
        raise SpecError(f"{where} = {_fmt(value)}: must be a name of letters, digits, '_', '-' and '.' "
                        "(starting with a letter or digit, no '..', at most 128 characters)")
    return value


def _fmt(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text)} characters)"


def check_int(where: str, value: Any, minimum: int = 1, maximum: int = INT_MAX) -> int:
    """`value` as an int in [minimum, maximum] (bools, floats and strings are rejected: an integer
    field is written as an integer)."""
    ok = isinstance(value, Integral) and not isinstance(value, bool)
    if not ok:
        hint = f" (write {int(value)})" if isinstance(value, float) and math.isfinite(value) and \
            value.is_integer() and abs(value) < 1e16 else ""
        raise SpecError(f"{where} = {_fmt(value)}: must be an integer >= {minimum}{hint}")
    value = int(value)
    if value < minimum:
        raise SpecError(f"{where} = {value}: must be an integer >= {minimum}")
    if value > maximum:
        raise SpecError(f"{where} = {_fmt(value)}: must be an integer in [{minimum}, {maximum:,}]")
    return value


def check_float(where: str, value: Any, low: float = 0.0, high: float = math.inf,
                low_open: bool = True) -> float:
    """`value` as a finite float in (low, high] (or [low, high] when low_open is False)."""
    def valid() -> str:  # only for the error: a spec grid validates thousands of fields
        return f"{'(' if low_open else '['}{float(low)}, {float(high)}{']' if math.isfinite(high) else ')'}"

    try:
        finite = not isinstance(value, bool) and isinstance(value, Real) and math.isfinite(float(value))
    except OverflowError:  # an int beyond float64
        finite = False
    if not finite:
        raise SpecError(f"{where} = {_fmt(value)}: must be a finite number in {valid()}")
    value = float(value)
    if not _in_range(value, low, high, low_open):
        raise SpecError(f"{where} = {value}: must be in {valid()}")
    return value


def _in_range(value: float, low: float, high: float, low_open: bool) -> bool:
    """`value` in (low, high] (or [low, high] when low_open is False)."""
    return (value > low if low_open else value >= low) and value <= high


def check_choice(where: str, value: Any, valid) -> str:
    """`value` as one of `valid` (a collection of strings; an unhashable value is none of them)."""
    try:
        known = value in valid
    except TypeError:  # a list or a mapping where a name was expected
        known = False
    if not known:
        raise SpecError(f"{where} = {_fmt(value)}: must be one of {', '.join(sorted(valid))}")
    return value


#: Profile switches that only an MoE model's blocks read (`kernels.experts`, `kernels.blocks`).
MOE_SWITCHES = ("expert_tp", "ep_comm_overlap", "ep_dispatch_fp8", "ep_node_limit", "expert_imbalance", "moe_dropless",
                "moe_dispatcher")


def idle_switches(profile, profile_name: str, model) -> list[str]:
    """Notes for the switches a question sets that change nothing for its model: an MoE switch set
    apart from the profile's preset (`profile_name` "default+custom") on a dense model. The answer
    is the same with or without them; said so rather than run in silence."""
    from kernels.params import PROFILES

    base = PROFILES.get(profile_name.split("+", 1)[0])
    if base is None or getattr(model, "experts", None):
        return []
    idle = [f for f in MOE_SWITCHES if getattr(profile, f) != getattr(base, f)]
    return [f"note: profile.{f} = {getattr(profile, f)} changes nothing here: {model.name} has no experts (a dense "
            "model's blocks read no MoE switch)" for f in idle]


def did_you_mean(word: str, valid) -> str:
    """The start of an error's list of valid names: "did you mean X? " for the names that hold
    `word` (`cost` -> cluster_cost_usd, cost_per_run_usd, ..., at most three), else the one nearest
    to it (difflib, similarity 0.75 or more: `trainig_days` -> training_days), else ""."""
    import difflib

    names, word = [str(v) for v in valid], str(word)
    holding = [n for n in names if word and word in n]
    if holding:
        shown = holding[:3]
        return f"did you mean {'one of ' + ', '.join(shown) if len(shown) > 1 else shown[0]}? "
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.75)
    return f"did you mean {close[0]}? " if close else ""


def check_unique(where: str, values: list, noun: str) -> None:
    """A list of sizes to search holds each once: a repeated one is a SpecError (it would be
    searched twice, its rows and ranks duplicated)."""
    seen = set()
    for v in values:
        if v in seen:
            shown = values if len(values) <= 8 else [*values[:8], "..."]
            raise SpecError(f"{where} = {shown}: {v} is given twice; give each {noun} once")
        seen.add(v)


#: tp1d's names of its n2 and nvs2 in a configuration: alias -> (key, its unset value, what it is).
TP1D_ALIASES = {"cp": ("n2", 1, "context-parallel degree"),
                "nvs_cp": ("nvs2", None, "context-parallel group's GPUs per NVS domain")}
#: The same names the other way: tp1d's key -> the name commands, tables and messages give it (n2 -> cp).
TP1D_NAMES = {key: alias for alias, (key, _, _) in TP1D_ALIASES.items()}


def tp1d_aliases(strategy: str, aliases: Mapping[str, Any], point: Mapping[str, Any]) -> dict[str, Any]:
    """`point` (keys n2, nvs2, ...) with tp1d's names for its n2 and nvs2 applied (`TP1D_ALIASES`:
    `cp=2` sets n2 = 2; None: not given), or one SpecError line: an alias with another strategy, or
    beside a different value of its key. Shared by `dse eval` (`Resolved.point`) and `dse.evaluate`."""
    out = dict(point)
    for alias, value in aliases.items():
        if value is None:
            continue
        key, unset, what = TP1D_ALIASES[alias]
        if strategy != "tp1d":
            raise SpecError(f"{alias} = {value}: {alias} is strategy tp1d's {what} (its {key}); "
                            f"strategy {strategy!r} takes {key}={value}")
        if out[key] not in (unset, value):
            raise SpecError(f"{alias} = {value}: {alias} is tp1d's {key}, which is given as {key} = {out[key]}; "
                            "give one of them")
        out[key] = value
    return out


# ----------------------------------------------------------------------------------------------
# what no single spec can see


def check_sequence_shards(table: Mapping[str, Any], model, strategy: str, fail) -> None:
    """Every GPU that holds a shard of a sequence holds at least one of its tokens.

    tp1d and tp2d split the model.seq_len = l tokens of a sequence into floor(l / n2) rows (tp2d's
    sequence shard, tp1d's context-parallel one: n2 = cp) and, with sequence parallelism or in an
    MoE block (its tokens are routed from the sequence-parallel shard), those rows over n1: each
    GPU holds floor(l / (n1 n2)) rows (`kernels.blocks.region_rows`, `expert_shard`). Zero rows
    would cost nothing, so l >= n1 n2 is required. SUMMA's grid blocks hold floor(l / n2) rows
    (n2 <= l, checked with the degrees). `fail(mask, message)` raises for the first bad row of the
    candidate table (`dse.api.validate_candidates`)."""
    if strategy == "summa":
        return
    n1, n2, sp = table["n1"], table["n2"], table["seq_par"]
    l = model.seq_len
    shards = n1 * n2
    second = "cp" if strategy == "tp1d" else "n2"

    def message(i: int) -> str:
        over = f"n1 = {n1[i]}" if n2[i] == 1 else f"n1 x {second} = {n1[i]} x {n2[i]} = {shards[i]}"
        why = "sequence parallelism" if sp[i] == 1 else "an MoE block's token routing"
        return (f"n1 = {n1[i]}: {why} splits each sequence of model.seq_len = {l} tokens over {over} GPUs, "
                f"less than one token each; needs {'n1' if n2[i] == 1 else f'n1 x {second}'} <= {l}"
                + (" (or seq_par=false)" if sp[i] == 1 and not model.moe else ""))

    fail(((sp == 1) | bool(model.moe)) & (shards > l), message)


def check_output_file(where: str, path: Any, create: bool = True) -> Path:
    """`path` as a file a command can write, checked before any compute: a file name, not a folder,
    in a folder that exists (created with its parents when `create`, as the writers do:
    `dse.results.io.atomic_path`) and takes a new file (a probe written and removed, so that
    permissions, read-only file systems and the superuser's rights are all seen alike)."""
    text = str(path)
    p = Path(text).expanduser()
    if not text.strip() or p.name in ("", ".", ".."):
        raise SpecError(f"{where} = {text!r}: must be a file name")
    if p.is_dir():
        raise SpecError(f"{where} = {text!r}: is a folder; give a file name in it")
    folder = p.parent
    above = next((a for a in (folder, *folder.parents) if a.exists()), Path("."))
    if not above.is_dir():
        raise SpecError(f"{where} = {text!r}: {str(above)!r} is a file, not a folder")
    if above != folder:
        if not create:
            raise SpecError(f"{where} = {text!r}: no such folder {str(folder)!r}")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SpecError(f"{where} = {text!r}: cannot create the folder {str(folder)!r} "
                            f"({err.strerror or type(err).__name__}); give a writable folder") from None
    probe = folder / f".{p.name}.probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise SpecError(f"{where} = {text!r}: cannot write in the folder {str(folder)!r} "
                        f"({err.strerror or type(err).__name__}); give a writable folder") from None
    return p


def yaml_problem(exc: Exception) -> str:
    """One line of what is wrong with a YAML file that did not parse (a `yaml.YAMLError`, or the
    `OSError` of reading it): the parser's problem and where, e.g. "expected the node content, but
    found '<stream end>', line 3 column 1"."""
    mark = getattr(exc, "problem_mark", None)
    why = (getattr(exc, "problem", None) or getattr(exc, "strerror", None)
           or (str(exc).splitlines() or [type(exc).__name__])[0])
    return why + (f", line {mark.line + 1} column {mark.column + 1}" if mark else "")


def not_finite(data: Any, where: str = "") -> tuple[str, float] | None:
    """The key (`where.key`, `where[i]`) and value of the first NaN or infinity among the numbers of
    `data` (nested mappings and lists, as read from YAML), or None when every one is finite."""
    if isinstance(data, Mapping):
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in data.items())
    elif isinstance(data, (list, tuple)):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(data))
    else:  # YAML's .nan and .inf are floats; an int is always finite
        return (where, data) if isinstance(data, float) and not math.isfinite(data) else None
    return next((bad for k, v in items if (bad := not_finite(v, k)) is not None), None)


def check_finite(where: str, data: Any) -> None:
    """Every number of `data` finite (`not_finite`): else a SpecError naming the first bad key."""
    bad = not_finite(data, where)
    if bad is not None:
        raise SpecError(f"{bad[0]} = {bad[1]}: must be a finite number")


def check_switches(profile: Any, systems) -> None:
    """The profile switches of the newer mechanisms, however the profile was made (a config or a
    `Profile` built in Python): `expert_imbalance` in [1, 64]; `offload_layers` (CPU activation
    offloading) an integer >= 0 and, when > 0, Megatron's block and a host link on every system
    (`SystemSpec.host_bandwidth` > 0); `act_fp8_store` (FP8 copies of a gated MLP's activation
    input) only under Megatron's block, whose MLP it changes (seed 001's block has GELU);
    `attn_out_e5m6` (one E5M6 copy of the attention output) only under Megatron's block with
    fused flash attention, whose kept output it replaces."""
    check_float("profile.expert_imbalance", getattr(profile, "expert_imbalance", 1.0), 1.0, 64.0, low_open=False)
    if getattr(profile, "act_fp8_store", False) and not profile.megatron:
        raise SpecError("profile.act_fp8_store = true: the FP8 copy of a gated MLP's activation input is modelled "
                        "under Megatron's block only (profile.megatron = true); set profile.act_fp8_store=false")
    if getattr(profile, "attn_out_e5m6", False) and not (profile.megatron and profile.flash_attention):
        raise SpecError("profile.attn_out_e5m6 = true: the one E5M6 copy of the attention output is modelled under "
                        "Megatron's block with fused flash attention only (profile.megatron = true, "
                        "profile.flash_attention = true); set profile.attn_out_e5m6=false")
    layers = check_int("profile.offload_layers", getattr(profile, "offload_layers", 0), 0)
    if not layers:
        return
    if not profile.megatron:
        raise SpecError(f"profile.offload_layers = {layers}: activation offloading is modelled under Megatron's "
                        "block only (profile.megatron = true); set profile.offload_layers=0")
    for s in systems:
        if s.host_bandwidth <= 0:
            raise SpecError(f"profile.offload_layers = {layers}: system {s.name!r} has no host link "
                            f"(system.host_bandwidth = {s.host_bandwidth:g}); set system.host_bandwidth (GB/s per GPU, "
                            "one direction) or profile.offload_layers=0")


def check_offloaded_candidates(profile: Any, n_p, recompute) -> None:
    """Megatron-core offloads activations only without a pipeline and without recomputation: with
    `profile.offload_layers` > 0, candidates of n_p > 1 or a recompute mode are refused."""
    layers = getattr(profile, "offload_layers", 0)
    if not layers:
        return
    import numpy as np

    if np.any(np.asarray(n_p) > 1):
        raise SpecError(f"n_p = {int(np.max(n_p))}: CPU activation offloading (profile.offload_layers = {layers}) runs "
                        "without pipeline parallelism in Megatron-core; give n_p=1 or profile.offload_layers=0")
    if np.any(np.asarray(recompute) != 0):
        raise SpecError(f"recompute: CPU activation offloading (profile.offload_layers = {layers}) runs without "
                        "activation recomputation in Megatron-core; give recompute=none or profile.offload_layers=0")


#: The system rate each quantized precision runs at: (precision code, name, the SystemSpec field).
QUANTIZED_RATES = ((1, "fp8", "matrix_flops_fp8"), (2, "nvfp4", "matrix_flops_fp4"))


def check_precision_rates(where: str, codes, systems) -> None:
    """Every quantized matmul precision among `codes` (`kernels.params.PRECISIONS` codes: a
    candidate column or the codes a search enumerates) has its rate on every system: FP8 needs
    `matrix_flops_fp8` > 0, NVFP4 `matrix_flops_fp4` > 0. `where` names the field asked."""
    import numpy as np

    present = set(np.unique(np.asarray(codes)).tolist())
    for code, name, field in QUANTIZED_RATES:
        if code not in present:
            continue
        for s in systems:
            if getattr(s, field) <= 0:
                raise SpecError(f"{where} = {name}: system {s.name!r} has no {name.upper()} rate (system.{field} = "
                                f"{getattr(s, field):g}); use another precision or set system.{field}")
