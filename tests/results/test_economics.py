"""Cost, energy and power of a run (`dse.results.economics`), checked against hand-computed examples from the
cited prices of conf/economics/, and the columns in every result (evaluate, search, datasets)."""

from __future__ import annotations

import math

import polars as pl
import pytest

import dse
from dse.results import io
from dse.results.economics import ECONOMY_COLUMNS, EconomicsSpec, resolve_economics, with_cost_columns
from dse.explore.space import COLUMNS
from dse.spec.specs import SpecError


def rows(**over) -> pl.DataFrame:
    """One result row with round numbers: 1024 GPUs, 80% of the iteration in the model's own
    kernels (6 + 1 + 1 of 10 s), 30 days for the training set, a 1 MUSD / 50 kW network."""
    base = {"system": "dgx_h100", "n_gpus": 1024, "iteration_time": 10.0, "t_compute": 6.0, "t_memory": 1.0,
            "t_optimizer": 1.0, "training_days": 30.0, "network_cost": 1.0e6, "network_power": 50_000.0}
    base.update(over)
    return pl.DataFrame({k: [v] for k, v in base.items()})


def test_h100_ownership_by_hand():
    # conf/economics/h100.yaml: TDP 700 W, idle 80 W, host 575 W per GPU, 24,875 USD per GPU over 5
    # years, PUE 1.58, 0.0806 USD/kWh. Per GPU: 80 + 575 + 620 x 0.8 = 1151 W; the cluster
    # (1024 x 1151 + 50,000) x 1.58 = 1,941,225.92 W; 720 hours: 1397.6826624 MWh.
    # Cluster 1024 x 24,875 + 1,000,000 = 26,472,000 USD; amortised 26,472,000 x 720 / 43,800 =
    # 435,156.164 USD, electricity 1,397,682.66 kWh x 0.0806 = 112,653.223 USD.
    r = with_cost_columns(rows()).row(0, named=True)
    assert r["compute_utilisation"] == pytest.approx(0.8, rel=1e-15)
    assert r["power_kw"] == pytest.approx(1941.22592, rel=1e-12)
    assert r["energy_per_run_mwh"] == pytest.approx(1397.6826624, rel=1e-12)
    assert r["cluster_cost_usd"] == 26_472_000.0
    assert r["cost_per_run_usd"] == pytest.approx(435_156.1643835616 + 112_653.22258944, rel=1e-12)


def test_rental_is_gpu_hours_times_the_price():
    # h100.yaml rents at 3.0 USD per GPU-hour: 1024 x 720 x 3 = 2,211,840 USD; energy unchanged
    r = with_cost_columns(rows(), {"pricing": "rental"}).row(0, named=True)
    assert r["cost_per_run_usd"] == pytest.approx(2_211_840.0, rel=1e-15)
    assert r["energy_per_run_mwh"] == pytest.approx(1397.6826624, rel=1e-12)
    r = with_cost_columns(rows(), {"pricing": "rental", "gpu_hour_usd": 2.5}).row(0, named=True)
    assert r["cost_per_run_usd"] == pytest.approx(1024 * 720 * 2.5, rel=1e-15)


def test_b200_preset_by_hand():
    # b200.yaml: TDP 1000 W, idle 114 W, host 787.5 W, 64,375 USD per GPU; idle GPUs (u = 0) of 8:
    # (8 x (114 + 787.5) + 0) x 1.58 = 11,394.96 W
    r = with_cost_columns(rows(system="b200", n_gpus=8, t_compute=0.0, t_memory=0.0, t_optimizer=0.0,
                               network_power=0.0, network_cost=0.0)).row(0, named=True)
    assert r["power_kw"] == pytest.approx(11.39496, rel=1e-12)
    assert r["cluster_cost_usd"] == 8 * 64_375.0


def test_rows_of_several_systems_take_their_own_preset_and_unknown_inputs_give_null():
    frame = pl.concat([rows(), rows(system="b200"), rows(system="mi300x"), rows(training_days=None),
                       rows(network_power=math.nan)], how="vertical_relaxed")
    out = with_cost_columns(frame)
    p = out["power_kw"].to_list()
    assert p[0] == pytest.approx(1941.22592, rel=1e-12)
    assert p[1] > p[0]  # B200's 1000 W TDP
    assert p[2] is None  # no preset lists mi300x
    assert out["energy_per_run_mwh"][3] is None  # no training set: no run
    assert math.isnan(p[4])  # a network without a power figure


def test_presets_resolve_by_system_and_fields_override():
    assert resolve_economics(None, "dgx_h100").name == "h100"
    assert resolve_economics("auto", "b200").name == "b200"
    assert resolve_economics("auto", "dgx_a100_80gb").name == "a100"
    assert resolve_economics(None, "mi300x") is None
    spec = resolve_economics({"pue": 1.1}, "h200")
    assert (spec.name, spec.pue, spec.gpu_tdp_w) == ("h200", 1.1, 700.0)
    assert resolve_economics("h100", "anything").gpu_price_usd == 24_875.0
    custom = resolve_economics({"gpu_tdp_w": 750, "gpu_idle_w": 90}, "mi300x")
    assert custom.gpu_tdp_w == 750.0


@pytest.mark.parametrize("bad, words", [
    ({"pricing": "lease"}, "economics.pricing = 'lease'"),
    ({"gpu_hours": 2}, "economics.gpu_hours: unknown field"),
    ({"pue": 0.9}, "economics.pue = 0.9"),
    ("h999", "economics = 'h999': not a preset"),
    ({"gpu_idle_w": 900}, "economics.gpu_idle_w = 900.0: must be <= economics.gpu_tdp_w"),
])
def test_bad_economics_is_one_line(bad, words):
    with pytest.raises(SpecError) as err:
        resolve_economics(bad, "dgx_h100")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_evaluate_rows_carry_the_costs():
    kw = dict(model="llama3_8b", system="dgx_h100", strategy="tp1d", n1=8, n_d=1, microbatch=1)
    r = dse.evaluate(**kw)
    rent = dse.evaluate(**kw, economics={"pricing": "rental"})
    hours = 24 * r["training_days"]
    u = (r["t_compute"] + r["t_memory"] + r["t_optimizer"]) / r["iteration_time"]
    assert r["compute_utilisation"] == pytest.approx(u, rel=1e-12)
    # 8 GPUs in one NVS domain: no NIC fabric, network cost and power 0
    assert r["network_cost"] == 0.0 and r["network_power"] == 0.0
    assert r["power_kw"] == pytest.approx(1.58 * 8 * (80 + 575 + 620 * u) / 1000, rel=1e-12)
    assert rent["cost_per_run_usd"] == pytest.approx(8 * hours * 3.0, rel=1e-12)
    assert r["cost_per_run_usd"] == pytest.approx(8 * 24_875 * hours / 43_800 + r["energy_per_run_mwh"] * 80.6,
                                                  rel=1e-12)
    with pytest.raises(SpecError, match="economics.pricing"):
        dse.evaluate(**kw, economics={"pricing": "free"})


def test_dataset_schema_has_the_cost_columns():
    sch = io.schema()
    # 5 added these columns, 6 the partition columns inside each file, 7 fp8_eff, 8 enums, 9 t_ep_comm, 10 nvfp4,
    # 11 t_host
    assert io.SCHEMA_VERSION == 11
    assert all(sch[c] == pl.Float64 for c in ECONOMY_COLUMNS)


def test_spec_validates():
    with pytest.raises(SpecError, match="economics.systems"):
        EconomicsSpec(name="x", systems="dgx_h100")


def test_search_rows_carry_each_systems_costs_by_hand():
    """A search over a system with a price preset (b200) and one without (mi300x): each top row's
    costs from its own columns and its system's prices by hand, nulls where no preset prices it, and
    the same figures as the every-row output gives the same candidates."""
    kw = dict(model="gpt3_1t", system=["b200", "mi300x"], nvs_size=8, strategy="tp2d", n_gpus=[512, 4096],
              profile="lbnl", top_k=3)
    b200 = resolve_economics(None, "b200")
    for pricing in ("ownership", "rental"):
        res = dse.run_search(**kw, economics={"pricing": pricing}, keep_rows=True)
        top = res.top
        assert set(top["system"]) == {"b200", "mi300x"}
        for r in top.iter_rows(named=True):
            if r["system"] == "mi300x":
                assert all(r[c] is None for c in ECONOMY_COLUMNS if c != "compute_utilisation")
                continue
            n, hours = r["n_gpus"], 24 * r["training_days"]
            u = (r["t_compute"] + r["t_memory"] + r["t_optimizer"]) / r["iteration_time"]
            power = b200.pue * (n * (b200.gpu_idle_w + b200.host_w + (b200.gpu_tdp_w - b200.gpu_idle_w) * u)
                                + r["network_power"]) / 1000
            assert r["compute_utilisation"] == pytest.approx(u, rel=1e-14)
            assert r["power_kw"] == pytest.approx(power, rel=1e-14)
            assert r["energy_per_run_mwh"] == pytest.approx(power * hours / 1000, rel=1e-14)
            capex = n * b200.gpu_price_usd + r["network_cost"]
            assert r["cluster_cost_usd"] == pytest.approx(capex, rel=1e-14)
            cost = (n * hours * b200.gpu_hour_usd if pricing == "rental" else
                    capex * hours / (8760 * b200.amortisation_years) + power * hours * b200.electricity_usd_per_kwh)
            assert r["cost_per_run_usd"] == pytest.approx(cost, rel=1e-13)
        keys = ["system", "n_gpus", *COLUMNS]
        both = top.join(res.rows, on=keys, how="inner", suffix="_row")
        assert len(both) == len(top)
        for c in ECONOMY_COLUMNS:
            assert both[c].equals(both[f"{c}_row"], check_names=False)


@pytest.mark.parametrize("by_system", [True, False])
def test_cost_columns_by_hand_row_by_row_with_nulls_and_shuffled_systems(by_system):
    """`with_cost_columns` on rows of three systems (one without a preset), with null and NaN
    inputs, against the module docstring's formulas in plain Python, row by row: a null input makes
    null every column that needs it, NaN stays NaN, each row takes its own system's prices; with
    the rows system by system (three runs: the formulas once per system, its prices as numbers)
    and shuffled (more runs than `MAX_PRICE_RUNS`: once over every row, prices gathered)."""
    import random

    from dse.results import economics

    rnd = random.Random(7)
    names = ["b200", "dgx_h100", "mi300x"]
    cols = ("iteration_time", "t_compute", "t_memory", "t_optimizer", "training_days", "network_cost", "network_power")
    data = {"system": [rnd.choice(names) for _ in range(300)], "n_gpus": [rnd.choice([8, 64, 1024, 16384]) for _ in range(300)]}
    for c in cols:
        data[c] = [rnd.uniform(0.01, 100.0) for _ in range(300)]
    for i in range(0, 300, 7):
        data["training_days"][i] = None
    for i in range(3, 300, 11):
        data["iteration_time"][i] = None
    for i in range(5, 300, 13):
        data["network_power"][i] = math.nan
    frame = pl.DataFrame(data)
    if by_system:
        frame = frame.sort("system", maintain_order=True)
    runs = frame["system"].rle_id().max() + 1
    assert (runs <= economics.MAX_PRICE_RUNS) == by_system

    def need(*xs):
        return None if any(x is None for x in xs) else True

    for econ in (None, {"pricing": "rental"}):
        out = with_cost_columns(frame, econ)
        for r in out.iter_rows(named=True):
            e = resolve_economics(econ, r["system"])
            n, days = float(r["n_gpus"]), r["training_days"]
            t = r["iteration_time"]
            u = need(t) and (r["t_compute"] + r["t_memory"] + r["t_optimizer"]) / t
            pr = e and {k: getattr(e, k) for k in ("gpu_tdp_w", "gpu_idle_w", "host_w", "pue", "gpu_price_usd",
                                                     "amortisation_years", "gpu_hour_usd", "electricity_usd_per_kwh")}
            power = need(u, pr) and pr["pue"] * (n * (pr["gpu_idle_w"] + pr["host_w"] + (pr["gpu_tdp_w"] - pr["gpu_idle_w"]) * u)
                                                 + r["network_power"]) / 1000.0
            energy = need(power, days) and power * (days * 24.0) / 1000.0
            capex = need(pr) and need(pr["gpu_price_usd"]) and n * pr["gpu_price_usd"] + r["network_cost"]
            if e is not None and e.pricing == "rental":
                cost = need(days, pr["gpu_hour_usd"]) and n * (days * 24.0) * pr["gpu_hour_usd"]
            else:
                cost = need(capex, days, energy, pr) and (capex * (days * 24.0) / (8760.0 * pr["amortisation_years"])
                                                          + energy * 1000.0 * pr["electricity_usd_per_kwh"])
            want = {"compute_utilisation": u, "power_kw": power, "energy_per_run_mwh": energy,
                    "cluster_cost_usd": capex, "cost_per_run_usd": cost}
            for k, w in want.items():
                got = r[k]
                if w is None:
                    assert got is None, (k, r)
                elif math.isnan(w):
                    assert got is not None and math.isnan(got), (k, r)
                else:
                    assert got == w, (k, got, w)
    assert out["power_kw"].null_count() > 0 and out["power_kw"].is_nan().sum() > 0


def test_a_model_without_a_training_set_has_no_run_in_search_and_evaluate():
    """A model without a training set (GPT3-1T with its token count removed): no run, so
    training_days, the run's energy and its cost are null (not NaN) in a search's top rows, in its
    every-row output and in `dse.evaluate`; the power drawn, which needs no run, is a number."""
    import dataclasses

    model = dataclasses.replace(dse.load_model("gpt3_1t"), training_tokens=None)
    assert model.samples is None
    kw = dict(model=model, system="b200", strategy="tp1d", profile="lbnl")
    res = dse.run_search(**kw, n_gpus=512, top_k=2, keep_rows=True)
    row = dse.evaluate(**kw, **{c: res.top.row(0, named=True)[c] for c in COLUMNS})
    for frame in (res.top, res.rows, pl.DataFrame([row])):
        for c in ("training_days", "energy_per_run_mwh", "cost_per_run_usd"):
            if c in frame.columns:
                assert frame[c].null_count() == len(frame), c
        assert frame["power_kw"].null_count() == 0 and frame["power_kw"].is_nan().sum() == 0
    assert "training_days" in res.top.columns and len(res.rows) > 0
