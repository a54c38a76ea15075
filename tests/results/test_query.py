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
                f"output.root={root}", "study=q", "search.progress=false",
                "profile.recompute=full"])  # one mode: every row is written, and the queries need no more
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


def test_every_numeric_column_has_a_unit():
    """`--metric` takes any numeric column, and its title names the unit: none may lack one."""
    from dse.results import units

    numeric = [c for c, t in io.schema().items() if t.is_numeric()]
    assert [c for c in numeric if units.unit(c) is None] == []
    assert units.label("iteration_time") == "iteration_time (s)" and units.header("cost_per_run_usd") == "cost_per_run_usd"
    assert units.header("memory") == "memory (GB per GPU)" and units.header("n_d") == "n_d"


def test_compare_names_its_metric_and_unit(dataset, capsys):
    """The pivot's values are one metric: the title above the table names it and its unit, the
    default (training_days) and every other numeric column alike."""
    from argparse import Namespace

    from dse.commands.query import answer
    from dse.results import units

    assert cli(["query", str(dataset), "compare", "--where", "model=gpt3_1t", "--where", "strategy=tp1d"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("training_days (days) of the fastest feasible configuration of gpt3_1t tp1d, per GPU count "
                        "(rows) and system and NVS size (columns)")
    assert lines[1].split()[:3] == ["n_gpus", "a100", "NVS8"]
    assert cli(["query", str(dataset), "compare", "--where", "model=gpt3_1t", "--where", "strategy=tp1d",
                "--metric", "throughput"]) == 0
    assert capsys.readouterr().out.startswith("throughput (samples/s) of the fastest feasible configuration")
    lf = io.scan(dataset)
    # one column of each kind (every numeric column has a unit: test_every_numeric_column_has_a_unit)
    for metric in ("iteration_time", "memory", "t_bubble", "mem_weights", "n_d", "hbm_capacity", "cost_per_run_usd",
                   "compute_utilisation", "error_band"):
        args = Namespace(question="compare", where=["model=gpt3_1t", "strategy=tp1d"], metric=metric)
        title = answer(lf, args)[4]
        assert title.startswith(f"{metric} ({units.unit(metric)}) of the fastest"), title
    assert cli(["query", str(dataset), "compare", "--where", "model=gpt3_1t", "--where", "strategy=tp1d",
                "--metric", "system"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dse query: error: --metric system: not a numeric column of the dataset; valid: ")
    assert err.count("\n") == 1 and "training_days" in err


@pytest.mark.parametrize("question, heads", [
    (["optimum"], ["iteration_time (s)", "throughput (samples/s)", "memory (GB per GPU)", "training_days"]),
    (["pareto", "--where", "system=a100", "--where", "n_gpus=256", "--where", "strategy=tp1d"],
     ["iteration_time (s)", "memory (GB per GPU)"]),
    (["speedup"], ["throughput (samples/s)", "tp1d throughput (samples/s)", "speedup over tp1d"]),
    (["nvs", "--where", "strategy=tp1d"], ["throughput (samples/s)", "next_placement_loss (% of throughput)"]),
    (["summary"], ["rows", "min n_gpus", "max n_gpus", "feasible rows"]),
])
def test_every_printed_number_has_its_unit_in_its_header(dataset, capsys, question, heads):
    """A number's column names its unit (`dse.results.units.header`), except the configuration's
    counts that `dse eval` takes by name and columns whose name ends with their unit."""
    from dse.results import units

    assert cli(["query", str(dataset), *question]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    cells = [h.strip() for h in header.split("  ") if h.strip()]
    assert all(h in cells for h in heads), cells
    for h in cells:
        bare = h.split(" (")[0]
        assert units.unit(bare) is None or h == units.header(bare) or h in heads, h


def test_a_misspelt_column_names_the_nearest(dataset, capsys):
    """A column that is not the dataset's names the columns that hold the word, or the nearest one,
    before the list of valid ones, in query and plot alike; a word near nothing names none."""
    assert cli(["query", str(dataset), "pareto", "--objectives", "training_days,cost"]) == 2
    err = capsys.readouterr().err
    assert "objective 'cost': not a numeric column of the rows; did you mean one of " in err
    named = err.split("did you mean one of ", 1)[1].split("?", 1)[0].split(", ")
    assert 1 < len(named) <= 3 and all("cost" in n for n in named), named
    assert cli(["query", str(dataset), "optimum", "--where", "sytem=b200"]) == 2
    assert "--where sytem: not a column of the dataset; did you mean system? columns: " in capsys.readouterr().err
    assert cli(["plot", str(dataset), "--kind", "line", "--x", "n_gpus", "--y", "trainig_days"]) == 2
    assert "--y trainig_days: not a column of the dataset; did you mean training_days? " in capsys.readouterr().err
    assert cli(["query", str(dataset), "compare", "--where", "model=gpt3_1t", "--where", "strategy=tp1d",
                "--metric", "zzz"]) == 2
    err = capsys.readouterr().err
    assert "--metric zzz: not a numeric column of the dataset; valid: " in err and "did you mean" not in err


def test_tp1d_context_parallel_columns_are_named_cp():
    """query's tables name tp1d's n2 cp, as the answers do (docs/models.md), and say so beside the
    2D strategies, whose n2 is tensor-parallel; without context parallelism nothing is renamed."""
    from dse.commands.query import context_heads

    only = pl.DataFrame({"strategy": ["tp1d", "tp1d"], "n2": [1, 4], "nvs2": [1, 4]})
    assert context_heads(only) == {"n2": "cp", "nvs2": "nvs_cp"}
    mixed = pl.concat([only, pl.DataFrame({"strategy": ["tp2d"], "n2": [2], "nvs2": [2]})])
    assert context_heads(mixed) == {"n2": "n2 (tp1d: cp)", "nvs2": "nvs2 (tp1d: nvs_cp)"}
    assert context_heads(pl.DataFrame({"strategy": ["tp1d", "tp2d"], "n2": [1, 2], "nvs2": [1, 2]})) == {}
