"""A configuration named completely, and the `dse eval` command that reproduces its time.

Every answer that names a configuration (`dse`, `dse search`, `dse query ... optimum`, the decision
commands) names all of its keys, defaults included, since a key left out would be read back with
`dse eval`'s own default (the expert-parallel degree, the ZeRO stage, the interleave), which need
not be the searched one. `eval_command` writes the overrides that rebuild the same question: the
model, system, profile and network presets with every field that differs from the preset, the
global batch, the row's NVS size and hardware grid values, the strategy and the configuration.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import fields
from typing import Any, Mapping

from dse.explore.space import COLUMNS
from dse.results.io import value_name
from dse.spec.checks import TP1D_NAMES  # tp1d's n2 and nvs2 as cp and nvs_cp
from kernels.params import PROFILES


def decoded(key: str, value: Any) -> Any:
    """A key's value as the user writes it: the name of a coded value (`dse.results.io.value_name`),
    ints as ints."""
    if value is None:
        return None
    value = value_name(key, value)
    return value if isinstance(value, (str, bool)) else int(value)


def configuration(row: Mapping[str, Any], strategy: str) -> dict[str, Any]:
    """Every key of the configuration of `row` (a search or dataset row; `dse.explore.space.COLUMNS`),
    by the names `dse eval` takes: tp1d's n2 and nvs2 as cp and nvs_cp, n_b for summa only."""
    names = TP1D_NAMES if strategy == "tp1d" else {}
    return {names.get(k, k): decoded(k, row.get(k)) for k in COLUMNS
            if (k != "n_b" or strategy == "summa") and row.get(k) is not None}


def config_text(conf: Mapping[str, Any]) -> str:
    """`n1=2 cp=1 n_p=36 ... ep=32` of `configuration`'s keys."""
    return " ".join(f"{k}={_value(v)}" for k, v in conf.items() if v is not None)


def plan(row: Mapping[str, Any], strategy: str) -> str:
    """`tp1d n1=2 cp=1 ... ep=1`: the strategy and every key of the configuration of `row`, as every
    answer names it and `plan_command` reads it back."""
    return f"{strategy} {config_text(configuration(row, strategy))}"


def _value(v: Any) -> str:
    """An override's value as Hydra parses it back to the same value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, float):
        return repr(float(v))  # a numpy float as Python's: 2000.0, 1e-05, inf
    text = str(v)
    if isinstance(v, str) and not re.fullmatch(r"[A-Za-z0-9_.+\-/:]+", text):
        # Hydra's grammar reads a value with other characters (a pipeline layout's '|', '(', '*')
        # only inside quotes
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return text


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
    out = _spec_overrides("model", job.model, model)  # a model of no preset's name: every field, its name first
    out += [o for o in _spec_overrides("system", job.system, system) if not o.startswith("system.nvs_size=")]
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
    nvs = row.get("nvs_size", job.nvs_sizes[0] if len(job.nvs_sizes) == 1 else None)
    hardware = {g: row[g] for g in grid if g != "nvs_size" and row.get(g) is not None}
    return plan_command(job, plan(row, strategy), nvs, hardware)


def plan_command(job, text: str, nvs_size: int | None, hardware: Mapping[str, Any] | None = None) -> str:
    """The `dse eval` command of a plan as answers print it (`plan`: `strategy KEY=VALUE ...`) on
    `job`'s question at NVS size `nvs_size` and the `hardware` field values: `base_overrides`, the
    NVS size and hardware as system overrides, the strategy and the keys."""
    strategy, *keys = text.split()
    parts = ["dse", "eval", *base_overrides(job)]
    parts += [f"system.nvs_size={int(nvs_size)}"] if nvs_size is not None else []
    parts += [f"system.{k}={_value(v)}" for k, v in (hardware or {}).items()]
    parts += [f"strategy={strategy}", *keys]
    return " ".join(shlex.quote(p) for p in parts)


def dataset_eval_command(meta: Mapping[str, Any], row: Mapping[str, Any]) -> str | None:
    """The `dse eval` command of a dataset row (`dse query ... optimum`), from the metadata of the
    file that holds it (`dse.results.io.read_metadata`: the job's model, system, network and
    profile switches): the same overrides as the search's own answer, the row's global batch, NVS
    size and every hardware value that differs from the job's system (a grid point). None where
    the metadata cannot rebuild the job (a file written before it held them)."""
    from types import SimpleNamespace

    from dse.results.io import HARDWARE
    from dse.spec.network import load_network
    from dse.spec.specs import SpecError, load_model, load_system
    from kernels.params import Profile

    cfg, switches = meta.get("config") or {}, meta.get("profile_switches")
    try:
        system = load_system(cfg["system"])
        job = SimpleNamespace(model=load_model(cfg["model"]), system=system, network=load_network(cfg["network"]),
                              profile=Profile(**switches), profile_name=str(meta.get("profile", "default")),
                              global_batch=int(row["global_batch"]), nvs_sizes=[system.nvs_size])
    except (KeyError, TypeError, ValueError, SpecError):
        return None
    grid = tuple(h for h in HARDWARE if h != "nvs_size" and row.get(h) is not None and row[h] != getattr(system, h))
    return eval_command(job, row, str(row["strategy"]), grid)
