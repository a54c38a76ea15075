"""`dse whatif`: the best plan under a failure scenario beside the best re-plan, and the goodput.

    dse whatif model=llama3_8b system=h200 system.nvs_size=8 n_gpus=64 whatif.scenario=gpu_lost
    dse whatif model=llama3_8b system=h200 system.nvs_size=8 n_gpus=64 whatif.scenario=slow_node whatif.straggler=1.3
    dse whatif ... whatif.scenario=degraded_link whatif.link=nvlink whatif.link_factor=0.5
    dse whatif ... whatif.scenario=rail_lost whatif.failures_per_gpu_hour=4e-5 whatif.checkpoint_s=120

Scenarios (whatif.scenario; the model of each is in dse/decisions/whatif.py): gpu_lost (one GPU of an HB
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

from dse.interface.reproduce import plan_command
from dse.commands.decisions import given_point, point_of, question, resolved
from dse.commands.sensitivity import _parser
from dse.interface.overrides import reject_retired_flags
from dse.interface.table import render
from dse.decisions.whatif import Scenario, goodput, whatif


def parser() -> argparse.ArgumentParser:
    return _parser("dse whatif", __doc__)


def main(argv=None) -> int:
    argv = list(argv or [])
    reject_retired_flags(argv)
    args = parser().parse_args(argv)
    res = resolved(args.overrides, "whatif")
    w = res.config["whatif"]
    sc = Scenario(str(w["scenario"]), w["straggler"], str(w["link"]), w["link_factor"])
    q = question(res)
    good_kw = {k: w[k] for k in ("failures_per_gpu_hour", "restart_s", "checkpoint_s", "checkpoint_interval_s")}
    goodput(n_gpus=q["n_gpus"], **good_kw)  # bad figures stop here, before any search
    if given_point(args.overrides):
        point_of(args.overrides, res)  # a configuration that does not fit is said first, in one line
        q.pop("n_gpus")
        frame = whatif(sc, strategy=res.strategy(), **q, **good_kw, **res.point())
    else:
        frame = whatif(sc, strategy=res.job.strategies, **q, **good_kw)
    s = q["system"]
    first = frame.row(0, named=True)
    print(f"{res.job.model.name} on {s.name} (NVS {s.nvs_size}), profile {res.job.profile_name}, "
          f"network {res.job.network.name}; scenario {sc.describe()}")
    print(f"plan ({'given' if given_point(args.overrides) else 'the search optimum'}): {first['plan']}")
    print(f"reproduce the healthy plan: {plan_command(res.job, first['plan'], s.nvs_size)}")
    print()
    print(render(frame.to_dicts(), ["case", "plan", "n_gpus", "iteration_time", "change", "feasible", "training_days",
                                    "training_days_failures"],
                 formats={"iteration_time": ".5g", "change": "+.2%", "training_days": ".4g",
                          "training_days_failures": ".4g"},
                 headers={"iteration_time": "time s", "change": "vs healthy", "feasible": "fits",
                          "training_days": "training days", "training_days_failures": "with failures",
                          "n_gpus": "GPUs"}))
    print()
    p_gpus = first["n_gpus"]
    good = goodput(n_gpus=p_gpus, **good_kw)
    rate = w["failures_per_gpu_hour"]
    mtbf = f"{good.mtbf_s / 3600:.3g} h" if math.isfinite(good.mtbf_s) else "no failures"
    print(f"goodput {good.goodput:.2%} on {p_gpus} GPUs: {rate:g} failures per GPU-hour -> MTBF {mtbf} "
          f"({good.failures_per_day:.3g} per day), checkpoint {w['checkpoint_s']:g} s every {good.interval_s:.4g} s "
          f"({'Young/Daly optimum sqrt(2 C MTBF)' if w['checkpoint_interval_s'] is None else 'given'}), "
          f"restart {w['restart_s']:g} s; training days with failures = training days / goodput")
    return 0
