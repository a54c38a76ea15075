"""The command-line arguments that name one configuration, shared by `dse eval` and `dse traffic`."""

from __future__ import annotations

import argparse

from dse.network import network_presets
from dse.specs import model_presets, system_presets
from kernels.params import PROFILES, STRATEGIES


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Model, system, NVS size, strategy, profile, network, global batch, the parallel degrees and
    the NVS assignment (`dse.evaluate`'s keywords)."""
    p.add_argument("--model", default="gpt3_1t", help=f"preset ({', '.join(model_presets())})")
    p.add_argument("--system", default="b200", help=f"preset ({', '.join(system_presets())})")
    p.add_argument("--nvs-size", type=int, default=None, help="GPUs per NVS domain (default: the system's)")
    p.add_argument("--strategy", default="tp1d", choices=STRATEGIES)
    p.add_argument("--profile", default="default", choices=sorted(PROFILES))
    p.add_argument("--network", default="two_tier", choices=network_presets())
    p.add_argument("--global-batch", type=int, default=4096)
    for k in ("n1", "n2", "n-p", "n-d", "microbatch"):
        p.add_argument(f"--{k}", type=int, default=1)
    p.add_argument("--interleave", type=int, default=1, help="pipeline model chunks per stage (interleaved 1F1B)")
    p.add_argument("--recompute", default="selective", choices=("none", "selective", "full"),
                   help="activation recomputation (default: %(default)s)")
    p.add_argument("--seq-par", type=int, default=1, choices=(0, 1), help="sequence parallelism on (1) or off (0)")
    for k in ("nvs1", "nvs2", "nvs-p", "nvs-d", "n-b"):
        p.add_argument(f"--{k}", type=int, default=None)


def configuration(args: argparse.Namespace) -> dict:
    """The parsed arguments as `dse.evaluate` keywords."""
    keys = ("model", "system", "nvs_size", "strategy", "profile", "network", "global_batch", "n1", "n2", "n_p",
            "n_d", "microbatch", "interleave", "recompute", "seq_par", "nvs1", "nvs2", "nvs_p", "nvs_d", "n_b")
    return {k: getattr(args, k) for k in keys}
