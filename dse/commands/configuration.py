"""What `dse eval` and `dse traffic` share: one configuration, named by Hydra overrides.

The overrides compose the config tree (`dse.interface.overrides`) with the group `point`: the model, system,
network, profile, one strategy, the global batch, and the configuration's keys n1, n2, n_p, n_d,
microbatch, nvs1, nvs2, nvs_p, nvs_d, n_b, interleave, recompute, seq_par, precision, zero, ep (`dse.evaluate`'s).
"""

from __future__ import annotations

import argparse

from dse.interface.overrides import Resolved, reject_retired_flags, resolve


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The positional overrides."""
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides: model=, system=, system.nvs_size=, strategy=, profile=, network=, "
                        "global_batch=, n1=, n2=, n_p=, n_d=, microbatch=, nvs1=, nvs2=, nvs_p=, nvs_d=, n_b=, "
                        "interleave=, recompute=, seq_par=, precision=, zero=, ep=, or any field of conf/ (model.hidden=...)")


def parse(p: argparse.ArgumentParser, argv, own_flags=()) -> tuple[argparse.Namespace, Resolved]:
    """The command's flags and its resolved configuration."""
    argv = list(argv or [])
    reject_retired_flags(argv, own_flags)
    args = p.parse_intermixed_args(argv)
    return args, resolve(args.overrides, point=True)


def describe(res: Resolved, strategy: str) -> str:
    """The first line both commands print: model, system and NVS size, strategy, profile, network."""
    job, s = res.job, res.system()
    return (f"{job.model.name} on {s.name} (NVS {s.nvs_size}), strategy {strategy}, profile {job.profile_name}, "
            f"network {job.network.name}, global batch {job.global_batch}"
            + (f" ({job.batch_source})" if job.batch_source != "given" else ""))


def keywords(res: Resolved) -> dict:
    """`dse.evaluate` keywords of the resolved configuration."""
    job = res.job
    return dict(model=job.model, system=res.system(), strategy=res.strategy(), profile=job.profile,
                global_batch=job.global_batch, network=job.network, **res.point())
