"""GPU-pair traffic matrices of one iteration of one configuration (seed 000 Figures 3-5, seed 002
Figures 3-5).

The matrices follow the algorithms of `kernels.traffic`: allgather / reduce-scatter as a ring
inside each domain (to the next local rank of the group) and a ring along each rail (to the next
domain), broadcast / reduce averaged over the rotating root, all-to-all to every member, pipeline
transfers between the matching GPUs of consecutive stages, and a ring exchange (tp1d's context
parallelism, `kernels.attention.context_exchange`) from each GPU to the next rank of its ring, in
the order of the ring's degree (Megatron's cp ranks). Entry [s, d] is the GB that GPU s
sends to GPU d in one iteration; a row sum is what that GPU sends, equal to its
`kernels.traffic.iteration_traffic` value (PP: their mean over GPUs), which `pair_matrix` checks.
The GPUs are laid out by `dse.traffic.placement`. Dense blocks only (an MoE model's expert blocks
are not drawn).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dse.api import _table, zero_code
from dse.explore.engine import profile_name, profile_of, to_candidates
from dse.spec.network import load_network
from dse.runtime import float64
from dse.spec.checks import TP1D_NAMES
from dse.spec.specs import SpecError, check_choice, load_model, load_system
from dse.traffic.per_gpu import AXES, LOCAL_OF, TYPE_NAMES, one_table, traffic_many
from dse.traffic.placement import Placement, placement
from kernels.blocks import block_layers, data_parallel_group, expert_data_parallel_group
from kernels.comm_types import (ALLGATHER, ALLREDUCE, ALLTOALL, ANY_TO_ANY, BROADCAST, P2P, RAIL_ONLY, REDUCE,
                                REDUCESCATTER)
from kernels.block_time import parameter_bytes
from kernels.data_parallel import allgathered, zero_schedule
from kernels.iteration import prepare
from kernels.params import STRATEGIES, Arch, Candidates, state_bytes
from kernels.traffic import LINKS, TYPES, counts, moe_share, recomputed_passes, runs, traffic_type

#: The largest job `pair_matrix` lays out (its matrices are dense n x n).
MAX_PAIR_GPUS = 1024
#: Relative tolerance of the row-sum check.
CHECK_RTOL = 1e-9


# --------------------------------------------------------------------------------------------
# templates: the pair traffic of one collective on an x-by-y grid (member index r x + c)


def _ring_next(x: int, y: int):
    k = np.arange(x * y)
    r, c = np.divmod(k, x)
    return k, r * x + (c + 1) % x, ((r + 1) % y) * x + c


def template(kind: str, volume: float, x: int, y: int, share: float = 1.0) -> np.ndarray:
    """(x y, x y) GB member i sends member j in one collective of `kind` and `volume` GB
    (`kernels.traffic` module docstring; broadcast/reduce averaged over the rotating root). An
    all-to-all deduplicated per destination domain (`share` < 1, `Collective.cross`) sends D to its
    domain's GPUs and x D share along its rail to each other domain, the two-step schedule."""
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
    elif kind == ALLTOALL and share < 1.0:
        r, c = np.divmod(np.arange(g), x)
        t += np.where(r[:, None] == r[None, :], volume / g, 0.0)
        t += np.where((c[:, None] == c[None, :]) & (r[:, None] != r[None, :]), x * volume / g * share, 0.0)
        np.fill_diagonal(t, 0.0)
    elif kind == ALLTOALL:
        t[:] = volume / g
        np.fill_diagonal(t, 0.0)
    else:
        raise ValueError(f"collective kind {kind!r} has no group template")
    return t


@dataclass
class PairTraffic:
    """GPU-pair traffic of one iteration of one configuration.

    matrices  type (TP, CP, DP, PP, EP) -> (n, n) GB sent by row GPU to column GPU
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


# --------------------------------------------------------------------------------------------
# the collectives of one iteration, and the grid axes each one spans


def _scalar(x) -> float:
    return float(np.asarray(x).ravel()[0])


def _doubled(table: dict[str, np.ndarray]) -> Candidates:
    """One candidate per axis of AXES: the configuration of the 1-row `table` with that degree
    doubled."""
    rows = {k: np.repeat(np.asarray(v, dtype=np.int64), len(AXES)) for k, v in table.items()}
    for i, axis in enumerate(AXES):
        if axis == "n_d" and "ep" in rows and rows["ep"][i] == rows["n_d"][i]:
            rows["ep"][i] *= 2  # experts over every replica: the expert group is the n_d axis
        rows[axis][i] *= 2
    return to_candidates(rows)


def _axes(group: float, grown, degrees: dict[str, int], where: str) -> tuple[str, ...]:
    """The axes a group spans. A group's size is the product of the degrees it spans, so it doubles
    exactly where one of those degrees does: `grown[i]` is its size with AXES[i] doubled."""
    grown = np.broadcast_to(np.asarray(grown, dtype=np.float64), (len(AXES),))
    axes = tuple(a for a, g in zip(AXES, grown) if g == 2.0 * group)
    if np.prod([degrees[a] for a in axes]) != group:
        raise NotImplementedError(f"{where}: its group of {group:g} GPUs is not a product of distinct "
                                  f"degrees {AXES} (the pair matrix lays out such groups only; expert "
                                  f"groups folded over part of n_d are not)")
    return axes


def _ring_axes(steps: float, grown, degrees: dict[str, int], where: str) -> tuple[str, ...]:
    """The axes of the ring a point-to-point exchange steps around (a pair of GPUs at a time:
    `kernels.attention.context_exchange`, cp - 1 steps forward and cp backward over tp1d's n2).
    Its steps grow exactly where the ring's degree does: `grown[i]` is its steps with AXES[i]
    doubled; the ring holds the product of those degrees, one or no more GPUs than its steps."""
    grown = np.broadcast_to(np.asarray(grown, dtype=np.float64), (len(AXES),))
    axes = tuple(a for a, g in zip(AXES, grown) if g != steps)
    if len(axes) != 1 or not 0 <= degrees[axes[0]] - steps <= 1:
        raise NotImplementedError(f"{where}: its {steps:g} steps are not a ring over one degree of {AXES}")
    return axes


def collectives(strategy, table, workload, system, profile, counts_, arch=Arch()):
    """[(type, kind, axes, GB per iteration, share)] of the block's collectives and the DP collectives
    (share: an all-to-all's deduplicated share, `Collective.cross`; 1 for the others),
    volumes times their counts per iteration, and the pipeline message (GB). `axes`: the degrees
    each group spans (`_axes`; a point-to-point ring exchange's, `_ring_axes`), found by evaluating
    the block once more with each degree doubled.
    An MoE model (`arch.moe`) mixes its dense and MoE blocks in the model's proportions, as
    `kernels.traffic.iteration_traffic` does; expert weights are synchronized over the expert
    data-parallel group."""
    prof = profile
    c, w, s = prepare(to_candidates(table), workload, system)
    probe = _doubled(table)
    cp, wp, sp = prepare(probe, workload, system)
    degrees = {a: int(table[a][0]) for a in AXES}
    micro, blocks = counts_
    g = state_bytes(prof).grad / state_bytes(prof).weight
    zero = float(table["zero"][0]) if "zero" in table else 1.0
    ag_rounds, rs_rounds = (float(x) for x in zero_schedule(zero, float(micro)))
    kinds = [(arch._replace(moe=False), 1.0)]
    if arch.moe:
        f = _scalar(moe_share(w))
        kinds = [(arch._replace(moe=False), 1.0 - f), (arch, f)]
    out = []
    for shape, share in kinds:
        real = block_layers(strategy, c, w, s, prof, shape)
        grown = block_layers(strategy, cp, wp, sp, prof, shape)
        again = [_scalar(r) for r in recomputed_passes(real, c, w, prof, strategy, blocks)]
        for lr, lg, r in zip(real, grown, again):
            for (cr, n), cg in zip(runs(lr, r), lg.comm_f + lg.comm_b):
                group = _scalar(cr.group)
                if group <= 1 or _scalar(cr.volume) == 0:
                    continue
                kind = traffic_type(cr).upper()
                where = f"{cr.kind} of layer {lr.name}"
                axes = (_ring_axes(_scalar(cr.steps), cg.steps, degrees, where) if cr.kind == P2P
                        else _axes(group, cg.group, degrees, where))
                out.append((kind, cr.kind, axes, _scalar(cr.volume) * _scalar(cr.steps) * micro * blocks * share * n,
                            _scalar(cr.cross)))
        for expert, (grp, grp_probe) in ((False, (data_parallel_group(strategy, to_candidates(table))[0],
                                                  data_parallel_group(strategy, probe)[0])),
                                         (True, (expert_data_parallel_group(c, w, strategy, prof)[0],
                                                 expert_data_parallel_group(cp, wp, strategy, prof)[0]))):
            weight, sent = (_scalar(v) * share for v in parameter_bytes(real, prof, expert))
            group = _scalar(grp)
            if group > 1 and weight > 0:
                axes = _axes(group, grp_probe, degrees, "the data-parallel group")
                # the candidate's ZeRO stage (`kernels.data_parallel.zero_schedule`); a parameter
                # allgather moves `sent` (`kernels.block_time.parameter_bytes`), an allreduce the gradients
                moved = float(allgathered(zero, weight, sent, g))
                out += [("DP", ALLGATHER, axes, moved * ag_rounds * blocks, 1.0),
                        ("DP", REDUCESCATTER, axes, weight * g * rs_rounds * blocks, 1.0)]
    dense = block_layers(strategy, c, w, s, prof, arch._replace(moe=False))
    ln1 = next(x for x in dense if x.name == "ln1")
    return out, _scalar(ln1.activation)


def _spread_ring(strategy: str, axis: str, x: int, y: int) -> str:
    """Why a ring exchange over `axis` with x > 1 GPUs in each of y > 1 domains is not drawn, in the
    command's names (tp1d's n2 is cp, its nvs2 nvs_cp)."""
    names = TP1D_NAMES if strategy == "tp1d" else {}
    deg, nvs = names.get(axis, axis), names.get(LOCAL_OF[axis], LOCAL_OF[axis])
    return (f"the ring exchange over {deg} = {x * y} GPUs spans {y} domains with {nvs} = {x} in each: the "
            f"per-GPU accounting counts all its steps at the ring's slowest hop (the NIC), which the pairs of "
            f"consecutive ranks do not follow (some inside a domain, some across rails); the pair matrix draws "
            f"the ring with {nvs} = 1 or {nvs} = {deg} ({LOCAL_OF[axis]} = 1 or {axis})")


# --------------------------------------------------------------------------------------------
# pair matrix


@float64
def pair_matrix(
    *,
    model,
    system,
    strategy: str = "tp1d",
    profile: str = "default",
    nvs_size: int | None = None,
    global_batch: int = 4096,
    network="two_tier",
    forward: bool = False,
    check: bool = True,
    **point,
) -> PairTraffic:
    """The GPU-pair traffic matrices of one iteration of one configuration (n1 n2 n_p n_d <=
    MAX_PAIR_GPUS), laid out by `placement`. `point`: the degrees and placement as keywords of
    `dse.api.evaluate` (n1, n2, n_p, n_d, microbatch, nvs1, nvs2, nvs_p, nvs_d, n_b, interleave).

    `forward` (rail_only only): draw each cross-rail transfer as rail_only carries it, to the GPU
    of the destination's rail in the sender's domain and on along that rail; the row sums then
    include `forwarded`. With `check`, raises RuntimeError unless every GPU's row sums per type and
    link class equal its `kernels.traffic` values (PP: their mean over GPUs equals it) to
    CHECK_RTOL; the differences are in `check`. Raises NotImplementedError for a group it cannot lay
    out: one whose size is not a product of whole degrees (`_axes`), or a ring exchange over domains
    with more than one of its GPUs in each (`_spread_ring`).
    """
    strategy = check_choice("strategy", strategy, STRATEGIES)
    s = load_system(system, nvs_size=nvs_size)
    table = one_table(strategy, point, s.nvs_size)
    # the columns left out, as `traffic_many` fills them: the profile's ZeRO stage, gcd(n_d, E) experts
    table = _table(table, strategy, zero_code(None, profile_of(profile)), load_model(model))
    n = int(np.prod([table[k][0] for k in AXES]))
    if n > MAX_PAIR_GPUS:
        raise SpecError(f"n1*n2*n_p*n_d = {n}: a pair matrix is drawn for at most {MAX_PAIR_GPUS} GPUs")
    net = load_network(network)
    name = net.name
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
    colls, message = collectives(strategy, table, workload, params, prof, (micro, blocks), m.arch)

    place = placement(*(row[k] for k in AXES), *(row[LOCAL_OF[k]] for k in AXES))
    mats = {t: np.zeros((n, n)) for t in TYPE_NAMES}
    merged: dict[tuple, float] = {}
    for typ, kind, axes, vol, share in colls:
        key = (typ, REDUCESCATTER if kind == ALLGATHER else kind, axes, share)  # same pair traffic
        merged[key] = merged.get(key, 0.0) + vol
    for (typ, kind, axes, share), vol in merged.items():
        grid = place.groups(axes)
        y, x = grid.shape[1:]
        if kind == P2P:
            if x > 1 and y > 1:
                raise NotImplementedError(_spread_ring(strategy, axes[0], x, y))
            ring = place.members(axes)  # each GPU sends to the next rank of its ring
            np.add.at(mats[typ], (ring.ravel(), np.roll(ring, -1, axis=1).ravel()), vol)
            continue
        t = template(kind, vol, x, y, share)
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
