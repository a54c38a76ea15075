"""The array containers the kernels take and return.

All containers are NamedTuples, hence JAX pytrees: any field may be a scalar or an array, and fields
broadcast against each other. A table of N candidates is a `Candidates` of (N,) int64 arrays; a grid
of S systems is a `System` whose fields have shape (S, 1), and the result then has shape (S, N).
"""

from __future__ import annotations

import re
from typing import NamedTuple

import jax.numpy as jnp

from kernels.frameworks import FRAMEWORKS
from kernels.state import MIXED_PRECISION, OPTIMIZER_STATES, StateBytes, state_bytes  # noqa: F401 (re-exported)

Array = jnp.ndarray

#: The three tensor-parallel strategies of seed 001.
#: tp1d  - Megatron TP with sequence-parallel LayerNorm/dropout regions (paper "1D TP", Table I); under Megatron's
#:         block n2 is Megatron-LM's context parallelism cp (2 cp load-balanced chunks, K and V in a ring).
#: tp2d  - seed 001's 2D TP: heads over n1, contiguous sequence shards over n2, K and V all-gathered, not overlapped (Table II).
#: summa - 2D TP with SUMMA matmuls over an n2 x n1 grid with n_b panels (Table A2).
STRATEGIES = ("tp1d", "tp2d", "summa")


class Workload(NamedTuple):
    """Transformer shape and global batch (integers): the blocks' sizes (seed 001's `depth` identical blocks) and
    what today's models add (vocabulary, experts, attention variants, pipeline placement)."""

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
    head_dim: Array = 0  # width of each attention head, q (0: hidden / heads); heads x q need not be hidden
    gated: Array = 0  # 1: gated MLP (SwiGLU: gate and up e -> f, down f -> e); 0: GELU
    relu2: Array = 0  # 1: a squared-ReLU MLP (Nemotron): GELU's fused costs, its own under eager operators
    glu_clamp: Array = 0  # 1: the gated MLP's inputs clamped first (GPT-OSS; `kernels.blocks.mlp_activation`)
    causal: Array = 0  # 1: causal attention (fused attention skips the masked half)
    window: Array = 0  # keys a query of a windowed block sees, itself included (a sliding window; 0: none)
    window_share: Array = 0.0  # the share of the blocks with that window (`kernels.attention.causal`)
    tied: Array = 1  # 1: the logit layer shares the embedding's weights; 0: its own V x e
    shared_experts: Array = 0  # always-active experts of each MoE block, each an MLP of width expert_ffn
    expert_ffn: Array = 0  # intermediate size of each routed and shared expert (0: ffn)
    dense_layers: Array = 0  # the first blocks are dense (width ffn), the rest MoE (DeepSeek-V3: 3)
    q_lora_rank: Array = 0  # multi-head latent attention (`Arch.mla`): query latent width
    kv_lora_rank: Array = 0  # key/value latent width
    qk_rope_head_dim: Array = 0  # decoupled RoPE dimensions of each query and key head
    qk_nope_head_dim: Array = 0  # the other dimensions of each query and key head
    v_head_dim: Array = 0  # value dimensions of each head
    split_embedding: Array = 0  # the blocks' places the input embedding takes on the first pipeline stage (0 or 1)
    split_loss: Array = 0  # the places the logit layer and loss take on the last stage (a `dse.spec.layout` gives more)
    mtp: Array = 0  # MTP modules: their blocks are the last of `depth`, each a logit layer and loss more (DeepSeek-V3: 1)
    dropout: Array = 1.0  # 1: the blocks' dropouts keep 1-byte masks (probability > 0); 0: no dropout


class Arch(NamedTuple):
    """The static block shape of a model (hashable: a kernel argument known at trace time, as the strategy is).
    Only what changes the list of layers is here; every size is a `Workload` field.

    moe     the model has MoE blocks (`kernels.blocks.moe_block`)
    mla     multi-head latent attention (DeepSeek's projections, `kernels.blocks.megatron_block`)
    shared  its MoE blocks have shared experts (their MLP layers exist)
    split   the embedding or the loss takes a block's place in the pipeline split (`Workload.split_embedding`, ...)
    bias    the linears have biases (Megatron's add_bias_linear): their bias layers exist (false: none, no latency)
    """

    moe: bool = False
    mla: bool = False
    shared: bool = False
    split: bool = False
    bias: bool = True


def arch_of(moe) -> Arch:
    """An `Arch` from a kernel's `moe` argument: an Arch, or a bool (MoE or not, MHA, no shared experts, biases)."""
    return moe if isinstance(moe, Arch) else Arch(moe=bool(moe))


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
    matmul_knee: Array = 0.0  # GEMM length reaching half of compute_eff, in machine balances (`roofline.gemm_knee`)
    matrix_flops_fp8: Array = 0.0  # tensor-core peak for FP8 matmuls, TFLOP/s (0: no FP8)
    fp8_weight_copies: Array = 2.0  # FP8 copies Transformer Engine caches of each linear weight (`StateBytes`)
    fp8_eff: Array = 1.0  # FP8 matmuls' fraction of the FP8 rate relative to BF16's compute_eff (`roofline.fp8_speedup`)
    host_bandwidth: Array = 0.0  # GB/s per GPU, one direction, to host memory (PCIe, NVLink-C2C; 0: none modelled)
    matrix_flops_fp4: Array = 0.0  # dense NVFP4 tensor-core peak, TFLOP/s (0: no FP4); fp4_eff as fp8_eff
    fp4_eff: Array = 1.0
    host_moe_time: Array = 0.0  # s the host takes to issue one dropless MoE block, forward + backward (0: none)
    fp8_rowwise_eff: Array = 1.0  # FP8 matmuls scaled per row: their fraction of fp8_eff (`Profile.fp8_rowwise`)


class Candidates(NamedTuple):
    """Parallel configurations (int64). One element per candidate.

    n1, n2      tensor-parallel degrees; tp1d: n1 = t and n2 = cp, Megatron-LM's context-parallel degree (1 under
                seed 001's block and profile railonly); tp2d, summa: the second (sequence) dimension of the 2D grid
    n_p, n_d    pipeline and data-parallel degrees
    microbatch  microbatch size b
    nvs1, nvs2, nvs_p, nvs_d
                GPUs of each group that share one NVS domain (the paper's n_NVS1, n_NVS2, n_NVSp, n_NVSd; spec
                tau_1, tau_2, tau_p, tau_d); tp1d: nvs2 is the context-parallel group's (Megatron's rank order:
                tensor fastest, then context, data, pipeline)
    n_b         SUMMA panel count (ignored by the other strategies)
    interleave  model chunks per pipeline stage, v (interleaved 1F1B; 1 for the seed-001 model)
    recompute   activation recomputation: 0 none, 1 selective, 2 full (`RECOMPUTE`)
    seq_par     1: sequence parallelism on the tensor-parallel group (LayerNorm and dropout regions sharded over
                n1, reduce-scatter + allgather); 0: off (replicated regions, allreduce)
    precision   0: bf16 matmuls; 1: FP8, 2: NVFP4 matmuls in the transformer blocks' linears (Transformer Engine:
                the system's FP8 / FP4 rate, quantized inputs kept for backward)
    zero        sharding of the model state over the data-parallel group (`ZERO_STAGES`, Rajbhandari et al.
                2020): 0 none, 1 optimizer states (Megatron's distributed optimizer), 2 + gradients, 3 + parameters
    ep          expert-parallel degree of an MoE model: the experts are sharded over ep of the n_d data-parallel
                replicas (E / ep experts per GPU), their weights synchronized over the n_d / ep replicas holding
                the same experts; ep divides E and n_d (1: a dense model)
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
    zero: Array = 1
    ep: Array = 1


#: Activation recomputation modes, by their code in `Candidates.recompute` (Korthikanti et al. 2022):
#: none stores every activation; selective recomputes the attention core (its score matrices are
#: never stored); full stores only each block's input and recomputes the whole forward in backward.
RECOMPUTE = ("none", "selective", "full")
NO_RECOMPUTE, SELECTIVE, FULL = 0, 1, 2

#: Megatron-core's recompute modules the engine models (`Profile.recompute_modules`): the
#: layers each tags (`kernels.layers.Layer.module`). Megatron's moe (the whole MoE layer) and
#: shared_experts are not modelled.
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act")


def module_names(text) -> tuple[str, ...]:
    """The recompute modules of a list as users and recipes write it: joined by '+', ',' or ';'."""
    return tuple(m.strip() for m in re.split(r"[+,;]", str(text or "")) if m.strip())


def recompute_modules(profile) -> frozenset:
    """The modules `profile`'s selective mode recomputes (`Profile.recompute_modules`)."""
    return frozenset(module_names(profile.recompute_modules))


#: Matmul precisions, by their code in `Candidates.precision`.
PRECISIONS = ("bf16", "fp8", "nvfp4")
#: `Profile.precision` values: the precision codes searched ("any": bf16 and fp8, "all": the three).
PRECISION_SEARCHED = {"bf16": (0,), "fp8": (1,), "nvfp4": (2,), "any": (0, 1), "all": (0, 1, 2)}
NVFP4_BYTES = 0.5 + 1.0 / 16.0  # an NVFP4 value: 4-bit E2M1 and one E4M3 scale per 16 (the per-tensor one negligible)

#: ZeRO stages, by their code in `Candidates.zero` (Rajbhandari et al. 2020, "ZeRO", Fig. 1 and section 5): what
#: each data-parallel rank keeps only 1/N_d of.
ZERO_STAGES = ("none", "optimizer", "optimizer+gradients", "optimizer+gradients+parameters")

#: `Profile.zero` values: the stages the search enumerates; "auto": the profile's own (`explore.engine.space_options`).
ZERO_SEARCHED = {"0": (0,), "1": (1,), "2": (2,), "3": (3,), "any": (0, 1, 2, 3), "auto": ()}


class Profile(NamedTuple):
    """Switches that select the reference code's quirks (spec section 11). Static (hashable).

    ln2d_feature_shard_from_seq_len
        SUMMA LayerNorm shards the feature dimension as floor(l/n1) instead of floor(e/n1) (bug 1). It scales that
        layer's FLOPs, traffic, weights, activations and the SUMMA pipeline message.
    pipeline_ib_links_free
        When 1 < nvs_p < n_p, the pipeline stage boundaries that cross InfiniBand cost nothing (bug 2: timed as a
        1-GPU transfer). Off: they cost an InfiniBand point-to-point.
    allreduce_doubled_only_across_tiers
        The allreduce costs twice an allgather only when its group spans NVS and InfiniBand; inside one domain or all
        on InfiniBand it costs one allgather (bug 3). Off: allreduce = reduce-scatter + allgather on every tier,
        latencies included.
    reference_bias_sharding
        Bias layers after row-parallel linears use the reference's shapes: 1D biases act on the whole (l, e) tensor,
        tp2d's fc2 bias on the sequence shard and its out-projection bias on the feature shard (bug 5). Off: both act
        on the sequence shard the reduce-scatter leaves, floor(floor(l/n2)/n1) x e, in tp1d and tp2d alike (so tp2d
        with n2 = 1 is exactly tp1d).

    The mechanisms of a Megatron training run (all off in `lbnl`, which is seed 001's model):

    megatron
        The block as Megatron-LM runs it (`kernels.blocks.megatron_block`): no dropout on the MLP intermediate, the
        sequence-parallel choice (`Candidates.seq_par`), activation recomputation (`Candidates.recompute`) and the
        activation memory of Korthikanti et al. 2022 (34 s b h / t bytes per layer with sequence parallelism). Off:
        seed 001's 14 layers, its per-layer activation sums and selective recomputation only. SUMMA keeps its own.
    bias_fusion
        Megatron's block adds each bias in the elementwise kernel after its linear (bias-GELU / bias-SwiGLU and
        bias-dropout-add fusions, on in Megatron-LM's and NeMo's recipes; `kernels.blocks.fold_bias`). Off: each bias
        a pass of its own (seed 001's L3 layer), as Megatron-core runs without the fusions.
    embeddings
        The input embedding on the first stage and the logit layer with its cross-entropy on the last (weights V h /
        n1 each, tied), when the model has a vocabulary.
    flash_attention
        The attention core as one fused kernel that never stores its score matrices (recomputed in backward whatever
        the recompute mode). Off: scores, softmax and dropout materialized in HBM as Megatron-LM ran before fused
        attention; recompute none then stores them.
    memory_reserve
        GB per GPU the framework holds besides the model's tensors (CUDA context, communication buffers, allocator
        fragmentation), added to the memory that must fit.
    max_interleave
        The largest interleaving v the search enumerates (0: every admissible v; 1: plain 1F1B); search only.
    calibration
        The fitted efficiencies (`conf/calibration/NAME.yaml`, `dse calibrate`) that replace the system's own before
        the kernels run ("none": the system's own). Applied by `dse`; the kernels ignore it.
    precision
        The matmul precisions the search enumerates (`PRECISION_SEARCHED`). A search option.
    cp_comm
        How tp1d's context parallelism (n2 = cp > 1, Megatron's block) exchanges K and V: "p2p" (Megatron-LM /
        Transformer Engine's default): a ring of cp steps, each sending this GPU's K, V chunk to the next while
        attention runs on the current one, so the exchange overlaps the attention core and only its excess is exposed
        (backward: K, V and dK, dV); "allgather" (Llama 3, Dubey et al. 2024 section 3.3.2): K and V all-gathered over
        cp before attention, dK and dV reduce-scattered after it, not overlapped (tp2d's exchange).
    elementwise
        How the elementwise work between matmuls runs (`kernels.eager`): "fused" (one kernel per norm, activation and
        cast), "eager" (PyTorch's operators one kernel each, torchtitan without torch.compile: norms, activations,
        rotary embeddings and FP8 casts move several times the bytes), "eager_fused_norm" (the same with torchtitan's
        Triton RMSNorm) or "eager_activation" (the MLP's activation alone: Megatron-core without bias_activation_fusion,
        NeMo 2.0's Nemotron). Megatron's block only.
    kv_repeat
        Grouped-query attention's K and V repeated to every query head before the attention kernel (torchtitan's Llama
        until 2026-01: `repeat_kv` ahead of SDPA): the kernel keeps, and context parallelism exchanges, h / n1 heads
        of K and V instead of kv_heads / n1. Off: the kernel takes the kv heads (Transformer Engine, SDPA's
        `enable_gqa`).
    recompute
        The recompute modes the search enumerates: "none", "selective", "full", "any" (all three) or "auto": those
        that differ under the profile's block (Megatron's: all three; seed 001's: selective only). A search option.

    The assumptions of the rail-only papers' iteration model (seed 000 section 5, Eq. 2-7 and Appendices B-C; seed
    002 section VI), each a choice of the one assembly in `kernels.iteration.evaluate_candidates` (all at the first
    value in `default` and `lbnl`):

    compute_model
        "roofline": each layer's compute is its FLOPs at the efficient tensor-core or vector peak (the GEMM efficiency
        curve, FP8 rate), plus the per-layer latency, against its HBM time (seed 001 section III-A;
        `kernels.roofline`); an optimizer step after the last backward (Megatron's block); the backward reductions of
        column-parallel linears hidden under their weight-gradient GEMM (Megatron's block). "flop_count": seed 000
        Appendix B (Eq. 10): only the matmuls count, at their closed-form FLOPs (2 m n k forward, twice that backward:
        `kernels.layers.Layer.matmul`), at the tensor-core peak (FP8 rate for FP8 matmuls), the attention block (QKV
        and out-projections and the attention core) `gamma` times slower; no vector-unit or HBM time, no per-layer
        latency, no optimizer step, and every tensor-parallel collective exposed (Eq. 6: 8 per block and microbatch).
    gamma
        "flop_count"'s attention slowdown: 1/gamma of the GEMM rate (seed 000 App. B: 2.5).
    compute_eff
        The compute rate is compute_eff times the peak. Off: the peak (seed 000 Appendix B's F).
    bubble_tp_comm
        The pipeline's fill and drain take whole stage times (compute, exposed HBM, TP communication, stage
        transfers). Off: compute, HBM and transfers only (seed 000 Eq. 3 plus Eq. 4).
    dp_overlap
        Data parallelism as seed 001 section III-D: each block's weights allgathered and its gradients
        reduce-scattered over the data-parallel group, overlapped with the neighbouring block's forward and backward.
        Off: one allreduce of the stage's gradients after the pipeline, all exposed (seed 000 Eq. 7: T_sync = 2
        AGtime(D_d)).
    dp_chunked
        Under the interleaved schedule (v > 1) and ZeRO 0 or 1, each model chunk's gradients are reduced after its
        last microbatch and its parameters gathered before its first (Megatron-core), the earlier chunks' under the
        later chunks' microbatches (`kernels.data_parallel.chunked`). Off: one sweep of the stage (seed 001).
    zero
        The ZeRO stages the search enumerates (the kernels read the candidates' `zero`): "0" ... "3", "any" (all four)
        or "auto": the profile's rule (seed 001 and `lbnl`: stage 1, the distributed optimizer; the rail-only papers:
        stage 0, 16 bytes per parameter on every replica, seed 000 Appendix C constraint 19; Megatron's default: 1, 2
        and 3, the stages no other stage dominates). A search option; `dse.evaluate` without a `zero` takes the first
        stage of this set.
    fsdp_prefetch
        Under ZeRO-3 each block's parameter allgather is issued while the neighbouring block computes (FSDP's forward
        and backward prefetch), hidden up to that block's compute, and the memory holds two gathered blocks (the
        current and the prefetched). Off: every allgather and reduce-scatter exposed, one gathered block in memory.
    grad_reduce_in_bf16
        Gradients accumulated and reduced in bf16, 2 bytes per parameter (Megatron's --grad-reduce-in-bf16; seed 001;
        the rail-only papers' 16 bytes per parameter). Off: Megatron's default fp32 main gradients, 4 bytes,
        reduce-scattered in fp32 (`StateBytes`).
    optimizer_state
        What Adam keeps per parameter beside the bf16 weights (`OPTIMIZER_STATES`, master + moments bytes): fp32 (4 +
        8: Megatron's and PyTorch's default), remainder (2 + 8: Apex's DistributedFusedAdam under NeMo 1.0 with bf16
        parameters keeps only the 16 low bits of each fp32 master weight, store_param_remainders), bf16_moments (4 +
        4: fp32 master weights, moments in bf16; DeepSeek-V3's report section 3.3.3, Megatron-core's --exp-avg-dtype /
        --exp-avg-sq-dtype bf16) or bf16 (0 + 4: the optimizer in the parameters' own dtype, no master copy; NeMo
        1.0's optim.dtype bf16). Sharded as the ZeRO stage says; the optimizer step reads and writes these bytes
        (`kernels.data_parallel`).
    pipeline_slowest_link
        A stage's sends and receives in the steady state cost the slowest stage boundary's point-to-point: the NIC one
        when the pipeline spans domains (nvs_p < n_p), as seed 000 Eq. 6 charges 2 m v P2P(D_p). Off: the mean over
        the n_p - 1 boundaries (spec 5.3). The fill and drain cross every boundary once each way either way (Eq. 4).
    attention_eff
        The fraction of the tensor-core peak the fused attention kernel reaches, forward and backward together,
        counting its matmul FLOPs (4 b h s^2 q forward, 10 backward with the recomputed scores; causal: the unmasked
        share); 0: the system's compute_eff, as seed 001. Megatron's block under flash attention only. The GEMM
        calibration does not measure it (its runs materialize attention): the figure comes from the kernels' papers,
        which time them alone: FlashAttention-2 reaches 50-73% of the A100 peak forward (Dao 2023, arXiv 2307.08691)
        and 35% of the H100's; FlashAttention-3 up to 75% of the H100 BF16 peak forward (Shah et al. 2024, arXiv
        2407.08608), 57-63% at head dimension 128 over 2k-16k sequences; the backward, 2.5 times the forward's FLOPs,
        runs below the forward in both. Measured (docs/gpu.md run 17, H100, 32 heads of 128, 4k-8k tokens, both
        directions): cuDNN 0.47-0.52, FlashAttention-2 0.26-0.29: the profiles' 0.50 and 0.28.
    attention_narrow, attention_wide
        `attention_eff` at head width 64 and 192 as a multiple of its value at 128 (run 20: cuDNN 0.80 and 0.73,
        FlashAttention-2 0.86 and 0.90); linear in between, flat beyond (`kernels.attention.width_factor`).
    attention_tiles
        K of the fused kernel's parallel work (`kernels.attention.tile_factor`): 208 and 192 give run 17's 8-head /
        32-head rates on 8,192 tokens, cuDNN 0.783 and FlashAttention-2 0.795. 0: no such factor.
    tp_comm_overlap
        Tensor-parallel collectives pipelined with the GEMMs around them (Transformer Engine's userbuffers overlap,
        which NVIDIA's Megatron-core recipes enable on H100 and later): per block and direction, the collectives of
        the linears and of the sequence-parallel LayerNorms are exposed only where they exceed the linears' GEMM time,
        max(sum comm - sum GEMM, 0), when the tensor-parallel group is inside one NVS domain (the overlap exchanges
        through NVLink peer memory); a group spanning domains keeps them exposed. Off: each collective exposed, but a
        column-parallel linear's backward reduction hidden under its own weight-gradient GEMM (Megatron-LM's
        asynchronous reduction).
    pp_comm_overlap
        Under the interleaved schedule (v > 1), each stage-boundary send and receive runs while another model chunk
        computes (Megatron-LM's overlap_p2p_comm, on by default with virtual pipelines since 2023): per microbatch 2 v
        max(p2p - t_chunk, 0) with t_chunk the stage's compute per microbatch over 2 v. Off, or v = 1: 2 v p2p,
        exposed (the 1F1B exchanges wait).
    pp_schedule
        The pipeline schedule (`PP_SCHEDULES`): "1f1b", Megatron's (interleaved when v > 1), or "dualpipe",
        DeepSeek-V3's (technical report section 3.2.1 and Table 2): microbatches enter from both ends, so GPU i holds
        stages i and n_p - 1 - i and runs half of them through each, one chunk's forward beside another's backward.
        Per microbatch the end GPUs take the mean of the first and last stage (the embedding beside the logits and
        loss), the others the busiest middle stage; the bubble is (n_p/2 - 1)(F&B + B - 3W) of one stage, F&B = F + B
        + W its forward and backward, W its weight gradients taken as its forward compute; stage transfers show only
        beyond the paired chunk's compute. Memory: two stages' weights and gradients, their optimizer states sharded
        over the 2 n_d copies of each stage (ZeRO >= 1), n_p + 1 microbatches in flight where 1F1B's first stage holds
        n_p; the gradient synchronization moves two stages'. Needs v = 1 and, with a pipeline, an even n_p and an even
        microbatch count >= n_p. The all-to-alls' overlap is `ep_comm_overlap`.
    tp_overlap_eff
        Under `tp_comm_overlap`, the fraction of the hideable tensor-parallel communication (the part that fits under
        the linears' GEMMs) that is really hidden: exposed = comm - eff min(comm, GEMM). 1: Transformer Engine's
        userbuffers, which split each GEMM into chunks pipelined with dedicated copy engines; PyTorch's async tensor
        parallelism (torch.compile's micro-pipelining of all-gather and reduce-scatter matmuls) hides less:
        torchtitan's published speedups of 1.09-1.16x on Llama 3 8B/70B where a full overlap would give 1.3-1.45x.
    framework
        The training framework the profile models (`kernels.frameworks.FRAMEWORKS`): "megatron" (Megatron-core and
        NeMo: Transformer Engine's overlaps, the distributed optimizer, Megatron's rank order) or "fsdp2" (PyTorch
        FSDP2, as torchtitan runs it). It selects the switches that say what overlaps what and the memory reserve when
        a profile is made from it (`with_framework`), and the calibration group the profile applies
        (`dse.truth.calibration`).
    expert_tp
        An MoE block's experts are sharded over the tensor-parallel group (Megatron-core's default expert tensor
        parallelism, ETP = TP: each expert's weights split n1 ways, the routed tokens all-gathered over the group
        before the expert MLP and reduce-scattered after it). Off: ETP = 1 (the --expert-tensor-parallel-size 1 of
        today's MoE recipes): every GPU holds whole experts and runs them on the tokens routed to it, with no
        tensor-parallel collective; the expert-parallel group then folds over the tensor-parallel ranks too, so ep
        divides n1 n2 n_d (`kernels.blocks.expert_group`). SUMMA keeps its grid.
    recompute_modules
        What the candidate's selective recompute mode recomputes: Megatron-core's --recompute-modules, separated by
        '+' (or ',' or ';'; `RECOMPUTE_MODULES`). core_attn (the default: the attention core, checkpointed whatever its
        kernel: materialized, its score matrices are never stored; fused, its softmax statistics, and its forward runs
        again); layernorm (the norms that are modules of
        their own, MLA's attention norm and an MoE block's pre-MLP norm: their outputs are dropped and recomputed,
        with every copy their readers keep; norms fused into the next linear, Transformer Engine's LayerNormLinear,
        are left alone: `kernels.blocks.norm_module`); mla_up_proj (MLA's up-projections: the full queries, keys and
        values the attention core keeps); mlp (the dense MLP: everything after its input); moe_act (the experts'
        activation function: its output, fc2's stored input). Each module keeps its input and frees what its layers
        produce, and its forward runs again in backward, collectives included.
    ep_comm_overlap
        The MoE all-to-alls (dispatch and combine) run under compute of another microbatch (Megatron-core's
        overlap_moe_expert_parallel_comm, which pairs one microbatch's forward with another's backward; DeepSeek-V3's
        DualPipe): per block and direction only their excess over the block's other compute is exposed, max(a2a -
        compute, 0). Off: exposed.
    ep_dispatch_fp8
        DeepSeek-V3's FP8 dispatch (technical report section 3.3.2): under a quantized precision the tokens sent to
        the experts (the dispatch, forward) and the activation gradients sent back into them (the combine's backward)
        cross in FP8, one byte an element; the combine and the dispatch's backward stay BF16. Off: BF16.
    ep_node_limit
        DeepSeek-V3's node-limited routing, deduplicated (report 2.1.2, 3.2.2): each token reaches at most this many
        HB domains, crossing to each once (`blocks.node_limited_share`). 0: every routed copy sent (Megatron).
    expert_imbalance
        The busiest expert-parallel rank's routed tokens over the mean (>= 1): every rank waits for it, so the expert
        MLPs' work and activations and the all-to-all volume are moe_tokens x this. 1: balanced, as NVIDIA's
        performance runs force (dropless training runs above 1); under token drop the capacity factor is the load.
    moe_dropless
        Dropless MoE blocks (Megatron's default) wait for the host: `host_moe_time` a block (`stage.host_wait`,
        `t_host`). False: token drop padded to capacity, graph-captured whole: no floor.
    moe_dispatcher
        Megatron-core's token dispatcher (`kernels.experts.MOE_DISPATCHERS`): "alltoall" (every routed copy sent, local
        sorts around the exchange) or the fused "deepep" and "hybridep" (each token sent once per GPU holding one of
        its experts, expanded there): `experts.dispatch_share`, `experts.regroup_passes`.
    recompute_layers
        Megatron's recompute_method block with recompute_num_layers: under full recomputation only the first this many
        blocks of each model chunk (a stage's blocks / v) are recomputed, the rest keep every activation
        (`kernels.stage.recompute_share`); 0: every block.
    offload_layers
        CPU activation offloading (Megatron-core's cpu_offloading with cpu_offloading_num_layers, which NVIDIA's GB200
        recipes use under Megatron-FSDP): the stored activations of up to this many blocks of a stage (at most all but
        one) go to host memory after their forward and come back before their backward, one block's copy in transit on
        the GPU. Each moved block's copy runs beside the next block's compute over the system's `host_bandwidth` and
        only its excess is exposed, per microbatch k (max(A/bw - t_f, 0) + max(A/bw - t_b, 0)) with A the block's
        stored activations, the iteration's `t_offload`. 0: none. Megatron's block only; as in Megatron-core, without
        a pipeline or recomputation (the search then enumerates n_p = 1 and recompute none; given candidates otherwise
        are refused).
    fp8_tp_gather
        Quantized matmuls' sequence-parallel allgathers (the norms' outputs forward, the row-parallel outputs'
        gradients backward: half of each direction's TP volume) sent quantized, the reduce-scatters 2-byte: torchao's
        float8 tensor parallelism (tensorwise scaling).
    te_quantization
        Whose quantized linears run the FP8 matmuls. True: Transformer Engine's, which cache FP8 copies of each weight
        (`SystemSpec.fp8_weight_copies`, `kernels.data_parallel.model_state`) and keep a quantized copy of their
        input, so the out-projection's copy sits beside the 2-byte attention output fused flash attention keeps
        (`kernels.blocks.attention_output`). False: torchao's float8 linears (PyTorch FSDP2, torchtitan), which cast
        each weight when a matmul reads it and cache none, and whose out-projection input is the attention output
        flash attention keeps.
    loss_fp32, pp_gathered, op_sac, fp8_rowwise
        torchtitan's fp32 loss, pipelined stages kept gathered, operator-level SAC (`kernels.frameworks`); FP8 matmuls
        scaled per row (torchao's rowwise recipes) at the system's `fp8_rowwise_eff` of fp8_eff.
    fp8_param_gather
        Parameter allgathers (ZeRO 1-3) send quantized matmuls' weights quantized (torchao's float8 FSDP all-gather,
        Megatron's --fp8-param-gather: `block_time.gathered`); Megatron holds them in FP8 only (`model_state`).
    act_fp8_store
        A gated MLP keeps its activation's input (the 2 f / n1 gate and up features of each token) for the backward as
        1-byte FP8 copies, cast back to BF16 before it (Megatron-core's --activation-func-fp8-input-store;
        DeepSeek-V3's SwiGLU inputs, technical report section 3.3.3), in any precision: half the activation's stored
        bytes, a cast pass each way (`kernels.layers.fp8_stored`). Under the moe_act recompute module the kept input
        is that copy (DeepSeek's scheme: the output recomputed from the cached FP8 input). Off: BF16.
    attn_out_e5m6
        Under a quantized precision and fused flash attention, the attention output o (the out-projection's input,
        which the attention's backward reads too) is kept once, in DeepSeek-V3's 12-bit E5M6 format with a 4-byte
        scale per 128 elements (technical report section 3.3.3: 1.53 bytes an element), for both backwards: written
        forward, read backward into the 2-byte o the attention's backward takes and the FP8 copy the out-projection's
        weight gradient takes (`kernels.blocks.attention_output`). Off: Transformer Engine's 2-byte o beside the
        out-projection's quantized copy. Megatron's block only; bf16 keeps its one o either way.
    vocab_spread
        The embedding and logit layers as the rail-only papers count them: their FLOPs added to every pipeline stage
        in equal shares (1/n_p each: seed 000 Eq. 10, t(b) = M/(F p t) with the logit FLOPs 6 s h V in M) and no
        communication or gradient synchronization of their own (Eq. 6-7). Their weights (V h / n1) and activations
        stay on the end stages. Off: on the first and last stage, with their collectives (`embeddings`).
    """

    ln2d_feature_shard_from_seq_len: bool = False
    pipeline_ib_links_free: bool = False
    allreduce_doubled_only_across_tiers: bool = False
    reference_bias_sharding: bool = False
    megatron: bool = True
    embeddings: bool = True
    flash_attention: bool = True
    bias_fusion: bool = True
    memory_reserve: float = 0.0
    max_interleave: int = 0
    calibration: str = "none"
    precision: str = "bf16"
    recompute: str = "auto"
    cp_comm: str = "p2p"
    kv_repeat: bool = False
    elementwise: str = "fused"
    compute_model: str = "roofline"
    gamma: float = 1.0
    compute_eff: bool = True
    bubble_tp_comm: bool = True
    dp_overlap: bool = True
    dp_chunked: bool = False
    zero: str = "auto"
    fsdp_prefetch: bool = True
    grad_reduce_in_bf16: bool = False
    optimizer_state: str = "fp32"
    pipeline_slowest_link: bool = False
    vocab_spread: bool = False
    attention_eff: float = 0.0
    attention_narrow: float = 1.0
    attention_wide: float = 1.0
    attention_tiles: float = 0.0
    tp_comm_overlap: bool = False
    pp_comm_overlap: bool = False
    tp_overlap_eff: float = 1.0
    pp_schedule: str = "1f1b"
    framework: str = "megatron"
    expert_tp: bool = True
    ep_comm_overlap: bool = False
    ep_dispatch_fp8: bool = False
    ep_node_limit: int = 0
    recompute_modules: str = "core_attn"
    recompute_layers: int = 0
    offload_layers: int = 0
    expert_imbalance: float = 1.0
    moe_dropless: bool = True
    moe_dispatcher: str = "alltoall"
    fp8_tp_gather: bool = False
    fp8_param_gather: bool = False
    te_quantization: bool = True
    loss_fp32: bool = False
    pp_gathered: bool = False
    op_sac: bool = False
    fp8_rowwise: bool = False
    act_fp8_store: bool = False
    attn_out_e5m6: bool = False


def with_framework(profile: "Profile", framework: str) -> "Profile":
    """`profile` as `framework` runs it: its `FRAMEWORKS` switches and its name (a profile without
    Megatron's block, seed 001's or the rail-only papers', has no framework to change)."""
    if not profile.megatron or profile.compute_model == FLOP_COUNT:
        return profile
    return profile._replace(framework=framework, **FRAMEWORKS[framework])


ONE_F_ONE_B, DUALPIPE = "1f1b", "dualpipe"  # `Profile.pp_schedule` values
PP_SCHEDULES = (ONE_F_ONE_B, DUALPIPE)

#: `Profile.cp_comm` values: tp1d's context-parallel K, V exchange.
CP_P2P, CP_ALLGATHER = "p2p", "allgather"
CP_COMMS = (CP_P2P, CP_ALLGATHER)

ROOFLINE, FLOP_COUNT = "roofline", "flop_count"  # `Profile.compute_model` values
COMPUTE_MODELS = (ROOFLINE, FLOP_COUNT)

#: `Profile.recompute` values: the recompute modes searched (`RECOMPUTE` codes); "auto": `explore.engine.space_options`.
RECOMPUTE_SEARCHED = {"none": (0,), "selective": (1,), "full": (2,), "any": (0, 1, 2), "auto": ()}

#: The switches that reproduce the seed-001 reference code's quirks (true in `lbnl`).
REFERENCE_QUIRKS = ("ln2d_feature_shard_from_seq_len", "pipeline_ib_links_free",
                    "allreduce_doubled_only_across_tiers", "reference_bias_sharding")

#: Named profiles. `lbnl` reproduces the seed-001 reference code and its stored results exactly;
#: `default` is the corrected model; `railonly` is the iteration model of the rail-only papers
#: (seed 000 Eq. 2-7, Appendices B-C) as switches of the same engine.
PROFILES = {
    "lbnl": Profile(
        ln2d_feature_shard_from_seq_len=True,
        pipeline_ib_links_free=True,
        allreduce_doubled_only_across_tiers=True,
        reference_bias_sharding=True,
        megatron=False,
        embeddings=False,
        grad_reduce_in_bf16=True,
    ),
    # Megatron-core as NeMo and Megatron-Bridge run it: FRAMEWORKS["megatron"]'s switches, calibrated
    "default": Profile(calibration="corpus2026", **FRAMEWORKS["megatron"]),
    # PyTorch FSDP2 as torchtitan runs it: the default profile's block under FRAMEWORKS["fsdp2"]
    "fsdp2": Profile(calibration="corpus2026", framework="fsdp2", **FRAMEWORKS["fsdp2"]),
    # seed 000 section 5: Megatron PTD-P with Korthikanti et al.'s materialized attention and
    # activations, selective recomputation, the FLOP-count compute at the peak with gamma = 2.5
    "railonly": Profile(
        flash_attention=False, recompute="selective", compute_model=FLOP_COUNT, gamma=2.5, compute_eff=False,
        bubble_tp_comm=False, dp_overlap=False, zero="0", grad_reduce_in_bf16=True, pipeline_slowest_link=True,
        vocab_spread=True),
}


class Metrics(NamedTuple):
    """Per-candidate results. Times in s per iteration, memory in GB per GPU.

    The ten time components add up to `iteration_time`; the five memory components add up to
    `memory` (of the pipeline stage that holds the most: the first, or the last when its logit layer
    weighs more; for an MoE model, of its candidate stages).
    """

    iteration_time: Array
    throughput: Array  # samples / s
    memory: Array
    feasible: Array  # memory <= hbm_capacity
    t_compute: Array  # compute, including the per-layer FLOP latency
    t_memory: Array  # exposed HBM time (roofline excess of memory over compute)
    t_tp_comm: Array  # tensor-parallel collectives (SUMMA: exposed part), of the blocks and vocabulary layers
    t_ep_comm: Array  # expert-parallel all-to-alls (MoE dispatch and combine), exposed part
    t_dp_comm: Array  # data-parallel weight allgather + gradient reduce-scatter, exposed part
    t_pp_comm: Array  # pipeline point-to-point
    t_bubble: Array  # 1F1B pipeline bubble
    t_optimizer: Array  # the optimizer step after the last backward (HBM-bound; Megatron's block only)
    t_offload: Array  # exposed copies of CPU activation offloading (`Profile.offload_layers`; 0 without)
    t_host: Array  # GPU time waiting for the host to issue dropless MoE blocks (`Profile.moe_dropless`; 0 without)
    mem_weights: Array
    mem_grads: Array
    mem_optimizer: Array
    mem_activations: Array
    mem_reserved: Array  # the framework's allowance (profile memory_reserve)
    flops_per_gpu: Array  # TFLOP per GPU per iteration
