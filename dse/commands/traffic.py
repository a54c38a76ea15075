"""`dse traffic`: bytes per iteration by type and domain; GPU-pair traffic matrix.

    dse traffic model=gpt3_175b system=b200 system.nvs_size=8 strategy=tp1d network=rail_only \
                n1=8 n_p=4 n_d=4 microbatch=1 nvs1=8 nvs_p=1 nvs_d=1 \
                [--matrix out/traffic]      # also writes out/traffic.parquet and out/traffic.png

Prints the GB each GPU sends per iteration, by type (TP, CP: tp1d's context parallelism, DP, PP,
EP) and link (inside the HB domain, NIC on the same rail, NIC to another rail), with each type's
share (`dse.traffic`).
"""

from __future__ import annotations

import argparse

from dse.commands.configuration import add_arguments, describe, keywords, parse
from dse.interface.reproduce import plan
from dse.interface.table import render
from dse.spec.specs import SpecError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dse traffic", description=__doc__.splitlines()[0].split(": ", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.add_argument("--matrix", metavar="OUT_PREFIX", default=None,
                   help="write the GPU-pair matrix as OUT_PREFIX.parquet and OUT_PREFIX.png (<= 1024 GPUs)")
    p.add_argument("--forward", action="store_true",
                   help="rail_only: draw cross-rail traffic through its forwarding GPU in the matrix")
    p.add_argument("--dpi", type=int, default=90, help="resolution of the PNG (default 90)")
    return p


def table_text(row: dict, network: str) -> str:
    """The type x link table of one `dse.traffic.traffic_many` row."""
    from dse.traffic import LINK_NAMES, summary_rows

    rows = summary_rows(row)
    cols = ["type", "hb", "rail", "cross", "total", "share"]
    heads = {k: f"{v} GB" for k, v in LINK_NAMES.items()} | {"total": "total GB"}
    text = render(rows, cols, formats={c: ".6g" for c in ("hb", "rail", "cross", "total")} | {"share": ".2%"},
                  headers=heads, title="GB sent per GPU per iteration (PP: mean over GPUs):")
    total = row["total"]
    if total > 0:
        text += "\nby link: " + ", ".join(f"{LINK_NAMES[k]} {row[k] / total:.2%}" for k in ("hb", "rail", "cross"))
    if row["forwarded"] > 0:
        relayed_cross = row["cross"] if network == "rail_only" else 0.0  # rail_only relays every cross-rail byte
        parts = (["the cross-rail bytes through the HB domain"] if relayed_cross > 0 else []) + (
            ["the node-limited dispatch's tokens inside their destination domain"]
            if row["forwarded"] - relayed_cross > 1e-12 * row["forwarded"] else [])
        text += f"\n{network} relays {' and '.join(parts)}: +{row['forwarded']:.6g} GB per GPU on HB links"
    return text


def main(argv=None) -> int:
    from dse import traffic as tr

    args, res = parse(parser(), argv)
    kw = keywords(res)  # the whole configuration, as `dse eval` takes it
    strategy, network = kw["strategy"], res.job.network.name
    pt = None
    if args.matrix:
        try:
            pt = tr.pair_matrix(**kw, forward=args.forward)
        except NotImplementedError as err:  # a group the GPU-pair placement cannot lay out: refused, nothing written
            raise SpecError(f"--matrix: {err}; the per-type table, without --matrix, counts this "
                            f"configuration") from None
        row = pt.per_gpu
    else:
        row = tr.traffic_one(**kw)
    micro = (res.job.global_batch // row["n_d"]) // row["microbatch"]
    print(describe(res, strategy))
    print(f"configuration: {plan(row, strategy)} on {row['n_gpus']} GPUs "
          f"({micro} microbatches per replica)")
    per_domain = row["nvs1"] * row["nvs2"] * row["nvs_p"] * row["nvs_d"]
    print(f"{per_domain} GPUs of the job per NVS domain, {row['n_gpus'] // per_domain} domains")
    print()
    print(table_text(row, network))
    if pt is not None:
        parquet = tr.write_parquet(pt, f"{args.matrix}.parquet")
        png = tr.plot(pt, f"{args.matrix}.png", dpi=args.dpi)
        worst = max(pt.check.values()) if pt.check else 0.0
        print()
        print(f"pair matrix: {pt.place.n} x {pt.place.n} GPUs; row sums equal the per-GPU bytes "
              f"(max relative difference {worst:.1e})" + ("; cross-rail traffic drawn through its forwarders"
                                                          if pt.forward else ""))
        print(f"wrote {parquet} and {png}")
    return 0
