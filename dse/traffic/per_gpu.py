"""Traffic of one training iteration per GPU: the bytes each GPU sends, by type (TP, CP, DP, PP,
EP; CP: tp1d's context parallelism, `kernels.traffic.traffic_type`) and link class (inside the HB
domain, NIC on the same rail, NIC to another rail), for every row of a candidate table. The
formulas are `kernels.traffic`'s; this module validates the inputs, runs its jitted kernel and
names the columns.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import jax
import numpy as np
import polars as pl

from dse.api import _table, precision_code, recompute_code, seq_par_code, validate_candidates, zero_code
from dse.explore.engine import CANDIDATE_COLUMNS, profile_name, profile_of, to_candidates
from dse.spec.network import load_network
from dse.runtime import float64
from dse.spec.checks import check_offloaded_candidates, check_precision_rates, check_switches
from dse.spec.specs import MAX_BATCH, SpecError, check_choice, check_int, load_model, load_system
from kernels.params import STRATEGIES
from kernels.traffic import LINKS, TYPES, iteration_traffic

#: Traffic types as shown (`kernels.traffic.TYPES` upper-cased) and link classes as shown.
TYPE_NAMES = tuple(t.upper() for t in TYPES)
LINK_NAMES = {"hb": "HB", "rail": "NIC same rail", "cross": "NIC cross rail"}
#: The degrees of the parallel grid, and the candidate column of each group's GPUs per HB domain.
AXES = ("n1", "n2", "n_p", "n_d")
LOCAL_OF = {"n1": "nvs1", "n2": "nvs2", "n_p": "nvs_p", "n_d": "nvs_d"}


@lru_cache(maxsize=None)
def _kernel(strategy: str, profile, network: str, moe=False):  # moe: ModelSpec.arch
    def run(c, w, s):
        return iteration_traffic(strategy, c, w, s, profile, network, moe)

    return jax.jit(run)


def _resolve(candidates, model, system, strategy, profile, global_batch, nvs_size, validate):
    strategy = check_choice("strategy", strategy, STRATEGIES)
    prof = profile_of(profile)
    global_batch = check_int("global_batch", global_batch, 1, MAX_BATCH)
    m = load_model(model)
    s = load_system(system, nvs_size=nvs_size)
    table = _table(candidates, strategy, zero_code(None, prof), m)
    # what `dse.api.evaluate_many` refuses, refused here too: a precision the system has no rate for,
    # switches the system cannot run, recomputation under activation offloading
    check_precision_rates("precision", table["precision"], [s])
    check_switches(prof, [s])
    check_offloaded_candidates(prof, table["n_p"], table["recompute"])
    if validate:
        validate_candidates(table, m, s.nvs_size, strategy, global_batch, profile=prof)
    return strategy, prof, global_batch, m, s, table


@float64
def traffic_many(
    candidates,
    *,
    model,
    system,
    strategy: str,
    profile: str = "default",
    global_batch: int = 4096,
    nvs_size: int | None = None,
    validate: bool = True,
    network="two_tier",
) -> pl.DataFrame:
    """GB each GPU sends per iteration, by type and link class, for every row of a candidate table
    (arguments as `dse.api.evaluate_many`).

    Columns: the candidate columns, `n_gpus`, `network`, then `<type>_<link>` for type in tp, cp,
    dp, pp, ep and link in hb (inside the HB domain), rail (NIC, same rail), cross (NIC, other rail);
    `forwarded` (HB bytes rail_only adds by relaying cross-rail traffic, in no total); the totals
    `<type>_gb` per type (`ep_gb`: expert-parallel bytes; `ep` stays the expert-parallel degree),
    `<link>` per link class and `total`, all in GB. PP is the mean over the job's GPUs.
    """
    strategy, prof, global_batch, m, s, table = _resolve(
        candidates, model, system, strategy, profile, global_batch, nvs_size, validate)
    net = load_network(network)
    name = net.name
    out = _kernel(strategy, prof, name, m.arch)(to_candidates(table), m.workload(global_batch), net.apply(s).params())
    out = {k: np.asarray(v, dtype=np.float64) for k, v in out._asdict().items()}
    frame: dict[str, Any] = {k: table[k] for k in CANDIDATE_COLUMNS}
    n = len(table["n1"])
    frame["n_gpus"] = table["n1"] * table["n2"] * table["n_p"] * table["n_d"]
    frame["network"] = np.full(n, name)
    frame.update({k: np.broadcast_to(v, (n,)) for k, v in out.items()})
    for t in TYPES:
        frame[f"{t}_gb"] = sum(frame[f"{t}_{k}"] for k in LINKS)
    for k in LINKS:
        frame[k] = sum(frame[f"{t}_{k}"] for t in TYPES)
    frame["total"] = sum(frame[k] for k in LINKS)
    return pl.DataFrame(frame)


def summary_rows(row: Mapping[str, float]) -> list[dict[str, Any]]:
    """A row of `traffic_many` as table rows: one per type and a total, GB per link class and the
    type's share of all traffic."""
    total = row["total"]
    rows = []
    for t, name in zip(TYPES, TYPE_NAMES):
        r = {"type": name, **{k: row[f"{t}_{k}"] for k in LINKS}, "total": row[f"{t}_gb"]}
        r["share"] = row[f"{t}_gb"] / total if total > 0 else 0.0
        rows.append(r)
    rows.append({"type": "total", **{k: row[k] for k in LINKS}, "total": total, "share": 1.0 if total > 0 else 0.0})
    return rows


def one_table(strategy: str, point: Mapping[str, int | None], nvs_size: int) -> dict[str, np.ndarray]:
    """One configuration as a 1-row candidate table. As in `dse.api.evaluate`, the degrees, the
    microbatch and the interleaving default to 1, and the GPUs per domain of a group (nvs1, nvs2,
    nvs_p, nvs_d) may be left out (None) when the whole job fits in one domain (they are then the
    degrees), and nvs2 for tp1d (1); n_b defaults to 1. A key that is not a candidate column is an
    error."""
    unknown = sorted(set(point) - set(CANDIDATE_COLUMNS))
    if unknown:
        raise SpecError(f"{unknown[0]}: not a configuration field; valid: {', '.join(CANDIDATE_COLUMNS)}")
    point = {**{k: 1 for k in (*AXES, "microbatch", "interleave")}, **point}
    if point.get("recompute") is not None:  # a mode's name or code, as `dse.api.evaluate` takes it
        point["recompute"] = recompute_code(point["recompute"])
    if point.get("precision") is not None:
        point["precision"] = precision_code(point["precision"])
    if point.get("seq_par") is not None:
        point["seq_par"] = seq_par_code(point["seq_par"])
    n = 1
    for k in AXES:
        n *= check_int(k, point[k])
    if strategy == "tp1d" and point.get("nvs2") is None:
        point["nvs2"] = 1
    if point.get("n_b") is None:
        point["n_b"] = 1
    for deg, k in LOCAL_OF.items():
        if point.get(k) is None:
            if n > nvs_size:
                raise SpecError(f"{k}: missing; the job's {n} GPUs span NVS domains of {nvs_size}, "
                                "so give the GPUs of each group per domain (nvs1, nvs2, nvs_p, nvs_d)")
            point[k] = point.get(deg, 1)
    codes = ("zero", "recompute", "seq_par", "precision")  # 0 is a value of these
    return {k: np.array([check_int(k, v, 0 if k in codes else 1)], dtype=np.int64)
            for k, v in point.items() if v is not None}


def traffic_one(*, model, system, strategy: str = "tp1d", profile: str = "default", nvs_size: int | None = None,
                global_batch: int = 4096, network="two_tier", **point) -> dict[str, Any]:
    """The `traffic_many` row of one configuration (keyword degrees and placement as
    `dse.api.evaluate`), as a dict of Python scalars."""
    strategy = check_choice("strategy", strategy, STRATEGIES)
    s = load_system(system, nvs_size=nvs_size)
    table = one_table(strategy, point, s.nvs_size)
    return traffic_many(table, model=model, system=s, strategy=strategy, profile=profile,
                        global_batch=global_batch, network=network).row(0, named=True)
