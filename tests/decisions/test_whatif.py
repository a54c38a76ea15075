"""Failure what-ifs and goodput against closed forms and hand-computed values."""

from __future__ import annotations

import math

import pytest

import dse
from dse.spec.specs import SpecError, load_model, load_system
from dse.decisions.whatif import (LLAMA3_FAILURES_PER_GPU_HOUR, Scenario, best_under, expected_training_days, goodput,
                        under, young_daly_interval)

MODEL = "llama3_8b"


def _kw(system):
    return dict(model=load_model(MODEL), system=system, strategy="tp1d", profile="default", global_batch=4096,
                network="two_tier")


def _row(system, **point):
    return dse.evaluate(**_kw(system), **point)


def test_young_daly_by_hand():
    # 1e-5 failures per GPU-hour on 1000 GPUs: MTBF = 3600 / 0.01 = 360,000 s; C = 100 s, R = 300 s
    g = goodput(1e-5, 1000, restart_s=300.0, checkpoint_s=100.0)
    assert g.mtbf_s == pytest.approx(360000.0, rel=1e-12)
    assert g.interval_s == pytest.approx(8485.281374238571, rel=1e-12)  # sqrt(2 * 100 * 360000)
    # 1 - sqrt(2 C / M) - R / M = 1 - 0.0235702260 - 0.000833333
    assert g.goodput == pytest.approx(0.9755964407, rel=1e-9)
    assert g.failures_per_day == pytest.approx(0.24, rel=1e-12)
    assert young_daly_interval(100.0, 360000.0) == pytest.approx(8485.281374238571, rel=1e-12)
    for other in (0.5, 0.9, 1.1, 2.0):  # the interval is the optimum of the first-order goodput
        assert goodput(1e-5, 1000, 300.0, 100.0, other * g.interval_s).goodput < g.goodput


def test_goodput_edges_and_training_days():
    assert goodput(0.0, 1000, 300.0, 100.0).goodput == 1.0
    assert goodput(1e-5, 1000, 300.0, 100.0, checkpoint_interval_s=1000.0).goodput == pytest.approx(
        1 - 0.1 - (300 + 500) / 360000, rel=1e-12)
    dead = goodput(1.0, 100000, 600.0, 60.0)  # a failure every 0.036 s: no progress
    assert dead.goodput == 0.0 and expected_training_days(10.0, dead) == math.inf
    assert expected_training_days(10.0, 0.8) == pytest.approx(12.5)
    # Llama 3's 419 interruptions in 54 days on 16,384 GPUs: 7.76 per day
    assert goodput(LLAMA3_FAILURES_PER_GPU_HOUR, 16384, 600, 60).failures_per_day == pytest.approx(419 / 54)


def test_slow_node_on_a_compute_only_configuration_is_exactly_s():
    s = load_system("h200")
    row = _row(s, n1=1, n_p=1, n_d=1, microbatch=1)  # one GPU: no communication at all
    assert row["t_tp_comm"] == row["t_dp_comm"] == row["t_pp_comm"] == row["t_bubble"] == 0.0
    for f in (1.0, 1.3, 2.0):
        out = under(row, Scenario("slow_node", straggler=f), **_kw(s))
        assert out["iteration_time"] == pytest.approx(f * row["iteration_time"], rel=1e-12)


@pytest.mark.parametrize("link", ["nvlink", "nic"])
def test_degraded_link_changes_only_communication(link):
    s = load_system("h200", nvs_size=8)
    point = dict(n1=4, n_p=2, n_d=8, microbatch=1, nvs1=4, nvs2=1, nvs_p=2, nvs_d=1)
    healthy = _row(s, **point)
    sc = Scenario("degraded_link", link=link, link_factor=0.25)
    slow = dse.evaluate(**{**_kw(sc.apply(s)[0]), **point})
    for k in ("t_compute", "t_memory", "t_optimizer", "memory"):
        assert slow[k] == healthy[k], k
    # (one exposed term may shrink: slower tensor-parallel collectives hide more of the data-parallel ones)
    comm = ("t_tp_comm", "t_dp_comm", "t_pp_comm", "t_bubble")
    assert sum(slow[k] for k in comm) > sum(healthy[k] for k in comm)
    assert slow["iteration_time"] - healthy["iteration_time"] == pytest.approx(
        sum(slow[k] - healthy[k] for k in comm), rel=1e-9)
    assert under(healthy, sc, **_kw(s))["iteration_time"] == slow["iteration_time"]


def test_rail_lost_leaves_a_job_inside_one_domain_alone():
    s = load_system("h200", nvs_size=8)
    row = _row(s, n1=4, n_p=2, n_d=1, microbatch=1, nvs1=4, nvs2=1, nvs_p=2, nvs_d=1)
    assert under(row, Scenario("rail_lost"), **_kw(s))["iteration_time"] == row["iteration_time"]


def test_gpu_lost_spreads_the_domain_over_its_survivors():
    s = load_system("h200", nvs_size=8)
    row = _row(s, n1=4, n_p=2, n_d=8, microbatch=1, nvs1=4, nvs2=1, nvs_p=2, nvs_d=1)  # 8 GPUs per domain
    out = under(row, Scenario("gpu_lost"), **_kw(s))
    r = row["mem_reserved"]
    assert out["memory"] == pytest.approx(r + 8 / 7 * (row["memory"] - r), rel=1e-12)
    assert out["iteration_time"] > row["iteration_time"]
    alone = _row(s, n1=1, n_p=1, n_d=8, microbatch=1, nvs1=1, nvs2=1, nvs_p=1, nvs_d=1)  # one GPU per domain
    assert not under(alone, Scenario("gpu_lost"), **_kw(s))["feasible"]


def test_replan_is_no_worse_than_the_plan():
    s = load_system("h200", nvs_size=8)
    kw = _kw(s)
    plan = dse.search(model=MODEL, system=s, strategy="tp1d", n_gpus=16, top_k=1).row(0, named=True)
    for sc in (Scenario("gpu_lost"), Scenario("slow_node", straggler=1.5)):
        now = under(plan, sc, **kw)
        kw2 = {k: v for k, v in kw.items() if k != "strategy"}
        best, _ = best_under(sc, strategies=["tp1d"], n_gpus=16, **kw2)
        assert best is not None
        if now["feasible"]:
            assert best["iteration_time"] <= now["iteration_time"] * (1 + 1e-12)


@pytest.mark.parametrize("kw, word", [({"name": "meteor"}, "not a scenario"), ({"name": "slow_node", "straggler": 0.5}, "straggler"),
                                      ({"name": "degraded_link", "link": "pcie"}, "whatif.link"),
                                      ({"name": "degraded_link", "link_factor": 1.5}, "link_factor")])
def test_bad_scenarios(kw, word):
    with pytest.raises(SpecError, match=word):
        Scenario(**kw)


def test_command_unknown_scenario_is_one_line(capsys):
    from dse.cli import main

    assert main(["whatif", "model=llama3_8b", "n_gpus=64", "whatif.scenario=meteor"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "meteor" in err and "gpu_lost" in err


def test_whatif_frame_side_by_side():
    frame = dse.whatif("slow_node", model=MODEL, system="h200", nvs_size=8, strategy="tp1d", n_gpus=16,
                       failures_per_gpu_hour=1e-5, restart_s=300.0, checkpoint_s=100.0)
    assert frame["case"].to_list() == ["healthy, the plan", "scenario, the same plan", "scenario, best re-plan"]
    healthy, same, re = frame.iter_rows(named=True)
    assert same["iteration_time"] >= healthy["iteration_time"] and re["iteration_time"] <= same["iteration_time"]
    g = goodput(1e-5, 16, 300.0, 100.0).goodput
    assert healthy["training_days_failures"] == pytest.approx(healthy["training_days"] / g, rel=1e-12)
