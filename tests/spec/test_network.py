"""Networks of the rail-only papers inside the seed-001 search: consistency with the two-tier
model, the papers' central claim for dense models, the ideal, the NIC option, and the equipment."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import dse
from dse.spec.network import load_network
from dse.explore.placement import enumerate_space
from dse.explore.space import COLUMNS, Question
from dse.spec.specs import SpecError, load_model
from kernels.collectives import collective_time
from kernels.params import PROFILES

NETS = ("two_tier", "rail_optimized", "rail_only", "any_to_any")


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
def test_every_placement_of_the_search_is_rail_aligned(model, strategy, n, nvs):
    """Seeds 000/002: rail-only costs nothing for dense models because every group of the search's
    placements is rail-aligned; the kernels take that as given (a rail-aligned group costs the same
    on both fabrics), so it is checked here GPU by GPU: for sampled candidates, every group over any
    set of the parallel axes holds the same rails in each of its domains, and consecutive pipeline
    stages in different domains sit on the same rail."""
    import itertools

    from dse.traffic import placement

    table = sample(model, strategy, n, nvs, size=40)
    if not len(table["n1"]):
        pytest.skip("no candidates")
    axes = ("n1", "n2", "n_p", "n_d")
    subsets = [s for r in range(1, 5) for s in itertools.combinations(axes, r)]
    for i in range(len(table["n1"])):
        row = {k: int(v[i]) for k, v in table.items()}
        place = placement(*(row[k] for k in axes), *(row[k] for k in ("nvs1", "nvs2", "nvs_p", "nvs_d")))
        assert place.n == n
        for s in subsets:
            place.groups(s)  # raises unless rail-aligned
        a, b = place.rank[:, :, :-1, :], place.rank[:, :, 1:, :]  # consecutive pipeline stages
        across = place.domain[a] != place.domain[b]
        assert (place.rail[a][across] == place.rail[b][across]).all()


@pytest.mark.parametrize("strategy, cfg", [
    ("tp1d", dict(n1=4, n_p=8, n_d=4, nvs1=2, nvs_p=2, nvs_d=2)),
    ("tp2d", dict(n1=2, n2=2, n_p=4, n_d=8, nvs1=2, nvs2=1, nvs_p=2, nvs_d=2)),
    ("summa", dict(n1=2, n2=2, n_p=2, n_d=16, nvs1=1, nvs2=2, nvs_p=2, nvs_d=2, n_b=2)),
])
def test_dense_traffic_never_crosses_rails(strategy, cfg):
    """The bytes of every GPU pair on rail_only, from the GPUs' domains and rails: none goes to
    another rail in another domain, so nothing is forwarded; some do leave the domain on a rail."""
    import dse.traffic as tr

    pt = tr.pair_matrix(model="gpt3_175b", system="b200", nvs_size=8, strategy=strategy, network="rail_only",
                        microbatch=1, **cfg)
    sums = pt.row_sums()
    assert all((s[:, 2] == 0.0).all() for s in sums.values())
    assert sum(s[:, 1].sum() for s in sums.values()) > 0
    assert pt.per_gpu["forwarded"] == 0.0


@pytest.mark.parametrize("n", [512, 4096, 16384])
def test_rail_only_optimum_by_brute_force_and_ideal_is_a_bound(n):
    """The search's rail-only optimum is the best of every candidate evaluated one table at a time
    (dse.explore.ranking's rule), and the ideal (one HB domain) is never slower."""
    from dse.explore.ranking import best_rows

    res = {net: dse.search(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", n_gpus=n,
                           network=net, top_k=1).row(0, named=True) for net in NETS}
    every = evaluate(enumerate_space(Question(load_model("gpt3_1t"), "tp1d", 4096), n, 8), "gpt3_1t", "tp1d", 8,
                     "rail_only")
    best = best_rows(every.filter(pl.col("feasible")), ["n_gpus"]).row(0, named=True)
    assert all(res["rail_only"][c] == best[c] for c in COLUMNS)
    assert res["rail_only"]["iteration_time"] == best["iteration_time"]
    assert res["any_to_any"]["iteration_time"] <= res["rail_only"]["iteration_time"]
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
