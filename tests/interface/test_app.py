"""The Hydra app: default run, dataset schema, rows modes, config errors, interrupted multiruns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

import dse
from dse.results import io
from dse.interface.app import run_job
from dse.explore.placement import enumerate_space
from dse.explore.space import Question
from dse.spec.specs import SpecError, load_model
from helpers import config

DSE = [sys.executable, "-m", "dse.cli"]


def dataset_files(root: Path) -> list[Path]:
    return sorted(root.glob("model=*/system=*/strategy=*/*.parquet"))


def test_default_command_writes_a_readable_dataset(tmp_path):
    """README's run command, as a newcomer runs it: `dse` with no arguments."""
    out = subprocess.run(DSE, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "best:" in out.stdout
    files = dataset_files(tmp_path / "outputs" / "data" / "default")
    assert {f.parent.name for f in files} == {"strategy=tp1d", "strategy=tp2d", "strategy=summa"}
    lf = pl.scan_parquet(str(tmp_path / "outputs/data/default/**/*.parquet"), hive_partitioning=True)
    df = lf.collect()
    expected = dict(io.schema())
    for col, dtype in expected.items():
        assert df.schema[col] == dtype, col
    assert {"model", "system", "strategy"} <= set(df.columns)
    assert df["model"].unique().to_list() == ["gpt3_1t"]
    assert df["system"].unique().to_list() == ["b200"]
    assert df["nvs_size"].unique().to_list() == [4]  # the B200 preset's: nothing in the study sets it
    assert df["n_gpus"].unique().to_list() == [4096]
    assert df.group_by("strategy").len()["len"].to_list() == [10, 10, 10]
    # the time components add up to the iteration time, memory parts to memory
    parts = sum(df[c] for c in ("t_compute", "t_memory", "t_tp_comm", "t_dp_comm", "t_pp_comm", "t_bubble", "t_optimizer"))
    assert ((parts - df["iteration_time"]).abs() <= 1e-12 * df["iteration_time"]).all()
    meta = io.read_metadata(files[0])
    assert meta["dse_version"] == dse.__version__ and meta["profile"] == "default"
    assert meta["config"]["model"]["name"] == "gpt3_1t"
    # running it again skips the complete jobs and rewrites nothing
    mtimes = [f.stat().st_mtime_ns for f in files]
    again = subprocess.run(DSE, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0
    assert [f.stat().st_mtime_ns for f in dataset_files(tmp_path / "outputs/data/default")] == mtimes
    assert "skipped" in again.stderr + again.stdout


def test_lbnl_job_reproduces_the_reference_optimum(tmp_path):
    cfg = config("profile=lbnl", "strategy=tp1d", "system.nvs_size=8", f"output.root={tmp_path}",
                 "search.progress=false")
    res = run_job(cfg, echo=lambda *_: None)
    df = pl.read_parquet(res.files[0])
    best = df.filter(pl.col("rank") == 1).row(0, named=True)
    # spec section 10: GPT3-1T tp1d, B200, NVS 8, 4096 GPUs
    assert (best["n1"], best["n_p"], best["n_d"], best["microbatch"]) == (4, 128, 8, 1)
    assert (best["nvs1"], best["nvs_p"], best["nvs_d"]) == (4, 2, 1)
    assert best["iteration_time"] == pytest.approx(9.039049610051995, rel=1e-12)
    assert best["microbatches"] == 512 and best["hbm_capacity"] == 192.0 and best["profile"] == "lbnl"


def test_rows_all_keeps_every_evaluated_row(tmp_path):
    cfg = config("strategy=tp1d", "n_gpus=256", f"output.root={tmp_path}", "output.rows=all",
                 "search.progress=false", "+search.grid.hbm_capacity=[96,192]")
    res = run_job(cfg, echo=lambda *_: None)
    df = pl.read_parquet(res.files[0])
    n = len(enumerate_space(Question(load_model("gpt3_1t"), "tp1d", 4096), 256, 4)["n1"])  # B200: NVS 4
    assert len(df) == 2 * n  # every candidate, for each of the two grid points
    assert sorted(df["hbm_capacity"].unique().to_list()) == [96.0, 192.0]
    assert df["rank"].null_count() == len(df)
    for cap, g in df.group_by("hbm_capacity"):
        assert (g["feasible"] == (g["memory"] <= cap[0])).all()


@pytest.mark.parametrize(
    "override, field",
    [
        ("strategy.names=[tp3d]", "strategy.names"),
        ("n_gpus=0", "n_gpus"),
        ("system.hbm_capacity=-1", "system.hbm_capacity"),
        ("profile.pipeline_ib_links_free=maybe", "profile.pipeline_ib_links_free"),
        ("output.rows=some", "output.rows"),
        ("+search.grid.nvs_size=[4,8]", "grid.nvs_size"),
    ],
)
def test_bad_config_is_one_line_naming_the_field(tmp_path, override, field):
    cfg = config(f"output.root={tmp_path}", override)
    with pytest.raises(SpecError) as err:
        run_job(cfg, echo=lambda *_: None)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(field)


def _sweep(root: Path) -> list[str]:
    return DSE + ["-m", "model=gpt3_1t", "system=a100,b200", "system.nvs_size=4,8", "strategy=tp1d",
                  "n_gpus=pow2:256:1024", "hydra/launcher=basic", "search.progress=false",
                  f"output.root={root}", "study=sweep"]


def _rows(root: Path) -> pl.DataFrame:
    return io.scan(root / "sweep").collect().sort(["job_id", "n_gpus", "rank"])


def test_interrupted_multirun_resumes_without_loss_or_duplicates(tmp_path):
    clean, broken = tmp_path / "clean", tmp_path / "broken"
    ref = subprocess.run(_sweep(clean), cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert ref.returncode == 0, ref.stderr[-2000:]
    expected = _rows(clean)
    assert len(dataset_files(clean / "sweep")) == 4

    proc = subprocess.Popen(_sweep(broken), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline and not dataset_files(broken / "sweep"):
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # a crash midway: some jobs done, the rest not
    proc.wait()
    done = dataset_files(broken / "sweep")
    assert 1 <= len(done) < 4, "the kill should land after the first job and before the last"

    again = subprocess.run(_sweep(broken), cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    got = _rows(broken)
    assert len(dataset_files(broken / "sweep")) == 4
    assert got.select(["job_id", "n_gpus", "rank"]).is_duplicated().sum() == 0
    assert got.drop([]).equals(expected)
    assert not list((broken / "sweep").rglob("*.tmp-*"))
