"""`dse profiles`: the measured effect of each fix of the default profile on the reference's optima.

For each switch of `kernels.Profile` (spec section 11), the lbnl profile with only that switch
turned off (the quirk fixed) is searched on the reference grid (B200, NVS 8 by default, GPT3-1T
and ViT-ERA5, n = 4 ... 16384, the strategies the switch touches) and compared with lbnl: the
change of the optimal iteration time at each GPU count and whether the optimal configuration
changes. The last rows compare the whole default profile with lbnl.

    dse profiles [model=gpt3_1t,vit_era5] [system=b200] [system.nvs_size=8] [n_gpus=pow2:4:16384]

Its study sets system.nvs_size=8 and n_gpus=pow2:4:16384 (the reference's grid), in front of the
overrides (`dse.interface.overrides`); model=A,B lists the models compared.
"""

from __future__ import annotations

import argparse

import numpy as np
import polars as pl

from dse.interface.overrides import parse, reject_retired_flags, resolve_each
from dse.explore.search import run_search
from dse.spec.specs import SpecError
from dse.explore.space import COLUMNS
from dse.interface.table import render
from kernels.params import REFERENCE_QUIRKS, PROFILES, STRATEGIES, Profile

#: switch -> the strategies whose results it can change
TOUCHES = {
    "ln2d_feature_shard_from_seq_len": ("summa",),
    "pipeline_ib_links_free": STRATEGIES,
    "allreduce_doubled_only_across_tiers": ("summa",),
    "reference_bias_sharding": ("tp1d", "tp2d"),
}


#: The study of `dse profiles`, in front of the command's overrides.
STUDY = ("system=b200", "system.nvs_size=8", "n_gpus=pow2:4:16384")


def optima(model, strategy: str, profile: Profile, nvs: int, n_gpus, system="b200") -> pl.DataFrame:
    res = run_search(model=model, system=system, nvs_size=nvs, strategy=strategy, n_gpus=n_gpus,
                     profile=profile, top_k=1)
    return res.top.select(["n_gpus", "iteration_time"] + list(COLUMNS))


def compare(model, strategy, fixed: Profile, nvs: int, n_gpus, system="b200") -> dict:
    ref = optima(model, strategy, PROFILES["lbnl"], nvs, n_gpus, system)
    new = optima(model, strategy, fixed, nvs, n_gpus, system)
    both = ref.join(new, on="n_gpus", suffix="_fix", how="inner")
    if both.is_empty():
        return {"compared n": 0}
    change = (both["iteration_time_fix"] / both["iteration_time"] - 1.0).to_numpy()
    moved = both.filter(pl.any_horizontal([pl.col(c) != pl.col(f"{c}_fix") for c in COLUMNS]))["n_gpus"].to_list()
    i_max = int(np.argmax(np.abs(change)))
    return {
        "compared n": len(both),
        "t change min": float(change.min()),
        "t change max": float(change.max()),
        "largest at n": int(both["n_gpus"][i_max]),
        "optimum moves at n": ",".join(str(n) for n in moved) or "-",
        "only lbnl fits": len(ref) - len(both),
        "only fix fits": len(new) - len(both),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dse profiles", description=__doc__.splitlines()[0].split(": ", 1)[1],
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="model=A,B, system=, system.nvs_size=, n_gpus= (the profiles are fixed)")
    argv = list(argv or [])
    reject_retired_flags(argv)
    args = p.parse_intermixed_args(argv)
    lines = list(args.overrides) or []
    if not any(o.key_or_group == "model" for o in parse(lines)):
        lines.append("model=gpt3_1t,vit_era5")
    each = resolve_each(lines, "model", STUDY)  # every key checked first
    for o in parse(lines):
        if o.key_or_group.split(".")[0] in ("profile", "strategy"):
            raise SpecError(f"{o.key_or_group}: dse profiles compares the lbnl profile with each fix, every strategy "
                            "a fix touches")
    job = each[0].job
    if len(job.nvs_sizes) != 1:
        raise SpecError(f"system.nvs_size = {job.nvs_sizes}: dse profiles compares at one NVS size")
    nvs, n_gpus = job.nvs_sizes[0], job.n_gpus
    lbnl = PROFILES["lbnl"]
    rows = []
    cases = [(s, lbnl._replace(**{s: False}), TOUCHES[s]) for s in REFERENCE_QUIRKS]
    cases.append(("all four fixes", lbnl._replace(**{s: False for s in REFERENCE_QUIRKS}), STRATEGIES))
    for name, fixed, strategies in cases:
        for model in (r.job.model for r in each):
            for strategy in strategies:
                r = compare(model, strategy, fixed, nvs, n_gpus, job.system)
                rows.append({"fix": name, "model": model.name, "strategy": strategy, **r})
    n_text = f"{n_gpus[0]} ... {n_gpus[-1]}" if len(n_gpus) > 2 else ", ".join(map(str, n_gpus))
    print(f"Effect of each fix on the optimal iteration time ({job.system.name.upper()}, NVS {nvs}, n = {n_text}); "
          "change = fixed / lbnl - 1 at the same n")
    print(render(rows, ["fix", "model", "strategy", "compared n", "t change min", "t change max", "largest at n",
                        "optimum moves at n", "only lbnl fits", "only fix fits"],
                 formats={"t change min": "+.2%", "t change max": "+.2%"}))
    return 0
