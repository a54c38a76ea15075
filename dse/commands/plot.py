"""`dse plot DATASET`: draw columns of any study's dataset against each other, as PNG or SVG.

    dse plot outputs/data/default --x n_gpus --y training_days --color system
    dse plot outputs/data/costdemo --kind pareto --x training_days --y cost_per_run_usd --color system
    dse plot outputs/data/seed001 --kind breakdown --facet system --where model=gpt3_1t --where strategy=tp1d
    dse plot outputs/data/default --kind scatter --x memory --y iteration_time --out days.svg

Feasible rows only (--include-infeasible for all). line and bar draw the optimum of each point
(--agg best; or min, max, mean of y); pareto draws the front of --x and --y (both minimised,
max:COLUMN maximises); breakdown stacks the optimum's time (--y iteration_time) or memory
(--y memory) components per --x (default n_gpus). The title names the study and the values it
sweeps. --out defaults to outputs/figures/<study>_<kind>_<y>_vs_<x>.png (git-ignored); the
format follows --format, else the extension of --out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from dse.results import io
from dse.commands.query import parse_where
from dse.figures.study import AGGS, FORMATS, KINDS, plot
from dse.results.query import where as where_rows
from dse.spec.specs import SpecError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dse plot", description=__doc__.splitlines()[0].split(": ", 1)[1],
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", help="dataset directory (e.g. outputs/data/default)")
    p.add_argument("--x", default=None, help="column on the x axis (breakdown: default n_gpus)")
    p.add_argument("--y", default=None, help="column on the y axis (pareto: max:COLUMN maximises)")
    p.add_argument("--color", default=None, help="one series per value of this column")
    p.add_argument("--facet", default=None, help="one panel per value of this column")
    p.add_argument("--kind", default="line", help=f"{', '.join(KINDS)} (default line)")
    p.add_argument("--where", action="append", metavar="COLUMN=VALUE", help="filter (repeatable; V1,V2 = any of)")
    p.add_argument("--agg", default="best", help=f"line and bar: {', '.join(AGGS)} (default best: the optimum's y)")
    p.add_argument("--out", default=None, help="file to write (default outputs/figures/...)")
    p.add_argument("--format", default=None, help=f"{', '.join(FORMATS)} (default: from --out, else png)")
    p.add_argument("--include-infeasible", action="store_true", help="also draw rows that exceed the HBM")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        lf = io.scan(args.dataset)
        schema = dict(lf.collect_schema())
    except FileNotFoundError as err:
        raise SpecError(str(err)) from None
    except pl.exceptions.PolarsError as err:
        raise SpecError(f"dataset {args.dataset!r}: not readable as a dse dataset ({str(err).splitlines()[0]})") from None
    filters = parse_where(args.where, schema)
    study = Path(args.dataset).resolve().name
    path = plot(where_rows(lf, **filters), x=args.x, y=args.y, color=args.color, facet=args.facet, kind=args.kind,
                out=args.out, study=study, filters=filters, agg=args.agg, fmt=args.format,
                include_infeasible=args.include_infeasible)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB) from {args.dataset}")
    return 0
