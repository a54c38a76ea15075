"""`dse study`: the whole seed-001 study in one command, with its wall time.

3 strategies x 2 models (GPT3-1T, ViT-ERA5) x 3 GPUs (A100, H200, B200) x NVS {4, 8, 64} x
n = 4 ... 16384 (powers of two): 9.18 million candidate evaluations under profile lbnl. The three
GPUs are the hardware axis of each kernel call; NVS sizes and GPU counts share one candidate stream.
Prints the optimum at each GPU count and the time taken (compilation included).

    dse study [profile=lbnl] [n_gpus=pow2:4:16384] [search.top_k=10] [--quiet]

The study is `sweep=seed001` of the config tree (profile lbnl, n = 4 ... 16384); overrides change
its profile, GPU counts, global batch and top-k. Its models, systems and NVS sizes are fixed (other
studies: `dse -m`).
"""

from __future__ import annotations

import argparse
import time

import polars as pl

from dse.interface.overrides import parse, reject_retired_flags, resolve
from dse.explore.search import run_search
from dse.spec.specs import SpecError
from dse.interface.table import render
from kernels.params import STRATEGIES

MODELS = ("gpt3_1t", "vit_era5")
SYSTEMS = ("a100", "h200", "b200")
NVS = (4, 8, 64)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dse study", description=__doc__.splitlines()[0].split(": ", 1)[1],
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="profile=, profile.FIELD=, n_gpus=, global_batch=, search.top_k=")
    p.add_argument("--quiet", action="store_true", help="print only the timing summary")
    return p


#: What the seed-001 study fixes (the config keys an override may not change here).
FIXED = ("model", "system", "strategy", "network", "sweep")


def run(profile="lbnl", n_gpus="pow2:4:16384", top_k: int = 10, progress: bool = False, global_batch: int = 4096):
    """Run the study; returns (top frame of every group, counts frame, per-search stats)."""
    tops, counts, stats = [], [], []
    for model in MODELS:
        for strategy in STRATEGIES:
            res = run_search(model=model, system=list(SYSTEMS), strategy=strategy, n_gpus=n_gpus,
                             nvs_size=list(NVS), profile=profile, top_k=top_k, progress=progress,
                             global_batch=global_batch)
            tops.append(res.top)
            counts.append(res.counts.with_columns(pl.lit(model).alias("model"), pl.lit(strategy).alias("strategy")))
            stats.append({"model": model, "strategy": strategy, **res.stats})
    return pl.concat(tops), pl.concat(counts), stats


def main(argv=None) -> int:
    argv = list(argv or [])
    reject_retired_flags(argv)
    args = parser().parse_intermixed_args(argv)
    job = resolve(args.overrides, ["sweep=seed001"]).job  # every key checked first
    for o in parse(args.overrides):
        if o.key_or_group.split(".")[0].split("/")[0] in FIXED:
            raise SpecError(f"{o.key_or_group}: fixed by the seed-001 study (models {', '.join(MODELS)}; systems "
                            f"{', '.join(SYSTEMS)}; NVS {', '.join(map(str, NVS))}); other studies: dse -m")
    t0 = time.perf_counter()
    top, counts, stats = run(job.profile, job.n_gpus, job.top_k, global_batch=job.global_batch)
    wall = time.perf_counter() - t0
    if not args.quiet:
        best = top.filter(pl.col("rank") == 1).sort(["model", "strategy", "system", "nvs_size", "n_gpus"])
        rows = []
        for (model, strategy, system, nvs), g in best.group_by(["model", "strategy", "system", "nvs_size"], maintain_order=True):
            r = g.sort("training_days").row(0, named=True)
            rows.append({"model": model, "strategy": strategy, "system": system, "nvs": nvs,
                         "feasible from n": g["n_gpus"].min(), "fastest at n": r["n_gpus"],
                         "days": r["training_days"], "n1": r["n1"], "n2": r["n2"], "n_p": r["n_p"],
                         "n_d": r["n_d"], "mb": r["microbatch"]})
        print(render(rows, formats={"days": ".3g"}, title="optimum per model, strategy, system and NVS size:"))
        print()
    total = sum(s["evaluations"] for s in stats)
    compile_s = sum(s["compile_s"] for s in stats)
    times = ["compile_s", "eval_s", "head_s", "stream_s", "tail_s", "wall_s"]  # `run_search`'s stats
    print(render(stats, ["model", "strategy", "evaluations", *times],
                 formats={"evaluations": ",.0f", **dict.fromkeys(times, ".3f")}))
    print(f"\nseed-001 study ({job.profile_name}): {total:,.0f} candidate evaluations, "
          f"{counts['feasible'].sum():,} feasible, in {wall:.1f} s wall "
          f"({compile_s:.1f} s of it compiling; {total / wall / 1e6:.2f} M evaluations/s end to end)")
    return 0
