"""The accelerator-to-NIC interface: packetization overhead, the NIC-link bound and PCIe latency.

Seed 004 (Tarraga-Moreno et al., "On the Impact of Intra-node Communication in the Performance of
Supercomputer and Data Center Interconnection Networks"). Traffic an accelerator sends to another
node leaves it as small intra-node packets (header h_i, payload p_i; PCIe: a 20 B TLP header per
128 B of payload), crosses the intra-node switch and the one link from that switch to the node's NIC,
is repacked by the NIC into large inter-node packets (h_e, p_e; InfiniBand: 64 B per 4032 B) and is
split again into intra-node packets at the destination NIC. The same payload therefore costs more
wire bytes on the intra-node side than on the inter-node side, by the factor of Eq. 2, and the G
accelerators of a node share the NIC link.

Every function is pure jnp and broadcasts over all of its arguments, so a grid of packet formats,
link speeds or node sizes is one more array axis. Units: bandwidths in GB/s (1e9 B/s; the seed's
Gbps are 8x these), packet and message sizes in bytes (B), times in seconds, traffic shares as
fractions in [0, 1] (the seed writes percentages). The linear relations (`throughput_bound`,
`nic_link_load`, `effective_nic_bandwidth`, `peak_throughput`) return the unit of their bandwidth
inputs, so they also take Gbps unchanged.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from kernels.params import Array

#: Seconds per ns. A rate in GB/s is a rate in B/ns, so bytes / (GB/s) * _NS is seconds.
_NS = 1.0e-9


def _f(x) -> Array:
    return jnp.asarray(x, dtype=jnp.float64)


# --------------------------------------------------------------------------------------------------
# Eq. 2: packetization overhead


def traffic_overhead(intra_header: Array, intra_payload: Array, inter_header: Array,
                     inter_payload: Array) -> Array:
    """Wire bytes of a payload on the intra-node side per wire byte on the inter-node side (Eq. 2).

    Seed 004 section 3.5, Eq. 2 (evaluated in section 4.3):

        TrafficOverhead = (IntraNodeHeaderSize / MaxIntraNodePayload + 1)
                          / (InterNodeHeaderSize / MaxInterNodePayload + 1)

    Headers and payloads in bytes; the result is dimensionless. It is > 1 when the intra-node header
    weighs more on its payload than the inter-node one (20 B / 128 B against 64 B / 4032 B gives
    1.15625 / 1.01587 = 1.138, printed 1.14 in the seed), 1 for equal ratios and < 1 otherwise.
    """
    intra = _f(intra_header) / _f(intra_payload) + 1.0
    inter = _f(inter_header) / _f(inter_payload) + 1.0
    return intra / inter


# --------------------------------------------------------------------------------------------------
# Eq. 3 and the NIC-link analysis of sections 3.5, 4.3, 4.4 and 4.5


def effective_nic_bandwidth(nic_bandwidth: Array, link_bandwidth: Array,
                            accelerators_sharing: Array, overhead: Array) -> Array:
    """Per-accelerator inter-node bandwidth (GB/s) through a shared, repacketizing NIC link.

        B_eff = min(nic_bandwidth, link_bandwidth / (accelerators_sharing * overhead))

    Seed 004 sections 3.3, 3.5 and 4.4.2. A payload rate R of inter-node traffic occupies
    R (1 + h_i/p_i) of the intra-node switch -> NIC link and R (1 + h_e/p_e) of the NIC's inter-node
    port. Each bandwidth here is the wire rate of its own link, so the link, expressed in the
    inter-node wire units of `nic_bandwidth`, carries at most link_bandwidth / overhead with
    `overhead` from Eq. 2. The G = `accelerators_sharing` accelerators that inject through it at once
    share it evenly (round-robin iSLIP arbitration, section 4.2), and the NIC port caps each of them
    at `nic_bandwidth` (per accelerator, the bandwidth a collective model charges). With G = 1 and
    overhead = 1 it is min(nic_bandwidth, link_bandwidth).

    Bounds: the result never exceeds `nic_bandwidth`, and never exceeds link_bandwidth / G when
    overhead >= 1; it is non-increasing in G and in overhead. Inputs and output are plain
    bandwidth arrays (GB/s, or any one unit).

    Passing the fitted per-node capacity of Eq. 3 (`throughput_bound`) as `link_bandwidth` gives the
    saturation the seed's simulator shows instead of the physical link rate: G * B_eff / f is then
    exactly Eq. 3 per node.
    """
    link_share = _f(link_bandwidth) / (_f(accelerators_sharing) * _f(overhead))
    return jnp.minimum(_f(nic_bandwidth), link_share)


def throughput_bound(nic_path_capacity: Array, overhead: Array, inter_node_fraction: Array,
                     num_nodes: Array) -> Array:
    """Network throughput bound (GB/s, all nodes) under a share of inter-node traffic (Eq. 3).

    Seed 004 section 3.5, Eq. 3, and its use in sections 4.3 and 4.5:

        Throughput = Model_adjustment / (TrafficOverhead * TrafficInterNode(%)) * NumNodes

    Model_adjustment is a power-law fit to the seed's simulations, in Gbps x percent; here it is
    given as `nic_path_capacity` = Model_adjustment / 100 % / 8 bit/B, in GB/s per node, and the
    share as a fraction f, so

        Throughput = num_nodes * nic_path_capacity / (overhead * f)

    i.e. each node saturates when its inter-node traffic, in intra-node wire bytes (payload times
    Eq. 2's overhead), reaches `nic_path_capacity`. Section 4.3 fits 15703.9 Gbps % (19.63 GB/s);
    section 4.5's worked numbers use 16384 Gbps % (20.48 GB/s). With no inter-node traffic (f = 0)
    nothing bounds it: the result is +inf. The bound ignores the accelerators' own peak (see
    `peak_throughput`, `saturation_load`).
    """
    f = _f(inter_node_fraction)
    safe = jnp.where(f > 0.0, f, 1.0)
    bound = _f(num_nodes) * _f(nic_path_capacity) / (_f(overhead) * safe)
    return jnp.where(f > 0.0, bound, jnp.inf)


def peak_throughput(accelerator_bandwidth: Array, accelerators_per_node: Array,
                    num_nodes: Array) -> Array:
    """Traffic all accelerators generate at full load (GB/s): B_acc * G * nodes.

    Seed 004 sections 3.5 (512 Gbps x 8 x 32 = 131072 Gbps), 4.4.2 (128 Gbps x 8 x 32 = 32768 Gbps)
    and 4.5 (the "theoretical peak throughput", 512 Gbps x 8 x 128 = 524288 Gbps).
    """
    return _f(accelerator_bandwidth) * _f(accelerators_per_node) * _f(num_nodes)


def saturation_load(bound: Array, peak: Array) -> Array:
    """Generation load (fraction of the accelerators' peak) at which a bound is reached.

        load* = min(1, bound / peak)

    Seed 004 sections 3.5 and 4.4: the load, in [0, 1], where the throughput-versus-load curves stop
    growing; 1 means the bound is never reached. Also the delivered share of peak at full load
    (section 4.5's 17.54 %).
    """
    return jnp.clip(_f(bound) / _f(peak), 0.0, 1.0)


def nic_link_load(accelerator_bandwidth: Array, accelerators_per_node: Array,
                  inter_node_fraction: Array, overhead: Array = 1.0, load: Array = 1.0) -> Array:
    """Traffic (GB/s) the accelerators of one node offer to their switch -> NIC link.

        L = load * G * B_acc * f * overhead

    Seed 004 section 4.4.2: 8 accelerators of 128 Gbps with f = 5, 10, 15, 20 % offer 51.2, 102.4,
    153.6 and 204.8 Gbps (the seed's arithmetic counts payload, overhead = 1); the link saturates
    when L exceeds its bandwidth. Pass Eq. 2's overhead to count the intra-node wire bytes.
    """
    return (_f(load) * _f(accelerators_per_node) * _f(accelerator_bandwidth)
            * _f(inter_node_fraction) * _f(overhead))


# --------------------------------------------------------------------------------------------------
# Eq. 1: PCIe latency of a message


class PcieLink(NamedTuple):
    """A PCIe link and its packet parameters (floats; fields broadcast like any pytree).

    width          lanes (Width)
    data_rate      GT/s per lane (DataRate; 8 for PCIe 3.0)
    encoding       data bits per line bit (Encoding; 128/130 for PCIe 3.0)
    max_payload    B per TLP (MaxPayloadSize, the MPS)
    tlp_overhead   B added to each TLP (TLPOverhead: framing, sequence number, header, LCRC)
    dllp_size      B of one ACK DLLP (DLLPSize)
    dllp_overhead  B of framing around one DLLP (DLLPOverhead)
    ack_factor     TLPs acknowledged by one ACK DLLP (AckFactor)
    """

    width: Array
    data_rate: Array
    encoding: Array
    max_payload: Array
    tlp_overhead: Array
    dllp_size: Array
    dllp_overhead: Array
    ack_factor: Array


def pcie_bandwidth(width: Array, data_rate: Array, encoding: Array) -> Array:
    """Data rate of a PCIe link (GB/s, i.e. BytesPerNs of Eq. 1).

    Seed 004 section 3.2, Eq. 1:  BytesPerNs = Width / (1 / (DataRate * Encoding)).

    With DataRate per lane in GT/s (Gbit/s) the product is in bit/ns, so bytes need a further 1/8:
    BytesPerNs = Width * DataRate * Encoding / 8. PCIe 3.0 x16: 16 * 8 * 128/130 / 8 = 15.75 B/ns
    (126 Gbps, section 3.2).
    """
    return _f(width) * _f(data_rate) * _f(encoding) / 8.0


def _tlp_time_ns(link: PcieLink) -> Array:
    """TLPTime = (TLPOverhead + MaxPayloadSize) / BytesPerNs, in ns (Eq. 1)."""
    bpns = pcie_bandwidth(link.width, link.data_rate, link.encoding)
    return (_f(link.tlp_overhead) + _f(link.max_payload)) / bpns


def _dllp_time_ns(link: PcieLink) -> Array:
    """DLLPTime = (DLLPOverhead + DLLPSize) / BytesPerNs, in ns (Eq. 1)."""
    bpns = pcie_bandwidth(link.width, link.data_rate, link.encoding)
    return (_f(link.dllp_overhead) + _f(link.dllp_size)) / bpns


def pcie_latency(message_size: Array, link: PcieLink) -> Array:
    """Time (s) to move a message of `message_size` B over a PCIe link, TLPs and ACKs (Eq. 1).

    Seed 004 section 3.2, Eq. 1:

        BytesPerNs  = Width * DataRate * Encoding            (see `pcie_bandwidth`)
        TLPTime     = (TLPOverhead + MaxPayloadSize) / BytesPerNs
        DLLPTime    = (DLLPOverhead + DLLPSize) / BytesPerNs
        NumberTLPs  = MessageSize / MaxPayloadSize
        NumberACKs  = NumberTLPs / AckFactor
        LatencyTime = NumberTLPs * TLPTime + NumberACKs * DLLPTime

    Packets are whole here: NumberTLPs = ceil(MessageSize / MaxPayloadSize) and NumberACKs =
    ceil(NumberTLPs / AckFactor), every TLP charged a full MaxPayloadSize as in the seed's TLPTime.
    For messages that are multiples of the MPS the TLP count equals the seed's quotient; the ACK
    count differs by less than one DLLP. A zero-byte message costs 0.
    """
    m = _f(message_size)
    tlps = jnp.ceil(m / _f(link.max_payload))
    acks = jnp.ceil(tlps / _f(link.ack_factor))
    t_ns = tlps * _tlp_time_ns(link) + acks * _dllp_time_ns(link)
    return jnp.where(m > 0.0, t_ns * _NS, 0.0)


def pcie_payload_bandwidth(link: PcieLink) -> Array:
    """Payload rate (GB/s) of a long stream of full TLPs under Eq. 1.

        MaxPayloadSize / (TLPTime + DLLPTime / AckFactor)

    Seed 004 sections 3.2 and 4.1: PCIe 3.0 x16 with 128 B TLPs moves about 13.4 GB/s of data, more
    than the 12.12 GB/s InfiniBand EDR link behind it, so the NIC, not PCIe, bounds ib_write.
    """
    per_tlp = _tlp_time_ns(link) + _dllp_time_ns(link) / _f(link.ack_factor)
    return _f(link.max_payload) / per_tlp


# --------------------------------------------------------------------------------------------------
# The inter-node link and the end-to-end path of the section 4.1 validation


def wire_bandwidth(line_rate: Array, encoding: Array) -> Array:
    """Data rate (GB/s) of a link after line coding: line_rate * encoding.

    Seed 004 section 4.1 (footnote to Table 1): EDR InfiniBand at 12.5 GB/s with 64b/66b coding gives
    12.12 GB/s.
    """
    return _f(line_rate) * _f(encoding)


def packet_payload_bandwidth(bandwidth: Array, header: Array, payload: Array) -> Array:
    """Payload rate (GB/s) of a link of data rate `bandwidth` carrying full packets.

        bandwidth * payload / (payload + header)

    Seed 004 sections 3.1 and 4.1: 12.12 GB/s of 4 KiB InfiniBand packets (64 B header, 4032 B
    payload) carries 11.93 GB/s of data, the ib_write plateau of Table 1.
    """
    p = _f(payload)
    return _f(bandwidth) * p / (p + _f(header))


def packetized_time(message_size: Array, header: Array, payload: Array,
                    bandwidth: Array) -> Array:
    """Serialization time (s) of a message cut into packets of at most `payload` B, each with a header.

        (MessageSize + ceil(MessageSize / payload) * header) / bandwidth

    Seed 004 sections 3.1 and 4.1 (the NIC's inter-node packets). The last packet carries only the
    remainder: inter-node packets are not padded to the MTU.
    """
    m = _f(message_size)
    packets = jnp.ceil(m / _f(payload))
    return (m + packets * _f(header)) / _f(bandwidth) * _NS


def remote_write_latency(message_size: Array, pcie: PcieLink, inter_bandwidth: Array,
                         inter_header: Array, inter_payload: Array,
                         fixed_latency: Array) -> Array:
    """One-way latency (s) of a remote write: host PCIe -> NIC -> inter-node link -> NIC -> PCIe.

    Seed 004 sections 3.3 and 4.1 (the path of the ib_write test of Table 1 and Figure 7): the host
    sends the message over PCIe as TLPs (Eq. 1), the source NIC gathers them into inter-node packets
    of `inter_payload` B, sends each once it is whole (store and forward), and the destination NIC
    splits it into TLPs again (Eq. 1). A pipeline of these three stages finishes after the first
    packet of x1 = min(m, inter_payload) B has crossed all three, plus the rest of the message at the
    slowest stage:

        T = fixed_latency + 2 T_pcie(x1) + T_wire(x1)
            + max(T_pcie(m) - T_pcie(x1), T_wire(m) - T_wire(x1))

    with T_pcie from `pcie_latency` (same link at both ends) and T_wire from `packetized_time` at
    `inter_bandwidth` (GB/s, after line coding). `fixed_latency` (s) lumps what the seed does not
    model per byte (NIC processing, cable, software); the seed publishes no value for it. A
    zero-byte message costs 0.
    """
    m = _f(message_size)
    x1 = jnp.minimum(m, _f(inter_payload))
    src_first = pcie_latency(x1, pcie)
    wire_first = packetized_time(x1, inter_header, inter_payload, inter_bandwidth)
    rest_pcie = pcie_latency(m, pcie) - src_first
    rest_wire = packetized_time(m, inter_header, inter_payload, inter_bandwidth) - wire_first
    t = (_f(fixed_latency) + 2.0 * src_first + wire_first
         + jnp.maximum(rest_pcie, rest_wire))
    return jnp.where(m > 0.0, t, 0.0)
