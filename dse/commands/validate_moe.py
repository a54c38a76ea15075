"""All-to-all slowdown of rail-only against rail-optimized networks (seed 002 section IV-B).

    dse validate moe
    dse validate moe --domains 32 --alpha-f 1e-6 --alpha-s 5e-6

For DGX A100 and DGX H100 the slowdown T_rail-only / T_rail-opt - 1 of a uniform all-to-all follows
from seed 002 Eq. 2-3 (`kernels.fabrics.alltoall_time`) and the platforms' per-GPU bandwidths,
counted one way as seed 002 counts them (DGX H100: 3.6 Tbps NVLink per GPU): where
y (x-1) = x (y-1), that is on an x = y grid, it is exactly C_S / C_F, the paper's approximation,
printed beside its 8.2% and 11.2%. Then a small MoE example: expert-parallel dispatch of a
microbatch's tokens over the GPUs of `--domains` servers, one expert per GPU, uniform routing.
"""

from __future__ import annotations

import argparse
import sys
from typing import NamedTuple

import numpy as np

from dse.spec.specs import SpecError, check_float, check_int
from kernels.fabrics import (
    ANY_TO_ANY,
    RAIL_ONLY,
    RAIL_OPTIMIZED,
    Links,
    alltoall_slowdown,
    alltoall_time,
)


class Platform(NamedTuple):
    name: str
    hb_size: int  # GPUs per HB domain (x of a full-server grid)
    c_f: float  # GB/s per GPU, one way
    c_s: float  # GB/s per GPU, one way
    paper: float  # seed 002 section IV-B slowdown, %, for comparison only
    note: str


PLATFORMS = (
    Platform("DGX A100", 8, 300.0, 25.0, 8.2, "NVLink 3 2.4 Tbps, HDR 200 Gb/s"),
    Platform("DGX H100", 8, 450.0, 50.0, 11.2, "NVLink 4 3.6 Tbps, NDR 400 Gb/s"),
)


def slowdowns(
    platform: Platform, domains, alpha_f: float = 0.0, alpha_s: float = 0.0
) -> np.ndarray:
    """Slowdown (fraction) of a full-server grid x = K by y = `domains` (an array) on `platform`."""
    links = Links(platform.c_f, platform.c_s, alpha_f, alpha_s)
    return np.asarray(alltoall_slowdown(platform.hb_size, np.asarray(domains), links))


def moe_example(platform: Platform, domains: int, tokens: int, hidden: int, element_size: float,
                alpha_f: float, alpha_s: float) -> dict:
    """One all-to-all dispatching `tokens` tokens of `hidden` features from every GPU (top-1
    routing, uniform over the x y experts): volume = tokens hidden element_size GB per GPU."""
    links = Links(platform.c_f, platform.c_s, alpha_f, alpha_s)
    volume = tokens * hidden * element_size
    times = {f: float(alltoall_time(volume, platform.hb_size, domains, links, f))
             for f in (ANY_TO_ANY, RAIL_OPTIMIZED, RAIL_ONLY)}
    return {"volume": volume, **times}


def render(domains: list[int], moe_domains: int, tokens: int, hidden: int, alpha_f: float,
           alpha_s: float) -> str:
    out = [
        "Uniform all-to-all, rail-only (two-step, Eq. 3) vs rail-optimized (direct, Eq. 2), "
        "seed 002 section IV-B",
        f"latencies alpha_F = {alpha_f:g} s, alpha_S = {alpha_s:g} s",
        "",
        f"{'platform':<9} {'C_F':>6} {'C_S':>6} {'C_S/C_F':>8}  "
        + " ".join(f"{f'y={y}':>7}" for y in domains) + f"  {'paper':>6}  {'x=y vs paper':>12}",
        f"{'':<9} {'GB/s':>6} {'GB/s':>6} {'':>8}  "
        + " ".join(f"{'':>7}" for _ in domains) + f"  {'':>6}  {'(points)':>12}",
    ]
    for pf in PLATFORMS:
        s = slowdowns(pf, domains, alpha_f, alpha_s)
        at_square = float(slowdowns(pf, [pf.hb_size], alpha_f, alpha_s)[0])
        out.append(
            f"{pf.name:<9} {pf.c_f:>6g} {pf.c_s:>6g} {100 * pf.c_s / pf.c_f:>7.2f}%  "
            + " ".join(f"{100 * v:>6.2f}%" for v in s)
            + f"  {pf.paper:>5.1f}%  {100 * at_square - pf.paper:>+12.2f}")
    out += [
        f"(x = {PLATFORMS[0].hb_size} GPUs per server, y servers; y = x is where "
        "y(x-1) = x(y-1) and the slowdown equals C_S/C_F)",
        "",
        f"MoE example: {moe_domains} servers x {PLATFORMS[0].hb_size} GPUs, one expert per GPU, "
        f"top-1 uniform routing, {tokens} tokens x {hidden} features (fp16) sent per GPU per "
        "all-to-all",
        f"{'platform':<9} {'GB/GPU':>8} {'any-to-any':>11} {'rail-opt':>11} {'rail-only':>11} "
        f"{'slowdown':>9} {'x4/layer':>10}",
        f"{'':<9} {'':>8} {'ms':>11} {'ms':>11} {'ms':>11} {'':>9} {'+ms':>10}",
    ]
    for pf in PLATFORMS:
        r = moe_example(pf, moe_domains, tokens, hidden, 2e-9, alpha_f, alpha_s)
        extra = 4 * (r[RAIL_ONLY] - r[RAIL_OPTIMIZED])
        out.append(
            f"{pf.name:<9} {r['volume']:>8.4f} {1e3 * r[ANY_TO_ANY]:>11.3f} "
            f"{1e3 * r[RAIL_OPTIMIZED]:>11.3f} {1e3 * r[RAIL_ONLY]:>11.3f} "
            f"{100 * (r[RAIL_ONLY] / r[RAIL_OPTIMIZED] - 1):>8.2f}% {1e3 * extra:>10.3f}")
    out.append("(x4/layer: dispatch and combine, forward and backward, of one MoE layer per "
               "microbatch: extra time on rail-only)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dse validate moe",
        description="All-to-all slowdown of rail-only vs rail-optimized networks for DGX A100 and "
                    "DGX H100 (seed 002 section IV-B), and a small MoE example.")
    parser.add_argument("--domains", type=int, nargs="+", default=[2, 8, 16, 64, 1024], metavar="Y",
                        help="HB domains (servers) in the all-to-all (default: 2 8 16 64 1024)")
    parser.add_argument("--moe-domains", type=int, default=16, metavar="Y",
                        help="servers of the MoE example (default: 16, the MoE-1.3B setup of "
                             "seed 002 section III-C)")
    parser.add_argument("--tokens", type=int, default=8192, metavar="T",
                        help="tokens per GPU per all-to-all (default: 8192 = 4 x 2048)")
    parser.add_argument("--hidden", type=int, default=2048, metavar="H",
                        help="token features (default: 2048)")
    parser.add_argument("--alpha-f", type=float, default=0.0, metavar="S",
                        help="HB transfer-step latency, s (default: 0)")
    parser.add_argument("--alpha-s", type=float, default=0.0, metavar="S",
                        help="NIC transfer-step latency, s (default: 0)")
    parser.add_argument("--search", action=argparse.BooleanOptionalAction, default=True,
                        help="also search the MoE model presets on both fabrics (default: yes)")
    parser.add_argument("--search-gpus", type=int, nargs="+", default=[128, 1024], metavar="N")
    parser.add_argument("--system", default="dgx_a100_seed000", help="system preset of the search")
    args = parser.parse_args(argv)
    try:
        domains = [check_int("domains", y, 2) for y in args.domains]
        moe_domains = check_int("moe_domains", args.moe_domains, 1)
        tokens = check_int("tokens", args.tokens, 1)
        hidden = check_int("hidden", args.hidden, 1)
        alpha_f = check_float("alpha_f", args.alpha_f, low_open=False)
        alpha_s = check_float("alpha_s", args.alpha_s, low_open=False)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(render(domains, moe_domains, tokens, hidden, alpha_f, alpha_s))
    if args.search:
        print()
        print(search_slowdown(args.search_gpus, args.system))
    return 0


def search_slowdown(n_gpus: list[int], system: str) -> str:
    """The MoE models searched on rail_only and rail_optimized (and the any_to_any ideal): the
    optimum's iteration time on each fabric and the rail-only slowdown, end to end."""
    import dse
    from dse.interface.table import render as table

    rows = []
    for model in ("deepspeed_moe_1p3b", "deepspeed_moe_6p7b"):
        for n in n_gpus:
            best = {}
            for net in ("rail_optimized", "rail_only", "any_to_any"):
                top = dse.search(model=model, system=system, nvs_size=8, strategy="tp1d", n_gpus=n,
                                 network=net, top_k=1, global_batch=1024)
                best[net] = top.row(0, named=True) if len(top) else None
            opt, ro, ideal = best["rail_optimized"], best["rail_only"], best["any_to_any"]
            if opt is None or ro is None:
                rows.append({"model": model, "GPUs": n})
                continue
            rows.append({"model": model, "GPUs": n, "rail-opt s": opt["iteration_time"],
                         "rail-only s": ro["iteration_time"], "ideal s": ideal["iteration_time"],
                         "slowdown": ro["iteration_time"] / opt["iteration_time"] - 1.0,
                         "n_d": ro["n_d"], "n1": ro["n1"], "b": ro["microbatch"],
                         "same config": all(ro[c] == opt[c] for c in ("n1", "n_p", "n_d", "microbatch",
                                                                        "nvs1", "nvs_p", "nvs_d"))})
    return table(rows, ["model", "GPUs", "rail-opt s", "rail-only s", "ideal s", "slowdown", "n_d", "n1", "b",
                        "same config"],
                 formats={"rail-opt s": ".4f", "rail-only s": ".4f", "ideal s": ".4f", "slowdown": "+.2%"},
                 title=f"MoE models searched end to end on {system}, NVS 8, global batch 1024, every block's "
                       "time included (the all-to-all is a part of it):")


if __name__ == "__main__":
    sys.exit(main())
