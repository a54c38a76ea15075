"""`dse validate lbnl`: the lbnl profile against every stored seed-001 result.

For each stored file (strategy x model x NVS size on B200): (1) every stored configuration is
evaluated and each metric compared (throughput, iteration time, memory, every time and memory
component, the six fractions); (2) the search is rerun at every GPU count and its top-10 compared
with the stored list (same configurations and NVS assignments, in the same order). Prints the worst
relative error of each file and exits non-zero if any exceeds the tolerance or any list differs.
"""

from __future__ import annotations

import argparse
import time

import polars as pl

from dse.truth import reference as ref
from dse.api import evaluate_many
from dse.explore.search import run_search
from dse.explore.space import COLUMNS
from dse.interface.table import render


def check_metrics(r: ref.ReferenceFile) -> float:
    if not r.entries:
        return 0.0
    out = evaluate_many(ref.table_of(r), model=r.model, system=r.system, nvs_size=r.nvs, strategy=r.strategy,
                        profile="lbnl", global_batch=r.global_batch)
    worst = 0.0
    for i, e in enumerate(r.entries):
        row = out.row(i, named=True)
        for k, v in e["expected"].items():
            ours = row[ref.FRACTIONS[k]] / row["iteration_time"] if k in ref.FRACTIONS else row[k]
            worst = max(worst, ref.relative_error(ours, v))
    return worst


def check_search(r: ref.ReferenceFile, top_k: int = 10) -> tuple[int, int, float]:
    """(lists identical, lists compared, worst throughput error) over every GPU count."""
    res = run_search(model=r.model, system=r.system, nvs_size=r.nvs, strategy=r.strategy, n_gpus=r.n_gpus,
                     profile="lbnl", global_batch=r.global_batch, top_k=top_k)
    same, worst = 0, 0.0
    for n in r.n_gpus:
        exp = [e for e in r.entries if e["n_gpus"] == n]
        got = res.top.filter(pl.col("n_gpus") == n).sort("rank")
        ok = len(exp) == len(got) and all(
            all(g[c] == e[c] for c in COLUMNS) for g, e in zip(got.iter_rows(named=True), exp))
        same += ok
        for g, e in zip(got.iter_rows(named=True), exp):
            worst = max(worst, ref.relative_error(g["throughput"], e["expected"]["throughput"]))
    return same, len(r.n_gpus), worst


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dse validate lbnl", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("--reference", default=None, help="directory of the stored JSON files")
    p.add_argument("--tolerance", type=float, default=1e-9)
    args = p.parse_args(argv)
    files = ref.load_all(args.reference)
    if not files:
        print(f"no reference files found in {args.reference or ref.default_dir()}")
        return 1
    t0 = time.perf_counter()
    rows, bad = [], 0
    for r in files:
        m_err = check_metrics(r)
        same, total, s_err = check_search(r)
        bad += (m_err > args.tolerance) + (s_err > args.tolerance) + (same != total)
        rows.append({"file": r.name, "configs": len(r.entries), "worst metric rel err": m_err,
                     "top-10 lists identical": f"{same}/{total}", "worst throughput rel err": s_err})
    print(render(rows, formats={"worst metric rel err": ".2e", "worst throughput rel err": ".2e"}))
    n_cfg = sum(len(r.entries) for r in files)
    worst = max(max(r["worst metric rel err"], r["worst throughput rel err"]) for r in rows)
    lists = sum(int(r["top-10 lists identical"].split("/")[0]) for r in rows)
    total = sum(int(r["top-10 lists identical"].split("/")[1]) for r in rows)
    print(f"\n{len(files)} files, {n_cfg} stored configurations, {lists}/{total} top-10 lists identical, "
          f"worst relative error {worst:.2e} (tolerance {args.tolerance:g}); {time.perf_counter() - t0:.1f} s")
    return 1 if bad else 0
