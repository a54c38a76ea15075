"""The GPU groups and shards of a block's data and experts: the data-parallel group, Megatron-core's
expert layout folded over a pipeline stage (expert tensor parallelism, the expert-parallel group and
its domain share, the expert-data-parallel group), the token shard each GPU routes, the local
experts' grouped GEMM, their recompute modules, DeepSeek-V3's node-limited routing share and what
Megatron-core's token dispatchers exchange and reorder.
`kernels.blocks.moe_block` builds the MoE block from them (names re-exported there).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.special import gammaln

from kernels import layers as L
from kernels.numerics import as_float, fdiv, recip
from kernels.params import Candidates, Profile, Workload
from kernels.roofline import narrowed


def expert_tp_group(strategy: str, c: Candidates, profile: Profile | None = None):
    """(etp, GPUs of it per domain): the expert tensor-parallel group, over which each expert's
    weights are split. Megatron-core's default and SUMMA's grid: the tensor-parallel group (n1,
    nvs1); with `Profile.expert_tp` off (tp1d, tp2d): 1, whole experts on every GPU."""
    if strategy == "summa" or profile is None or profile.expert_tp:
        return as_float(c.n1), as_float(c.nvs1)
    one = jnp.ones_like(as_float(c.n1))
    return one, one


def _stage_room(strategy: str, c: Candidates, profile: Profile | None):
    """(GPUs of a stage's tensor x context x data ranks in one domain, nvs1 nvs2 nvs_d; of them the
    expert tensor-parallel group's, g = gcd(etp's GPUs in the domain, that room)), int64."""
    _, etp_local = expert_tp_group(strategy, c, profile)
    room = (c.nvs1 * c.nvs2 * c.nvs_d).astype(jnp.int64)
    return room, jnp.gcd(etp_local.astype(jnp.int64), room)


def expert_group(c: Candidates, w: Workload, strategy: str = "tp1d", profile: Profile | None = None):
    """(n_e, x_e): the expert-parallel group of n_e = ep GPUs (the candidate's `ep`, which divides E)
    and x_e of them inside one HB domain.

    tp1d and tp2d fold the expert layers over the GPUs of one pipeline stage as Megatron-core does:
    the stage's n1 n2 n_d GPUs (tensor, context or sequence, data) are regrouped as etp x ep x
    (expert data parallelism), etp fastest (`expert_tp_group`), so ep divides n1 n2 n_d / etp. Of
    the nvs1 nvs2 nvs_d GPUs a domain holds of them, the etp group keeps g = gcd(etp, nvs1 nvs2
    nvs_d) and the expert-parallel group x_e = gcd(ep, nvs1 nvs2 nvs_d / g) (consecutive ranks
    fill a domain, `_stage_room`). With etp = n1 inside a domain that is gcd(ep, nvs2 nvs_d).
    SUMMA's experts are sharded over its grid and spread over data-parallel replicas: x_e =
    gcd(ep, nvs_d)."""
    n_e = c.ep.astype(jnp.int64)
    if strategy == "summa":
        x_e = jnp.gcd(n_e, c.nvs_d.astype(jnp.int64))
    else:
        room, g = _stage_room(strategy, c, profile)
        x_e = jnp.gcd(n_e, room // g)
    return n_e.astype(jnp.float64), x_e.astype(jnp.float64)


def data_parallel_group(strategy: str, c: Candidates):
    """(GPUs, GPUs per domain) of the data-parallel weight allgather and gradient reduce-scatter,
    and the optimizer's shards: n_d, nvs_d; tp2d adds the n2 replicas of its weights (spec 5.2),
    tp1d the cp = n2 replicas of Megatron's context parallelism (its gradients are reduced over
    data x context parallelism); n2 = 1 leaves n_d, nvs_d."""
    if strategy in ("tp1d", "tp2d"):
        return c.n_d * c.n2, c.nvs_d * c.nvs2
    return c.n_d, c.nvs_d


def expert_data_parallel_group(c: Candidates, w: Workload, strategy: str = "tp1d", profile: Profile | None = None):
    """(GPUs, GPUs per domain) over which an expert's weights are synchronized: the stage's GPUs
    that hold the same expert shard. tp1d, tp2d: n1 n2 n_d / (etp ep) of them, (nvs1 nvs2 nvs_d) /
    (etp's and x_e's GPUs in the domain) per domain (`expert_group`); with etp = n1 that is the
    data-parallel group of the strategy divided by ep. SUMMA: n_d / ep, nvs_d / x_e."""
    n_e, x_e = expert_group(c, w, strategy, profile)
    if strategy == "summa":
        group, local = data_parallel_group(strategy, c)
        return group * recip(n_e), local * recip(x_e)
    etp, _ = expert_tp_group(strategy, c, profile)
    room, g = _stage_room(strategy, c, profile)
    return as_float(c.n1 * c.n2 * c.n_d) * recip(etp * n_e), as_float(room) * recip(as_float(g) * x_e)


def expert_shard(strategy: str, c: Candidates, w: Workload):
    """(rows, width): the token shard of one microbatch sample that one GPU routes, dispatches and
    gets back in an MoE block. tp1d and tp2d: the sequence-parallel split of its sequence shard,
    floor(Lambda2 / n1) rows (Lambda2 = floor(l / n2): tp2d's sequence shard, tp1d's context-parallel
    one, all l at cp = 1) of all e features; summa: its grid block, floor(l / n2) rows of
    floor(e / n1) features."""
    if strategy == "summa":
        return fdiv(w.seq_len, c.n2), fdiv(w.hidden, c.n1)
    return fdiv(fdiv(w.seq_len, c.n2), c.n1), as_float(w.hidden)


def expert_workload(w: Workload, experts=1.0) -> Workload:
    """The workload whose dense MLP is `experts` experts side by side: width experts x expert_ffn
    (expert_ffn 0: ffn). DeepSeek's shared experts are one MLP of that width."""
    width = jnp.where(w.expert_ffn > 0.0, w.expert_ffn, w.ffn)
    return w._replace(ffn=width * experts)


def _local_experts(x: L.Layer, per_gpu) -> L.Layer:
    """One expert MLP layer as the GPU's `per_gpu` local experts run it (a grouped GEMM): their
    weights, which every microbatch reads once forward and twice backward (the weights, quantized
    where their matmuls are, and the weight gradient they accumulate into), and the
    weight-gradient GEMM reducing over one expert's tokens, the routed tokens / per_gpu under
    uniform routing."""
    more = (per_gpu - 1.0) * x.weight
    read = more if x.fp8 is None else more * (1.0 - narrowed(x.fp8))
    dims_b = None if x.gemm_dims_b is None else (x.gemm_dims_b[0], x.gemm_dims_b[1] * recip(per_gpu))
    return x._replace(weight=x.weight * per_gpu, expert=True, traffic_f=x.traffic_f + read,
                      traffic_b=x.traffic_b + read + more, gemm_dims_b=dims_b)


def _expert_modules(layers: tuple[L.Layer, ...]) -> tuple[L.Layer, ...]:
    """The expert MLP's layers tagged with Megatron-core's recompute modules: the activation
    function is moe_act, whose recomputation keeps its input and frees its output (fc2's stored
    input); the rest are moe (not modelled as recomputable)."""
    fc2 = next((x for x in layers if x.name == "fc2"), None)
    return tuple(x._replace(module="moe_act", frees=fc2.activation) if x.name == "act1" and fc2 is not None
                 else x._replace(module="moe", frees=None) for x in layers)


#: The MLP's output dropout and residual add: an MoE block runs it once on its tokens, after the combine.
OUTPUT_DROPOUT = "dpr2"


def node_limited_share(profile: Profile, w: Workload, n_e, x_e):
    """`Profile.ep_node_limit` M (DeepSeek-V3's node-limited routing, technical report section
    2.1.2): each token's k = moe_tokens routed copies go to at most m = min(M, k, y) of the
    expert group's y = n_e / x_e domains, and its dispatch sends it once per destination domain.
    Under balanced routing each domain is one of a token's m with probability m / y, so of its k
    (y - 1) / y copies bound for other domains m (y - 1) / y cross: the share m / k
    (`Collective.cross`). 0: every copy sent to its GPU, share 1."""
    if not profile.ep_node_limit:
        return 1.0
    k = jnp.maximum(as_float(w.moe_tokens), 1.0)
    m = jnp.minimum(jnp.minimum(float(profile.ep_node_limit), k), as_float(n_e) * recip(as_float(x_e)))
    return jnp.minimum(m * recip(k), 1.0)


#: `Profile.moe_dispatcher` values: Megatron-core's token dispatchers.
ALLTOALL_DISPATCHER, DEEPEP, HYBRIDEP = "alltoall", "deepep", "hybridep"
MOE_DISPATCHERS = (ALLTOALL_DISPATCHER, DEEPEP, HYBRIDEP)


def unhit_share(experts, held, k):
    """C(E - g, k) / C(E, k): the probability that a token's k experts, drawn uniformly without
    replacement from E (balanced routing), miss a given g of them; 0 where E - g < k (every token
    hits them). Gamma functions, so that k (top-k x capacity factor) may be fractional."""
    e, g, k = as_float(experts), as_float(held), as_float(k)
    rest = e - g - k + 1.0
    safe = jnp.maximum(rest, 1.0)
    ratio = jnp.exp(gammaln(e - g + 1.0) + gammaln(e - k + 1.0) - gammaln(safe) - gammaln(e + 1.0))
    return jnp.where(rest > 0.0, ratio, 0.0)


def _reached(w: Workload, groups):
    """(k, the mean count of `groups` equal groups of the E experts that a token's k routed copies reach):
    groups (1 - C(E - E/groups, k) / C(E, k)) under balanced routing (`unhit_share`)."""
    k = jnp.maximum(as_float(w.moe_tokens), 1.0)
    g = as_float(groups)
    return k, g * (1.0 - unhit_share(w.experts, as_float(w.experts) * recip(g), k))


def dispatch_share(profile: Profile, w: Workload, n_e):
    """The share of a block's k routed copies per token that its all-to-all carries: 1 under Megatron's
    alltoall dispatcher, which sends every copy (`moe_utils.permute` ahead of the exchange); under the
    fused dispatchers (DeepEP's `fused_dispatch`, HybridEP's `dispatch_with_permute`) each token goes
    once to each GPU holding at least one of its experts, n_e (1 - C(E - E/n_e, k) / C(E, k)) GPUs of
    the group on average under balanced routing, and is expanded to its copies there: the share d / k.
    One expert a GPU: 1."""
    if profile.moe_dispatcher == ALLTOALL_DISPATCHER:
        return 1.0
    k, gpus = _reached(w, n_e)
    return jnp.clip(gpus * recip(k), recip(k), 1.0)


def crossing_share(w: Workload, n_e, x_e):
    """The share of a fused dispatcher's inter-domain sends that cross the NICs (`Collective.cross`): DeepEP's
    and HybridEP's exchanges send a token once to each other domain holding one of its experts and forward it
    to that domain's GPUs over NVLink, (y - 1)(1 - C(E - E/y, k) / C(E, k)) domains where the per-GPU copies
    reach (n_e - x_e)(1 - C(E - E/n_e, k) / C(E, k)) GPUs of other domains, y = n_e / x_e domains of x_e GPUs.
    One domain: 1 (nothing crosses)."""
    n, x = as_float(n_e), as_float(x_e)
    y = n * recip(x)
    _, domains = _reached(w, y)
    _, gpus = _reached(w, n)
    other_domains, other_gpus = domains * (y - 1.0) * recip(y), gpus * (n - x) * recip(n)
    return jnp.where(other_gpus > 0.0, jnp.clip(other_domains * recip(other_gpus), 0.0, 1.0), 1.0)


def exchange_shares(profile: Profile, w: Workload, n_e, x_e):
    """(the share of the routed copies a block's all-to-all carries, the share of its inter-domain sends that
    cross): every copy and DeepSeek's node-limited share (`node_limited_share`) under the alltoall dispatcher;
    under the fused ones `dispatch_share`, and the smaller of `crossing_share` and the node-limited share of
    the deduplicated copies."""
    share = dispatch_share(profile, w, n_e)
    node = node_limited_share(profile, w, n_e, x_e)
    if profile.moe_dispatcher == ALLTOALL_DISPATCHER:
        return share, node
    node = 1.0 if isinstance(node, float) else jnp.minimum(node * recip(share), 1.0)
    return share, jnp.minimum(node, crossing_share(w, n_e, x_e))


def regroup_passes(profile: Profile, per_gpu):
    """(before the experts, after them): the local reorderings of the routed copies a dispatcher runs
    (`layers.regroup` each). alltoall: `permute` into per-destination order before the exchange and,
    with more than one local expert, `sort_chunks_by_idxs` into per-expert order after it (a transpose
    under token drop), and their inverses around the combine: 2 and 2 (1 and 1 with one expert a
    GPU). DeepEP: the exchange reads the tokens in place into a buffer per source GPU, then `permute`
    expands them into expert order, and `unpermute` before the combine: 1 and 1. HybridEP: the same
    data path, its expansion from the per-source chunks into expert order (`dense_chunk_layout`)
    fused into the dispatch call or not, the same bytes: 1 and 1."""
    if profile.moe_dispatcher in (DEEPEP, HYBRIDEP):
        return 1.0, 1.0
    passes = 1.0 + jnp.where(as_float(per_gpu) > 1.0, 1.0, 0.0)
    return passes, passes
