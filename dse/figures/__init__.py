"""The figures of seed 001 and of the rail-only papers, drawn from a dataset (`dse.results.io.scan`) with
matplotlib.

Each figure is one function `figX(lf, out, ...) -> Path`: it takes a lazy scan of a dataset, picks
the optimum of every group it draws (`dse.explore.ranking`: a dataset of top-k rows or of every row gives
the same figure), writes a PNG to `out` and returns its path. Nothing here computes a cost; a
dataset that lacks what a figure needs raises `MissingData`, whose message names the missing
columns or groups.

    fig4   optimal configuration and time breakdown vs GPU count (B200, NVS 8)   dse -m sweep=fig4
    fig5   training days vs GPU count per GPU generation and NVS size            dse -m sweep=seed001
    figA4  speedup of the 2D strategies over 1D TP for GPT3-1T                   dse -m sweep=seed001
    figA5  training days over FLOP rate x HBM (capacity and bandwidth)           dse -m sweep=fig_a5
    figA6  training days over HBM capacity x HBM bandwidth                       dse -m sweep=fig_a6
    fig8   iteration time vs HB-domain size K, ideal K = N dashed (seed 002)     dse -m sweep=railonly_k
    fig9   iteration time vs NIC bandwidth per HB-domain bandwidth, K = 8, 256   dse -m sweep=railonly_bandwidth
    fig10  iteration time and relative performance to the ideal vs global batch  dse -m sweep=railonly_batch

Modules: `common` (labels, colours, row selection), `seed001` (Fig. 4, 5, A4), `heatmaps`
(Fig. A5, A6), `railonly` (Fig. 8-10). `dse report` draws one from the command line, and the Hydra
callback `dse.results.report.DrawFigures` draws some when a sweep ends.
"""

from dse.figures.common import DPI, METRICS, STRATEGY_CHOICES, MissingData
from dse.figures.heatmaps import figA5, figA6
from dse.figures.railonly import fig8, fig9, fig10
from dse.figures.seed001 import fig4, fig5, figA4

#: figure name -> (function, the sweep whose dataset it draws)
FIGURES = {
    "fig4": (fig4, "fig4"),
    "fig5": (fig5, "seed001"),
    "figA4": (figA4, "seed001"),
    "figA5": (figA5, "fig_a5"),
    "figA6": (figA6, "fig_a6"),
    "fig8": (fig8, "railonly_k"),
    "fig9": (fig9, "railonly_bandwidth"),
    "fig10": (fig10, "railonly_batch"),
}

__all__ = ["DPI", "FIGURES", "METRICS", "STRATEGY_CHOICES", "MissingData", "fig4", "fig5", "figA4", "figA5",
           "figA6", "fig8", "fig9", "fig10"]
