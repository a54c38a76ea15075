"""The reference numbers of spec section 10: per-layer table, collectives, totals, stored optima.

GPT3-1T, 1D TP, B200, NVS 8, n = 4096 at the reference optimum: n1 = t = 4, n_p = 128, n_d = 8,
b = 1, (nvs1, nvs_d, nvs_p) = (4, 1, 2), m = 512 microbatches, L_s = 1 block per stage.
Printed entries are checked to half a unit of their last printed digit; exact values to 1e-12.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernels.collectives import collective_time
from kernels.block_time import block_cost
from kernels.iteration import evaluate_candidates, layer_table, prepare
from kernels.params import PROFILES, Candidates

LBNL = PROFILES["lbnl"]

# spec section 10, one block, one microbatch, per GPU: F_f, F_b (TFLOP), W, A (GB), t_f, t_b (s)
TABLE = {
    "fc1": ("2.6843", "5.3680", "1.31072", "0.104858", "1.36215e-3", "2.83633e-3"),
    "fc1-bias": ("5.24288e-5", "5.24288e-5", "5.12e-5", "0", "2.01933e-5", "2.01933e-5"),
    "act1": ("4.1943e-4", "6.81574e-4", "0", "0.104858", "2.62144e-5", "3.93216e-5"),
    "dpr1": ("5.24288e-5", "5.24288e-5", "0", "0.0524288", "3.2768e-5", "3.2768e-5"),
    "fc2": ("2.6843", "5.3680", "1.31072", "0.104858", "1.49448e-3", "2.704e-3"),
    "fc2-bias": ("5.24288e-5", "5.24288e-5", "5.12e-5", "0", "2.01933e-5", "2.01933e-5"),
    "dpr2": ("1.31072e-5", "1.31072e-5", "0", "0.0131072", "2.00483e-5", "2.00483e-5"),
    "ln1": ("1.17965e-4", "1.57284e-4", "1.024e-4", "0.0262144", "1.52765e-4", "1.5291e-4"),
    "qkv": ("2.01323", "4.02599", "0.98304", "0.104858", "1.02661e-3", "2.16532e-3"),
    "fusedla": ("0.112142", "0.279195", "0", "0.105185", "7.60709e-5", "1.59597e-4"),
    "vproj": ("0.671036", "1.3420", "0.32768", "0.0262144", "4.87849e-4", "6.91e-4"),
    "vproj-bias": ("5.24288e-5", "5.24288e-5", "5.12e-5", "0", "2.01933e-5", "2.01933e-5"),
    "dpr_v": ("1.31072e-5", "1.31072e-5", "0", "0.0131072", "2.00483e-5", "2.00483e-5"),
    "ln2": ("1.17965e-4", "1.57284e-4", "1.024e-4", "0.0262144", "1.52765e-4", "1.5291e-4"),
}
COLUMNS = ("flops_f", "flops_b", "weight", "activation", "t_f", "t_b")

# B200 constants of spec section 2.2
ALPHA_F, BETA_F = 2.5e-6, 900 * 0.7  # NVLink latency, effective bandwidth
ALPHA_S, BETA_S = 5e-6, 100 * 0.7  # InfiniBand
EPS = 2e-9


def printed(text: str) -> tuple[float, float]:
    """A printed number and half a unit of its last printed digit (0 for an exact '0')."""
    value = float(text)
    if value == 0:
        return 0.0, 0.0
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return value, 0.5 * 10.0 ** (int(exponent or 0) - decimals)


def assert_printed(ours: float, text: str, what: str = "") -> None:
    value, tol = printed(text)
    if tol == 0:
        assert ours == 0, what
    else:
        assert abs(ours - value) <= tol * (1 + 1e-9), f"{what}: {ours!r} vs printed {text}"


def cand(*v):
    return Candidates(*(np.int64(x) for x in v))


@pytest.fixture(scope="module")
def optimum():
    # (n1, n2, n_p, n_d, microbatch, nvs1, nvs2, nvs_p, nvs_d, n_b)
    return cand(4, 1, 128, 8, 1, 4, 1, 2, 1, 1)


@pytest.fixture(scope="module")
def system(b200):
    return b200.replace(nvs_size=8).params()


@pytest.fixture(scope="module")
def table(optimum, gpt3_1t, system):
    t = layer_table("tp1d", optimum, gpt3_1t.workload(4096), system, LBNL)
    return {name: {k: float(np.asarray(v)) for k, v in row.items()} for name, row in t.items()}


@pytest.fixture(scope="module")
def totals(optimum, gpt3_1t, system):
    m = evaluate_candidates("tp1d", optimum, gpt3_1t.workload(4096), system, LBNL)
    return {k: float(np.asarray(v)) for k, v in m._asdict().items()}


def test_printed_helper():
    assert printed("2.6843") == (2.6843, pytest.approx(5e-5))
    assert printed("1.36215e-3")[1] == pytest.approx(5e-9)
    assert printed("0") == (0.0, 0.0)


def test_layer_names_in_block_order(table):
    assert tuple(table) == tuple(TABLE)


@pytest.mark.parametrize("layer", list(TABLE))
def test_layer_row(table, layer):
    for col, text in zip(COLUMNS, TABLE[layer]):
        assert_printed(table[layer][col], text, f"{layer}.{col}")


def test_layer_values_exact(table):
    """Entries that are exact closed forms (spec 4.1 with t = 4, l = 2048, e = 25600, f = 4e)."""
    e, f, l, t = 25600, 102400, 2048, 4
    fc1 = table["fc1"]
    assert fc1["flops_f"] == pytest.approx(l * (f // t) * (2 * e - 1) * 1e-12, rel=1e-14)
    assert fc1["flops_b"] == pytest.approx((l * e * (2 * (f // t) - 1) + e * (f // t) * (2 * l - 1)) * 1e-12,
                                           rel=1e-14)
    assert fc1["weight"] == pytest.approx(e * (f // t) * EPS, rel=1e-15)
    assert fc1["activation"] == pytest.approx(l * e * EPS, rel=1e-15)
    # 1D fc2/vproj biases act on the unsharded (l, e) tensor in the reference
    assert table["fc2-bias"]["flops_f"] == pytest.approx(l * e * 1e-12, rel=1e-15)
    assert table["vproj-bias"]["weight"] == pytest.approx(e * EPS, rel=1e-15)
    assert table["ln1"]["activation"] == pytest.approx((l // t) * e * EPS, rel=1e-15)
    assert table["dpr1"]["activation"] == pytest.approx(l * (f // t) * 1e-9, rel=1e-15)


def tp_collective():
    return 3 * ALPHA_F + 0.75 * 0.1048576 / BETA_F


def test_tp_collective(system):
    expected = 3 * 2.5e-6 + 0.75 * 0.1048576 / 630
    assert expected == pytest.approx(1.32330e-4, abs=5e-10)
    for kind in ("allgather", "reducescatter"):
        got = float(collective_time(kind, 0.1048576, 4, 4, system, LBNL))
        assert got == pytest.approx(expected, rel=1e-15, abs=0)


def test_dp_collective(system):
    expected = 7 * 5e-6 + (7 / 8) * 3.9325184 / 70
    assert_printed(expected, "0.0491915")
    for kind in ("allgather", "reducescatter"):
        got = float(collective_time(kind, 3.9325184, 8, 1, system, LBNL))
        assert got == pytest.approx(expected, rel=1e-15, abs=0)


def test_tp_communication_per_layer(table):
    """Each block has eight exposed TP collectives (spec 4.2): fwd RS(fc2), AG(ln1), RS(vproj), AG(ln2);
    bwd RS(fc1), RS(ln1), RS(qkv), RS(ln2)."""
    forward = {"fc2", "ln1", "vproj", "ln2"}
    backward = {"fc1", "ln1", "qkv", "ln2"}
    t = tp_collective()
    for name, row in table.items():
        assert row["comm_f"] == (pytest.approx(t, rel=1e-14) if name in forward else 0.0), name
        assert row["comm_b"] == (pytest.approx(t, rel=1e-14) if name in backward else 0.0), name


def test_block_sums(optimum, gpt3_1t, system, table):
    c, w, s = prepare(optimum, gpt3_1t.workload(4096), system)
    blk = block_cost("tp1d", c, w, s, LBNL)
    assert float(blk.weight) == pytest.approx(3.9325184, rel=1e-14)
    assert float(blk.t_f) == pytest.approx(sum(r["t_f"] for r in table.values()), rel=1e-14)
    assert float(blk.t_b) == pytest.approx(sum(r["t_b"] for r in table.values()), rel=1e-14)
    # pipeline message: ln1's activation b floor(l/t) e eps
    assert float(blk.pipeline_message) == pytest.approx(0.0262144, rel=1e-15)


def test_totals_exact(totals):
    assert totals["iteration_time"] == pytest.approx(9.039049610051995, rel=1e-12, abs=0)
    assert totals["throughput"] == pytest.approx(453.14498500428505, rel=1e-12, abs=0)
    assert totals["memory"] == pytest.approx(98.09789184, rel=1e-12, abs=0)
    assert totals["mem_weights"] == pytest.approx(3.9325184, rel=1e-12, abs=0)
    assert totals["mem_grads"] == pytest.approx(3.9325184, rel=1e-12, abs=0)
    assert totals["mem_optimizer"] == pytest.approx(2.9493888, rel=1e-12, abs=0)
    assert totals["mem_activations"] == pytest.approx(87.28346624, rel=1e-12, abs=0)
    assert totals["feasible"]


def test_totals_printed(totals):
    assert_printed(totals["t_compute"], "6.57507", "t_comp")
    assert_printed(totals["t_tp_comm"], "0.542026", "t_tp_comm")
    assert_printed(totals["t_memory"], "0.0238723", "t_mem")
    assert_printed(totals["t_bubble"], "1.77694", "t_bubble")
    assert_printed(totals["flops_per_gpu"], "12569.76", "flops_per_gpu")
    assert_printed(totals["t_dp_comm"], "0.098383", "t_dp")
    assert_printed(totals["t_pp_comm"], "0.0227622", "t_pp")


def test_totals_closed_forms(totals, table):
    m, n_p = 512, 128
    # t_tp_comm: 8 collectives per block and microbatch, m microbatches, one block per stage
    assert totals["t_tp_comm"] == pytest.approx(8 * m * tp_collective(), rel=1e-12)
    # t_DP: allgather + reduce-scatter, both exposed once (L_s = 1)
    assert totals["t_dp_comm"] == pytest.approx(2 * (7 * ALPHA_S + (7 / 8) * 3.9325184 / BETA_S), rel=1e-12)
    # t_PP: 64 of 127 links inside a domain, the other 63 free in the reference (2 sends per microbatch)
    p = 64 / 127 * (ALPHA_F + 0.0262144 / BETA_F)
    assert totals["t_pp_comm"] == pytest.approx(2 * m * p, rel=1e-12)
    t_f = sum(r["t_f"] for r in table.values())
    t_b = sum(r["t_b"] for r in table.values())
    t_core = (t_f + t_b) * m + 2 * m * p
    assert totals["t_bubble"] == pytest.approx((n_p - 1) * t_core / m, rel=1e-12)
    assert totals["iteration_time"] == pytest.approx(t_core * (1 + (n_p - 1) / m) + totals["t_dp_comm"],
                                                     rel=1e-12)
    parts = ("t_compute", "t_memory", "t_tp_comm", "t_dp_comm", "t_pp_comm", "t_bubble")
    assert sum(totals[k] for k in parts) == pytest.approx(totals["iteration_time"], rel=1e-13)


OPTIMA = [
    # model, strategy, (n1, n2, n_p, n_d, b, nvs1, nvs2, nvs_p, nvs_d, n_b), t, throughput, mem
    ("gpt3_1t", "summa", (8, 1, 128, 16, 1, 8, 1, 1, 1, 8), 3.1922488032709015, 1283.1080070585601,
     35.15793184),
    ("gpt3_1t", "tp2d", (2, 4, 64, 32, 1, 2, 4, 1, 1, 1), 2.9611778793020993, 1383.2333506980538,
     69.12697872),
    ("vit_era5", "tp2d", (4, 4, 2, 128, 1, 4, 2, 1, 1, 1), 50.18371666038046, None, None),
    ("vit_era5", "summa", (1, 16, 1, 256, 1, 1, 8, 1, 1, 16), 53.78245285189537, None, None),
]


@pytest.mark.parametrize("model,strategy,c,t,thr,mem", OPTIMA, ids=[f"{m}-{s}" for m, s, *_ in OPTIMA])
def test_other_optima(model, strategy, c, t, thr, mem, system, gpt3_1t, vit_era5):
    spec = {"gpt3_1t": gpt3_1t, "vit_era5": vit_era5}[model]
    r = evaluate_candidates(strategy, cand(*c), spec.workload(4096), system, LBNL)
    assert float(r.iteration_time) == pytest.approx(t, rel=1e-12, abs=0)
    assert float(r.throughput) == pytest.approx(4096 / t, rel=1e-12, abs=0)
    if thr is not None:
        assert float(r.throughput) == pytest.approx(thr, rel=1e-12, abs=0)
        assert float(r.memory) == pytest.approx(mem, rel=1e-12, abs=0)
    assert bool(r.feasible)


# -------------------------------------------------------------------------------------------------
# numerics: exact floor division in float64


def test_fdiv_exact():
    from kernels.numerics import fdiv

    rng = np.random.default_rng(7)
    b = rng.integers(1, 1 << 20, 20000)
    a = np.concatenate([
        rng.integers(0, 1 << 40, 5000),
        b[5000:10000] * rng.integers(0, 1 << 20, 5000),  # exact multiples
        b[10000:15000] * rng.integers(1, 1 << 20, 5000) - 1,  # one below a multiple
        rng.integers(0, 1 << 12, 5000),  # small numerators
    ])
    got = np.asarray(fdiv(a, b))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, (a // b).astype(np.float64))
    # the shard sizes of spec section 1: ViT floors once the sequence split reaches 64
    assert float(fdiv(64800, 64)) == 1012.0 and float(fdiv(64800, 3)) == 21600.0
