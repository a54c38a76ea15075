"""The NIC-interface model of seed 004 (kernels/nic.py, dse/spec/nic.py, dse.commands.validate_nic)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import nic as K
from dse.spec.nic import NicSpec, fit_fixed_latency, load_nic, nic_presets
from dse.spec.specs import SpecError

GBPS = 8.0
KIB = 1024

# Seed 004 Table 1, ib_write: size (B), bandwidth (GB/s), latency (us).
TABLE1 = (
    (128, 0.44, 1.12), (256, 0.87, 1.56), (512, 1.75, 1.58), (1 * KIB, 3.30, 1.70),
    (2 * KIB, 7.35, 1.95), (4 * KIB, 11.02, 2.46), (8 * KIB, 11.58, 2.84), (16 * KIB, 11.53, 3.88),
    (32 * KIB, 11.60, 5.41), (64 * KIB, 11.62, 8.06), (128 * KIB, 11.90, 13.39),
    (256 * KIB, 11.92, 24.27), (512 * KIB, 11.93, 45.73), (1024 * KIB, 11.93, 88.95),
    (2048 * KIB, 11.93, 174.65), (4096 * KIB, 11.86, 345.97),
)


@pytest.fixture(scope="module")
def spec() -> NicSpec:
    return load_nic("seed004")


@pytest.fixture(scope="module")
def scaleout() -> NicSpec:
    return load_nic("seed004_scaleout")


# ---- Eq. 2 -------------------------------------------------------------------------------------


def test_traffic_overhead_seed_packets():
    oh = float(K.traffic_overhead(20, 128, 64, 4032))
    assert round(oh, 2) == 1.14
    assert oh == pytest.approx(1.15625 / (1 + 64 / 4032), rel=1e-15)
    assert 20 / 128 + 1 == 1.15625
    assert round(64 / 4032 + 1, 5) == 1.01587


def test_traffic_overhead_from_preset(spec):
    assert round(float(K.traffic_overhead(*spec.packets)), 2) == 1.14
    # Intra-node packets as large as the inter-node ones (the seed's 4 KiB case): no overhead.
    assert float(K.traffic_overhead(64, 4032, 64, 4032)) == 1.0


def test_traffic_overhead_broadcasts():
    payload = jnp.array([128.0, 256.0, 512.0, 4032.0])[:, None]
    header = jnp.array([20.0, 64.0])[None, :]
    oh = K.traffic_overhead(header, payload, 64, 4032)
    assert oh.shape == (4, 2) and oh.dtype == jnp.float64
    assert bool(jnp.all(jnp.diff(oh, axis=0) < 0))  # larger intra payloads, less overhead


@settings(max_examples=200, deadline=None)
@given(hi=st.integers(0, 512), pi=st.integers(1, 8192), he=st.integers(0, 512),
       pe=st.integers(1, 8192))
def test_traffic_overhead_vs_relative_header(hi, pi, he, pe):
    oh = float(K.traffic_overhead(hi, pi, he, pe))
    if hi * pe > he * pi:  # intra header weighs more on its payload
        assert oh > 1.0
    elif hi * pe == he * pi:
        assert oh == pytest.approx(1.0, rel=1e-15)
    else:
        assert oh < 1.0


# ---- Eq. 3, sections 4.3 and 4.5 -------------------------------------------------------------------


def test_preset_capacities_are_the_seed_constants(spec, scaleout):
    assert spec.nic_path_capacity * GBPS * 100 == pytest.approx(15703.9, rel=1e-12)
    assert scaleout.nic_path_capacity * GBPS * 100 == pytest.approx(16384.0, rel=1e-12)


@pytest.mark.parametrize("nodes, peak_gbps, bound_gbps", [(128, 524288, 91980), (512, 2097152, 367921)])
def test_section_4_5_bound(scaleout, nodes, peak_gbps, bound_gbps):
    """Configs #2 and #4: C1 traffic, 8 x 512 Gbps per node, TrafficOverhead as printed (1.14)."""
    oh = round(float(K.traffic_overhead(*scaleout.packets)), 2)
    f = scaleout.inter_node_fraction("C1")
    bound = float(K.throughput_bound(scaleout.nic_path_capacity, oh, f, nodes)) * GBPS
    peak = float(K.peak_throughput(512 / GBPS, 8, nodes)) * GBPS
    assert peak == peak_gbps
    assert round(bound) == bound_gbps
    assert round(100 * float(K.saturation_load(bound, peak)), 2) == 17.54
    # With Eq. 2's unrounded overhead the bound is 0.16 % higher.
    exact = float(K.throughput_bound(scaleout.nic_path_capacity,
                                     K.traffic_overhead(*scaleout.packets), f, nodes)) * GBPS
    assert exact / bound == pytest.approx(1.14 / 1.13818359375, rel=1e-12)


def test_section_4_3_formula(spec):
    """Throughput = 15703.9 / (1.14 x TrafficInterNode %) x NumNodes."""
    for pct in (5, 10, 15, 20):
        for nodes in (1, 32, 512):
            got = float(K.throughput_bound(spec.nic_path_capacity, 1.14, pct / 100, nodes)) * GBPS
            assert got == pytest.approx(15703.9 / (1.14 * pct) * nodes, rel=1e-12)
    assert math.isinf(float(K.throughput_bound(spec.nic_path_capacity, 1.14, 0.0, 32)))


def test_bound_is_effective_bandwidth_per_node(spec):
    """Eq. 3 per node = G * effective_nic_bandwidth(link = Eq. 3 capacity) / f."""
    oh = K.traffic_overhead(*spec.packets)
    for g in (1, 2, 4, 8):
        for f in (0.05, 0.2, 1.0):
            eff = K.effective_nic_bandwidth(jnp.inf, spec.nic_path_capacity, g, oh)
            assert float(g * eff / f) == pytest.approx(
                float(K.throughput_bound(spec.nic_path_capacity, oh, f, 1)), rel=1e-14)


def test_section_3_5_and_4_4_arithmetic():
    assert float(K.peak_throughput(512, 8, 32)) == 131072
    assert float(K.nic_link_load(512, 1, 0.05)) == pytest.approx(25.6)
    assert float(K.nic_link_load(512, 8, 0.05)) == pytest.approx(204.8)
    assert float(K.nic_link_load(128, 32, 0.2)) == pytest.approx(819.2)
    assert [float(K.peak_throughput(128, g, 32)) for g in (2, 4, 8)] == [8192, 16384, 32768]
    assert float(K.peak_throughput(400, 1, 32)) == 12800
    loads = [float(K.nic_link_load(128, 8, f)) for f in (0.05, 0.10, 0.15, 0.20)]
    assert loads == pytest.approx([51.2, 102.4, 153.6, 204.8])
    # The 128 Gbps switch -> NIC link carries C4 and C3 but not C2 and C1, with or without the
    # repacketization overhead.
    oh = float(K.traffic_overhead(20, 128, 64, 4032))
    for f, saturates in ((0.05, False), (0.10, False), (0.15, True), (0.20, True)):
        assert (float(K.nic_link_load(128, 8, f)) > 128) == saturates
        assert (float(K.nic_link_load(128, 8, f, oh)) > 128) == saturates


# Saturation the seed reports (32 nodes): Gbps/acc, acc/node, inter-node share, stated load or
# verdict.
SATURATION = [
    (512, 8, 0.05, 0.70),   # section 3.5, Fig. 4a (the fit's own scenario)
    (128, 8, 0.20, 0.60),   # section 4.4.1, conf #1
    (256, 8, 0.20, 0.30),   # conf #2
    (512, 8, 0.20, 0.10),   # conf #3
    (512, 2, 0.20, 0.60),   # section 4.4.2, Fig. 13
    (128, 2, 0.20, False),  # Fig. 11b
    (128, 4, 0.20, False),  # Fig. 11c
    (128, 8, 0.05, False),  # Fig. 11d, C4
    (128, 8, 0.10, False),  # C3
    (128, 8, 0.15, True),   # C2
    (128, 8, 0.20, True),   # C1
    (256, 4, 0.15, True),   # Fig. 12c, C2
]


@pytest.mark.parametrize("gbps, g, f, stated", SATURATION)
def test_saturation_loads_match_simulations(spec, gbps, g, f, stated):
    """Eq. 3 (section 4.3 fit) reproduces where the simulated curves saturate, within one load step
    (the seed simulates loads 10 % apart)."""
    oh = K.traffic_overhead(*spec.packets)
    bound = K.throughput_bound(spec.nic_path_capacity, oh, f, 32)
    load = float(K.saturation_load(bound, K.peak_throughput(gbps / GBPS, g, 32)))
    if isinstance(stated, bool):
        assert (load < 1.0) == stated
    else:
        assert load < 1.0 and abs(load - stated) <= 0.10


# ---- effective NIC bandwidth -----------------------------------------------------------------------


def test_effective_nic_bandwidth_values():
    # 8 GPUs behind one 64 GB/s link with the seed's packets: 64 / (8 * 1.138) = 7.03 GB/s each.
    oh = K.traffic_overhead(20, 128, 64, 4032)
    assert float(K.effective_nic_bandwidth(50.0, 64.0, 8, oh)) == pytest.approx(64 / (8 * 1.13818359375))
    assert float(K.effective_nic_bandwidth(50.0, 64.0, 1, 1.0)) == 50.0
    assert float(K.effective_nic_bandwidth(50.0, 40.0, 1, 1.0)) == 40.0


def test_effective_nic_bandwidth_broadcasts_and_jits():
    nic = jnp.array([25.0, 50.0, 100.0])[:, None, None]
    g = jnp.array([1, 2, 4, 8])[None, :, None]
    oh = jnp.array([1.0, 1.14])[None, None, :]
    out = jax.jit(K.effective_nic_bandwidth)(nic, 64.0, g, oh)
    assert out.shape == (3, 4, 2) and out.dtype == jnp.float64
    assert bool(jnp.all(out <= nic))


_bw = st.floats(0.1, 1.0e4, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(nic=_bw, link=_bw, g=st.integers(1, 64), hi=st.integers(0, 256), pi=st.integers(1, 4096),
       he=st.integers(0, 256), pe=st.integers(1, 8192))
def test_effective_nic_bandwidth_bounds(nic, link, g, hi, pi, he, pe):
    oh = K.traffic_overhead(hi, pi, he, pe)
    eff = float(K.effective_nic_bandwidth(nic, link, g, oh))
    assert 0.0 < eff <= nic
    if float(oh) >= 1.0:
        assert eff <= link / g * (1 + 1e-15)
        assert eff <= link * (1 + 1e-15)
    more = float(K.effective_nic_bandwidth(nic, link, g + 1, oh))
    assert more <= eff
    heavier = float(K.effective_nic_bandwidth(nic, link, g, oh * 1.5))
    assert heavier <= eff


def test_effective_nic_bandwidth_decreasing_in_sharing():
    g = jnp.arange(1, 65)
    eff = K.effective_nic_bandwidth(50.0, 64.0, g, 1.14)
    assert bool(jnp.all(jnp.diff(eff) <= 0)) and bool(jnp.any(jnp.diff(eff) < 0))


# ---- Eq. 1 and Table 1 ----------------------------------------------------------------------------


def test_pcie_rates(spec):
    link = spec.pcie_link()
    assert float(K.pcie_bandwidth(16, 8, 1.0)) * GBPS == 128.0
    assert float(K.pcie_bandwidth(link.width, link.data_rate, link.encoding)) == pytest.approx(15.753846, rel=1e-6)
    assert round(float(K.pcie_bandwidth(link.width, link.data_rate, link.encoding)) * GBPS) == 126
    assert spec.ib_wire_bandwidth == pytest.approx(12.12, abs=5e-3)
    ib_payload = float(K.packet_payload_bandwidth(spec.ib_wire_bandwidth, 64, 4032))
    assert round(ib_payload, 2) == 11.93
    assert float(K.pcie_payload_bandwidth(link)) > ib_payload  # PCIe does not bound ib_write


def test_pcie_latency_eq1(spec):
    link = spec.pcie_link()
    bpns = 16 * 8 * 128 / 130 / 8
    tlp, dllp = (20 + 128) / bpns, (2 + 6) / bpns
    for m in (128, 4096, 4 * 1024 * KIB):
        n = m / 128
        assert float(K.pcie_latency(m, link)) == pytest.approx((n * tlp + math.ceil(n / 3) * dllp) * 1e-9, rel=1e-14)
    assert float(K.pcie_latency(0, link)) == 0.0
    assert float(K.pcie_latency(129, link)) == pytest.approx((2 * tlp + dllp) * 1e-9)
    # Every TLP is charged a full MPS (the seed's TLPTime): non-decreasing, flat inside one TLP.
    t = K.pcie_latency(jnp.array([0.0, 1.0, 128.0, 1e6]), link)
    assert bool(jnp.all(jnp.diff(t) >= 0)) and float(t[1]) == float(t[2]) and float(t[3]) > float(t[2])


def _latency_model(spec):
    sizes = np.array([r[0] for r in TABLE1], dtype=np.float64)
    measured = np.array([r[2] for r in TABLE1]) * 1e-6
    args = (spec.pcie_link(), spec.ib_wire_bandwidth, spec.inter_header, spec.inter_payload)
    fixed = fit_fixed_latency(measured, K.remote_write_latency(sizes, *args, 0.0))
    model = np.asarray(K.remote_write_latency(sizes, *args, fixed))
    return sizes, measured, model, fixed


def test_eq1_path_against_table1_latency(spec):
    """Reproduction achieved (the seed claims only that simulation and measurement "follow the same
    trend"): with one fitted fixed latency, |error| <= 27 % at 128 B (whose 1.12 us is out of line
    with 256 B's 1.56 us), <= 14 % from 256 B to 4 MiB, <= 3.5 % from 128 KiB up, rms <= 9 %."""
    sizes, measured, model, fixed = _latency_model(spec)
    err = np.abs(model - measured) / measured
    assert 1.0e-6 < fixed < 1.6e-6
    assert err.max() <= 0.27
    assert err[sizes >= 256].max() <= 0.14
    assert err[sizes >= 128 * KIB].max() <= 0.035
    assert np.sqrt(np.mean(err ** 2)) <= 0.09


def test_eq1_path_against_table1_bandwidth(spec):
    """The ib_write plateau (>= 128 KiB) is the NIC's payload rate within 0.7 %."""
    stream = min(float(K.pcie_payload_bandwidth(spec.pcie_link())),
                 float(K.packet_payload_bandwidth(spec.ib_wire_bandwidth, 64, 4032)))
    for size, bw, _ in TABLE1:
        if size >= 128 * KIB:
            assert abs(stream - bw) / bw <= 0.007


def test_remote_write_latency_properties(spec):
    args = (spec.pcie_link(), spec.ib_wire_bandwidth, spec.inter_header, spec.inter_payload)
    sizes = jnp.array([0.0, 1.0, 128.0, 4032.0, 4033.0, 1e5, 4e6])
    t = K.remote_write_latency(sizes, *args, 1e-6)
    assert float(t[0]) == 0.0
    assert bool(jnp.all(jnp.diff(t) > 0))
    # Large messages stream at the slower stage (the inter-node wire here).
    big = 64 * 1024 * KIB
    slope = (float(K.remote_write_latency(2 * big, *args, 0.0)) - float(K.remote_write_latency(big, *args, 0.0))) / big
    wire_rate = float(K.packet_payload_bandwidth(spec.ib_wire_bandwidth, 64, 4032))
    assert 1e-9 / slope == pytest.approx(wire_rate, rel=1e-6)


def test_fit_fixed_latency_recovers_constant():
    p = np.array([1.0, 2.0, 5.0, 40.0])
    assert fit_fixed_latency(p + 0.7, p) == pytest.approx(0.7)


# ---- specs -------------------------------------------------------------------------------------


def test_presets_load(spec, scaleout):
    assert {"seed004", "seed004_scaleout"} <= set(nic_presets())
    assert spec.packets == (20, 128, 64, 4032)
    assert spec.pcie_encoding_ratio == 128 / 130 and spec.ib_encoding_ratio == 64 / 66
    assert spec.traffic_patterns == {"C1": 0.2, "C2": 0.15, "C3": 0.1, "C4": 0.05, "C5": 0.0}
    # The scale-out preset inherits everything but its name and Eq. 3's constant.
    same = {k: v for k, v in vars(scaleout).items() if k not in ("name", "nic_path_capacity")}
    assert same == {k: v for k, v in vars(spec).items() if k not in ("name", "nic_path_capacity")}


def test_overrides_and_mappings(spec):
    assert load_nic("seed004", accelerators_per_node=4).accelerators_per_node == 4
    assert load_nic(spec, pcie_encoding=0.5).pcie_encoding_ratio == 0.5
    data = {k: v for k, v in vars(spec).items()}
    assert load_nic(data) == spec


@pytest.mark.parametrize("change, message", [
    ({"intra_payload": 0}, "nic.intra_payload = 0: must be an integer >= 1"),
    ({"intra_header": -1}, "nic.intra_header = -1: must be an integer >= 0"),
    ({"inter_payload": 40.5}, "nic.inter_payload = 40.5: must be an integer >= 1"),
    ({"pcie_width": 3}, "nic.pcie_width = 3: must be one of 1, 2, 4, 8, 12, 16, 32"),
    ({"pcie_max_payload": 100}, "nic.pcie_max_payload = 100: must be one of 128, 256, 512"),
    ({"pcie_data_rate": 0.0}, "nic.pcie_data_rate = 0.0: must be in (0.0, inf)"),
    ({"pcie_encoding": "130b/128b"}, "nic.pcie_encoding = '130b/128b': must be '<data>b/<line>b'"),
    ({"ib_encoding": 1.5}, "nic.ib_encoding = 1.5: must be in (0.0, 1.0]"),
    ({"nic_bandwidth": "fast"}, "nic.nic_bandwidth = 'fast': must be a finite number"),
    ({"nic_path_capacity": -2.0}, "nic.nic_path_capacity = -2.0: must be in (0.0, inf)"),
    ({"accelerators_per_node": 0}, "nic.accelerators_per_node = 0: must be an integer >= 1"),
    ({"traffic_patterns": {"C1": 1.2}}, "nic.traffic_patterns.C1 = 1.2: must be in [0.0, 1.0]"),
    ({"traffic_patterns": [0.2]}, "nic.traffic_patterns = [0.2]: must be a mapping"),
    ({"bogus": 1}, "nic.bogus: unknown field"),
])
def test_validation_errors(change, message):
    with pytest.raises(SpecError) as info:
        load_nic("seed004", **change)
    text = str(info.value)
    assert text.startswith(message)
    assert "\n" not in text


def test_missing_field_and_unknown_preset(spec):
    data = {k: v for k, v in vars(spec).items() if k != "nic_bandwidth"}
    with pytest.raises(SpecError, match=r"^nic\.nic_bandwidth: missing"):
        load_nic(data)
    with pytest.raises(SpecError, match=r"^nic = 'nope': not a preset; valid: .*seed004"):
        load_nic("nope")
    with pytest.raises(SpecError, match=r"not a pattern; valid: C1, C2"):
        spec.inter_node_fraction("C9")


# ---- the command ---------------------------------------------------------------------------------


def test_validate_nic_command(capsys):
    from dse.commands.validate_nic import main

    assert main([]) == 0
    out = capsys.readouterr().out
    assert "TrafficOverhead = 1.15625 / 1.01587 = 1.1382 ~ 1.14" in out
    assert "91980" in out and "367921" in out and "17.54" in out
    assert " NO" not in out
    assert main(["--nic", "nope"]) == 2
    assert "not a preset" in capsys.readouterr().err
