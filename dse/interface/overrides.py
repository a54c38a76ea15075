"""One grammar for every entry point: configuration is Hydra overrides of the config tree `conf/`.

    dse model=vit_era5 system=h200 n_gpus=pow2:1024:16384            a study: searches, writes a dataset
    dse search model=vit_era5 system=h200 n_gpus=pow2:1024:16384     the same question, printed
    dse search system=a100,b200 system.nvs_size=8                    several systems as one array axis
    dse eval system=b200 system.nvs_size=8 strategy=tp1d n1=4 n_p=128 n_d=8 nvs1=4 nvs_p=2 nvs_d=1
    dse traffic model=gpt3_175b system.nvs_size=8 network=rail_only strategy=tp1d n1=8 n_p=4 n_d=4 nvs1=8 nvs_p=1 nvs_d=1

Flags are only for files and output formats (`--json`, `--layers`, `--matrix OUT`, `--quiet`).

Keys. Every key is checked against the tree before anything is composed: a key is valid if the
composed config has it, or if the spec of its section declares it (`model.*`, `system.*`,
`network.*`, `economics.*`, `profile.*`, `search.grid.<system field>`). `+` is therefore never needed, and harmless.
An unknown key (with or without `+`) is one `SpecError` line naming the closest valid key; an
unknown preset names the closest preset. `dse eval` and `dse traffic` add the config group `point`
(`conf/point/default.yaml`): the configuration's degrees and placement as top-level keys.

The NVS rule, the same in `dse`, `dse -m`, every subcommand and the Python API (`dse.search`,
`dse.evaluate`): the NVS domain size is the system preset's `nvs_size` unless something sets
`system.nvs_size` (an override, a sweep, or the fixed study of `dse profiles`), as an int or as a
list of sizes searched in one job (`nvs_size=` in the API). `dse.spec.specs.nvs_sizes` applies it and
`SystemSpec` validates every size.
"""

from __future__ import annotations

import difflib
import math
import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping, Sequence

from dse.spec.checks import TP1D_ALIASES, check_unique, tp1d_aliases
from dse.spec.specs import CONF_DIR, ModelSpec, SpecError, SystemSpec, preset_names

#: The config groups of the tree (`group=option`); `point` only in `dse eval` and `dse traffic`.
GROUPS = ("model", "system", "network", "economics", "strategy", "profile", "search", "output", "sweep", "point",
          "case/workload", "case/fabric", "sensitivity", "codesign", "whatif")

#: Keys that were renamed, and what to write instead.
RENAMED = {"search.nvs_sizes": "system.nvs_size=[A,B,...] (one NVS size, or a list searched in one job)"}

#: The configuration keys of `conf/point/default.yaml` (`dse.evaluate`'s keywords).
POINT = "+point=default"


def _one_line(err: Exception) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(err).__name__


def parse(overrides: Sequence[str]) -> list:
    """Hydra `Override` objects of `overrides`; a malformed one is one SpecError line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out = []
    for line in overrides:
        try:
            out.extend(parser.parse_overrides([line]))
        except HydraException as err:
            raise SpecError(f"{line!r}: not an override KEY=VALUE ({_one_line(err)})") from None
    return out


def _compose(overrides: Sequence[str]) -> dict:
    """Hydra's compose API over `conf/config.yaml`; returns a plain resolved dict."""
    from hydra import compose, initialize_config_module
    import yaml
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="dse.conf", version_base=None):
            cfg = compose(config_name="config", overrides=list(overrides))
        data = OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as err:
        raise SpecError(_one_line(err)) from None
    except yaml.YAMLError as err:  # a preset of conf/ that is not YAML
        from dse.spec.checks import yaml_problem

        where = getattr(getattr(err, "problem_mark", None), "name", None)
        named = f"{where}: " if where and not where.startswith("<") else "a file of conf/ named by the overrides: "
        raise SpecError(f"{named}not valid YAML ({yaml_problem(err)}); fix or remove it") from None
    data.pop("hydra", None)
    data.pop("sweep", None)
    return data


def _is_group(o) -> bool:
    key = o.key_or_group
    return (key in GROUPS or "/" in key) and not key.startswith("hydra")


def _is_hydra(o) -> bool:
    return o.key_or_group == "hydra" or o.key_or_group.startswith(("hydra.", "hydra/"))


def _values(o) -> list[str]:
    return list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]


def _closest(word: str, valid: Iterable[str]) -> str:
    """The valid key nearest to `word` (difflib's similarity): by the whole key, or by the last
    part of the key (`nvs_sise` -> `system.nvs_size`), the latter slightly discounted when it sits
    at another depth or in another section."""
    def leaf(k: str) -> str:
        return k.rsplit(".", 1)[-1]

    def score(k: str) -> float:
        whole = difflib.SequenceMatcher(None, word, k).ratio()
        same = k.rsplit(".", 1)[0] == word.rsplit(".", 1)[0] if "." in word else "." not in k
        part = difflib.SequenceMatcher(None, leaf(word), leaf(k)).ratio() - (0 if same else 0.05)
        return max(whole, part) + (0.01 if same else 0)

    grid = word.startswith("search.grid.")
    return max(sorted(k for k in set(valid) if grid or not k.startswith("search.grid.")), key=score)


def _check_group(o) -> None:
    group = o.key_or_group
    valid = preset_names(group)
    if not (CONF_DIR / group).is_dir():
        raise SpecError(f"{group}: unknown config group; did you mean {_closest(group, GROUPS)}?")
    for v in _values(o):
        if v not in valid:
            raise SpecError(f"{group}={v}: no such preset; did you mean {group}={_closest(v, valid)}? "
                            f"(valid: {', '.join(valid)})")


def _paths(cfg: Any, prefix: str = "") -> set[str]:
    """Every dotted key of a config (mappings and their leaves)."""
    out = set()
    if isinstance(cfg, dict):
        for k, v in cfg.items():
            key = f"{prefix}{k}"
            out.add(key)
            out |= _paths(v, key + ".")
    return out


def _system_fields() -> list[str]:
    return [f.name for f in fields(SystemSpec) if f.name != "name"]


def declared(cfg: dict) -> set[str]:
    """The keys the specs declare, whether or not the composed presets write them."""
    from dse.results.economics import EconomicsSpec
    from dse.spec.network import NetworkSpec
    from kernels.params import Profile

    profile = Profile
    out = {f"model.{f.name}" for f in fields(ModelSpec)}
    out |= {f"system.{f.name}" for f in fields(SystemSpec)}
    out |= {f"network.{f.name}" for f in fields(NetworkSpec)}
    out |= {f"economics.{f.name}" for f in fields(EconomicsSpec)}
    out |= {f"profile.{f}" for f in ("name", *profile._fields)}
    out |= {f"search.grid.{f}" for f in _system_fields() if f != "nvs_size"}
    if "codesign" in cfg:  # per-field bounds and prices of `dse codesign`
        out |= {f"codesign.{k}.{f}" for k in ("bounds", "prices") for f in _system_fields() if f != "nvs_size"}
    return out


def _grid_key_ok(parts: list[str], value: Any) -> bool:
    """search.grid.FIELD, search.grid.AXIS.FIELD (a zipped axis), or search.grid.AXIS={...}."""
    if len(parts) == 3:
        return parts[2] in _system_fields() or isinstance(value, dict)
    return len(parts) == 4 and parts[3] in _system_fields()


def _point_key(key: str) -> str | None:
    """The configuration key (`dse eval`'s n1, cp, microbatch, ...) that `key` is or nearly is
    (difflib's similarity of 0.85 or more: `mircobatch`), else None."""
    from dse.explore.space import COLUMNS

    keys = [*COLUMNS, *TP1D_ALIASES]
    if key in keys:
        return key
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.85)
    return close[0] if close else None


def check_no_sweep(overrides: Sequence[str]) -> None:
    """A sweep (`system=a100,b200`, `n_gpus=64,128`, a sweep function) without `-m` is one SpecError
    line saying how to ask for it: a job per value with `dse -m`, or one search over them
    (`dse search` for systems, a list `[64,128]` for `dse`'s GPU counts and NVS sizes)."""
    lines = [ln for ln in overrides if not ln.startswith("-")]
    for o, line in zip(parse(lines), lines):
        if _is_hydra(o) or not o.is_sweep_override():
            continue
        key, values = o.key_or_group, _values(o)
        together = (f"or {key}=[{','.join(map(str, values))}] to search them in one job"
                    if key in ("n_gpus", "system.nvs_size") else
                    "or `dse search` to rank them together" if key == "system" else "")
        raise SpecError(f"{line.lstrip('+')}: a list of values is a sweep; run `dse -m {line.lstrip('+')}` "
                        f"(one job per value){' ' + together if together else ''}")


def check(overrides: Sequence[str], base: dict) -> list[str]:
    """`overrides` checked against the composed config `base` and written so that Hydra takes
    them: a key the config has is set plainly, a declared key it lacks is added (`++`)."""
    have = _paths(base)
    valid = (have | declared(base)) - {"hydra"}
    out = []
    for o, line in zip(parse(overrides), overrides):
        key = o.key_or_group
        if _is_hydra(o) or o.is_delete():
            out.append(line)
            continue
        if _is_group(o) and not isinstance(o.value(), dict):
            _check_group(o)
            out.append(line)
            continue
        if key in RENAMED:
            raise SpecError(f"{key}: renamed; write {RENAMED[key]}")
        parts = key.split(".")
        ok = key in have or key in valid
        if parts[:2] == ["search", "grid"] and len(parts) > 2:
            ok = _grid_key_ok(parts, o.value())
            if not ok:
                raise SpecError(f"{key}: not a system field; did you mean "
                                f"{'.'.join(parts[:-1])}.{_closest(parts[-1], _system_fields())}?")
        if not ok:
            point = _point_key(key) if "n1" not in have else None  # `dse eval` has them: a plain typo
            if point:  # a configuration's key where the whole space is searched
                raise SpecError(
                    f"{key}: {'unknown key; ' + point + ' is a key of' if point != key else 'a key of'} one configuration, "
                    f"which `dse eval` and `dse traffic` take; `dse` and `dse search` search every configuration "
                    "(narrow them with profile switches, e.g. profile.zero=1 or profile.precision=fp8)")
            raise SpecError(f"{key}: unknown key; did you mean {_closest(key, valid)}?")
        bare = line.lstrip("+")
        out.append(bare if key in have else "++" + bare)
    return out


def _base(parsed: list, lines: Sequence[str]) -> list[str]:
    """The group choices of `lines` (first option of a sweep): what decides the tree's keys."""
    out = []
    for o, line in zip(parsed, lines):
        if _is_group(o) and not isinstance(o.value(), dict) and not _is_hydra(o):
            _check_group(o)
            out.append(f"{'+' if line.startswith('+') else ''}{o.key_or_group}={_values(o)[0]}")
    return out


def normalize(overrides: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """`extra` + `overrides`, checked (`check`) against the tree their groups select. Sweeps
    (`a=1,2`) are checked too, for `dse -m`."""
    lines = [*extra, *overrides]
    parsed = parse(lines)
    return check(lines, _compose(_base(parsed, lines)))


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """The command line of `dse` / `dse -m` with its overrides normalized (`normalize`); its flags
    (-m, --cfg job, ...) are left as they are."""
    argv = list(argv)
    where = [i for i, a in enumerate(argv) if not a.startswith("-") and ("=" in a or a.startswith("~"))]
    for i, line in zip(where, normalize([argv[i] for i in where])):
        argv[i] = line
    return argv


def check_sweep(overrides: Sequence[str], limit: int = 256) -> None:
    """Every value of every sweep of a `dse -m` command line validated as a job (`Job.from_config`)
    before any job is launched: each value with the other sweeps at their first value (at most
    `limit` jobs checked). A bad one is one SpecError line naming it."""
    from dse.interface.app import Job

    lines = [ln for ln in overrides if not _is_hydra(parse([ln])[0])]
    parsed = parse(lines)
    every = [i for i, o in enumerate(parsed) if o.is_sweep_override()]
    first = {i: f"{lines[i][:len(lines[i]) - len(lines[i].lstrip('+'))]}{parsed[i].key_or_group}="
                f"{_values(parsed[i])[0]}" for i in every}
    sweeps = every  # a group's values (system=a100,b200) too: each preset with the other values
    checked = 0
    for i in sweeps:
        for v in _values(parsed[i]):
            if checked >= limit:
                return
            job = [first.get(j, ln) for j, ln in enumerate(lines)]
            job[i] = f"{lines[i][:len(lines[i]) - len(lines[i].lstrip('+'))]}{parsed[i].key_or_group}={v}"
            try:
                Job.from_config(_compose(job))
            except SpecError as err:
                raise SpecError(f"{parsed[i].key_or_group}={v} (a value of the sweep): {err}") from None
            checked += 1


def _config_digest() -> tuple[str, bool]:
    """(SHA-256 of what a composition depends on: this package's source, the config tree, Hydra's
    and OmegaConf's versions; whether the tree has a resolver that reads the environment or the
    clock)."""
    from importlib.metadata import version

    from dse.explore.programs import source_digest

    h = hashlib.sha256(f"{source_digest()}|{version('hydra-core')}|{version('omegaconf')}".encode())
    varies = False
    for path in sorted(CONF_DIR.rglob("*.yaml")):
        text = path.read_bytes()
        h.update(str(path.relative_to(CONF_DIR)).encode() + b"\0" + text)
        varies = varies or b"${oc." in text
    return h.hexdigest(), varies


def _kept_path(overrides: Sequence[str], extra: Sequence[str]):
    """The file `compose` keeps the composition of these lines in; None when it is not kept (the
    cache directory is off, or a line or the tree interpolates)."""
    from dse.runtime import cache_dir

    root = cache_dir()
    if root is None or any("${" in line for line in (*overrides, *extra)):
        return None
    digest, varies = _config_digest()
    if varies:
        return None
    key = hashlib.sha256(json.dumps([digest, list(overrides), list(extra)]).encode()).hexdigest()[:40]
    return root / "config" / f"{key}.json"


def compose(overrides: Sequence[str], extra: Sequence[str] = ()) -> dict:
    """The config of `extra` + `overrides` (no sweeps), checked key by key, as a plain dict.

    A composition is a pure function of the lines, the config tree and the code, so a successful
    one is kept (JSON, in `config/` of the cache directory, `dse.runtime.cache_dir`) under the hash of
    all of them and read back by a later process instead of being composed again (Hydra's two
    compositions, the check in between and their imports). Not kept when a line or the
    tree interpolates (`${...}`: the environment or the clock may change its value); errors are
    never kept. Served files are touched; past `dse.runtime.cache_limit` bytes the least recently
    used are removed."""
    from dse.runtime import touch

    path = _kept_path(overrides, extra)
    if path is not None:
        try:
            cfg = json.loads(path.read_text())
            touch(path)
            return cfg
        except (OSError, ValueError):
            pass
    lines = normalize(overrides, extra)
    for o in parse(lines):
        if o.is_sweep_override():
            raise SpecError(f"{o.input_line}: several values are a sweep; run it with dse -m")
    cfg = _compose(lines)
    if path is not None:
        _keep(path, cfg)
    return cfg


def _keep(path, cfg: dict) -> None:
    """Keep `cfg` as JSON in `path` (`dse.runtime.keep_file`), if it comes back equal."""
    from dse.runtime import keep_file

    text = json.dumps(cfg)
    if json.loads(text) == cfg:
        keep_file(path, text.encode())


@dataclass
class Resolved:
    """A composed and validated configuration: the config dict and the `dse.interface.app.Job` built from it
    by the loaders `dse` uses."""

    config: dict
    job: Any  # dse.interface.app.Job
    given: tuple[str, ...] = ()  # the keys the overrides set (`n_gpus`, `n1`, `model.hidden`, ...)

    def point(self) -> dict[str, Any]:
        """The configuration's keys (group `point`) as `dse.evaluate` keywords. `cp` is strategy
        tp1d's name for its n2 (Megatron's context-parallel degree), `nvs_cp` for its nvs2
        (`TP1D_ALIASES`): `cp=2` sets n2 = 2; with any other strategy, or beside a different n2, it
        is one SpecError line. A given `n_gpus` must be the configuration's (`_check_gpus`)."""
        from dse.explore.space import COLUMNS

        out = {k: self.config[k] for k in COLUMNS}
        aliases = {alias: self.config.get(alias) for alias in TP1D_ALIASES}
        if any(v is not None for v in aliases.values()):
            out = tp1d_aliases(self.strategy(), aliases, out)
        if "n_gpus" in self.given:
            self._check_gpus(out)
        return out

    def _check_gpus(self, point: Mapping[str, Any]) -> None:
        """`n_gpus`, given beside a configuration, is the GPU count its degrees use, else one
        SpecError line: the configuration is evaluated as given or refused, never re-sized."""
        from dse.explore.space import parse_gpu_counts

        asked = parse_gpu_counts(self.config.get("n_gpus"))
        degrees = [point[k] for k in ("n1", "n2", "n_p", "n_d")]
        used = math.prod(int(d) for d in degrees)
        if asked != [used]:
            shown = asked[0] if len(asked) == 1 else asked
            raise SpecError(f"n_gpus = {shown}: the configuration n1 x n2 x n_p x n_d = "
                            f"{' x '.join(str(d) for d in degrees)} uses {used} GPUs; give n_gpus={used}, "
                            "or degrees whose product is the GPU count, or leave n_gpus out")

    def strategy(self) -> str:
        """The one strategy of a command that evaluates one configuration."""
        names = self.job.strategies
        if len(names) != 1:
            raise SpecError(f"strategy.names = [{', '.join(names)}]: one configuration has one strategy; "
                            "give strategy=tp1d, strategy=tp2d or strategy=summa")
        return names[0]

    def system(self):
        """The system with its one NVS size (a list of sizes is an error here)."""
        sizes = self.job.nvs_sizes
        if len(sizes) != 1:
            raise SpecError(f"system.nvs_size = {sizes}: one configuration has one NVS size")
        return self.job.system.replace(nvs_size=sizes[0])


def resolve(overrides: Sequence[str], extra: Sequence[str] = (), point: bool = False) -> Resolved:
    """Compose and validate: `Resolved(config, job)`. `point` adds the configuration's keys."""
    from dse.interface.app import Job

    cfg = compose(overrides, [POINT, *extra] if point else extra)
    given = tuple(str(o.key_or_group).lstrip("+~") for o in parse(overrides))
    return Resolved(cfg, Job.from_config(cfg), given)


def resolve_each(overrides: Sequence[str], group: str, extra: Sequence[str] = ()) -> list[Resolved]:
    """One `Resolved` per option of a sweep over `group` (`system=a100,b200`), or one when the
    overrides do not sweep it: several systems (or models) asked in one command."""
    lines = list(overrides)
    if not any("," in line or "(" in line for line in lines):  # a sweep has a comma or a sweep function
        return [resolve(lines, extra)]
    parsed = parse(lines)
    idx = next((i for i, o in enumerate(parsed) if o.key_or_group == group and o.is_sweep_override()), None)
    if idx is None:
        return [resolve(lines, extra)]
    values = _values(parsed[idx])
    check_unique(group, list(values), group)  # a repeated one would be searched, and ranked, twice
    return [resolve([*lines[:idx], f"{group}={v}", *lines[idx + 1:]], extra) for v in values]


#: Flags that were config fields, by command, and the override that replaces each.
RETIRED = {
    "--model": "model", "--system": "system", "--nvs-size": "system.nvs_size", "--strategy": "strategy",
    "--profile": "profile", "--network": "network", "--global-batch": "global_batch", "--n-gpus": "n_gpus",
    "--top-k": "search.top_k", "--grid": "search.grid", "--progress": "search.progress",
    "--no-progress": "search.progress", "--models": "model", "--n1": "n1", "--n2": "n2", "--n-p": "n_p",
    "--n-d": "n_d", "--microbatch": "microbatch", "--interleave": "interleave", "--recompute": "recompute",
    "--seq-par": "seq_par", "--nvs1": "nvs1", "--nvs2": "nvs2", "--nvs-p": "nvs_p", "--nvs-d": "nvs_d",
    "--n-b": "n_b",
}


def reject_retired_flags(argv: Sequence[str], keep: Iterable[str] = ()) -> None:
    """A flag that used to set a config field is one SpecError line saying which override replaces
    it (`--n-p 128` -> `n_p=128`); flags in `keep` are the command's own."""
    keep = set(keep)
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in keep or flag not in RETIRED:
            continue
        if not eq:
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            value = "" if nxt.startswith("-") or "=" in nxt and flag != "--grid" else nxt
        key = RETIRED[flag]
        if flag == "--grid" and "=" in value:
            field, _, vals = value.partition("=")
            hint = f"search.grid.{field}=[{vals}]"
        elif flag in ("--progress", "--no-progress"):
            hint = f"search.progress={'false' if flag == '--no-progress' else 'true'}"
        elif flag == "--nvs-size" and "," in value:
            hint = f"system.nvs_size=[{value}]"
        elif flag == "--strategy" and "," in value:
            hint = f"strategy.names=[{value}]"
        else:
            hint = f"{key}={value or '...'}"
        raise SpecError(f"{flag}: config fields are overrides now; write {hint}")
