"""PyTorch's eager operators (`Profile.elementwise`): what a block's elementwise work moves through HBM
when every operator is its own kernel, as torchtitan runs without torch.compile.

The engine's elementwise layers count one fused kernel each (a norm reads and writes its tensor once,
SwiGLU reads its two inputs and writes one output; Transformer Engine, Apex, torch.compile). Eager
PyTorch runs each operator of torchtitan's Llama code as a kernel that reads its inputs and writes
its output in full, in fp32 where the code upcasts. Counted operator by operator, in bytes per element
of the tensor each acts on, forward and backward (autograd's kernel for each operator's derivative):

* RMSNorm (`x.float()`, `pow(2)`, `mean(-1)`, `* rsqrt(...)`, `type_as(x)`, `* weight`): forward
  2+4, 4+4, 4, 4+4, 4+2, 2+2 = 36 B against a fused kernel's 4; backward the weight product's two
  gradients (4, 8), the cast back to fp32 (6), the rsqrt product's two (8, 16), the mean's expanded
  gradient (4), the square's (12), the sum of the two paths into x (12) and the cast to bf16 (6):
  76 B against 10. `RMSNORM_EXTRA` = (32, 66). torchtitan's Triton RMSNorm (`norm_type =
  "fused_rmsnorm"`) is one kernel each way: "eager_fused_norm" leaves the norms fused.
* SwiGLU (`F.silu(w1(x)) * w3(x)`): forward silu 2+2 and the product 2+2+2 = 10 B an output
  element against 6; backward the product's two gradients (6, 6) and silu's (6) = 18 against 10.
  `SWIGLU_EXTRA` = (4, 8). GELU is one kernel either way.
* Rotary embeddings on the queries and keys (`xq.float()` viewed complex, the complex product,
  `type_as`): 2+4, 4+4, 4+2 = 20 B an element each way against a fused kernel's 4. No mode counts a
  fused rotary pass (an omission of 4 B an element each way); eager adds the difference,
  `ROPE_EXTRA` = (16, 16).
* An FP8 cast (torchao, tensorwise): the amax reduction its own pass (2 B) before the cast (2 + 1 + 1:
  bf16 in, FP8 and its transpose out), 6 B against the fused 4. `CAST_EXTRA` = 2.
* Squared ReLU (`torch.pow(F.relu(x), 2)`, NeMo 2.0's Nemotron activation): forward relu 2+2 and the
  square 2+2 = 8 B an element against one kernel's 4; backward the square's gradient (PyTorch's
  `grad * (2 * x.pow(1))`: a copy 2+2, the scalar product 2+2, the product 2+2+2) and relu's
  (`threshold_backward`, 2+2+2) = 20 B against 6. `RELU2_EXTRA` = (4, 14).

"eager_activation" is Megatron-core with its activation unfused and everything else in Transformer
Engine's kernels: without `bias_activation_fusion` its MLPs, the experts' included, call the activation
as plain PyTorch (squared ReLU as above; GELU is one kernel either way; SwiGLU splits fc1's output with
`torch.chunk`, then silu and the product as above, and the split's backward concatenates the two
halves' gradients, 8 B an output element more: `MEGATRON_SWIGLU_EXTRA` = (4, 16)), and NeMo 2.0's
Nemotron configurations leave that fusion off (`nemo/collections/llm/gpt/model/nemotron.py`, tags
v2.1.0 to v2.4.0, whose `squared_relu` is neither scripted nor compiled; NeMo 1.0's was compiled).

Latent attention's decoupled rotary dimensions are not counted. Activation memory is unchanged (under
torchtitan's checkpointing the extra fp32 intermediates are recomputed, not kept)."""

from __future__ import annotations

from kernels.layers import Layer
from kernels.units import GB

#: `Profile.elementwise` values: fused kernels; every operator its own kernel; the same with a fused norm; only
#: the MLP's activation eager (Megatron-core without bias_activation_fusion).
FUSED, EAGER, EAGER_FUSED_NORM, EAGER_ACTIVATION = "fused", "eager", "eager_fused_norm", "eager_activation"
ELEMENTWISE = (FUSED, EAGER, EAGER_FUSED_NORM, EAGER_ACTIVATION)

#: Bytes an element the eager operators move beyond one fused kernel, (forward, backward): module docstring.
RMSNORM_EXTRA = (32.0, 66.0)
SWIGLU_EXTRA = (4.0, 8.0)
MEGATRON_SWIGLU_EXTRA = (4.0, 16.0)
RELU2_EXTRA = (4.0, 14.0)
ROPE_EXTRA = (16.0, 16.0)
CAST_EXTRA = 2.0


def cast_elements(profile) -> float:
    """2-byte element sizes an FP8 cast moves per element it quantizes (`blocks.fp8_cast`): 2 (4 B:
    bf16 in, the FP8 copy and its transpose out), 3 under torchtitan's eager operators (the amax pass,
    `CAST_EXTRA`; Transformer Engine's casts stay fused under "eager_activation")."""
    return 2.0 + (CAST_EXTRA / 2.0 if profile.elementwise in (EAGER, EAGER_FUSED_NORM) else 0.0)


def _more(layer: Layer, *counts) -> Layer:
    """`layer` with the bytes of each (elements, (forward, backward) bytes an element) of `counts` added."""
    return layer._replace(traffic_f=layer.traffic_f + sum(n * (extra[0] * GB) for n, extra in counts),
                          traffic_b=layer.traffic_b + sum(n * (extra[1] * GB) for n, extra in counts))


def eager_kernels(layers: tuple, profile, norm, act, rope, relu2=0.0) -> tuple:
    """`layers` (a Megatron or SUMMA block) with the HBM traffic PyTorch's eager operators add
    (`Profile.elementwise`, module docstring): `norm` elements of each norm (ln1, ln2), `act` output
    elements of a gated MLP's activation (0 for GELU), `relu2` those of a squared-ReLU MLP's, `rope` query
    and key elements rotated (on the QKV projection's layer). Fused: `layers` unchanged; "eager_activation":
    the activation's alone."""
    if profile.elementwise == FUSED:
        return layers
    norms = 1.0 if profile.elementwise == EAGER else 0.0
    ropes = 0.0 if profile.elementwise == EAGER_ACTIVATION else 1.0
    glu = MEGATRON_SWIGLU_EXTRA if profile.elementwise == EAGER_ACTIVATION else SWIGLU_EXTRA
    extra = {"ln1": ((norm * norms, RMSNORM_EXTRA),), "ln2": ((norm * norms, RMSNORM_EXTRA),),
             "act1": ((act, glu), (relu2, RELU2_EXTRA)), "qkv": ((rope * ropes, ROPE_EXTRA),)}
    return tuple(_more(x, *extra[x.name]) if x.name in extra else x for x in layers)
