"""`dse calibrate`: fit the default profile's efficiencies to measured runs, with optax.

    dse calibrate [--csv PATH] [--name NAME] [--steps N] [--write]

Fits compute_eff (achieved fraction of the tensor-core peak of large matmuls), matmul_knee (the
GEMM dimension at which a matmul reaches half of it) and hbm_eff (achieved fraction of HBM bandwidth)
to the measured runs (default: the packaged Korthikanti et al. 2022 Table 5) by jax.grad through the
search kernels, then refits once per model without that model's runs and predicts them: the
leave-one-model-out errors are the calibration's quality. Prints the fitted values, every run with
its in-sample and held-out error, and the summary. --write stores the calibration as
conf/calibration/NAME.yaml (default NAME: korthikanti2022, the one the default profile loads).
Exit status 2 on unusable input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dse.truth.calibrate import FIELDS, calibrate, write_calibration
from dse.truth.measured import PACKAGED_CSV, read_runs
from dse.spec.specs import SpecError, check_int
from dse.interface.table import render

PROG = "dse calibrate"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0].split(": ", 1)[1],
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", type=Path, default=None, metavar="PATH",
                   help=f"measured runs (default: the packaged {PACKAGED_CSV.name})")
    p.add_argument("--name", default="korthikanti2022", help="calibration name (default: %(default)s)")
    p.add_argument("--steps", type=int, default=400, help="Adam steps per fit (default: %(default)s)")
    p.add_argument("--write", action="store_true", help="write conf/calibration/NAME.yaml")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if not args.name.isidentifier():
        raise SpecError(f"--name = {args.name!r}: must be an identifier (letters, digits, _)")
    steps = check_int("--steps", args.steps)
    runs = read_runs(args.csv)
    for err in runs.errors:
        print(f"{PROG}: skipped {err}", file=sys.stderr)
    command = "dse calibrate" + (f" --csv {args.csv}" if args.csv else "") + f" --steps {steps}"
    res = calibrate(runs, name=args.name, steps=steps, command=command)
    cal = res.calibration
    print("fitted (all runs): " + ", ".join(f"{k} = {cal.values[k]:.4g}" for k in FIELDS))
    rows = [{"model": m, "measured": t, "fitted": f, "error": 100 * (f / t - 1),
             "held_out": h, "held_out_error": 100 * (h / t - 1)}
            for m, t, f, h in zip(res.labels, res.measured, res.fitted, res.held_out)]
    print(render(rows, formats={"measured": ".2f", "fitted": ".2f", "error": "+.1f", "held_out": ".2f",
                                "held_out_error": "+.1f"},
                 headers={"measured": "measured s", "fitted": "in-sample s", "error": "error %",
                          "held_out": "held-out s", "held_out_error": "held-out error %"}))
    for label, v in res.folds.items():
        print(f"  without {label}: " + ", ".join(f"{k} = {v[k]:.4g}" for k in FIELDS))
    if args.write:
        print(f"wrote {write_calibration(cal)}")
    print(f"{len(res.measured)} runs: in-sample mean |error| {100 * cal.in_sample['mean']:.1f}%, "
          f"max {100 * cal.in_sample['max']:.1f}%; leave-one-model-out mean |error| "
          f"{100 * cal.leave_one_model_out['mean']:.1f}%, max {100 * cal.leave_one_model_out['max']:.1f}%")
    return 0
