"""`dse validate measured`: predict published measured training runs and print the errors.

    dse validate measured [--csv PATH] [--profile NAME] [--calibration NAME|PATH] [--out FILE.parquet]

Reads the runs from a CSV (default: the packaged Korthikanti et al. 2022 Table 5; schema in
`dse.truth.measured`), checks every row before any compute, lays each run out as Megatron does and
predicts its iteration time with the engine (strategy tp1d, one call per model shape, system and
global batch) under the profile's calibration, or under `--calibration` (a calibration of
conf/calibration/, a file of one's own as `dse calibrate --out` writes it, or none: the systems'
own efficiencies), which checks a calibration against runs it was not fitted on. Prints one table
row per predicted run, then one line per bad row on stderr (the row is skipped), then the summary
`N runs: mean |error| X%, max |error| Y% (profile P, calibration C)` as the last line of stdout.
Exit status: 0 when at least one run was predicted; 2 when the input is unusable (unreadable path,
empty file, a required column missing, no valid row) or an argument is invalid (a calibration that
does not load included).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

from dse.truth.measured import PROFILE, predict, write_parquet
from dse.truth.runs import PACKAGED_CSV, MeasuredError, packaged_sets, read_runs, resolve_many
from dse.truth.schema import has_doubt
from dse.truth.calibration import calibration_names, load_calibration
from dse.spec.checks import check_output_file
from dse.spec.specs import SpecError, check_choice
from dse.interface.table import render
from kernels.params import PROFILES

PROG = "dse validate measured"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0].split(": ", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", action="append", default=None, metavar="PATH|NAME",
                   help=f"measured runs: a CSV, the name of a packaged set ({', '.join(packaged_sets())}), or "
                        f"'corpus' (the packaged training corpus); repeat to read several (default: {PACKAGED_CSV.stem})")
    p.add_argument("--profile", default=PROFILE, metavar="NAME",
                   help=f"engine profile, one of {', '.join(sorted(PROFILES))} (default: %(default)s)")
    p.add_argument("--calibration", default=None, metavar="NAME|PATH",
                   help=f"the calibration the predictions apply: one of conf/calibration/ "
                        f"({', '.join(calibration_names())}), a FILE.yaml written by `dse calibrate --out`, "
                        "or none (the systems' own efficiencies); default: the profile's own")
    p.add_argument("--out", type=Path, default=None, metavar="FILE.parquet",
                   help="also write every predicted run, with its input columns, as Parquet")
    return p


def table(frame) -> str:
    """One line per predicted run (with a doubt column where a run's source states one)."""
    doubts = doubtful(frame)
    rows = [{
        "model": r["model"], "tp/cp/pp/dp": f"{r['tp']}/{r['cp']}/{r['pp']}/{r['dp']}",
        "precision": r["precision"], "micro_batch": r["micro_batch"],
        "interleave": r["interleave"], "recompute": r["recompute"],
        "SP": "on" if r["sequence_parallel"] else "off", "gpu": r["gpu"],
        "measured": r["measured_iter_s"], "predicted": r["predicted_iter_s"], "error": 100.0 * r["error"],
        "memory": f"{r['predicted_memory_gb']:.1f}/{r['hbm_gb']:.0f}" + ("" if r["fits"] else " OOM"),
        **({"memory_error": "" if r["memory_error"] is None else f"{100.0 * r['memory_error']:+.1f}"}
           if frame["memory_error"].is_not_null().any() else {}),
        **({"doubt": "yes" if d else ""} if doubts.any() else {}),
    } for r, d in zip(frame.iter_rows(named=True), doubts)]
    return render(rows, formats={"measured": ".2f", "predicted": ".2f", "error": "+.1f"},
                  headers={"measured": "measured s", "predicted": "predicted s", "error": "error %",
                           "memory": "memory/HBM GB", "memory_error": "memory error %"})


def doubtful(frame) -> np.ndarray:
    """Which runs' sources state a doubt about their configuration (a nonblank `doubt` column)."""
    if "doubt" not in frame.columns:
        return np.zeros(frame.height, dtype=bool)
    return np.array(has_doubt(frame["doubt"].to_list()), dtype=bool)


def summary(frame, profile: str, calibration: str) -> str:
    """`N runs: mean |error| X.X%, max |error| Y.Y% (profile P, calibration C)`, then the runs with a
    stated doubt and the others apart where there are any, the runs predicted not to fit and the
    peak-memory errors."""
    err = frame["error"].abs()
    doubts = doubtful(frame)

    def part(mask, what):
        e = err.filter(pl.Series(mask))
        return (f"{int(mask.sum())} {what}: mean {100.0 * e.mean():.1f}%, max {100.0 * e.max():.1f}%" if e.len()
                else f"none {what}")
    oom = frame.height - int(frame["fits"].sum())
    mem = frame["memory_error"].drop_nulls().abs()
    return (f"{frame.height} runs: mean |error| {100.0 * err.mean():.1f}%, "
            f"max |error| {100.0 * err.max():.1f}% (profile {profile}, calibration {calibration}); "
            + (f"of them {part(doubts, 'with a stated doubt (column doubt)')}, {part(~doubts, 'without')}; "
               if doubts.any() else "")
            + f"{oom} predicted not to fit in HBM"
            + (f"; peak memory of {mem.len()}: mean |error| {100.0 * mem.mean():.1f}%, max {100.0 * mem.max():.1f}%"
               if mem.len() else ""))


def calibration(name: str) -> None:
    """Check `--calibration` before any compute: the calibration loader's error (`load_calibration`),
    said of this option."""
    try:
        load_calibration(name)
    except SpecError as exc:
        raise SpecError(str(exc).replace("profile.calibration = ", "calibration = ", 1)) from None


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def _report_rows(errors) -> None:
    sys.stdout.flush()
    for e in errors:
        print(e, file=sys.stderr)
    sys.stderr.flush()


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        profile = check_choice("profile", args.profile, PROFILES)
        if args.calibration is not None:
            calibration(args.calibration)
        paths = [p for c in (args.csv or [None]) for p in resolve_many(c)]
        runs = read_runs(paths if len(paths) > 1 else paths[0])
        if args.out is not None:  # before any prediction: a path that cannot take the file is one line now
            check_output_file("out", args.out)
    except (MeasuredError, SpecError) as exc:
        return _fail(str(exc), 2)
    result = predict(runs, profile, calibration=args.calibration)
    frame = result.frame
    if frame.height:
        print(table(frame))
    _report_rows(result.errors)
    if not frame.height:
        return _fail(f"csv = {runs.source!r}: no run could be predicted "
                     f"({len(result.errors)} problem(s) listed above)", 2)
    if args.out is not None:
        try:
            path = write_parquet(result, args.out, source=runs.source)
        except OSError as exc:
            return _fail(f"out = {str(args.out)!r}: cannot write ({exc.strerror or exc})", 2)
        print(f"wrote {frame.height} runs to {path}")
    print(summary(frame, result.profile, result.calibration))
    return 0


if __name__ == "__main__":
    sys.exit(main())
