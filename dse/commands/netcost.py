"""Print the switch, transceiver, cost and power comparison of rail-optimized and rail-only fabrics.

    dse netcost                # Table 2 of seed 000 / TABLE II of seed 002
    dse netcost --gpus 16384 --radix 64 --hb-domain 8 --prices rail_only_2024

Each number is shown beside the one the papers print, where they print one (K = 256 only).
"""

from __future__ import annotations

import argparse
import sys

from dse.spec.netcost import NetCostTables, compare, load_prices, percent_as_printed, price_presets
from dse.spec.specs import SpecError

#: HB domain size of the papers' tables.
PAPER_HB_DOMAIN = 256

#: The papers' table as printed, shown for comparison only (nothing is computed from it).
#: (gpus, radix) -> (#SW SOTA, #SW rail-only, #TR SOTA, #TR rail-only); seed 000 Table 2 and seed
#: 002 TABLE II print the same counts.
PAPER_COUNTS = {
    (32768, 64): (2560, 1536, 196608, 131072),
    (32768, 128): (1280, 256, 196608, 65536),
    (32768, 256): (384, 128, 131072, 65536),
    (65536, 64): (5120, 3072, 393216, 262144),
    (65536, 128): (2560, 1536, 393216, 262144),
    (65536, 256): (1280, 256, 393216, 131072),
}

#: (price set, metric) -> {(gpus, radix): printed savings in %}: seed 000 Table 2 "Cost Reduction"
#: with its footnote prices; seed 002 TABLE II "Savings" Cost and Pwr with its footnote prices.
PAPER_SAVINGS = {
    ("lowcost_llm_2023", "cost"): {(32768, 64): 37, (32768, 128): 75, (32768, 256): 60,
                                   (65536, 64): 37, (65536, 128): 37, (65536, 256): 75},
    ("rail_only_2024", "cost"): {(32768, 64): 38, (32768, 128): 77, (32768, 256): 62,
                                 (65536, 64): 38, (65536, 128): 38, (65536, 256): 77},
    ("rail_only_2024", "power"): {(32768, 64): 37, (32768, 128): 75, (32768, 256): 60,
                                  (65536, 64): 37, (65536, 128): 37, (65536, 256): 75},
}

_UNITS = {"cost": (1e6, "M$", "${:g}"), "power": (1e6, "MW", "{:g} W")}


def _paper(table: dict, key, hb_domain: int):
    return table.get(key) if hb_domain == PAPER_HB_DOMAIN else None


def _cell(model: int, paper: int | None, width: int) -> str:
    return f"{model:>{width}} {'-' if paper is None else paper:>{width}}"


def render(tables: NetCostTables, prices) -> tuple[str, list[tuple[str, int, int]]]:
    """The report text, and per kind of number (matches, compared) against the papers."""
    counts = tables.counts
    hb = int(counts["hb_domain"][0])
    tally = {"switch counts": [0, 0], "transceiver counts": [0, 0], "printed savings": [0, 0]}
    out = [
        f"Rail-optimized (SOTA) vs rail-only NIC fabric: HB domain K = {hb} GPUs, one NIC port per "
        "GPU,",
        "minimum-tier full-bisection folded Clos (rail-only: one Clos per rail of N/K GPUs).",
        "Paper: seed 000 Table 2 = seed 002 TABLE II (printed for K = 256 only; '-' where none).",
        "",
        "Equipment",
        f"{'N':>7} {'radix':>5}  {'tiers':>7}   {'#SW SOTA':>15}   {'#SW rail-only':>15}   "
        f"{'#TR SOTA':>17}   {'#TR rail-only':>17}",
        f"{'':>7} {'':>5}  {'SOTA/RO':>7}   "
        f"{'model':>7} {'paper':>7}   {'model':>7} {'paper':>7}   "
        f"{'model':>8} {'paper':>8}   {'model':>8} {'paper':>8}",
    ]
    for row in counts.iter_rows(named=True):
        n, k = row["gpus"], row["radix"]
        paper = _paper(PAPER_COUNTS, (n, k), hb)
        model = (row["switches_sota"], row["switches_rail"],
                 row["transceivers_sota"], row["transceivers_rail"])
        if paper is not None:
            for i, kind in ((0, "switch counts"), (1, "switch counts"),
                            (2, "transceiver counts"), (3, "transceiver counts")):
                tally[kind][0] += model[i] == paper[i]
                tally[kind][1] += 1
        p = paper or (None,) * 4
        out.append(
            f"{n:>7} {k:>5}  {row['tiers_sota']:>3}/{row['tiers_rail']:<3}   "
            f"{_cell(model[0], p[0], 7)}   {_cell(model[1], p[1], 7)}   "
            f"{_cell(model[2], p[2], 8)}   {_cell(model[3], p[3], 8)}")

    for p in prices:
        for metric in ("cost", "power") if p.has_power else ("cost",):
            scale, unit, amount = _UNITS[metric]
            per_port, per_tr = ((p.port_price, p.transceiver_price) if metric == "cost"
                                else (p.port_power, p.transceiver_power))
            printed = PAPER_SAVINGS.get((p.name, metric), {})
            out += [
                "",
                f"{metric.capitalize()}, {p.name} ({p.source or 'no source given'}): "
                f"{amount.format(per_port)} per switch port, "
                f"{amount.format(per_tr)} per transceiver, "
                f"{p.line_rate_gbps:g} Gbps",
                f"{'N':>7} {'radix':>5}  {'SOTA':>9} {'rail-only':>9} {'saved':>9}  "
                f"{'savings':>8} {'printed':>7} {'paper':>5}",
                f"{'':>7} {'':>5}  {unit:>9} {unit:>9} {unit:>9}",
            ]
            rows = tables.totals.filter((tables.totals["prices"] == p.name)
                                        & (tables.totals["metric"] == metric))
            for row in rows.iter_rows(named=True):
                n, k = row["gpus"], row["radix"]
                shown = percent_as_printed(row["savings"])
                paper = _paper(printed, (n, k), hb)
                if paper is not None:
                    tally["printed savings"][0] += shown == paper
                    tally["printed savings"][1] += 1
                out.append(
                    f"{n:>7} {k:>5}  {row['sota'] / scale:>9.3f} {row['rail'] / scale:>9.3f} "
                    f"{(row['sota'] - row['rail']) / scale:>9.3f}  {100 * row['savings']:>7.3f}% "
                    f"{shown:>6}% {'-' if paper is None else f'{paper}%':>5}")
    summary = [(kind, hit, seen) for kind, (hit, seen) in tally.items()]
    if any(seen for _, _, seen in summary):
        out += ["", "Agreement with the papers: " + ", ".join(
            f"{hit}/{seen} {kind}" for kind, hit, seen in summary if seen)]
    return "\n".join(out), summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dse netcost",
        description="Switches, transceivers, cost and power of rail-optimized vs rail-only "
                    "fabrics (seed 000 section 6.5, seed 002 section V-E).")
    parser.add_argument("--gpus", type=int, nargs="+", default=[32768, 65536], metavar="N",
                        help="cluster sizes in GPUs (default: 32768 65536)")
    parser.add_argument("--radix", type=int, nargs="+", default=[64, 128, 256], metavar="K",
                        help="switch radices, even, >= 4 (default: 64 128 256)")
    parser.add_argument("--hb-domain", type=int, default=PAPER_HB_DOMAIN, metavar="K",
                        help=f"GPUs per HB domain = number of rails (default: {PAPER_HB_DOMAIN})")
    parser.add_argument("--prices", nargs="+", default=None, metavar="NAME",
                        help="price sets from conf/prices/ (default: all: "
                             f"{', '.join(price_presets())})")
    args = parser.parse_args(argv)
    try:
        prices = [load_prices(name) for name in (args.prices or price_presets())]
        tables = compare(args.gpus, args.radix, args.hb_domain, prices)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text, _ = render(tables, prices)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
