"""The training frameworks a profile can model (`kernels.params.Profile.framework`): what each overlaps,
shards and holds, as `Profile` switches (`kernels.params.with_framework` applies them)."""

from __future__ import annotations

#: What each training framework overlaps and holds (`Profile` switches), applied by `kernels.params.with_framework`.
#: Megatron-core / NeMo: Transformer Engine's userbuffers pipeline the tensor-parallel collectives with the GEMMs, the
#: interleaved schedule overlaps its transfers and synchronizes each model chunk's data-parallel state on its own,
#: context parallelism is Transformer Engine's p2p ring under attention, the distributed optimizer and the ZeRO stages
#: searched by the profile's rule, fp32 main gradients, 4 GB of CUDA context, NCCL buffers and fragmentation. Both
#: name the same switches. PyTorch FSDP2 as torchtitan runs it: parameters gathered per block with one block of
#: prefetch and gradients reduce-scattered in fp32 (`MixedPrecisionPolicy(reduce_dtype=float32)`), full sharding
#: (ZeRO-3), every tensor-parallel collective exposed (DTensor's plain TP has neither pipelined collectives nor
#: Megatron's asynchronous backward reduction: `tp_comm_overlap` on with `tp_overlap_eff` 0; async TP is
#: `ASYNC_TP_EFF`), context parallelism by all-gathering K and V before attention (PyTorch's experimental
#: context_parallel, rotate method "allgather"), and the caching allocator's reserve, and torchao's float8 tensor
#: parallelism gathering quantized inputs (`fp8_tp_gather`: its tensorwise recipe, the one torchtitan's TP plan
#: applies with float8), and torchao's float8 linears rather than Transformer Engine's (`te_quantization`: no cached
#: FP8 weights). The fused attention kernel differs too: Transformer Engine's cuDNN attention (0.50 of the peak:
#: `attention_eff`) against PyTorch SDPA's FlashAttention-2 (0.28), both as measured forward and backward on an H100
#: (docs/gpu.md run 17) at head width 128; at 64 and 192 cuDNN reaches 0.80 and 0.73 of that, FlashAttention-2 0.86
#: and 0.90 (run 20: `attention_narrow`, `attention_wide`), and with 8 heads rather than 32 on 8,192 tokens 0.783 and
#: 0.795 of their rate (run 17: `attention_tiles` 208 and 192). Three more of torchtitan's ways, each a switch of its own.
#: `loss_fp32`: the cross-entropy of the logits cast to fp32, whose backward holds two more fp32 tensors of the
#: logits' size than Megatron's fused loss (`kernels.iteration.fsdp2_loss_activation`). `pp_gathered`: under a
#: pipeline, FSDP2 does not reshard a stage's parameters after each microbatch's forward and keeps its gradients
#: unsharded in fp32 until the last microbatch (`kernels.data_parallel.model_state`). `op_sac`: selective
#: recomputation is its operator-level checkpointing, which keeps the attention kernel's output and every second
#: matmul's (`kernels.stage.op_sac`). `Profile.tp_overlap_eff` of PyTorch's async tensor parallelism (torch.compile's
#: micro-pipelined all-gather and reduce-scatter matmuls): the share of the hideable communication it hides, set so
#: that a full overlap's 1.3-1.45x on Llama 3 8B/70B shrinks to the 1.09-1.16x torchtitan publishes
#: (benchmarks/asyncTP_llama3_h100_2025-06_*.md).
ASYNC_TP_EFF = 0.35

#: (tp_comm_overlap, tp_overlap_eff) of each framework with its tensor-parallel overlap on and off: Megatron's is
#: Transformer Engine's userbuffers, and off it still hides a column-parallel linear's backward reduction (its
#: asynchronous reduction); PyTorch's on is async TP, off exposes every collective (on at efficiency 0).
TP_OVERLAP = {"megatron": {True: (True, 1.0), False: (False, 1.0)},
              "fsdp2": {True: (True, ASYNC_TP_EFF), False: (True, 0.0)}}


def tp_overlap_switches(framework: str, on: bool) -> dict:
    """The `Profile` switches of `framework`'s tensor-parallel overlap, on or off (`TP_OVERLAP`)."""
    overlap, eff = TP_OVERLAP[framework][bool(on)]
    return {"tp_comm_overlap": overlap, "tp_overlap_eff": eff}


FRAMEWORKS: dict[str, dict] = {
    "megatron": {**tp_overlap_switches("megatron", True), "pp_comm_overlap": True, "dp_chunked": True,
                 "cp_comm": "p2p", "fsdp_prefetch": True, "grad_reduce_in_bf16": False, "zero": "auto", "memory_reserve": 4.0,
                 "attention_eff": 0.50, "attention_narrow": 0.80, "attention_wide": 0.73, "attention_tiles": 208.0,
                 "fp8_tp_gather": False,
                 "te_quantization": True, "loss_fp32": False, "pp_gathered": False, "op_sac": False},
    "fsdp2": {**tp_overlap_switches("fsdp2", False), "pp_comm_overlap": False, "dp_chunked": False,
              "cp_comm": "allgather", "fsdp_prefetch": True, "grad_reduce_in_bf16": False, "zero": "3", "memory_reserve": 6.0,
              "attention_eff": 0.28, "attention_narrow": 0.86, "attention_wide": 0.90, "attention_tiles": 192.0,
              "fp8_tp_gather": True,
              "te_quantization": False, "loss_fp32": True, "pp_gathered": True, "op_sac": True},
}
