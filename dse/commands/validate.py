"""`dse validate WHAT`: compare the model with published numbers and print the errors.

    dse validate lbnl       every stored seed-001 result (B200): metrics and top-10 lists
    dse validate nic        seed 004: packetization overhead, throughput bound, PCIe latency
    dse validate railonly   seed 000 Table 4: rail-only iteration model vs computed and measured times
    dse validate moe        seed 002: all-to-all slowdown of rail-only vs rail-optimized
    dse validate measured   measured training runs (CSV; default Korthikanti et al. 2022 Table 5):
                            predicted vs measured iteration time per run
    dse validate devices    the same searches on this process's accelerator and on the host CPU,
                            every row compared (relative difference, optima, counts)
"""

from __future__ import annotations

import argparse
import importlib

TARGETS = {
    "lbnl": "dse.truth.validate_lbnl",
    "nic": "dse.commands.validate_nic",
    "railonly": "dse.commands.validate_railonly",
    "moe": "dse.commands.validate_moe",
    "measured": "dse.commands.validate_measured",
    "devices": "dse.commands.validate_devices",
}


def main(argv=None) -> int:
    argv = list(argv or [])
    if not argv or argv[0] not in TARGETS:
        p = argparse.ArgumentParser(prog="dse validate", description=__doc__.splitlines()[0].split(": ", 1)[1],
                                    epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("what", choices=sorted(TARGETS))
        p.parse_args(argv)
        return 2
    return int(importlib.import_module(TARGETS[argv[0]]).main(argv[1:]) or 0)
