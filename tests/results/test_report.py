"""Figures from datasets (`dse.figures`, `dse report`): tiny real datasets written by `run_job`."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from dse import figures
from dse.results import io
from dse.interface.app import run_job
from dse.commands import report as command
from dse.explore.ranking import best_rows
from dse.spec.specs import CONF_DIR

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _preset(kind: str, name: str) -> dict:
    return yaml.safe_load((CONF_DIR / kind / f"{name}.yaml").read_text())


def _job(root: Path, study: str, model: str, strategies, n_gpus, system="b200", nvs=8, grid=None) -> None:
    cfg = {
        "study": study,
        "model": _preset("model", model),
        "system": {**_preset("system", system), "nvs_size": nvs},
        "network": {"name": "two_tier"},
        "strategy": {"names": list(strategies)},
        "profile": _preset("profile", "lbnl"),
        "search": {"top_k": 2, "progress": False, "grid": grid or {}},
        "output": {"root": str(root), "rows": "top", "write": True, "show": 0},
        "n_gpus": n_gpus,
        "global_batch": 4096,
    }
    run_job(cfg, echo=lambda *a: None)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Datasets `seed` (2 GPUs x 2 NVS sizes x 2 GPU counts, every strategy of GPT3-1T, 2D TP of
    ViT), `a6` (a 3 x 2 capacity x bandwidth grid), `a5` (a zipped 2 x 2 HBM x FLOP grid) and
    `one` (GPT3-1T with 1D TP only)."""
    root = tmp_path_factory.mktemp("data")
    for system in ("a100", "b200"):
        for nvs in (4, 8):
            _job(root, "seed", "gpt3_1t", ["tp1d", "tp2d", "summa"], [512, 1024], system, nvs)
            _job(root, "seed", "vit_era5", ["tp2d"], [512, 1024], system, nvs)
    a6 = {"hbm_capacity": [96, 192, 384], "hbm_bandwidth": [2000, 8000]}
    a5 = {"hbm": {"hbm_capacity": "path:80,192:2", "hbm_bandwidth": "path:1555,8000:2"},
          "flops": {"matrix_flops": [312, 2500], "vector_flops": [78, 339]}}
    for study, grid in (("a6", a6), ("a5", a5)):
        _job(root, study, "gpt3_1t", ["tp1d"], 1024, grid=grid)
        _job(root, study, "vit_era5", ["tp2d"], 1024, grid=grid)
    _job(root, "one", "gpt3_1t", ["tp1d"], 1024)
    return root


def _png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 5000 and path.read_bytes()[:8] == PNG_MAGIC


def test_figure_functions_write_png(data, tmp_path):
    seed, a5, a6 = (io.scan(data / s) for s in ("seed", "a5", "a6"))
    outs = [
        figures.fig4(seed, tmp_path / "fig4.png"),
        figures.fig4(seed, tmp_path / "fig4s.png", breakdown="seconds", strategy="best"),
        figures.fig5(seed, tmp_path / "fig5.png"),
        figures.figA4(seed, tmp_path / "figA4.png"),
        figures.figA5(a5, tmp_path / "figA5.png", n_gpus=1024),
        figures.figA6(a6, tmp_path / "figA6.png", n_gpus=1024, metric="iteration_time"),
        figures.figA6(a6, tmp_path / "sub" / "figA6_best.png", n_gpus=None, strategy="best"),
    ]
    for out in outs:
        assert _png(out), out


def test_optimum_is_fastest_feasible_row_per_group(data):
    rows = io.scan(data / "seed").filter(pl.col("feasible")).collect()
    best = best_rows(rows, ["model", "strategy", "system", "nvs_size", "n_gpus"])
    top = rows.group_by(["model", "strategy", "system", "nvs_size", "n_gpus"]).agg(pl.col("throughput").max())
    joined = best.join(top, on=["model", "strategy", "system", "nvs_size", "n_gpus"], suffix="_max")
    assert len(joined) == len(top) == len(best)
    assert (joined["throughput"] == joined["throughput_max"]).all()
    assert (best["rank"] == 1).all()


@pytest.mark.parametrize("figure, dataset", [("fig4", "seed"), ("fig5", "seed"), ("figA4", "seed"),
                                             ("figA5", "a5"), ("figA6", "a6")])
def test_command_writes_png(data, tmp_path, capsys, figure, dataset):
    out = tmp_path / f"{figure}.png"
    extra = ["--n-gpus", "1024"] if figure in ("figA5", "figA6") else []
    assert command.main([figure, "--data", str(data / dataset), "--out", str(out), "--dpi", "60", *extra]) == 0
    assert _png(out)
    assert str(out) in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["fig4", "--system", "h200"], ["has no rows for", "system=h200", "nvs_size=8", "run: dse -m sweep=fig4"]),
    (["fig4", "--data", "{a6}"], ["hardware grid", "system=b200", "run: dse -m sweep=fig4"]),
    (["figA4", "--data", "{one}"], ["has no rows for", "model=gpt3_1t strategy=summa", "run: dse -m sweep=seed001"]),
    (["figA4", "--data", "{a6}"], ["hardware grid", "run: dse -m sweep=seed001"]),
    (["figA6", "--n-gpus", "1024"], ["systems a100, b200", "run: dse -m sweep=fig_a6"]),
    (["figA5", "--data", "{a6}", "--n-gpus", "1024"], ["moving together", "run: dse -m sweep=fig_a5"]),
    (["figA6", "--data", "{a6}"], ["has no rows for", "n_gpus=8192", "run: dse -m sweep=fig_a6"]),
    (["fig5", "--data", "{missing}"], ["no such directory", "run: dse -m sweep=seed001"]),
])
def test_command_names_what_is_missing(data, tmp_path, capsys, argv, words):
    argv = [a.format(a6=data / "a6", one=data / "one", missing=data / "missing") for a in argv]
    if "--data" not in argv:
        argv += ["--data", str(data / "seed")]
    out = tmp_path / "x.png"
    assert command.main(argv + ["--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"dse report {argv[0]}: error: ")
    for w in words:
        assert w in err, (w, err)
    assert not out.exists()


def test_option_for_another_figure_is_refused(data, capsys):
    assert command.main(["fig5", "--data", str(data / "seed"), "--n-gpus", "8192"]) == 2
    assert "--n-gpus applies only to figA5, figA6" in capsys.readouterr().err


def test_infeasible_strategy_is_named(data, tmp_path):
    with pytest.raises(figures.MissingData, match="model=vit_era5 strategy=tp1d"):
        figures.fig4(io.scan(data / "seed"), tmp_path / "x.png", strategy="tp1d")


def test_sweep_callback_draws_its_figures(data, tmp_path):
    """The Hydra callback of the figure sweeps: drawn at the end, missing data logged and skipped."""
    from omegaconf import OmegaConf

    from dse.results.report import DrawFigures

    cfg = OmegaConf.create({"output": {"root": str(data)}, "study": "seed"})
    done = DrawFigures(["fig5", "figA6"], out_dir=str(tmp_path)).draw(cfg)
    assert done == [tmp_path / "fig5.png"] and _png(done[0])  # figA6 has no grid here: skipped
    assert not (tmp_path / "figA6.png").exists()
    with pytest.raises(ValueError, match="fig99"):
        DrawFigures(["fig99"])
