"""`dse query DATASET QUESTION`: answer common questions from a Parquet dataset.

    dse query outputs/data/seed001 summary
    dse query outputs/data/seed001 optimum --where model=gpt3_1t --where system=b200 --where nvs_size=8
    dse query outputs/data/seed001 compare --where model=gpt3_1t --where strategy=tp1d --metric throughput
    dse query outputs/data/seed001 nvs --where model=gpt3_1t --where system=b200 --where strategy=tp1d
    dse query outputs/data/seed001 speedup --where model=gpt3_1t --where system=b200
    dse query outputs/data/seed001 pareto --objectives training_days,cost_per_run_usd --where model=gpt3_1t
    dse query outputs/data/seed001 pareto --objectives iteration_time,memory --by n_gpus,system

Every number is printed with its unit: in its column's header (`iteration_time (s)`), or, in
compare's table of one metric, in the title above it.
"""

from __future__ import annotations

import argparse

import polars as pl

from dse.results import io
from dse.results import query, units
from dse.results.pareto import DEFAULT_OBJECTIVES, pareto, parse_objectives
from dse.spec.checks import TP1D_NAMES, did_you_mean
from dse.spec.specs import SpecError
from dse.interface.table import render_frame, with_mechanisms

QUESTIONS = ("summary", "optimum", "compare", "nvs", "speedup", "pareto")
FORMATS = {"iteration_time": ".5g", "throughput": ".5g", "memory": ".4g", "training_days": ".3g",
           "speedup": ".4f", "base": ".5g", "next_placement_loss": ".2%", "cost_per_run_usd": ",.0f",
           "cluster_cost_usd": ",.0f", "energy_per_run_mwh": ".4g", "power_kw": ".4g", "compute_utilisation": ".3f"}


def parse_where(items, schema: dict) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SpecError(f"--where {item!r}: expected COLUMN=VALUE[,VALUE...]")
        k, v = item.split("=", 1)
        if k not in schema:
            raise SpecError(f"--where {k}: not a column of the dataset; {did_you_mean(k, schema)}columns: "
                            f"{', '.join(schema)}")
        vals = [_value(k, x, schema[k]) for x in v.split(",")]
        out[k] = vals[0] if len(vals) == 1 else vals
    return out


#: The words a boolean column's --where value may be (seq_par=on, feasible=yes, ...).
BOOLEANS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


def _value(k: str, x: str, dtype) -> object:
    """One --where value as the column's type; a value the column cannot hold is one line."""
    if isinstance(dtype, pl.Enum):  # recompute, precision: by name
        names = dtype.categories.to_list()
        if x not in names:
            raise SpecError(f"--where {k}={x!r}: not a value of {k}; valid: {', '.join(names)}")
        return x
    if dtype == pl.Boolean:
        if x.lower() not in BOOLEANS:
            raise SpecError(f"--where {k}={x!r}: {k} is true or false (also on/off, yes/no, 1/0)")
        return BOOLEANS[x.lower()]
    try:
        return int(x) if dtype.is_integer() else float(x) if dtype.is_float() else x
    except ValueError:
        raise SpecError(f"--where {k}={x!r}: not a valid {dtype} value") from None


def context_heads(rows: pl.DataFrame) -> dict[str, str]:
    """Headers of n2 and nvs2 where tp1d's rows use context parallelism (n2 is its cp): `cp` and
    `nvs_cp` when every row is tp1d's, as the answers print them; `n2 (tp1d: cp)` beside other
    strategies, whose n2 is a tensor-parallel degree."""
    if "n2" not in rows.columns or "strategy" not in rows.columns:
        return {}
    tp1d = rows["strategy"] == "tp1d"
    if not (tp1d & (rows["n2"] > 1)).any():
        return {}
    if tp1d.all():
        return dict(TP1D_NAMES)
    return {k: f"{k} (tp1d: {v})" for k, v in TP1D_NAMES.items()}


def pareto_rows(lf: pl.LazyFrame, filters: dict, objectives: str, by: str, schema: dict):
    """The feasible rows on the Pareto front of `objectives` (per group of `by`), sorted by the
    first objective, and the columns to print: the group, the configuration, the objectives."""
    numeric = [c for c, t in schema.items() if t.is_numeric()]
    objs = parse_objectives(objectives, numeric)
    groups = [b.strip() for b in by.split(",") if b.strip()]
    for b in groups:
        if b not in schema:
            raise SpecError(f"--by {b}: not a column of the dataset; {did_you_mean(b, schema)}columns: {', '.join(schema)}")
    lf = query.where(lf, **filters).filter(pl.col("feasible"))
    front = pareto(lf, [f"{'max:' if mx else ''}{c}" for c, mx in objs], by=groups)
    first, mx = objs[0]
    front = front.sort(groups + [first], descending=[False] * len(groups) + [mx])
    keys = [c for c in ("model", "system", "strategy", "nvs_size", "n_gpus") if c in front.columns]
    varied = lf.select([pl.col(c).n_unique() for c in keys]).collect().row(0, named=True)
    keys = [c for c in keys if varied[c] > 1 or c in groups]  # what the rows differ in
    names = [c for c, _ in objs]
    cols = groups + [c for c in keys if c not in groups] + [c for c in query.CONFIG if c in front.columns]
    return front, [c for c in dict.fromkeys(cols + names)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dse query", description="answer common questions from a Parquet dataset",
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", help="dataset directory (e.g. outputs/data/seed001)")
    p.add_argument("question", nargs="?", default="summary", choices=QUESTIONS)
    p.add_argument("--where", action="append", metavar="COLUMN=VALUE", help="filter (repeatable; V1,V2 = any of)")
    p.add_argument("--metric", default="training_days",
                   help="compare: the numeric column to tabulate, named with its unit in the title "
                        "(default %(default)s)")
    p.add_argument("--baseline", default="tp1d", help="speedup: the reference strategy")
    p.add_argument("--objectives", default=",".join(DEFAULT_OBJECTIVES),
                   help="pareto: columns to minimise, comma-separated; max:COLUMN maximises "
                        "(default %(default)s)")
    p.add_argument("--by", default="", help="pareto: one front per group of these columns (comma-separated)")
    p.add_argument("--limit", type=int, default=60, help="rows printed at most")
    args = p.parse_args(argv)
    try:
        lf = io.scan(args.dataset)  # every file checked: a bad one is a DatasetError (SpecError), one line
    except FileNotFoundError as err:
        raise SpecError(str(err)) from None
    try:
        out, cols, heads, formats, title = answer(lf, args)
    except pl.exceptions.PolarsError:  # a damaged page that only decoding finds: name its file
        io.diagnose(args.dataset)
        raise
    if out.is_empty():
        print("no rows match")
        return 1
    print(render_frame(out.head(args.limit), cols, formats={**FORMATS, **formats}, headers=heads, title=title))
    if len(out) > args.limit:
        print(f"... {len(out) - args.limit} more rows (--limit)")
    if args.question == "optimum":
        for line in reproduce_lines(args.dataset, out.head(args.limit)):
            print(line)
    return 0


def reproduce_lines(dataset, rows: pl.DataFrame) -> list[str]:
    """`reproduce (row i): dse eval ...` for each optimum row, from its job's file metadata
    (`dse.interface.reproduce.dataset_eval_command`), or why it cannot be written."""
    from pathlib import Path

    from dse.interface.reproduce import dataset_eval_command

    root = Path(dataset)
    files = {p.stem: p for p in ([root] if root.is_file() else root.rglob("*.parquet"))}
    out, metas = [], {}  # each job file's metadata read once
    for i, r in enumerate(rows.iter_rows(named=True), start=1):
        path = files.get(str(r.get("job_id")))
        if path is not None and path not in metas:
            metas[path] = io.read_metadata(path)
        command = dataset_eval_command(metas[path], r) if path is not None else None
        out.append(f"reproduce (row {i}): {command}" if command else
                   f"reproduce (row {i}): its job's file holds no configuration to rebuild it (job {r.get('job_id')})")
    return out


def answer(lf: pl.LazyFrame, args) -> tuple[pl.DataFrame, list[str], dict, dict, str | None]:
    """The rows that answer `args.question` over the dataset `lf`, the columns to print, their
    headers (each number's unit, `dse.results.units.header`), formats and the table's title."""
    schema = dict(lf.collect_schema())
    filters = parse_where(args.where, schema)
    heads, formats, title = {}, {}, None
    if args.question == "summary":
        out = query.summary(query.where(lf, **filters))
        cols = out.columns
        heads = {"rows": "rows", "n_min": "min n_gpus", "n_max": "max n_gpus", "feasible_rows": "feasible rows"}
    elif args.question == "optimum":
        out = query.optimum(lf, **filters).collect()
        swept = tuple(query.varying(lf, query.GROUP))  # every dimension the dataset varies is shown
        cols = [c for c in query.GROUP + swept + query.CONFIG + query.PLACEMENT
                + ("iteration_time", "throughput", "memory", "training_days") if c in out.columns]
        out, cols = with_mechanisms(out, cols)  # recompute, precision, ... where any row uses them
        heads = context_heads(out)
    elif args.question == "compare":
        model, strategy = filters.pop("model", None), filters.pop("strategy", None)
        if model is None or strategy is None:
            raise SpecError("compare: give --where model=... and --where strategy=...")
        numeric = [c for c, t in schema.items() if t.is_numeric()]
        if args.metric not in numeric:
            raise SpecError(f"--metric {args.metric}: not a numeric column of the dataset; "
                              f"{did_you_mean(args.metric, numeric)}valid: {', '.join(numeric)}")
        out = query.compare_systems(lf, model, strategy, metric=args.metric, **filters)
        cols = out.columns
        own = FORMATS.get(args.metric, "")  # USD with thousands separators, shares as %; else 4 digits
        formats = {c: own if own and not own.endswith("g") else ".4g" for c in cols if c != "n_gpus"}
        named = [",".join(map(str, v)) if isinstance(v, list) else str(v) for v in (model, strategy)]
        title = (f"{units.label(args.metric)} of the fastest feasible configuration of {' '.join(named)}, "
                 "per GPU count (rows) and system and NVS size (columns)")
    elif args.question == "nvs":
        out = query.best_nvs(lf, **filters).collect()
        cols = out.columns
        heads = {"next_placement_loss": "next_placement_loss (% of throughput)"}
    elif args.question == "pareto":
        out, cols = pareto_rows(lf, filters, args.objectives, args.by, schema)
        out, cols = with_mechanisms(out, cols)
        heads = context_heads(out)
    else:
        out = query.speedup(lf, baseline=args.baseline, **filters).collect()
        cols = out.columns
        heads = {"base": f"{args.baseline} {units.header('throughput')}", "speedup": f"speedup over {args.baseline}"}
    return out, cols, {c: heads.get(c) or units.header(c) for c in cols}, formats, title
