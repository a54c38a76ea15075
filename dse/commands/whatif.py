"""`dse whatif`: the best plan under a failure scenario beside the best re-plan, and the goodput.

    dse whatif model=llama3_8b system=h200 system.nvs_size=8 n_gpus=64 whatif.scenario=gpu_lost
    dse whatif model=llama3_8b system=h200 system.nvs_size=8 n_gpus=64 whatif.scenario=slow_node whatif.straggler=1.3
    dse whatif ... whatif.scenario=degraded_link whatif.link=nvlink whatif.link_factor=0.5
    dse whatif ... whatif.scenario=rail_lost whatif.failures_per_gpu_hour=4e-5 whatif.checkpoint_s=120

Scenarios (whatif.scenario; the model of each is in dse/whatif.py): gpu_lost (one GPU of an HB
domain lost, that domain's share of the job on its K - 1 survivors), rail_lost (one rail lost, its
traffic forwarded over NVLink to another rail), slow_node (one node whatif.straggler times slower),
degraded_link (one GPU's whatif.link, nvlink or nic, at whatif.link_factor of its bandwidth), none.
The plan is the search's optimum for the question (or the configuration given by its keys, with one
strategy); the re-plan is the best configuration under the scenario (gpu_lost: also the best on the
GPUs left without the failed domain). Goodput: Young/Daly from whatif.failures_per_gpu_hour,
whatif.restart_s, whatif.checkpoint_s (and whatif.checkpoint_interval_s, null: the optimum).
"""

from __future__ import annotations

import argparse
import math

from dse.commands.decisions import describe_point, given_point, point_of, question, resolved
from dse.commands.sensitivity import _parser
from dse.overrides import reject_retired_flags
from dse.table import render
from dse.whatif import Scenario, best_under, best_without_domain, expected_training_days, goodput, under


def parser() -> argparse.ArgumentParser:
    return _parser("dse whatif", __doc__)


def _cfg(row, strategy) -> str:
    second = "cp" if strategy == "tp1d" else "n2"
    return (f"{strategy} n1={row['n1']} {second}={row['n2']} n_p={row['n_p']} n_d={row['n_d']} b={row['microbatch']} "
            f"nvs={row['nvs1']}x{row['nvs2']}x{row['nvs_p']}x{row['nvs_d']}")


def main(argv=None) -> int:
    argv = list(argv or [])
    reject_retired_flags(argv)
    args = parser().parse_args(argv)
    res = resolved(args.overrides, "whatif")
    w = res.config["whatif"]
    sc = Scenario(str(w["scenario"]), w["straggler"], str(w["link"]), w["link_factor"])
    q = question(res)
    n = q["n_gpus"]
    good = goodput(w["failures_per_gpu_hour"], n, w["restart_s"], w["checkpoint_s"], w["checkpoint_interval_s"])
    p = point_of(args.overrides, res)
    n = int(p.row["n_gpus"])
    if n != q["n_gpus"]:
        good = goodput(w["failures_per_gpu_hour"], n, w["restart_s"], w["checkpoint_s"], w["checkpoint_interval_s"])
    kw = dict(model=q["model"], system=q["system"], profile=q["profile"], global_batch=q["global_batch"],
              network=q["network"])
    strategies = [p.strategy] if given_point(args.overrides) else res.job.strategies
    s = q["system"]
    print(f"{p.model.name} on {n} GPUs of {s.name} (NVS {s.nvs_size}), profile {res.job.profile_name}, "
          f"network {p.network.name}; scenario {sc.describe()}")
    print(f"plan ({'the search optimum' if p.searched else 'given'}): {describe_point(p)}")
    healthy = p.row["iteration_time"]
    now = under(p.row, sc, strategy=p.strategy, **kw)
    re_row, re_strategy = best_under(sc, strategies=strategies, n_gpus=n, **kw)
    rows = [{"case": "healthy, the plan", "plan": _cfg(p.row, p.strategy), "iteration_time": healthy,
             "change": 0.0, "fits": bool(p.row["feasible"]), "days": p.row.get("training_days")},
            {"case": "scenario, the same plan", "plan": _cfg(p.row, p.strategy), "iteration_time": now["iteration_time"],
             "change": now["iteration_time"] / healthy - 1.0, "fits": now["feasible"], "days": now["training_days"]}]
    if re_row is not None:
        rows.append({"case": "scenario, best re-plan", "plan": _cfg(re_row, re_strategy),
                     "iteration_time": re_row["iteration_time"], "change": re_row["iteration_time"] / healthy - 1.0,
                     "fits": True, "days": re_row.get("training_days")})
    else:
        rows.append({"case": "scenario, best re-plan", "plan": "nothing fits", "iteration_time": math.inf,
                     "change": math.inf, "fits": False, "days": math.inf})
    if sc.domain_dependent():
        d_row, d_strategy, m = best_without_domain(strategies=strategies, n_gpus=n, **kw)
        rows.append({"case": f"re-plan on {m} GPUs (domain out)",
                     "plan": _cfg(d_row, d_strategy) if d_row else "nothing fits",
                     "iteration_time": d_row["iteration_time"] if d_row else math.inf,
                     "change": d_row["iteration_time"] / healthy - 1.0 if d_row else math.inf,
                     "fits": d_row is not None, "days": d_row.get("training_days") if d_row else math.inf})
    for r in rows:
        r["days_failures"] = expected_training_days(r["days"], good) if r["days"] is not None else None
    print()
    print(render(rows, ["case", "plan", "iteration_time", "change", "fits", "days", "days_failures"],
                 formats={"iteration_time": ".5g", "change": "+.2%", "days": ".4g", "days_failures": ".4g"},
                 headers={"iteration_time": "time s", "change": "vs healthy", "days": "training days",
                          "days_failures": "with failures"}))
    print()
    rate = w["failures_per_gpu_hour"]
    mtbf = f"{good.mtbf_s / 3600:.3g} h" if math.isfinite(good.mtbf_s) else "no failures"
    print(f"goodput {good.goodput:.2%} on {n} GPUs: {rate:g} failures per GPU-hour -> MTBF {mtbf} "
          f"({good.failures_per_day:.3g} per day), checkpoint {w['checkpoint_s']:g} s every {good.interval_s:.4g} s "
          f"({'Young/Daly optimum sqrt(2 C MTBF)' if w['checkpoint_interval_s'] is None else 'given'}), "
          f"restart {w['restart_s']:g} s; training days with failures = training days / goodput")
    return 0
