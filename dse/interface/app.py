"""The Hydra application: `dse` runs the study of conf/config.yaml, `dse -m ...` sweeps it.

A job is one model on one system (plus its hardware grid), its NVS size, a set of GPU counts and
strategies. For each strategy it searches the design space, prints the answer and writes the rows
(the top-k per group, or every row) as one Parquet file of the study's dataset
(`dse.results.io`: hive partitions model/system/strategy, file named by a hash of the job's inputs,
written atomically). A job whose file already exists and verifies (`dse.results.io.verify`) is skipped, so
an interrupted multirun can simply be started again; a damaged file is rebuilt. Under `dse -m`
each job's console answer is printed in one piece, labelled with its swept values, and a worker
whose launcher dies stops (`watch_parent`). A job that fails (a bad config: SpecError; any other
error: its type and message) says so in one line and never stops another job; a refused job leaves
no Hydra files (`dse.interface.rundir`); the sweep ends with a summary of every job, succeeded,
skipped or failed, and exits 2 if any failed (`sweep_summary`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import polars as pl

import dse
from dse.results import io
from dse.explore.bounds import DEFAULT_MAX_CANDIDATES, max_candidates
from dse.explore.search import evaluations_line, run_search
from dse.explore.space import parse_gpu_counts
from dse.spec.checks import idle_switches
from dse.spec.specs import (MAX_BATCH, MAX_TOP_K, SpecError, SystemSpec, check_choice, check_int, check_name, load_model,
                            load_system)
from dse.spec.specs import nvs_sizes as resolve_nvs_sizes
from dse.interface.answer import answer, smallest_memory
from kernels.eager import ELEMENTWISE
from kernels.experts import MOE_DISPATCHERS
from kernels.frameworks import FRAMEWORKS
from kernels.params import (COMPUTE_MODELS, CP_COMMS, OPTIMIZER_STATES, PP_SCHEDULES, PRECISION_SEARCHED, PROFILES,
                            RECOMPUTE_SEARCHED, STRATEGIES, ZERO_SEARCHED, Profile)

log = logging.getLogger("dse")

#: The global batch (samples per iteration) of a model preset that publishes none.
DEFAULT_GLOBAL_BATCH = 4096

ROW_MODES = ("top", "all")

@dataclass
class Job:
    """A validated job, built from a config mapping (Hydra's or a plain dict)."""

    study: str
    model: Any
    system: SystemSpec
    network: Any  # dse.spec.network.NetworkSpec
    strategies: list[str]
    profile_name: str
    profile: Profile
    n_gpus: list[int]
    global_batch: int
    top_k: int
    chunk: int | None
    progress: bool
    grid: dict
    nvs_sizes: list[int]
    root: Path
    rows: str
    write: bool
    show: int
    config: dict = field(default_factory=dict)
    keep: str = "top"
    objectives: tuple = ()
    economics: dict = field(default_factory=dict)
    max_candidates: int = DEFAULT_MAX_CANDIDATES
    batch_source: str = "given"  # where global_batch comes from: given, the model preset, the default

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "Job":
        def section(name):
            v = cfg.get(name)
            if not isinstance(v, Mapping):
                raise SpecError(f"{name}: missing config section")
            return v

        study = check_name("study", str(cfg.get("study", "default")))
        model = load_model(dict(section("model")))
        check_name("model.name", model.name)  # a directory of the dataset
        sys_cfg = dict(section("system"))
        sizes = sys_cfg.get("nvs_size")  # an int, or a list: several NVS domain sizes in one job
        if isinstance(sizes, (list, tuple)) and sizes:
            sys_cfg["nvs_size"] = sizes[0]
        system = load_system(sys_cfg)
        check_name("system.name", system.name)
        from dse.spec.network import load_network

        network = load_network(dict(section("network")))
        names = list(section("strategy").get("names") or [])
        if not names:
            raise SpecError("strategy.names: give at least one of " + ", ".join(STRATEGIES))
        strategies = [check_choice("strategy.names", s, STRATEGIES) for s in names]
        prof_cfg = dict(section("profile"))
        prof_name = str(prof_cfg.pop("name", "custom"))
        unknown = sorted(set(prof_cfg) - set(Profile._fields))
        if unknown:
            raise SpecError(f"profile.{unknown[0]}: unknown switch; valid: {', '.join(Profile._fields)}")
        prof = profile_from_mapping(prof_cfg)
        if prof_name in PROFILES and PROFILES[prof_name] != prof:
            prof_name = f"{prof_name}+custom"
        search, out = section("search"), section("output")
        chunk = search.get("chunk")
        from dse.results.economics import check_economics
        from dse.results.pareto import DEFAULT_OBJECTIVES, KEEP, parse_objectives

        economics = dict(cfg.get("economics") or {"name": "auto"})
        check_economics(economics)
        keep = check_choice("search.keep", search.get("keep", "top"), KEEP)
        objectives = search.get("objectives") or list(DEFAULT_OBJECTIVES)
        objectives = tuple(objectives.split(",") if isinstance(objectives, str) else objectives)
        batch, batch_source = cfg.get("global_batch"), "given"
        if batch is None:  # the model preset's published global batch, else the default, said on the answer
            batch, batch_source = ((model.global_batch, "the model preset's published batch") if model.global_batch
                                   else (DEFAULT_GLOBAL_BATCH, "the default: the model preset publishes none"))
        numeric = [c for c, t in io.schema().items() if t.is_numeric()]
        parse_objectives(objectives, numeric)  # a bad objective: one line, before any compute
        from dse.explore.grid import check_grid_fields

        check_grid_fields(system, search.get("grid"))  # a system field the grid would drop: one line
        return cls(
            study=study,
            model=model,
            system=system,
            network=network,
            strategies=strategies,
            profile_name=prof_name,
            profile=prof,
            n_gpus=parse_gpu_counts(cfg.get("n_gpus", 4096)),
            global_batch=check_int("global_batch", batch, 1, MAX_BATCH),
            batch_source=batch_source,
            top_k=check_int("search.top_k", search.get("top_k", 10), 1, MAX_TOP_K),
            chunk=None if chunk is None else check_int("search.chunk", chunk),
            progress=bool(search.get("progress", True)),
            grid=dict(search.get("grid") or {}),
            nvs_sizes=resolve_nvs_sizes(sizes, system),
            root=Path(str(out.get("root", "outputs/data"))) / study,
            rows=check_choice("output.rows", out.get("rows", "top"), ROW_MODES),
            write=bool(out.get("write", True)),
            show=check_int("output.show", out.get("show", 5), 0),
            config=dict(cfg),
            keep=keep,
            objectives=objectives,
            economics=economics,
            max_candidates=max_candidates(search.get("max_candidates")),
        )

    def inputs(self, strategy: str) -> dict[str, Any]:
        """Everything that determines the rows of one strategy's file (hashed into its name)."""
        return {
            "dse": dse.__version__,
            "schema": io.SCHEMA_VERSION,
            "model": asdict(self.model),
            "system": asdict(self.system),
            "network": asdict(self.network),
            "strategy": strategy,
            "profile": {"name": self.profile_name, **self.profile._asdict()},
            "n_gpus": self.n_gpus,
            "global_batch": self.global_batch,
            "top_k": self.top_k,
            "rows": self.rows,
            "grid": self.grid,
            "nvs_sizes": self.nvs_sizes,
            **({"keep": self.keep, "objectives": list(self.objectives)} if self.keep != "top" else {}),
            "economics": self.economics,
            # the files a profile or network names: their contents, so an edited one never reuses rows
            "calibration": _preset_text("calibration", self.profile.calibration),
            "prices": _preset_text("prices", getattr(self.network, "prices", None)),
        }


def _preset_text(group: str, name: Any) -> str | None:
    """The text of conf/<group>/<name>.yaml, or None when there is none."""
    from dse.spec.specs import CONF_DIR

    if not isinstance(name, str) or not name.isidentifier():
        return None
    path = CONF_DIR / group / f"{name}.yaml"
    return path.read_text() if path.is_file() else None


def check_writable(root: Path) -> None:
    """`output.root` can hold the dataset: its directory is created and written to, else one
    SpecError line (before any compute)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = io.temporary_beside(root / "probe")
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise SpecError(f"output.root = {str(root.parent)!r}: cannot write the dataset there "
                        f"({err.strerror or type(err).__name__}); give a writable directory") from None


#: The values of the profile's string fields (calibration: a conf/calibration preset).
STR_CHOICES = {"precision": tuple(PRECISION_SEARCHED), "recompute": tuple(RECOMPUTE_SEARCHED),
               "compute_model": COMPUTE_MODELS, "zero": tuple(ZERO_SEARCHED), "cp_comm": CP_COMMS,
               "framework": tuple(FRAMEWORKS), "pp_schedule": PP_SCHEDULES, "elementwise": ELEMENTWISE,
               "optimizer_state": tuple(OPTIMIZER_STATES), "moe_dispatcher": MOE_DISPATCHERS}


def check_recompute_modules(value: str) -> None:
    """`profile.recompute_modules`: one or more of `RECOMPUTE_MODULES`, joined by '+'."""
    from kernels.params import RECOMPUTE_MODULES, module_names

    names = module_names(value)
    bad = sorted(set(names) - set(RECOMPUTE_MODULES))
    if bad or not names:
        raise SpecError(f"profile.recompute_modules = {value!r}: " + (f"{bad[0]!r} is not a module" if bad else "empty")
                        + f"; valid: one or more of {', '.join(RECOMPUTE_MODULES)}, joined by '+' "
                        "(Megatron's moe and shared_experts are not yet modelled)")


def profile_from_mapping(cfg: Mapping[str, Any]) -> Profile:
    """A `Profile` from config fields, each checked against the type of its default."""
    from dse.truth.calibration import load_calibration
    from dse.spec.specs import check_float

    out = {}
    for k, v in cfg.items():
        default = Profile._field_defaults[k]
        if isinstance(default, bool):
            if not isinstance(v, bool):
                raise SpecError(f"profile.{k} = {v!r}: must be true or false")
        elif isinstance(default, float):
            v = check_float(f"profile.{k}", v, 0.0, 1.0 if k in ("attention_eff", "tp_overlap_eff") else float("inf"),
                            low_open=k in ("gamma", "attention_narrow", "attention_wide"))
        elif isinstance(default, int):
            v = check_int(f"profile.{k}", v, 0)
        else:
            v = str(v)
            if k in STR_CHOICES:
                check_choice(f"profile.{k}", v, STR_CHOICES[k])
            if k == "recompute_modules":
                check_recompute_modules(v)
        out[k] = v
    prof = Profile(**out)
    load_calibration(prof.calibration)  # an unknown calibration is an error here, before any compute
    return prof


def dataset_rows(frame: pl.DataFrame, job: Job, strategy: str, jid: str, systems: list[SystemSpec]) -> pl.DataFrame:
    """Search rows (with `system_id`) as dataset rows: job columns and each row's hardware added,
    the categorical candidate columns by name (`io.decode`), as a dataset file holds them."""
    hw = pl.DataFrame([{"system_id": i, **{h: getattr(s, h) for h in io.HARDWARE}} for i, s in enumerate(systems)])
    grid_cols = [c for c in frame.columns if c in io.HARDWARE and c != "nvs_size"]
    base = frame.drop(grid_cols).join(hw.drop("nvs_size"), on="system_id", how="left")
    if "rank" not in base.columns:
        base = base.with_columns(pl.lit(None, dtype=pl.Int64).alias("rank"))
    return io.decode(base).with_columns(
        pl.lit(jid).alias("job_id"),
        pl.lit(job.profile_name).alias("profile"),
        pl.lit(job.network.name).alias("network"),
        pl.lit(job.global_batch, dtype=pl.Int64).alias("global_batch"),
        ((pl.lit(job.global_batch) // pl.col("n_d")) // pl.col("microbatch")).alias("microbatches"),
    )


@dataclass
class JobResult:
    files: list[Path]
    skipped: list[Path]
    top: pl.DataFrame
    seconds: float


def run_job(cfg: Mapping[str, Any], echo=print) -> JobResult:
    """Run one job: search each strategy, print the answer, write its Parquet file."""
    t0 = time.perf_counter()
    job = Job.from_config(cfg)
    from dse.explore.grid import system_grid
    from dse.explore.search import check_strategies

    systems, _ = system_grid(job.system, job.grid)
    systems = [job.network.apply(s) for s in systems]  # the hardware each row was evaluated on
    # every strategy's inputs checked before any is searched; one that refuses is said and left out
    strategies, refused = check_strategies(
        job.strategies, model=job.model, system=job.system, n_gpus=job.n_gpus, nvs_size=job.nvs_sizes,
        profile=job.profile, global_batch=job.global_batch, network=job.network, top_k=job.top_k, grid=job.grid,
        max_candidates=job.max_candidates)
    if job.write:  # after every other check: an invalid job creates no directory
        io.check_model_name(job.root, job.study, asdict(job.model))
        check_writable(job.root)
    for note in refused + idle_switches(job.profile, job.profile_name, job.model):
        echo(note)
    job = replace(job, strategies=strategies)
    files, skipped, tops = [], [], []
    searched: dict[str, int] = {}  # candidates enumerated per strategy searched (not skipped)
    smallest: dict[str, tuple] = {}  # nothing fits: the least memory any candidate needs, and where
    for strategy in job.strategies:
        jid = io.job_id(job.inputs(strategy))
        path = io.file_path(job.root, job.model.name, job.system.name, strategy, jid)
        damage = io.verify(path) if job.write and path.exists() else None
        if damage is not None:
            log.warning("%s %s: %s is incomplete (%s); rebuilding it", job.model.name, strategy, path, damage)
            path.unlink(missing_ok=True)
        if job.write and path.exists():
            log.info("%s %s: complete in %s, skipped", job.model.name, strategy, path)
            skipped.append(path)
            top = pl.read_parquet(path)
            if job.rows == "all":
                top = top.filter(pl.col("feasible")).sort(["n_gpus", "throughput"], descending=[False, True])
            tops.append(top.with_columns(pl.lit(strategy).alias("strategy")))
            continue
        for stale in path.parent.glob(f".{path.name}.tmp-*"):  # left by a killed run of this job
            stale.unlink(missing_ok=True)
        meta = {"dse_version": dse.__version__, "profile": job.profile_name,
                "profile_switches": job.profile._asdict(), "config": job.config, "inputs": job.inputs(strategy)}
        parts = {"model": job.model.name, "system": job.system.name, "strategy": strategy}
        writer = io.AtomicParquetWriter(path, meta, parts) if job.write else None
        def write_rows(rows, strategy=strategy, jid=jid):
            if writer is not None:
                writer.write(dataset_rows(rows, job, strategy, jid, systems))
        try:
            res = run_search(model=job.model, system=job.system, strategy=strategy, n_gpus=job.n_gpus,
                             nvs_size=job.nvs_sizes, profile=job.profile, global_batch=job.global_batch,
                             network=job.network,
                             top_k=job.top_k, grid=job.grid, chunk=job.chunk,
                             keep=job.keep, objectives=list(job.objectives), economics=job.economics,
                             max_candidates=job.max_candidates,
                             keep_rows=write_rows if job.rows == "all" else False,
                             progress=job.progress and sys.stderr.isatty())
            top = dataset_rows(res.top, job, strategy, jid, systems)
            if writer is not None:
                if job.rows == "top":
                    writer.write(top)
                writer.close()
                files.append(path)
                log.info("%s %s: %d rows -> %s", job.model.name, strategy,
                         writer.rows, path)
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        st = res.stats
        nvs = ",".join(str(k) for k in job.nvs_sizes)
        echo(f"{job.model.name} {strategy} on {job.system.name} (NVS {nvs}, {job.network.name}, "
             f"{job.profile_name}): "
             f"{evaluations_line(st)}")
        for note in st["notes"]:
            echo(f"  note: {note}")
        searched[strategy] = int(st["candidates"])
        if top.is_empty() and searched[strategy] > 0:
            smallest[strategy] = smallest_memory(job, strategy)
        tops.append(top.with_columns(pl.lit(strategy).alias("strategy")))
    top = pl.concat(tops, how="diagonal_relaxed") if tops else pl.DataFrame()
    if len(top) or searched:
        echo("")
        echo(answer(top, job, searched, smallest))
    return JobResult(files=files, skipped=skipped, top=top, seconds=time.perf_counter() - t0)


#: Environment of a `dse -m` worker: the launcher's process id and its command-line overrides.
LAUNCHER_PID, LAUNCHER_ARGV = "DSE_LAUNCHER_PID", "DSE_LAUNCHER_ARGV"
_WATCHING = False


def watch_parent(launcher: int, interval: float = 0.5) -> threading.Thread | None:
    """In a worker process of `dse -m` (its parent is the launcher `launcher`), a daemon thread that
    ends the process as soon as the launcher is gone (killed, even with SIGKILL: the worker is
    re-parented). A file being written is left as a hidden temporary, removed by the next run of
    its job; nothing half-written is ever taken as complete. None in the launcher itself."""
    global _WATCHING
    if os.getpid() == launcher or _WATCHING:
        return None  # the launcher itself, or watched already (a reused worker)
    if os.getppid() != launcher:
        if _alive(launcher):
            return None  # not the launcher's child (a launcher on another machine, say)
        os._exit(3)  # the launcher died before this job started
    _WATCHING = True

    def watch():
        while True:
            if os.getppid() != launcher:
                os._exit(3)
            time.sleep(interval)

    thread = threading.Thread(target=watch, name="dse-watch-parent", daemon=True)
    thread.start()
    return thread


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_label() -> str:
    """Under `dse -m`, the job's swept values (`network=rail_only system.hbm_capacity=96`): its
    overrides whose key the launcher's command line does not fix to one value (compared by key:
    Hydra rewrites each job's values, `search.progress=false` as `search.progress=False`); '' in a
    single run."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN:
            return ""
        parse = OverridesParser.create().parse_overrides
        fixed = {o.get_key_element() for o in parse(json.loads(os.environ.get(LAUNCHER_ARGV, "[]")))
                 if not o.is_sweep_override()}
        return " ".join(o.input_line.lstrip("+") for o in parse(list(hc.overrides.task))
                        if o.get_key_element() not in fixed)
    except Exception:  # no Hydra context (a plain call of run_job)
        return ""


@dataclass
class Outcome:
    """What one job of `dse -m` came to: `state` succeeded, skipped (its dataset already
    complete), failed (`detail`: why, one line) or running (its process ended before it said)."""

    num: int
    label: str
    state: str
    detail: str = ""
    refused_dir: str = ""  # a refused job's Hydra directory, removed by the launcher (`dse.interface.rundir`)


#: Environment of a `dse -m` job (set through Hydra's `hydra.job.env_set`, so every launcher's
#: jobs get it): the directory where each job leaves its `Outcome` for the launcher's summary.
STATUS_DIR = "DSE_SWEEP_STATUS"


def _save_outcome(out: Outcome) -> None:
    folder = os.environ.get(STATUS_DIR)
    if folder and Path(folder).is_dir():
        with io.atomic_path(Path(folder) / f"{out.num}.json") as tmp:
            tmp.write_text(json.dumps(asdict(out)))


def _say(text: str, error: str = "") -> None:
    """Print a job's answer (stdout) and error line (stderr) in one piece: under `dse -m` with an
    exclusive lock on a file of the sweep, so that two jobs' outputs never interleave."""
    import fcntl

    folder = os.environ.get(STATUS_DIR)
    with open(Path(folder) / "print.lock" if folder and Path(folder).is_dir() else os.devnull, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
        for line, stream in ((text, sys.stdout), (error, sys.stderr)):
            if line:
                print(line, file=stream, flush=True)


def _multirun_job() -> tuple[int, str] | None:
    """(the job's number, its swept values) under `dse -m`; None in a single run."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        return (int(hc.job.num), sweep_label()) if hc.mode == RunMode.MULTIRUN else None
    except Exception:  # no Hydra context
        return None


def _hydra_main(cfg) -> Outcome | None:
    """One job of the Hydra app. A single run raises SystemExit(2) on a bad config; a job of
    `dse -m` never raises: a bad config (SpecError) or any other error is said in one line,
    labelled with its swept values, and returned (and saved, `STATUS_DIR`) as its `Outcome`, so
    that no job's failure stops another (a worker raising would make the joblib launcher abort
    the pool, killing the jobs still running)."""
    from omegaconf import OmegaConf

    from dse.interface import rundir
    from dse.runtime import configure

    job = _multirun_job()
    if job is None:
        configure()
        data = _task_data(cfg, OmegaConf)
        try:
            run_job(data)
        except SpecError as err:
            print(f"dse: error: {err}", file=sys.stderr, flush=True)
            rundir.discard(rundir.job_dir())  # a refused run leaves no Hydra files
            raise SystemExit(2) from None
        return None
    num, label = job
    out = Outcome(num, label, "running")
    _save_outcome(out)
    lines: list[str] = []
    try:
        configure()  # a launcher's worker process has not run `dse.cli.main`
        if os.environ.get(LAUNCHER_PID, "").isdigit():
            watch_parent(int(os.environ[LAUNCHER_PID]))
        res = run_job(_task_data(cfg, OmegaConf), echo=lines.append)  # the answer printed in one piece
        if res.files or not res.skipped:
            n = len(res.files)
            out.state, out.detail = "succeeded", f"{n} file{'s' * (n != 1)} written" if n else "nothing written"
        else:
            out.state, out.detail = "skipped", "dataset already complete"
    except SpecError as err:
        out.state, out.detail, out.refused_dir = "failed", str(err), rundir.job_dir()
    except Exception as err:  # a bug, a full disk: its type and message, the traceback beside the job's log
        out.state, out.detail = "failed", io.reason(err) + rundir.traceback_note()
    finally:
        text = "\n".join(f"[{label}] {ln}" if ln.strip() and label else ln
                         for ln in "\n".join(lines).splitlines())
        _say(text, f"dse: error: {'[' + label + '] ' if label else ''}{out.detail}" if out.state == "failed" else "")
        if out.state == "running":  # KeyboardInterrupt: said as unfinished
            out.detail = "interrupted"
        _save_outcome(out)
    return out


def _task_data(cfg, OmegaConf) -> dict:
    data = OmegaConf.to_container(cfg, resolve=True)
    data.pop("hydra", None)
    data.pop("sweep", None)
    for name in ("jax", "jax._src.xla_bridge", "absl"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return data


def sweep_summary(outcomes: list[Outcome], hydra_status: int = 0) -> tuple[str, int]:
    """The summary a sweep ends with: a line of counts, then every job (its number, state, swept
    values and the detail); and the sweep's exit status: 2 if any job failed or did not finish,
    else Hydra's own."""
    outcomes = sorted(outcomes, key=lambda o: o.num)
    for o in outcomes:
        if o.state == "running":
            o.state, o.detail = "failed", o.detail or "its process ended before the job finished (killed?)"
    counts = {s: sum(o.state == s for o in outcomes) for s in ("succeeded", "skipped", "failed")}
    n = len(outcomes)
    head = f"dse -m: {n} job{'s' * (n != 1)}: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    width = max(len(o.state) for o in outcomes) if outcomes else 0
    lines = [head] + [f"  #{o.num} {o.state.ljust(width)}  {o.label or '(no swept values)'}: {o.detail}"
                      for o in outcomes]
    if hydra_status:
        lines.append(f"  the sweep stopped early (status {hydra_status}); a job not listed did not run: "
                     "rerun the same command (complete jobs are skipped)")
    return "\n".join(lines), (2 if counts["failed"] else hydra_status)


def run_hydra(argv: list[str]) -> int:
    """Run the Hydra app with command-line overrides `argv` (checked first by `dse.cli`, with
    `dse.interface.overrides.normalize_argv`). Under `dse -m` every job leaves its `Outcome` in a
    temporary directory passed to it by `hydra.job.env_set` (Hydra hands the launcher no job's
    return value, and a callback's end-of-sweep hook gets none either); the sweep ends with their
    summary (`sweep_summary`) and exits 2 if any failed."""
    import shutil
    import tempfile

    import hydra

    from dse.interface import rundir

    main = hydra.main(config_path="pkg://dse.conf", config_name="config", version_base=None)(_hydra_main)
    for stale in Path(tempfile.gettempdir()).glob("dse-sweep-*-*"):  # left by a launcher killed with SIGKILL
        if stale.name.split("-")[2].isdigit() and not _alive(int(stale.name.split("-")[2])):
            shutil.rmtree(stale, ignore_errors=True)
    multirun = "-m" in argv or "--multirun" in argv
    folder = Path(tempfile.mkdtemp(prefix=f"dse-sweep-{os.getpid()}-")) if multirun else None
    extra = [f"++hydra.job.env_set.{STATUS_DIR}='{folder}'"] if folder else []
    old = sys.argv
    sys.argv = ["dse"] + list(argv) + extra
    os.environ[LAUNCHER_PID] = str(os.getpid())  # workers of a multirun watch this process
    os.environ[LAUNCHER_ARGV] = json.dumps([a for a in argv if not a.startswith("-")])
    status, outcomes = 0, []
    try:
        main()
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    if folder is not None:
        outcomes = [Outcome(**json.loads(p.read_text())) for p in folder.glob("*.json")]  # written atomically
        shutil.rmtree(folder, ignore_errors=True)
    rundir.tidy(o.refused_dir for o in outcomes)  # refused jobs leave nothing under hydra.run/sweep.dir
    if outcomes:
        text, status = sweep_summary(outcomes, status)
        print(text, flush=True)
    return status
