"""What one pipeline stage sends and holds: its boundary transfers, its blocks, their recomputation and their activations."""

from __future__ import annotations

import jax.numpy as jnp

from kernels.attention import head_dim_of, kv_heads_of
from kernels.blocks import region_rows
from kernels.collectives import P2P, TWO_TIER, collective_time
from kernels.numerics import as_float, fdiv, recip
from kernels.params import Arch, Array, Candidates, Profile, System, Workload
from kernels.block_time import BlockCost, block_cost, dense_and_moe, mix


def pipeline_message(blk: BlockCost, c: Candidates, profile: Profile) -> Array:
    """GB one GPU sends across a stage boundary per microbatch: seed 001's ln1 activation; under
    Megatron's block, the activation's 1/n1 share (the sequence shard under sequence parallelism;
    without it Megatron's scatter-gather split, each tensor-parallel rank sending 1/n1 of the
    replicated tensor and the receivers allgathering it inside their domain, left uncharged)."""
    if not profile.megatron:
        return blk.pipeline_message
    sp = as_float(c.seq_par)
    return blk.pipeline_message * (sp + (1.0 - sp) * recip(c.n1))


def pipeline_p2p(
    message: Array, c: Candidates, system: System, profile: Profile, network: str = TWO_TIER,
    slowest: bool = False,
) -> Array:
    """Mean time of one stage-boundary transfer (spec 5.3); `slowest` (static): the time of the
    slowest boundary instead, the InfiniBand one when the pipeline spans domains (seed 000 Eq. 6).

    Of the n_p - 1 links, n_p/nvs_p - 1 cross InfiniBand and the rest stay inside a domain. With
    nvs_p = 1 all links are InfiniBand point-to-points. The reference times the InfiniBand links as
    a 1-GPU collective, i.e. free (profile switch `pipeline_ib_links_free`).
    """
    one = jnp.ones_like(c.n_p)
    two = 2.0 * one
    ib = collective_time(P2P, message, two, one, system, profile, network)
    nvs = collective_time(P2P, message, two, two, system, profile, network)
    links = c.n_p - 1.0
    slow = fdiv(c.n_p, c.nvs_p) - 1.0
    slow_cost = 0.0 if profile.pipeline_ib_links_free else ib
    if slowest:
        mixed = jnp.where(slow > 0.0, slow_cost, nvs)
    else:
        per_link = recip(jnp.maximum(links, 1.0))
        mixed = (links - slow) * per_link * nvs + slow * per_link * slow_cost
    p = jnp.where(c.nvs_p == 1, ib, mixed)
    return jnp.where(c.n_p == 1, 0.0, p)


def split_slots(c: Candidates, w: Workload) -> tuple[Array, Array]:
    """(first, last): the blocks' places the embedding and the loss take on the first and last
    pipeline stage (Megatron's account_for_embedding_in_pipeline_split and
    account_for_loss_in_pipeline_split: `Workload.split_embedding`, `split_loss`); 0 with one stage."""
    multi = jnp.where(c.n_p > 1.0, 1.0, 0.0)
    return as_float(w.split_embedding) * multi, as_float(w.split_loss) * multi


def stage_blocks(c: Candidates, w: Workload, profile: Profile, split: bool = False) -> Array:
    """Blocks on the busiest pipeline stage: floor(d/n_p) for seed 001's model (n_p divides d),
    ceil(d/n_p) for Megatron's, whose first stages take the remainder when n_p does not divide d.
    Where the embedding and the loss count as layers (`split_slots`), Megatron splits d + 2 layers
    and a middle stage holds ceil((d + 2)/n_p) blocks, the end stages one fewer each (`split`,
    static: the model has the flags)."""
    if not profile.megatron:
        return fdiv(w.depth, c.n_p)
    layers = w.depth
    if split:
        first, last = split_slots(c, w)
        layers = layers + first + last
    return fdiv(layers + c.n_p - 1.0, c.n_p)


def recompute_share(blocks: Array | None, c: Candidates, profile: Profile):
    """The share of a stage's `blocks` that full recomputation recomputes: 1 (also where the caller
    gives no stage), or under `Profile.recompute_layers` N (Megatron's recompute_method block)
    min(N, b) / b of each model chunk's b = blocks / v blocks; the others store every activation as
    without recomputation."""
    if profile.recompute_layers <= 0 or blocks is None:
        return 1.0
    chunk = jnp.maximum(as_float(blocks) * recip(c.interleave), 1e-30)
    return jnp.minimum(as_float(profile.recompute_layers), chunk) / chunk


def full_share(blocks: Array | None, c: Candidates, profile: Profile):
    """The share of a stage's `blocks` whose whole forward runs again in backward: `recompute_share`
    under full recomputation, 0 under selective and none (the one reading of the mode that the time,
    the host's issue time and the bytes sent, `kernels.traffic.recomputed_passes`, share)."""
    return jnp.where(c.recompute == 2.0, recompute_share(blocks, c, profile), 0.0)


#: Of a dense block's forward collectives outside the attention core, the share torchtitan's operator-level
#: SAC runs again in backward: the all-gathers, half of them (it keeps the reduce-scatters' outputs).
OP_SAC_COMM_SHARE = 0.5


def recomputed(blk: BlockCost, c: Candidates, profile: Profile, sac: Array | None = None,
               blocks: Array | None = None):
    """(comp, mem, comm, flops, ep_comm) of one block that recomputation adds to its backward (ep_comm:
    the all-to-alls of comm), on average over a stage of `blocks` (`recompute_share` of them
    recomputed under full): the whole forward under full recomputation, the selective layers'
    forward under selective, nothing under none. Seed 001's model (profile `megatron` off) has its
    recomputation inside its layers.
    `sac` (`op_sac_share`, framework fsdp2): selective is torchtitan's operator-level SAC on a dense
    block (where sac >= 0), which keeps the attention kernel's output and every second matmul's and
    recomputes the rest of the forward: the share `sac` of the forward outside the attention core,
    and of its tensor-parallel collectives the all-gathers (half; the reduce-scatters are kept)."""
    zero = jnp.zeros_like(blk.t_f)
    if not profile.megatron:
        return zero, zero, zero, zero, zero
    sel = c.recompute == 1.0
    share = full_share(blocks, c, profile)  # 0 but under full recomputation

    def pick(f, s):  # f: the whole forward's, s: the selective layers'
        return share * f + jnp.where(sel, s, zero)

    s_comp, s_mem, s_comm, s_flops, s_ep = blk.sel_comp, blk.sel_mem, blk.sel_comm, blk.sel_flops, blk.sel_ep_comm
    if sac is not None:
        op = sac >= 0.0
        s_comp = jnp.where(op, sac * (blk.f_comp - blk.sel_comp), s_comp)
        s_mem = jnp.where(op, sac * (blk.f_mem - blk.sel_mem), s_mem)
        s_comm = jnp.where(op, OP_SAC_COMM_SHARE * (blk.f_comm - blk.sel_comm), s_comm)
        s_flops = jnp.where(op, sac * (blk.f_flops - blk.sel_flops), s_flops)
        s_ep = jnp.where(op, zero, s_ep)
    return (pick(blk.f_comp, s_comp), pick(blk.f_mem, s_mem), pick(blk.f_comm, s_comm),
            pick(blk.f_flops, s_flops), pick(blk.f_ep_comm, s_ep))


#: The share of an MoE block's host issue time that is its forward's (what full recomputation issues again):
#: the backward issues two kernels (the input's and the weight's gradient) for most forward ones.
HOST_FORWARD_SHARE = 1.0 / 3.0


def host_wait(blk: BlockCost, blocks: Array, gpu: Array, c: Candidates, profile: Profile) -> Array:
    """The time one microbatch's `blocks` of a stage (`blk` their average) wait for the host beyond their `gpu`
    time (forward, backward and recomputation): max(host - gpu, 0), the host issuing each block in
    `blk.host` (`Profile.moe_dropless`) and the forward again under full recomputation (`HOST_FORWARD_SHARE`
    of it, on the `recompute_share` of the blocks).

    Dropless routing (Megatron-core's default, no capacity factor) leaves the all-to-all's split sizes and the
    grouped GEMMs' shapes on the device; the dispatcher copies the per-expert token counts to the host each
    block (a device-to-host synchronization), so the host cannot issue kernels ahead across blocks, and the
    varying shapes keep the experts out of CUDA graphs. Token drop padded to capacity has static shapes and
    no synchronization: the block is graph-captured whole (`block_time.dense_and_moe`: no host time)."""
    host = blocks * blk.host * (1.0 + HOST_FORWARD_SHARE * full_share(blocks, c, profile))  # 0 off Megatron's block
    return jnp.maximum(host - gpu, 0.0)


def op_sac(profile: Profile, strategy: str, w: Workload) -> Array | None:
    """`op_sac_share` where selective recomputation is torchtitan's operator-level SAC (`Profile.op_sac`,
    strategy tp1d), else None: the one switch both its memory (`block_activation`) and its
    recomputation (`recomputed`) read."""
    return op_sac_share(w) if profile.op_sac and strategy == "tp1d" else None


def _sac_widths(w: Workload):
    """(q, kv, f, gated) of a dense block: the queries' and keys' (values') features, the MLP's
    width and 1 for a gated MLP."""
    head = head_dim_of(w)
    return (as_float(w.heads) * head, kv_heads_of(w) * head, as_float(w.ffn),
            jnp.where(as_float(w.gated) > 0.0, 1.0, 0.0))


def op_sac_share(w: Workload) -> Array:
    """The share of a dense block's matmul FLOPs that torchtitan's operator-level SAC runs again
    (`op_sac_activation`: of wq, wk, wv, wo, w1, w3, w2 it keeps the first, third ... outputs):
    wk, wo and w3 (fc2 ungated), per token e kv + q e + e f of the block's e q + 2 e kv + q e +
    (1 + gated) e f + f e; -1 for an MoE model (Megatron's selective reading)."""
    q, kv, f, gated = _sac_widths(w)
    share = (kv + q + f) * recip(2.0 * q + 2.0 * kv + (2.0 + gated) * f)
    return jnp.where(w.experts > 0.0, -1.0, share)


def block_activation(blk: BlockCost, c: Candidates, w: Workload, system: System, profile: Profile,
                     strategy: str, blocks: Array | None = None) -> tuple[Array, Array]:
    """(stored per block and microbatch in flight, working set of the block being recomputed), GB.

    None stores every layer's activations, selective all but the recomputed layers', full only the
    block's input (its sequence shard under sequence parallelism, b R e elements; SUMMA's n2 x n1
    block of it) while the block under recomputation holds all of its own once; full over a stage of
    `blocks` of which `recompute_share` are recomputed, the mean of the two over the stage.
    """
    zero = jnp.zeros_like(blk.activation)
    if not profile.megatron:
        return blk.activation, zero
    full = c.recompute == 2.0
    sel = c.recompute == 1.0
    selective = blk.activation - blk.sel_activation
    sac = op_sac(profile, strategy, w)
    if sac is not None:  # a dense block under torchtitan's operator-level SAC
        selective = jnp.where(sac >= 0.0, op_sac_activation(c, w, system, strategy), selective)
    stored = jnp.where(sel, selective, blk.activation)
    lam, rows, _ = region_rows(c, w, strategy)
    if strategy == "summa":
        block_input = as_float(c.microbatch) * lam * fdiv(w.hidden, c.n1)
    else:
        block_input = as_float(c.microbatch) * rows * as_float(w.hidden)
    block_input = block_input * system.element_size
    share = recompute_share(blocks, c, profile)
    partial = share * block_input + (1.0 - share) * blk.activation
    return jnp.where(full, partial, stored), jnp.where(full, blk.activation, zero)


def op_sac_activation(c: Candidates, w: Workload, system: System, strategy: str) -> Array:
    """GB a dense block stores per microbatch under torchtitan's selective activation checkpointing
    by operator ("op"), its `recompute = selective`: the block's input, and the outputs of the
    operators it saves, which are the attention kernel's and, of the block's matmuls in order,
    the first, third, fifth ... (every second one is recomputed), and under tensor parallelism the
    reduce-scatters' (torchtitan, torchtitan/distributed/activation_checkpoint.py: the save list
    of compute-intensive and communication ops, `mm_count % 2 == 0` recomputed). Its Llama block's
    matmuls are wq, wk, wv, wo, then w1, w3, w2 (gated) or fc1, fc2: the saved outputs are q, v, w1
    (fc1) and, gated, w2's (the row-parallel partial sums, e wide, before their reduce-scatter).
    Per token of a microbatch: the sequence shard's e, then over the context shard's rows
    (q + kv + q + f) / n1 for q, v, the attention output (its heads' q features) and w1, e for w2
    when gated, and 2 e on the sequence shard for the two reduce-scatters when n1 > 1 under
    sequence parallelism."""
    lam, rows, sp = region_rows(c, w, strategy)
    b, e, n1 = as_float(c.microbatch), as_float(w.hidden), as_float(c.n1)
    q, kv, f, gated = _sac_widths(w)
    per_row = (q + kv + q + f) * recip(n1) + gated * e
    scatter = jnp.where(n1 > 1.0, 2.0 * sp, 0.0)  # without sequence parallelism they are all-reduces, not kept
    return b * (rows * e * (1.0 + scatter) + lam * per_row) * system.element_size


def stage_mixes(c: Candidates, w: Workload, split: bool = False) -> list[tuple[Array, Array]]:
    """(blocks, MoE share) of the pipeline stages that can set the pace of an MoE model.

    The d blocks are split in order over n_p stages, the first r = d mod n_p of them one block
    deeper (Megatron's uneven stages; r = 0 when n_p divides d): stage s holds
    n_s = floor(d/n_p) + [s < r] blocks from block a_s = s floor(d/n_p) + min(s, r). The first k =
    dense_layers blocks are dense, and every moe_every-th block after them is MoE, so stage s holds
    j_s = clip(k - a_s, 0, n_s) dense-first blocks and an MoE share f_s = (n_s - j_s) / (n_s
    moe_every) of its blocks (exact for whole alternations, which the enumeration keeps when
    moe_every > 1; k > 0 needs moe_every = 1).

    Stages before the one holding block k (call it s_1) are all dense-first and no deeper than
    stage 0; stages after s_1 are all MoE and no deeper than s_1 + 1. So the busiest stage is one of
    stage 0, s_1 and s_1 + 1 (when it exists), whichever way a dense and an MoE block compare;
    these three are returned, stage 0 first. With k = 0 every stage has the share 1/moe_every and
    stage 0 is the deepest (today's stage average).

    Where the embedding and the loss take blocks' places (`split`, static; `split_slots`: e and l
    places), the split is of d + e + l places, the embedding's first: the counts n_s are of places,
    the embedding's counted as dense-first blocks; `_busiest_end` takes the end stages' places off.
    """
    d, p, k = w.depth, c.n_p, w.dense_layers
    if split:
        first, last = split_slots(c, w)
        d, k = d + first + last, k + first
    lo = fdiv(d, p)
    r = d - lo * p
    hi = lo + jnp.where(r > 0.0, 1.0, 0.0)
    s1 = jnp.where(k < r * hi, fdiv(k, hi), r + fdiv(k - r * hi, lo))
    out = []
    for s in (jnp.zeros_like(s1), s1, jnp.minimum(s1 + 1.0, p - 1.0)):
        n = lo + jnp.where(s < r, 1.0, 0.0)
        j = jnp.clip(k - (s * lo + jnp.minimum(s, r)), 0.0, n)
        f = jnp.where(j == 0.0, recip(w.moe_every), (n - j) * recip(n * w.moe_every))
        out.append((n, f))
    return out


def stage_candidates(
    strategy: str, c: Candidates, w: Workload, system: System, profile: Profile, network: str, arch: Arch
) -> list[tuple[BlockCost, Array]]:
    """(average block, blocks) of each pipeline stage of an MoE model that can set the pace or hold
    the most memory (`stage_mixes`: stage 0, the stage holding the first MoE block, the one after
    it), stage 0 first."""
    dense, sparse = dense_and_moe(strategy, c, w, system, profile, network, arch)
    return [(mix(dense, sparse, f), n) for n, f in stage_mixes(c, w, arch.split)]


def stage_cost(
    strategy: str, c: Candidates, w: Workload, system: System, profile: Profile, network: str, arch: Arch,
    stages: list[tuple[BlockCost, Array]] | None = None,
) -> tuple[BlockCost, Array]:
    """(average block, blocks) of the pipeline stage that sets the pace: for a dense model every
    block and the deepest stage (`stage_blocks`); for an MoE model, of the candidate stages of
    `stage_mixes` the one whose blocks take longest, forward, backward and recomputation (stage 0
    on ties: for dense_layers = 0 exactly the stage average of `block_cost`). The iteration's
    memory is that of the candidate stage that holds the most (`kernels.iteration`), each counted
    with the first stage's microbatches in flight and the embedding and logit layers: an upper
    bound for a middle stage. `stages`: `stage_candidates`, when the caller has them."""
    if not arch.moe:
        return block_cost(strategy, c, w, system, profile, network, arch), stage_blocks(c, w, profile, arch.split)
    best = None
    for blk, n in stages or stage_candidates(strategy, c, w, system, profile, network, arch):
        extra = recomputed(blk, c, profile, blocks=n)
        gpu = n * (blk.t_f + blk.t_b + extra[0] + extra[1] + extra[2])
        t = gpu + host_wait(blk, n, gpu, c, profile)
        if best is None:
            best = (blk, n, t)
            continue
        more = t > best[2]
        best = (BlockCost(*(jnp.where(more, x, y) for x, y in zip(blk, best[0]))),
                jnp.where(more, n, best[1]), jnp.where(more, t, best[2]))
    return best[0], best[1]
