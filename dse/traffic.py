"""Traffic of one training iteration: bytes by type and link class, and GPU-pair traffic matrices.

    import dse.traffic as tr
    frame = tr.traffic_many(table, model="gpt3_175b", system="b200", nvs_size=8, strategy="tp1d",
                            network="rail_only")               # GB per GPU per iteration, per row
    pt = tr.pair_matrix(model="gpt3_175b", system="b200", nvs_size=8, strategy="tp1d",
                        network="rail_only", n1=8, n_p=4, n_d=4, microbatch=1, nvs1=8, nvs_p=1, nvs_d=1)
    pt.matrices["TP"]                                          # (n, n) GB sent src -> dst
    tr.write_parquet(pt, "out/traffic.parquet"); tr.plot(pt, "out/traffic.png")

The per-GPU numbers are `kernels.traffic` (its docstring has every formula); this module lays the
job out on GPUs, draws the pair matrix of seed 000 Figures 3-5 (seed 002 Figures 3-5) and writes it.

Placement (the search's; `placement`). A configuration (n1, n2, n_p, n_d) with (nvs1, nvs2, nvs_p,
nvs_d) GPUs of each group per HB domain puts K = nvs1 nvs2 nvs_p nvs_d GPUs of the job in every
domain, a box of the parallel grid. A grid coordinate splits into a position inside the box and a
box index: i1 = a1 nvs1 + l1 (likewise n2, n_d), and for the pipeline
ip = a_p nvs_p + (l_p if a_p is even else nvs_p - 1 - l_p): the stages snake through alternate
domains, so the boundary between two domains joins the same local position on both sides. Then

    local rank (rail)  l1 + nvs1 (l2 + nvs2 (l_d + nvs_d l_p))     tensor parallelism innermost,
    domain             a1 + A1 (a2 + A2 (a_d + A_d a_p))           then data, then pipeline
    global rank        domain K + local rank

with A1 = n1/nvs1 etc. Every group (fix all coordinates but one axis) holds the same local ranks in
each of its domains, hence is rail-aligned. Ranks count the job's GPUs only: where a domain has
more than K GPUs, the rest are idle and not drawn.

The matrices follow the algorithms of `kernels.traffic`: allgather / reduce-scatter as a ring
inside each domain (to the next local rank of the group) and a ring along each rail (to the next
domain), broadcast / reduce averaged over the rotating root, all-to-all to every member, pipeline
transfers between the matching GPUs of consecutive stages. Entry [s, d] is the GB that GPU s
sends to GPU d in one iteration; a row sum is what that GPU sends, equal to its
`kernels.traffic.iteration_traffic` value (PP: their mean over GPUs), which `pair_matrix` checks.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import jax
import numpy as np
import polars as pl

from dse.engine import CANDIDATE_COLUMNS, profile_name, profile_of, to_candidates
from dse.runtime import float64
from dse.specs import SpecError, check_choice, check_int, load_model, load_system
from kernels.blocks import block_layers
from kernels.collectives import ALLGATHER, ALLREDUCE, ALLTOALL, BROADCAST, REDUCE, REDUCESCATTER
from kernels.iteration import prepare
from kernels.params import STRATEGIES, Candidates
from kernels.blocks import data_parallel_group
from kernels.traffic import (
    ANY_TO_ANY,
    LINKS,
    RAIL_ONLY,
    TYPES,
    counts,
    iteration_traffic,
    layer_profile,
)

#: Traffic types as shown (`kernels.traffic.TYPES` upper-cased) and link classes as shown.
TYPE_NAMES = tuple(t.upper() for t in TYPES)
LINK_NAMES = {"hb": "HB", "rail": "NIC same rail", "cross": "NIC cross rail"}
#: The largest job `pair_matrix` lays out (its matrices are dense n x n).
MAX_PAIR_GPUS = 1024
#: Relative tolerance of the row-sum check.
CHECK_RTOL = 1e-9
#: Grid axes of the placement, by candidate column.
AXES = ("n1", "n2", "n_p", "n_d")
LOCAL_OF = {"n1": "nvs1", "n2": "nvs2", "n_p": "nvs_p", "n_d": "nvs_d"}


# --------------------------------------------------------------------------------------------
# per-GPU summary of a candidate table


@lru_cache(maxsize=None)
def _kernel(strategy: str, profile, network: str, moe: bool = False):
    def run(c, w, s):
        return iteration_traffic(strategy, c, w, s, profile, network, moe)

    return jax.jit(run)


def _network(network) -> tuple[str, Any]:
    from dse.network import load_network

    net = load_network(network)
    return net.name, net


def _resolve(candidates, model, system, strategy, profile, global_batch, nvs_size, validate):
    from dse.api import _table, validate_candidates

    strategy = check_choice("strategy", strategy, STRATEGIES)
    prof = profile_of(profile)
    global_batch = check_int("global_batch", global_batch)
    m = load_model(model)
    s = load_system(system, nvs_size=nvs_size)
    table = _table(candidates, strategy)
    if validate:
        validate_candidates(table, m, s.nvs_size, strategy, global_batch, profile=profile_name(prof))
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

    Columns: the candidate columns, `n_gpus`, `network`, then `<type>_<link>` for type in tp, dp,
    pp, ep and link in hb (inside the HB domain), rail (NIC, same rail), cross (NIC, other rail);
    `forwarded` (HB bytes rail_only adds by relaying cross-rail traffic, in no total); the totals
    `<type>` per type, `<link>` per link class and `total`. PP is the mean over the job's GPUs.
    """
    strategy, prof, global_batch, m, s, table = _resolve(
        candidates, model, system, strategy, profile, global_batch, nvs_size, validate)
    name, net = _network(network)
    out = _kernel(strategy, prof, name, m.moe)(to_candidates(table), m.workload(global_batch), net.apply(s).params())
    out = {k: np.asarray(v, dtype=np.float64) for k, v in out._asdict().items()}
    frame: dict[str, Any] = {k: table[k] for k in CANDIDATE_COLUMNS}
    n = len(table["n1"])
    frame["n_gpus"] = table["n1"] * table["n2"] * table["n_p"] * table["n_d"]
    frame["network"] = np.full(n, name)
    frame.update({k: np.broadcast_to(v, (n,)) for k, v in out.items()})
    for t in TYPES:
        frame[t] = sum(frame[f"{t}_{k}"] for k in LINKS)
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
        r = {"type": name, **{k: row[f"{t}_{k}"] for k in LINKS}, "total": row[t]}
        r["share"] = row[t] / total if total > 0 else 0.0
        rows.append(r)
    rows.append({"type": "total", **{k: row[k] for k in LINKS}, "total": total, "share": 1.0 if total > 0 else 0.0})
    return rows


# --------------------------------------------------------------------------------------------
# placement


@dataclass(frozen=True)
class Placement:
    """Global ranks of a configuration's GPUs (module docstring).

    rank     (n1, n2, n_p, n_d) int64: the GPU of each grid coordinate
    domain   (n,) HB domain of each rank;  rail: (n,) its local rank in the domain
    per_domain  K, the job's GPUs per domain
    """

    rank: np.ndarray
    domain: np.ndarray
    rail: np.ndarray
    per_domain: int

    @property
    def n(self) -> int:
        return int(self.rank.size)

    def coords(self) -> dict[str, np.ndarray]:
        """(n,) grid coordinates i1, i2, ip, id of every rank."""
        out = {}
        for axis, name in enumerate(("i1", "i2", "ip", "id")):
            idx = np.indices(self.rank.shape)[axis].ravel()
            col = np.empty(self.n, dtype=np.int64)
            col[self.rank.ravel()] = idx
            out[name] = col
        return out

    def groups(self, axes: tuple[str, ...]) -> np.ndarray:
        """(groups, y, x) ranks of every group that varies `axes` (the others fixed), as the grid of
        `kernels.fabrics`: row r = the group's r-th domain, column c = its c-th rail. Raises
        ValueError if a group is not rail-aligned (not the case for any placement made here)."""
        pos = [AXES.index(a) for a in axes]
        rest = [i for i in range(4) if i not in pos]
        g = int(np.prod([self.rank.shape[i] for i in pos])) if pos else 1
        members = np.transpose(self.rank, rest + pos).reshape(-1, g)
        order = np.lexsort((self.rail[members], self.domain[members]), axis=-1)
        members = np.take_along_axis(members, order, axis=-1)
        rails = np.unique(self.rail[members[0]])
        x = len(rails)
        y = g // x
        grid = members.reshape(-1, y, x)
        dom, rail = self.domain[grid], self.rail[grid]
        if x * y != g or not ((dom == dom[:, :, :1]).all() and (rail == rail[:, :1, :]).all()):
            raise ValueError(f"the group over {axes} is not rail-aligned in this placement")
        return grid


def placement(n1: int, n2: int, n_p: int, n_d: int, nvs1: int, nvs2: int, nvs_p: int, nvs_d: int) -> Placement:
    """The search's placement of a configuration on HB domains (module docstring)."""
    deg = np.array([n1, n2, n_p, n_d], dtype=np.int64)
    box = np.array([nvs1, nvs2, nvs_p, nvs_d], dtype=np.int64)
    if (deg % box).any():
        raise SpecError(f"nvs = {tuple(box)}: each must divide its degree in {tuple(deg)}")
    i1, i2, ip, i_d = np.indices(tuple(deg), dtype=np.int64)
    a1, l1 = np.divmod(i1, nvs1)
    a2, l2 = np.divmod(i2, nvs2)
    a_d, l_d = np.divmod(i_d, nvs_d)
    a_p, q = np.divmod(ip, nvs_p)
    l_p = np.where(a_p % 2 == 0, q, nvs_p - 1 - q)
    A1, A2, A_d = n1 // nvs1, n2 // nvs2, n_d // nvs_d
    k = int(box.prod())
    local = l1 + nvs1 * (l2 + nvs2 * (l_d + nvs_d * l_p))
    domain = a1 + A1 * (a2 + A2 * (a_d + A_d * a_p))
    rank = domain * k + local
    n = rank.size
    ranks = np.arange(n, dtype=np.int64)
    return Placement(rank=rank, domain=ranks // k, rail=ranks % k, per_domain=k)


# --------------------------------------------------------------------------------------------
# templates: the pair traffic of one collective on an x-by-y grid (member index r x + c)


def _ring_next(x: int, y: int):
    k = np.arange(x * y)
    r, c = np.divmod(k, x)
    return k, r * x + (c + 1) % x, ((r + 1) % y) * x + c


def template(kind: str, volume: float, x: int, y: int) -> np.ndarray:
    """(x y, x y) GB member i sends member j in one collective of `kind` and `volume` GB
    (`kernels.traffic` module docstring; broadcast/reduce averaged over the rotating root)."""
    g = x * y
    t = np.zeros((g, g))
    if g == 1 or volume == 0:
        return t
    k, dom_next, rail_next = _ring_next(x, y)
    if kind in (ALLGATHER, REDUCESCATTER, ALLREDUCE):
        reps = 2.0 if kind == ALLREDUCE else 1.0
        if x > 1:
            np.add.at(t, (k, dom_next), reps * (x - 1) * volume / x)
        if y > 1:
            np.add.at(t, (k, rail_next), reps * (y - 1) * volume / (x * y))
    elif kind in (BROADCAST, REDUCE):
        if y == 1:
            np.add.at(t, (k, dom_next), (x - 1) * volume / x)
        elif x == 1:
            np.add.at(t, (k, rail_next), (y - 1) * volume / y)
        else:
            np.add.at(t, (k, dom_next), (x - 1) * volume / x)  # the allgather in every domain
            np.add.at(t, (k, rail_next), (y - 1) * volume / (x * y))  # the chains down the rails
            r = k // x
            same = (r[:, None] == r[None, :]) & (k[:, None] != k[None, :])
            t += np.where(same, volume / (x * x * y), 0.0)  # the root's scatter, any root
        if kind == REDUCE:
            t = t.T.copy()
    elif kind == ALLTOALL:
        t[:] = volume / g
        np.fill_diagonal(t, 0.0)
    else:
        raise ValueError(f"collective kind {kind!r} has no group template")
    return t


# --------------------------------------------------------------------------------------------
# pair matrix


@dataclass
class PairTraffic:
    """GPU-pair traffic of one iteration of one configuration.

    matrices  type (TP, DP, PP, EP) -> (n, n) GB sent by row GPU to column GPU
    place     the `Placement` (domain and rail of each rank)
    per_gpu   the `kernels.traffic` summary of the configuration (a `traffic_many` row)
    network   the network; `forward`: cross-rail traffic drawn through its forwarding GPU
    config    the configuration and its model, system, strategy, profile
    check     max relative difference of the row sums from `per_gpu`, per type
    """

    matrices: dict[str, np.ndarray]
    place: Placement
    per_gpu: dict[str, float]
    network: str
    forward: bool
    config: dict[str, Any]
    check: dict[str, float] = field(default_factory=dict)

    @property
    def domain(self) -> np.ndarray:
        return self.place.domain

    @property
    def rail(self) -> np.ndarray:
        return self.place.rail

    def total(self) -> np.ndarray:
        return sum(self.matrices.values())

    def link_class(self) -> np.ndarray:
        """(n, n) index into LINKS of each pair's link class on this network (hb: same domain or
        any_to_any; rail: same rail; cross: otherwise)."""
        d, r = self.domain, self.rail
        cls = np.where(d[:, None] == d[None, :], 0, np.where(r[:, None] == r[None, :], 1, 2))
        return np.zeros_like(cls) if self.network == ANY_TO_ANY else cls

    def row_sums(self) -> dict[str, np.ndarray]:
        """type -> (n, 3) GB each GPU sends per link class (hb, rail, cross)."""
        cls = self.link_class()
        return {t: np.stack([np.where(cls == i, m, 0.0).sum(axis=1) for i in range(3)], axis=1)
                for t, m in self.matrices.items()}


def _tag_candidates() -> Candidates:
    """Every candidate column replaced by its own prime, so that a collective's group and local
    sizes name the columns they are products of."""
    primes = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71]
    return Candidates(*(np.array([p], dtype=np.int64) for p in primes[: len(Candidates._fields)]))


def _axes_of(value, tags: Candidates) -> tuple[str, ...]:
    """The degree columns whose tags multiply to `value` (a collective's tagged group size)."""
    v = int(round(float(np.asarray(value).ravel()[0])))
    out = []
    for name in Candidates._fields:
        p = int(getattr(tags, name)[0])
        while v % p == 0:
            out.append(name)
            v //= p
    if v != 1 or any(a not in AXES for a in out) or len(set(out)) != len(out):
        raise NotImplementedError(f"a collective's group is not a product of distinct {AXES} (tag {value})")
    return tuple(sorted(out, key=AXES.index))


def _scalar(x) -> float:
    return float(np.asarray(x).ravel()[0])


def _collectives(strategy, table, workload, system, profile, counts_):
    """[(type, kind, axes, GB per iteration)] of the block's collectives and the DP collectives,
    volumes times their counts per iteration, axes from the tagged candidates."""
    prof = layer_profile(profile)
    cands = to_candidates(table)
    c, w, s = prepare(cands, workload, system)
    real = block_layers(strategy, c, w, s, prof)
    tags = _tag_candidates()
    ct, wt, st = prepare(tags, workload, system)
    tagged = block_layers(strategy, ct, wt, st, prof)
    micro, blocks = counts_
    out = []
    for lr, lt in zip(real, tagged):
        for cr, ctg in zip(lr.comm_f + lr.comm_b, lt.comm_f + lt.comm_b):
            if _scalar(cr.group) <= 1 or _scalar(cr.volume) == 0:
                continue
            kind = "EP" if cr.kind == ALLTOALL else "TP"
            out.append((kind, cr.kind, _axes_of(ctg.group, tags), _scalar(cr.volume) * micro * blocks))
    weight = sum(_scalar(x.weight) for x in real)
    group_tag, _ = data_parallel_group(strategy, tags)
    group, _ = data_parallel_group(strategy, to_candidates(table))
    if _scalar(group) > 1 and weight > 0:
        axes = _axes_of(group_tag, tags)
        out += [("DP", ALLGATHER, axes, weight * blocks), ("DP", REDUCESCATTER, axes, weight * blocks)]
    ln1 = next(x for x in real if x.name == "ln1")
    return out, _scalar(ln1.activation)


def one_table(strategy: str, point: Mapping[str, int | None], nvs_size: int) -> dict[str, np.ndarray]:
    """One configuration as a 1-row candidate table. The GPUs per domain of a group (nvs1, nvs2,
    nvs_p, nvs_d) may be left out (None) when the whole job fits in one domain (they are then the
    degrees), and nvs2 for tp1d (1); n_b defaults to 1. Columns the kernels do not know are dropped."""
    point = {k: v for k, v in point.items() if k in CANDIDATE_COLUMNS}
    n = 1
    for k in AXES:
        n *= check_int(k, point.get(k, 1))
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
    return {k: np.array([check_int(k, v)], dtype=np.int64) for k, v in point.items() if v is not None}


def traffic_one(*, model, system, strategy: str = "tp1d", profile: str = "default", nvs_size: int | None = None,
                global_batch: int = 4096, network="two_tier", **point) -> dict[str, Any]:
    """The `traffic_many` row of one configuration (keyword degrees and placement as
    `dse.api.evaluate`), as a dict of Python scalars."""
    strategy = check_choice("strategy", strategy, STRATEGIES)
    s = load_system(system, nvs_size=nvs_size)
    table = one_table(strategy, point, s.nvs_size)
    return traffic_many(table, model=model, system=s, strategy=strategy, profile=profile,
                        global_batch=global_batch, network=network).row(0, named=True)


@float64
def pair_matrix(
    *,
    model,
    system,
    strategy: str = "tp1d",
    profile: str = "default",
    nvs_size: int | None = None,
    global_batch: int = 4096,
    n1: int = 1,
    n2: int = 1,
    n_p: int = 1,
    n_d: int = 1,
    microbatch: int = 1,
    nvs1: int | None = None,
    nvs2: int | None = None,
    nvs_p: int | None = None,
    nvs_d: int | None = None,
    n_b: int | None = None,
    interleave: int = 1,
    network="two_tier",
    forward: bool = False,
    check: bool = True,
) -> PairTraffic:
    """The GPU-pair traffic matrices of one iteration of one configuration (n1 n2 n_p n_d <=
    MAX_PAIR_GPUS), laid out by `placement` (module docstring). Arguments as `dse.api.evaluate`.

    `forward` (rail_only only): draw each cross-rail transfer as rail_only carries it, to the GPU
    of the destination's rail in the sender's domain and on along that rail; the row sums then
    include `forwarded`. With `check`, raises RuntimeError unless every GPU's row sums per type and
    link class equal its `kernels.traffic` values (PP: their mean over GPUs equals it) to
    CHECK_RTOL; the differences are in `check`.
    """
    strategy = check_choice("strategy", strategy, STRATEGIES)
    s = load_system(system, nvs_size=nvs_size)
    point = {"n1": n1, "n2": n2, "n_p": n_p, "n_d": n_d, "microbatch": microbatch, "nvs1": nvs1,
             "nvs2": nvs2, "nvs_p": nvs_p, "nvs_d": nvs_d, "n_b": n_b, "interleave": interleave}
    n = check_int("n1", n1) * check_int("n2", n2) * check_int("n_p", n_p) * check_int("n_d", n_d)
    if n > MAX_PAIR_GPUS:
        raise SpecError(f"n1*n2*n_p*n_d = {n}: a pair matrix is drawn for at most {MAX_PAIR_GPUS} GPUs")
    table = one_table(strategy, point, s.nvs_size)
    name, net = _network(network)
    if forward and name != RAIL_ONLY:
        raise SpecError(f"forward: only network 'rail_only' forwards cross-rail traffic, not {name!r}")
    frame = traffic_many(table, model=model, system=s, strategy=strategy, profile=profile,
                         global_batch=global_batch, network=net)
    per_gpu = frame.row(0, named=True)
    m = load_model(model)
    prof = profile_of(profile)
    workload = m.workload(global_batch)
    params = net.apply(s).params()
    row = {k: int(table[k][0]) for k in table}
    c_float, w_float, _ = prepare(to_candidates(table), workload, params)
    micro, blocks, v = (_scalar(x) for x in counts(c_float, w_float))
    colls, message = _collectives(strategy, table, workload, params, prof, (micro, blocks))

    place = placement(*(row[k] for k in AXES), *(row[LOCAL_OF[k]] for k in AXES))
    mats = {t: np.zeros((n, n)) for t in TYPE_NAMES}
    merged: dict[tuple, float] = {}
    for typ, kind, axes, vol in colls:
        key = (typ, REDUCESCATTER if kind == ALLGATHER else kind, axes)  # same pair traffic
        merged[key] = merged.get(key, 0.0) + vol
    for (typ, kind, axes), vol in merged.items():
        grid = place.groups(axes)
        y, x = grid.shape[1:]
        t = template(kind, vol, x, y)
        members = grid.reshape(len(grid), -1)
        mats[typ][members[:, :, None], members[:, None, :]] += t[None]

    if row["n_p"] > 1 and message > 0:
        pp = mats["PP"]
        r = place.rank
        for st in range(row["n_p"] - 1):
            src, dst = r[:, :, st, :].ravel(), r[:, :, st + 1, :].ravel()
            np.add.at(pp, (src, dst), micro * v * message)
            np.add.at(pp, (dst, src), micro * v * message)
        if v > 1:
            src, dst = r[:, :, -1, :].ravel(), r[:, :, 0, :].ravel()
            np.add.at(pp, (src, dst), micro * (v - 1) * message)
            np.add.at(pp, (dst, src), micro * (v - 1) * message)

    config = {"model": m.name, "system": s.name, "nvs_size": s.nvs_size, "strategy": strategy,
              "profile": profile_name(prof), "global_batch": global_batch, "network": name, **row,
              "per_domain": place.per_domain, "microbatches": micro, "blocks_per_stage": blocks}
    pt = PairTraffic(matrices=mats, place=place, per_gpu=per_gpu, network=name, forward=False, config=config)
    if check:
        pt.check = check_rows(pt)
        bad = {t: d for t, d in pt.check.items() if not d <= CHECK_RTOL}
        if bad:
            raise RuntimeError(f"pair-matrix row sums differ from the per-GPU traffic: {bad}")
    if forward:
        pt = forwarded(pt)
    return pt


def check_rows(pt: PairTraffic) -> dict[str, float]:
    """type -> max relative difference between the row sums per link class and the per-GPU values
    (PP: the mean of the row sums over GPUs), relative to the type's per-GPU total."""
    sums = pt.row_sums()
    out = {}
    for t, name in zip(TYPES, TYPE_NAMES):
        want = np.array([pt.per_gpu[f"{t}_{k}"] for k in LINKS])
        got = sums[name].mean(axis=0, keepdims=True) if t == "pp" else sums[name]
        scale = max(float(want.sum()), 1e-300)
        out[name] = float(np.abs(got - want[None, :]).max() / scale) if want.sum() > 0 else float(np.abs(got).max())
    return out


def forwarded(pt: PairTraffic) -> PairTraffic:
    """The matrices with every cross-rail transfer s -> d drawn as rail_only carries it: s -> f
    over the HB domain and f -> d along the rail, f the GPU of d's rail in s's domain."""
    d, r, k = pt.domain, pt.rail, pt.place.per_domain
    cross = (d[:, None] != d[None, :]) & (r[:, None] != r[None, :])
    src, dst = np.nonzero(cross)
    via = d[src] * k + r[dst]
    mats = {}
    for t, m in pt.matrices.items():
        b = m[src, dst]
        out = m.copy()
        out[src, dst] = 0.0
        np.add.at(out, (src, via), b)
        np.add.at(out, (via, dst), b)
        mats[t] = out
    return PairTraffic(matrices=mats, place=pt.place, per_gpu=pt.per_gpu, network=pt.network, forward=True,
                       config=pt.config, check=pt.check)


# --------------------------------------------------------------------------------------------
# writers


def _atomic(path: Path, write) -> Path:
    """Call write(tmp) for a temporary file beside `path`, then rename it to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def pair_frame(pt: PairTraffic) -> pl.DataFrame:
    """Long format, one row per (src, dst, type) with traffic: src, dst (ranks), type (TP, DP, PP,
    EP), bytes (bytes per iteration, float), link (hb, rail, cross), src/dst domain and rail."""
    cls = pt.link_class()
    parts = []
    for t, m in pt.matrices.items():
        src, dst = np.nonzero(m)
        parts.append(pl.DataFrame({
            "src": src.astype(np.int64), "dst": dst.astype(np.int64),
            "type": np.full(len(src), t), "bytes": m[src, dst] * 1e9,
            "link": np.array(LINKS, dtype=object)[cls[src, dst]].astype(str),
            "src_domain": pt.domain[src], "dst_domain": pt.domain[dst],
            "src_rail": pt.rail[src], "dst_rail": pt.rail[dst],
        }, schema={"src": pl.Int64, "dst": pl.Int64, "type": pl.Utf8, "bytes": pl.Float64, "link": pl.Utf8,
                   "src_domain": pl.Int64, "dst_domain": pl.Int64, "src_rail": pl.Int64, "dst_rail": pl.Int64}))
    return pl.concat(parts)


def write_parquet(pt: PairTraffic, path) -> Path:
    """`pair_frame` as Parquet, written atomically; file metadata key `dse.traffic` holds the
    configuration and the per-GPU summary as JSON."""
    import pyarrow.parquet as pq

    table = pair_frame(pt).to_arrow()
    meta = {"config": pt.config, "forward": pt.forward, "per_gpu_gb": {k: v for k, v in pt.per_gpu.items()
                                                                      if isinstance(v, (int, float))}}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           b"dse.traffic": json.dumps(meta, default=str).encode()})
    return _atomic(Path(path), lambda tmp: pq.write_table(table, tmp))


def plot(pt: PairTraffic, path, dpi: int = 90, types: tuple[str, ...] | None = None) -> Path:
    """Heatmaps of the pair matrices (seed 000 Figures 4-5): one panel per type with traffic (or
    `types`) and the total, GB per iteration on one log colour scale, zero pairs blank; HB domains
    outlined in orange, domain boundaries as thin lines. Written atomically as PNG."""
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    names = [t for t in TYPE_NAMES if (types is None and pt.matrices[t].any()) or (types and t in types)]
    panels = [(t, pt.matrices[t]) for t in names] + [("total", pt.total())]
    positive = np.concatenate([m[m > 0] for _, m in panels])
    vmin, vmax = (positive.min(), positive.max()) if positive.size else (1e-3, 1.0)
    vmin = max(vmin, vmax * 1e-8)
    if vmin >= vmax:
        vmin = vmax / 10.0
    norm = LogNorm(vmin=vmin, vmax=vmax)
    n, k = pt.place.n, pt.place.per_domain
    fig = Figure(figsize=(3.8 * len(panels) + 0.9, 4.3))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    cmap = _cmap()
    image = None
    for ax, (title, m) in zip(axes, panels):
        image = ax.imshow(np.ma.masked_less_equal(m, 0.0), cmap=cmap, norm=norm, interpolation="nearest",
                          extent=(-0.5, n - 0.5, n - 0.5, -0.5))
        for b in range(k, n, k):
            ax.axhline(b - 0.5, color="0.85", lw=0.4)
            ax.axvline(b - 0.5, color="0.85", lw=0.4)
        for start in range(0, n, k):
            ax.add_patch(Rectangle((start - 0.5, start - 0.5), k, k, fill=False, ec="tab:orange", lw=0.7, alpha=0.8))
        share = m.sum() / max(pt.total().sum(), 1e-300)
        ax.set_title(f"{title} ({100 * share:.3g}% of bytes)" if title != "total" else "total", fontsize=10)
        ax.set_xlabel("destination GPU", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("source GPU", fontsize=8)
    c = pt.config
    fig.suptitle(
        f"{c['model']} on {c['system']}, {c['strategy']} n1={c['n1']} n2={c['n2']} n_p={c['n_p']} n_d={c['n_d']} "
        f"b={c['microbatch']}, {n} GPUs in HB domains of {k} (orange), {pt.network}"
        + (" (forwarded)" if pt.forward else ""), fontsize=10)
    fig.subplots_adjust(left=0.05, right=0.9, bottom=0.14, top=0.82, wspace=0.25)
    cax = fig.add_axes((0.915, 0.16, 0.012, 0.64))
    bar = fig.colorbar(image, cax=cax)
    bar.set_label("GB per iteration", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    return _atomic(Path(path), lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))


def _cmap():
    from matplotlib import colormaps

    return colormaps["viridis"].with_extremes(bad="white")
