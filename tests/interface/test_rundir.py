"""A refused `dse` job leaves nothing under outputs/ (`dse.interface.rundir`): Hydra's run directory,
its `.hydra/` files and log, and the folders created for them are removed; whatever was there
before the command stays. A job that runs keeps its directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dse.interface import rundir

DSE = [sys.executable, "-m", "dse.cli"]
JOB = ["model=llama3_8b", "system=dgx_h100", "n_gpus=64", "strategy=tp1d", "search.progress=false"]


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` (relative) -> a file's contents, None for a directory."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def dse(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(DSE + [*JOB, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("override, error", [
    ("profile.precision=nvfp4", "dse: error: profile.precision = nvfp4: system 'dgx_h100' has no NVFP4 rate"),
    ("n_gpus=-1", "dse: error: n_gpus = -1: must be an integer >= 1"),
    ("system.hbm_capacity=0", "dse: error: system.hbm_capacity = 0.0: must be in"),
])
def test_a_refused_run_leaves_nothing_new(tmp_path, override, error):
    out = dse(tmp_path, override)
    assert out.returncode == 2 and out.stderr.startswith(error) and out.stderr.count("\n") == 1, out.stderr
    assert list(tmp_path.iterdir()) == []  # no outputs/ at all: the command created it, so it is gone too


def test_a_refused_run_keeps_what_was_there(tmp_path):
    """Folders and files from before stay, the refused run's own are removed: in a fresh run directory
    beside an earlier run's, and in a run directory that already existed (hydra.run.dir given)."""
    earlier = tmp_path / "outputs" / "runs" / "earlier"
    (earlier / ".hydra").mkdir(parents=True)
    (earlier / ".hydra" / "config.yaml").write_text("earlier: 1\n")
    (earlier / "app.log").write_text("an earlier run\n")
    (tmp_path / "outputs" / "README.md").write_text("kept\n")
    before = tree(tmp_path)
    assert dse(tmp_path, "profile.precision=nvfp4").returncode == 2
    assert tree(tmp_path) == before
    mine = tmp_path / "outputs" / "runs" / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    before = tree(tmp_path)
    assert dse(tmp_path, "profile.precision=nvfp4", f"hydra.run.dir={mine}").returncode == 2
    assert tree(tmp_path) == before  # no .hydra/ nor app.log added to it


def test_a_run_keeps_its_directory(tmp_path):
    out = dse(tmp_path, "output.write=false")
    assert out.returncode == 0, out.stderr[-2000:]
    runs = list((tmp_path / "outputs" / "runs").glob("*/*"))
    assert len(runs) == 1 and (runs[0] / ".hydra" / "config.yaml").is_file() and (runs[0] / "app.log").is_file()


def test_a_sweep_of_refused_jobs_leaves_nothing(tmp_path):
    out = subprocess.run(DSE + ["-m", *JOB, "system=a100,dgx_h100", "profile.precision=nvfp4"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and "dse -m: 2 jobs: 2 failed" in out.stdout, out.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


# the same rules on directories alone, without Hydra

def test_discard_removes_a_new_run_directory_and_the_folders_created_for_it(tmp_path):
    run = tmp_path / "outputs" / "runs" / "day" / "time"
    (tmp_path / "outputs").mkdir()
    rundir.remember(run)
    (run / ".hydra").mkdir(parents=True)
    (run / "app.log").write_text("")
    rundir.discard(run)
    rundir.tidy()
    assert tree(tmp_path) == {"outputs": None}


def test_discard_keeps_an_existing_run_directory_but_what_it_added(tmp_path):
    run = tmp_path / "run"
    (run / "old").mkdir(parents=True)
    rundir.remember(run)
    (run / ".hydra").mkdir()
    (run / "app.log").write_text("")
    rundir.tidy([str(run)])
    assert tree(tmp_path) == {"run": None, "run/old": None}


def test_a_sweep_keeps_its_good_jobs_and_drops_the_refused(tmp_path):
    sweep = tmp_path / "multirun" / "sweep"
    rundir.remember(sweep)
    for job in ("0", "1"):
        (sweep / job / ".hydra").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("")
    rundir.tidy([str(sweep / "0")])
    assert sorted(tree(tmp_path)) == ["multirun", "multirun/sweep", "multirun/sweep/1", "multirun/sweep/1/.hydra",
                                      "multirun/sweep/multirun.yaml"]
    rundir.remember(sweep / "next")  # a sweep of refused jobs only: its multirun.yaml goes too
    (sweep / "next" / "0").mkdir(parents=True)
    (sweep / "next" / "multirun.yaml").write_text("")
    rundir.tidy([str(sweep / "next" / "0")])
    assert not (sweep / "next").exists() and (sweep / "1").is_dir()


def test_a_directory_not_noted_is_never_removed(tmp_path):
    (tmp_path / "x").mkdir()
    rundir.tidy([str(tmp_path / "x")])
    assert (tmp_path / "x").is_dir()
    assert rundir.job_dir() == "" and rundir.traceback_note() == ""  # no Hydra context
