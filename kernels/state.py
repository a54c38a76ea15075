"""The bytes each precision stores per parameter (`StateBytes`): weights, gradients, the optimizer's
master weights and moments as a profile keeps them (`state_bytes`, `OPTIMIZER_STATES`)."""

from __future__ import annotations

from typing import NamedTuple


class StateBytes(NamedTuple):
    """Bytes each precision stores per parameter: the one table of model-state sizes.

    weight      the bf16 (fp16) weights the GEMMs read: 2
    grad        the gradient buffer the backward accumulates into and data parallelism reduces. Megatron-LM with
                bf16 parameters keeps fp32 "main grads", 4 bytes: its megatron/training/arguments.py turns on
                accumulate_allreduce_grads_in_fp32 for bf16 unless --grad-reduce-in-bf16 is given (main_grads_dtype
                defaults to fp32), and its distributed-optimizer guide counts 18 bytes per parameter unsharded,
                6 + 12/d sharded. With `Profile.grad_reduce_in_bf16`: 2 (seed 001, the rail-only papers).
    master      the fp32 master weights of mixed-precision Adam: 4 (`Profile.optimizer_state`: 2 or none)
    moments     Adam's two fp32 moments: 8 (master + moments = K = 12 of Rajbhandari et al.; bf16 moments: 4)
    fp8_copy    one FP8 copy of a linear weight under FP8 matmuls: 1, times the system's `fp8_weight_copies`.
                Transformer Engine quantizes each weight before its GEMMs and, with Megatron's is_first_microbatch,
                caches the FP8 workspace over the microbatches of an iteration (module/base.py `_fp8_workspaces`,
                `quantize_weight`). On Hopper and Ada FP8 GEMMs take only the TN layout, so the input-gradient GEMM
                reads a physically transposed copy (`Float8TensorStorage._transpose`, columnwise usage): 2 copies.
                On Blackwell (sm_100; `is_non_tn_fp8_gemm_supported`) one copy serves both layouts under
                per-tensor scaling (Megatron's default recipe, delayed): 1 copy. The bf16 weights stay (TE docs,
                "Performance considerations: memory usage"). TE does not cache them under FSDP (`is_fsdp2`): with
                ZeRO-3 they live in the gathered buffer.
    """

    weight: float = 2.0
    grad: float = 4.0
    master: float = 4.0
    moments: float = 8.0
    fp8_copy: float = 1.0

    @property
    def optimizer(self) -> float:
        """K: bytes of optimizer state per parameter (master weights and moments)."""
        return self.master + self.moments

    @property
    def update_weight_bytes(self) -> float:
        """Bytes of the 2-byte weight the optimizer step moves per parameter: written, and read as
        well where the master is no whole fp32 copy (remainders, or none) and the weight holds its
        high bits or is itself the master."""
        return self.weight * (1.0 if self.master >= 2.0 * self.weight else 2.0)


#: Mixed-precision Adam with fp32 main gradients (Megatron-LM's default with bf16).
MIXED_PRECISION = StateBytes()


#: `Profile.optimizer_state` -> (master, moments) bytes per parameter.
OPTIMIZER_STATES = {"fp32": (4.0, 8.0), "remainder": (2.0, 8.0), "bf16_moments": (4.0, 4.0), "bf16": (0.0, 4.0)}


def state_bytes(profile) -> StateBytes:
    """The bytes per parameter a profile stores: 2-byte gradients under `grad_reduce_in_bf16`, the
    optimizer's master weights and moments as `optimizer_state` says."""
    master, moments = OPTIMIZER_STATES[profile.optimizer_state]
    grad = MIXED_PRECISION.weight if profile.grad_reduce_in_bf16 else MIXED_PRECISION.grad
    return MIXED_PRECISION._replace(grad=grad, master=master, moments=moments)
