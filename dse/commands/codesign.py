"""`dse codesign`: choose continuous hardware fields by gradient within bounds and a budget.

    dse codesign model=llama3_8b system=h200 n_gpus=64 strategy=tp1d \
        codesign.fields=[matrix_flops,hbm_bandwidth,nvlink_bandwidth]
    dse codesign model=llama3_8b system=h200 n_gpus=64 codesign.objective=time codesign.budget_usd=2.0e6 \
        codesign.bounds.matrix_flops=[500,2500] codesign.bounds.hbm_bandwidth=[2000,10000]

Maximises throughput per dollar of GPU hardware (codesign.objective=time: minimises the time to
train) over codesign.fields within codesign.bounds (unset: half to twice the system's value) and
codesign.budget_usd (the cluster's GPUs, priced linearly per unit: codesign.prices.FIELD=USD,
codesign.base_usd; the defaults and their source are in dse/decisions/codesign.py). Adam (optax) in ln x (scaled to the bounds),
gradients by jax.jacfwd through the kernels, projected onto the bounds and the budget; the parallel
configuration is searched again every codesign.research_every steps. Prints the path, the final
point and the best point of a dense grid of the same fields (codesign.grid_points per field), which
the gradient's point must match within 1% or beat.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dse.decisions.codesign import PRICES, codesign
from dse.commands.decisions import question, refuse_point, resolved
from dse.commands.sensitivity import _parser
from dse.interface.overrides import reject_retired_flags
from dse.interface.reproduce import eval_command, plan
from dse.interface.table import render, render_frame
from dse.spec.checks import check_output_file


def parser() -> argparse.ArgumentParser:
    p = _parser("dse codesign", __doc__)
    p.add_argument("--path", type=Path, default=None, metavar="OUT",
                   help="write every step of the path (fields, configuration, time, cost, score) as Parquet "
                        "(a missing folder is created)")
    return p


def main(argv=None) -> int:
    argv = list(argv or [])
    reject_retired_flags(argv, ("--path",))
    args = parser().parse_args(argv)
    refuse_point(args.overrides, "dse codesign")
    res = resolved(args.overrides, "codesign")
    c = res.config["codesign"]
    q = question(res)
    if args.path is not None:  # before any compute: a folder that cannot take the file is one line now
        check_output_file("--path", args.path)
    job = res.job
    r = codesign(strategy=job.strategies, fields=c["fields"], bounds=c["bounds"], objective=c["objective"],
                 budget_usd=c["budget_usd"], prices=c["prices"], base_usd=c["base_usd"], steps=c["steps"],
                 learning_rate=c["learning_rate"], research_every=c["research_every"],
                 grid_points=c["grid_points"], compare=c["compare"], **q)
    fields = list(dict.fromkeys(c["fields"]))
    s = q["system"]
    print(f"{job.model.name} on {q['n_gpus']} GPUs of {s.name} (NVS {s.nvs_size}), profile {job.profile_name}, "
          f"strategies {', '.join(job.strategies)}; objective {c['objective']}"
          + (f", budget USD {c['budget_usd']:,.0f}" if c["budget_usd"] is not None else ""))
    prices = {**PRICES, **(c["prices"] or {})}
    print("fields: " + "; ".join(f"{f} from {getattr(s, f):g} at USD {prices.get(f, 0.0):g} per unit" for f in fields)
          + "; GPUs USD: the GPUs' price, base + price per unit x value (codesign.prices; not the economics "
          "preset's ownership cost that dse eval calls the cluster's)")
    print()
    shown = r.path.filter(r.path["research"] | (r.path["step"] == r.path["step"].max()))
    fmt = {f: ".5g" for f in fields}
    fmt.update({"iteration_time": ".5g", "cost_usd": ",.0f", "score": ".5g"})
    score = "samples/s per USD" if c["objective"] == "throughput_per_dollar" else "1/s"
    print(render_frame(shown, ["step", *fields, "strategy", "n1", "n2", "n_p", "n_d", "microbatch", "iteration_time",
                               "cost_usd", "score"], formats=fmt,
                       headers={"iteration_time": "time s", "cost_usd": "GPUs USD", "score": score},
                       title="path (the configuration searched again at each row):"))
    print()
    f = r.final
    rows = [{"point": f"gradient (step {f['step']})", **{k: f[k] for k in fields}, "strategy": f["strategy"],
             "iteration_time": f["iteration_time"], "cost_usd": f["cost_usd"], "score": f["score"]}]
    if r.grid_best is not None:
        g = r.grid_best
        rows.append({"point": f"grid best of {g['points']}", **{k: g[k] for k in fields}, "strategy": g["strategy"],
                     "iteration_time": g["iteration_time"], "cost_usd": g["cost_usd"], "score": g["score"]})
    print(render(rows, ["point", *fields, "strategy", "iteration_time", "cost_usd", "score"], formats=fmt,
                 headers={"iteration_time": "time s", "cost_usd": "GPUs USD", "score": score}))
    cfg = f["configuration"]
    print(f"final configuration: {plan(cfg, f['strategy'])}, "
          f"memory {f['memory']:.4g} GB")
    print("reproduce the final point: " + eval_command(job, {**cfg, **{k: f[k] for k in fields}, "nvs_size": s.nvs_size},
                                                        f["strategy"], tuple(fields)))
    if r.ratio is not None:
        verdict = "better than" if r.ratio >= 1 else ("within 1% of" if r.ratio >= 0.99 else "MORE THAN 1% BELOW")
        print(f"gradient / grid best = {r.ratio:.5f}: {verdict} the grid's best")
    if args.path is not None:
        from dse.results.io import atomic_path

        with atomic_path(args.path) as tmp:
            r.path.write_parquet(tmp)
        print(f"wrote the path ({r.path.height} steps) to {args.path}")
    t = r.seconds
    print(f"time: {t['total_s']:.1f} s (path {t['path_s']:.1f} s: searches {t['research_s']:.1f} s, gradients "
          f"{t['gradient_s']:.1f} s; grid {t['grid_s']:.1f} s)")
    return 0
