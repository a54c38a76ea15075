"""Polars queries over a small every-row dataset, checked against plain group-bys."""

from __future__ import annotations

import polars as pl
import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from dse.results import io
from dse.results import query
from dse.interface.app import run_job
from dse.cli import main as cli


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    for system in ("a100", "b200"):
        with initialize_config_module(config_module="dse.conf", version_base=None):
            cfg = compose(config_name="config", overrides=[
                f"system={system}", "system.nvs_size=8", "strategy=all", "n_gpus=[256,512]", "output.rows=all",
                f"output.root={root}", "study=q", "search.progress=false"])
        data = OmegaConf.to_container(cfg, resolve=True)
        data.pop("sweep", None)
        run_job(data, echo=lambda *_: None)
    return root / "q"


def test_optimum_is_the_fastest_feasible_row_per_group(dataset):
    lf = io.scan(dataset)
    got = query.optimum(lf).collect().sort(list(query.GROUP))
    ref = (lf.filter(pl.col("feasible")).group_by(list(query.GROUP))
           .agg(pl.col("throughput").max()).collect().sort(list(query.GROUP)))
    assert got.select(list(query.GROUP)).equals(ref.select(list(query.GROUP)))
    assert (got["throughput"] == ref["throughput"]).all()
    assert len(got) >= 10  # A100 (80 GB) fits no tp1d configuration on 256 GPUs; every other group has one


def test_compare_systems_pivots_the_optimum(dataset):
    lf = io.scan(dataset)
    wide = query.compare_systems(lf, "gpt3_1t", "tp1d")
    assert wide.columns == ["n_gpus", "a100 NVS8", "b200 NVS8"]
    assert wide["n_gpus"].to_list() == [256, 512]
    best = query.optimum(lf, model="gpt3_1t", strategy="tp1d", system="b200").collect().sort("n_gpus")
    assert wide["b200 NVS8"].to_list() == best["training_days"].to_list()


def test_speedup_is_the_ratio_of_optima(dataset):
    lf = io.scan(dataset)
    sp = query.speedup(lf, baseline="tp1d").collect()
    best = query.optimum(lf).collect()
    for r in sp.iter_rows(named=True):
        key = (pl.col("system") == r["system"]) & (pl.col("n_gpus") == r["n_gpus"])
        base = best.filter(key & (pl.col("strategy") == "tp1d"))["throughput"].item()
        other = best.filter(key & (pl.col("strategy") == r["strategy"]))["throughput"].item()
        assert r["speedup"] == pytest.approx(other / base, rel=1e-15)
    assert set(sp["strategy"]) == {"tp2d", "summa"}


def test_best_nvs_names_the_optimum_placement_and_the_cost_of_the_next(dataset):
    lf = io.scan(dataset)
    out = query.best_nvs(lf, system="b200", strategy="tp1d").collect()
    best = query.optimum(lf, system="b200", strategy="tp1d").collect()
    assert out.select(list(query.PLACEMENT)).equals(best.select(list(query.PLACEMENT)))
    for r in out.iter_rows(named=True):
        same_cfg = lf.filter(pl.col("feasible") & (pl.col("system") == "b200") & (pl.col("strategy") == "tp1d")
                             & (pl.col("n_gpus") == r["n_gpus"])
                             & pl.all_horizontal([pl.col(c) == r[c] for c in query.CONFIG])).collect()
        others = same_cfg.filter(pl.any_horizontal([pl.col(p) != r[p] for p in query.PLACEMENT]))
        if others.is_empty():
            assert r["next_placement_loss"] is None
        else:
            assert r["next_placement_loss"] == pytest.approx(1 - others["throughput"].max() / r["throughput"])
            assert r["next_placement_loss"] >= 0


def test_unknown_filter_column_is_named(dataset):
    with pytest.raises(KeyError, match="nvs_sizes"):
        query.optimum(io.scan(dataset), nvs_sizes=8)


def test_query_command(dataset, capsys):
    assert cli(["query", str(dataset), "optimum", "--where", "system=b200", "--where", "n_gpus=512"]) == 0
    out = capsys.readouterr().out
    assert out.count("\nb200") + out.count("gpt3_1t  b200") >= 1 and "512" in out
    assert cli(["query", str(dataset), "compare", "--where", "model=gpt3_1t", "--where", "strategy=summa"]) == 0
    assert "a100 NVS8" in capsys.readouterr().out
    assert cli(["query", str(dataset), "optimum", "--where", "nvs_sizes=8"]) == 2
    assert "nvs_sizes" in capsys.readouterr().err
    assert cli(["query", str(dataset / "nope")]) == 2
