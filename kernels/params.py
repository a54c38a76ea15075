"""The array containers the kernels take and return.

All containers are NamedTuples, hence JAX pytrees: any field may be a scalar or an array, and fields
broadcast against each other. A table of N candidates is a `Candidates` of (N,) int64 arrays; a grid
of S systems is a `System` whose fields have shape (S, 1), and the result then has shape (S, N).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

Array = jnp.ndarray

#: The three tensor-parallel strategies of seed 001.
#: tp1d  - Megatron TP with sequence-parallel LayerNorm/dropout regions (paper "1D TP", Table I).
#: tp2d  - 2D TP = context parallel: features/heads over n1, sequence over n2 (Table II).
#: summa - 2D TP with SUMMA matmuls over an n2 x n1 grid with n_b panels (Table A2).
STRATEGIES = ("tp1d", "tp2d", "summa")


class Workload(NamedTuple):
    """Transformer shape and global batch (integers).

    Only `depth` identical blocks are modelled (no embeddings, head or loss), as in seed 001.
    """

    seq_len: Array  # l
    hidden: Array  # e
    heads: Array  # h
    depth: Array  # d
    ffn: Array  # f (4e for the seed-001 models)
    global_batch: Array  # B, samples per iteration
    vocab: Array = 0  # V, logit-layer width (the rail-only model's FLOPs; 0: no logit layer)
    experts: Array = 0  # E, experts of each MoE block (0: a dense model)
    moe_every: Array = 1  # every moe_every-th block is an MoE block
    moe_tokens: Array = 1.0  # expert tokens per token: top-k routing x capacity factor
    kv_heads: Array = 0  # key/value heads (grouped-query attention; 0: as many as heads)
    gated: Array = 0  # 1: gated MLP (SwiGLU: gate and up e -> f, down f -> e); 0: GELU
    causal: Array = 0  # 1: causal attention (fused attention skips the masked half)
    tied: Array = 1  # 1: the logit layer shares the embedding's weights; 0: its own V x e


class System(NamedTuple):
    """One GPU and its two-tier network (floats). Field meanings follow spec section 2.2."""

    matrix_flops: Array  # tensor-core peak, TFLOP/s (before compute_eff)
    vector_flops: Array  # vector peak, TFLOP/s (before compute_eff)
    hbm_bandwidth: Array  # GB/s
    hbm_capacity: Array  # GB
    nvlink_bandwidth: Array  # GB/s per GPU, one direction
    nvlink_eff: Array
    nvlink_latency: Array  # s
    ib_bandwidth: Array  # GB/s per NIC
    ib_eff: Array
    ib_latency: Array  # s
    nic_factor: Array  # NICs per GPU
    compute_eff: Array  # fraction of peak FLOP rate reached (0.8 in seed 001)
    flop_latency: Array  # s added to every layer's compute, each direction (20e-6)
    hbm_eff: Array  # fraction of HBM bandwidth reached (1.0 in seed 001)
    element_size: Array  # GB per tensor element (2e-9: fp16)
    mask_element_size: Array  # GB per dropout-mask element (1e-9)
    matmul_knee: Array = 0.0  # GEMM dimension at which a matmul reaches half of compute_eff (0: flat)
    matrix_flops_fp8: Array = 0.0  # tensor-core peak for FP8 matmuls, TFLOP/s (0: no FP8)


class Candidates(NamedTuple):
    """Parallel configurations (int64). One element per candidate.

    n1, n2      tensor-parallel degrees (tp1d: n1 = t, n2 = 1)
    n_p, n_d    pipeline and data-parallel degrees
    microbatch  microbatch size b
    nvs1, nvs2, nvs_p, nvs_d
                GPUs of each group that share one NVS domain (the paper's n_NVS1, n_NVS2, n_NVSp,
                n_NVSd; spec tau_1, tau_2, tau_p, tau_d)
    n_b         SUMMA panel count (ignored by the other strategies)
    interleave  model chunks per pipeline stage, v (interleaved 1F1B; 1 for the seed-001 model)
    recompute   activation recomputation: 0 none, 1 selective, 2 full (`RECOMPUTE`)
    seq_par     1: sequence parallelism on the tensor-parallel group (LayerNorm and dropout regions
                sharded over n1, reduce-scatter + allgather); 0: off (replicated regions, allreduce)
    precision   0: bf16 matmuls; 1: FP8 matmuls in the transformer blocks' linears (Transformer
                Engine: the system's FP8 rate, FP8 copies of their inputs kept for backward)
    """

    n1: Array
    n2: Array
    n_p: Array
    n_d: Array
    microbatch: Array
    nvs1: Array
    nvs2: Array
    nvs_p: Array
    nvs_d: Array
    n_b: Array
    interleave: Array = 1
    recompute: Array = 1
    seq_par: Array = 1
    precision: Array = 0


#: Activation recomputation modes, by their code in `Candidates.recompute` (Korthikanti et al. 2022):
#: none stores every activation; selective recomputes the attention core (its score matrices are
#: never stored); full stores only each block's input and recomputes the whole forward in backward.
RECOMPUTE = ("none", "selective", "full")
NO_RECOMPUTE, SELECTIVE, FULL = 0, 1, 2

#: Matmul precisions, by their code in `Candidates.precision`.
PRECISIONS = ("bf16", "fp8")


class Profile(NamedTuple):
    """Switches that select the reference code's quirks (spec section 11). Static (hashable).

    ln2d_feature_shard_from_seq_len
        SUMMA LayerNorm shards the feature dimension as floor(l/n1) instead of floor(e/n1) (bug 1).
        It scales that layer's FLOPs, traffic, weights, activations and the SUMMA pipeline message.
    pipeline_ib_links_free
        When 1 < nvs_p < n_p, the pipeline stage boundaries that cross InfiniBand cost nothing
        (bug 2: timed as a 1-GPU transfer). Off: they cost an InfiniBand point-to-point.
    allreduce_doubled_only_across_tiers
        The allreduce costs twice an allgather only when its group spans NVS and InfiniBand; inside
        one domain or all on InfiniBand it costs one allgather (bug 3). Off: allreduce =
        reduce-scatter + allgather on every tier, latencies included.
    reference_bias_sharding
        Bias layers after row-parallel linears use the reference's shapes: 1D biases act on the
        whole (l, e) tensor, tp2d's fc2 bias on the sequence shard and its out-projection bias on the
        feature shard (bug 5). Off: both act on the sequence shard the reduce-scatter leaves,
        floor(floor(l/n2)/n1) x e, in tp1d and tp2d alike (so tp2d with n2 = 1 is exactly tp1d).

    The mechanisms of a Megatron training run (all off in `lbnl`, which is seed 001's model):

    megatron
        The block as Megatron-LM runs it (`kernels.blocks.megatron_block`): no dropout on the MLP
        intermediate, the sequence-parallel choice (`Candidates.seq_par`), activation
        recomputation (`Candidates.recompute`) and the activation memory of Korthikanti et al.
        2022 (34 s b h / t bytes per layer with sequence parallelism). Off: seed 001's 14 layers,
        its per-layer activation sums and selective recomputation only. SUMMA keeps its own block.
    embeddings
        The input embedding on the first pipeline stage and the logit layer with its
        cross-entropy on the last (weights V h / n1 each, tied), when the model has a vocabulary.
    flash_attention
        The attention core as one fused kernel that never stores its score matrices (recomputed
        in backward whatever the recompute mode). Off: scores, softmax and dropout materialized in
        HBM as Megatron-LM ran before fused attention; recompute none then stores them.
    memory_reserve
        GB per GPU the framework holds besides the model's tensors (CUDA context, communication
        buffers, allocator fragmentation), added to the memory that must fit.
    max_interleave
        The largest interleaving v the search enumerates (0: every admissible v; 1: plain 1F1B).
        A search option: the kernels ignore it.
    calibration
        The fitted efficiencies (`conf/calibration/NAME.yaml`, `dse calibrate`) that replace the
        system's compute_eff, matmul_knee and hbm_eff before the kernels run ("none": the
        system's own). Applied by `dse`; the kernels ignore it.
    precision
        The matmul precisions the search enumerates: "bf16", "fp8" or "any" (both). A search
        option; the candidate's `precision` column is what the kernels read.
    """

    ln2d_feature_shard_from_seq_len: bool = False
    pipeline_ib_links_free: bool = False
    allreduce_doubled_only_across_tiers: bool = False
    reference_bias_sharding: bool = False
    megatron: bool = True
    embeddings: bool = True
    flash_attention: bool = True
    memory_reserve: float = 0.0
    max_interleave: int = 0
    calibration: str = "none"
    precision: str = "bf16"


class RailOnlyProfile(NamedTuple):
    """The iteration model of the rail-only papers instead of seed 001's (seed 000 Eq. 2-7):
    Megatron PTD-P (strategy tp1d) with interleaving, microbatch compute from FLOPs with the
    attention slowdown `gamma`, `recompute` none | selective | full (`kernels.railonly`). Static.

    `compute_eff` scales the GPUs' peak FLOP rate; the papers' model uses the peak (False).
    `max_interleave` caps the interleaving the search enumerates (0: every admissible v; 1: plain
    1F1B, as in the papers' HB-domain studies).
    """

    recompute: str = "selective"
    gamma: float = 2.5
    compute_eff: bool = False
    max_interleave: int = 0


#: The switches that reproduce the seed-001 reference code's quirks (true in `lbnl`).
REFERENCE_QUIRKS = ("ln2d_feature_shard_from_seq_len", "pipeline_ib_links_free",
                    "allreduce_doubled_only_across_tiers", "reference_bias_sharding")

#: Named profiles. `lbnl` reproduces the seed-001 reference code and its stored results exactly;
#: `default` is the corrected model; `railonly` is the iteration model of the rail-only papers.
PROFILES = {
    "lbnl": Profile(
        ln2d_feature_shard_from_seq_len=True,
        pipeline_ib_links_free=True,
        allreduce_doubled_only_across_tiers=True,
        reference_bias_sharding=True,
        megatron=False,
        embeddings=False,
    ),
    "default": Profile(memory_reserve=4.0, calibration="korthikanti2022"),
    "railonly": RailOnlyProfile(),
}


class Metrics(NamedTuple):
    """Per-candidate results. Times in s per iteration, memory in GB per GPU.

    The seven time components add up to `iteration_time`; the five memory components add up to
    `memory` (of the busiest pipeline stage: the first, or the last when its logit layer weighs more).
    """

    iteration_time: Array
    throughput: Array  # samples / s
    memory: Array
    feasible: Array  # memory <= hbm_capacity
    t_compute: Array  # compute, including the per-layer FLOP latency
    t_memory: Array  # exposed HBM time (roofline excess of memory over compute)
    t_tp_comm: Array  # tensor-parallel collectives (SUMMA: exposed part)
    t_dp_comm: Array  # data-parallel weight allgather + gradient reduce-scatter, exposed part
    t_pp_comm: Array  # pipeline point-to-point
    t_bubble: Array  # 1F1B pipeline bubble
    t_optimizer: Array  # the optimizer step after the last backward (HBM-bound; Megatron's block only)
    mem_weights: Array
    mem_grads: Array
    mem_optimizer: Array
    mem_activations: Array
    mem_reserved: Array  # the framework's allowance (profile memory_reserve)
    flops_per_gpu: Array  # TFLOP per GPU per iteration
