"""`dse eval`: evaluate one configuration and print its time and memory breakdown.

    dse eval model=gpt3_1t system=b200 system.nvs_size=8 strategy=tp1d profile=lbnl \
             n1=4 n_p=128 n_d=8 microbatch=1 nvs1=4 nvs_p=2 nvs_d=1 [--layers] [--json]

Config fields are Hydra overrides of conf/ (`dse.interface.overrides`), the configuration's keys included;
the NVS size is the system preset's unless system.nvs_size is given. One strategy.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from dse.api import evaluate
from dse.commands.configuration import add_arguments, describe, keywords, parse
from dse.interface.answer import no_days
from dse.interface.reproduce import plan
from dse.interface.table import render


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dse eval", description=__doc__.splitlines()[0].split(": ", 1)[1],
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.add_argument("--layers", action="store_true", help="also print the per-layer table of one block")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    return p


def breakdown(r: dict, capacity: float, moe: bool = False) -> str:
    """The time and memory tables; an MoE model's expert-parallel all-to-alls on their own row, and
    the exposed copies of CPU activation offloading where there are any."""
    t = r["iteration_time"]
    time_rows = [
        ("compute", r["t_compute"]),
        ("exposed HBM", r["t_memory"]),
        ("TP communication", r["t_tp_comm"]),
        *([("EP all-to-all communication", r["t_ep_comm"])] if moe else []),
        ("DP communication", r["t_dp_comm"]),
        ("PP communication", r["t_pp_comm"]),
        ("pipeline bubble", r["t_bubble"]),
        ("optimizer step", r["t_optimizer"]),
        *([("CPU offload copies", r["t_offload"])] if r.get("t_offload") else []),
        *([("waiting for the host (dropless MoE)", r["t_host"])] if r.get("t_host") else []),
        ("iteration", t),
    ]
    mem_rows = [
        ("weights", r["mem_weights"]),
        ("gradients", r["mem_grads"]),
        ("optimizer states", r["mem_optimizer"]),
        ("activations", r["mem_activations"]),
        ("framework reserve", r["mem_reserved"]),
        ("total", r["memory"]),
    ]
    a = render([{"time": k, "seconds": v, "share": v / t} for k, v in time_rows],
               formats={"seconds": ".6g", "share": ".1%"})
    b = render([{"memory": k, "GB": v, "of HBM": v / capacity} for k, v in mem_rows],
               formats={"GB": ".6g", "of HBM": ".1%"})
    return a + "\n\n" + b


def layer_rows(res, r: dict) -> str:
    import jax.numpy as jnp

    from kernels.iteration import layer_table
    from kernels.params import Candidates

    from dse.truth.calibration import apply_calibration, profile_calibration

    job = res.job
    m, net = job.model, job.network
    s = apply_calibration(res.system(), profile_calibration(job.profile))
    c = Candidates(*(jnp.asarray(r[k]) for k in Candidates._fields))
    table = layer_table(res.strategy(), c, m.workload(job.global_batch), net.apply(s).params(),
                        job.profile, net.name, m.arch)
    rows = []
    for name, v in table.items():
        rows.append({"layer": name, **{k: float(np.asarray(x)) for k, x in v.items()
                                       if k in ("flops_f", "flops_b", "weight", "activation", "t_f", "t_b", "comm_f", "comm_b")}})
    return render(rows, ["layer", "flops_f", "flops_b", "weight", "activation", "t_f", "t_b", "comm_f", "comm_b"],
                  formats={k: ".6g" for k in rows[0] if k != "layer"},
                  headers={"flops_f": "F_f TFLOP", "flops_b": "F_b TFLOP", "weight": "W GB", "activation": "A GB",
                           "t_f": "t_f s", "t_b": "t_b s", "comm_f": "comm_f s", "comm_b": "comm_b s"},
                  title=(f"one MoE block (every {m.moe_every}th block; the others are dense), one microbatch, per GPU:"
                         if m.moe else "one block, one microbatch, per GPU:"))


def economy_line(r: dict, economics, system) -> str:
    """The run's cost, energy and power (`dse.results.economics`), in one line; what is unknown says why."""
    from dse.results.economics import resolve_economics

    spec = resolve_economics(economics, system)
    if spec is None:
        return (f"cost and energy: no price and power group for system {system.name!r} (conf/economics/); "
                "give economics=<preset> or economics.gpu_tdp_w=... and the prices")

    def num(v, fmt):
        return "n/a" if v is None or v != v else format(v, fmt)

    mode = (f"rental at {spec.gpu_hour_usd:g} USD/GPU-hour" if spec.pricing == "rental" else
            f"ownership, amortised over {num(spec.amortisation_years, 'g')} years")
    return (f"power {num(r['power_kw'], ',.0f')} kW (compute utilisation {num(r['compute_utilisation'], '.1%')}, "
            f"PUE {spec.pue:g}); per run: {num(r['energy_per_run_mwh'], ',.4g')} MWh, "
            f"{num(r['cost_per_run_usd'], ',.0f')} USD ({mode}, economics {spec.name}); "
            f"cluster {num(r['cluster_cost_usd'], ',.0f')} USD")


def main(argv=None) -> int:
    args, res = parse(parser(), argv)
    kw = keywords(res)
    r = evaluate(**kw, economics=res.job.economics)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    strategy, job, s = kw["strategy"], res.job, kw["system"]
    micro = (job.global_batch // r["n_d"]) // r["microbatch"]
    if not r["feasible"]:
        print(f"DOES NOT FIT: this configuration needs {r['memory']:.6g} GB per GPU and the HBM holds "
              f"{s.hbm_capacity:g} GB (the memory breakdown is below)")
    print(describe(res, strategy))
    print(f"configuration: {plan(r, strategy)} on {r['n_gpus']} GPUs "
          f"({micro} microbatches of {r['microbatch']} per replica)")
    fits = "fits" if r["feasible"] else "DOES NOT FIT"
    days = (f", {r['training_days']:.3g} days for the training set" if r.get("training_days") else
            no_days(job))
    print(f"iteration {r['iteration_time']:.6g} s, throughput {r['throughput']:.6g} samples/s{days}; "
          f"memory {r['memory']:.6g} of {s.hbm_capacity:g} GB ({fits})")
    from dse.truth.calibration import profile_calibration, user_fields

    cal = profile_calibration(job.profile)
    if cal is not None:
        from kernels.params import PRECISIONS

        mine = user_fields(s)  # set on the command line: kept over the calibration's values
        yours = f" but {', '.join(f'{k}={getattr(s, k):g}' for k in mine)} as set" if mine else ""
        print(f"efficiencies from calibration {cal.name}{yours}: error band "
              f"{cal.band_text(s.generation, PRECISIONS[int(r['precision'])], job.model.arch.moe)}")
    if s.status:
        from dse.spec.specs import SYSTEM_STATUS

        print(f"system {s.name}: {SYSTEM_STATUS[s.status]} (NVS {s.nvs_size})")
    print(economy_line(r, res.job.economics, s))
    print()
    print(breakdown(r, s.hbm_capacity, bool(job.model.moe)))
    if args.layers:
        print()
        print(layer_rows(res, r))
    return 0
