"""`dse report`: draw a figure of seed 001 or of the rail-only papers from a dataset as a PNG.

    dse -m sweep=fig4      && dse report fig4  --data outputs/data/fig4    --out docs/figures/fig4.png
    dse -m sweep=seed001   && dse report fig5  --data outputs/data/seed001 --out docs/figures/fig5.png
                              dse report figA4 --data outputs/data/seed001 --out docs/figures/figA4.png
    dse -m sweep=fig_a5    && dse report figA5 --data outputs/data/fig_a5  --out docs/figures/figA5.png
    dse -m sweep=fig_a6    && dse report figA6 --data outputs/data/fig_a6  --out docs/figures/figA6.png
    dse -m sweep=railonly_k          && dse report fig8  --out docs/figures/fig8_railonly_k.png
    dse -m sweep=railonly_bandwidth  && dse report fig9  --out docs/figures/fig9_railonly_bandwidth.png
    dse -m sweep=railonly_batch      && dse report fig10 --out docs/figures/fig10_railonly_batch.png

--data defaults to the dataset of the figure's sweep, --out to outputs/figures/FIGURE.png (never a
tracked folder: the figures under docs/ change only when --out names them).
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

import polars as pl

from dse import figures
from dse.results import io

#: options that only some figures take (option dest -> figures)
APPLIES = {
    "strategy": ("fig4", "fig5", "figA5", "figA6"),
    "metric": ("fig5", "figA5", "figA6"),
    "n_gpus": ("figA5", "figA6", "fig9", "fig10"),
    "system": ("fig4",),
    "nvs_size": ("fig4", "figA5", "figA6"),
    "breakdown": ("fig4",),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dse report", description="draw a figure from a dataset as a PNG",
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("figure", choices=list(figures.FIGURES), help="which figure")
    p.add_argument("--data", default=None, help="dataset directory (default: outputs/data/<the figure's sweep>)")
    p.add_argument("--out", default=None, help="PNG to write (default: outputs/figures/FIGURE.png)")
    p.add_argument("--strategy", default=None, choices=figures.STRATEGY_CHOICES,
                   help="paper (1D TP for GPT3-1T, 2D TP for ViT; default), best (fastest of all), or one strategy")
    p.add_argument("--metric", default=None, choices=list(figures.METRICS), help="default training_days")
    p.add_argument("--n-gpus", type=int, default=None,
                   help="GPU count of figA5, figA6 (default 8192) and fig9, fig10 (default: the dataset's only one)")
    p.add_argument("--system", default=None, help="system of fig4 (default b200)")
    p.add_argument("--nvs-size", type=int, default=None, help="NVS size (default 8)")
    p.add_argument("--breakdown", default=None, choices=("fraction", "seconds"),
                   help="fig4 time breakdown as fractions of the iteration (default) or seconds")
    p.add_argument("--dpi", type=int, default=figures.DPI, help=f"resolution (default {figures.DPI})")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    fn, sweep = figures.FIGURES[args.figure]
    kwargs = {}
    for dest, takers in APPLIES.items():
        value = getattr(args, dest)
        if value is None:
            continue
        if args.figure not in takers:
            print(f"dse report {args.figure}: --{dest.replace('_', '-')} applies only to {', '.join(takers)}",
                  file=sys.stderr)
            return 2
        kwargs[dest] = value
    data = Path(args.data or Path("outputs/data") / sweep)
    out = Path(args.out or Path("outputs/figures") / f"{args.figure}.png")
    hint = f"run: dse -m sweep={sweep}"
    try:
        lf = io.scan(data)  # every file checked: a bad one is a DatasetError (exit 2), one line naming it
        notes: list[str] = []
        if "notes" in inspect.signature(fn).parameters:  # figures whose numbers are quoted get them printed
            kwargs["notes"] = notes
        try:
            path = fn(lf, out, dpi=args.dpi, **kwargs)
        except pl.exceptions.PolarsError:  # a damaged page that only decoding finds: name its file
            io.diagnose(data)
            raise
    except FileNotFoundError as err:
        print(f"dse report {args.figure}: error: {err}; {hint}", file=sys.stderr)
        return 1
    except figures.MissingData as err:
        print(f"dse report {args.figure}: error: dataset {data} {err}; {hint}", file=sys.stderr)
        return 1
    print(f"{args.figure}: wrote {path} ({path.stat().st_size / 1024:.0f} KB) from {data}")
    for line in notes:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
