"""`dse profiles`: the measured effect of each fix of the default profile on the reference's optima.

For each switch of `kernels.Profile` (spec section 11), the lbnl profile with only that switch
turned off (the quirk fixed) is searched on the reference grid (B200, NVS 8 by default, GPT3-1T
and ViT-ERA5, n = 4 ... 16384, the strategies the switch touches) and compared with lbnl: the
change of the optimal iteration time at each GPU count and whether the optimal configuration
changes. The last rows compare the whole default profile with lbnl.
"""

from __future__ import annotations

import argparse

import numpy as np
import polars as pl

from dse.search import run_search
from dse.space import COLUMNS
from dse.table import render
from kernels.params import REFERENCE_QUIRKS, PROFILES, STRATEGIES, Profile

#: switch -> the strategies whose results it can change
TOUCHES = {
    "ln2d_feature_shard_from_seq_len": ("summa",),
    "pipeline_ib_links_free": STRATEGIES,
    "allreduce_doubled_only_across_tiers": ("summa",),
    "reference_bias_sharding": ("tp1d", "tp2d"),
}


def optima(model: str, strategy: str, profile: Profile, nvs: int, n_gpus: str) -> pl.DataFrame:
    res = run_search(model=model, system="b200", nvs_size=nvs, strategy=strategy, n_gpus=n_gpus,
                     profile=profile, top_k=1)
    return res.top.select(["n_gpus", "iteration_time"] + list(COLUMNS))


def compare(model, strategy, fixed: Profile, nvs: int, n_gpus: str) -> dict:
    ref = optima(model, strategy, PROFILES["lbnl"], nvs, n_gpus)
    new = optima(model, strategy, fixed, nvs, n_gpus)
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
    p = argparse.ArgumentParser(prog="dse profiles", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("--nvs-size", type=int, default=8)
    p.add_argument("--n-gpus", default="pow2:4:16384")
    p.add_argument("--models", default="gpt3_1t,vit_era5")
    args = p.parse_args(argv)
    lbnl = PROFILES["lbnl"]
    rows = []
    cases = [(s, lbnl._replace(**{s: False}), TOUCHES[s]) for s in REFERENCE_QUIRKS]
    cases.append(("all four fixes", lbnl._replace(**{s: False for s in REFERENCE_QUIRKS}), STRATEGIES))
    for name, fixed, strategies in cases:
        for model in args.models.split(","):
            for strategy in strategies:
                r = compare(model, strategy, fixed, args.nvs_size, args.n_gpus)
                rows.append({"fix": name, "model": model, "strategy": strategy, **r})
    print(f"Effect of each fix on the optimal iteration time (B200, NVS {args.nvs_size}, n = {args.n_gpus}); "
          "change = fixed / lbnl - 1 at the same n")
    print(render(rows, ["fix", "model", "strategy", "compared n", "t change min", "t change max", "largest at n",
                        "optimum moves at n", "only lbnl fits", "only fix fits"],
                 formats={"t change min": "+.2%", "t change max": "+.2%"}))
    return 0
