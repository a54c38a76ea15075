"""Traffic accounting: per-GPU bytes of collectives and iterations, placements, pair matrices."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

import dse.traffic as tr
from dse.explore.placement import enumerate_space
from dse.explore.space import Question
from dse.spec.specs import SpecError, load_model
from kernels.collectives import KINDS, NETWORKS
from kernels.traffic import LINKS, TYPES, collective_bytes

B200_8 = dict(system="b200", nvs_size=8)


def _bytes(kind, v, group, local, network="rail_only"):
    return [float(x) for x in collective_bytes(kind, v, group, local, network)]


# ---------------------------------------------------------------------------- one collective


@pytest.mark.parametrize("network", ["two_tier", "rail_optimized", "rail_only"])
def test_collective_bytes_by_hand(network):
    # V = 12 GB on x = 4 GPUs in each of y = 2 domains: shards V/x = 3, V/(x y) = 1.5
    assert _bytes("allgather", 12.0, 8, 4, network) == [9.0, 1.5, 0.0, 0.0]  # 3 x 3, 1 x 1.5
    assert _bytes("reducescatter", 12.0, 8, 4, network) == [9.0, 1.5, 0.0, 0.0]
    assert _bytes("allreduce", 12.0, 8, 4, network) == [18.0, 3.0, 0.0, 0.0]
    assert _bytes("allgather", 12.0, 4, 4, network) == [9.0, 0.0, 0.0, 0.0]  # one domain
    assert _bytes("allgather", 12.0, 4, 1, network) == [0.0, 9.0, 0.0, 0.0]  # one rail
    # broadcast: chain (x-1) V/x; on both tiers scatter + rail chains + allgathers:
    # hb = 3 x 3 + 3 x 12 / 32 = 10.125, rail = 1 x 12 / 8 = 1.5 (means over the 8 GPUs)
    assert _bytes("broadcast", 12.0, 4, 4, network) == [9.0, 0.0, 0.0, 0.0]
    assert _bytes("broadcast", 12.0, 4, 1, network) == [0.0, 9.0, 0.0, 0.0]
    assert _bytes("broadcast", 12.0, 8, 4, network) == [10.125, 1.5, 0.0, 0.0]
    assert _bytes("reduce", 12.0, 8, 4, network) == [10.125, 1.5, 0.0, 0.0]
    assert _bytes("p2p", 5.0, 2, 2, network) == [5.0, 0.0, 0.0, 0.0]
    assert _bytes("p2p", 5.0, 2, 1, network) == [0.0, 5.0, 0.0, 0.0]
    # all-to-all: shard 12/8 = 1.5 to 3 domain peers, 1 rail peer, 3 others
    fwd = 4.5 if network == "rail_only" else 0.0
    assert _bytes("alltoall", 12.0, 8, 4, network) == [4.5, 1.5, 4.5, fwd]


def test_any_to_any_is_all_hb():
    assert _bytes("allgather", 12.0, 8, 4, "any_to_any") == [10.5, 0.0, 0.0, 0.0]
    assert _bytes("alltoall", 12.0, 8, 4, "any_to_any") == [10.5, 0.0, 0.0, 0.0]
    assert _bytes("p2p", 5.0, 2, 1, "any_to_any") == [5.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("network", NETWORKS)
def test_degree_one_or_zero_volume_is_exactly_zero(network):
    v = np.array([0.0, 3.0, 3.0, 0.0])
    group = np.array([8, 1, 1, 1])
    local = np.array([4, 1, 1, 1])
    for kind in KINDS:
        out = collective_bytes(kind, v, group, local, network)
        assert all(np.all(np.asarray(x) == 0.0) for x in out), kind


def test_alltoall_has_cross_rail_bytes_on_every_network_with_a_nic():
    for network in ("two_tier", "rail_optimized", "rail_only"):
        for x, y in ((2, 2), (8, 4), (3, 5)):
            b = collective_bytes("alltoall", 1.0, x * y, x, network)
            assert float(b.cross) == pytest.approx((x - 1) * (y - 1) / (x * y), rel=1e-15)
        assert float(collective_bytes("alltoall", 1.0, 8, 8, network).cross) == 0.0  # one domain
        assert float(collective_bytes("alltoall", 1.0, 8, 1, network).cross) == 0.0  # one rail


@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall"])
@pytest.mark.parametrize("x,y", [(1, 1), (3, 1), (1, 4), (2, 3), (4, 2), (5, 5)])
def test_templates_send_what_collective_bytes_counts(kind, x, y):
    t = tr.template(kind, 6.0, x, y)
    r, c = np.divmod(np.arange(x * y), x)
    same_row, same_col = r[:, None] == r[None, :], c[:, None] == c[None, :]
    cls = [same_row, ~same_row & same_col, ~same_row & ~same_col]
    want = collective_bytes(kind, 6.0, x * y, x, "rail_optimized")
    for i, link in enumerate(LINKS):
        np.testing.assert_allclose(np.where(cls[i], t, 0.0).sum(axis=1), float(getattr(want, link)),
                                   rtol=1e-13, atol=0)


# ---------------------------------------------------------------------------- one iteration


def test_iteration_traffic_by_hand():
    """GPT3-175B, tp1d t = 8 in a domain, n_p = 4 (2 per domain), n_d = 4 across, b = 1."""
    m = load_model("gpt3_175b")
    row = tr.traffic_one(model=m, **B200_8, strategy="tp1d", network="rail_only", global_batch=4096,
                         n1=8, n_p=4, n_d=2, microbatch=1, nvs1=4, nvs_p=2, nvs_d=1)
    eps, e, l, d = 2e-9, m.hidden, m.seq_len, m.depth
    micro, blocks = 4096 // 2, d // 4
    act = l * e * eps  # b l e: each TP allgather / reduce-scatter (4 + 4 per block and microbatch)
    assert row["tp_hb"] == pytest.approx(8 * act * 3 / 4 * micro * blocks, rel=1e-12)
    assert row["tp_rail"] == pytest.approx(8 * act * 1 / 8 * micro * blocks, rel=1e-12)
    weight = (e * 4 * e + 4 * e * e + e * 3 * e + e * e) / 8 * eps + (4 * e / 8 + e + e + 2 * e + 2 * e) * eps
    # ZeRO stage 1 (the default's): the 2-byte weights allgathered, the fp32 (4-byte) gradients
    # reduce-scattered, each GPU sending (n_d - 1) / n_d = 1/2 of each
    ag, rs = weight / 2 * blocks, 2 * weight / 2 * blocks
    assert row["dp_rail"] == pytest.approx(ag + rs, rel=1e-12)
    assert row["dp_hb"] == 0.0
    point = dict(model=m, **B200_8, strategy="tp1d", network="rail_only", global_batch=4096, n1=8, n_p=4, n_d=2,
                 microbatch=1, nvs1=4, nvs_p=2, nvs_d=1)
    by_stage = {z: tr.traffic_one(**point, zero=z)["dp_rail"] for z in (0, 1, 2, 3)}
    assert by_stage[1] == pytest.approx(row["dp_rail"], rel=1e-15)
    assert by_stage[0] == pytest.approx(rs + rs, rel=1e-12)  # an allreduce of the fp32 gradients
    assert by_stage[2] == pytest.approx(ag + micro * rs, rel=1e-12)  # the reduce-scatter every microbatch
    assert by_stage[3] == pytest.approx(micro * (2 * ag + rs), rel=1e-12)  # forward and backward allgathers
    message = (l // 8) * e * eps
    # 3 stage boundaries: 2 inside a domain, 1 between domains; 2 m messages each, mean over 4 stages
    assert row["pp_hb"] == pytest.approx(2 * micro * message * 2 / 4, rel=1e-12)
    assert row["pp_rail"] == pytest.approx(2 * micro * message * 1 / 4, rel=1e-12)
    assert row["tp_cross"] == row["dp_cross"] == row["pp_cross"] == row["ep_hb"] == row["forwarded"] == 0.0


#: every strategy and profile in the default suite (each pair compiles its own programs); tp1d
#: under default as well with -m slow
@pytest.mark.parametrize("strategy,profile", [pytest.param("tp1d", "default", marks=pytest.mark.slow),
                                              ("tp2d", "default"), ("summa", "lbnl"), ("tp1d", "railonly")])
def test_dense_models_never_cross_rails_under_the_search_placements(strategy, profile):
    m = load_model("gpt3_175b")
    space = enumerate_space(Question(m, strategy, 1024, profile), 64, 8)
    if profile == "railonly":  # interleaved pipelines: see test_interleaved_wrap_crosses_rails
        space = {k: v[space["interleave"] == 1] for k, v in space.items()}
    assert len(space["n1"]) > 100
    for network in NETWORKS:
        f = tr.traffic_many(space, model=m, **B200_8, strategy=strategy, profile=profile, global_batch=1024,
                            network=network)
        assert (f["cross"] == 0.0).all() and (f["forwarded"] == 0.0).all(), network
        assert (f["total"] > 0).all()
        if network == "any_to_any":
            assert (f["rail"] == 0.0).all()
        else:
            assert (f["rail"] > 0).any()


def test_interleaved_wrap_crosses_rails_when_the_snake_ends_across_the_domain():
    """With v > 1 the chain of chunks wraps from the last stage to the first: on one rail when the
    pipeline spans an even number of domains, between rails when it spans an odd number > 1."""
    common = dict(model="gpt3_175b", **B200_8, strategy="tp1d", profile="railonly", global_batch=1536,
                  network="rail_only", n1=2, n_d=2, microbatch=1, nvs1=2, nvs_d=2, interleave=2)
    even = tr.traffic_one(**common, n_p=4, nvs_p=2)
    odd = tr.traffic_one(**common, n_p=6, nvs_p=2)
    assert even["pp_cross"] == 0.0
    assert odd["pp_cross"] > 0 and odd["forwarded"] == odd["pp_cross"]
    per = 2 * (1536 // 2) * (2048 // 2) * 12288 * 2e-9 / 6  # 2 m message / n_p
    assert odd["pp_cross"] == pytest.approx(per * 1, rel=1e-12)  # v - 1 = 1 wrap
    assert odd["pp_rail"] == pytest.approx(per * 2 * 2, rel=1e-12)  # v x 2 domain crossings
    assert odd["pp_hb"] == pytest.approx(per * 2 * 3, rel=1e-12)  # v x 3 boundaries inside domains


def test_degree_one_groups_add_nothing():
    row = tr.traffic_one(model="gpt3_175b", **B200_8, strategy="tp1d", network="rail_optimized",
                         n1=1, n_p=1, n_d=1, microbatch=4)
    assert row["total"] == 0.0
    row = tr.traffic_one(model="gpt3_175b", **B200_8, strategy="tp2d", network="rail_optimized",
                         n1=8, n2=1, n_p=1, n_d=1, microbatch=4)
    assert row["dp_gb"] == row["pp_gb"] == row["ep_gb"] == 0.0 and row["tp_gb"] > 0


def test_kernel_is_vectorized_and_row_independent():
    m = load_model("gpt3_175b")
    space = enumerate_space(Question(m, "tp2d", 1024), 32, 8)
    f = tr.traffic_many(space, model=m, **B200_8, strategy="tp2d", global_batch=1024, network="rail_only")
    i = len(f) // 2
    one = tr.traffic_many({k: v[i:i + 1] for k, v in space.items()}, model=m, **B200_8, strategy="tp2d",
                          global_batch=1024, network="rail_only")
    cols = [f"{t}_{k}" for t in TYPES for k in LINKS]
    assert f[i].select(cols).rows() == one.select(cols).rows()


# ---------------------------------------------------------------------------- placement, pair matrix


def test_placement_is_rail_aligned_and_snakes():
    p = tr.placement(2, 2, 6, 2, 2, 1, 2, 2)
    assert p.per_domain == 8 and sorted(p.rank.ravel()) == list(range(p.n))
    for axes in [("n1",), ("n2",), ("n_p",), ("n_d",), ("n1", "n2"), ("n2", "n_d")]:
        grid = p.groups(axes)  # raises unless every group is a full rail-aligned grid
        assert grid.shape[1] * grid.shape[2] == np.prod([{"n1": 2, "n2": 2, "n_p": 6, "n_d": 2}[a] for a in axes])
    r = p.rank
    for s in range(5):
        a, b = r[:, :, s, :].ravel(), r[:, :, s + 1, :].ravel()
        inside = p.domain[a] == p.domain[b]
        assert np.all(inside | (p.rail[a] == p.rail[b]))  # every boundary: same domain or same rail
        assert inside.all() == (s % 2 == 0)


CONFIGS = [
    ("tp1d", "rail_only", dict(n1=8, n_p=4, n_d=4, nvs1=8, nvs_p=1, nvs_d=1)),
    ("tp1d", "rail_optimized", dict(n1=8, n_p=4, n_d=4, nvs1=8, nvs_p=1, nvs_d=1, zero=3)),  # FSDP's bytes
    ("tp1d", "two_tier", dict(n1=4, n_p=8, n_d=2, nvs1=2, nvs_p=2, nvs_d=2)),
    ("tp2d", "rail_optimized", dict(n1=4, n2=2, n_p=4, n_d=4, nvs1=2, nvs2=2, nvs_p=1, nvs_d=2)),
    ("summa", "any_to_any", dict(n1=4, n2=4, n_p=2, n_d=2, nvs1=2, nvs2=2, nvs_p=2, nvs_d=1, n_b=4)),
]


@pytest.mark.parametrize("strategy,network,cfg", CONFIGS,
                         ids=[c[0] + "-" + c[1] + ("-zero3" if c[2].get("zero") else "") for c in CONFIGS])
def test_pair_matrix_rows_sum_to_the_per_gpu_traffic(strategy, network, cfg):
    pt = tr.pair_matrix(model="gpt3_175b", **B200_8, strategy=strategy, network=network, microbatch=2,
                        check=False, **cfg)
    sums = pt.row_sums()
    for t, name in zip(TYPES, tr.TYPE_NAMES):
        want = np.array([pt.per_gpu[f"{t}_{k}"] for k in LINKS])
        got = sums[name].mean(axis=0) if t == "pp" else sums[name]
        np.testing.assert_allclose(got - want, 0.0, atol=1e-12 * max(want.sum(), 1.0))
    assert max(tr.check_rows(pt).values()) <= tr.CHECK_RTOL
    # a GPU of an inner stage sends 2 m v messages per boundary pair, the first and last stage half
    ip = pt.place.coords()["ip"]
    pp = sums["PP"].sum(axis=1)
    inner = (ip > 0) & (ip < cfg["n_p"] - 1)
    if inner.any():
        np.testing.assert_allclose(pp[ip == 0], pp[inner].mean() / 2, rtol=1e-12)


def test_pair_matrix_forwarded_on_rail_only():
    common = dict(model="gpt3_175b", **B200_8, strategy="tp1d", profile="railonly", global_batch=1536,
                  network="rail_only", n1=2, n_p=6, n_d=2, microbatch=1, nvs1=2, nvs_p=2, nvs_d=2, interleave=2)
    pt = tr.pair_matrix(**common)
    assert pt.row_sums()["PP"][:, 2].sum() > 0  # the wrap crosses rails
    fw = tr.pair_matrix(**common, forward=True)
    sums = fw.row_sums()["PP"].mean(axis=0)
    g = pt.per_gpu
    np.testing.assert_allclose(sums, [g["pp_hb"] + g["forwarded"], g["pp_rail"] + g["pp_cross"], 0.0],
                               rtol=1e-12)


def test_one_domain_has_no_nic_bytes():
    pt = tr.pair_matrix(model="gpt3_175b", **B200_8, strategy="tp1d", network="rail_only",
                        n1=2, n_p=2, n_d=2, microbatch=1)
    assert pt.place.per_domain == 8 and (pt.domain == 0).all()
    total = pt.total()
    assert total.sum() > 0 and np.all(total[pt.link_class() != 0] == 0.0)
    assert pt.per_gpu["rail"] == pt.per_gpu["cross"] == 0.0


def test_tp_stays_inside_domains_when_nvs1_is_n1():
    pt = tr.pair_matrix(model="gpt3_175b", **B200_8, strategy="tp1d", network="rail_optimized",
                        n1=4, n_p=2, n_d=8, microbatch=1, nvs1=4, nvs_p=1, nvs_d=2)
    tp = pt.matrices["TP"]
    assert tp.sum() > 0 and np.all(tp[pt.domain[:, None] != pt.domain[None, :]] == 0.0)
    assert pt.per_gpu["tp_rail"] == pt.per_gpu["tp_cross"] == 0.0
    assert pt.matrices["EP"].sum() == 0.0


def test_degree_one_groups_add_no_pairs():
    pt = tr.pair_matrix(model="gpt3_175b", **B200_8, strategy="tp1d", network="rail_only",
                        n1=8, n_p=1, n_d=1, microbatch=1)
    assert pt.matrices["TP"].sum() > 0
    assert pt.matrices["DP"].sum() == pt.matrices["PP"].sum() == pt.matrices["EP"].sum() == 0.0


def test_writers(tmp_path):
    pt = tr.pair_matrix(model="gpt3_175b", **B200_8, strategy="tp1d", network="rail_only",
                        n1=8, n_p=2, n_d=2, microbatch=1, nvs1=8, nvs_p=1, nvs_d=1)
    path = tr.write_parquet(pt, tmp_path / "t.parquet")
    f = pl.read_parquet(path)
    assert f.columns[:4] == ["src", "dst", "type", "bytes"]
    per = f.group_by("type").agg(pl.col("bytes").sum() / 1e9 / pt.place.n)
    got = dict(per.iter_rows())
    assert got["TP"] == pytest.approx(pt.per_gpu["tp_gb"], rel=1e-12)
    assert got["PP"] == pytest.approx(pt.per_gpu["pp_gb"], rel=1e-12)
    assert set(f["link"]) <= {"hb", "rail"}
    assert b"dse.traffic" in pq.read_schema(path).metadata
    png = tr.plot(pt, tmp_path / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 200_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet", "t.png"]  # no temporary left


def test_command(tmp_path, capsys):
    from dse.cli import main

    rc = main(["traffic", "model=gpt3_175b", "system=b200", "system.nvs_size=8", "network=rail_only", "strategy=tp1d",
               "n1=8", "n_p=2", "n_d=2", "microbatch=1", "nvs1=8", "nvs_p=1", "nvs_d=1", "--matrix", str(tmp_path / "m")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "NIC same rail GB" in out and "TP" in out and "wrote" in out
    assert (tmp_path / "m.parquet").exists() and (tmp_path / "m.png").exists()
    rc = main(["traffic", "model=gpt3_175b", "strategy=tp1d", "n1=8", "n_p=2", "n_d=2"])
    assert rc == 2 and "nvs1: missing" in capsys.readouterr().err


def test_command_counts_each_recompute_mode_precision_and_sequence_parallelism(capsys):
    """`dse traffic` counts the configuration asked: recompute=full sends every forward TP collective
    again (1.5x none's bytes under sequence parallelism); without sequence parallelism each block's
    two allreduces a direction send what its two allgathers and two reduce-scatters do (a ring
    allreduce is a reduce-scatter and an allgather); FP8 matmuls with quantized sequence-parallel
    allgathers (profile.fp8_tp_gather) halve the allgathers, 3/4 of the TP bytes. Each is named in the
    configuration line; the API takes names or codes; a precision the system has no rate for is
    refused in one line, as `dse eval` refuses it."""
    from dse.cli import main

    point = ["model=llama3_8b", "system=dgx_h100", "global_batch=512", "strategy=tp1d", "n1=2", "n_d=4"]

    def tp(*extra):
        assert main(["traffic", *point, *extra]) == 0
        out = capsys.readouterr().out
        for item in extra:
            key, value = item.split("=", 1)
            if key in ("recompute", "seq_par", "precision"):
                assert f"{key}={value} " in out
        return float(next(ln.split()[-2] for ln in out.splitlines() if ln.startswith("TP ")))

    none = tp("recompute=none")
    assert tp("recompute=full") == pytest.approx(1.5 * none, rel=1e-5)
    assert tp("recompute=none", "seq_par=false") == pytest.approx(none, rel=1e-5)
    # and the stage boundary sends the whole sequence, not its n1 = 2 shard
    piped = dict(model="llama3_8b", system="dgx_h100", global_batch=512, strategy="tp1d", n1=2, n_p=2, n_d=2)
    assert tr.traffic_one(**piped, seq_par=False)["pp_gb"] == pytest.approx(
        2 * tr.traffic_one(**piped, seq_par=True)["pp_gb"], rel=1e-12)
    assert tp("recompute=none", "precision=fp8", "profile.fp8_tp_gather=true") == pytest.approx(0.75 * none, rel=1e-5)
    api = dict(model="llama3_8b", system="dgx_h100", global_batch=512, strategy="tp1d", n1=2, n_d=4)
    assert tr.traffic_one(**api, recompute=0)["tp_gb"] == tr.traffic_one(**api, recompute="none")["tp_gb"]
    assert tr.traffic_one(**api, precision="fp8")["tp_gb"] == tr.traffic_one(**api, precision=1)["tp_gb"]
    with pytest.raises(SpecError, match=r"^seq_par = 'false': must be true or false \(1 or 0\)$"):
        tr.traffic_one(**api, seq_par="false")  # the words dse.evaluate uses
    assert main(["traffic", "model=llama3_8b", "system=a100", "global_batch=512", "strategy=tp1d", "n1=2", "n_d=2",
                 "precision=fp8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("dse traffic: error: precision = fp8: system 'a100' has no FP8 rate (system.matrix_flops_fp8 = 0); "
                   "use another precision or set system.matrix_flops_fp8")


def test_pair_matrix_of_an_moe_model_sums_to_the_per_gpu_traffic():
    """DeepSpeed-MoE 1.3B on 128 GPUs, experts over every replica (ep = n_d = 128): the all-to-all
    and the dense/MoE block mix of the per-GPU accounting, pair by pair."""
    pt = tr.pair_matrix(model="deepspeed_moe_1p3b", system="dgx_a100_seed000", network="rail_only",
                        strategy="tp1d", n_d=128, microbatch=8, nvs1=1, nvs_p=1, nvs_d=8, global_batch=1024,
                        check=False)
    sums = pt.row_sums()
    assert pt.per_gpu["ep_gb"] > 0 and pt.per_gpu["ep_cross"] > 0
    for t, name in zip(TYPES, tr.TYPE_NAMES):
        want = np.array([pt.per_gpu[f"{t}_{k}"] for k in LINKS])
        got = sums[name].mean(axis=0) if t == "pp" else sums[name]
        np.testing.assert_allclose(got - want, 0.0, atol=1e-12 * max(want.sum(), 1.0))


@pytest.mark.parametrize("x,y", [(2, 3), (4, 2), (8, 8), (1, 4), (3, 1)])
def test_deduplicated_alltoall_template_sends_what_collective_bytes_counts(x, y):
    """An all-to-all deduplicated per destination domain (share r): D to each GPU of the sender's
    domain, x D r along its rail to each other domain, nothing across rails; the relayed
    (x-1)(y-1) D are forwarded bytes. Closed forms, and the pair template row by row."""
    share, v = 0.5, 6.0
    d = v / (x * y)
    for network in ("two_tier", "rail_optimized", "rail_only"):
        b = collective_bytes("alltoall", v, x * y, x, network, share)
        assert float(b.hb) == pytest.approx((x - 1) * d, rel=1e-15)
        assert float(b.rail) == pytest.approx((y - 1) * x * d * share, rel=1e-15)
        assert float(b.cross) == 0.0
        relay = (x - 1) * (y - 1) * d
        assert float(b.forwarded) == pytest.approx(relay, rel=1e-15, abs=0)
    t = tr.template("alltoall", v, x, y, share)
    r, c = np.divmod(np.arange(x * y), x)
    same_row, same_col = r[:, None] == r[None, :], c[:, None] == c[None, :]
    want = collective_bytes("alltoall", v, x * y, x, "rail_optimized", share)
    for cls, link in zip([same_row, ~same_row & same_col, ~same_row & ~same_col], LINKS):
        np.testing.assert_allclose(np.where(cls, t, 0.0).sum(axis=1), float(getattr(want, link)), rtol=1e-13, atol=0)


def test_pair_matrix_of_a_node_limited_moe_sums_to_the_per_gpu_traffic():
    """Qwen3-30B-A3B's experts over 32 GPUs in 4 domains with node-limited routing (M = 2): the
    all-to-all pairs are the two-step schedule's and their row sums are the per-GPU accounting
    (`check` raises otherwise); no expert byte crosses rails, fewer cross domains than without."""
    from kernels.params import PROFILES

    common = dict(model="qwen3_30b_a3b", system="dgx_h100", network="rail_optimized", strategy="tp1d", n_d=32,
                  microbatch=1, nvs1=1, nvs_p=1, nvs_d=8, ep=32, global_batch=64)
    limited = tr.pair_matrix(**common, profile=PROFILES["default"]._replace(ep_node_limit=2, expert_tp=False))
    plain = tr.pair_matrix(**common, profile=PROFILES["default"]._replace(expert_tp=False))
    assert limited.per_gpu["ep_cross"] == 0.0 < plain.per_gpu["ep_cross"]
    # k = 8 copies, m = min(2, 8, 4) = 2 domains: the inter-domain bytes, all on the rails, are
    # m / k = 1/4 of the plain exchange's rail and cross-rail bytes together, x (y-1) D
    assert limited.per_gpu["ep_rail"] == pytest.approx(
        (plain.per_gpu["ep_rail"] + plain.per_gpu["ep_cross"]) * 0.25, rel=1e-12)


# ---------------------------------------------------------------------------- context parallelism

#: Llama 3 8B with tp1d's context parallelism cp = n2 and no tensor parallelism (n1 = 1): the only
#: block collectives are the cp ring's K, V exchange; global batch 512 over n_d replicas
CP = dict(model="llama3_8b", system="dgx_h100", strategy="tp1d", global_batch=512, n1=1, microbatch=1)


def _cp_ring_gb(cp, n_d, b=1, n_p=1, again=1):
    """GB one GPU sends per iteration in the cp ring (kernels.attention.context_exchange), from the
    model's definition: K and V chunks of C = b kv_width (l / cp) eps, kv_width = 2 (h_kv / n1) q;
    cp - 1 steps of C forward, `again` times more when recomputation runs the core's forward again
    (selective, the default mode, checkpoints it: once), 2 (cp - 1) C backward; per block and
    microbatch, over the stage's d / n_p blocks and global_batch / (n_d b) microbatches."""
    kv_width = 2 * (8 / 1) * 128  # kv_heads 8, head_dim 128, n1 = 1
    chunk = b * kv_width * (8192 / cp) * 2e-9  # bf16, GB
    return ((1 + again) * (cp - 1) * chunk + 2 * (cp - 1) * chunk) * (32 / n_p) * (512 // n_d // b)


@pytest.mark.parametrize("cp,n_d,local,link", [(2, 4, dict(nvs2=2), "hb"),
                                               (4, 2, dict(nvs1=1, nvs2=1, nvs_p=1, nvs_d=2), "rail")])
def test_context_parallel_ring_bytes_by_hand(cp, n_d, local, link):
    """The ring's bytes per GPU in closed form, typed CP (no tensor parallelism: TP is 0): inside
    the domain when it holds the whole ring (nvs2 = cp), on the rail when each GPU of the ring is in
    its own domain (nvs2 = 1)."""
    row = tr.traffic_one(**CP, network="rail_optimized", n2=cp, n_d=n_d, **local)
    want = _cp_ring_gb(cp, n_d)
    assert row[f"cp_{link}"] == pytest.approx(want, rel=1e-12)
    assert row["cp_gb"] == pytest.approx(want, rel=1e-12) and row["cp_cross"] == row["forwarded"] == 0.0
    assert row["tp_gb"] == 0.0 and row["dp_gb"] > 0
    assert row["total"] == pytest.approx(row["cp_gb"] + row["dp_gb"], rel=1e-15)


@pytest.mark.parametrize("cp,n_d,local,network", [(2, 4, dict(nvs2=2), "two_tier"),
                                                  (4, 2, dict(nvs1=1, nvs2=1, nvs_p=1, nvs_d=2), "rail_only"),
                                                  (4, 2, dict(nvs1=1, nvs2=4, nvs_p=1, nvs_d=1), "rail_optimized")])
def test_pair_matrix_draws_the_context_parallel_ring(cp, n_d, local, network):
    """Each GPU sends its K, V chunks to the next rank of its cp ring (Megatron's order: the
    placement's n2 coordinate, i2 -> i2 + 1 mod cp), nothing to any other GPU; the pairs sum to
    the per-GPU table, GPU by GPU and link by link."""
    pt = tr.pair_matrix(**CP, network=network, n2=cp, n_d=n_d, **local)
    ring = pt.matrices["CP"]
    want = _cp_ring_gb(cp, n_d)
    assert pt.matrices["TP"].sum() == 0.0
    assert ring.sum() == pytest.approx(want * pt.place.n, rel=1e-12)
    assert ring.sum() == pytest.approx(pt.per_gpu["cp_gb"] * pt.place.n, rel=1e-12)
    assert pt.total().sum() == pytest.approx(pt.per_gpu["total"] * pt.place.n, rel=1e-12)
    assert max(tr.check_rows(pt).values()) <= tr.CHECK_RTOL
    co = pt.place.coords()
    src, dst = np.nonzero(ring)
    assert len(src) == pt.place.n  # one successor each
    assert (co["i2"][dst] == (co["i2"][src] + 1) % cp).all()
    for k in ("i1", "ip", "id"):  # the same cp group: every other coordinate equal
        assert (co[k][dst] == co[k][src]).all()
    np.testing.assert_allclose(ring[src, dst], want, rtol=1e-12)


def test_pair_matrix_refuses_a_ring_spread_over_domains_with_several_gpus_in_each(capsys, tmp_path):
    """cp = 4 with nvs_cp = 2: consecutive ranks meet inside a domain and across rails, which the
    per-GPU accounting (every step at the NIC) does not split: refused, in one line, nothing written."""
    with pytest.raises(NotImplementedError, match=r"cp = 4 GPUs spans 2 domains with nvs_cp = 2"):
        tr.pair_matrix(**CP, n2=4, n_d=4, nvs1=1, nvs2=2, nvs_p=1, nvs_d=4)
    from dse.cli import main

    out = tmp_path / "m"
    assert main(["traffic", "model=llama3_8b", "system=dgx_h100", "global_batch=512", "strategy=tp1d", "n1=1",
                 "cp=4", "n_d=4", "nvs1=1", "nvs_cp=2", "nvs_p=1", "nvs_d=4", "--matrix", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dse traffic: error: --matrix: ") and "nvs_cp = 1" in err
    assert list(tmp_path.iterdir()) == []


def test_recomputation_sends_the_forward_collectives_again():
    """Recomputation runs forward collectives again in backward, and each GPU sends them again. Llama 3
    8B, tp1d n1 = 2 (sequence parallel: per block and microbatch two allgathers and two reduce-scatters
    forward, as many backward) and cp = 2 (the core's K, V ring): full recomputation adds every forward
    collective, half the TP bytes of none (x 1.5), and the ring's forward steps, a third of its bytes
    (x 4/3); selective (core_attn) checkpoints the core alone: TP as none, CP as full; a selective mode
    that recomputes nothing of a dense block (layernorm: its norms are fused into the linears) sends
    what none does. Under torchtitan's operator-level SAC (fsdp2) selective recomputes half of the
    block's forward collectives outside the core and keeps the core: half of full's TP extra, CP as
    none."""
    from kernels.params import PROFILES

    point = dict(model="llama3_8b", system="dgx_h100", global_batch=512, network="rail_optimized", microbatch=1,
                 strategy="tp1d", n1=2, n2=2, n_d=2, nvs2=2)
    r = {k: tr.traffic_one(**point, recompute=k) for k in ("none", "selective", "full")}
    assert r["none"]["tp_gb"] > 0 and r["none"]["cp_gb"] > 0
    assert r["full"]["tp_gb"] == pytest.approx(1.5 * r["none"]["tp_gb"], rel=1e-12)
    assert r["full"]["cp_gb"] == pytest.approx(4 / 3 * r["none"]["cp_gb"], rel=1e-12)
    assert r["selective"]["tp_gb"] == pytest.approx(r["none"]["tp_gb"], rel=1e-12)
    assert r["selective"]["cp_gb"] == pytest.approx(r["full"]["cp_gb"], rel=1e-12)
    for k in ("dp_gb", "pp_gb", "ep_gb"):  # recomputation adds nothing outside the blocks' collectives
        assert r["none"][k] == r["selective"][k] == r["full"][k]
    norms = tr.traffic_one(**point, recompute="selective",
                           profile=PROFILES["default"]._replace(recompute_modules="layernorm"))
    assert norms["tp_gb"] == r["none"]["tp_gb"] and norms["cp_gb"] == r["none"]["cp_gb"]
    sac = {k: tr.traffic_one(**point, recompute=k, profile="fsdp2") for k in ("none", "selective", "full")}
    extra = sac["full"]["tp_gb"] - sac["none"]["tp_gb"]
    assert extra > 0
    assert sac["selective"]["tp_gb"] - sac["none"]["tp_gb"] == pytest.approx(0.5 * extra, rel=1e-12)
    assert sac["selective"]["cp_gb"] == pytest.approx(sac["none"]["cp_gb"], rel=1e-12)


def test_context_parallel_bytes_are_cp_and_the_rest_unchanged():
    """With n1 = 2 and cp = 2 the n1 collectives stay TP and are those of cp = 1 at half the sequence
    shard (sequence parallelism splits l / cp rows over n1); Llama 3's allgather form of the exchange
    (profile cp_comm) is CP too; tp2d's n2, a tensor-parallel axis, stays TP."""
    from kernels.params import PROFILES

    # no recomputation: the forward exchange once (selective's second one: the test above)
    common = dict(model="llama3_8b", system="dgx_h100", global_batch=512, network="rail_optimized", microbatch=1,
                  recompute="none")
    cp2 = tr.traffic_one(**common, strategy="tp1d", n1=2, n2=2, n_d=2, nvs2=2)
    cp1 = tr.traffic_one(**common, strategy="tp1d", n1=2, n_d=2)
    assert cp1["cp_gb"] == 0.0 and cp2["tp_gb"] == pytest.approx(cp1["tp_gb"] / 2, rel=1e-12)
    kv_width = 2 * (8 / 2) * 128  # kv heads per GPU x head_dim, K and V
    chunk = kv_width * (8192 / 2) * 2e-9
    assert cp2["cp_hb"] == pytest.approx(3 * chunk * 32 * (512 // 2), rel=1e-12)
    # allgather form: K, V of the whole sequence G gathered forward, again backward, dK dV reduce-scattered:
    # 3 (cp - 1) G / cp a block and microbatch
    gathered = tr.traffic_one(**common, strategy="tp1d", n1=2, n2=2, n_d=2, nvs2=2,
                              profile=PROFILES["default"]._replace(cp_comm="allgather"))
    g = kv_width * 8192 * 2e-9
    assert gathered["cp_hb"] == pytest.approx(3 * g / 2 * 32 * (512 // 2), rel=1e-12)
    assert gathered["tp_gb"] == cp2["tp_gb"]
    tp2d = tr.traffic_one(**common, strategy="tp2d", n1=2, n2=2, n_d=2, nvs2=2)
    assert tp2d["cp_gb"] == 0.0 and tp2d["tp_gb"] > 0


def test_the_table_and_the_pair_frame_name_cp(tmp_path, capsys):
    from dse.cli import main

    out = tmp_path / "m"
    assert main(["traffic", "model=llama3_8b", "system=dgx_h100", "global_batch=512", "strategy=tp1d", "n1=1",
                 "cp=2", "n_d=4", "nvs_cp=2", "--matrix", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = {ln.split()[0]: ln.split()[1:] for ln in lines if ln.split() and ln.split()[0] in tr.TYPE_NAMES}
    want = _cp_ring_gb(2, 4)
    assert float(row["CP"][3]) == pytest.approx(want, rel=1e-5) and float(row["TP"][3]) == 0.0
    f = pl.read_parquet(f"{out}.parquet")
    per = dict(f.group_by("type").agg(pl.col("bytes").sum() / 1e9 / 8).iter_rows())
    assert per["CP"] == pytest.approx(want, rel=1e-12) and "TP" not in per
