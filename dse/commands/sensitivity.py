"""`dse sensitivity`: which hardware field matters most, at one configuration.

    dse sensitivity model=llama3_8b system=h200 n_gpus=64
    dse sensitivity model=gpt3_175b system=b200 n_gpus=1024 strategy=tp1d sensitivity.fields=[hbm_bandwidth,matrix_flops]
    dse sensitivity system=b200 system.nvs_size=8 strategy=tp1d n1=8 n_p=8 n_d=64 nvs1=8 nvs_p=1 nvs_d=1

For every continuous hardware field x of the system, the elasticity of the iteration time T,
e = d ln T / d ln x, by jax.jacfwd through the search's kernels (all fields in one pass), ranked,
and in words: the change of T when x grows by 10%, from the kernels re-evaluated at 1.1 x (the
power law (1.1^e - 1) beside it). Training days scale with T, so their elasticities are the same.
HBM capacity changes no time: it is reported as a constraint with the memory headroom. The
configuration is the search's optimum for the question (strategy=, n_gpus=) unless its keys are
given (n1=, n_p=, ... as for dse eval, with one strategy). Prints the time of the gradient, warm.
"""

from __future__ import annotations

import argparse
import time

from dse.commands.decisions import describe_point, point_of, resolved, reproduce_line
from dse.interface.overrides import reject_retired_flags
from dse.decisions.sensitivity import analyse, check_fields, cost_objective, ranked, sentence
from dse.interface.table import render_frame


def parser() -> argparse.ArgumentParser:
    return _parser("dse sensitivity", __doc__)


def _parser(prog, doc) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0].split(": ", 1)[1],
                                epilog=doc.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides, as for dse and dse eval (model=, system=, strategy=, n_gpus=, n1=, ...)")
    return p


def main(argv=None) -> int:
    argv = list(argv or [])
    reject_retired_flags(argv)
    args = parser().parse_args(argv)
    res = resolved(args.overrides, "sensitivity")
    fields = check_fields(res.config["sensitivity"]["fields"], "sensitivity.fields")  # before any compute
    t0 = time.perf_counter()
    p = point_of(args.overrides, res)
    t_point = time.perf_counter() - t0
    cost = cost_objective(p, res.job.economics)  # None: no prices for this system
    first = analyse(p, fields, cost, "cost")  # compiles the gradient once per process (JAX's cache keeps it)
    warm = analyse(p, fields, cost, "cost")
    frame = ranked(warm.frame)
    s = p.system
    print(f"{p.model.name} on {s.name} (NVS {s.nvs_size}), profile {res.job.profile_name}, "
          f"network {p.network.name}, global batch {p.global_batch}")
    how = "the search's optimum" if p.searched else "the configuration given"
    print(f"at {how}: {describe_point(p)}")
    print(reproduce_line(res, p))
    from dse.truth.calibration import profile_calibration

    cal = profile_calibration(p.profile)
    if cal is not None:
        found = cal.group_for(s.generation)
        group = f", group {found[1]}" if found else ""
        print(f"{', '.join(cal.values_for(s.generation))}: the values of calibration {cal.name} (the profile's{group})")
    print()
    cols = ["field", "value", "unit", "elasticity", "time_change_10pct_exact", "time_change_10pct", "headroom"]
    if cost is not None:
        cols.insert(4, "elasticity_cost")
    print(render_frame(frame, cols,
                       formats={"value": ".5g", "elasticity": "+.4f", "elasticity_cost": "+.4f",
                                "time_change_10pct_exact": "+.2%", "time_change_10pct": "+.2%", "headroom": ".1%"},
                       headers={"elasticity": "d ln T/d ln x", "elasticity_cost": "d ln cost/d ln x",
                                "time_change_10pct_exact": "+10%: time", "time_change_10pct": "(1.1^e - 1)"}))
    if cost is None:
        print("(no cost per run: this system has no price in its economics preset; economics=... sets one)")
    print()
    print("in words (+10% of each field, the kernels re-evaluated; training days change alike):")
    for row in frame.iter_rows(named=True):
        if row["constraint"] or abs(row["time_change_10pct_exact"]) >= 5e-5:
            print(f"  {sentence(row)}")
    quiet = [r["field"] for r in frame.iter_rows(named=True)
             if not r["constraint"] and abs(r["time_change_10pct_exact"]) < 5e-5]
    if quiet:
        print(f"  under 0.005% each: {', '.join(quiet)}")
    print()
    print(f"{frame.height} fields by jax.jacfwd: {1000 * warm.seconds['gradient_s']:.2f} ms warm, "
          f"{1000 * warm.seconds['total_s']:.2f} ms with the +10% re-evaluations (first call in this process "
          f"{first.seconds['total_s']:.2f} s: compilation); the configuration in {t_point:.2f} s")
    return 0
