"""The rail-only figures (`dse.figures.fig8`, `fig9`, `fig10`) and their sweeps
(conf/sweep/railonly_*.yaml): the jobs each sweep launches, and tiny datasets written by `run_job`
from those sweeps' own composed configs (few GPU counts, two HB-domain sizes, a 2 x 2 bandwidth
grid, two global batches)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from dse import figures
from dse.results import io
from dse.interface.app import run_job
from dse.commands import report as command
from dse.explore.ranking import best_rows
from dse.results.report import DrawFigures
from helpers import config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
K_AXIS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
IDEAL_K = (65536,)


def sweep_jobs(sweep: str) -> list[tuple]:
    """(model, global batch, network, HB-domain sizes, GPU counts) of every job the basic sweeper
    launches for `dse -m sweep=SWEEP`, and the figures its callback draws."""
    with initialize_config_module(config_module="dse.conf", version_base=None):
        hc = compose(config_name="config", overrides=[f"sweep={sweep}"], return_hydra_config=True).hydra
        params = OmegaConf.to_container(hc.sweeper.params) if hc.sweeper.params else {}
        drawn = list(hc.callbacks.figures.figures)
    axes = [[f"{k}={v}" for v in str(values).split(",")] for k, values in params.items()]
    jobs = []
    for combo in itertools.product(*axes):
        c = config(f"sweep={sweep}", *combo)
        n, k = c["n_gpus"], c["system"]["nvs_size"]
        jobs.append((c["model"]["name"], c["global_batch"], c["network"]["name"], tuple(k) if isinstance(k, list) else (k,),
                     tuple(n) if isinstance(n, list) else (n,)))
    return sorted(jobs), drawn


def test_each_sweep_pairs_models_with_their_batches_and_the_ideal_with_one_domain():
    jobs, drawn = sweep_jobs("railonly_k")
    counts = (16384, 32768, 65536)
    assert jobs == [("gpt3_1t", 4096, "any_to_any", IDEAL_K, counts), ("gpt3_1t", 4096, "rail_only", K_AXIS, counts),
                    ("gpt_146b", 1024, "any_to_any", IDEAL_K, counts), ("gpt_146b", 1024, "rail_only", K_AXIS, counts)]
    assert drawn == ["fig8"]

    jobs, drawn = sweep_jobs("railonly_batch")
    k_axis = tuple(2 ** i for i in range(3, 16))  # 8 ... 32768
    assert jobs == sorted([("gpt3_1t", b, net, ks, (32768,)) for b in (256, 512, 1024, 2048, 4096)
                           for net, ks in (("rail_only", k_axis), ("any_to_any", IDEAL_K))])
    assert drawn == ["fig10"]

    jobs, drawn = sweep_jobs("railonly_bandwidth")
    assert jobs == [("gpt3_1t", 4096, "rail_only", (8, 256), (32768,))] and drawn == ["fig9"]
    cfg = config("sweep=railonly_bandwidth")
    assert cfg["search"]["grid"] == {"nvlink_bandwidth": [300, 600, 900, 1200], "ib_bandwidth": "linspace:12.5:50:4"}
    for sweep in ("railonly_k", "railonly_bandwidth", "railonly_batch"):
        cfg = config(f"sweep={sweep}")
        assert (cfg["study"], cfg["system"]["name"], cfg["strategy"]["names"], cfg["profile"]["name"],
                cfg["search"]["top_k"]) == (sweep, "dgx_gh200", ["tp1d"], "railonly", 1)
    assert {figures.FIGURES[f][1] for f in ("fig8", "fig9", "fig10")} == {"railonly_k", "railonly_bandwidth",
                                                                          "railonly_batch"}


def _job(root: Path, study: str, sweep: str, *overrides: str) -> None:
    cfg = config(f"sweep={sweep}", f"study={study}", f"output.root={root}", "search.progress=false", "output.show=0",
                 *overrides)
    run_job(cfg, echo=lambda *a: None)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Datasets `k` (both models on 512 and 1024 GPUs, K = 8, 256 and the ideal), `k_noideal`
    (GPT-146B without its ideal), `bw` (GPT-1T, 1024 GPUs, K = 8, 256, C_F 300, 1200 x C_S 12.5,
    50 GB/s) and `batch` (GPT-1T, 1024 GPUs, batches 256, 512, K = 8, 256 and the ideal;
    `batch_noideal` lacks the ideal of batch 512)."""
    root = tmp_path_factory.mktemp("railonly")
    small = ("n_gpus=[512,1024]", "system.nvs_size=[8,256]")
    for workload in ("gpt3_1t_b4096", "gpt_146b_b1024"):
        _job(root, "k", "railonly_k", f"case/workload={workload}", "case/fabric=rail_only", *small)
        _job(root, "k", "railonly_k", f"case/workload={workload}", "case/fabric=ideal", "n_gpus=[512,1024]")
    _job(root, "k_noideal", "railonly_k", "case/workload=gpt_146b_b1024", "case/fabric=rail_only", *small)
    _job(root, "bw", "railonly_bandwidth", "n_gpus=1024", "search.grid.nvlink_bandwidth=[300,1200]",
         "search.grid.ib_bandwidth=[12.5,50]")
    for study in ("batch", "batch_noideal"):
        for batch in (256, 512):
            common = (f"global_batch={batch}", "n_gpus=1024")
            _job(root, study, "railonly_batch", *common, "system.nvs_size=[8,256]", "case/fabric=rail_only")
            if study == "batch" or batch == 256:
                _job(root, study, "railonly_batch", *common, "case/fabric=ideal")
    return root


def _png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 5000 and path.read_bytes()[:8] == PNG_MAGIC


def test_figure_functions_write_png(data, tmp_path):
    k, bw, batch = (io.scan(data / s) for s in ("k", "bw", "batch"))
    outs = [
        figures.fig8(k, tmp_path / "fig8.png"),
        figures.fig8(k, tmp_path / "fig8_one.png", models=["gpt_146b"], n_gpus=[1024]),
        figures.fig9(bw, tmp_path / "fig9.png"),
        figures.fig10(batch, tmp_path / "sub" / "fig10.png"),
        figures.fig10(batch, tmp_path / "fig10_k8.png", n_gpus=1024, ks=[8]),
    ]
    for out in outs:
        assert _png(out), out


def test_ideal_bounds_every_hb_domain_size(data):
    """The ideal (one HB domain, any_to_any) is never slower than a rail-only cluster of domains."""
    import polars as pl

    rows = io.scan(data / "k").filter(pl.col("feasible")).collect()
    best = best_rows(rows, ["model", "network", "nvs_size", "n_gpus"])
    ideal = best.filter(pl.col("network") == "any_to_any")
    rail = best.filter(pl.col("network") == "rail_only")
    assert ideal.height == 4 and rail.height == 8
    for model, n, t in ideal.select("model", "n_gpus", "iteration_time").iter_rows():
        k_times = rail.filter((pl.col("model") == model) & (pl.col("n_gpus") == n))["iteration_time"]
        assert len(k_times) == 2 and (k_times >= t).all()


@pytest.mark.parametrize("call, words", [
    (lambda d, o: figures.fig8(io.scan(d / "k_noideal"), o, models=["gpt_146b"]),
     ["has no rows for", "model=gpt_146b", "network=any_to_any"]),
    (lambda d, o: figures.fig8(io.scan(d / "k"), o, models=["gpt3_1t", "gpt_175b"]),
     ["has no rows for", "model=gpt_175b network=rail_only"]),
    (lambda d, o: figures.fig9(io.scan(d / "k"), o, model="gpt_146b", n_gpus=1024),
     ["1 nvlink_bandwidth x 1 ib_bandwidth", "fig9 needs a grid"]),
    (lambda d, o: figures.fig9(io.scan(d / "bw"), o, ks=(8, 32)),
     ["has no feasible rows", "nvs_size=32"]),
    (lambda d, o: figures.fig9(io.scan(d / "k"), o, model="gpt_146b"),
     ["GPU counts 512, 1024", "give n_gpus"]),
    (lambda d, o: figures.fig10(io.scan(d / "k"), o, model="gpt_146b", n_gpus=1024),
     ["has global batch 1024", "fig10 needs several"]),
    (lambda d, o: figures.fig10(io.scan(d / "batch_noideal"), o),
     ["has no rows for", "network=any_to_any", "global_batch=512"]),
    (lambda d, o: figures.fig10(io.scan(d / "batch"), o, ks=[8, 64]),
     ["has no feasible rows", "nvs_size=64"]),
])
def test_missing_groups_are_named(data, tmp_path, call, words):
    out = tmp_path / "x.png"
    with pytest.raises(figures.MissingData) as err:
        call(data, out)
    msg = str(err.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)
    assert not out.exists()


@pytest.mark.parametrize("figure, dataset", [("fig8", "k"), ("fig9", "bw"), ("fig10", "batch")])
def test_command_writes_png(data, tmp_path, capsys, figure, dataset):
    out = tmp_path / f"{figure}.png"
    extra = ["--n-gpus", "1024"] if figure == "fig10" else []
    assert command.main([figure, "--data", str(data / dataset), "--out", str(out), "--dpi", "60", *extra]) == 0
    assert _png(out) and str(out) in capsys.readouterr().out


@pytest.mark.parametrize("figure, dataset, words", [
    ("fig8", "k_noideal", ["has no rows for", "model=gpt3_1t network=rail_only"]),
    ("fig9", "k", ["GPU counts 512, 1024", "give n_gpus"]),
    ("fig10", "batch_noideal", ["network=any_to_any", "global_batch=512"]),
])
def test_command_names_what_is_missing_and_the_sweep(data, tmp_path, capsys, figure, dataset, words):
    out = tmp_path / "x.png"
    assert command.main([figure, "--data", str(data / dataset), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"dse report {figure}: error: dataset ")
    for w in words + [f"run: dse -m sweep={figures.FIGURES[figure][1]}"]:
        assert w in err, (w, err)
    assert not out.exists()


def test_sweep_callback_draws_fig8(data, tmp_path):
    cfg = OmegaConf.create({"output": {"root": str(data)}, "study": "k"})
    done = DrawFigures(["fig8", "fig10"], out_dir=str(tmp_path)).draw(cfg)
    assert done == [tmp_path / "fig8.png"] and _png(done[0])  # fig10 needs several batches: skipped
