"""`dse bench`: candidates per second of each strategy's kernel, of whole searches and of the study.

Kernel: the compiled program of a large search (float64; `dse.explore.stream.stream_sizes`) evaluates
real candidates (GPT3-1T, NVS 64, n = 16384: the largest group of the seed-001 study, tiled to
fill the chunk) against one system;
compilation (or loading the program `dse.explore.programs` kept from an earlier process) is measured
apart, then the chunk is evaluated `--repeats` times. On an accelerator the kernel lines are the
host path's program and the device stream's (`dse.explore.device_stream`), each twice: as a search
calls it (candidates copied in, results copied out) and on inputs already on the device, results
left there (program "..., inputs resident": the program's own rate).
Search: the end-to-end rate of `run_search` (enumeration, kernel calls, top-k reduction, the top
rows' breakdown) over the seed-001 study's space of each strategy, GPT3-1T on A100, H200 and B200
(each at as many HBM capacities, 80 ... 384 GB, as bring the search to at least 1M evaluations),
NVS 4, 8 and 64, n = 4 ... 16384, program already compiled: the best of 3 runs, each followed by
the kernel alone at the same hardware axis and call size (`--repeats` streams), whose best gives
the ratio: the two alternate, so a drift of the machine's speed moves both. The best run's
wall time in phases (`head_s`: until the first chunk is launched; `stream_s`; `tail_s`: after
the stream, the top rows' metrics and frames) shows where the host's share of a search goes.
Latency: the small tp1d search (GPT3-1T on B200, NVS 8 and 64, n = 4 ... 16384: 26 groups),
warm, the median of 9 runs, and the same over many small groups (every multiple of 64 GPUs up to
8192 on NVS 4, 8 and 64: 384 groups); seed 001's 16,384-GPU tp2d case the same way, against the reference
code's 84 s. Enumeration: each search workload planned and its candidates written into the call
slabs as the search does, without the kernel. Rows: every metric of every row of the tp2d search of those GPU counts, into frames,
against pyarrow writing the same rows. Study (`--study`): `dse study` in this process, once cold
(compilation from the persistent cache) and once warm.

    dse bench [strategy=tp1d] [profile=lbnl] [--chunk N] [--repeats N] [--systems N] [--no-search]
              [--study] [--json] [--columns] [--stream CHUNK[:CALL]]

The strategies and profile are the config's (`strategy=`, default all; `dse.interface.overrides`); the flags
are the measurement's own settings. `--json` prints one JSON object per line instead of the
tables: `kind` (kernel, search, enumeration, latency, groups, reference, rows, study), `strategy`, `evaluations`, `seconds`,
`evals_per_s`, `device`, and the measurement's other figures (an enumeration line counts
candidates in `evaluations`). `--columns` streams every search's candidates as their sixteen
columns instead of packed words (`dse.explore.packing.pack`; the form a search takes when a value could
overflow a field), so that the two forms can be compared. `--stream CHUNK[:CALL]` sets the
candidates x systems per chunk of every search's stream and per kernel call (CALL defaults to
CHUNK) in place of the platform's (`dse.explore.stream.stream_sizes`: on CPU 2^18 and 2^15 for a small
search, 2^19 and 2^17 for a large one; on an accelerator 2^18 and 2^16, and 2^20 and 2^20), so that sizes can be
compared on a new machine, e.g.
`for s in 262144 1048576 4194304; do dse bench --stream $s --json; done`. Every JSON line
carries the sizes of small and of large searches (`stream_small`, `stream_large`: [chunk, call];
`dse.explore.stream.stream_sizes`); the kernel lines measure a large search's program.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import time

import jax
import numpy as np

import dse
from dse.explore.bounds import exact_candidates
from dse.explore.engine import profile_of, space_options, stack_systems
from dse.explore.search import plan_search, run_search
from dse.explore.stream import (
    LARGE_SEARCH,
    _Stream,
    candidate_form,
    default_chunk,
    device_stream_on,
    search_kernel,
    stream_sizes,
)
from dse.explore.pieces import iter_pieces
from dse.explore.placement import enumerate_space
from dse.explore.space import Question
from dse.spec.specs import load_model, load_system
from dse.interface.table import render
from kernels.collectives import TWO_TIER
from kernels.params import Candidates


def cpu_model() -> str:
    """The host CPU's model name (/proc/cpuinfo; elsewhere what `platform` says)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    cpu = cpu_model()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    devs = jax.devices()
    kind = devs[0].device_kind if devs[0].platform != "cpu" else f"{len(devs)} XLA host devices"
    return (f"{cpu}; {cores} cores; {platform.system()} {platform.machine()}; jax {jax.__version__} on "
            f"{devs[0].platform} ({kind}); XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; float64")


#: The program label's suffix of a kernel line timed on inputs already on the device.
RESIDENT = ", inputs resident"


def chunk_calls(strategy: str, chunk: int, n_systems: int, profile="lbnl", evaluations: int = LARGE_SEARCH):
    """The host path's program of a search of `evaluations` (`dse.explore.stream.search_kernel`)
    and `chunk` real candidates for it (GPT3-1T, NVS 64, n = 16384, tiled to fill its calls),
    laid out once in the call layout: (kernel, the calls' candidate blocks, workload, systems:
    B200 at n_systems HBM capacities)."""
    m, s = load_model("gpt3_1t"), load_system("b200")
    prof = profile_of(profile)
    q = Question(m, strategy, 4096, **space_options(prof))
    cand = enumerate_space(q, 16384, 64)
    kern = search_kernel(strategy, prof, n_systems, packed=candidate_form(q, [16384]), evaluations=evaluations)
    call = kern.chunk
    calls = max(1, -(-chunk // call))
    idx = np.arange(calls * call) % len(cand["n1"])
    c = np.stack([cand[f][idx] for f in Candidates._fields])
    blocks = [kern.block(c[:, i * call:(i + 1) * call]) for i in range(calls)]
    systems = stack_systems([s.replace(hbm_capacity=s.hbm_capacity * (1 + i)).params() for i in range(n_systems)])
    return kern, blocks, m.workload(4096), systems


def kernel_stream(strategy: str, chunk: int, n_systems: int, profile="lbnl", evaluations: int = LARGE_SEARCH,
                  resident: bool = False):
    """The program of a search of `evaluations` (`dse.explore.stream.search_kernel`: calls of its
    `stream_sizes` call / n_systems candidates, submitted back to back and joined once; by default
    a large search's) on `chunk` real candidates, without enumeration or reduction: (stream, info),
    stream() evaluating them once, info the shape, the compile time and the evaluations per stream.
    `resident`: the candidates copied to the device beforehand and the outputs left there (the
    program's own rate, without the transfers a search makes)."""
    kern, blocks, w, systems = chunk_calls(strategy, chunk, n_systems, profile, evaluations)
    call, calls = kern.chunk, len(blocks)
    t0 = time.perf_counter()
    kern.lower_and_compile(w, systems)
    compile_s = time.perf_counter() - t0

    if resident:
        blocks = [jax.device_put(b) for b in blocks]

    def stream():
        pending = [kern.submit(b, w, systems) for b in blocks]
        if resident:
            jax.block_until_ready(pending)
        else:
            kern.gather(pending, [call] * calls)

    stream()  # warm-up
    return stream, {"strategy": strategy, "program": "chunk" + RESIDENT * resident, "chunk": calls * call, "call": call, "systems": n_systems, "packed": kern.packed,
                    "compile_s": compile_s, "evaluations": calls * call * n_systems}


def filled_call(strategy: str, n_systems: int, profile="lbnl", evaluations: int = LARGE_SEARCH):
    """One call of the accelerator's search program (`dse.explore.device_stream`) of a search of
    `evaluations`, filled as a search fills it with the real candidates of `kernel_stream` (cycled
    to fill the call): (program, call, workload, systems)."""
    from dse.explore import device_stream as ds

    m, s = load_model("gpt3_1t"), load_system("b200")
    prof = profile_of(profile)
    q = Question(m, strategy, 4096, **space_options(prof))
    caps = ds.capacities(stream_sizes(evaluations=evaluations)[1], n_systems)
    prog = ds.device_program(strategy, prof, TWO_TIER, m.arch, n_systems, caps)
    pieces = [p for _, _, p in iter_pieces(q, [16384], [64], max_rows=caps.rows, packed=True, compact=True)]
    call, serial, full = ds.Call(caps), 0, False
    while not full:  # the pieces again and again until the call is full
        for p in pieces:
            i, off = 0, 0
            while i < len(p.take):
                j, o = call.put(p, serial, 0, i, off)
                if (j, o) == (i, off):
                    full = True
                    break
                i, off = j, o
            serial += 1
            if full:
                break
    call.close()
    systems = stack_systems([s.replace(hbm_capacity=s.hbm_capacity * (1 + i)).params() for i in range(n_systems)])
    w = m.workload(4096)
    return prog, call, w, systems


def device_kernel_stream(strategy: str, chunk: int, n_systems: int, profile="lbnl", evaluations: int = LARGE_SEARCH,
                         resident: bool = False):
    """The accelerator's search program (`dse.explore.device_stream`: candidates expanded, evaluated and
    reduced in the program) of a search of `evaluations`, on calls filled as a search fills them
    with the real candidates of `kernel_stream` (cycled to fill the call): (stream, info), stream()
    dispatching `chunk` evaluations' worth of calls back to back and fetching each call's results
    as the search does (the count, the selected rows, the feasible counts). `resident`: the call's
    tables copied to the device beforehand and the results left there."""
    from dse.explore import device_stream as ds

    prog, call, w, systems = filled_call(strategy, n_systems, profile, evaluations)
    caps = prog.caps
    t0 = time.perf_counter()
    run = prog.compiled(w, systems)
    compile_s = time.perf_counter() - t0
    wd, sd = jax.device_put(w), jax.device_put(systems)
    kept = np.full((n_systems, caps.runs), -np.inf)  # a group's first call: nothing kept yet
    tables = (call.cw, call.cf, call.kb, call.kw, call.rs)
    if resident:
        tables, kept = jax.device_put(tables), jax.device_put(kept)
    args = (*tables, np.int32(call.rows), np.int32(10), kept, wd, sd)
    calls = max(1, -(-chunk // (caps.rows * n_systems)))
    selected = []

    def stream():
        outs = [run(*args) for _ in range(calls)]
        if resident:
            jax.block_until_ready(outs)
            selected[:] = [int(outs[0][1])]
            return
        selected[:] = [ds.fetch(out, caps)[0] for out in outs]

    stream()  # warm-up
    return stream, {"strategy": strategy, "program": "device_stream" + RESIDENT * resident, "chunk": calls * caps.rows, "call": caps.rows,
                    "systems": n_systems, "packed": True, "compile_s": compile_s, "selected": selected[0],
                    "evaluations": calls * caps.rows * n_systems}


def kernel_rate(strategy: str, chunk: int, repeats: int, n_systems: int, profile="lbnl", device: bool = False,
                resident: bool = False) -> dict:
    """`kernel_stream` (a large search's program), or with `device` `device_kernel_stream`, timed
    over `repeats` streams (`resident`: on inputs already on the device)."""
    make = device_kernel_stream if device else kernel_stream
    stream, info = make(strategy, chunk, n_systems, profile, resident=resident)
    t0 = time.perf_counter()
    for _ in range(repeats):
        stream()
    dt = time.perf_counter() - t0
    return {**info, "evaluations": repeats * info["evaluations"], "seconds": dt}


SEARCH = dict(model="gpt3_1t", system=["a100", "h200", "b200"], n_gpus="pow2:4:16384", nvs_size=[4, 8, 64])
LATENCY = dict(model="gpt3_1t", system="b200", strategy="tp1d", n_gpus="pow2:4:16384", nvs_size=[8, 64])
#: Many small groups: every multiple of 64 GPUs up to 8192 on three NVS sizes (384 groups, most of
#: them empty or a few hundred candidates): what a search costs per group, beside per candidate.
GROUPS = dict(model="gpt3_1t", system="b200", strategy="tp1d", n_gpus="range:64:8192:64", nvs_size=[4, 8, 64])
MIN_SEARCH = 1_000_000  # evaluations of each strategy's search workload, at least


def workload_systems(kw: dict) -> int:
    """Systems on the hardware axis of a `search_workload`."""
    return len(SEARCH["system"]) * (len(kw["grid"]["hbm_capacity"]) if kw["grid"] else 1)


def search_workload(strategy: str, profile) -> dict:
    """The search workload of a strategy: SEARCH, with an HBM-capacity axis of as many points as
    bring it to MIN_SEARCH evaluations."""
    plan = plan_search(strategy=strategy, profile=profile, **SEARCH)
    per_system = exact_candidates(plan.question, plan.n_gpus, plan.nvs_sizes)
    points = max(1, math.ceil(MIN_SEARCH / max(1, per_system * len(SEARCH["system"]))))
    grid = {"hbm_capacity": [float(x) for x in np.linspace(80, 384, points)]} if points > 1 else None
    return {**SEARCH, "strategy": strategy, "profile": profile, "grid": grid}


#: A search's wall time in three phases (`dse.explore.search.run_search`'s stats): before the first chunk is
#: launched, the stream, and after it.
PHASES = ("head_s", "stream_s", "tail_s")


def search_rate(strategy: str, profile="lbnl", repeats: int = 3, chunk: int = 1 << 18, kernel_repeats: int = 8) -> dict:
    """The search workload's best time over `repeats` runs, and beside it the kernel alone at the
    same hardware axis (`kernel_stream`, `kernel_repeats` streams of `chunk` candidates per round),
    measured in alternating rounds (search, kernel, search, kernel, ...; the best of each), so that
    the ratio of the two compares the same phase of a machine whose speed drifts."""
    kw = search_workload(strategy, profile)
    res = run_search(**kw)  # compiles
    n_sys = workload_systems(kw)
    plan = plan_search(**kw)
    make = device_kernel_stream if device_stream_on(candidate_form(plan.question, plan.n_gpus), False) else kernel_stream
    stream, info = make(strategy, chunk, n_sys, profile, plan.estimate.candidates)  # its program
    best, kbest, phases = math.inf, math.inf, {}
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        res = run_search(**kw)
        dt = time.perf_counter() - t0
        if dt < best:
            best, phases = dt, {k: res.stats[k] for k in PHASES}
        t0 = time.perf_counter()
        for _ in range(max(1, kernel_repeats)):
            stream()
        kbest = min(kbest, (time.perf_counter() - t0) / max(1, kernel_repeats))
    ev = res.stats["evaluations"]
    return {"kind": "search", "strategy": strategy, "systems": n_sys, "evaluations": ev, "seconds": best,
            "evals_per_s": ev / best, "kernel_evals_per_s": info["evaluations"] / kbest, **phases, "workload": kw}


def enumeration_rate(strategy: str, profile="lbnl", repeats: int = 5) -> dict:
    """The search workload planned (its size check enumerates the configurations) and its
    candidates written into the call slabs as the search writes them (`dse.explore.pieces.iter_pieces`
    into a `dse.explore.stream._Stream` of the search's chunk and call sizes), without evaluating them:
    the best of `repeats`."""
    kw = search_workload(strategy, profile)
    n_sys = workload_systems(kw)
    plan = plan_search(**kw)
    kern = search_kernel(strategy, profile_of(profile), n_sys, packed=candidate_form(plan.question, plan.n_gpus),
                         evaluations=plan.estimate.candidates)

    def once() -> int:
        plan = plan_search(**kw)
        stream = _Stream(default_chunk(n_sys, plan.estimate.candidates), kern)
        rows = 0
        for _, _, piece in iter_pieces(plan.question, plan.n_gpus, plan.nvs_sizes, max_rows=stream.size,
                                       known=plan.estimate.enumerated, packed=kern.packed):
            rows += piece.rows
            for _ in stream.add(piece, 0):
                pass
        return rows

    once()
    best = math.inf
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        rows = once()
        best = min(best, time.perf_counter() - t0)
    return {"kind": "enumeration", "strategy": strategy, "evaluations": rows, "seconds": best,
            "evals_per_s": rows / best}


def _warm_median(kw: dict, repeats: int) -> tuple[float, float]:
    """(median seconds, evaluations) of `run_search(**kw)` repeated warm (compiled by a first run)."""
    res = run_search(**kw)
    times = []
    for _ in range(max(3, repeats)):
        t0 = time.perf_counter()
        res = run_search(**kw)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), res.stats["evaluations"]


def latency(profile="lbnl", repeats: int = 9) -> dict:
    dt, ev = _warm_median(dict(LATENCY, profile=profile), repeats)
    return {"kind": "latency", "strategy": "tp1d", "groups": 26, "evaluations": ev, "seconds": dt,
            "evals_per_s": ev / dt, "ms": dt * 1e3}


def many_groups(profile="lbnl", repeats: int = 9) -> dict:
    from dse.explore.space import parse_gpu_counts

    groups = len(parse_gpu_counts(GROUPS["n_gpus"])) * len(GROUPS["nvs_size"])
    dt, ev = _warm_median(dict(GROUPS, profile=profile), repeats)
    return {"kind": "groups", "strategy": "tp1d", "groups": groups, "evaluations": ev, "seconds": dt,
            "evals_per_s": ev / dt, "ms": dt * 1e3, "ms_per_group": dt * 1e3 / groups}


#: Seed 001's 16,384-GPU tp2d case (GPT3-1T, B200, NVS 8): the reference code takes 84 s for it.
REFERENCE = dict(model="gpt3_1t", system="b200", strategy="tp2d", n_gpus=16384, nvs_size=8)
REFERENCE_S = 84.0


def reference_case(profile="lbnl", repeats: int = 9) -> dict:
    dt, ev = _warm_median(dict(REFERENCE, profile=profile), repeats)
    return {"kind": "reference", "strategy": "tp2d", "evaluations": ev, "seconds": dt, "evals_per_s": ev / dt,
            "ms": dt * 1e3, "x_reference": REFERENCE_S / dt}


def rows_rate(profile="lbnl") -> dict:
    """Every metric of every row (`output.rows=all`): the tp2d search of `LATENCY`'s GPU counts into
    frames, against pyarrow writing the same rows to Parquet."""
    import tempfile

    import pyarrow.parquet as pq
    import polars as pl

    kw = dict(LATENCY, strategy="tp2d", profile=profile)
    run_search(**kw, keep_rows=lambda f: None)  # compiles
    frames: list = []
    t0 = time.perf_counter()
    run_search(**kw, keep_rows=frames.append)
    dt = time.perf_counter() - t0
    table = pl.concat(frames).to_arrow()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        pq.write_table(table, f"{tmp}/rows.parquet")
        dw = time.perf_counter() - t0
    n = table.num_rows
    return {"kind": "rows", "strategy": "tp2d", "evaluations": n, "seconds": dt, "evals_per_s": n / dt,
            "write_rows_per_s": n / dw, "of_write": (n / dt) / (n / dw)}


def study_rate(profile) -> list[dict]:
    from dse.commands.study import run

    rows = []
    for label in ("study (first in process)", "study (warm)"):
        t0 = time.perf_counter()
        _, _, stats = run(profile)
        dt = time.perf_counter() - t0
        ev = sum(s["evaluations"] for s in stats)
        rows.append({"kind": "study", "strategy": "all", "run": label, "evaluations": ev, "seconds": dt,
                     "evals_per_s": ev / dt, "compile_s": sum(s["compile_s"] for s in stats)})
    return rows


def gpu_driver() -> str | None:
    """The NVIDIA kernel driver's version line, where this machine has one (None elsewhere)."""
    try:
        with open("/proc/driver/nvidia/version") as fh:
            return fh.readline().strip() or None
    except OSError:
        return None


def device() -> str:
    d = jax.devices()[0]
    return f"{d.platform}:{d.device_kind}" + (f" x{len(jax.devices())}" if d.platform == "cpu" else "")


def main(argv=None) -> int:
    from dse.interface.overrides import reject_retired_flags, resolve

    p = argparse.ArgumentParser(prog="dse bench", description=__doc__.splitlines()[0].split(": ", 1)[1],
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="strategy=tp1d|tp2d|summa|all, profile=default|lbnl|railonly")
    p.add_argument("--chunk", type=int, default=1 << 18, help="candidates per timed kernel stream (in calls of the search's size)")
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--systems", type=int, default=1, help="systems on the hardware axis")
    p.add_argument("--no-search", action="store_true", help="skip the end-to-end search rates and the latency")
    p.add_argument("--study", action="store_true", help="also time the seed-001 study in this process")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of the tables")
    p.add_argument("--columns", action="store_true",
                   help="stream the candidates as their sixteen columns, not packed words (to compare the two)")
    p.add_argument("--device-stream", choices=("auto", "on", "off"), default="auto",
                   help="searches through the program that expands and reduces candidates on the device "
                        "(dse.explore.device_stream): auto (on an accelerator), on, off")
    p.add_argument("--stream", metavar="CHUNK[:CALL]",
                   help="candidates x systems per chunk of a search's stream and per kernel call, in place of the platform's")
    argv = list(argv or [])
    reject_retired_flags(argv)
    args = p.parse_intermixed_args(argv)
    sizes = parse_stream(args.stream) if args.stream is not None else None
    job = resolve(args.overrides).job
    stream_mod = importlib.import_module("dse.explore.stream")
    before = stream_mod.PACK_CANDIDATES, stream_mod.STREAM_SIZES, stream_mod.DEVICE_STREAM
    stream_mod.PACK_CANDIDATES = not args.columns
    stream_mod.STREAM_SIZES = sizes
    stream_mod.DEVICE_STREAM = {"auto": None, "on": True, "off": False}[args.device_stream]
    try:
        return _report(args, job)
    finally:
        stream_mod.PACK_CANDIDATES, stream_mod.STREAM_SIZES, stream_mod.DEVICE_STREAM = before


#: Largest chunk or call `--stream` takes, in candidates x systems (2^24: a chunk's two buffers of
#: packed candidates and its outputs stay near 1 GB).
MAX_STREAM = 1 << 24


def parse_stream(text: str) -> tuple[int, int]:
    """`--stream CHUNK[:CALL]` as (chunk, call) elements; a SpecError naming the value otherwise."""
    from dse.spec.specs import SpecError

    parts = text.split(":")
    try:
        values = [int(x) for x in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or not all(1 <= v <= MAX_STREAM for v in values):
        raise SpecError(f"--stream = {text!r}: expected CHUNK or CHUNK:CALL, candidates x systems, "
                        f"integers 1..{MAX_STREAM}")
    chunk, call = values[0], values[-1]
    if call > chunk:
        raise SpecError(f"--stream = {text!r}: the call ({call}) is larger than the chunk ({chunk}); a chunk is whole calls")
    return chunk, call


def _report(args, job) -> int:
    """Measure and print what `main` was asked for."""
    strategies, profile = job.strategies, job.profile
    p_name = job.profile_name
    form = "columns" if args.columns else "packed words"
    small, large = stream_sizes(), stream_sizes(evaluations=LARGE_SEARCH)
    dev = device() if args.json else None

    def measured(rows: list[dict]) -> list[dict]:
        """`rows` as measured; with --json each printed at once, so a run stopped part-way keeps what it measured."""
        if args.json:
            for r in rows:
                print(json.dumps({**r, "profile": p_name, "device": dev, "jax": jax.__version__, "candidates": form,
                                  "stream_small": list(small), "stream_large": list(large)}), flush=True)
        return rows

    if args.json:
        measured([{"kind": "machine", "machine": machine(), "driver": gpu_driver(),
                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}])
    rows = []
    accelerated = device_stream_on(True, False)  # the searches' stream is the device's: measure its program too
    for s in strategies:
        for on_device in (False, True) if accelerated else (False,):
            # on an accelerator each program also on inputs already there: its own rate beside the transfers'
            for resident in (False, True) if accelerated else (False,):
                r = {"kind": "kernel", **kernel_rate(s, args.chunk, args.repeats, args.systems, profile, on_device, resident)}
                r["evals_per_s"] = r["evaluations"] / r["seconds"]
                rows += measured([r])
    # each search with the kernel alone at its hardware axis, in alternating rounds, for the ratio
    srows = []
    for s in ([] if args.no_search else strategies):
        r = search_rate(s, profile, 3, args.chunk, args.repeats)
        del r["workload"]
        srows += measured([r])
    erows = [] if args.no_search else measured([enumeration_rate(s, profile) for s in strategies])
    lrows = [] if args.no_search or "tp1d" not in strategies else measured([latency(profile), many_groups(profile)])
    xrows = [] if args.no_search else measured([reference_case(profile)]) + measured([rows_rate(profile)])
    strows = measured(study_rate(profile)) if args.study else []
    if args.json:
        return 0
    streams = (f"chunks of {small[0]:,} in calls of {small[1]:,} candidates x systems" if small == large else
               f"chunks of {small[0]:,} in calls of {small[1]:,} candidates x systems, from {LARGE_SEARCH:,} "
               f"evaluations (bounded above) {large[0]:,} in calls of {large[1]:,}")
    print(f"dse {dse.__version__} bench on: {machine()}; profile {p_name}; candidates as {form}; {streams}\n")
    for r in rows + srows + lrows + xrows + strows:
        r["M evals/s"] = r["evals_per_s"] / 1e6
    print(render(rows, ["strategy", "program", "chunk", "call", "systems", "compile_s", "evaluations", "seconds", "M evals/s"],
                 headers={"compile_s": "compile s"}, formats={"compile_s": ".2f", "seconds": ".3f", "M evals/s": ".2f", "evaluations": ",d"},
                 title="kernel: a large search's compiled program, calls submitted back to back, float64"))
    if srows:
        for r in srows:
            r["of kernel"] = f"{r['evals_per_s'] / r['kernel_evals_per_s']:.0%}"
        print()
        for r in srows:
            r["kernel M/s"] = r["kernel_evals_per_s"] / 1e6
        print(render(srows, ["strategy", "systems", "evaluations", "seconds", "M evals/s", "kernel M/s", "of kernel"],
                     formats={"seconds": ".3f", "M evals/s": ".2f", "kernel M/s": ".2f", "evaluations": ",.0f"},
                     title="search: GPT3-1T, A100/H200/B200 x HBM axis, NVS 4, 8, 64, n = 4..16384 "
                           "(enumeration + kernel + top-k + top rows), compiled; best of 3 rounds, "
                           "each one search and the kernel alone"))
    if srows:
        print("phases of each best search (before the first chunk is launched + the stream + after it): " + ", ".join(
            f"{r['strategy']} {r['head_s'] * 1e3:.1f} + {r['stream_s'] * 1e3:.1f} + {r['tail_s'] * 1e3:.1f} ms"
            for r in srows))
    if erows:
        print("\nenumeration (planned and written into the call slabs, no kernel; best of 5): " + ", ".join(
            f"{r['strategy']} {r['evaluations']:,} candidates in {r['seconds'] * 1e3:.1f} ms "
            f"({r['evals_per_s'] / 1e6:.1f} M/s)" for r in erows))
    if lrows:
        r, g = lrows
        print(f"\nlatency: small tp1d search (GPT3-1T, B200, NVS 8 and 64, n = 4..16384, 26 groups, "
              f"{r['evaluations']:,.0f} evaluations): {r['ms']:.1f} ms warm (median)")
        print(f"many groups: tp1d, GPT3-1T, B200, NVS 4, 8 and 64, n = 64, 128, ..., 8192 ({g['groups']} groups, "
              f"{g['evaluations']:,.0f} evaluations): {g['ms']:.1f} ms warm (median), {g['ms_per_group']:.3f} ms per group")
    for r in xrows:
        if r["kind"] == "reference":
            print(f"seed 001's 16,384-GPU tp2d case ({r['evaluations']:,.0f} candidates), repeated warm: "
                  f"{r['ms']:.1f} ms (median), {r['x_reference']:,.0f}x the reference code's {REFERENCE_S:.0f} s")
        else:
            print(f"every metric of every row (tp2d, {r['evaluations']:,.0f} rows): {r['evals_per_s'] / 1e6:.2f} M rows/s "
                  f"into frames; pyarrow writes them at {r['write_rows_per_s'] / 1e6:.2f} M rows/s "
                  f"({r['of_write']:.0%} of it)")
    for r in strows:
        print(f"{r['run']}: {r['evaluations']:,.0f} evaluations in {r['seconds']:.2f} s "
              f"({r['compile_s']:.2f} s compiling), {r['M evals/s']:.2f} M evaluations/s")
    return 0
