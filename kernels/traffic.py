"""Traffic accounting: the bytes each GPU sends per iteration, by type and by the links they use.

Seed 000 section 3 (Figures 3-5) and seed 002 section III: the traffic of one training iteration
split by parallelism type (TP, CP, DP, PP, EP) and by where it travels:

    hb      to a GPU of the same HB (NVLink/NVSwitch) domain
    rail    over the NIC network to the GPU of the same rail (local rank) in another domain
    cross   to a GPU of another rail in another domain: through the spine on rail_optimized and
            two_tier, forwarded through the HB domain on rail_only (seed 000 section 4: the
            "bandwidth tax"; `forwarded` counts those extra HB bytes), on the HB fabric on any_to_any

Every count is bytes *sent* (GB, 1e9 bytes), the payload of the algorithm's transfers, each counted
once at its sender; `hb + rail + cross` is a GPU's total. On any_to_any (one HB domain holds the whole
group, K = N) every byte is `hb`.

A group of `group` GPUs with `local` of them in each of its domains is the x-by-y grid of
`kernels.fabrics`: x = local GPUs per domain (one per rail), y = group / local domains. The search's
placements are rail-aligned (`kernels.collectives`), so the grid's columns are rails. With V the
collective's volume (`kernels.collectives.Collective`), the bytes one GPU sends per call:

    allgather, reduce-scatter   hb = (x-1) V/x             the ring inside the domain (shards V/x)
                                rail = (y-1) V/(x y)       the ring along the rail (shards V/(x y))
    allreduce                   twice the allgather (a reduce-scatter, then an allgather)
    broadcast, reduce           the mean over the group's GPUs, the root rotating through them (SUMMA
                                broadcasts each GPU's panel in turn), for the schedules of
                                `fabrics.broadcast_time`:
                                  y = 1: a chain through the x GPUs      hb = (x-1) V/x
                                  x = 1: a chain along the rail          rail = (y-1) V/y
                                  both: the root scatters V/x shards inside its domain, each shard
                                  runs down its rail as a chain, every domain allgathers its shards
                                         hb = (x-1) V/x + (x-1) V/(x^2 y),  rail = (y-1) V/(x y)
                                A reduce runs the same schedule inverted: the same bytes.
    point-to-point              the sender's V: hb when both GPUs share a domain (x = 2), else rail
                                (pipeline stages are rail-aligned)
    all-to-all                  each GPU sends a shard D = V/(x y) to every member (itself
                                included): hb = (x-1) D to its own domain, rail = (y-1) D to its
                                rail in the other domains, cross = (x-1)(y-1) D to the rest.
                                rail_optimized and two_tier send every shard directly (the schedule
                                that wins at zero latency); rail_only runs the two-step schedule,
                                which relays each cross-rail shard through the GPU of the
                                destination's rail in the sender's domain: forwarded = cross
                                extra HB bytes. Deduplicated (`Collective.cross` = r < 1, DeepSeek's
                                node-limited dispatch) every network runs the two-step schedule:
                                hb = (x-1) D, rail = (y-1) x D r, cross = 0, and the (x-1)(y-1) D
                                relayed inside the domains are forwarded bytes.

A group of one GPU (x y = 1) or a zero volume sends exactly 0.

A block's collectives are typed by `traffic_type`: all-to-alls are expert parallelism (EP); the
K, V exchange of tp1d's context parallelism over its cp = n2 group (`Collective.context`, the
ring's point-to-points or the allgather form, `kernels.attention.context_exchange`) is CP; every
other one is tensor parallelism (TP: Megatron's allgathers and reduce-scatters over n1, tp2d's K/V
allgathers over n2, SUMMA's broadcasts and reduces, the SUMMA LayerNorm allreduces). The
data-parallel group (over n_d, and tp1d's cp replicas, `kernels.experts.data_parallel_group`) is
DP; the pipeline's transfers PP.

two_tier splits bytes as rail_optimized does: seed 001 times its collectives as rings over both
tiers, which send the same bytes per GPU ((n-1) V/n for an allgather); the split between the tiers
is that of the hierarchical algorithm on the same grid.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from kernels.blocks import block_layers, data_parallel_group, expert_data_parallel_group
from kernels.collectives import Collective
from kernels.comm_types import (  # noqa: F401  (RAIL_ONLY, ANY_TO_ANY are imported from here too)
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    ANY_TO_ANY,
    BROADCAST,
    KINDS,
    NETWORKS,
    P2P,
    RAIL_ONLY,
    REDUCE,
    REDUCESCATTER,
    TWO_TIER,
)
from kernels.block_time import parameter_bytes, recomputes
from kernels.fabrics import is_one
from kernels.data_parallel import allgathered, zero_schedule
from kernels.iteration import prepare, stage_counts
from kernels.layers import Layer
from kernels.numerics import as_float, fdiv, recip
from kernels.params import Arch, Array, Candidates, System, Workload, arch_of, recompute_modules, state_bytes
from kernels.stage import OP_SAC_COMM_SHARE, full_share, op_sac

#: Traffic types and link classes, in the order of `IterationTraffic`'s fields.
TYPES = ("tp", "cp", "dp", "pp", "ep")
LINKS = ("hb", "rail", "cross")


class LinkBytes(NamedTuple):
    """GB one GPU sends, by link class (module docstring). `forwarded` is not part of the total:
    the HB bytes added by relaying `cross` through the domain on rail_only."""

    hb: Array
    rail: Array
    cross: Array
    forwarded: Array

    def total(self) -> Array:
        return self.hb + self.rail + self.cross

    def plus(self, other: "LinkBytes") -> "LinkBytes":
        return LinkBytes(*(a + b for a, b in zip(self, other)))

    def scale(self, k: Array) -> "LinkBytes":
        return LinkBytes(*(a * k for a in self))


def _check_network(network: str) -> str:
    if network not in NETWORKS:
        raise ValueError(f"network {network!r} is not one of {NETWORKS}")
    return network


def route(hb: Array, rail: Array, cross: Array, network: str) -> LinkBytes:
    """Bytes by destination class as the links of `network` carry them (module docstring)."""
    _check_network(network)
    zero = jnp.zeros_like(hb + rail + cross)
    if network == ANY_TO_ANY:
        return LinkBytes(hb + rail + cross, zero, zero, zero)
    forwarded = cross + zero if network == RAIL_ONLY else zero
    return LinkBytes(hb + zero, rail + zero, cross + zero, forwarded)


def collective_bytes(
    kind: str, volume: Array, group: Array, local: Array, network: str = TWO_TIER, share: Array | float = 1.0
) -> LinkBytes:
    """GB one GPU sends in one collective of `kind` (static) on `network` (static); see the module
    docstring for each formula. `volume` in GB as in `kernels.collectives.Collective`; `group` GPUs,
    `local` of them per HB domain (x = local, y = group / local); `share` an all-to-all's
    deduplicated share of its shards to other domains (`Collective.cross`)."""
    if kind not in KINDS:
        raise ValueError(f"collective kind {kind!r} is not one of {KINDS}")
    _check_network(network)
    v = jnp.asarray(volume, dtype=jnp.float64)
    x = as_float(local)
    y = fdiv(group, local)
    active = (v != 0) & (x * y > 1.0)
    inv_x, inv_xy = recip(x), recip(x * y)
    zero = jnp.zeros_like(v * x * y)
    cross = zero
    if kind in (ALLGATHER, REDUCESCATTER, ALLREDUCE):
        hb = (x - 1.0) * v * inv_x
        rail = (y - 1.0) * v * inv_xy
        if kind == ALLREDUCE:
            hb, rail = 2.0 * hb, 2.0 * rail
    elif kind in (BROADCAST, REDUCE):
        scatter = jnp.where(y > 1.0, (x - 1.0) * v * inv_x * inv_xy, 0.0)
        hb = (x - 1.0) * v * inv_x + scatter
        rail = (y - 1.0) * v * inv_xy
    elif kind == P2P:
        hb = jnp.where(y > 1.0, 0.0, v)
        rail = jnp.where(y > 1.0, v, 0.0)
    relayed = zero
    if kind == ALLTOALL:
        shard = v * inv_xy
        hb = (x - 1.0) * shard
        rail = (y - 1.0) * shard
        cross = (x - 1.0) * (y - 1.0) * shard
        if not is_one(share):  # deduplicated: the inter-domain shards all on the rail, relayed inside the domain
            dedup = as_float(share) + zero < 1.0
            rail = jnp.where(dedup, (y - 1.0) * x * shard * share, rail)
            relayed = jnp.where(dedup, cross, 0.0) if network != ANY_TO_ANY else zero
            cross = jnp.where(dedup, 0.0, cross)
    out = route(hb + zero, rail + zero, cross + zero, network)
    out = out._replace(forwarded=out.forwarded + relayed)
    return LinkBytes(*(jnp.where(active, a, 0.0) for a in out))


def bytes_of(c: Collective, network: str = TWO_TIER) -> LinkBytes:
    """`collective_bytes` of a `Collective`, all its `steps` (a ring exchange's point-to-point
    steps are each counted at the ring's slowest hop, the NIC one when the ring spans domains)."""
    out = collective_bytes(c.kind, c.volume, c.group, c.local, network, c.cross)
    return out if isinstance(c.steps, float) and c.steps == 1.0 else out.scale(c.steps)


class IterationTraffic(NamedTuple):
    """GB each GPU sends in one iteration, by type and link class (module docstring).

    TP, CP, DP and EP are the same for every GPU. PP is the mean over the job's GPUs: a GPU of the
    first or last stage sends half of what an inner stage's GPU sends (`pipeline_traffic`).
    `forwarded` (all types) is the extra HB load of rail_only's relaying, not part of any total.
    """

    tp_hb: Array
    tp_rail: Array
    tp_cross: Array
    cp_hb: Array
    cp_rail: Array
    cp_cross: Array
    dp_hb: Array
    dp_rail: Array
    dp_cross: Array
    pp_hb: Array
    pp_rail: Array
    pp_cross: Array
    ep_hb: Array
    ep_rail: Array
    ep_cross: Array
    forwarded: Array

    def of(self, kind: str) -> LinkBytes:
        """One type's `LinkBytes` (its `forwarded` is the whole iteration's)."""
        return LinkBytes(*(getattr(self, f"{kind}_{k}") for k in LINKS), self.forwarded)

    def total(self) -> Array:
        return sum(getattr(self, f"{t}_{k}") for t in TYPES for k in LINKS)


def counts(c: Candidates, w: Workload) -> tuple[Array, Array, Array]:
    """(m, L_s, v): `kernels.iteration.stage_counts` and the model chunks per stage (the
    `interleave` column)."""
    m, blocks = stage_counts(c, w)
    return m, blocks, as_float(c.interleave)


def pipeline_traffic(message: Array, c: Candidates, micro: Array, v: Array, network: str) -> LinkBytes:
    """Mean GB per GPU that the pipeline sends in one iteration (seed 001 section III-C; spec 5.3).

    Each microbatch sends `message` (the output of ln1, per GPU) forward across every boundary of
    the chain of n_p v model chunks, and its gradient backward: 2 m messages per boundary per GPU
    column. Of the n_p - 1 stage boundaries s -> s+1 (each crossed v times per microbatch and
    direction), n_p - n_p/nvs_p are inside a domain and n_p/nvs_p - 1 cross to the next domain on the
    same rail (the stages snake through alternate domains). With v > 1 the chain also wraps v - 1
    times from the last stage to the first, a boundary inside the domain when n_p = nvs_p, on one
    rail when nvs_p = 1 or the pipeline spans an even number of domains, and otherwise between
    rails (the snake ends on the other side of the domain). Per GPU, the mean over the job's GPUs:

        pp = 2 m message [v (n_p - 1) + (v - 1)] / n_p      (n_p > 1; 0 for n_p = 1)

    split into hb / rail / cross by the boundaries' classes. A GPU of an inner stage sends
    2 m message v (+ the wrap), one of the first or last stage half of that.
    """
    n_p, nvs_p = as_float(c.n_p), as_float(c.nvs_p)
    spans = fdiv(n_p, nvs_p)  # domains along the pipeline
    hb_msg = collective_bytes(P2P, message, 2.0, 2.0, network)
    nic_msg = collective_bytes(P2P, message, 2.0, 1.0, network)
    wraps = jnp.maximum(v - 1.0, 0.0)
    wrap_inside = spans <= 1.0
    wrap_rail = (~wrap_inside) & ((nvs_p <= 1.0) | (jnp.mod(spans, 2.0) == 0.0))
    wrap_cross = ~(wrap_inside | wrap_rail)
    inside = v * (n_p - spans) + jnp.where(wrap_inside, wraps, 0.0)
    along = v * (spans - 1.0) + jnp.where(wrap_rail, wraps, 0.0)
    across = jnp.where(wrap_cross, wraps, 0.0)
    scale = 2.0 * micro * recip(n_p)
    cross = route(jnp.zeros_like(message), jnp.zeros_like(message), message, network)
    out = hb_msg.scale(inside * scale).plus(nic_msg.scale(along * scale)).plus(cross.scale(across * scale))
    return LinkBytes(*(jnp.where(n_p > 1.0, a, 0.0) for a in out))


def traffic_type(coll: Collective) -> str:
    """The traffic type of a block's collective (module docstring): "ep" for an all-to-all, "cp" for
    context parallelism's K, V exchange (`Collective.context`), "tp" for the rest."""
    return "ep" if coll.kind == ALLTOALL else "cp" if coll.context else "tp"


def block_traffic(layers: tuple[Layer, ...], network: str,
                  again: list | None = None) -> tuple[LinkBytes, LinkBytes, LinkBytes]:
    """(TP, CP, EP) GB one GPU sends for one block and one microbatch: every collective of the
    layers' forward and backward lists, by `traffic_type`, and each layer's forward collectives
    `again[i]` times more (`recomputed_passes`: recomputation runs them again in backward)."""
    zero = jnp.zeros_like(layers[0].flops_f)
    out = {t: LinkBytes(zero, zero, zero, zero) for t in ("tp", "cp", "ep")}
    for i, layer in enumerate(layers):
        for coll, n in runs(layer, 0.0 if again is None else again[i]):
            t = traffic_type(coll)
            out[t] = out[t].plus(bytes_of(coll, network).scale(n))
    return out["tp"], out["cp"], out["ep"]


def runs(layer: Layer, again) -> list:
    """[(collective, times it runs per block and microbatch)] of `layer`: its forward collectives
    1 + `again` times (recomputation runs them again: `recomputed_passes`), its backward ones once."""
    return [(coll, 1.0 + again) for coll in layer.comm_f] + [(coll, 1.0) for coll in layer.comm_b]


def recomputed_passes(layers: tuple[Layer, ...], c: Candidates, w: Workload, profile, strategy: str,
                      blocks: Array) -> list:
    """For each layer of the block, how many more times recomputation runs its forward collectives in
    backward, on average over a stage of `blocks` (what `kernels.stage.recomputed` charges in time):
    under full recomputation every layer's, on the `recompute_share` of the blocks; under selective the
    layers the mode recomputes (`kernels.block_time.recomputes`: the attention core under core_attn,
    its context-parallel exchange included, and the modules listed), or, where selective is
    torchtitan's operator-level SAC on a dense block (`kernels.stage.op_sac`), half of every other
    layer's; none under none, nor off Megatron's block (seed 001's model recomputes inside its layers)."""
    zero = jnp.zeros_like(as_float(c.recompute))
    if not profile.megatron:
        return [zero for _ in layers]
    full = full_share(blocks, c, profile)
    sel = jnp.where(c.recompute == 1.0, 1.0, 0.0)
    modules = recompute_modules(profile)
    sac = op_sac(profile, strategy, w)
    out = []
    for layer in layers:
        mine = 1.0 if recomputes(layer, modules) else 0.0
        if sac is not None:  # operator-level SAC on a dense block: a share of the other layers' collectives
            mine = jnp.where(sac >= 0.0, OP_SAC_COMM_SHARE * (1.0 - mine), mine)
        out.append(full + sel * mine)
    return out


def moe_share(w: Workload) -> Array:
    """The share of a model's blocks that are MoE blocks: (d - dense_layers) / (d moe_every), or
    1 / moe_every without dense-first blocks (the mean over the job's stages)."""
    k = w.dense_layers
    return jnp.where(k == 0.0, recip(w.moe_every), (w.depth - k) * recip(w.depth * w.moe_every))


def iteration_traffic(
    strategy: str,
    c: Candidates,
    w: Workload,
    system: System,
    profile,
    network: str = TWO_TIER,
    moe: bool | Arch = False,
) -> IterationTraffic:
    """GB per GPU per iteration by type and link class, for every candidate (N,) (or broadcast).

    With m microbatches, L_s blocks per stage (`counts`) and the block's 14 layers
    (`kernels.blocks.block_layers`):

        TP, CP, EP  the block's collectives (`block_traffic`), with the forward ones that
                recomputation runs again (`recomputed_passes`), x m x L_s
        DP      the block's weights W (sum of its layers' `weight`) and gradients over `dp_group`,
                x L_s, as the candidate's ZeRO stage moves them (`stage_bytes`): stage 1, an
                allgather of W and a reduce-scatter of the gradients (at the profile's gradient
                width, fp32 under Megatron's default)
        PP      `pipeline_traffic` of the ln1 activation (the mean over GPUs)

    For an MoE model (`moe`: True or a `kernels.params.Arch`) the blocks mix dense and MoE blocks
    as the whole model does, a share (d - dense_layers) / (d moe_every) MoE (the mean over the
    job's stages; 1/moe_every without dense-first blocks, as `kernels.block_time.block_cost`), and
    expert weights are
    synchronized over the replicas that hold the same experts (`kernels.blocks.expert_group`).

    `strategy`, `profile`, `network` and `moe` are static; arguments as `kernels.iteration
    .evaluate_candidates`.
    """
    _check_network(network)
    c, w, system = prepare(c, w, system)
    arch = arch_of(moe)
    layers = block_layers(strategy, c, w, system, profile, arch._replace(moe=False))
    micro, blocks, v = counts(c, w)
    per_stage = micro * blocks
    group, local = data_parallel_group(strategy, c)

    grad = state_bytes(profile).grad / state_bytes(profile).weight  # gradient bytes per weight byte

    def stage_bytes(weight, sent, grp, loc) -> LinkBytes:
        """A block's data-parallel bytes per iteration under the candidate's ZeRO stage (the
        communication of `kernels.data_parallel.data_parallel_time`): 0, an allreduce of the gradients
        (reduce-scatter + allgather at gradient width); 1, a reduce-scatter of the gradients and an
        allgather of the 2-byte weights; 2, the reduce-scatter for every microbatch; 3, for every
        microbatch the weights allgathered forward and again backward and the reduce-scatter.
        `sent`: the weights' bytes a parameter allgather moves (`kernels.block_time.gathered`)."""
        ag_rounds, rs_rounds = zero_schedule(c.zero, micro)
        ag = collective_bytes(ALLGATHER, allgathered(c.zero, weight, sent, grad), grp, loc, network).scale(ag_rounds)
        return ag.plus(collective_bytes(REDUCESCATTER, weight * grad, grp, loc, network).scale(rs_rounds))

    def sync(layer_list) -> LinkBytes:
        out = stage_bytes(*parameter_bytes(layer_list, profile, expert=False), group, local)
        if any(x.expert for x in layer_list):
            e_group, e_local = expert_data_parallel_group(c, w, strategy, profile)
            out = out.plus(stage_bytes(*parameter_bytes(layer_list, profile, expert=True), e_group, e_local))
        return out

    tp, cp, ep = block_traffic(layers, network, recomputed_passes(layers, c, w, profile, strategy, blocks))
    dp = sync(layers)
    if arch.moe:
        sparse = block_layers(strategy, c, w, system, profile, arch)
        tp_s, cp_s, ep_s = block_traffic(sparse, network, recomputed_passes(sparse, c, w, profile, strategy, blocks))
        f = moe_share(w)
        tp, cp, ep, dp = (LinkBytes(*(d + f * (s - d) for d, s in zip(a, b)))
                          for a, b in ((tp, tp_s), (cp, cp_s), (ep, ep_s), (dp, sync(sparse))))
    tp, cp, ep = tp.scale(per_stage), cp.scale(per_stage), ep.scale(per_stage)
    dp = dp.scale(blocks)
    ln1 = next(x for x in layers if x.name == "ln1")
    pp = pipeline_traffic(ln1.activation, c, micro, v, network)
    parts = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "ep": ep}
    fields = {f"{t}_{k}": getattr(parts[t], k) for t in TYPES for k in LINKS}
    fields["forwarded"] = sum(p.forwarded for p in parts.values())
    return IterationTraffic(**fields)
