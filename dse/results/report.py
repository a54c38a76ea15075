"""The Hydra callback that draws figures (`dse.figures`) from a sweep's dataset when the sweep ends.

Configured by a sweep, e.g. in conf/sweep/seed001.yaml:

    hydra:
      callbacks:
        figures:
          _target_: dse.results.report.DrawFigures
          figures: [fig5, figA4]
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from hydra.experimental.callback import Callback

from dse.figures import FIGURES, MissingData
from dse.results.io import DatasetError, scan
from dse.spec.checks import SpecError

log = logging.getLogger("dse")


class DrawFigures(Callback):
    """When a multirun (or a single run) ends, draw `figures` from its dataset,
    `<output.root>/<study>`.

    The PNGs go to `out_dir` (default outputs/figures/); a figure whose data is missing, or whose
    dataset holds a file it cannot read (`dse.results.io.DatasetError`, naming the file), is
    reported in the log and skipped, so the sweep's own results are never lost to a drawing problem.
    """

    def __init__(self, figures: Sequence[str], out_dir: str = "outputs/figures"):
        unknown = [f for f in figures if f not in FIGURES]
        if unknown:
            raise ValueError(f"figures = {unknown[0]!r}: not a figure; valid: {', '.join(FIGURES)}")
        self.figures = list(figures)
        self.out_dir = Path(out_dir)

    def draw(self, config) -> list[Path]:
        root = Path(str(config.output.root)) / str(config.study)
        done = []
        for name in self.figures:
            try:
                path = FIGURES[name][0](scan(root), self.out_dir / f"{name}.png")
            except (MissingData, FileNotFoundError, DatasetError, SpecError) as err:  # a file it cannot read: named
                log.warning("%s not drawn: %s", name, err)
                continue
            log.info("%s -> %s", name, path)
            done.append(path)
        return done

    def on_multirun_end(self, config, **kwargs) -> None:
        self.draw(config)

    def on_run_end(self, config, **kwargs) -> None:
        self.draw(config)
