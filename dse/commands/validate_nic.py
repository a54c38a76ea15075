"""Check the NIC-interface kernels (`kernels.nic`) against the numbers printed in seed 004.

    dse validate nic [--nic seed004] [--scaleout-nic seed004_scaleout]

Prints, as tables: Eq. 2's TrafficOverhead for the seed's packets (1.14); the link rates of sections
3.1, 3.2 and 4.1; Eq. 3's throughput bound against section 4.5's worked numbers; the NIC-link
arithmetic of sections 3.5 and 4.4; the saturation loads Eq. 3 predicts against those the seed
reports from its simulations; and Eq. 1, inside the end-to-end ib_write path, against Table 1's
measured latency and bandwidth, with the error per message size.

The hardware and packet parameters come from the `conf/nic/` presets; the seed's measurements and
stated results below are reference values to compare with, never inputs of the model (except the
experiment set-ups: node counts, accelerators per node, accelerator speeds).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Sequence

import numpy as np

from kernels import nic as K
from dse.spec.nic import NicSpec, fit_fixed_latency, load_nic
from dse.spec.specs import SpecError
from kernels.units import GBPS_PER_GB_S as GBPS, KIB


#: Table 1 (section 4.1), ib_write columns: message size (B), bandwidth (the header says GiB/s; the
#: values only fit the 12.12 GB/s line rate as GB/s) and one-way latency (us).
TABLE1_IB_WRITE = (
    (128, 0.44, 1.12), (256, 0.87, 1.56), (512, 1.75, 1.58), (1 * KIB, 3.30, 1.70),
    (2 * KIB, 7.35, 1.95), (4 * KIB, 11.02, 2.46), (8 * KIB, 11.58, 2.84), (16 * KIB, 11.53, 3.88),
    (32 * KIB, 11.60, 5.41), (64 * KIB, 11.62, 8.06), (128 * KIB, 11.90, 13.39),
    (256 * KIB, 11.92, 24.27), (512 * KIB, 11.93, 45.73), (1024 * KIB, 11.93, 88.95),
    (2048 * KIB, 11.93, 174.65), (4096 * KIB, 11.86, 345.97),
)
#: Section 4.1: "This maximum bandwidth is first achieved with 128 KiB messages."
PLATEAU_FROM = 128 * KIB

#: Section 4.5 / Table 3 (C1 traffic, 8 accelerators per node): config, nodes, Gbps per accelerator,
#: and the seed's peak, bound (Gbps) and share of peak where it prints them.
SCALE_OUT = (
    ("#1", 128, 256, None, None, None),
    ("#2", 128, 512, 524288, 91980, 17.54),
    ("#3", 512, 256, None, None, None),
    ("#4", 512, 512, 2097152, 367921, 17.54),
)

#: Saturation loads the seed reports (32 nodes): where, Gbps per accelerator, accelerators per node,
#: pattern, and the stated load (fraction) or verdict (True: saturates, False: does not).
SATURATION = (
    ("3.5 Fig. 4a", 512, 8, "C4", 0.70),
    ("4.4.1 conf #1", 128, 8, "C1", 0.60),
    ("4.4.1 conf #2", 256, 8, "C1", 0.30),
    ("4.4.1 conf #3", 512, 8, "C1", 0.10),
    ("4.4.2 Fig. 13b", 512, 2, "C1", 0.60),
    ("4.4.2 Fig. 11b", 128, 2, "C1", False),
    ("4.4.2 Fig. 11c", 128, 4, "C1", False),
    ("4.4.2 Fig. 11d", 128, 8, "C4", False),
    ("4.4.2 Fig. 11d", 128, 8, "C3", False),
    ("4.4.2 Fig. 11d", 128, 8, "C2", True),
    ("4.4.2 Fig. 11d", 128, 8, "C1", True),
    ("4.4.2 Fig. 12c", 256, 4, "C2", True),
)
SCALE_UP_NODES = 32
#: One step of the seed's simulated loads (10 loads per pattern, section 4.2).
LOAD_STEP = 0.10


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "  ") -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r):
        out = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        return indent + "  ".join(out).rstrip()

    rule = indent + "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


def _f(x: float, digits: int) -> str:
    return f"{x:,.{digits}f}".replace(",", "")


def _ref(x, digits: int) -> str:
    return "-" if x is None else _f(x, digits)


def _size(b: int) -> str:
    if b >= 1024 * KIB:
        return f"{b // (1024 * KIB)} MiB"
    if b >= KIB:
        return f"{b // KIB} KiB"
    return f"{b} B"


def section_overhead(spec: NicSpec) -> tuple[str, float]:
    hi, pi, he, pe = spec.packets
    intra = hi / pi + 1.0
    inter = he / pe + 1.0
    oh = float(K.traffic_overhead(hi, pi, he, pe))
    rows = [
        ("intra-node", hi, pi, _f(intra, 5), "1.15625"),
        ("inter-node", he, pe, _f(inter, 5), "1.01587"),
    ]
    text = "\n".join([
        "1. Packetization overhead, Eq. 2 (sections 3.5, 4.3)",
        _table(("packet", "header B", "payload B", "header/payload + 1", "seed"), rows),
        f"  TrafficOverhead = {_f(intra, 5)} / {_f(inter, 5)} = {_f(oh, 4)} ~ {oh:.2f}   (seed: 1.14)",
    ])
    return text, oh


def section_links(spec: NicSpec) -> str:
    pcie = spec.pcie_link()
    raw = float(K.pcie_bandwidth(pcie.width, pcie.data_rate, 1.0))
    coded = float(K.pcie_bandwidth(pcie.width, pcie.data_rate, pcie.encoding))
    payload = float(K.pcie_payload_bandwidth(pcie))
    wire = float(K.wire_bandwidth(spec.ib_line_rate, spec.ib_encoding_ratio))
    ib_payload = float(K.packet_payload_bandwidth(wire, spec.inter_header, spec.inter_payload))
    plateau = max(bw for size, bw, _ in TABLE1_IB_WRITE if size >= PLATEAU_FROM)
    rows = [
        (f"PCIe x{spec.pcie_width} at {_f(spec.pcie_data_rate, 0)} GT/s, raw", f"{_f(raw * GBPS, 2)} Gbps",
         "128 Gbps (16 GB/s)", "3.2"),
        (f"PCIe after {spec.pcie_encoding} (BytesPerNs, Eq. 1)", f"{_f(coded * GBPS, 2)} Gbps",
         "close to 126 Gbps", "3.2"),
        (f"PCIe payload, {spec.pcie_max_payload} B TLPs + ACKs (Eq. 1)", f"{_f(payload, 2)} GB/s", "-", "-"),
        (f"IB after {spec.ib_encoding} ({_f(spec.ib_line_rate, 1)} GB/s line)", f"{_f(wire, 2)} GB/s",
         "12.12 GB/s", "4.1 fn."),
        (f"IB payload, {spec.inter_payload} B / {spec.inter_header + spec.inter_payload} B packets",
         f"{_f(ib_payload, 2)} GB/s", f"{_f(plateau, 2)} GB/s max ib_write", "Table 1"),
        ("ib_write streaming bound = min(PCIe, IB payload)", f"{_f(min(payload, ib_payload), 2)} GB/s",
         f"{_f(plateau, 2)} GB/s", "Table 1"),
    ]
    return "\n".join([
        "2. Link rates (sections 3.1, 3.2, 4.1)",
        _table(("quantity", "model", "seed", "where"), rows),
    ])


def section_bound(spec: NicSpec, scaleout: NicSpec, oh: float) -> str:
    oh_printed = round(oh, 2)
    pattern = "C1"
    f = scaleout.inter_node_fraction(pattern)
    g = scaleout.accelerators_per_node
    rows = []
    for name, nodes, gbps, peak_ref, bound_ref, share_ref in SCALE_OUT:
        peak = float(K.peak_throughput(gbps / GBPS, g, nodes)) * GBPS
        bound = float(K.throughput_bound(scaleout.nic_path_capacity, oh_printed, f, nodes)) * GBPS
        share = 100.0 * float(K.saturation_load(bound, peak))
        bound_x = float(K.throughput_bound(scaleout.nic_path_capacity, oh, f, nodes)) * GBPS
        share_x = 100.0 * float(K.saturation_load(bound_x, peak))
        rows.append((name, nodes, gbps, _f(peak, 0), _ref(peak_ref, 0), _f(bound, 0),
                     _ref(bound_ref, 0), _f(share, 2), _ref(share_ref, 2), _f(bound_x, 0),
                     _f(share_x, 2)))
    per_node = []
    for name, share in spec.traffic_patterns.items():
        b = float(K.throughput_bound(spec.nic_path_capacity, oh_printed, share, 1)) * GBPS
        per_node.append((name, _f(100 * share, 0), "unbounded" if math.isinf(b) else _f(b, 1)))
    ma_43 = spec.nic_path_capacity * GBPS * 100
    ma_45 = scaleout.nic_path_capacity * GBPS * 100
    return "\n".join([
        "3. Throughput bound, Eq. 3: Throughput = Model_adjustment / (TrafficOverhead x TrafficInterNode %)"
        " x NumNodes",
        f"  section 4.3 ({spec.name}): Model_adjustment = {_f(ma_43, 1)} Gbps %, TrafficOverhead = "
        f"{oh_printed:.2f}; bound per node:",
        _table(("pattern", "inter-node %", "Gbps per node"), per_node, indent="    "),
        f"  section 4.5 ({scaleout.name}, Table 3, {pattern}, {g} accelerators/node): "
        f"Model_adjustment = {_f(ma_45, 1)} Gbps %",
        _table(("config", "nodes", "Gbps/acc", "peak Gbps", "seed", f"bound (OH {oh_printed:.2f})",
                "seed", "% of peak", "seed", f"bound (OH {oh:.4f})", "% of peak"), rows),
    ])


def section_link_arithmetic(spec: NicSpec, oh: float) -> str:
    p = spec.traffic_patterns
    n = SCALE_UP_NODES
    rows = []

    def add(what, value, ref, where, digits=1):
        rows.append((what, _f(value, digits), _f(ref, digits), where))

    add("max load 512 Gbps x 8 acc x 32 nodes", float(K.peak_throughput(512, 8, n)), 131072, "3.5", 0)
    add("C4 inter-node traffic per acc (512 Gbps)", float(K.nic_link_load(512, 1, p["C4"])), 25.6, "3.5")
    add("C4 inter-node traffic per node (8 acc)", float(K.nic_link_load(512, 8, p["C4"])), 204.8, "3.5")
    add("C4 with 4096 B packets: 126000 Gbps, % of max",
        100 * float(K.saturation_load(126000, K.peak_throughput(512, 8, n))), 96, "3.5", 0)
    add("C1, 1 acc/node, 128 Gbps: per acc", float(K.nic_link_load(128, 1, p["C1"])), 25.6, "4.4.2")
    add("C1, 1 acc/node, 128 Gbps: 32 accelerators", float(K.nic_link_load(128, n, p["C1"])), 819.2, "4.4.2")
    for g, ref in ((2, 8192), (4, 16384), (8, 32768)):
        add(f"max throughput, {g} acc/node x 128 Gbps x 32", float(K.peak_throughput(128, g, n)), ref, "4.4.2", 0)
    add("inter-node maximum, 400 Gbps x 32 nodes", float(K.peak_throughput(400, 1, n)), 12800, "4.4.2", 0)
    add("per-node generation, 256 Gbps x 8 acc", float(K.peak_throughput(256, 8, 1)), 2048, "4.4.2", 0)

    link_rows = []
    stated = {"C4": (51.2, False), "C3": (102.4, False), "C2": (153.6, True), "C1": (204.8, True)}
    link = 128.0
    for name in ("C4", "C3", "C2", "C1"):
        load = float(K.nic_link_load(128, 8, p[name]))
        wire = float(K.nic_link_load(128, 8, p[name], oh))
        ref_load, ref_sat = stated[name]
        link_rows.append((name, _f(100 * p[name], 0), _f(load, 1), _f(ref_load, 1), _f(wire, 1),
                          _f(link, 0), "yes" if wire > link else "no", "yes" if ref_sat else "no"))
    return "\n".join([
        "4. NIC-link arithmetic (sections 3.5, 4.4.2; Gbps)",
        _table(("quantity", "model", "seed", "where"), rows),
        "  section 4.4.2, conf #1: 8 accelerators x 128 Gbps onto a 128 Gbps switch -> NIC link",
        _table(("pattern", "inter %", "payload Gbps", "seed", f"wire Gbps (x{oh:.4f})", "link",
                "saturates", "seed"), link_rows),
    ])


def section_saturation(spec: NicSpec, oh: float) -> str:
    rows = []
    for where, gbps, g, pattern, stated in SATURATION:
        f = spec.inter_node_fraction(pattern)
        peak = K.peak_throughput(gbps / GBPS, g, SCALE_UP_NODES)
        bound = K.throughput_bound(spec.nic_path_capacity, oh, f, SCALE_UP_NODES)
        load = float(K.saturation_load(bound, peak))
        # The node's NIC port and its switch -> NIC link (the accelerator port speed, section
        # 4.2) are both shared by the g accelerators.
        per_acc = K.effective_nic_bandwidth(spec.nic_bandwidth / g, gbps / GBPS, g, oh)
        link_bound = float(K.saturation_load(per_acc * g, K.nic_link_load(gbps / GBPS, g, f)))
        saturates = load < 1.0
        if isinstance(stated, bool):
            ref = "saturates" if stated else "no saturation"
            ok = saturates == stated
        else:
            ref = f"{100 * stated:.0f}%"
            ok = saturates and abs(load - stated) <= LOAD_STEP + 1e-12
        rows.append((where, gbps, g, pattern, "none" if not saturates else f"{100 * load:.1f}%",
                     ref, "yes" if ok else "NO",
                     "none" if link_bound >= 1.0 else f"{100 * link_bound:.1f}%"))
    return "\n".join([
        f"5. Saturation load, 32 nodes: Eq. 3 ({spec.name}, Model_adjustment "
        f"{_f(spec.nic_path_capacity * GBPS * 100, 1)} Gbps %) against the seed's simulations",
        "   agree: same verdict and, for a stated load, within one simulated load step (10 points);",
        "   last column: the physical bound of the shared switch -> NIC link and NIC port alone",
        "   (effective_nic_bandwidth; link = accelerator port speed, NIC = 400 Gbps per node)",
        _table(("section", "Gbps/acc", "acc/node", "pattern", "Eq. 3 load", "seed", "agree",
                "link/NIC load"), rows),
    ])


def section_latency(spec: NicSpec, fixed_us: float | None) -> str:
    sizes = np.array([r[0] for r in TABLE1_IB_WRITE], dtype=np.float64)
    measured = np.array([r[2] for r in TABLE1_IB_WRITE]) * 1e-6
    bw = np.array([r[1] for r in TABLE1_IB_WRITE])
    pcie = spec.pcie_link()
    wire = spec.ib_wire_bandwidth
    eq1 = np.asarray(K.pcie_latency(sizes, pcie))
    t_wire = np.asarray(K.packetized_time(sizes, spec.inter_header, spec.inter_payload, wire))
    no_fixed = np.asarray(K.remote_write_latency(sizes, pcie, wire, spec.inter_header,
                                                 spec.inter_payload, 0.0))
    if fixed_us is None:
        fixed = fit_fixed_latency(measured, no_fixed)
        how = "fitted: least squares on the relative error over all 16 sizes"
    else:
        fixed = fixed_us * 1e-6
        how = "given"
    model = np.asarray(K.remote_write_latency(sizes, pcie, wire, spec.inter_header,
                                              spec.inter_payload, fixed))
    err = 100.0 * (model - measured) / measured
    rows = [(_size(int(s)), _f(1e6 * y, 2), _f(1e6 * e, 3), _f(1e6 * w, 3), _f(1e6 * m, 2),
             f"{r:+.1f}%") for s, y, e, w, m, r in zip(sizes, measured, eq1, t_wire, model, err)]
    big = sizes > sizes.min()
    summary = (f"  |error|: max {np.abs(err).max():.1f}% (at {_size(int(sizes[np.abs(err).argmax()]))}), "
               f"max {np.abs(err[big]).max():.1f}% from 256 B up, rms {np.sqrt(np.mean(err ** 2)):.1f}%")

    stream = min(float(K.pcie_payload_bandwidth(pcie)),
                 float(K.packet_payload_bandwidth(wire, spec.inter_header, spec.inter_payload)))
    plateau = sizes >= PLATEAU_FROM
    bw_rows = [(_size(int(s)), _f(b, 2), _f(stream, 2), f"{100 * (stream - b) / b:+.2f}%")
               for s, b in zip(sizes[plateau], bw[plateau])]
    return "\n".join([
        "6. Eq. 1 in the ib_write path against Table 1 (section 4.1; latency in us)",
        "   model = fixed + 2 Eq.1(first packet) + wire(first packet) + max(rest on PCIe, rest on wire);",
        f"   Eq. 1: PCIe 3.0 x{spec.pcie_width}, {spec.pcie_max_payload} B MPS, {spec.pcie_tlp_overhead} B TLP "
        f"overhead, {spec.pcie_dllp_size} + {spec.pcie_dllp_overhead} B ACK DLLP every "
        f"{_f(spec.pcie_ack_factor, 1)} TLPs; wire: {_f(wire, 2)} GB/s, {spec.inter_header} B per "
        f"{spec.inter_payload} B packet",
        f"   fixed latency = {1e6 * fixed:.3f} us ({how}; the seed publishes none)",
        _table(("message", "ib_write", "Eq. 1 PCIe", "IB wire", "model", "error"), rows),
        summary,
        "   bandwidth plateau (messages >= 128 KiB, GB/s): streaming bound min(PCIe, IB payload rate)",
        _table(("message", "ib_write", "model", "error"), bw_rows),
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dse validate nic",
        description="Check the NIC-interface model (seed 004, Eqs. 1-3) against the seed's numbers.")
    parser.add_argument("--nic", default="seed004",
                        help="conf/nic preset for Eqs. 1-2 and section 4.3 (default: seed004)")
    parser.add_argument("--scaleout-nic", default="seed004_scaleout",
                        help="conf/nic preset for section 4.5's numbers (default: seed004_scaleout)")
    parser.add_argument("--fixed-latency-us", type=float, default=None,
                        help="fixed part of the ib_write latency in us (default: fitted to Table 1)")
    args = parser.parse_args(argv)
    try:
        spec = load_nic(args.nic)
        scaleout = load_nic(args.scaleout_nic)
        text, oh = section_overhead(spec)
        parts = [
            f"Seed 004 NIC-interface model against the paper (presets {spec.name}, {scaleout.name})",
            text,
            section_links(spec),
            section_bound(spec, scaleout, oh),
            section_link_arithmetic(spec, oh),
            section_saturation(spec, oh),
            section_latency(spec, args.fixed_latency_us),
        ]
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
