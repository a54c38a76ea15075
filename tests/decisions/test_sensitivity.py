"""Sensitivities: jax.grad elasticities against central finite differences of `dse.evaluate`."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import dse
from dse.decisions.sensitivity import CONTINUOUS, NOT_CONTINUOUS, analyse, check_fields, resolve_point, sensitivity
from dse.spec.specs import SpecError
from kernels.params import PROFILES

# tensor parallelism in the domain, the pipeline over two domains' NVLink... and data parallelism on
# the NIC: every kind of term is present (llama3_8b, 64 H200 in domains of 8)
POINT = dict(model="llama3_8b", system="h200", nvs_size=8, strategy="tp1d", n1=4, n_p=2, n_d=8, microbatch=1,
             nvs1=4, nvs2=1, nvs_p=2, nvs_d=1)


@pytest.fixture(scope="module")
def point():
    return resolve_point(**POINT)


def _log_time(point, field, factor):
    """ln T by `dse.evaluate` (no gradient), the field multiplied by `factor`; the system is the one the
    kernels saw (calibrated), so the profile's calibration is not applied again."""
    s = point.system.replace(**{field: getattr(point.system, field) * factor})
    prof = PROFILES["default"]._replace(calibration="none")
    r = dse.evaluate(model=point.model, system=s, strategy=point.strategy, profile=prof,
                     global_batch=point.global_batch, network=point.network, **point.config())
    return math.log(r["iteration_time"])


def test_gradient_matches_central_differences(point):
    res = analyse(point)
    h = 1e-4
    checked = 0
    for row in res.frame.iter_rows(named=True):
        f, e = row["field"], row["elasticity"]
        if row["value"] <= 0:
            assert e == 0.0
            continue
        base = _log_time(point, f, 1.0)
        down = _log_time(point, f, math.exp(-h))
        try:
            up = _log_time(point, f, math.exp(h))
        except SpecError:  # a fraction at its top, 1 (fp8_rowwise_eff): the backward difference alone
            bwd = (base - down) / h
            assert abs(e - bwd) <= 1e-3 * abs(bwd) + 1e-9, f
            continue
        fd = (up - down) / (2 * h)
        fwd, bwd = (up - base) / h, (base - down) / h
        assert abs(fwd - bwd) <= 1e-3 * abs(fd) + 1e-9, f"{f}: at a kink of the model"
        if abs(fd) < 1e-9:
            assert abs(e) < 1e-9, f
            continue
        assert e == pytest.approx(fd, rel=1e-6), f
        checked += 1
    assert checked >= 10  # compute, memory, NVLink and NIC fields all moved the time


def test_finite_change_is_the_kernels_at_ten_percent(point):
    res = analyse(point, ["hbm_bandwidth", "ib_bandwidth", "matrix_flops"])
    for row in res.frame.iter_rows(named=True):
        exact = math.exp(_log_time(point, row["field"], 1.1) - _log_time(point, row["field"], 1.0)) - 1.0
        assert row["time_change_10pct_exact"] == pytest.approx(exact, rel=1e-9, abs=1e-15)
        assert row["time_change_10pct"] == pytest.approx(1.1 ** row["elasticity"] - 1.0, rel=1e-12)


def test_capacity_is_a_constraint_with_its_headroom(point):
    row = analyse(point, ["hbm_capacity"]).frame.row(0, named=True)
    assert row["elasticity"] == 0.0 and row["constraint"]
    assert row["headroom"] == pytest.approx(1.0 - point.row["memory"] / 141.0, rel=1e-12)


def test_objective_hook(point):
    # a cost proportional to T x matrix_flops: its elasticity is the time's, plus 1 for matrix_flops
    res = analyse(point, ["matrix_flops", "hbm_bandwidth"],
                  objective=lambda m, s: m.iteration_time[0] * s.matrix_flops, objective_name="cost")
    for row in res.frame.iter_rows(named=True):
        extra = 1.0 if row["field"] == "matrix_flops" else 0.0
        assert row["elasticity_cost"] == pytest.approx(row["elasticity"] + extra, rel=1e-9)


def test_default_configuration_is_the_search_optimum():
    frame = dse.search(model="llama3_8b", system="h200", nvs_size=8, strategy="tp1d", n_gpus=16, top_k=1)
    p = resolve_point(model="llama3_8b", system="h200", nvs_size=8, strategy="tp1d", n_gpus=16)
    assert p.searched
    assert p.row["iteration_time"] == pytest.approx(frame["iteration_time"][0], rel=1e-12)
    out = sensitivity(model="llama3_8b", system="h200", nvs_size=8, strategy="tp1d", n_gpus=16,
                      fields=["matrix_flops", "hbm_bandwidth"])
    assert out["field"].to_list() == sorted(["matrix_flops", "hbm_bandwidth"],
                                            key=lambda f: -abs(out.filter(out["field"] == f)["elasticity"][0]))


@pytest.mark.parametrize("fields, word", [(["nvs_size"], "not a continuous"), (["hbm_bandwith"], "not a system field"),
                                          ([], "at least one")])
def test_bad_fields(fields, word):
    with pytest.raises(SpecError, match=word):
        check_fields(fields)


def test_every_continuous_field_is_a_system_field():
    assert set(CONTINUOUS) <= set(dse.SystemSpec.__dataclass_fields__)
    # every numeric field of a system is either differentiated or said why not
    numeric = {f.name for f in dataclasses.fields(dse.SystemSpec) if f.type in ("float", "int", float, int)}
    assert numeric == set(CONTINUOUS) | set(NOT_CONTINUOUS)
    assert np.all([f != "nvs_size" for f in CONTINUOUS])


def test_command_bad_field_is_one_line(capsys):
    from dse.cli import main

    assert main(["sensitivity", "model=llama3_8b", "n_gpus=64", "sensitivity.fields=[nvs_size]"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "nvs_size" in err and "matrix_flops" in err


def test_command_prints_the_ranked_words(capsys):
    from dse.cli import main

    argv = ["sensitivity", "model=llama3_8b", "system=h200", "system.nvs_size=8", "strategy=tp1d", "n1=4", "n_p=2",
            "n_d=8", "nvs1=4", "nvs_p=2", "nvs_d=1", "sensitivity.fields=[hbm_bandwidth,matrix_flops,hbm_capacity]"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("+10%")]
    assert [ln.split(":")[0] for ln in lines] == ["+10% tensor-core FLOP rate", "+10% HBM bandwidth"]
    assert "HBM capacity: no effect on time" in out and "3 fields by jax.jacfwd" in out


def _log_cost(point, field, factor, economics):
    """ln cost per run by `dse.evaluate` and its cost columns (`dse.results.economics`), the field scaled."""
    s = point.system.replace(**{field: getattr(point.system, field) * factor})
    prof = PROFILES["default"]._replace(calibration="none")
    r = dse.evaluate(model=point.model, system=s, strategy=point.strategy, profile=prof, economics=economics,
                     global_batch=point.global_batch, network=point.network, **point.config())
    return math.log(r["cost_per_run_usd"])


def test_cost_elasticity_matches_central_differences_of_the_cost_columns(point):
    """Owned H100-priced cluster: the cost per run moves with the time (hours) and with the
    utilisation (energy), so its elasticities differ from the time's; each matches central finite
    differences of the cost columns `dse.evaluate` computes."""
    from dse.decisions.sensitivity import cost_objective

    res = analyse(point, ["matrix_flops", "hbm_bandwidth", "ib_bandwidth", "nvlink_bandwidth"],
                  objective=cost_objective(point, "h100"), objective_name="cost")
    h = 1e-4
    differs = 0
    for row in res.frame.iter_rows(named=True):
        f = row["field"]
        fd = (_log_cost(point, f, math.exp(h), "h100") - _log_cost(point, f, math.exp(-h), "h100")) / (2 * h)
        assert row["elasticity_cost"] == pytest.approx(fd, rel=1e-5, abs=1e-9), f
        differs += abs(row["elasticity_cost"] - row["elasticity"]) > 1e-4
    assert differs >= 1  # energy follows the utilisation, not only the hours


def test_rented_cost_has_the_time_elasticity(point):
    from dse.decisions.sensitivity import cost_objective

    rental = {"name": "h100", "pricing": "rental"}
    res = analyse(point, ["matrix_flops", "hbm_bandwidth"], objective=cost_objective(point, rental),
                  objective_name="cost")
    for row in res.frame.iter_rows(named=True):
        assert row["elasticity_cost"] == pytest.approx(row["elasticity"], rel=1e-9, abs=1e-12)


def test_no_prices_no_cost_column():
    frame = sensitivity(**POINT, fields=["matrix_flops"], economics={"name": "h200", "pricing": "ownership"})
    assert "elasticity_cost" not in frame.columns  # h200 has no public purchase price
