"""`dse search`: the fastest configurations for a model, system(s), NVS size(s) and GPU count(s).

    dse search --model gpt3_1t --system b200 --nvs-size 8 --strategy tp1d --n-gpus 4096
    dse search --model vit_era5 --strategy all --n-gpus pow2:1024:16384 --top-k 3
    dse search --system b200 --grid hbm_capacity=96,192,384 --grid hbm_bandwidth=4000,8000 --top-k 1
"""

from __future__ import annotations

import argparse
import sys

import polars as pl

from dse.search import run_search
from dse.specs import SpecError, model_presets, system_presets
from dse.table import render_frame, with_mechanisms
from kernels.params import PROFILES, STRATEGIES

SHOW = ["n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p", "nvs_d", "n_b",
        "iteration_time", "throughput", "memory", "training_days"]


def parse_grid(items: list[str]) -> dict[str, list[float]]:
    grid = {}
    for item in items or []:
        if "=" not in item:
            raise SpecError(f"--grid {item!r}: expected FIELD=V1,V2,...")
        k, v = item.split("=", 1)
        try:
            grid[k.strip()] = [float(x) for x in v.split(",") if x.strip()]
        except ValueError:
            raise SpecError(f"--grid {item!r}: values must be numbers") from None
    return grid


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dse search", description="search the design space; print the fastest configurations",
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt3_1t", help=f"preset ({', '.join(model_presets())})")
    p.add_argument("--system", default="b200", help=f"preset or comma list ({', '.join(system_presets())})")
    p.add_argument("--nvs-size", default=None, help="GPUs per NVS domain, or a comma list (default: the system's)")
    p.add_argument("--strategy", default="tp1d", help=f"one of {', '.join(STRATEGIES)}, a comma list, or 'all'")
    p.add_argument("--n-gpus", default="4096", help="4096 | 4,8,16 | pow2:4:16384 | range:LOW:HIGH[:STEP]")
    p.add_argument("--profile", default="default", choices=sorted(PROFILES))
    p.add_argument("--global-batch", type=int, default=4096)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--grid", action="append", metavar="FIELD=V1,V2", help="hardware axis (repeatable)")
    p.add_argument("--network", default="two_tier", help="conf/network preset (two_tier, rail_optimized, rail_only, any_to_any)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: when stderr is a terminal)")
    return p


def strategies(arg: str) -> list[str]:
    if arg == "all":
        return list(STRATEGIES)
    out = [s.strip() for s in arg.split(",") if s.strip()]
    for s in out:
        if s not in STRATEGIES:
            raise SpecError(f"strategy = {s!r}: must be one of {', '.join(STRATEGIES)} or 'all'")
    return out


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    systems = [s.strip() for s in args.system.split(",")]
    grid = parse_grid(args.grid)
    for strategy in strategies(args.strategy):
        res = run_search(model=args.model, system=systems, strategy=strategy, n_gpus=args.n_gpus,
                         nvs_size=args.nvs_size, profile=args.profile, global_batch=args.global_batch,
                         top_k=args.top_k, grid=grid, network=args.network,
                         progress=sys.stderr.isatty() if args.progress is None else args.progress)
        st = res.stats
        print(f"{args.model} {strategy} ({args.profile}): {int(st['evaluations']):,} evaluations in "
              f"{st['wall_s']:.2f} s (compile {st['compile_s']:.2f} s)")
        keys = ["system"] + list(grid) + ["nvs_size", "n_gpus"]
        counts = res.counts
        for group in counts.select(keys).unique(maintain_order=True).iter_rows(named=True):
            sel = pl.all_horizontal([pl.col(k) == v for k, v in group.items()])
            top = res.top.filter(sel)
            c = counts.filter(sel).row(0, named=True)
            label = ", ".join(f"{k}={v}" for k, v in group.items())
            head = f"{label}: {c['candidates']:,} candidates, {c['feasible']:,} fit"
            if top.is_empty():
                print(head + "; nothing fits in HBM\n")
                continue
            cols = ["rank"] + [k for k in SHOW if k != "n_b" or strategy == "summa"]
            if strategy == "tp1d":
                cols = [k for k in cols if k not in ("n2", "nvs2")]
            top, cols = with_mechanisms(top, cols)
            print(render_frame(top, cols, formats={"iteration_time": ".5g", "throughput": ".5g",
                                                   "memory": ".4g", "training_days": ".3g"}, title=head))
            print()
    return 0
