"""`dse calibrate`: fit the default profile's efficiencies to measured runs, with optax.

    dse calibrate [--csv PATH|NAME ...] [--name NAME] [--steps N] [--ridge W] [--pair-ridge F] [--write | --out FILE.yaml]
    dse calibrate --show NAME|FILE.yaml

Fits compute_eff (achieved fraction of the tensor-core peak of large matmuls), matmul_knee (the
GEMM dimension at which a matmul reaches half of it), hbm_eff (achieved fraction of HBM bandwidth),
fp8_eff and fp4_eff (FP8's and NVFP4's matmul efficiency relative to BF16's) on dense runs, and
host_moe_time (the host's time to issue a dropless MoE block) on mixture-of-experts runs, which move
nothing else, to measured runs (default: the packaged
Korthikanti et al. 2022 Table 5; `--csv corpus`: every packaged training set) by jax.grad through
the search kernels: pooled values plus an effect of each GPU generation and framework the runs
cover, the effects held toward the pooled values by a ridge of weight --ridge (a pair's, --pair-ridge
times heavier). Then refits once
per source without that source's runs, and once per model without that model's, and predicts them: the leave-one-source-out errors of each generation, precision and
framework are the error bands answers carry. Prints every run with its in-sample and held-out
errors, the groups, the bands and the summary (each kind by generation and by framework too). A run
whose `doubt` column is filled (its source states a doubt about its configuration) is predicted and
printed but neither fitted nor counted: the summary gives its errors on a line of their own. --write stores the calibration as
conf/calibration/NAME.yaml (default NAME: korthikanti2022); --out stores it in a file of your own,
which profile.calibration=FILE.yaml then applies. Exit status 2 on unusable input.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import math

from dse.truth.calibrate import FIELDS, PAIR_RIDGE, RIDGE, by_axis, calibrate, check_runs, write_calibration
from dse.truth import calibration as calibrations
from dse.truth.calibration import load_calibration
from dse.truth.runs import CORPUS, PACKAGED_CSV, MeasuredError, packaged_sets, read_runs, resolve_many
from dse.spec.checks import check_output_file
from dse.spec.specs import SpecError, check_int
from dse.interface.table import render

PROG = "dse calibrate"


#: The name of the calibration of the default runs (Korthikanti et al. 2022 Table 5), shipped.
DEFAULT_NAME = "korthikanti2022"


def default_name(csvs: list[str] | None) -> str:
    """--name when none is given: the shipped name for the default runs; else the first CSV's stem
    as an identifier (a user's runs never take a shipped calibration's name unasked)."""
    if not csvs:
        return DEFAULT_NAME
    stem = re.sub(r"\W", "_", Path(csvs[0]).stem) or "calibration"
    return stem if stem[0].isalpha() else f"c_{stem}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0].split(": ", 1)[1],
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", action="append", default=None, metavar="PATH|NAME",
                   help=f"measured runs: a CSV or a packaged set ({', '.join(packaged_sets())}), or 'corpus' "
                        f"({', '.join(CORPUS)}); repeat to fit several together (default: {PACKAGED_CSV.stem})")
    p.add_argument("--name", default=None,
                   help=f"calibration name (default: {DEFAULT_NAME} for the default runs, else the first CSV's name)")
    p.add_argument("--steps", type=int, default=400, help="Adam steps per fit (default: %(default)s)")
    p.add_argument("--fold-steps", type=int, default=None, metavar="N",
                   help="Adam steps of each held-out fit, from the fit on every run (default: --steps)")
    p.add_argument("--ridge", type=float, default=RIDGE, metavar="W",
                   help="weight of the ridge on the generation and framework effects, >= 0 "
                        "(default: %(default)g, the corpus's best held-out error; larger pulls groups with few "
                        "runs toward the pooled values)")
    p.add_argument("--pair-ridge", type=float, default=PAIR_RIDGE, metavar="F",
                   help="the ridge on the effect of each generation and framework measured together, as a "
                        "multiple of --ridge, >= 0 (default: %(default)g, the corpus's best held-out error; "
                        "larger predicts a pair from its generation's and framework's effects)")
    p.add_argument("--write", action="store_true", help="write conf/calibration/NAME.yaml")
    p.add_argument("--out", type=Path, default=None, metavar="FILE.yaml",
                   help="write the calibration to this file instead (choose it with profile.calibration=FILE.yaml)")
    p.add_argument("--show", default=None, metavar="NAME|FILE.yaml",
                   help="print a calibration's values, groups and error bands, and fit nothing")
    return p


def show(cal) -> None:
    """A calibration's values, its groups and its error bands."""
    doubtful = (cal.provenance.get("doubtful") or {}).get("runs")
    print(f"calibration {cal.name}: {cal.provenance.get('runs', '?')} measured runs "
          + (f"(and {doubtful} with a stated doubt, not fitted) " if doubtful else "")
          + f"({cal.provenance.get('command', '?')}, {cal.provenance.get('date', '?')})")
    print("pooled: " + ", ".join(f"{k} = {v:.4g}" for k, v in cal.values.items()))
    print("errors: " + "; ".join(f"{what} mean |error| {100 * e['mean']:.1f}%, max {100 * e['max']:.1f}%"
                                 for what, e in (("in-sample", cal.in_sample),
                                                 ("leave-one-source-out", cal.leave_one_source_out),
                                                 ("leave-one-model-out", cal.leave_one_model_out)) if e))
    if cal.groups:
        print(render([{"group": g, **v} for g, v in cal.groups.items()],
                     formats={k: ".4g" for k in FIELDS}))
    if cal.bands:
        print(render([{"generation/precision/framework": k, "runs": b["runs"], "sources": b["sources"],
                       "mean": 100 * b["mean"], "max": 100 * b["max"]} for k, b in cal.bands.items()],
                     formats={"mean": ".1f", "max": ".1f"},
                     headers={"mean": "held-out mean |error| %", "max": "max %"}))


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.show is not None:
            cal = load_calibration(args.show)
            if cal is None:
                print(f"{PROG}: calibration {args.show!r}: none (the system's own efficiencies)")
                return 0
            show(cal)
            return 0
        if args.write and args.out is not None:
            raise SpecError("--write and --out: give one (--write: conf/calibration/NAME.yaml; --out: a file of "
                            "your own)")
        args.name = default_name(args.csv) if args.name is None else args.name
        if not args.name.isidentifier():
            raise SpecError(f"--name = {args.name!r}: must be an identifier (letters, digits, _)")
        steps = check_int("--steps", args.steps)
        fold_steps = steps if args.fold_steps is None else check_int("--fold-steps", args.fold_steps)
        if not (math.isfinite(args.ridge) and args.ridge >= 0.0):
            raise SpecError(f"--ridge = {args.ridge!r}: must be a finite number >= 0")
        if not (math.isfinite(args.pair_ridge) and args.pair_ridge >= 0.0):
            raise SpecError(f"--pair-ridge = {args.pair_ridge!r}: must be a finite number >= 0")
        paths = [p for c in (args.csv or [None]) for p in resolve_many(c)]
        # where the calibration goes, checked before any fit: --out's folder, or conf/calibration/
        out = check_output_file("--out", args.out, create=False) if args.out is not None else None
        if out is not None and args.out.suffix not in (".yaml", ".yml"):
            raise SpecError(f"--out = {str(args.out)!r}: must end in .yaml (profile.calibration= reads a FILE.yaml)")
        if args.write and out is None:
            check_output_file("--write", calibrations.CALIBRATION_DIR / f"{args.name}.yaml")
        runs = read_runs(paths if len(paths) > 1 else paths[0])
        for err in runs.errors:
            print(f"{PROG}: skipped {err}", file=sys.stderr)
        check_runs(runs)  # enough models and runs to estimate every fit and its held-out error
    except (SpecError, MeasuredError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    command = ("dse calibrate" + "".join(f" --csv {c}" for c in (args.csv or [])) + f" --steps {steps}"
               + (f" --fold-steps {fold_steps}" if fold_steps != steps else "")
               + (f" --ridge {args.ridge:g}" if args.ridge != RIDGE else "")
               + (f" --pair-ridge {args.pair_ridge:g}" if args.pair_ridge != PAIR_RIDGE else "")
               + (f" --name {args.name}" if args.name != default_name(args.csv) else ""))
    try:
        res = calibrate(runs, name=args.name, steps=steps, command=command, fold_steps=fold_steps, ridge=args.ridge,
                        pair_ridge=args.pair_ridge)
    except SpecError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    cal = res.calibration
    several = len(set(res.sources)) > 1  # one source: nothing to hold out by source, no such column
    rows = [{"model": m, "source": src, "group": key, "measured": t, "fitted": f, "error": 100 * (f / t - 1),
             **({"source_out": hs, "source_out_error": 100 * (hs / t - 1)} if several else {}),
             "model_out_error": 100 * (h / t - 1),
             **({"doubt": "yes" if d else ""} if res.doubt.any() else {})}
            for m, src, key, t, f, hs, h, d in zip(res.labels, res.sources, res.keys, res.measured, res.fitted,
                                                   res.held_out_source, res.held_out, res.doubt)]
    print(render(rows, formats={"measured": ".2f", "fitted": ".2f", "error": "+.1f", "source_out": ".2f",
                                "source_out_error": "+.1f", "model_out_error": "+.1f"},
                 headers={"measured": "measured s", "fitted": "in-sample s", "error": "error %",
                          "source_out": "source held out s", "source_out_error": "error %",
                          "model_out_error": "model held out error %", "doubt": "doubt (not fitted)"}))
    show(cal)
    bad = [k for k, v in {**cal.in_sample, **cal.leave_one_model_out}.items() if not math.isfinite(v)]
    if bad:
        print(f"{PROG}: error: the fit's {bad[0]} error is not a finite number; nothing written", file=sys.stderr)
        return 2
    if args.write or out is not None:
        print(f"wrote {write_calibration(cal, out)}")
    loso = cal.leave_one_source_out
    print(f"{cal.provenance['runs']} runs: in-sample mean |error| {100 * cal.in_sample['mean']:.1f}%, "
          f"max {100 * cal.in_sample['max']:.1f}%; "
          + (f"leave-one-source-out ({len(cal.provenance['sources'])} sources) mean |error| {100 * loso['mean']:.1f}%, "
             f"max {100 * loso['max']:.1f}%; " if loso else "")
          + f"leave-one-model-out mean |error| {100 * cal.leave_one_model_out['mean']:.1f}%, "
            f"max {100 * cal.leave_one_model_out['max']:.1f}%")
    if "doubtful" in cal.provenance:  # runs whose source states a doubt: neither fitted nor counted above
        d = cal.provenance["doubtful"]
        print(f"  and {d['runs']} run{'s' * (d['runs'] != 1)} with a stated doubt (column doubt), not fitted nor "
              f"counted above: predicted by the fit {100 * d['predicted']['mean']:.1f}% / "
              f"{100 * d['predicted']['max']:.1f}%, leave-one-source-out "
              f"{100 * d['leave_one_source_out']['mean']:.1f}% / {100 * d['leave_one_source_out']['max']:.1f}% (mean / max)")
    for name, e in (cal.provenance.get("by_kind") or {}).items():  # dense and MoE runs apart
        print(f"  {name} {e['runs']} runs: in-sample {100 * e['in_sample']['mean']:.1f}% / "
              f"{100 * e['in_sample']['max']:.1f}%, leave-one-source-out {100 * e['leave_one_source_out']['mean']:.1f}% / "
              f"{100 * e['leave_one_source_out']['max']:.1f}%, leave-one-model-out "
              f"{100 * e['leave_one_model_out']['mean']:.1f}% / {100 * e['leave_one_model_out']['max']:.1f}% (mean / max)")
    if loso:  # each kind's runs by generation and by framework, held out by source
        def one(g, e):
            return f"{g} {100 * e['mean']:.1f}% / {100 * e['max']:.1f}% ({e['runs']} run{'s' * (e['runs'] != 1)})"

        ok = ~res.doubt
        for name, axes in by_axis([k for k, o in zip(res.keys, ok) if o], res.held_out_source[ok],
                                  res.measured[ok]).items():
            print(f"  {name} leave-one-source-out by " + "; by ".join(
                f"{axis}: " + ", ".join(one(g, e) for g, e in groups.items()) for axis, groups in axes.items()))
    return 0
