"""profile=railonly: the rail-only papers' iteration model (seed 000) as switches of the one engine,
checked term by term against their closed form (`kernels.railonly`) and searched."""

from __future__ import annotations

import polars as pl
import pytest

import dse
from dse.spec.specs import SpecError
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


def closed_form(model, t, p, d, batch, b, v, p_h=1, t_h=8, d_h=1, recompute="selective", fabric="rail_only"):
    """The papers' closed form in their letters (`kernels.railonly`, which the engine never calls)."""
    m = dse.load_model(model)
    w = R.Transformer(m.depth, m.hidden, m.heads, m.seq_len, m.vocab, batch)
    hw = R.Cluster(peak_flops=312.0, c_f=600.0, c_s=25.0, alpha_f=0.0, alpha_s=0.0, hb_size=p_h * t_h * d_h,
                   gpus=t * p * d, memory=80.0)
    par = R.Parallelism(p, t, d, b, v, p_h, t_h, d_h)
    return R.iteration_time(par, w, hw, fabric, recompute), R.memory_parts(par, w, hw, recompute), m


def sync_ratio(m, t):
    """Engine / closed-form gradient volume of one block: Megatron's block holds 12 h^2 / t matrix
    weights, the fc1 bias (4 h / t) and, replicated, the fc2 and out-projection biases and both
    LayerNorms (6 h); S_T / t = (12 h^2 + 13 h) / t."""
    h = m.hidden
    return (12 * h * h / t + 4 * h / t + 6 * h) / ((12 * h * h + 13 * h) / t)


def assert_terms(r, direct, m, t, tp_scale=1.0):
    """The engine's breakdown is the closed form's, term by term."""
    exact = dict(rel=1e-12, abs=1e-15)
    assert r["t_compute"] == pytest.approx(float(direct.last_stage_compute), **exact)  # Eq. 5, m t(b)
    assert r["t_tp_comm"] == pytest.approx(tp_scale * float(direct.last_stage_tp), **exact)  # Eq. 6
    assert r["t_pp_comm"] == pytest.approx(float(direct.last_stage_pp), **exact)  # Eq. 6
    assert r["t_bubble"] == pytest.approx(float(direct.bubble_compute + direct.bubble_comm), **exact)  # Eq. 3-4
    assert r["t_dp_comm"] == pytest.approx(float(direct.sync) * sync_ratio(m, t), **exact)  # Eq. 7
    assert r["t_memory"] == r["t_optimizer"] == 0.0


@pytest.mark.parametrize("row", TABLE4, ids=[f"{r[0]}-{r[1] * r[2] * r[3]}" for r in TABLE4])
def test_table4_through_the_engine(row):
    model, t, p, d, batch, b, v, paper = row
    r = point(model, t, p, d, batch, b, v)
    assert r["feasible"]
    assert abs(r["iteration_time"] / paper - 1.0) < 0.006  # the paper's printed precision (0.53% at most)
    # the one engine under profile railonly computes the papers' closed form (kernels.railonly)
    direct, _, m = closed_form(model, t, p, d, batch, b, v)
    assert_terms(r, direct, m, t)
    assert r["iteration_time"] == pytest.approx(float(direct.iteration_time), rel=2e-6)
    parts = sum(r[k] for k in ("t_compute", "t_memory", "t_tp_comm", "t_dp_comm", "t_pp_comm", "t_bubble", "t_optimizer"))
    assert parts == pytest.approx(r["iteration_time"], rel=1e-13)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("network", ["rail_only", "any_to_any"])
def test_recompute_modes_and_placements_match_the_closed_form(recompute, network):
    """The papers' recompute choice is the candidate's `recompute` column: its FLOPs (Appendix B:
    attention 24/24/32 s h^2 + 12/16/16 s^2 h, MLP 48/48/64 s h^2 per sample and block) and its
    activations (Korthikanti: 34 + 5 a s / h, 34, 2 bytes per s b h / t per block). A pipeline
    spanning HB domains with two stages in each (p_h = 2) checks Eq. 4 (the bubble crosses each
    boundary once each way) and Eq. 6 (the steady state at the NIC boundary)."""
    model, t, p, d, batch, b, v = "gpt3_175b", 4, 8, 2, 64, 2, 2
    r = dse.evaluate(model=model, system="dgx_a100_seed000", strategy="tp1d", profile="railonly", network=network,
                     global_batch=batch, n1=t, n_p=p, n_d=d, microbatch=b, interleave=v, nvs1=2, nvs_p=2, nvs_d=2,
                     recompute=recompute)
    direct, (params, acts), m = closed_form(model, t, p, d, batch, b, v, p_h=2, t_h=2, d_h=2,
                                            recompute=recompute, fabric=network)
    # full recomputation runs the forward's 4 collectives again (the papers charge 8 per block)
    assert_terms(r, direct, m, t, tp_scale=1.5 if recompute == "full" else 1.0)
    assert direct.bubble_comm > 0 and direct.last_stage_pp > 0
    # memory: 16 bytes per parameter unsharded (Appendix C) with Megatron's biases, the first stage's
    # activations; under full recomputation the block being recomputed holds its own once more
    h, layers = m.hidden, m.depth // p
    weights = 2e-9 * (layers * (12 * h * h / t + 4 * h / t + 6 * h) + m.vocab * h / t)
    assert r["mem_weights"] == pytest.approx(weights, rel=1e-12)
    assert r["mem_optimizer"] == pytest.approx(6 * weights, rel=1e-12)
    working = 0.0 if recompute != "full" else (34 + 5 * m.heads * m.seq_len / h) * m.seq_len * b * h / t * 1e-9
    assert r["mem_activations"] == pytest.approx(float(acts) * 1e-9 + working, rel=1e-12)
    assert float(params) * 2e-9 == pytest.approx(weights, rel=2e-4)


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
    row (`dse.explore.ranking`), that configuration run alone gives the same time, and the ideal (one HB
    domain) is never slower. (Rail-only equals rail-optimized for dense models by rail alignment,
    checked GPU by GPU in tests/spec/test_network.py.)"""
    from dse.explore.ranking import best_rows

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
    from kernels.params import PROFILES

    railonly = PROFILES["railonly"]
    kw = dict(model="gpt3_1t", system="dgx_gh200", strategy="tp1d", network="rail_only", n_gpus=16384,
              nvs_size=256, global_batch=4096)
    free = dse.run_search(profile=railonly, keep_rows=True, **kw).rows
    plain = dse.run_search(profile=railonly._replace(max_interleave=1), keep_rows=True, **kw).rows
    assert free["interleave"].max() > 1 and plain["interleave"].max() == 1
    # the capped space is exactly the free space's v = 1 rows
    assert len(plain) == len(free.filter(pl.col("interleave") == 1))
    best_free = free.filter(pl.col("feasible"))["iteration_time"].min()
    best_plain = plain.filter(pl.col("feasible"))["iteration_time"].min()
    assert best_free <= best_plain


def test_recompute_is_a_searched_column_and_the_config_picks_its_modes():
    """The papers' recompute choice is the candidate's `recompute` column; `profile.recompute`
    picks the modes searched (railonly: selective, as the papers; `any`: all three)."""
    from dse.interface.app import Job
    from dse.explore.engine import space_options
    from kernels.params import PROFILES, Profile

    from helpers import config

    railonly = PROFILES["railonly"]
    assert space_options(railonly)["recompute"] == (1,)
    assert space_options(railonly._replace(recompute="any"))["recompute"] == (0, 1, 2)
    # auto: the modes that differ, all three under Megatron's block (selective checkpoints the core)
    assert space_options(PROFILES["default"])["recompute"] == (0, 1, 2)
    assert space_options(PROFILES["default"]._replace(recompute="full"))["recompute"] == (2,)
    kw = dict(model="gpt3_1t", system="dgx_a100_seed000", strategy="tp1d", network="rail_only", n_gpus=512,
              nvs_size=8, global_batch=512)
    rows = dse.run_search(profile=railonly._replace(recompute="any"), keep_rows=True, **kw).rows
    assert set(rows["recompute"].unique()) == {0, 1, 2}
    # config: the railonly preset is PROFILES["railonly"]; profile.recompute=full is a variant of it
    job = Job.from_config(config("profile=railonly", "strategy=tp1d"))
    assert isinstance(job.profile, Profile) and job.profile == railonly and job.profile_name == "railonly"
    job = Job.from_config(config("profile=railonly", "strategy=tp1d", "profile.recompute=full"))
    assert job.profile == railonly._replace(recompute="full") and job.profile_name == "railonly+custom"
    with pytest.raises(SpecError, match=r"^profile.recompute = 'some': must be one of"):
        Job.from_config(config("profile=railonly", "profile.recompute=some"))
    with pytest.raises(SpecError, match=r"^profile.compute_model = 'exact': must be one of"):
        Job.from_config(config("profile=railonly", "profile.compute_model=exact"))
    with pytest.raises(SpecError, match=r"^profile.gamma = 0.0: must be in"):
        Job.from_config(config("profile=railonly", "profile.gamma=0"))


def test_each_switch_moves_only_its_own_term():
    """Table 4's 530B row on 2240 GPUs under railonly, with one switch at a time back at its default
    profile's value: the terms it touches move, the others stay."""
    from kernels.params import PROFILES

    railonly = PROFILES["railonly"]
    kw = dict(model="mt_nlg_530b", system="dgx_a100_seed000", strategy="tp1d", network="rail_only",
              global_batch=2240, n1=8, n_p=35, n_d=8, microbatch=1, interleave=3, nvs1=8, nvs_p=1, nvs_d=1)
    base = dse.evaluate(profile=railonly, **kw)

    def moved(**switch):
        r = dse.evaluate(profile=railonly._replace(**switch), **kw)
        return {k for k in ("t_compute", "t_memory", "t_tp_comm", "t_dp_comm", "t_pp_comm", "t_bubble",
                            "t_optimizer", "mem_optimizer") if r[k] != base[k]}, r

    assert moved(gamma=1.0)[0] == {"t_compute", "t_bubble"}
    changed, r = moved(compute_eff=True)  # dgx_a100_seed000: compute_eff 0.8
    assert changed == {"t_compute", "t_bubble"} and r["t_compute"] == pytest.approx(base["t_compute"] / 0.8)
    assert moved(bubble_tp_comm=True)[0] == {"t_bubble"}
    changed, r = moved(dp_overlap=True)
    assert changed == {"t_dp_comm"} and r["t_dp_comm"] < base["t_dp_comm"]
    # the switch `shard_optimizer` became the ZeRO stage: railonly is stage 0, stage 1 shards the states
    changed, r = moved(zero="1")
    assert changed == {"mem_optimizer"} and r["mem_optimizer"] == pytest.approx(base["mem_optimizer"] / 8)
    assert moved(vocab_spread=False)[0] >= {"t_compute", "t_tp_comm", "t_dp_comm", "t_bubble"}
    changed, r = moved(compute_model="roofline")
    assert {"t_compute", "t_memory", "t_optimizer"} <= changed and r["t_optimizer"] > 0
