"""Expert-parallel MoE models (seed 002 section III-C) searched like any other model."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dse
from dse.spec.specs import SpecError
from dse.traffic import traffic_many
from kernels.iteration import layer_table
from kernels.params import REFERENCE_QUIRKS, PROFILES, Candidates

#: The dense MLP's layers that the experts run on their routed tokens; its output dropout (dpr2,
#: with the residual add) is the block's, once on the combined tokens.
DENSE_MLP = ("fc1", "fc1-bias", "act1", "dpr1", "fc2", "fc2-bias")


def test_deepspeed_moe_1p3b_has_its_published_size():
    m = dse.load_model("deepspeed_moe_1p3b")
    assert m.moe and m.experts == 128
    assert m.params == pytest.approx(52e9, rel=0.01)  # "1.3B+MoE-128": 52B parameters


#: Seed 001's block with the reference's quirks fixed: the MoE layers below are that block's.
SEED = PROFILES["lbnl"]._replace(**{q: False for q in REFERENCE_QUIRKS})


def table(model, **kw):
    m = dse.load_model(model)
    cand = dict(n1=1, n2=1, n_p=1, n_d=128, microbatch=8, nvs1=1, nvs2=1, nvs_p=1, nvs_d=8, n_b=1, interleave=1,
                recompute=1, seq_par=1, precision=0, zero=1)  # zero: the ZeRO stage column
    cand.update(kw)
    # the expert-parallel group MoE blocks had before `ep` was a column: gcd(n_d, E) replicas
    cand.setdefault("ep", math.gcd(cand["n_d"], m.experts))
    c = Candidates(*(np.array([cand[k]]) for k in Candidates._fields))
    s = dse.load_system("dgx_a100_seed000").params()
    dense = layer_table("tp1d", c, m.workload(1024), s, SEED)
    moe = layer_table("tp1d", c, m.workload(1024), s, SEED, moe=True)
    return m, cand, dense, moe


def f(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def test_moe_block_accounting():
    m, cand, dense, moe = table("deepspeed_moe_1p3b", n1=2, n_d=64, nvs1=2, nvs_d=4)
    n_e = math.gcd(64, 128)  # expert-parallel group: 64 replicas, each holding 2 experts
    for name in DENSE_MLP:
        ex = moe[f"expert-{name}"]
        # top-1, capacity 1: the expert MLP does the dense MLP's work on as many tokens
        assert f(ex["flops_f"]) == pytest.approx(f(dense[name]["flops_f"]), rel=1e-14)
        assert f(ex["weight"]) == pytest.approx(f(dense[name]["weight"]) * 128 / n_e, rel=1e-14)
    # the token exchange: each GPU sends its sequence shard's tokens, b (l / n1) e elements
    vol = 8 * (2048 // 2) * 2048 * 2e-9
    assert f(moe["dispatch"]["flops_f"]) == 0.0 and f(moe["dispatch"]["traffic_f"]) == pytest.approx(2 * vol)
    assert f(moe["dispatch"]["comm_f"]) > 0 and f(moe["combine"]["comm_b"]) > 0
    # the gate is a replicated e -> E linear on the sequence shard
    assert f(moe["gate"]["weight"]) == pytest.approx(2048 * 128 * 2e-9)
    assert "gate" not in dense and "dispatch" not in dense
    # the MLP's output dropout runs once, on the block's own tokens after the combine
    assert "expert-dpr2" not in moe and list(moe).index("dpr2") > list(moe).index("combine")
    for k in ("flops_f", "traffic_f", "activation"):
        assert f(moe["dpr2"][k]) == f(dense["dpr2"][k])


def test_capacity_and_top_k_scale_the_expert_work():
    base = dse.load_model("deepspeed_moe_1p3b")
    two = dse.load_model("deepspeed_moe_1p3b", moe_top_k=2, capacity_factor=1.25)
    s = dse.load_system("dgx_a100_seed000").params()
    c = Candidates(*(np.array([v]) for v in (1, 1, 1, 128, 8, 1, 1, 1, 8, 1, 1)))
    a = layer_table("tp1d", c, base.workload(1024), s, SEED, moe=True)
    b = layer_table("tp1d", c, two.workload(1024), s, SEED, moe=True)
    assert f(b["expert-fc1"]["flops_f"]) == pytest.approx(2.5 * f(a["expert-fc1"]["flops_f"]), rel=1e-14)
    assert f(b["dispatch"]["traffic_f"]) == pytest.approx(2.5 * f(a["dispatch"]["traffic_f"]), rel=1e-14)
    assert f(b["expert-fc1"]["weight"]) == f(a["expert-fc1"]["weight"])


def test_every_other_block_is_moe():
    """moe_every = 2: the iteration sits between the all-dense and the all-MoE model."""
    kw = dict(system="dgx_a100_seed000", nvs_size=8, strategy="tp1d", global_batch=1024, n1=1, n_p=1, n_d=128,
              microbatch=8, nvs1=1, nvs_p=1, nvs_d=8)
    half = dse.evaluate(model="deepspeed_moe_1p3b", **kw)
    every = dse.evaluate(model=dse.load_model("deepspeed_moe_1p3b", moe_every=1), **kw)
    dense = dse.evaluate(model=dse.load_model("deepspeed_moe_1p3b", experts=None), **kw)
    assert dense["iteration_time"] < half["iteration_time"] < every["iteration_time"]
    assert dense["memory"] < half["memory"] < every["memory"]
    # compute and activations are linear in the blocks: exactly halfway
    for k in ("t_compute", "mem_activations", "flops_per_gpu"):
        assert half[k] == pytest.approx((dense[k] + every[k]) / 2, rel=1e-12), k


def test_rail_only_slows_the_all_to_all_and_traffic_shows_why():
    kw = dict(model="deepspeed_moe_1p3b", system="dgx_a100_seed000", nvs_size=8, strategy="tp1d", global_batch=1024,
              n1=1, n_p=1, n_d=128, microbatch=8, nvs1=1, nvs_p=1, nvs_d=8)
    opt = dse.evaluate(network="rail_optimized", **kw)
    ro = dse.evaluate(network="rail_only", **kw)
    assert ro["iteration_time"] > opt["iteration_time"]
    assert ro["t_ep_comm"] > opt["t_ep_comm"]  # the all-to-all crosses the rails
    assert ro["t_dp_comm"] == opt["t_dp_comm"]
    table = {k: [v] for k, v in kw.items() if (k[0] == "n" and k != "nvs_size") or k == "microbatch"}
    t = traffic_many(table | {"nvs2": [1]},
                     model="deepspeed_moe_1p3b", system="dgx_a100_seed000", strategy="tp1d",
                     global_batch=1024, nvs_size=8, network="rail_only").row(0, named=True)
    assert t["ep_cross"] > 0 and t["tp_cross"] == 0 and t["dp_cross"] == 0 and t["pp_cross"] == 0
    # seed 002 Eq. 2-3 at zero latency: the all-to-all on x = 8 GPUs x y = 16 domains slows down by
    # y (x-1) C_S / (x (y-1) C_F); the iteration, of which it is a part, by less
    x, y = 8, 16
    a2a = y * (x - 1) * 25.0 / (x * (y - 1) * 600.0)
    assert 0 < ro["iteration_time"] / opt["iteration_time"] - 1 < a2a


def test_moe_search_and_errors():
    top = dse.search(model="deepspeed_moe_1p3b", system="a100", nvs_size=8, strategy="tp1d", n_gpus=128,
                     global_batch=1024, top_k=3)
    assert len(top) == 3 and (top["memory"] <= 80).all()
    assert ((24 // top["n_p"]) % 2 == 0).all()  # whole dense/MoE alternations per stage
    # MoE blocks are modelled in every strategy now (they were refused outside tp1d before `ep`)
    top2d = dse.search(model="deepspeed_moe_1p3b", system="a100", strategy="tp2d", nvs_size=8, n_gpus=128,
                       global_batch=1024, top_k=1)
    assert len(top2d) == 1 and (top2d["memory"] <= 80).all() and (128 % top2d["ep"] == 0).all()
    with pytest.raises(SpecError, match=r"^n_p = 24: each stage must hold whole dense/MoE alternations"):
        dse.evaluate(model="deepspeed_moe_1p3b", system="a100", nvs_size=8, n_p=24, n_d=1, nvs1=1, nvs_p=8, nvs_d=1)
    with pytest.raises(SpecError, match=r"^model.moe_every = 5: must divide model.depth = 24"):
        dse.load_model("deepspeed_moe_1p3b", moe_every=5)
