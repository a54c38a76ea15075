"""Co-design: the price model, the projection, and the gradient's point against a brute-force grid."""

from __future__ import annotations

import numpy as np
import pytest

from dse.decisions.codesign import PRICES, _project, check_bounds, codesign, price_per_gpu
from dse.spec.specs import SpecError, load_system

FIELDS = ["matrix_flops", "hbm_bandwidth"]
Q = dict(model="llama3_8b", system="h200", n_gpus=64, strategy="tp1d")


def test_prices_total_the_b200_quote():
    # 4.2 x 2500 + 1.3125 x 8000 + (7000/192) x 192 + (3500/900) x 900 + 24.5 x 100 + 1050 = 35,000
    assert price_per_gpu(load_system("b200")) == pytest.approx(35000.0, rel=1e-12)
    assert price_per_gpu(load_system("b200"), {"hbm_capacity": 0.0}) == pytest.approx(28000.0, rel=1e-12)
    assert PRICES["vector_flops"] == 0.0


def test_projection_is_the_nearest_feasible_point():
    rng = np.random.default_rng(1)
    lo, hi, scale = np.array([1.0, 2.0, 0.5]), np.array([4.0, 6.0, 3.0]), np.ones(3)
    a, budget = np.array([1.0, 2.0, 3.0]), 10.0
    for _ in range(20):
        y = rng.uniform(0, 8, 3)
        z = _project(y, lo, hi, a, budget, scale)
        assert np.all(z >= lo - 1e-12) and np.all(z <= hi + 1e-12) and a @ z <= budget + 1e-9
        samples = rng.uniform(lo, hi, (20000, 3))
        samples = samples[samples @ a <= budget]
        assert np.linalg.norm(z - y) <= np.min(np.linalg.norm(samples - y, axis=1)) + 1e-9


def test_gradient_matches_or_beats_the_grid():
    r = codesign(**Q, fields=FIELDS, steps=40, research_every=10, grid_points=5)
    assert r.ratio is not None and r.ratio >= 0.99
    f = r.final
    for k, (lo, hi) in check_bounds(FIELDS, None, load_system("h200")).items():
        assert lo <= f[k] <= hi
    assert r.path.height == 41 and r.path["research"].sum() == 5
    # the score of the final point is throughput per dollar of the cluster, recomputed by hand
    cost = 64 * price_per_gpu(load_system("h200").replace(**{k: f[k] for k in FIELDS}))
    assert f["cost_usd"] == pytest.approx(cost, rel=1e-12)
    assert f["score"] == pytest.approx(4096 / f["iteration_time"] / cost, rel=1e-12)


def test_budget_is_respected_for_time():
    budget = 1.3e6
    r = codesign(**Q, fields=FIELDS, objective="time", budget_usd=budget, steps=30, grid_points=5)
    assert r.path["cost_usd"].max() <= budget * (1 + 1e-9)
    assert r.ratio >= 0.99


@pytest.mark.parametrize("kw, word", [
    ({"fields": ["nvs_size"]}, "not a continuous"),
    ({"fields": ["hbm_bandwith"]}, "not a system field"),
    ({"bounds": {"matrix_flops": [2000, 500]}}, "inverted"),
    ({"bounds": {"nvlink_bandwidth": [1, 2]}}, "not one of codesign.fields"),
    ({"budget_usd": 1000.0}, "below the cheapest"),
    ({"objective": "speed"}, "codesign.objective"),
    ({"fields": ["compute_eff"]}, "calibration"),
])
def test_bad_input(kw, word):
    with pytest.raises(SpecError, match=word):
        codesign(**Q, **{"fields": FIELDS, **kw})


def test_command_bad_bounds_is_one_line(capsys):
    from dse.cli import main

    assert main(["codesign", "model=llama3_8b", "system=h200", "n_gpus=64",
                 "codesign.bounds.hbm_bandwidth=[9000,3000]"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "hbm_bandwidth" in err and "inverted" in err


def test_capacity_is_chosen_with_the_configuration():
    # capacity changes no time: the gradient alone would only shrink it to the first configuration's
    # memory; priced with each configuration, the pair matches or beats the grid
    r = codesign(**Q, fields=["matrix_flops", "hbm_capacity"], grid_points=5)  # the default 60 steps
    assert r.ratio >= 0.99
    assert r.final["hbm_capacity"] == pytest.approx(max(r.final["memory"], 141.0 / 2), rel=1e-12)


def test_log_scale_projection_is_the_nearest_feasible_point():
    from dse.decisions.codesign import _project_theta

    rng = np.random.default_rng(2)
    lo, span, a = np.array([500.0, 2000.0]), np.log(np.array([5.0, 5.0])), np.array([300.0, 80.0])
    budget = 900000.0
    for _ in range(20):
        y = rng.uniform(-0.3, 1.3, 2)
        z = _project_theta(y, np.zeros(2), np.ones(2), lo, span, a, budget)
        assert np.all(z >= -1e-12) and np.all(z <= 1 + 1e-12)
        assert a @ (lo * np.exp(span * z)) <= budget * (1 + 1e-9)
        samples = rng.uniform(0, 1, (40000, 2))
        samples = samples[(lo * np.exp(span * samples)) @ a <= budget]
        assert np.linalg.norm(z - y) <= np.min(np.linalg.norm(samples - y, axis=1)) + 1e-9
