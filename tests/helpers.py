"""Helpers several test modules share: a composed config, and the CSVs of measured runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import numpy as np
import polars as pl

import dse.truth.measured as dm
from kernels.params import Candidates


def first(x) -> float:
    """The first element of a kernel output, as a Python float."""
    return float(np.asarray(x).reshape(-1)[0])


def one_candidate(defaults: dict, **kw) -> Candidates:
    """A one-row `Candidates` of `defaults` with the keyword changes (every field given)."""
    cand = {**defaults, **kw}
    return Candidates(*(np.array([cand[k]]) for k in Candidates._fields))


def config(*overrides: str) -> dict:
    with initialize_config_module(config_module="dse.conf", version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides))
    data = OmegaConf.to_container(cfg, resolve=True)
    data.pop("sweep", None)
    return data


#: The columns of the CSVs the tests write: the schema's required ones, interleave (optional) and a label.
HEADER = ("model", "heads", "hidden", "layers", "ffn", "seq_len", "vocab", "tp", "pp", "dp", "gpus", "global_batch",
          "micro_batch", "interleave", "recompute", "sequence_parallel", "gpu", "measured_iter_s", "source")
#: A valid run (Korthikanti et al. 2022 Table 5, 22B, selective recompute): column -> text.
GOOD = dict(model="m22b", heads="64", hidden="6144", layers="48", ffn="24576", seq_len="2048", vocab="51200",
            tp="8", pp="1", dp="1", gpus="8", global_batch="4", micro_batch="4", interleave="1",
            recompute="selective", sequence_parallel="true", gpu="A100-80GB", measured_iter_s="1.10",
            source="test")


def write_csv(path: Path, rows, header=HEADER) -> Path:
    lines = [",".join(header)] + [",".join(str(r.get(c, "")) for c in header) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def packaged_runs(name: str, *where, one_per: tuple[str, ...] = ()) -> dm.MeasuredRuns:
    """The packaged measured-runs CSV `name` as read (its reading errors kept), with only the rows
    the polars expressions `where` select and, with `one_per`, only the first row (in CSV order) of
    each distinct combination of those columns. Predicting it compiles only the engine programs its
    rows need; a run's prediction does not depend on the other rows read with it."""
    runs = dm.read_runs(dm.PACKAGED_CSV.parent / name)
    rows = runs.rows.filter(*where) if where else runs.rows
    if one_per:
        rows = rows.filter(pl.struct(*one_per).is_first_distinct())
    return dataclasses.replace(runs, rows=rows)


def fake_call(moe: bool = False, dropless: bool = False, rowwise: bool = False, n: int = 1):
    """What `dse.truth.calibrate.run_tags` reads of an engine call (`dse.truth.measured.EngineCall`):
    its n rows, whether its model is a mixture of experts, routed dropless, scaled per row."""
    from types import SimpleNamespace

    arch = SimpleNamespace(moe=moe)
    return SimpleNamespace(rows=tuple(range(n)), dropless=dropless, rowwise=rowwise,
                           model=SimpleNamespace(arch=arch))
