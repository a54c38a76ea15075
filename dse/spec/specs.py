"""Typed, validated model and system specs, and the presets in `conf/model/` and `conf/system/`.

A spec is built from a preset name, a mapping (a YAML file, a Hydra config) or keyword arguments,
and every field is checked before any compute: a bad value raises `SpecError` with one line that
names the field, the value and what is valid. Specs turn into the kernels' array containers with
`ModelSpec.workload()` and `SystemSpec.params()`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

import numpy as np

# the field checks live in dse.spec.checks; re-exported here, where every spec module imports them
from dse.spec.checks import (INT_MAX, NAME_RE, SpecError, _fmt, _in_range, check_choice, check_float, check_int,
                             check_unique, yaml_problem)
from dse.spec.checks import check_name as check_name
from dse.spec.rules import (  # noqa: F401  (the bounds and the config tree, for callers of dse.spec.specs)
    _ELEMENT, _FRAC, _LATENCY, _NONNEG, _POS, _RATE, CONF_DIR, MAX_BATCH, MAX_GPU_COUNTS, MAX_GPUS, MAX_TOP_K,
    _rule, _validate, spec_from_mapping)


def check_block(model: "ModelSpec", strategy: str, megatron: bool, profile: str) -> None:
    """Grouped-query attention and gated MLPs are modelled by Megatron's block (profiles with
    `megatron` on) in every strategy; under seed 001's block they are a one-line SpecError.
    Multi-head latent attention, and heads whose width is not hidden / heads (`head_dim`):
    Megatron's block in tp1d and tp2d."""
    if model.mla:
        if not megatron:
            raise SpecError(f"model.attention = 'mla': multi-head latent attention is modelled by Megatron's block "
                            f"(profile default or railonly), not by profile {profile!r}")
        if strategy == "summa":
            raise SpecError("model.attention = 'mla': strategy 'summa' models multi-head attention; use tp1d or tp2d")
    if model.own_head_dim and (not megatron or strategy == "summa"):
        where = "strategy 'summa'" if megatron else f"profile {profile!r}"
        raise SpecError(f"model.head_dim = {model.head_dim}: heads of a width other than hidden / heads "
                        f"({model.hidden} / {model.heads}) are modelled by Megatron's block in tp1d and tp2d, "
                        f"not by {where}")
    if model.kv_heads == model.heads and not model.gated:
        return
    what = f"model.kv_heads = {model.kv_heads}" if model.kv_heads != model.heads else f"model.mlp = {model.mlp!r}"
    if not megatron:
        raise SpecError(f"{what}: grouped-query attention and gated MLPs are modelled by Megatron's block "
                        f"(profile default), not by profile {profile!r}")


#: MLP kinds: GELU (e -> f -> e), SwiGLU (gated: gate and up e -> f, down f -> e) and squared ReLU
#: (Nemotron-4: relu(x)^2, the shape and work of GELU's MLP, one elementwise activation).
MLPS = ("gelu", "swiglu", "relu2")
#: Attention kinds: multi-head (grouped-query with kv_heads) or DeepSeek's multi-head latent attention.
ATTENTIONS = ("mha", "mla")
#: The fields of multi-head latent attention (all required, and only allowed, with attention = mla).
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
#: The fields that only an MoE model may set (beyond their defaults).
EXPERT_FIELDS = ("shared_experts", "expert_ffn", "dense_layers")
#: NVIDIA GPU generations, each after its predecessor: one without measured runs takes its predecessor's calibration.
GENERATIONS = ("ampere", "hopper", "blackwell", "blackwell_ultra", "rubin")
#: `SystemSpec.status` values and what an answer says of each.
SYSTEM_STATUS = {"": "", "reference": "a seed paper's reference values, not a shipped system",
                 "projected": "a projected generation, not a shipped system",
                 "announced": "announced, not shipped: no measured run can validate it"}
#: Megatron's pipeline-split flags: the embedding (loss) counts as a layer of the first (last) stage.
PIPELINE_SPLIT_FIELDS = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")


@dataclass(frozen=True)
class ModelSpec:
    """A transformer of `depth` blocks (the embeddings and head are the profile's `embeddings`).

    Training-set size is given as tokens (samples = tokens / seq_len) or directly as samples; it turns throughput
    into training days.

    Mixture of experts (`experts` set): every `moe_every`-th block after the first `dense_layers` is an MoE block,
    its MLP replaced by `experts` routed experts (top `moe_top_k`, times the `capacity_factor`) plus
    `shared_experts` always-active ones, each an MLP (of the model's `mlp` kind) of width `expert_ffn` (None:
    `ffn`); the first `dense_layers` blocks have the dense MLP of width `ffn` (DeepSeek-V3: 3 dense blocks, then
    58 MoE blocks of 256 routed experts of width 2048 and 1 shared). `dense_layers` > 0 needs moe_every = 1.

    Head width: `head_dim` (None: hidden / heads, which heads must then divide). Given, the heads' width need not
    be hidden / heads: the QKV projection maps e -> (heads + 2 kv_heads) head_dim, the out-projection heads
    head_dim -> e, and the attention core works on head_dim (Qwen3 and GPT-OSS: 32 x 128 = 4096 over a hidden
    size of 2048, 64 x 64 = 4096 over 2880). Megatron's block models it; seed 001's block, SUMMA and latent
    attention (its own head widths) refuse a head_dim other than hidden / heads.

    Attention: `mha` (multi-head, grouped-query with `kv_heads`) or `mla`, DeepSeek's multi-head latent attention,
    modelled by its projection shapes (`kernels.blocks.megatron_block`): down-projections e -> q_lora_rank and
    e -> kv_lora_rank + qk_rope_head_dim, up-projections q_lora_rank -> heads (qk_nope_head_dim + qk_rope_head_dim)
    and kv_lora_rank -> heads (qk_nope_head_dim + v_head_dim), out-projection heads v_head_dim -> e, and the core
    with head dimension qk_nope + qk_rope for queries and keys, v_head_dim for values. Left out: the RMSNorms on
    the two latents (2 vector ops on q_lora_rank + kv_lora_rank features), the KV-cache compression (an inference
    matter: training computes the full keys and values), and the decoupled RoPE key's sharing across heads is
    counted as its projection only (each head's key then has nope + rope dimensions, as the core computes it).

    `dropout`: the probability of the blocks' hidden and attention dropouts (Megatron's hidden_dropout and
    attention_dropout; 0.1 its default and GPT-3's). Above 0 each dropout keeps a 1-byte mask per element for
    backward; at 0 (Llama, Qwen3, DeepSeek, Mixtral and GPT-OSS recipes) none is drawn or kept. `bias`: the linears
    (MLP, out-projection) have biases (Megatron's add_bias_linear; GPT-3, GPT-OSS), else none (Llama, Qwen3, ...).
    """

    name: str
    seq_len: int = _rule("int", 1)
    hidden: int = _rule("int", 1)
    heads: int = _rule("int", 1)
    depth: int = _rule("int", 1)
    ffn: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})
    training_tokens: float | None = field(default=None, metadata={"rule": _POS})
    training_samples: float | None = field(default=None, metadata={"rule": _POS})
    vocab: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})
    experts: int | None = field(default=None, metadata={"rule": ("int", 2, math.inf)})
    moe_every: int = field(default=2, metadata={"rule": ("int", 1, math.inf)})
    moe_top_k: int = field(default=1, metadata={"rule": ("int", 1, math.inf)})
    capacity_factor: float = field(default=1.0, metadata={"rule": _POS})
    kv_heads: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})
    head_dim: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})
    mlp: str = "gelu"
    glu_clamp: float | None = field(default=None, metadata={"rule": _POS})  # the gated MLP's inputs clamped to it
    dropout: float = field(default=0.1, metadata={"rule": ("phys", 0.0, 0.99)})  # hidden and attention dropout
    causal: bool = True
    window: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})  # keys a windowed query sees
    window_layers: int | None = field(default=None, metadata={"rule": ("int", 0, math.inf)})  # blocks with it (all)
    bias: bool = True
    tied_embeddings: bool = True
    shared_experts: int = field(default=0, metadata={"rule": ("int", 0, math.inf)})
    expert_ffn: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})
    dense_layers: int = field(default=0, metadata={"rule": ("int", 0, math.inf)})
    attention: str = "mha"
    q_lora_rank: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})
    kv_lora_rank: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})
    qk_rope_head_dim: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})
    qk_nope_head_dim: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})
    v_head_dim: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    mtp: int = field(default=0, metadata={"rule": ("int", 0, 64)})
    pipeline_layout: str | None = None
    global_batch: int | None = field(default=None, metadata={"rule": ("int", 1, math.inf)})  # published, samples

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"model.name = {_fmt(self.name)}: must be a non-empty string")
        _validate("model", self)
        if self.ffn is None:
            object.__setattr__(self, "ffn", 4 * self.hidden)
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise SpecError(f"model.heads = {self.heads}: must divide model.hidden = {self.hidden} "
                                "(or give model.head_dim)")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.training_tokens is not None and self.training_samples is not None:
            raise SpecError("model.training_samples: give training_tokens or training_samples, not both")
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.heads % self.kv_heads:
            raise SpecError(f"model.kv_heads = {self.kv_heads}: must divide model.heads = {self.heads}")
        check_choice("model.mlp", self.mlp, MLPS)
        if self.glu_clamp is not None and self.mlp != "swiglu":
            raise SpecError(f"model.glu_clamp = {self.glu_clamp}: clamps a gated MLP's inputs; needs model.mlp = "
                            f"'swiglu' (not {self.mlp!r})")
        if self.glu_clamp is not None and (not self.experts or self.dense_layers or self.shared_experts
                                           or self.moe_every != 1):
            raise SpecError(f"model.glu_clamp = {self.glu_clamp}: Megatron-core clamps the routed experts' inputs "
                            "only; modelled for a model whose every MLP is a routed expert's (experts, moe_every 1, "
                            "no dense_layers or shared_experts)")
        for flag in ("causal", "bias", "tied_embeddings", *PIPELINE_SPLIT_FIELDS):
            if not isinstance(getattr(self, flag), bool):
                raise SpecError(f"model.{flag} = {getattr(self, flag)!r}: must be true or false")
        if self.experts is None:
            for k in EXPERT_FIELDS:
                if getattr(self, k) not in (None, 0):
                    raise SpecError(f"model.{k} = {getattr(self, k)}: model {self.name!r} has no experts "
                                    "(model.experts is not set); leave it out or set model.experts")
        else:
            if self.dense_layers >= self.depth:
                raise SpecError(f"model.dense_layers = {self.dense_layers}: must be < model.depth = {self.depth} "
                                "(an MoE model has at least one MoE block)")
            if self.dense_layers and self.moe_every != 1:
                raise SpecError(f"model.moe_every = {self.moe_every}: must be 1 with model.dense_layers = "
                                f"{self.dense_layers} (dense first blocks, then every block MoE)")
            if self.depth % self.moe_every:
                raise SpecError(f"model.moe_every = {self.moe_every}: must divide model.depth = {self.depth}")
            if self.moe_top_k > self.experts:
                raise SpecError(f"model.moe_top_k = {self.moe_top_k}: must be <= model.experts = {self.experts} "
                                "(each token is routed to top_k of the experts)")
        split = [k for k in PIPELINE_SPLIT_FIELDS if getattr(self, k)]
        if split and not self.vocab:
            raise SpecError(f"model.{split[0]} = true: needs model.vocab (the embedding and loss it counts as "
                            "pipeline layers)")
        if self.pipeline_layout is not None:
            if split:
                raise SpecError(f"model.{split[0]} = true: model.pipeline_layout places the embedding and "
                                "the loss itself; give one or the other")
            if not self.vocab:
                raise SpecError("model.pipeline_layout: needs model.vocab (the embedding and loss it places)")
            lay = self.layout
            if lay.layers != self.depth or lay.mtp != self.mtp:
                raise SpecError(f"model.pipeline_layout = {self.pipeline_layout!r}: places {lay.layers} blocks and "
                                f"{lay.mtp} MTP blocks; the model has depth = {self.depth} and mtp = {self.mtp}")
        if self.mtp and not self.vocab:
            raise SpecError(f"model.mtp = {self.mtp}: multi-token prediction needs model.vocab (each module "
                            "computes its own logits and loss)")
        if self.window is None and self.window_layers is not None:
            raise SpecError(f"model.window_layers = {self.window_layers}: needs model.window (the keys each query "
                            "of a windowed block sees; no window: model.window=null model.window_layers=null)")
        if self.window is not None:
            if not self.causal:
                raise SpecError(f"model.window = {self.window}: a sliding window is modelled for causal "
                                "attention only (model.causal = true)")
            if self.window_layers is not None and self.window_layers > self.depth:
                raise SpecError(f"model.window_layers = {self.window_layers}: must be <= model.depth = "
                                f"{self.depth} (the blocks whose attention has the window)")
        check_choice("model.attention", self.attention, ATTENTIONS)
        if self.attention == "mla":
            missing = [k for k in MLA_FIELDS if getattr(self, k) is None]
            if missing:
                raise SpecError(f"model.{missing[0]}: missing; attention 'mla' needs {', '.join(MLA_FIELDS)}")
            if self.kv_heads != self.heads:
                raise SpecError(f"model.kv_heads = {self.kv_heads}: multi-head latent attention has a key and "
                                f"value per head; must be model.heads = {self.heads} (or left out)")
            if self.own_head_dim:
                raise SpecError(f"model.head_dim = {self.head_dim}: multi-head latent attention sets its head "
                                "widths with qk_nope_head_dim, qk_rope_head_dim and v_head_dim; leave it out")
        else:
            given = [k for k in MLA_FIELDS if getattr(self, k) is not None]
            if given:
                raise SpecError(f"model.{given[0]} = {getattr(self, given[0])}: a field of multi-head latent "
                                "attention; needs model.attention = 'mla'")

    @property
    def window_share(self) -> float:
        """The share of the kernels' blocks (depth + mtp: the MTP blocks attend causally) whose attention has the
        sliding window: window_layers / (depth + mtp), every block when window_layers is not given; 0 without."""
        if not self.window:
            return 0.0
        return 1.0 if self.window_layers is None else self.window_layers / (self.depth + self.mtp)

    @property
    def layout(self):
        """The explicit pipeline layout (`dse.spec.layout.Layout`), or None."""
        from dse.spec.layout import parse_layout

        return None if self.pipeline_layout is None else parse_layout(self.pipeline_layout, "model.pipeline_layout")

    @property
    def split_slots(self) -> tuple[int, int]:
        """(first, last): the blocks' places the embedding and the loss take on the end stages:
        Megatron's flags (`PIPELINE_SPLIT_FIELDS`, one place each) or the explicit layout's."""
        lay = self.layout
        if lay is not None:
            return lay.first_slots, lay.last_slots
        return tuple(int(bool(getattr(self, k))) for k in PIPELINE_SPLIT_FIELDS)

    @property
    def pipeline_slots(self) -> int:
        """Places besides the blocks a pipeline splits (`split_slots`, both ends)."""
        return sum(self.split_slots)

    @property
    def pipeline_places(self) -> int:
        """What a pipeline of several stages splits: the blocks, the MTP blocks and `pipeline_slots`."""
        return self.depth + self.mtp + self.pipeline_slots

    @property
    def moe(self) -> bool:
        """Whether the model has mixture-of-experts blocks (every moe_every-th block)."""
        return self.experts is not None

    @property
    def mla(self) -> bool:
        """Whether attention is multi-head latent attention (DeepSeek-V2/V3)."""
        return self.attention == "mla"

    @property
    def expert_width(self) -> int:
        """Intermediate size of each routed and shared expert (`expert_ffn`, or `ffn`)."""
        return self.expert_ffn or self.ffn

    @property
    def moe_blocks(self) -> int:
        """MoE blocks: every moe_every-th block after the first dense_layers (0 for a dense model)."""
        return (self.depth - self.dense_layers) // self.moe_every if self.moe else 0

    @property
    def arch(self):
        """The kernels' static block shape (`kernels.params.Arch`): MoE blocks, latent attention,
        shared experts, the pipeline-split flags, biases."""
        from kernels.params import Arch

        return Arch(moe=self.moe, mla=self.mla, shared=self.moe and self.shared_experts > 0,
                    split=self.pipeline_slots > 0, bias=self.bias)

    @property
    def own_head_dim(self) -> bool:
        """Whether the heads' width differs from hidden / heads (`head_dim` given: heads x head_dim
        is not hidden, as in Qwen3 and GPT-OSS); only Megatron's block models that."""
        return self.heads * self.head_dim != self.hidden

    @property
    def samples(self) -> float | None:
        """Training-set size in samples (sequences), or None if the spec gives none."""
        if self.training_samples is not None:
            return self.training_samples
        if self.training_tokens is not None:
            return self.training_tokens / self.seq_len
        return None

    @property
    def gated(self) -> bool:
        """Whether the MLP is gated (SwiGLU: gate and up projections e -> f, down f -> e)."""
        return self.mlp == "swiglu"

    @property
    def attention_params(self) -> int:
        """The attention projections of one block and the out-projection's bias (`bias`). MHA with head width q
        (`head_dim`): QKV (e x (h + 2 kv) q) and out-projection (h q x e), e x e each when h q = e; MLA: e q_lora
        + e (kv_lora + rope) down, q_lora h (nope + rope) + kv_lora h (nope + v) up, h v e out."""
        e, h = self.hidden, self.heads
        if self.mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            return (e * self.q_lora_rank + e * (self.kv_lora_rank + self.qk_rope_head_dim)
                    + self.q_lora_rank * h * qk + self.kv_lora_rank * h * (self.qk_nope_head_dim + self.v_head_dim)
                    + h * self.v_head_dim * e + e * self.bias)
        q, kv = h * self.head_dim, 2 * self.kv_heads * self.head_dim
        return e * (q + kv) + q * e + e * self.bias  # no QKV bias (seed 001)

    def mlp_params(self, width: int) -> int:
        """One MLP of intermediate size `width` with its biases (`bias`): 2 e f + f + e (GELU), 3 e f + 2 f + e gated."""
        e = self.hidden
        up = 2 * width if self.gated else width
        return e * up + width * e + (up + e) * self.bias

    @property
    def params_per_block(self) -> int:
        """A dense block: attention (`attention_params`), the MLP of width ffn (`mlp_params`), two
        LayerNorms: 4 e^2 + 2 e f + f + 6 e for MHA with kv = heads and a GELU MLP."""
        return self.attention_params + self.mlp_params(self.ffn) + 4 * self.hidden

    @property
    def params_per_moe_block(self) -> int:
        """An MoE block: attention, E routed and S shared experts of width `expert_width`, the gate
        (e x E), two LayerNorms."""
        return (self.attention_params + (self.experts + self.shared_experts) * self.mlp_params(self.expert_width)
                + self.hidden * self.experts + 4 * self.hidden)

    @property
    def params(self) -> int:
        """Parameters of all blocks: the dense ones and the MoE ones (`moe_blocks`)."""
        if not self.moe:
            return self.depth * self.params_per_block
        k = self.moe_blocks
        return (self.depth - k) * self.params_per_block + k * self.params_per_moe_block

    @property
    def active_params(self) -> int:
        """Parameters a token passes through: the dense blocks, and in each MoE block its attention,
        gate, shared experts and top-k routed experts; the embeddings as in `total_params` (the
        figure MoE papers quote as activated parameters; 6 active_params is close to the training
        FLOPs per token, before attention)."""
        if not self.moe:
            return self.total_params
        routed_off = (self.experts - self.moe_top_k) * self.mlp_params(self.expert_width)
        return self.total_params - self.moe_blocks * routed_off

    @property
    def total_params(self) -> int:
        """Every parameter: the blocks, the input embedding (V x e), the output layer unless tied
        to it, and the final norm (2 e)."""
        vocab = self.vocab or 0
        return self.params + vocab * self.hidden * (1 if self.tied_embeddings else 2) + 2 * self.hidden

    def workload(self, global_batch: int):
        """The kernels' `Workload` (int64 scalars) for a global batch of `global_batch` samples."""
        from kernels.params import Workload

        b = check_int("global_batch", global_batch, 1, MAX_BATCH)
        # the multi-token-prediction blocks are the last blocks of the stack (`Workload.mtp`)
        return Workload(*(np.int64(v) for v in (self.seq_len, self.hidden, self.heads, self.depth + self.mtp, self.ffn, b,
                                                  self.vocab or 0, self.experts or 0, self.moe_every)),
                        moe_tokens=np.float64(self.moe_top_k * self.capacity_factor),
                        kv_heads=np.int64(self.kv_heads), head_dim=np.int64(self.head_dim if self.own_head_dim else 0),
                        gated=np.int64(self.gated), relu2=np.int64(self.mlp == "relu2"),
                        glu_clamp=np.int64(self.glu_clamp is not None),
                        causal=np.int64(self.causal), tied=np.int64(self.tied_embeddings),
                        window=np.int64(self.window or 0), window_share=np.float64(self.window_share),
                        shared_experts=np.int64(self.shared_experts if self.moe else 0),
                        expert_ffn=np.int64(self.expert_width), dense_layers=np.int64(self.dense_layers),
                        **{k: np.int64(getattr(self, k) or 0) for k in MLA_FIELDS},
                        split_embedding=np.int64(self.split_slots[0]),
                        split_loss=np.int64(self.split_slots[1]), mtp=np.int64(self.mtp),
                        dropout=np.float64(self.dropout > 0.0))


@dataclass(frozen=True)
class SystemSpec:
    """A GPU, its NVSwitch domain and its InfiniBand NICs (spec section 2.2 field names)."""

    name: str
    matrix_flops: float = _rule(*_RATE)
    vector_flops: float = _rule(*_RATE)
    hbm_bandwidth: float = _rule(*_RATE)
    hbm_capacity: float = _rule(*_RATE)
    nvlink_bandwidth: float = _rule(*_RATE)
    nvlink_eff: float = _rule("frac", 1e-3, 1.0)
    nvlink_latency: float = _rule(*_LATENCY)
    ib_bandwidth: float = _rule(*_RATE)
    ib_eff: float = _rule("frac", 1e-3, 1.0)
    ib_latency: float = _rule(*_LATENCY)
    nic_factor: float = _rule("phys", 1e-3, 1e3)
    nvs_size: int = _rule("int", 1, MAX_GPUS)
    compute_eff: float = field(default=0.8, metadata={"rule": ("frac", 1e-3, 1.0)})
    flop_latency: float = field(default=2.0e-5, metadata={"rule": _LATENCY})
    hbm_eff: float = field(default=1.0, metadata={"rule": ("frac", 1e-3, 1.0)})
    element_size: float = field(default=2.0e-9, metadata={"rule": _ELEMENT})
    mask_element_size: float = field(default=1.0e-9, metadata={"rule": _ELEMENT})
    matmul_knee: float = field(default=0.0, metadata={"rule": ("phys", 0.0, 1e3)})
    matrix_flops_fp8: float = field(default=0.0, metadata={"rule": ("phys", 0.0, 1e6)})
    # FP8 copies Transformer Engine keeps of each linear weight (kernels.state.StateBytes): 2 where
    # FP8 GEMMs need a transposed copy (Hopper, Ada), 1 where one layout serves both (Blackwell)
    fp8_weight_copies: float = field(default=2.0, metadata={"rule": ("nonneg", 0.0, 4.0)})
    # the fraction of the FP8 tensor-core rate FP8 matmuls reach relative to BF16's compute_eff
    # (quantization and scaling of their inputs; a calibration fits it per generation)
    fp8_eff: float = field(default=1.0, metadata={"rule": ("frac", 1e-3, 1.0)})
    # GB/s per GPU, one direction, to host memory (activation offloading); 0: not given
    host_bandwidth: float = field(default=0.0, metadata={"rule": ("phys", 0.0, 1e6)})
    # dense NVFP4 tensor-core rate, TFLOP/s (0: no FP4), and the fraction of it NVFP4 matmuls reach
    # relative to BF16's compute_eff (as fp8_eff; a calibration fits it per generation)
    matrix_flops_fp4: float = field(default=0.0, metadata={"rule": ("phys", 0.0, 1e6)})
    fp4_eff: float = field(default=1.0, metadata={"rule": ("frac", 1e-3, 1.0)})
    # s the host CPU takes to issue one MoE block's forward and backward kernels for one microbatch when they
    # run eagerly (dropless routing, `Profile.moe_dropless`); 0: not modelled (a calibration fits it)
    host_moe_time: float = field(default=0.0, metadata={"rule": ("phys", 0.0, 1.0)})
    # the fraction of fp8_eff FP8 matmuls scaled per row reach (torchao's rowwise recipes, `Profile.fp8_rowwise`;
    # 1 in every preset; a calibration fits it from runs scaled per row)
    fp8_rowwise_eff: float = field(default=1.0, metadata={"rule": ("frac", 1e-3, 1.0)})
    # the GPU generation (`GENERATIONS`): which calibration group applies and which measured runs
    # validate it; "" for a GPU no calibration knows
    generation: str = ""
    # what the preset is (`SYSTEM_STATUS`): "" a shipped system; "reference" a seed paper's values
    # (seed 001's a100, h200, b200: its NVS sizes); "projected" or "announced": not shipped
    status: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"system.name = {_fmt(self.name)}: must be a non-empty string")
        if self.generation not in ("", *GENERATIONS):
            raise SpecError(f"system.generation = {_fmt(self.generation)}: must be one of "
                            f"{' | '.join(GENERATIONS)} (or left out for a GPU of none of them)")
        if self.status not in SYSTEM_STATUS:
            raise SpecError(f"system.status = {_fmt(self.status)}: must be one of "
                            f"{' | '.join(s for s in SYSTEM_STATUS if s)} (or left out for a shipped system)")
        _validate("system", self)

    def replace(self, **changes) -> "SystemSpec":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def params(self):
        """The kernels' `System` (float64 scalars)."""
        from kernels.params import System

        return System(*(np.float64(getattr(self, f)) for f in System._fields))


def nvs_sizes(value: Any, system: SystemSpec) -> list[int]:
    """The NVS domain sizes a search asks for, by the one rule of every entry point: None (not
    set) is the system's own `nvs_size` (its preset's, or what the config set); else an int or a
    list of them (a string 'A,B' too). Each is validated as `system.nvs_size`, by `SystemSpec`."""
    if value is None:
        return [system.nvs_size]
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
        value = [int(v) if v.lstrip("-").isdigit() else v for v in value]
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise SpecError("system.nvs_size = []: give at least one NVS size")
    out = [system.replace(nvs_size=v).nvs_size for v in values]
    check_unique("system.nvs_size", out, "NVS size")
    return out


def preset_names(group: str) -> list[str]:
    """The presets of a config group (conf/<group>/*.yaml)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@lru_cache(maxsize=None)
def read_preset(group: str, name: str) -> dict:
    """The fields of preset `name` of config group `group` (model, system, network, nic, prices).

    A preset may start from others of its group with a defaults list, as in Hydra:
    `defaults: [base, _self_]` takes base's fields, then its own (`_self_`, last when not listed),
    nested mappings merged key by key. Every problem is one SpecError line naming the group."""
    return _compose_preset(group, name, ())


def _compose_preset(group: str, name: str, chain: tuple[str, ...]) -> dict:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or ".." in name:
        raise SpecError(f"{group} = {_fmt(name)}: not a preset; valid: {', '.join(preset_names(group))}")
    path = CONF_DIR / group / f"{name}.yaml"
    if not path.is_file():
        raise SpecError(f"{group} = {name!r}: not a preset; valid: {', '.join(preset_names(group))}")
    if name in chain:
        raise SpecError(f"{group}.defaults = {name!r}: circular; chain: {' -> '.join(chain + (name,))}")
    import yaml  # here: a search whose presets came composed does not read YAML

    try:
        data = yaml.safe_load(path.read_bytes())
    except (yaml.YAMLError, OSError) as exc:  # a syntax error, a file that is not text, an unreadable file
        raise SpecError(f"{group} = {name!r}: {path} is not valid YAML ({yaml_problem(exc)})") from None
    if not isinstance(data, dict):
        raise SpecError(f"{group} = {name!r}: {path} must hold a mapping of fields, not "
                        + ("nothing" if data is None else f"a {type(data).__name__}"))
    defaults = data.pop("defaults", None) or []
    if not isinstance(defaults, list) or not all(isinstance(e, str) for e in defaults):
        raise SpecError(f"{group}.defaults = {_fmt(defaults)}: must be a list of {group} presets and _self_")
    out: dict = {}
    for entry in defaults if "_self_" in defaults else [*defaults, "_self_"]:
        out = _merged(out, data if entry == "_self_" else _compose_preset(group, entry, chain + (name,)))
    return out


def _merged(base: Mapping, top: Mapping) -> dict:
    """`base` with the fields of `top`, nested mappings merged key by key."""
    out = dict(base)
    for k, v in top.items():
        out[k] = _merged(out[k], v) if isinstance(out.get(k), Mapping) and isinstance(v, Mapping) else v
    return out


def model_presets() -> list[str]:
    return preset_names("model")


def system_presets() -> list[str]:
    return preset_names("system")


def load_spec(cls, section: str, value, read_preset, overrides: Mapping[str, Any] | None = None,
              noun: str | None = None):
    """A spec of the dataclass `cls` from a preset name (read by `read_preset(name)`), a mapping or
    a spec, with field overrides; validated by `spec_from_mapping`."""
    if isinstance(value, cls):
        data = dataclasses.asdict(value)
    elif isinstance(value, str):
        data = dict(read_preset(value))
    elif isinstance(value, Mapping):
        data = dict(value)
    else:
        raise SpecError(f"{section} = {value!r}: must be a preset name, a mapping or a {cls.__name__}")
    data.update(overrides or {})
    return spec_from_mapping(cls, section, data, noun)


def load_model(model: str | Mapping[str, Any] | ModelSpec, **overrides) -> ModelSpec:
    """A `ModelSpec` from a preset name, a mapping or a spec, with optional field overrides."""
    return load_spec(ModelSpec, "model", model, lambda name: read_preset("model", name), overrides)


def load_system(system: str | Mapping[str, Any] | SystemSpec, **overrides) -> SystemSpec:
    """A `SystemSpec` from a preset name, a mapping or a spec, with optional field overrides (None
    values leave a field as it is)."""
    changes = {k: v for k, v in overrides.items() if v is not None}
    return load_spec(SystemSpec, "system", system, lambda name: read_preset("system", name), changes)
