"""profile=railonly: the rail-only iteration model (seed 000) searched with the seed-001 engine."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import dse
from dse.specs import SpecError
from kernels import railonly as R

# seed 000 Table 4: model, t, p, d, global batch, microbatch, interleave, "Computed Iteration Time" (s)
TABLE4 = [
    ("megatron_22b", 8, 1, 1, 4, 4, 1, 0.78),
    ("gpt3_175b", 8, 8, 1, 64, 1, 3, 11.89),
    ("mt_nlg_530b", 8, 35, 1, 280, 1, 3, 35.29),
    ("mt_nlg_530b", 8, 35, 8, 2240, 1, 3, 35.56),
    ("gpt3_1t", 8, 64, 1, 512, 1, 1, 70.69),
]


def point(model, t, p, d, batch, b, v, network="rail_only"):
    return dse.evaluate(model=model, system="dgx_a100_seed000", strategy="tp1d", profile="railonly",
                        network=network, global_batch=batch, n1=t, n_p=p, n_d=d, microbatch=b, interleave=v,
                        nvs1=8, nvs_p=1, nvs_d=1)


@pytest.mark.parametrize("row", TABLE4, ids=[f"{r[0]}-{r[1] * r[2] * r[3]}" for r in TABLE4])
def test_table4_through_the_engine(row):
    model, t, p, d, batch, b, v, paper = row
    r = point(model, t, p, d, batch, b, v)
    assert r["feasible"]
    assert abs(r["iteration_time"] / paper - 1.0) < 0.01  # within 1% (the issue asks for 5%)
    # the engine's mapping adds nothing to the model: the same time as kernels.railonly directly
    m = dse.load_model(model)
    w = R.Transformer(m.depth, m.hidden, m.heads, m.seq_len, m.vocab, batch)
    hw = R.Cluster(peak_flops=312.0, c_f=600.0, c_s=25.0, alpha_f=0.0, alpha_s=0.0, hb_size=8, gpus=t * p * d,
                   memory=80.0)
    direct = R.iteration_time(R.Parallelism(p, t, d, b, v, 1, 8, 1), w, hw, "rail_only")
    assert r["iteration_time"] == pytest.approx(float(direct.iteration_time), rel=1e-13)
    parts = sum(r[k] for k in ("t_compute", "t_memory", "t_tp_comm", "t_dp_comm", "t_pp_comm", "t_bubble", "t_optimizer"))
    assert parts == pytest.approx(r["iteration_time"], rel=1e-13)


def test_search_finds_megatrons_configuration_or_better():
    res = dse.run_search(model="gpt3_1t", system="dgx_a100_seed000", strategy="tp1d", profile="railonly",
                         network="rail_only", n_gpus=512, nvs_size=8, global_batch=512, top_k=5)
    best = res.top.row(0, named=True)
    megatron = point("gpt3_1t", 8, 64, 1, 512, 1, 1)
    assert best["iteration_time"] <= megatron["iteration_time"]
    assert res.top["feasible"].all() and res.counts["candidates"][0] > 1000
    # the enumeration offers interleaving: some candidate has v > 1
    rows = dse.run_search(model="gpt3_1t", system="dgx_a100_seed000", strategy="tp1d", profile="railonly",
                          n_gpus=512, nvs_size=8, global_batch=512, keep_rows=True).rows
    assert (rows["interleave"] > 1).any()
    assert (rows.filter(pl.col("interleave") > 1)["n_p"] > 1).all()


@pytest.mark.parametrize("n", [512, 2048, 8192])
def test_dense_optimum_on_rail_only_by_brute_force(n):
    """Seeds 000/002 under their own model: the rail-only optimum is the best of every evaluated
    row (`dse.ranking`), that configuration run alone gives the same time, and the ideal (one HB
    domain) is never slower. (Rail-only equals rail-optimized for dense models by rail alignment,
    checked GPU by GPU in tests/test_network.py.)"""
    from dse.ranking import best_rows

    kw = dict(model="gpt3_1t", system="dgx_a100_seed000", strategy="tp1d", profile="railonly", n_gpus=n,
              nvs_size=8, global_batch=2048)
    res = dse.run_search(network="rail_only", top_k=1, keep_rows=True, **kw)
    ro = res.top.row(0, named=True)
    best = best_rows(res.rows.filter(pl.col("feasible")), ["n_gpus"]).row(0, named=True)
    cols = ("n1", "n_p", "n_d", "microbatch", "interleave", "nvs1", "nvs_p", "nvs_d")
    assert {c: ro[c] for c in cols} == {c: best[c] for c in cols}
    alone = dse.evaluate(model="gpt3_1t", system="dgx_a100_seed000", nvs_size=8, strategy="tp1d", profile="railonly",
                         network="rail_only", global_batch=2048, **{c: ro[c] for c in cols})
    assert alone["iteration_time"] == ro["iteration_time"] == best["iteration_time"]
    ideal = dse.search(network="any_to_any", top_k=1, **kw).row(0, named=True)
    assert ideal["iteration_time"] <= ro["iteration_time"]


def test_railonly_errors_name_the_field():
    with pytest.raises(SpecError, match=r"^strategy = 'tp2d': profile 'railonly'"):
        dse.search(model="gpt3_1t", strategy="tp2d", profile="railonly", nvs_size=8, n_gpus=512)
    with pytest.raises(SpecError, match=r"^interleave = 2: profile 'lbnl' has no interleaved schedule"):
        dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, n1=8, n_p=64, n_d=1, interleave=2, profile="lbnl",
                     nvs1=8, nvs_p=1, nvs_d=1)
    with pytest.raises(SpecError, match=r"^interleave = 3: must divide the blocks per stage"):
        point("gpt3_1t", 8, 64, 1, 512, 1, 3)


def test_max_interleave_caps_the_search():
    from kernels.params import RailOnlyProfile

    kw = dict(model="gpt3_1t", system="dgx_gh200", strategy="tp1d", network="rail_only", n_gpus=16384,
              nvs_size=256, global_batch=4096)
    free = dse.run_search(profile=RailOnlyProfile(), keep_rows=True, **kw).rows
    plain = dse.run_search(profile=RailOnlyProfile(max_interleave=1), keep_rows=True, **kw).rows
    assert free["interleave"].max() > 1 and plain["interleave"].max() == 1
    # the capped space is exactly the free space's v = 1 rows
    assert len(plain) == len(free.filter(pl.col("interleave") == 1))
    best_free = free.filter(pl.col("feasible"))["iteration_time"].min()
    best_plain = plain.filter(pl.col("feasible"))["iteration_time"].min()
    assert best_free <= best_plain
