"""A configuration named completely, and the `dse eval` command that reproduces its time.

Every answer that names a configuration (`dse`, `dse search`, `dse query ... optimum`, the decision
commands) names all of its keys, defaults included, since a key left out would be read back with
`dse eval`'s own default (the expert-parallel degree, the ZeRO stage, the interleave), which need
not be the searched one. `eval_command` writes the overrides that rebuild the same question: the
model, system, profile and network presets with every field that differs from the preset, the
global batch, the row's NVS size and hardware grid values, the strategy and the configuration.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import fields
from typing import Any, Mapping

from kernels.params import PRECISIONS, PROFILES, RECOMPUTE

#: The keys of one configuration (`dse.evaluate`'s keywords, `conf/point/default.yaml`), in order.
DEGREES = ("n1", "n2", "n_p", "n_d", "microbatch")
PLACEMENT = ("nvs1", "nvs2", "nvs_p", "nvs_d")
MECHANISMS = ("interleave", "recompute", "seq_par", "precision", "zero", "ep")

#: The names of the coded keys (an int code in search frames, a name in a dataset).
NAMES = {"recompute": RECOMPUTE, "precision": PRECISIONS}


def decoded(key: str, value: Any) -> Any:
    """A key's value as the user writes it: the name of a coded value, ints as ints."""
    if value is None:
        return None
    if key == "seq_par":
        return value in ("true", "on") if isinstance(value, str) else bool(value)
    names = NAMES.get(key)
    if names is not None:
        return value if isinstance(value, str) else names[int(value)]
    return int(value)


def configuration(row: Mapping[str, Any], strategy: str) -> dict[str, Any]:
    """Every key of the configuration of `row` (a search or dataset row), by the names `dse eval`
    takes; tp1d's n2 and nvs2 as cp and nvs_cp (its context-parallel degree), summa's n_b."""
    second, place2 = ("cp", "nvs_cp") if strategy == "tp1d" else ("n2", "nvs2")
    out: dict[str, Any] = {}
    for k in DEGREES:
        out[second if k == "n2" else k] = decoded(k, row.get(k))
    for k in PLACEMENT:
        out[place2 if k == "nvs2" else k] = decoded(k, row.get(k))
    if strategy == "summa":
        out["n_b"] = decoded("n_b", row.get("n_b"))
    for k in MECHANISMS:
        if k in row and row[k] is not None:
            out[k] = decoded(k, row[k])
    return out


def config_text(conf: Mapping[str, Any]) -> str:
    """`n1=2 cp=1 n_p=36 ... ep=32` of `configuration`'s keys."""
    return " ".join(f"{k}={_value(v)}" for k, v in conf.items() if v is not None)


def _value(v: Any) -> str:
    """An override's value as Hydra parses it back to the same value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, float):
        if math.isfinite(v) and v == int(v) and abs(v) < 1e15:
            return repr(float(v))
        return repr(v)
    return str(v)


def _spec_overrides(group: str, spec: Any, preset: Any) -> list[str]:
    """`group=NAME` and `group.FIELD=VALUE` for each field of `spec` that differs from `preset`
    (every field when there is no preset of its name)."""
    out = [f"{group}={spec.name}"] if preset is not None else []
    for f in fields(spec):
        if f.name == "name" and preset is not None:
            continue
        v = getattr(spec, f.name)
        if preset is None or getattr(preset, f.name) != v:
            out.append(f"{group}.{f.name}={_value(v)}")
    return out


def base_overrides(job) -> list[str]:
    """The overrides that rebuild `job`'s question but the configuration: presets by name with
    the fields that differ from them, profile switches, network, global batch."""
    from dse.spec.network import load_network, network_presets
    from dse.spec.specs import load_model, load_system, model_presets, system_presets

    model = load_model(job.model.name) if job.model.name in model_presets() else None
    system = load_system(job.system.name) if job.system.name in system_presets() else None
    out = _spec_overrides("model", job.model, model)
    if model is None:  # a model named by its fields only: its sections start from the default preset
        out.insert(0, f"model.name={job.model.name}")
    sys_out = _spec_overrides("system", job.system.replace(nvs_size=(system or job.system).nvs_size), system)
    out += [o for o in sys_out if not o.startswith("system.nvs_size=")]
    base = job.profile_name.split("+", 1)[0]
    preset = PROFILES.get(base)
    out.append(f"profile={base}" if preset is not None else "profile=default")
    ref = preset if preset is not None else PROFILES["default"]
    out += [f"profile.{k}={_value(v)}" for k, v in job.profile._asdict().items() if getattr(ref, k) != v]
    net = job.network
    ref_net = load_network(net.name) if net.name in network_presets() else None
    out += _spec_overrides("network", net, ref_net)
    out.append(f"global_batch={job.global_batch}")
    return out


def eval_command(job, row: Mapping[str, Any], strategy: str, grid: tuple[str, ...] = ()) -> str:
    """The `dse eval` command line that evaluates `row` of `job`'s search: `base_overrides`, the
    row's NVS size and the values of the hardware `grid` fields it was evaluated at, the strategy
    and every key of its configuration."""
    parts = ["dse", "eval"] + base_overrides(job)
    nvs = row.get("nvs_size", job.nvs_sizes[0] if len(job.nvs_sizes) == 1 else None)
    if nvs is not None:
        parts.append(f"system.nvs_size={int(nvs)}")
    parts += [f"system.{g}={_value(row[g])}" for g in grid if g != "nvs_size" and row.get(g) is not None]
    parts.append(f"strategy={strategy}")
    parts += [f"{k}={_value(v)}" for k, v in configuration(row, strategy).items() if v is not None]
    return " ".join(shlex.quote(p) for p in parts)


def plan_command(job, plan: str, nvs_size: int) -> str:
    """The `dse eval` command of a plan as the decision commands print it (`strategy KEY=VALUE ...`,
    every key named) on `job`'s question at NVS size `nvs_size`."""
    strategy, *keys = plan.split()
    parts = ["dse", "eval", *base_overrides(job), f"system.nvs_size={int(nvs_size)}", f"strategy={strategy}", *keys]
    return " ".join(shlex.quote(p) for p in parts)
