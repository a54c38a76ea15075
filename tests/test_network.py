"""Networks of the rail-only papers inside the seed-001 search: consistency with the two-tier
model, the papers' central claim for dense models, the ideal, the NIC option, and the equipment."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import dse
from dse.network import load_network
from dse.space import COLUMNS, Question, enumerate_space
from dse.specs import SpecError, load_model
from kernels.collectives import collective_time
from kernels.params import PROFILES

NETS = ("two_tier", "rail_optimized", "rail_only", "any_to_any")
METRICS = ("iteration_time", "memory", "t_tp_comm", "t_dp_comm", "t_pp_comm", "t_bubble")


def sample(model: str, strategy: str, n: int, nvs: int, size: int = 3000, seed: int = 0) -> dict:
    t = enumerate_space(Question(load_model(model), strategy, 4096), n, nvs)
    idx = np.random.default_rng(seed).choice(len(t["n1"]), min(size, len(t["n1"])), replace=False)
    return {k: v[idx] for k, v in t.items()}


def evaluate(table, model, strategy, nvs, network, profile="default"):
    return dse.evaluate_many(table, model=model, system="b200", nvs_size=nvs, strategy=strategy,
                             profile=profile, network=network)


@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "p2p", "alltoall"])
def test_rail_optimized_is_two_tier_on_one_tier(kind):
    """A group wholly inside one domain or wholly across domains: the hierarchical algorithms
    reduce to seed 001's two-tier times (default profile: allreduce = 2 allgathers)."""
    s = dse.load_system("b200").params()
    prof = PROFILES["default"]
    n = np.array([2, 4, 8, 16, 2, 4, 8, 64])
    local = np.array([2, 4, 8, 16, 1, 1, 1, 1])
    if kind == "p2p":
        n, local = np.array([2, 2]), np.array([2, 1])
    v = np.linspace(0.01, 3.0, len(n))
    two = collective_time(kind, v, n, local, s, prof, "two_tier")
    rail = collective_time(kind, v, n, local, s, prof, "rail_optimized")
    np.testing.assert_allclose(np.asarray(rail), np.asarray(two), rtol=1e-14)


@pytest.mark.parametrize("model, strategy", [("gpt3_1t", "tp1d"), ("gpt3_1t", "tp2d"), ("gpt3_1t", "summa"),
                                             ("gpt3_175b", "tp1d"), ("vit_era5", "tp2d")])
@pytest.mark.parametrize("n, nvs", [(256, 8), (2048, 8), (16384, 64)])
def test_dense_models_cost_the_same_on_rail_only(model, strategy, n, nvs):
    """Seeds 000/002: for dense models, rail-only costs nothing in time: every group of the
    search's placements is rail-aligned, so every candidate's time (not only the optimum) is the
    same as on rail_optimized."""
    table = sample(model, strategy, n, nvs)
    if not len(table["n1"]):
        pytest.skip("no candidates")
    opt = evaluate(table, model, strategy, nvs, "rail_optimized")
    ro = evaluate(table, model, strategy, nvs, "rail_only")
    for m in METRICS:
        assert (opt[m] == ro[m]).all(), m


@pytest.mark.parametrize("n", [512, 4096, 16384])
def test_same_optimum_on_rail_only_and_ideal_is_a_bound(n):
    res = {net: dse.search(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", n_gpus=n,
                           network=net, top_k=1).row(0, named=True) for net in NETS}
    assert res["rail_only"]["iteration_time"] == res["rail_optimized"]["iteration_time"]
    assert all(res["rail_only"][c] == res["rail_optimized"][c] for c in COLUMNS)
    assert res["any_to_any"]["iteration_time"] <= res["rail_optimized"]["iteration_time"]
    # the rail-only fabric needs fewer switches and transceivers, hence costs less
    assert res["rail_only"]["network_switches"] < res["rail_optimized"]["network_switches"]
    assert res["rail_only"]["network_cost"] < res["rail_optimized"]["network_cost"]
    assert res["any_to_any"]["network_switches"] == 0


def test_equipment_reproduces_table_2_at_hb_domain_256():
    net = {r: load_network("rail_only", radix=r) for r in (64, 128, 256)}
    opt = {r: load_network("rail_optimized", radix=r) for r in (64, 128, 256)}
    n = np.array([32768, 65536])
    k = np.array([256, 256])
    sw = {r: (opt[r].equipment(n, k)["network_switches"].tolist(), net[r].equipment(n, k)["network_switches"].tolist())
          for r in (64, 128, 256)}
    assert sw == {64: ([2560, 5120], [1536, 3072]), 128: ([1280, 2560], [256, 1536]),
                  256: ([384, 1280], [128, 256])}


def test_nic_link_caps_infiniband():
    """Seed 004: 8 GPUs sharing a 64 GB/s switch->NIC link with 1.138 repacketization overhead get
    64 / (8 x 1.138) GB/s each, and the search sees the slower network."""
    net = load_network("rail_optimized", nic="seed004", nic_link_bandwidth=64.0, nic_sharing=8)
    sys = net.apply(dse.load_system("b200"))
    overhead = (20 / 128 + 1) / (64 / 4032 + 1)
    assert sys.ib_bandwidth == pytest.approx(64.0 / (8 * overhead), rel=1e-12)
    base = dse.search(model="gpt3_1t", nvs_size=8, strategy="tp1d", n_gpus=4096, network="rail_optimized", top_k=1)
    capped = dse.search(model="gpt3_1t", nvs_size=8, strategy="tp1d", n_gpus=4096, network=net, top_k=1)
    assert capped["iteration_time"][0] > base["iteration_time"][0]


def test_network_appears_in_the_results():
    r = dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, n1=4, n_p=128, n_d=8, nvs1=4, nvs_p=2, nvs_d=1,
                     network="rail_only")
    assert r["network"] == "rail_only" and r["network_switches"] > 0 and r["network_cost"] > 0
    with pytest.raises(SpecError, match=r"^network.name = 'torus'"):
        load_network({"name": "torus"})
    with pytest.raises(SpecError, match=r"^network = 'torus': not a preset"):
        load_network("torus")
