"""The host's floor under dropless MoE blocks (`Profile.moe_dropless`, `SystemSpec.host_moe_time`): a
stage's MoE blocks take at least the host's time to issue them, each microbatch. Expected values are
closed forms: where the host sets the pace, raising its time per block by dh adds (m + n_p - 1) L_s dh
to the iteration (m microbatches on the busiest stage and n_p - 1 more in the 1F1B bubble, L_s blocks a
stage), 4/3 of that under full recomputation (the forward issued again); below the GPU's time nothing
changes; token drop, a dense model and a system without a host time have no floor."""

from __future__ import annotations

from dataclasses import asdict

import pytest

import dse
from dse.spec.specs import SpecError
from dse.truth.calibrate import fitted_fields, run_tags
from kernels.params import PROFILES
from kernels.stage import HOST_FORWARD_SHARE

DEFAULT = PROFILES["default"]
#: The presets' own efficiencies and no host time: the default profile's calibration carries one, which a
#: host time equal to the preset's (0) would take (`dse.truth.calibration.user_fields`).
UNCALIBRATED = DEFAULT._replace(calibration="none")
MODEL = "qwen3_30b_a3b"  # 48 MoE blocks, none dense
POINT = dict(nvs_size=8, strategy="tp1d", global_batch=64, n1=1, n_p=1, n_d=8, nvs_d=8, ep=8, microbatch=1,
             recompute="none", zero=1, interleave=1)


def run(host: float, model=MODEL, profile=DEFAULT, **kw):
    system = asdict(dse.load_system("dgx_b200"))
    system["host_moe_time"] = host
    return dse.evaluate(model=model, system=system, **{**POINT, **kw}, profile=profile)


def test_without_a_host_time_or_under_token_drop_nothing_waits():
    base = run(0.0, profile=UNCALIBRATED)
    assert base["t_host"] == 0.0
    dropped = run(1.0, profile=UNCALIBRATED._replace(moe_dropless=False))
    assert dropped["iteration_time"] == base["iteration_time"] and dropped["t_host"] == 0.0
    assert run(1.0, model="llama3_8b", ep=1)["t_host"] == 0.0


def test_a_host_faster_than_the_gpu_changes_nothing():
    assert run(1e-6, profile=UNCALIBRATED)["iteration_time"] == run(0.0, profile=UNCALIBRATED)["iteration_time"]
    assert run(1e-6)["t_host"] == 0.0


@pytest.mark.parametrize("n_p, n_d, recompute", [(1, 8, "none"), (2, 4, "none"), (1, 8, "full")])
def test_a_host_bound_stage_takes_the_hosts_time(n_p, n_d, recompute):
    """Both host times far above the GPU's: the iteration grows by (m + n_p - 1) L_s dh (times 1 + 1/3
    under full recomputation), and the parts still add up to it."""
    kw = dict(n_p=n_p, n_d=n_d, ep=n_d, nvs_d=n_d, recompute=recompute)
    slow, slower = run(0.5, **kw), run(0.75, **kw)
    m, blocks = 64 // n_d, 48 // n_p
    issue = 1.0 + (HOST_FORWARD_SHARE if recompute == "full" else 0.0)
    assert slower["iteration_time"] - slow["iteration_time"] == pytest.approx(
        (m + n_p - 1) * blocks * 0.25 * issue, rel=1e-9)
    assert slower["t_host"] - slow["t_host"] == pytest.approx(m * blocks * 0.25 * issue, rel=1e-9)
    parts = [k for k in slower if k.startswith("t_")]
    assert sum(slower[k] for k in parts) == pytest.approx(slower["iteration_time"], rel=1e-12)
    assert slower["memory"] == run(0.0, **kw)["memory"]  # a wait holds nothing


def test_the_host_time_is_a_checked_system_field(capsys):
    from dse.cli import main

    with pytest.raises(SpecError, match=r"^system.host_moe_time = -0.001"):
        run(-0.001)
    args = ["eval", f"model={MODEL}", "system=dgx_b200", "strategy=tp1d", "n_d=8", "nvs1=1", "nvs_p=1", "nvs_d=8",
            "global_batch=64", "ep=8", "microbatch=1", "recompute=none", "zero=1"]
    assert main(args + ["system.host_moe_time=0.02"]) == 0
    out = capsys.readouterr().out
    waited = next(line for line in out.splitlines() if line.strip().startswith("waiting for the host"))
    seconds = float(waited.split(")")[1].split()[0])
    # the command prints the engine's wait: 8 microbatches of 48 blocks at 20 ms, less the GPU's time on them
    expected = run(0.02)["t_host"]
    assert 0.0 < expected < 8 * 48 * 0.02 and seconds == pytest.approx(expected, rel=1e-5)


def test_only_dropless_moe_runs_fit_the_host_time():
    """A calibration fits host_moe_time only from MoE runs routed dropless (`run_tags`)."""
    from helpers import fake_call

    tags = run_tags(["fp8", "bf16", "mxfp8"], [fake_call(False, True), fake_call(True, False), fake_call(True, True)])
    assert tags == ["fp8", "bf16+moe", "mxfp8+moe+dropless"]
    assert "host_moe_time" not in fitted_fields(tags[:2]) and "host_moe_time" in fitted_fields(tags)
    assert "fp8_eff" in fitted_fields(["mxfp8", "mxfp8+moe+dropless"]) and "fp4_eff" not in fitted_fields(tags)
    assert "fp8_eff" not in fitted_fields(["bf16", "mxfp8+moe+dropless"])  # MoE runs move the host time only


def test_a_measured_runs_blank_capacity_factor_is_dropless():
    from dse.truth.measured import plan, run_profile
    from helpers import packaged_runs

    runs = packaged_runs("nvidia_perf_moe.csv")
    cells = dict(zip(runs.rows["row"].to_list(), runs.rows["capacity_factor"].to_list()))
    calls = plan(runs)
    assert {c.dropless for c in calls} == {True, False}
    for call in calls:
        assert all((cells[r] is None) == call.dropless for r in call.rows)
        assert run_profile("default", call).moe_dropless == call.dropless
