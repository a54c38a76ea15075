"""The mixture-of-experts presets of 2024-2025 (Qwen3, gpt-oss, Kimi K2, Mixtral 8x22B) and the
systems they are trained on (DGX H800, DGX B300, GB300 NVL72): each loads, its parameter counts match
the published figures and its numbers the sources its YAML cites, and the engine evaluates it. Also
the `head_dim` field their attention needs (heads x head_dim need not be the hidden size)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

import dse
from dse.spec.specs import CONF_DIR, SpecError, load_model, load_system, model_presets, system_presets
from dse.truth.calibration import Calibration, apply_calibration
from dse.truth.placement import resolve_gpu

MOE_MODELS = ("qwen3_30b_a3b", "qwen3_235b_a22b", "gpt_oss_120b", "kimi_k2", "mixtral_8x22b")
NEW_SYSTEMS = ("dgx_h800", "dgx_b300", "gb300_nvl72")
ROOT = Path(__file__).resolve().parents[2]

# -------------------------------------------------------------------------------------------------
# parameter counts

# The published figures: (total, active, tolerance on total, tolerance on active, source).
# Tolerances: the spec's block has LayerNorm shifts that these models (RMSNorm) have not, and lacks
# their QK-Norm scales, QKV biases or attention sinks: under 0.1% (`test_counts_against_the_released_shapes`).
# The rest is the rounding of the published figure: two significant figures (3.3B, 22B, 5.1B, 39B) are
# up to 1.5% off the count they round (Qwen prints 3.35B as 3.3B), hence 2%; three or more (30.5B,
# 116.8B, 141B, 32.6B), 0.5% to 1%. Kimi K2's 1.04T is 1.3% above the 1,026.4B its released shapes hold
# (the spec counts 1,026.4B), hence 1.5%; its 32.6B active is 0.8% under the 32.86B they activate.
PUBLISHED = {
    "qwen3_30b_a3b": (30.5e9, 3.3e9, 0.005, 0.02, "Qwen3 Technical Report (arXiv 2505.09388): 30B-A3B"),
    "qwen3_235b_a22b": (235e9, 22e9, 0.005, 0.02, "Qwen3 Technical Report, section 2: 235B total, 22B activated"),
    "gpt_oss_120b": (116.83e9, 5.13e9, 0.001, 0.001, "gpt-oss model card (arXiv 2508.10925), Table 1"),
    "kimi_k2": (1.04e12, 32.6e9, 0.015, 0.01, "Kimi K2 report (arXiv 2507.20534), Table 2"),
    "mixtral_8x22b": (141e9, 39e9, 0.005, 0.005, "Mistral AI, 'Cheaper, Better, Faster, Stronger' (2024)"),
}


def _active(name: str, m) -> int:
    """The activated parameters as the source counts them: gpt-oss's Table 1 counts the unembedding
    but not the input embedding ("Unembedding parameters are counted towards active, but not
    embeddings"); the others count both, as `ModelSpec.active_params` does."""
    return m.active_params - (m.vocab * m.hidden if name == "gpt_oss_120b" else 0)


@pytest.mark.parametrize("name", MOE_MODELS)
def test_parameter_counts_match_the_published_figures(name):
    total, active, tol_total, tol_active, source = PUBLISHED[name]
    m = load_model(name)
    assert m.total_params == pytest.approx(total, rel=tol_total), source
    assert _active(name, m) == pytest.approx(active, rel=tol_active), source


def _released_count(m, name: str) -> tuple[int, int]:
    """(total, active) of a checkpoint with the spec's shapes, counted in the released layout:
    RMSNorm scales only, no biases except gpt-oss's (QKV and out-projection, experts, router) and its
    per-head sinks, Qwen3's QK-Norm scales, latent attention's two latent norms, DeepSeek-style
    router score biases (Kimi K2). Written apart from `ModelSpec` so that the two can disagree."""
    e, h, L, V = m.hidden, m.heads, m.depth, m.vocab
    if m.mla:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        attn = (e * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * h * qk
                + e * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
                + m.kv_lora_rank * h * (m.qk_nope_head_dim + m.v_head_dim) + h * m.v_head_dim * e)
    else:
        q, kv = h * m.head_dim, 2 * m.kv_heads * m.head_dim
        attn = e * (q + kv) + q * e
        if name.startswith("qwen3"):
            attn += 2 * m.head_dim  # QK-Norm scales
        if name == "gpt_oss_120b":
            attn += q + kv + e + h  # QKV and out-projection biases, sinks
    f = m.expert_width
    expert = 3 * e * f + (2 * f + e if name == "gpt_oss_120b" else 0)
    router = e * m.experts + (m.experts if name in ("gpt_oss_120b", "kimi_k2") else 0)
    moe = (m.experts + m.shared_experts) * expert + router
    dense = 3 * e * m.ffn
    k = m.moe_blocks
    total = L * (attn + 2 * e) + (L - k) * dense + k * moe + 2 * V * e + e
    active = total - k * (m.experts - m.moe_top_k) * expert
    return total, active


# the released checkpoints' shapes, counted by `_released_count` (total, active with both embeddings)
RELEASED = {
    "qwen3_30b_a3b": (30_532_122_624, 3_353_032_704),
    "qwen3_235b_a22b": (235_093_634_560, 22_190_763_520),
    "gpt_oss_120b": (116_829_156_672, 5_711_982_912),
    "kimi_k2": (1_026_408_232_448, 32_861_500_928),
    "mixtral_8x22b": (140_630_071_296, 39_161_468_928),
}


@pytest.mark.parametrize("name", MOE_MODELS)
def test_counts_against_the_released_shapes(name):
    """The spec's count differs from the released layout of the same shapes only by what its block
    has and theirs has not (LayerNorm shifts; GPT-OSS's out-projection and expert biases are its own)
    and the reverse (QK-Norm, sinks, QKV biases): under 0.1%."""
    m = load_model(name)
    total, active = _released_count(m, name)
    assert (total, active) == RELEASED[name]
    assert abs(m.total_params - total) < 1e-3 * total
    assert abs(m.active_params - active) < 1e-3 * active


def test_gpt_oss_active_as_the_model_card_counts():
    m = load_model("gpt_oss_120b")
    total, active = _released_count(m, "gpt_oss_120b")
    assert round(total / 1e7) / 100 == 116.83  # Table 1: 116.83B
    assert round((active - m.vocab * m.hidden) / 1e7) / 100 == 5.13  # Table 1: 5.13B, input embedding left out


# -------------------------------------------------------------------------------------------------
# architecture facts (dse/data/measured/moe_models.md, the released config.json files)

SHAPES = {  # depth, hidden, heads, kv_heads, head_dim, experts, top-k, shared, expert width, dense, vocab, seq_len
    "qwen3_30b_a3b": (48, 2048, 32, 4, 128, 128, 8, 0, 768, 0, 151936, 4096),
    "qwen3_235b_a22b": (94, 4096, 64, 4, 128, 128, 8, 0, 1536, 0, 151936, 4096),
    "gpt_oss_120b": (36, 2880, 64, 8, 64, 128, 4, 0, 2880, 0, 201088, 4096),
    "kimi_k2": (61, 7168, 64, 64, 112, 384, 8, 1, 2048, 1, 163840, 4096),
    "mixtral_8x22b": (56, 6144, 48, 8, 128, 8, 2, 0, 16384, 0, 32768, 65536),
}


@pytest.mark.parametrize("name", MOE_MODELS)
def test_moe_preset_shapes(name):
    m = load_model(name)
    got = (m.depth, m.hidden, m.heads, m.kv_heads, m.head_dim, m.experts, m.moe_top_k, m.shared_experts,
           m.expert_width, m.dense_layers, m.vocab, m.seq_len)
    assert got == SHAPES[name]
    assert m.moe and m.moe_every == 1 and m.gated and not m.tied_embeddings and m.capacity_factor == 1.0
    assert m.mla == (name == "kimi_k2")
    # heads wider than hidden / heads: Qwen3 and gpt-oss only
    assert m.own_head_dim == (name in ("qwen3_30b_a3b", "qwen3_235b_a22b", "gpt_oss_120b"))


def test_training_sets_and_batches():
    """Training tokens where the source gives them; a published batch only where one is stated."""
    tokens = {name: load_model(name).training_tokens for name in MOE_MODELS}
    assert tokens == {"qwen3_30b_a3b": 36e12, "qwen3_235b_a22b": 36e12, "gpt_oss_120b": None,
                      "kimi_k2": 15.5e12, "mixtral_8x22b": None}
    batches = {name: load_model(name).global_batch for name in MOE_MODELS}
    # Kimi K2 section 2.5: "the global batch size was held at 67M tokens", of 4,096-token sequences
    assert batches == {"qwen3_30b_a3b": None, "qwen3_235b_a22b": None, "gpt_oss_120b": None,
                       "kimi_k2": 16384, "mixtral_8x22b": None}
    assert 16384 * 4096 == pytest.approx(67e6, rel=0.002)


@pytest.mark.parametrize("name", MOE_MODELS)
def test_every_value_has_its_source_beside_it(name):
    """Each field line of the preset carries a comment (its source or why it is what it is)."""
    for line in (CONF_DIR / "model" / f"{name}.yaml").read_text().splitlines():
        if re.match(r"^[a-z_]+:", line) and not line.startswith("name:"):
            assert "#" in line, line


# -------------------------------------------------------------------------------------------------
# head_dim

def test_head_dim_defaults_to_hidden_over_heads():
    m = load_model({"name": "toy", "seq_len": 1024, "hidden": 1536, "heads": 12, "depth": 4})
    assert m.head_dim == 128 and not m.own_head_dim
    assert int(m.workload(8).head_dim) == 0  # 0: hidden / heads, the kernels' own rule


def test_head_dim_frees_hidden_from_the_heads():
    toy = {"name": "toy", "seq_len": 1024, "hidden": 2000, "heads": 48, "kv_heads": 8, "depth": 2, "mlp": "swiglu"}
    with pytest.raises(SpecError, match=r"^model.heads = 48: must divide model.hidden = 2000 \(or give model.head_dim\)$"):
        load_model(toy)
    m = load_model({**toy, "head_dim": 64})
    assert m.own_head_dim and int(m.workload(8).head_dim) == 64
    # QKV e -> (h + 2 h_kv) q, out-projection h q -> e, and its bias e
    e, q = 2000, 64
    assert m.attention_params == e * (48 + 16) * q + 48 * q * e + e
    # gpt-oss: 64 heads divide 2880, but its heads are 64 wide, not 45
    g = load_model("gpt_oss_120b")
    assert g.hidden % g.heads == 0 and g.hidden // g.heads == 45 and g.head_dim == 64


def test_head_dim_equal_to_hidden_over_heads_changes_nothing():
    base = load_model("llama3_8b")
    same = load_model("llama3_8b", head_dim=128)
    assert same.workload(64) == base.workload(64) and same.total_params == base.total_params
    point = dict(system="dgx_h100", strategy="tp1d", global_batch=8, n1=8, microbatch=1)
    a, b = dse.evaluate(model="llama3_8b", **point), dse.evaluate(model=same, **point)
    assert a["iteration_time"] == b["iteration_time"] and a["memory"] == b["memory"]


def test_qwen3_attention_shapes_in_the_kernels():
    """Qwen3-30B-A3B on n1 = 4: QKV writes (32 + 2 x 4) x 128 = 5120 features from 2048, 1280 per GPU;
    the out-projection reads 32 x 128 = 4096, 1024 per GPU; the fused core works on 8 local heads of
    128 (2-byte weights, GB)."""
    from kernels.iteration import layer_table
    from kernels.params import PROFILES, Candidates

    m = load_model("qwen3_30b_a3b")
    cand = dict(n1=4, n2=1, n_p=1, n_d=1, microbatch=1, nvs1=4, nvs2=1, nvs_p=1, nvs_d=1, n_b=1, interleave=1,
                recompute=1, seq_par=1, precision=0, zero=1, ep=1)
    c = Candidates(*(np.array([cand[k]]) for k in Candidates._fields))
    t = layer_table("tp1d", c, m.workload(8), load_system("dgx_h100").params(), PROFILES["default"])
    assert float(t["qkv"]["weight"][0]) == pytest.approx(2048 * 5120 / 4 * 2e-9, rel=1e-12)
    assert float(t["vproj"]["weight"][0]) == pytest.approx(4096 / 4 * 2048 * 2e-9, rel=1e-12)
    # the core's FLOPs are affine in the head width: 128 - 64 costs twice 64 - 32
    def core(width):
        w = load_model("qwen3_30b_a3b", head_dim=width).workload(8)
        return float(layer_table("tp1d", c, w, load_system("dgx_h100").params(), PROFILES["default"])["fusedla"]["flops_f"][0])

    assert core(128) - core(64) == pytest.approx(2 * (core(64) - core(32)), rel=1e-9)
    assert float(t["fusedla"]["flops_f"][0]) == core(128) > core(64)


@pytest.mark.parametrize("strategy, profile, where", [("summa", "default", "strategy 'summa'"),
                                                       ("tp1d", "lbnl", "profile 'lbnl'")])
def test_head_dim_is_refused_where_it_is_not_modelled(strategy, profile, where):
    with pytest.raises(SpecError, match=rf"^model.head_dim = 128: heads of a width other than hidden / heads "
                                        rf"\(2048 / 32\) are modelled by Megatron's block in tp1d and tp2d, not by {where}$"):
        dse.evaluate(model="qwen3_30b_a3b", system="dgx_h100", strategy=strategy, profile=profile, global_batch=8,
                     n1=4, microbatch=1, **({"n_b": 4} if strategy == "summa" else {}))


def test_head_dim_with_latent_attention_is_refused():
    with pytest.raises(SpecError, match=r"^model.head_dim = 64: multi-head latent attention sets its head widths"):
        load_model("kimi_k2", head_dim=64)


# -------------------------------------------------------------------------------------------------
# the engine runs each preset

@pytest.mark.parametrize("name", MOE_MODELS)
def test_each_moe_preset_evaluates(name):
    """One small configuration of each model on DGX H100 nodes: 64 GPUs, tensor 4 x pipeline 2 x data
    8, expert parallelism over the 8 replicas; a finite time and memory (a 1T model need not fit)."""
    row = dse.evaluate(model=name, system="dgx_h100", strategy="tp1d", global_batch=16, n1=4, n_p=2, n_d=8,
                       microbatch=1, nvs1=4, nvs_p=1, nvs_d=2)
    assert row["ep"] == 8
    assert math.isfinite(row["iteration_time"]) and row["iteration_time"] > 0
    assert math.isfinite(row["memory"]) and row["memory"] > 0


def test_qwen3_30b_fits_and_the_heads_cost_what_they_should():
    """Qwen3-30B-A3B's wider heads cost more attention than hidden / heads would: the QKV projection
    writes 5120 features instead of 3072 (2048 + 2 x 4 x 64) and the core works on 128 instead of 64."""
    point = dict(system="dgx_h100", strategy="tp1d", global_batch=16, n1=4, n_p=2, n_d=8, microbatch=1, nvs1=4,
                 nvs_p=1, nvs_d=2)
    wide = dse.evaluate(model="qwen3_30b_a3b", **point)
    narrow = dse.evaluate(model=load_model("qwen3_30b_a3b", head_dim=64), **point)
    assert wide["feasible"] and wide["memory"] <= load_system("dgx_h100").hbm_capacity
    assert wide["iteration_time"] > narrow["iteration_time"]
    assert wide["memory"] > narrow["memory"]


# -------------------------------------------------------------------------------------------------
# systems

# Per-GPU numbers and the sources the YAML comments derive them from (NVIDIA prints tensor-core
# rates "with sparsity"; the dense rate is half: H800's 1,979 and 3,958 give 989 and 1,979, as
# dgx_h100.yaml rounds them).
SOURCES = {
    "dgx_h800": "NVIDIA H800 datasheet (SXM): H100 rates, NVLink 400 GB/s both ways; DeepSeek-V3 report "
                "(arXiv 2412.19437) 3.1: 8 GPUs a node on NVLink/NVSwitch, IB across nodes; 3.2.2: IB 50 GB/s",
    "dgx_b300": "NVIDIA HGX B300 (eight GPUs): 36 PFLOPS BF16 and 72 PFLOPS FP8 with sparsity, 600 TFLOPS FP32, "
                "NVLink 1.8 TB/s a GPU; DGX B300 datasheet: 2.3 TB of GPU memory, ConnectX-8 at 800 Gb/s per GPU; "
                "NVIDIA Technical Blog 'Inside NVIDIA Blackwell Ultra': 288 GB HBM3E at 8 TB/s",
    "gb300_nvl72": "NVIDIA GB300 NVL72 (72 GPUs): 360 PFLOPS BF16 and 720 PFLOPS FP8 with sparsity, 576 TB/s HBM3e, "
                   "130 TB/s NVLink, 72 ConnectX-8 at 800 Gb/s; 'Inside NVIDIA Blackwell Ultra': 288 GB per GPU",
}
SYSTEM_NUMBERS = {
    "dgx_h800": dict(matrix_flops=989, matrix_flops_fp8=1979, vector_flops=2 * 67, hbm_bandwidth=3350,
                     hbm_capacity=85.52, nvlink_bandwidth=400 / 2, ib_bandwidth=400 / 8, nic_factor=1, nvs_size=8,
                     generation="hopper", fp8_weight_copies=2.0),
    "dgx_b300": dict(matrix_flops=36e3 / 8 / 2, matrix_flops_fp8=72e3 / 8 / 2, vector_flops=2 * 600 / 8,
                     hbm_bandwidth=8000, hbm_capacity=288, nvlink_bandwidth=1800 / 2, ib_bandwidth=800 / 8,
                     nic_factor=1, nvs_size=8, generation="blackwell_ultra", fp8_weight_copies=1.0),
    "gb300_nvl72": dict(matrix_flops=360e3 / 72 / 2, matrix_flops_fp8=720e3 / 72 / 2, vector_flops=160,
                        hbm_bandwidth=576e3 / 72, hbm_capacity=288, nvlink_bandwidth=900, ib_bandwidth=800 / 8,
                        nic_factor=1, nvs_size=72, generation="blackwell_ultra", fp8_weight_copies=1.0),
}
# efficiency and latency fields copied from dgx_h100.yaml
DGX_H100_FIELDS = ("nvlink_eff", "nvlink_latency", "ib_eff", "ib_latency", "compute_eff", "flop_latency",
                   "hbm_eff", "element_size", "mask_element_size", "matmul_knee", "fp8_eff")


@pytest.mark.parametrize("name", NEW_SYSTEMS)
def test_system_numbers_are_the_cited_ones(name):
    s = load_system(name)
    assert s.name == name
    for k, v in SYSTEM_NUMBERS[name].items():
        assert getattr(s, k) == v, (k, SOURCES[name])
    h100 = load_system("dgx_h100")
    for k in DGX_H100_FIELDS:
        assert getattr(s, k) == getattr(h100, k), k


def test_h800_is_the_h100_with_a_narrower_nvlink():
    h800, h100 = load_system("dgx_h800"), load_system("dgx_h100")
    differ = {k for k in SYSTEM_NUMBERS["dgx_h800"] if getattr(h800, k) != getattr(h100, k)}
    assert differ == {"nvlink_bandwidth"}
    assert 2 * h800.nvlink_bandwidth == 400 and 2 * h100.nvlink_bandwidth == 900


def test_rack_and_node_totals():
    b = load_system("dgx_b300")  # DGX B300: 2.3 TB of HBM3e, 14.4 TB/s of NVLink for eight GPUs
    assert 8 * b.hbm_capacity == pytest.approx(2.3e3, rel=0.002) and 8 * 2 * b.nvlink_bandwidth == 14400
    g = load_system("gb300_nvl72")  # 576 TB/s of HBM3e and 130 TB/s of NVLink for 72 GPUs
    assert 72 * g.hbm_bandwidth == 576e3 and 72 * 2 * g.nvlink_bandwidth == pytest.approx(130e3, rel=0.01)
    # the training rates of Blackwell Ultra are Blackwell's (dgx_b200, gb200_nvl72); the HBM and NIC are not
    for ultra, blackwell in (("dgx_b300", "dgx_b200"), ("gb300_nvl72", "gb200_nvl72")):
        u, w = load_system(ultra), load_system(blackwell)
        assert (u.matrix_flops, u.matrix_flops_fp8) == (w.matrix_flops, w.matrix_flops_fp8)
        assert u.hbm_capacity > w.hbm_capacity and u.ib_bandwidth == 2 * w.ib_bandwidth


def test_blackwell_ultra_takes_blackwells_calibration_and_says_it_is_not_validated():
    blackwell = {"compute_eff": 0.71, "matmul_knee": 0.4, "hbm_eff": 0.8, "fp8_eff": 0.9}
    cal = Calibration(name="t", values={"compute_eff": 0.6, "matmul_knee": 0.3, "hbm_eff": 0.7, "fp8_eff": 0.8},
                      in_sample={"mean": 0.1, "max": 0.2}, leave_one_model_out={"mean": 0.1, "max": 0.2},
                      provenance={"runs": 3},
                      groups={"blackwell/megatron": blackwell},
                      bands={"blackwell/bf16/megatron": {"mean": 0.05, "max": 0.1, "runs": 3}})
    for name in ("dgx_b300", "gb300_nvl72"):
        s = apply_calibration(load_system(name), cal)
        assert {k: getattr(s, k) for k in blackwell} == blackwell
        assert cal.band_text(s.generation, "bf16") == "not validated on blackwell_ultra/bf16/megatron"


@pytest.mark.parametrize("alias, preset", [("H800", "dgx_h800"), ("b300", "dgx_b300"), ("GB300", "gb300_nvl72")])
def test_gpu_aliases(alias, preset):
    assert resolve_gpu(alias) == preset


@pytest.mark.parametrize("system", NEW_SYSTEMS)
def test_each_new_system_evaluates_in_bf16_and_fp8(system):
    point = dict(model="qwen3_30b_a3b", system=system, strategy="tp1d", global_batch=16, n1=4, n_d=2,
                 microbatch=1)
    bf16, fp8 = dse.evaluate(**point), dse.evaluate(**point, precision="fp8")
    assert bf16["feasible"] and bf16["memory"] <= load_system(system).hbm_capacity
    assert math.isfinite(bf16["iteration_time"]) and math.isfinite(fp8["iteration_time"])
    assert fp8["t_compute"] < bf16["t_compute"]  # the matmuls at the FP8 rate


# -------------------------------------------------------------------------------------------------
# the presets are listed where users look for them

def test_new_presets_exist_and_are_listed_in_the_docs():
    assert set(MOE_MODELS) <= set(model_presets()) and set(NEW_SYSTEMS) <= set(system_presets())
    presets_page = (ROOT / "docs" / "presets.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for name in MOE_MODELS + NEW_SYSTEMS:
        assert name in presets_page, name
        assert name in readme, name
    accuracy = (ROOT / "docs" / "accuracy.md").read_text()
    for alias, preset in (("H800", "dgx_h800"), ("B300", "dgx_b300"), ("GB300", "gb300_nvl72")):
        assert f"`{alias}` → `{preset}`" in accuracy
