"""`dse plot` and `dse query DATASET pareto` over a small study of two systems, and a study that keeps
Pareto fronts (`search.keep=pareto`): figures written where asked, bad input one line with exit 2."""

from __future__ import annotations

import polars as pl
import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import dse
from dse.results import io
from dse.interface.app import run_job
from dse.cli import main as cli


def study(root, name, *extra):
    for system in ("dgx_h100", "dgx_b200"):
        with initialize_config_module(config_module="dse.conf", version_base=None):
            cfg = compose(config_name="config", overrides=[
                f"system={system}", "model=llama3_8b", "strategy=tp1d", "n_gpus=[8,16]", f"output.root={root}",
                f"study={name}", "search.progress=false", *extra])
        data = OmegaConf.to_container(cfg, resolve=True)
        data.pop("sweep", None)
        run_job(data, echo=lambda *_: None)
    return root / name


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return study(tmp_path_factory.mktemp("data"), "small", "output.rows=all")


def test_dataset_rows_carry_the_costs(dataset):
    lf = io.scan(dataset).filter(pl.col("feasible"))
    got = lf.select("system", "cost_per_run_usd", "power_kw", "n_gpus").collect()
    assert got["cost_per_run_usd"].null_count() == 0 and (got["cost_per_run_usd"] > 0).all()
    # B200 rows draw more per GPU than H100 rows (1000 W against 700 W TDP, conf/economics)
    per_gpu = got.group_by("system").agg((pl.col("power_kw") / pl.col("n_gpus")).min())
    w = dict(per_gpu.iter_rows())
    assert w["dgx_b200"] > w["dgx_h100"]


def test_query_pareto_prints_the_front(dataset, capsys):
    assert cli(["query", str(dataset), "pareto", "--objectives", "training_days,cost_per_run_usd"]) == 0
    out = capsys.readouterr().out
    front = dse.pareto(io.scan(dataset).filter(pl.col("feasible")), ["training_days", "cost_per_run_usd"])
    lines = [ln for ln in out.splitlines()[2:] if ln.strip()]
    assert len(lines) == len(front) > 0
    assert "cost_per_run_usd" in out.splitlines()[0] and "system" in out.splitlines()[0]


@pytest.mark.parametrize("argv, words", [
    (["pareto", "--objectives", "training_days,speed"], "objective 'speed': not a numeric column"),
    (["pareto", "--by", "colour"], "--by colour: not a column"),
])
def test_query_pareto_bad_input_is_one_line(dataset, capsys, argv, words):
    assert cli(["query", str(dataset), *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("kind, args, suffix", [
    ("line", ["--x", "n_gpus", "--y", "training_days", "--color", "system"], "png"),
    ("bar", ["--x", "n_gpus", "--y", "cost_per_run_usd", "--color", "system"], "png"),
    ("scatter", ["--x", "memory", "--y", "iteration_time", "--facet", "system"], "png"),
    ("pareto", ["--x", "training_days", "--y", "cost_per_run_usd", "--color", "system"], "svg"),
    ("breakdown", ["--facet", "system"], "png"),
])
def test_plot_writes_each_kind(dataset, tmp_path, capsys, kind, args, suffix):
    out = tmp_path / f"fig.{suffix}"
    assert cli(["plot", str(dataset), "--kind", kind, *args, "--out", str(out)]) == 0
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG") if suffix == "png" else b"<svg" in data[:2000]
    assert f"wrote {out}" in capsys.readouterr().out


def test_plot_title_names_the_study_and_its_swept_values(dataset):
    from dse.figures.study import title_of

    title = title_of(io.scan(dataset).collect(), "small")
    assert title.startswith("study small")
    assert "system=dgx_b200,dgx_h100" in title and "n_gpus=8,16" in title
    assert "hbm_capacity" not in title  # a field that differs between systems is not swept


def test_plot_default_output_is_under_outputs_figures(dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli(["plot", str(dataset), "--x", "n_gpus", "--y", "training_days", "--format", "svg"]) == 0
    assert (tmp_path / "outputs/figures/small_line_training_days_vs_n_gpus.svg").is_file()


@pytest.mark.parametrize("argv, words", [
    (["--kind", "pie", "--x", "n_gpus", "--y", "memory"], "--kind pie: unknown; valid: line, scatter, bar, pareto"),
    (["--x", "n_gpus", "--y", "speed"], "--y speed: not a column of the dataset"),
    (["--x", "n_gpus"], "--y: required for --kind line"),
    (["--x", "n_gpus", "--y", "memory", "--where", "system=none"], "has no feasible rows where system=none"),
    (["--kind", "breakdown", "--y", "throughput"], "--y throughput: a breakdown splits iteration_time"),
    (["--x", "n_gpus", "--y", "memory", "--format", "jpg"], "--format jpg: unknown; valid: png, svg"),
])
def test_plot_bad_input_is_one_line(dataset, tmp_path, capsys, argv, words):
    assert cli(["plot", str(dataset), *argv, "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_plot_of_a_missing_dataset_is_one_line(tmp_path, capsys):
    assert cli(["plot", str(tmp_path / "none"), "--x", "n_gpus", "--y", "memory"]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_a_study_that_keeps_fronts_writes_them(dataset, tmp_path):
    front = study(tmp_path, "fronts", "search.keep=pareto", "search.objectives=[iteration_time,cost_per_run_usd]")
    got = io.scan(front).collect()
    every = io.scan(dataset).filter(pl.col("feasible")).collect()
    expect = dse.pareto(every, ["iteration_time", "cost_per_run_usd"], by=["system", "n_gpus"])
    key = ["system", "n_gpus", "n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p", "nvs_d",
           "interleave", "recompute", "zero"]
    assert got.select(key).sort(key).equals(expect.select(key).sort(key))
    assert got.filter(pl.col("rank") == 1).height == 4  # one fastest row per system and GPU count


def test_plot_axes_carry_units_and_series_stay_distinguishable(dataset, tmp_path, monkeypatch):
    """Axis labels name the unit; two series of a line plot differ in dash and marker, so a series
    that coincides with another is still visible."""
    from matplotlib.figure import Figure

    from dse.figures.study import _label, plot

    assert _label("iteration_time") == "iteration time (s)" and _label("mem_weights") == "mem weights (GB per GPU)"
    assert _label("t_bubble") == "t bubble (s)" and _label("hbm_capacity") == "hbm capacity (GB)"
    seen, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (seen.append(self), save(self, *a, **k))[1])
    plot(io.scan(dataset), x="n_gpus", y="iteration_time", color="system", out=tmp_path / "lines.png")
    ax = seen[-1].axes[0]
    assert ax.get_xlabel() == "n gpus (GPUs)" and ax.get_ylabel() == "iteration time (s)"
    lines = [ln for ln in ax.get_lines() if ln.get_label() and not ln.get_label().startswith("_")]
    assert len(lines) == 2
    assert lines[0].get_linestyle() != lines[1].get_linestyle() and lines[0].get_marker() != lines[1].get_marker()
