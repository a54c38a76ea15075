"""`dse validate WHAT [OPTIONS]`: compare the model with published numbers and print the errors.

Each target (`TARGETS`) is a command of its own, with its own options, given after its name:
`dse validate measured --csv nvidia_perf_moe`; `dse validate --help` lists every target with its
options (`ABOUT`), `dse validate WHAT --help` explains them.
"""

from __future__ import annotations

import argparse
import importlib
import textwrap

#: target -> the module whose main(argv) runs it
TARGETS = {
    "lbnl": "dse.truth.validate_lbnl",
    "nic": "dse.commands.validate_nic",
    "railonly": "dse.commands.validate_railonly",
    "moe": "dse.commands.validate_moe",
    "measured": "dse.commands.validate_measured",
    "devices": "dse.commands.validate_devices",
}

#: target -> (what it compares, its options as its own usage line gives them)
ABOUT = {
    "lbnl": ("every stored seed-001 result (B200): metrics and top-10 lists",
             "[--reference REFERENCE] [--tolerance TOLERANCE]"),
    "nic": ("seed 004: packetization overhead, throughput bound, PCIe latency",
            "[--nic NIC] [--scaleout-nic SCALEOUT_NIC] [--fixed-latency-us FIXED_LATENCY_US]"),
    "railonly": ("seed 000 Table 4: rail-only iteration model vs computed and measured times",
                 "[--fabric FABRIC] [--peak TFLOPS] [--c-f GBPS] [--c-s GBPS] [--alpha-f S] [--alpha-s S] "
                 "[--measured CSV]"),
    "moe": ("seed 002: all-to-all slowdown of rail-only vs rail-optimized",
            "[--domains Y [Y ...]] [--moe-domains Y] [--tokens T] [--hidden H] [--alpha-f S] [--alpha-s S] "
            "[--search | --no-search] [--search-gpus N [N ...]] [--system SYSTEM]"),
    "measured": ("measured training runs (CSV; default Korthikanti et al. 2022 Table 5): predicted vs measured "
                 "iteration time per run",
                 "[--csv PATH|NAME] [--profile NAME] [--calibration NAME|PATH] [--out FILE.parquet]"),
    "devices": ("the same searches on this process's accelerator and on the host CPU, every row compared "
                "(relative difference, optima, counts)", "[--rtol RTOL] [KEY=VALUE ...]"),
}


def targets_help(width: int = 100) -> str:
    """Every target, what it compares and its options: the epilog of `dse validate --help`."""
    pad = max(len(k) for k in TARGETS) + 2
    lines = ["targets (each with its own options, after its name; `dse validate WHAT --help` explains them):", ""]
    for name in TARGETS:
        what, options = ABOUT[name]
        first = f"  {name.ljust(pad)}"
        lines += textwrap.wrap(what, width, initial_indent=first, subsequent_indent=" " * len(first))
        lines += textwrap.wrap(f"options: {options}", width, initial_indent=" " * len(first),
                               subsequent_indent=" " * (len(first) + 9), break_on_hyphens=False)
    lines += ["", "e.g. dse validate measured --csv nvidia_perf_moe"]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The parser of `dse validate` itself: its help, and its one-line error without a target."""
    p = argparse.ArgumentParser(prog="dse validate", usage="dse validate [-h] WHAT [OPTIONS ...]",
                                description=__doc__.splitlines()[0].split(": ", 1)[1],
                                epilog=targets_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", metavar="WHAT", help="what to validate: " + ", ".join(TARGETS))
    p.add_argument("options", metavar="OPTIONS", nargs="*", help="the options of WHAT, listed below")
    return p


def main(argv=None) -> int:
    argv = list(argv or [])
    if argv[:1] in (["-h"], ["--help"]):
        parser().print_help()
        return 0
    if not argv or argv[0] not in TARGETS:
        wrong = ("WHAT: missing" if not argv else f"WHAT = {argv[0]!r}: an option before its target (give the "
                 "target first: dse validate measured --csv ...)" if argv[0].startswith("-")
                 else f"WHAT = {argv[0]!r}: not a target")
        parser().error(f"{wrong}; valid: {', '.join(TARGETS)}, each with its own options (dse validate --help)")
    return int(importlib.import_module(TARGETS[argv[0]]).main(argv[1:]) or 0)
