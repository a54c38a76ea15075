"""`dse query DATASET QUESTION`: answer common questions from a Parquet dataset.

    dse query outputs/data/seed001 summary
    dse query outputs/data/seed001 optimum --where model=gpt3_1t --where system=b200 --where nvs_size=8
    dse query outputs/data/seed001 compare --where model=gpt3_1t --where strategy=tp1d
    dse query outputs/data/seed001 nvs --where model=gpt3_1t --where system=b200 --where strategy=tp1d
    dse query outputs/data/seed001 speedup --where model=gpt3_1t --where system=b200
"""

from __future__ import annotations

import argparse

import polars as pl

from dse import io, query
from dse.specs import SpecError
from dse.table import render_frame

QUESTIONS = ("summary", "optimum", "compare", "nvs", "speedup")
FORMATS = {"iteration_time": ".5g", "throughput": ".5g", "memory": ".4g", "training_days": ".3g",
           "speedup": ".4f", "base": ".5g", "next_placement_loss": ".2%"}


def parse_where(items, schema: dict) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SpecError(f"--where {item!r}: expected COLUMN=VALUE[,VALUE...]")
        k, v = item.split("=", 1)
        if k not in schema:
            raise SpecError(f"--where {k}: not a column of the dataset; columns: {', '.join(schema)}")
        dtype = schema[k]
        vals = []
        for x in v.split(","):
            try:
                vals.append(int(x) if dtype.is_integer() else float(x) if dtype.is_float() else
                            (x.lower() in ("1", "true", "yes")) if dtype == pl.Boolean else x)
            except ValueError:
                raise SpecError(f"--where {k}={x!r}: not a valid {dtype} value") from None
        out[k] = vals[0] if len(vals) == 1 else vals
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dse query", description="answer common questions from a Parquet dataset",
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", help="dataset directory (e.g. outputs/data/seed001)")
    p.add_argument("question", nargs="?", default="summary", choices=QUESTIONS)
    p.add_argument("--where", action="append", metavar="COLUMN=VALUE", help="filter (repeatable; V1,V2 = any of)")
    p.add_argument("--metric", default="training_days", help="compare: the column to tabulate")
    p.add_argument("--baseline", default="tp1d", help="speedup: the reference strategy")
    p.add_argument("--limit", type=int, default=60, help="rows printed at most")
    args = p.parse_args(argv)
    try:
        lf = io.scan(args.dataset)
    except FileNotFoundError as err:
        raise SpecError(str(err)) from None
    schema = dict(lf.collect_schema())
    filters = parse_where(args.where, schema)
    if args.question == "summary":
        out = query.summary(query.where(lf, **filters))
        cols = out.columns
    elif args.question == "optimum":
        out = query.optimum(lf, **filters).collect()
        swept = tuple(query.varying(lf, query.GROUP))  # every dimension the dataset varies is shown
        cols = [c for c in query.GROUP + swept + query.CONFIG + query.PLACEMENT
                + ("iteration_time", "throughput", "memory", "training_days") if c in out.columns]
    elif args.question == "compare":
        model, strategy = filters.pop("model", None), filters.pop("strategy", None)
        if model is None or strategy is None:
            raise SpecError("compare: give --where model=... and --where strategy=...")
        if args.metric not in schema:
            raise SpecError(f"--metric {args.metric}: not a column of the dataset")
        out = query.compare_systems(lf, model, strategy, metric=args.metric, **filters)
        cols = out.columns
        FORMATS.update({c: ".4g" for c in cols if c != "n_gpus"})
    elif args.question == "nvs":
        out = query.best_nvs(lf, **filters).collect()
        cols = out.columns
    else:
        out = query.speedup(lf, baseline=args.baseline, **filters).collect()
        cols = out.columns
    if out.is_empty():
        print("no rows match")
        return 1
    print(render_frame(out.head(args.limit), cols, formats=FORMATS))
    if len(out) > args.limit:
        print(f"... {len(out) - args.limit} more rows (--limit)")
    return 0
