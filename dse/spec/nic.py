"""Typed, validated specs of the accelerator-to-NIC interface (seed 004); presets in `conf/nic/`.

A `NicSpec` holds the packet formats of Eq. 2, the PCIe link of Eq. 1, the inter-node (InfiniBand)
port, the node's accelerators and NIC link, the fitted capacity of Eq. 3 and the inter-node share of
named traffic patterns. It is built from a preset name, a mapping or keyword arguments; every field
is checked first and a bad value raises `SpecError` with one line naming the field, the value and
what is valid. A preset may start from another with a defaults list (`defaults: [seed004, _self_]`),
read as for every config group (`dse.spec.specs.read_preset`). The spec turns into the kernels' inputs with `NicSpec.pcie_link()`
and its properties; the formulas live in `kernels.nic`.

Units: packet and message sizes in B, bandwidths in GB/s, PCIe data rate in GT/s per lane, traffic
shares as fractions in [0, 1].
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Mapping

import numpy as np

from dse.spec.specs import SpecError, check_float, check_int, load_spec, preset_names, read_preset

SECTION = "nic"
PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)
PCIE_PAYLOADS = (128, 256, 512, 1024, 2048, 4096)
_ENCODING = re.compile(r"^\s*(\d+)\s*b\s*/\s*(\d+)\s*b\s*$")

# Field rules: (kind, minimum). "int": integer >= minimum; "pos": finite float > 0;
# "enc": a line code '<data>b/<line>b' or a ratio in (0, 1].
_INT0, _INT1, _POS, _ENC = ("int", 0), ("int", 1), ("pos", 0), ("enc", 0)


def _rule(rule):
    return field(metadata={"rule": rule})


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def encoding_ratio(where: str, value: Any) -> float:
    """A line code as data bits per line bit: '128b/130b' -> 128/130; a number in (0, 1] as is."""
    if isinstance(value, str):
        match = _ENCODING.match(value)
        if match:
            data, line = int(match.group(1)), int(match.group(2))
            if 0 < data <= line:
                return data / line
        raise SpecError(f"{where} = {value!r}: must be '<data>b/<line>b' with 0 < data <= line, "
                        "e.g. '128b/130b', or a ratio in (0, 1]")
    if isinstance(value, bool) or not isinstance(value, Real):
        raise SpecError(f"{where} = {_show(value)}: must be '<data>b/<line>b', e.g. '128b/130b', "
                        "or a ratio in (0, 1]")
    return check_float(where, value, 0.0, 1.0)


def _one_of(where: str, value: int, valid: tuple[int, ...]) -> int:
    if value not in valid:
        raise SpecError(f"{where} = {value}: must be one of {', '.join(map(str, valid))}")
    return value


@dataclass(frozen=True)
class NicSpec:
    """The accelerator-to-NIC interface of one node type (seed 004 sections 3.1-3.5, 4.2-4.5).

    intra_header, intra_payload   intra-node packet header and maximum payload, B (Eq. 2)
    inter_header, inter_payload   inter-node packet header and maximum payload, B (Eq. 2)
    pcie_*                        the host PCIe link of Eq. 1: lanes, GT/s per lane, line code,
                                  MPS (B), TLP overhead (B), ACK DLLP size and framing (B), AckFactor
    ib_line_rate, ib_encoding     inter-node port line rate (GB/s) and line code
    accelerators_per_node         accelerators sharing the node's switch -> NIC link (G)
    accelerator_bandwidth         injection bandwidth of one accelerator, GB/s
    nic_link_bandwidth            intra-node switch -> NIC link, GB/s
    nic_bandwidth                 NIC port to the inter-node network, GB/s
    nic_path_capacity             Eq. 3's Model_adjustment / 100 % in GB/s per node
    traffic_patterns              pattern name -> inter-node share of the traffic, in [0, 1]
    """

    name: str
    intra_header: int = _rule(_INT0)
    intra_payload: int = _rule(_INT1)
    inter_header: int = _rule(_INT0)
    inter_payload: int = _rule(_INT1)
    pcie_width: int = _rule(_INT1)
    pcie_data_rate: float = _rule(_POS)
    pcie_encoding: str | float = _rule(_ENC)
    pcie_max_payload: int = _rule(_INT1)
    pcie_tlp_overhead: int = _rule(_INT0)
    pcie_dllp_size: int = _rule(_INT0)
    pcie_dllp_overhead: int = _rule(_INT0)
    pcie_ack_factor: float = _rule(_POS)
    ib_line_rate: float = _rule(_POS)
    ib_encoding: str | float = _rule(_ENC)
    accelerators_per_node: int = _rule(_INT1)
    accelerator_bandwidth: float = _rule(_POS)
    nic_link_bandwidth: float = _rule(_POS)
    nic_bandwidth: float = _rule(_POS)
    nic_path_capacity: float = _rule(_POS)
    traffic_patterns: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"{SECTION}.name = {_show(self.name)}: must be a non-empty string")
        for f in dataclasses.fields(self):
            rule = f.metadata.get("rule")
            if rule is None:
                continue
            kind, minimum = rule
            where = f"{SECTION}.{f.name}"
            value = getattr(self, f.name)
            if kind == "int":
                value = check_int(where, value, minimum)
            elif kind == "pos":
                value = check_float(where, value)
            else:
                encoding_ratio(where, value)
            object.__setattr__(self, f.name, value)
        _one_of(f"{SECTION}.pcie_width", self.pcie_width, PCIE_WIDTHS)
        _one_of(f"{SECTION}.pcie_max_payload", self.pcie_max_payload, PCIE_PAYLOADS)
        object.__setattr__(self, "traffic_patterns", _patterns(self.traffic_patterns))

    # ---- derived inputs of the kernels -----------------------------------------------------------

    @property
    def pcie_encoding_ratio(self) -> float:
        return encoding_ratio(f"{SECTION}.pcie_encoding", self.pcie_encoding)

    @property
    def ib_encoding_ratio(self) -> float:
        return encoding_ratio(f"{SECTION}.ib_encoding", self.ib_encoding)

    @property
    def ib_wire_bandwidth(self) -> float:
        """Inter-node port data rate after line coding, GB/s (12.5 * 64/66 = 12.12 for EDR)."""
        return self.ib_line_rate * self.ib_encoding_ratio

    @property
    def packets(self) -> tuple[int, int, int, int]:
        """(intra_header, intra_payload, inter_header, inter_payload): the arguments of Eq. 2."""
        return self.intra_header, self.intra_payload, self.inter_header, self.inter_payload

    def pcie_link(self):
        """The kernels' `PcieLink` (float64 scalars)."""
        from kernels.nic import PcieLink

        return PcieLink(
            width=np.float64(self.pcie_width),
            data_rate=np.float64(self.pcie_data_rate),
            encoding=np.float64(self.pcie_encoding_ratio),
            max_payload=np.float64(self.pcie_max_payload),
            tlp_overhead=np.float64(self.pcie_tlp_overhead),
            dllp_size=np.float64(self.pcie_dllp_size),
            dllp_overhead=np.float64(self.pcie_dllp_overhead),
            ack_factor=np.float64(self.pcie_ack_factor),
        )

    def inter_node_fraction(self, pattern: str) -> float:
        """The inter-node share of a named traffic pattern."""
        if pattern not in self.traffic_patterns:
            valid = ", ".join(self.traffic_patterns) or "none defined"
            raise SpecError(f"{SECTION}.traffic_patterns = {pattern!r}: not a pattern; valid: {valid}")
        return self.traffic_patterns[pattern]

    def replace(self, **changes) -> "NicSpec":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def _patterns(value: Any) -> dict[str, float]:
    where = f"{SECTION}.traffic_patterns"
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where} = {_show(value)}: must be a mapping of pattern name to inter-node "
                        "share in [0, 1]")
    out = {}
    for key, share in value.items():
        if not isinstance(key, str) or not key:
            raise SpecError(f"{where} = {_show(key)}: pattern names must be non-empty strings")
        out[key] = check_float(f"{where}.{key}", share, 0.0, 1.0, low_open=False)
    return out


def fit_fixed_latency(measured, modelled) -> float:
    """The constant latency c minimizing the squared relative error sum(((c + p - y) / y)^2).

    Closed form: c = sum((y - p) / y^2) / sum(1 / y^2). Used to calibrate the fixed part of
    `kernels.nic.remote_write_latency`, which seed 004 does not publish, against measured latencies.
    """
    y = np.asarray(measured, dtype=np.float64)
    p = np.asarray(modelled, dtype=np.float64)
    w = 1.0 / (y * y)
    return float(np.sum(w * (y - p)) / np.sum(w))


# ---- presets -------------------------------------------------------------------------------------


def nic_presets() -> list[str]:
    return preset_names(SECTION)


def load_nic(nic: str | Mapping[str, Any] | NicSpec = "seed004", **overrides) -> NicSpec:
    """A `NicSpec` from a preset name (conf/nic, defaults lists applied: `dse.spec.specs.read_preset`), a
    mapping or a spec, with optional field overrides (None leaves a field as it is)."""
    changes = {k: v for k, v in overrides.items() if v is not None}
    return load_spec(NicSpec, SECTION, nic, lambda name: read_preset(SECTION, name), changes,
                     noun=f"a {SECTION} spec")


__all__ = [
    "NicSpec",
    "SpecError",
    "encoding_ratio",
    "fit_fixed_latency",
    "load_nic",
    "nic_presets",
]
