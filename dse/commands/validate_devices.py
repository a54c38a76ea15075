"""`dse validate devices`: the same searches here and on the host CPU, compared row by row.

    dse validate devices [KEY=VALUE ...] [--rtol R]

For each strategy of the question (the overrides of `dse search`: model=, system=,
system.nvs_size=, strategy=, n_gpus=, profile=, network=, global_batch=, search.top_k=, ...),
a search that keeps every row runs in this process, on JAX's default backend (an accelerator where
there is one), and in a child process on the host CPU (JAX_PLATFORMS=cpu). The two are compared:

  rows     every evaluated row, matched by system, NVS size, GPU count and candidate columns:
           the same rows, every float column within a relative difference of --rtol (default
           1e-14: an accelerator's compiler contracts multiply-adds into FMAs, which the host's
           programs keep apart), the same nulls, NaN and infinities, every other column equal;
  top-k    the same optima: each group's ranked rows with the same candidate columns, their
           metrics within --rtol;
  counts   the same candidates and feasible counts per group;
  reduced  the same search keeping only its top-k and counts (on an accelerator expanded and
           reduced in the program, `dse.explore.device_stream`; on the CPU on the host): the same
           top-k and counts as the host CPU's.

Prints one line per strategy and a summary as the last line; each difference found on stderr.
Exit status 0 when everything agrees, 1 when something differs, 2 on bad input or when the child
process fails. Without an accelerator both runs are on the CPU, in two processes: the check is
then that a search is reproducible from one process to the next. Every row of both runs is held
in memory (the default question keeps about a million rows a side); profile=lbnl or fewer GPU
counts make it smaller.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl

PROG = "dse validate devices"
RTOL = 1e-14
COUNT_KEYS = ("system_id", "nvs_size", "n_gpus")


class Comparison(NamedTuple):
    """Rows compared, the largest relative difference of a float column and where, and each
    difference that breaks the check (empty when the frames agree)."""

    rows: int
    max_rel: float
    column: str | None
    problems: list[str]


def relative_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| / max(|a|, |b|) of finite values; 0 where they are equal (both zero, or the same
    infinity); inf where one is finite and the other not, or the infinities differ; NaN pairs
    count as equal (callers compare NaN positions apart)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.maximum(np.abs(a), np.abs(b))
        rel = np.abs(a - b) / scale
    rel = np.where(a == b, 0.0, rel)
    rel = np.where(np.isnan(a) & np.isnan(b), 0.0, rel)
    return np.where(np.isnan(rel), np.inf, rel)  # one NaN, or inf - inf of opposite signs


def compare(a: pl.DataFrame, b: pl.DataFrame, keys, rtol: float = RTOL, what: str = "rows") -> Comparison:
    """Compare two frames of the same search row by row, matched on `keys` (both sorted by them):
    the same columns and rows, float columns within `rtol` relative difference with the same nulls
    and NaN, every other column equal."""
    problems: list[str] = []
    if a.schema != b.schema:
        only = sorted(set(a.columns) ^ set(b.columns))
        retyped = [c for c in a.columns if c in b.columns and a.schema[c] != b.schema[c]]
        problems.append(f"{what}: the columns differ (in one only: {only}; of other types: {retyped})")
        return Comparison(0, math.nan, None, problems)
    if a.height != b.height:
        problems.append(f"{what}: {a.height:,} rows here, {b.height:,} on the host CPU")
        return Comparison(0, math.nan, None, problems)
    keys = list(keys)
    a, b = a.sort(keys, maintain_order=True), b.sort(keys, maintain_order=True)
    max_rel, worst = 0.0, None
    for c in a.columns:
        x, y = a[c], b[c]
        if x.dtype in (pl.Float32, pl.Float64):
            null_x, null_y = x.is_null().to_numpy(), y.is_null().to_numpy()
            if (null_x != null_y).any():
                problems.append(f"{what}: {c} is null in {int((null_x != null_y).sum()):,} rows of one run only")
                continue
            xv, yv = x.to_numpy()[~null_x], y.to_numpy()[~null_y]
            nan = np.isnan(xv) != np.isnan(yv)
            if nan.any():
                problems.append(f"{what}: {c} is NaN in {int(nan.sum()):,} rows of one run only")
                continue
            rel = relative_difference(xv, yv)
            if not len(rel):
                continue
            i = int(np.argmax(rel))
            if worst is None or rel[i] > max_rel:
                max_rel, worst = float(rel[i]), c
            over = rel > rtol
            if over.any():
                where = np.flatnonzero(~null_x)[i]
                at = ", ".join(f"{k}={a[k][int(where)]}" for k in keys)
                problems.append(f"{what}: {c} differs by up to {rel[i]:.3g} relative in {int(over.sum()):,} rows "
                                f"(rtol {rtol:g}; worst at {at}: {float(xv[i])!r} here, {float(yv[i])!r} on the host CPU)")
        else:
            same = (x == y) | (x.is_null() & y.is_null())
            differ = same.fill_null(False).not_().sum()
            if differ:
                what_differs = "the rows themselves" if c in keys else c
                problems.append(f"{what}: {what_differs} differ in {differ:,} rows")
    return Comparison(a.height, max_rel, worst, problems)


def question(overrides) -> tuple[dict, list[str], list[str]]:
    """(`run_search` keywords, the strategies to search, notes of strategies refused), every
    input checked before any compute (a bad one raises `dse.spec.specs.SpecError`)."""
    from dse.commands.search import question as search_question
    from dse.explore.search import check_strategies

    q = search_question(overrides)
    strategies = q.pop("strategies")
    q.pop("profile_name")
    q.pop("jobs")
    q["progress"] = False
    plan_keys = ("model", "system", "nvs_size", "n_gpus", "profile", "global_batch", "top_k", "grid", "network",
                 "max_candidates")
    strategies, refused = check_strategies(strategies, **{k: q[k] for k in plan_keys})
    return q, strategies, refused


#: The frames each side writes: a search keeping every row (its rows, top-k and counts), and the
#: same search keeping only its reductions (on an accelerator expanded and reduced in the program,
#: `dse.explore.device_stream`; on the CPU the host's stream).
FRAMES = ("rows", "top", "counts", "reduced_top", "reduced_counts")


def searches(q: dict, strategies) -> dict[str, dict[str, pl.DataFrame]]:
    """Each strategy's search keeping every row, and keeping only its reductions: {strategy:
    {frame: DataFrame}} for each of `FRAMES`."""
    from dse.explore.search import run_search

    out = {}
    for s in strategies:
        res = run_search(strategy=s, **q, keep_rows=True)
        reduced = run_search(strategy=s, **q)
        out[s] = {"rows": res.rows, "top": res.top, "counts": res.counts, "reduced_top": reduced.top,
                  "reduced_counts": reduced.counts}
    return out


def device_name() -> str:
    """This process's JAX devices in words: platform, kind (the CPU's model on CPU) and count."""
    import jax

    from dse.commands.bench import cpu_model

    d = jax.devices()[0]
    kind = d.device_kind if d.platform != "cpu" else cpu_model()
    return f"{d.platform} ({kind}, {len(jax.devices())} device{'s' if len(jax.devices()) > 1 else ''})"


def _child(directory: Path, overrides) -> int:
    """The host CPU's side: every frame written as Parquet into `directory`, with the device."""
    q, strategies, _ = question(overrides)
    for s, frames in searches(q, strategies).items():
        for kind, frame in frames.items():
            frame.write_parquet(directory / f"{s}.{kind}.parquet")
    (directory / "device.json").write_text(json.dumps({"device": device_name()}))
    return 0


def _run_child(directory: Path, overrides) -> tuple[int, str]:
    """Run `_child` in a new process on the host CPU; (exit status, its stderr's last line)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "DSE_DEVICE_STREAM": "off"}  # the host's path, on the host
    code = "import dse.cli; dse.cli.run()"  # as the console script: exits without tearing JAX down
    cmd = [sys.executable, "-c", code, "validate", "devices", "--child", str(directory), *overrides]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    last = next((ln for ln in reversed(done.stderr.splitlines()) if ln.strip()), "")
    return done.returncode, last


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0].split(": ", 1)[1],
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="the question, as for dse search")
    p.add_argument("--rtol", type=float, default=RTOL, help="largest relative difference allowed (default %(default)g)")
    p.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    return p


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def main(argv=None) -> int:
    from dse.interface.overrides import reject_retired_flags
    from dse.interface.table import render

    argv = list(argv or [])
    reject_retired_flags(argv)
    args = parser().parse_intermixed_args(argv)
    if args.child is not None:
        return _child(args.child, args.overrides)
    if not (math.isfinite(args.rtol) and args.rtol >= 0):
        return _fail(f"--rtol = {args.rtol!r}: expected a finite number >= 0", 2)
    q, strategies, refused = question(args.overrides)  # every input checked before either run
    for note in refused:
        print(note)
    if not strategies:
        return _fail("no strategy to search (each was refused above)", 2)
    here = device_name()
    with tempfile.TemporaryDirectory(prefix="dse-devices-") as tmp:
        directory = Path(tmp)
        t0 = time.perf_counter()
        status, last = _run_child(directory, args.overrides)
        host_s = time.perf_counter() - t0
        if status != 0:
            return _fail(f"the host CPU's run failed (exit status {status}): {last}", 2)
        host = json.loads((directory / "device.json").read_text())["device"]
        print(f"{PROG}: this process on {here}; the child process on {host}")
        from dse.explore.stream import device_stream_on

        where = "in the program (dse.explore.device_stream)" if device_stream_on(True, False) else "on the host"
        print(f"a search keeping only its reductions reduces {where} here, on the host in the child process")
        if here.startswith("cpu"):
            print("no accelerator here: both runs are on the CPU, so this checks that a search is the same "
                  "from one process to the next")
        t0 = time.perf_counter()
        mine = searches(q, strategies)
        here_s = time.perf_counter() - t0
        rows, problems, total, worst = [], [], 0, (0.0, None)
        for s in strategies:
            theirs = {k: pl.read_parquet(directory / f"{s}.{k}.parquet") for k in FRAMES}
            keys = [c for c in mine[s]["rows"].columns if c in _row_keys()]
            r = compare(mine[s]["rows"], theirs["rows"], keys, args.rtol, f"{s} rows")
            t = compare(mine[s]["top"], theirs["top"], [*COUNT_KEYS, "rank"], args.rtol, f"{s} top-k")
            c = compare(mine[s]["counts"], theirs["counts"], COUNT_KEYS, 0.0, f"{s} counts")
            rt = compare(mine[s]["reduced_top"], theirs["reduced_top"], [*COUNT_KEYS, "rank"], args.rtol,
                         f"{s} top-k of the search keeping only its reductions")
            rc = compare(mine[s]["reduced_counts"], theirs["reduced_counts"], COUNT_KEYS, 0.0,
                         f"{s} counts of the search keeping only its reductions")
            problems += r.problems + t.problems + c.problems + rt.problems + rc.problems
            total += r.rows
            if r.max_rel > worst[0]:
                worst = (r.max_rel, r.column)
            rows.append({"strategy": s, "rows": r.rows, "max rel diff": r.max_rel,
                         "worst column": r.column if r.max_rel > 0 else "-",
                         "top-k": "same" if not t.problems else "DIFFERENT",
                         "counts": "same" if not c.problems else "DIFFERENT",
                         "reduced": "same" if not (rt.problems or rc.problems) else "DIFFERENT",
                         "rows ok": "yes" if not r.problems else "NO"})
    print(render(rows, formats={"rows": ",", "max rel diff": ".2e"}))
    print(f"searches: {here_s:.2f} s here, {host_s:.2f} s for the child process (start, compilation and "
          f"writing included)")
    sys.stdout.flush()
    for p in problems:
        print(p, file=sys.stderr)
    sys.stderr.flush()
    verdict = "everything agrees" if not problems else f"{len(problems)} difference(s), listed on stderr"
    if not total and not problems:
        verdict = "nothing to compare (no candidate in any group of the question)"
    print(f"{len(strategies)} strateg{'y' if len(strategies) == 1 else 'ies'}, {total:,} rows: max relative "
          f"difference {worst[0]:.2e}{f' ({worst[1]})' if worst[1] else ''}, rtol {args.rtol:g}: {verdict}")
    return 0 if not problems else 1


def _row_keys() -> tuple[str, ...]:
    """The columns that name an evaluated row: its system (by id), group and candidate columns."""
    from dse.explore.space import COLUMNS

    return (*COUNT_KEYS, *COLUMNS)


if __name__ == "__main__":
    sys.exit(main())
