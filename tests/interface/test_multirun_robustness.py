"""`dse -m` when a job fails: the other jobs keep their datasets and answers, every answer prints
whole, and the sweep ends with a summary of every job and exit status 2 (`dse.interface.app`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from dse.interface.app import Outcome, sweep_summary
from dse.results import io

DSE = [sys.executable, "-m", "dse.cli"]
SMALL = ["model=megatron_22b", "n_gpus=64", "strategy=tp1d", "profile.precision=fp8", "search.progress=false",
         "study=s"]
A100 = ("profile.precision = fp8: system 'a100' has no FP8 rate (system.matrix_flops_fp8 = 0); use another precision "
        "or set system.matrix_flops_fp8")


def dse(tmp: Path, *args: str, name: str = "run") -> subprocess.CompletedProcess:
    return subprocess.run(DSE + [*args, *SMALL, f"output.root={tmp / 'data'}", f"hydra.sweep.dir={tmp / name}"],
                          cwd=tmp, capture_output=True, text=True, timeout=600)


def dataset_files(tmp: Path) -> list[Path]:
    return sorted((tmp / "data" / "s").glob("model=*/system=*/strategy=*/*.parquet"))


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """A sweep over a system without an FP8 rate and one with (joblib launcher, two workers), the
    same sweep again, then a sweep of two good systems into the same study."""
    tmp = tmp_path_factory.mktemp("sweep")
    first = dse(tmp, "-m", "system=a100,dgx_h100", name="first")
    mtimes = [p.stat().st_mtime_ns for p in dataset_files(tmp)]
    again = dse(tmp, "-m", "system=a100,dgx_h100", name="again")
    unchanged = mtimes == [p.stat().st_mtime_ns for p in dataset_files(tmp)]
    good = dse(tmp, "-m", "system=dgx_h100,dgx_h200", name="good")
    return {"tmp": tmp, "first": first, "again": again, "good": good, "unchanged": unchanged}


def summary(out: str) -> list[str]:
    lines = out.splitlines()
    start = max(i for i, ln in enumerate(lines) if ln.startswith("dse -m: "))
    return lines[start:]


def test_the_refused_job_costs_the_good_one_nothing(sweeps):
    first, tmp = sweeps["first"], sweeps["tmp"]
    assert first.returncode == 2, first.stderr[-2000:]
    good = [p for p in dataset_files(tmp) if "system=dgx_h100" in str(p)]
    assert len(good) == 1 and io.verify(good[0]) is None
    assert not [p for p in dataset_files(tmp) if "system=a100" in str(p)]
    rows = pl.read_parquet(good[0])
    assert len(rows) == 10 and rows["system"].unique().to_list() == ["dgx_h100"]
    assert rows["precision"].unique().to_list() == ["fp8"]
    assert not list((tmp / "data").rglob("*.tmp-*"))


def test_the_refused_job_leaves_no_hydra_files_and_the_good_one_keeps_its_own(sweeps):
    sweep = sweeps["tmp"] / "first"
    assert not (sweep / "0").exists()  # system=a100, refused
    assert (sweep / "1" / ".hydra" / "config.yaml").is_file() and (sweep / "1" / "app.log").is_file()
    assert (sweep / "multirun.yaml").is_file()


def test_the_refusal_is_one_line_on_stderr(sweeps):
    err = sweeps["first"].stderr
    assert [ln for ln in err.splitlines() if "error" in ln.lower()] == [f"dse: error: [system=a100] {A100}"]
    assert "Traceback" not in err


def test_the_good_answer_is_printed_whole(sweeps):
    lines = sweeps["first"].stdout.splitlines()
    mine = [i for i, ln in enumerate(lines) if ln.startswith("[system=dgx_h100] ")]
    block = lines[mine[0]:mine[-1] + 1]  # one piece: nothing but its lines and blank ones in between
    assert all(ln.startswith("[system=dgx_h100] ") or not ln.strip() for ln in block)
    text = "\n".join(block)
    assert "megatron_22b tp1d on dgx_h100" in text and "[system=dgx_h100] best: tp1d" in text


def test_the_sweep_ends_with_every_job(sweeps):
    assert summary(sweeps["first"].stdout) == [
        "dse -m: 2 jobs: 1 succeeded, 1 failed",
        f"  #0 failed     system=a100: {A100}",
        "  #1 succeeded  system=dgx_h100: 1 file written",
    ]


def test_a_rerun_skips_the_complete_job(sweeps):
    again = sweeps["again"]
    assert again.returncode == 2
    assert summary(again.stdout) == [
        "dse -m: 2 jobs: 1 skipped, 1 failed",
        f"  #0 failed   system=a100: {A100}",
        "  #1 skipped  system=dgx_h100: dataset already complete",
    ]
    assert sweeps["unchanged"]
    assert "[system=dgx_h100] best: tp1d" in again.stdout  # the answer, from the complete file


def test_a_sweep_of_good_jobs_exits_0_with_its_summary(sweeps):
    good = sweeps["good"]
    assert good.returncode == 0, good.stderr[-2000:]
    assert summary(good.stdout) == [
        "dse -m: 2 jobs: 1 succeeded, 1 skipped",
        "  #0 skipped    system=dgx_h100: dataset already complete",
        "  #1 succeeded  system=dgx_h200: 1 file written",
    ]
    assert "dse: error" not in good.stderr
    assert {p.parent.parent.name for p in dataset_files(sweeps["tmp"])} == {"system=dgx_h100", "system=dgx_h200"}


def test_a_single_run_refuses_in_one_line_without_a_summary(tmp_path):
    out = dse(tmp_path, "system=a100")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == f"dse: error: {A100}"
    assert "dse -m:" not in out.stdout and not (tmp_path / "data").exists()
    assert not (tmp_path / "outputs").exists()  # nor Hydra's run directory, .hydra/ files and log


@pytest.mark.parametrize("states, hydra_status, status, head", [
    (["succeeded", "skipped"], 0, 0, "dse -m: 2 jobs: 1 succeeded, 1 skipped"),
    (["succeeded", "failed", "failed"], 0, 2, "dse -m: 3 jobs: 1 succeeded, 2 failed"),
    (["succeeded", "running"], 0, 2, "dse -m: 2 jobs: 1 succeeded, 1 failed"),
    (["succeeded"], 1, 1, "dse -m: 1 job: 1 succeeded"),
])
def test_the_summary_and_the_exit_status(states, hydra_status, status, head):
    outcomes = [Outcome(i, f"system=s{i}", s, "why" if s == "failed" else "") for i, s in enumerate(states)][::-1]
    text, got = sweep_summary(outcomes, hydra_status)
    lines = text.splitlines()
    assert got == status and lines[0] == head
    assert [ln.split()[0] for ln in lines[1:1 + len(states)]] == [f"#{i}" for i in range(len(states))]
    if "running" in states:
        assert lines[-1].endswith("system=s1: its process ended before the job finished (killed?)")
    assert ("the sweep stopped early (status 1)" in text) == bool(hydra_status)


def test_a_job_without_swept_values_is_named_so():
    text, status = sweep_summary([Outcome(0, "", "succeeded", "1 file written")])
    assert text.splitlines()[1] == "  #0 succeeded  (no swept values): 1 file written" and status == 0


