"""The model and system presets of real products: Llama 3, Mixtral 8x7B; DGX H200, DGX B200, GB200
NVL72, MI300X. Each loads and validates, its parameter count matches the published total, its
numbers are the ones its YAML cites, and the engine runs it end to end (search, FP8 evaluation)."""

from __future__ import annotations

import math

import pytest

import dse
from dse.spec.specs import ModelSpec, SpecError, SystemSpec, load_model, load_system

NEW_MODELS = ("llama3_8b", "llama3_70b", "llama3_405b", "mixtral_8x7b")
NEW_SYSTEMS = ("dgx_h200", "dgx_b200", "gb200_nvl72", "mi300x")

# Published parameter totals. Llama 3: Dubey et al. 2024 and the released checkpoints (Hugging Face
# meta-llama/Meta-Llama-3-8B, Meta-Llama-3-70B, Llama-3.1-405B: 8.03B, 70.6B, 405.9B);
# Mixtral 8x7B: 46.7B total (Mistral AI, "Mixtral of experts", 2023; Jiang et al. 2024 round to 47B).
PUBLISHED_TOTAL = {
    "llama3_8b": 8.03e9,
    "llama3_70b": 70.6e9,
    "llama3_405b": 405.9e9,
    "mixtral_8x7b": 46.7e9,
}

# The exact counts of the released checkpoints (no biases, RMSNorm with a scale only). The presets
# say `bias: false`; the spec's norms are LayerNorms, whose shifts add 2 e per block and e for the
# final norm.
CHECKPOINT = {
    "llama3_8b": 8_030_261_248,
    "llama3_70b": 70_553_706_496,
    "llama3_405b": 405_853_388_800,
    "mixtral_8x7b": 46_702_792_704,
}

# Table 3 of Dubey et al. 2024 (Llama 3) and Table 1 of Jiang et al. 2024 (Mixtral):
# depth, hidden, ffn, heads, kv_heads, vocab, seq_len
SHAPES = {
    "llama3_8b": (32, 4096, 14336, 32, 8, 128256, 8192),
    "llama3_70b": (80, 8192, 28672, 64, 8, 128256, 8192),
    "llama3_405b": (126, 16384, 53248, 128, 8, 128256, 8192),
    "mixtral_8x7b": (32, 4096, 14336, 32, 8, 32000, 32768),
}


def _checkpoint_count(m: ModelSpec) -> int:
    """Parameters of a Llama/Mixtral checkpoint of the spec's shape: Q, K, V, O without biases, E
    SwiGLU experts (3 e f each) and the router (e E) per block, two RMSNorm scales per block, the
    final RMSNorm, untied input and output embeddings."""
    e, f, kv = m.hidden, m.ffn, m.kv_heads * m.head_dim
    experts = m.experts or 1
    block = 2 * e * e + 2 * e * kv + experts * 3 * e * f + (e * experts if m.moe else 0) + 2 * e
    return m.depth * block + 2 * m.vocab * e + e


# -------------------------------------------------------------------------------------------------
# models


@pytest.mark.parametrize("name", NEW_MODELS)
def test_model_preset_loads_and_validates(name):
    m = load_model(name)
    assert isinstance(m, ModelSpec) and m.name == name
    assert (m.depth, m.hidden, m.ffn, m.heads, m.kv_heads, m.vocab, m.seq_len) == SHAPES[name]
    assert m.mlp == "swiglu" and m.gated
    assert m.tied_embeddings is False and m.causal is True
    assert m.head_dim == 128
    m.workload(1024)  # the kernels' container builds


@pytest.mark.parametrize("name", NEW_MODELS)
def test_total_params_within_one_percent_of_published(name):
    total = load_model(name).total_params
    assert total == pytest.approx(PUBLISHED_TOTAL[name], rel=0.01)


@pytest.mark.parametrize("name", NEW_MODELS)
def test_total_params_against_the_checkpoint(name):
    """The shape reproduces the released checkpoint exactly; the spec's count differs from it only by
    its LayerNorm shifts, (2 depth + 1) e."""
    m = load_model(name)
    assert _checkpoint_count(m) == CHECKPOINT[name]
    assert m.total_params - CHECKPOINT[name] == (2 * m.depth + 1) * m.hidden


def test_llama3_training_set():
    for name in ("llama3_8b", "llama3_70b", "llama3_405b"):
        assert load_model(name).training_tokens == 15.6e12
        assert load_model(name).samples == 15.6e12 / 8192
    # 6 N D for the 405B is the paper's 3.8e25 FLOPs of pre-training compute
    assert 6 * 405e9 * load_model("llama3_405b").training_tokens == pytest.approx(3.8e25, rel=0.01)


def test_mixtral_experts():
    m = load_model("mixtral_8x7b")
    assert m.moe and (m.experts, m.moe_every, m.moe_top_k, m.capacity_factor) == (8, 1, 2, 1.0)
    assert m.training_tokens is None and m.samples is None  # not published
    # 12.9B active per token (Mistral AI): the blocks with 2 of 8 experts, plus the embeddings
    inactive = m.depth * (m.experts - m.moe_top_k) * 3 * m.hidden * m.ffn
    assert _checkpoint_count(m) - inactive == pytest.approx(12.9e9, rel=0.01)


# -------------------------------------------------------------------------------------------------
# systems

# per-GPU numbers as the YAML comments derive them from the vendors' publications
SYSTEM_NUMBERS = {
    "dgx_h200": dict(matrix_flops=989.0, matrix_flops_fp8=1979.0, vector_flops=134.0, hbm_bandwidth=4800.0,
                     hbm_capacity=round(143771 * 2**20 / 1e9, 2), nvlink_bandwidth=450.0, ib_bandwidth=50.0, nic_factor=1, nvs_size=8),
    "dgx_b200": dict(matrix_flops=2250.0, matrix_flops_fp8=4500.0, vector_flops=150.0, hbm_bandwidth=8000.0,
                     hbm_capacity=round(183359 * 2**20 / 1e9, 2), nvlink_bandwidth=900.0, ib_bandwidth=50.0, nic_factor=1, nvs_size=8),
    "gb200_nvl72": dict(matrix_flops=2500.0, matrix_flops_fp8=5000.0, vector_flops=160.0, hbm_bandwidth=8000.0,
                        hbm_capacity=round(189471 * 2**20 / 1e9, 2), nvlink_bandwidth=900.0, ib_bandwidth=50.0, nic_factor=1, nvs_size=72),
    "mi300x": dict(matrix_flops=1307.4, matrix_flops_fp8=2614.9, vector_flops=163.4, hbm_bandwidth=5300.0,
                   hbm_capacity=192.0, nvlink_bandwidth=448.0, ib_bandwidth=50.0, nic_factor=1, nvs_size=8),
}
# efficiency and latency fields copied from dgx_h100.yaml
DGX_H100_FIELDS = ("nvlink_eff", "nvlink_latency", "ib_eff", "ib_latency", "compute_eff", "flop_latency",
                   "hbm_eff", "element_size", "mask_element_size", "matmul_knee")


@pytest.mark.parametrize("name", NEW_SYSTEMS)
def test_system_preset_loads_and_validates(name):
    s = load_system(name)
    assert isinstance(s, SystemSpec) and s.name == name
    for k, v in SYSTEM_NUMBERS[name].items():
        assert getattr(s, k) == v, k
    h100 = load_system("dgx_h100")
    for k in DGX_H100_FIELDS:
        assert getattr(s, k) == getattr(h100, k), k
    assert float(s.params().matrix_flops) == s.matrix_flops


def test_dense_rates_are_half_the_sparse_figures():
    # NVIDIA prints tensor-core rates "with sparsity": per GPU 1,979 / 3,958 (H200), 4.5 / 9 PFLOPS
    # (HGX B200), 5 / 10 PFLOPS (GB200); AMD prints 2,614.9 / 5,229.8 (MI300X, with sparsity)
    sparse = {"dgx_h200": (1979, 3958), "dgx_b200": (4500, 9000), "gb200_nvl72": (5000, 10000),
              "mi300x": (2614.9, 5229.8)}
    for name, (bf16, fp8) in sparse.items():
        s = load_system(name)
        assert s.matrix_flops == pytest.approx(bf16 / 2, abs=0.6)
        assert s.matrix_flops_fp8 == pytest.approx(fp8 / 2, abs=0.6)


def test_rack_and_node_totals():
    # DGX B200: "1,440 GB" (GiB: the presets hold GB of 1e9 B, as nvidia-smi's MiB give them) and
    # 64 TB/s of HBM3e, 14.4 TB/s of NVLink (both directions) for 8 GPUs
    gib = 1e9 / 2**30
    b = load_system("dgx_b200")
    assert 8 * b.hbm_capacity * gib == pytest.approx(1440, rel=0.01)
    assert 8 * b.hbm_bandwidth == 64000 and 8 * 2 * b.nvlink_bandwidth == 14400
    # GB200 NVL72: ~13.4 TB (GiB) and 576 TB/s of HBM3e, 130 TB/s of NVLink for 72 GPUs
    g = load_system("gb200_nvl72")
    assert 72 * g.hbm_capacity * gib == pytest.approx(13.4e3, rel=0.01)
    assert 72 * g.hbm_bandwidth == 576e3
    assert 72 * 2 * g.nvlink_bandwidth == pytest.approx(130e3, rel=0.01)
    # MI300X: seven Infinity Fabric links of 128 GB/s (both directions), 896 GB/s per GPU
    assert 2 * load_system("mi300x").nvlink_bandwidth == 7 * 128


# -------------------------------------------------------------------------------------------------
# end to end

COLUMNS = ("n1", "n_p", "n_d", "microbatch", "iteration_time", "throughput", "memory", "feasible")


def _best(model, system, n_gpus, global_batch):
    top = dse.search(model=model, system=system, n_gpus=n_gpus, global_batch=global_batch,
                     strategy="tp1d", top_k=1)
    assert top.height == 1, f"{model} on {system}: no feasible configuration"
    row = top.row(0, named=True)
    assert row["feasible"] and row["rank"] == 1
    # tp1d's n2 is Megatron's context-parallel degree cp, which the default search now weighs too
    # (Llama 3 70B on 1,024 H100s picks cp = 4 for its 8k sequences)
    assert row["n1"] * row["n2"] * row["n_p"] * row["n_d"] == n_gpus
    assert math.isfinite(row["iteration_time"]) and row["iteration_time"] > 0
    system_spec = load_system(system)
    assert 0 < row["memory"] <= system_spec.hbm_capacity
    return row


def test_search_llama3_70b_on_dgx_h100():
    row = _best("llama3_70b", "dgx_h100", 1024, 1024)
    assert row["n1"] <= 8  # tensor parallelism is capped by the 8 key/value heads
    # model FLOPs utilisation: 6 N per token plus causal attention, against the 989 TFLOP/s peak
    m = load_model("llama3_70b")
    flops_per_token = 6 * m.total_params + 6 * m.depth * m.seq_len * m.hidden
    mfu = row["throughput"] * m.seq_len * flops_per_token / (1024 * 989e12)
    assert 0.2 < mfu < 0.9
    assert row["training_days"] == pytest.approx(m.samples / row["throughput"] / 86400, rel=1e-9)


def test_search_mixtral_8x7b_on_dgx_h100():
    """The MoE path: SwiGLU experts, top-2 routing, every block MoE, expert parallelism (tp1d)."""
    row = _best("mixtral_8x7b", "dgx_h100", 256, 256)
    assert row["n1"] <= 8
    assert row["training_days"] is None  # no training set published: no run (null, as the dataset schema says)


@pytest.mark.parametrize("system", NEW_SYSTEMS)
def test_fp8_evaluates_where_the_system_has_an_fp8_rate(system):
    point = dict(model="llama3_8b", system=system, strategy="tp1d", global_batch=8, n1=8, n_d=1, n_p=1,
                 microbatch=1)
    bf16 = dse.evaluate(**point, precision="bf16")
    fp8 = dse.evaluate(**point, precision="fp8")
    assert fp8["precision"] == 1 and bf16["precision"] == 0
    assert fp8["feasible"] and bf16["feasible"]
    assert fp8["t_compute"] < bf16["t_compute"]  # the matmuls run at the FP8 rate
    # at tp 8 and one sequence the faster GEMMs hide less of the tensor-parallel collectives and the
    # casts add HBM traffic, so FP8 need not win there (Blackwell: it does not); at tp 2, GEMMs four
    # times as wide per GPU and fewer collectives, it does
    wide = dict(point, n1=2, n_d=4, nvs1=2, nvs_d=4)
    assert dse.evaluate(**wide, precision="fp8")["iteration_time"] < dse.evaluate(**wide, precision="bf16")["iteration_time"]


@pytest.mark.parametrize("system", ("a100", "dgx_a100_80gb"))
def test_fp8_refused_without_an_fp8_rate(system):
    with pytest.raises(SpecError, match=r"precision = fp8: system .* has no FP8 rate"):
        dse.evaluate(model="llama3_8b", system=system, nvs_size=8, strategy="tp1d", global_batch=8, n1=8,
                     microbatch=1, precision="fp8")
    # the same point in BF16 runs
    assert dse.evaluate(model="llama3_8b", system=system, nvs_size=8, strategy="tp1d", global_batch=8, n1=8,
                        microbatch=1)["iteration_time"] > 0


def test_summa_runs_grouped_query_attention_and_swiglu():
    """SUMMA's linears take Llama 3 8B's shapes: QKV writes e + 2 h_kv e/h = 6144 features, the
    gated MLP's first projection 2 f = 28672; on a 2 x 4 grid (n2 = 2 sequence, n1 = 4 feature
    shards) each GPU holds floor(din/n2) x floor(dout/n1) of each weight, 2 bytes per element."""
    import numpy as np

    from kernels.iteration import layer_table
    from kernels.params import PROFILES, Candidates

    m = load_model("llama3_8b")
    cand = dict(n1=4, n2=2, n_p=1, n_d=1, microbatch=1, nvs1=4, nvs2=2, nvs_p=1, nvs_d=1, n_b=4, interleave=1,
                recompute=1, seq_par=1, precision=0, zero=1, ep=1)
    c = Candidates(*(np.array([cand[k]]) for k in Candidates._fields))
    s = load_system("dgx_h100").params()
    t = layer_table("summa", c, m.workload(8), s, PROFILES["default"])
    gb = 1e-9
    assert float(t["qkv"]["weight"][0]) == pytest.approx(2048 * 1536 * 2 * gb, rel=1e-12)
    assert float(t["fc1"]["weight"][0]) == pytest.approx(2048 * 7168 * 2 * gb, rel=1e-12)
    assert float(t["fc2"]["weight"][0]) == pytest.approx(7168 * 1024 * 2 * gb, rel=1e-12)
    # SwiGLU on b (l/n2) (f/n1) = 4096 x 3584 outputs: 5 FLOPs each forward, both inputs stored
    assert float(t["act1"]["flops_f"][0]) == pytest.approx(5 * 4096 * 3584 * 1e-12, rel=1e-12)
    assert float(t["act1"]["activation"][0]) == pytest.approx(2 * 4096 * 3584 * 2 * gb, rel=1e-12)
    row = dse.evaluate(model="llama3_8b", system="dgx_h100", strategy="summa", global_batch=8,
                       **{k: cand[k] for k in ("n1", "n2", "n_p", "n_d", "microbatch", "n_b")})
    assert row["feasible"] and row["iteration_time"] > 0


def test_every_strategy_searches_llama3():
    """The default study over every strategy answers for a GQA / SwiGLU model (summa included)."""
    for strategy in ("tp1d", "tp2d", "summa"):
        top = dse.search(model="llama3_8b", system="dgx_h100", strategy=strategy, n_gpus=64, global_batch=256,
                         top_k=1)
        assert top.height == 1 and top.row(0, named=True)["feasible"], strategy


#: A sensible scale for each model: GPUs and global batch (sequences) of a run people plan.
SCALE = {"llama3_8b": (64, 512), "llama3_70b": (1024, 1024), "llama3_405b": (16384, 2048),
         "mixtral_8x7b": (256, 256), "deepseek_v3": (2048, 1920)}


@pytest.mark.slow
@pytest.mark.parametrize("system", ("dgx_h100",) + NEW_SYSTEMS)
@pytest.mark.parametrize("model", tuple(SCALE))
def test_every_new_model_on_every_new_system_has_a_best_configuration(model, system):
    """Each model x system pair at its scale: a feasible optimum whose memory fits the GPU and whose
    degrees multiply to the GPU count (tp1d, the strategy every model takes)."""
    n_gpus, batch = SCALE[model]
    top = dse.search(model=model, system=system, n_gpus=n_gpus, global_batch=batch, strategy="tp1d", top_k=1)
    assert top.height == 1, f"{model} on {system}: nothing fits"
    r = top.row(0, named=True)
    assert r["feasible"] and 0 < r["memory"] <= load_system(system).hbm_capacity
    assert r["n1"] * r["n2"] * r["n_p"] * r["n_d"] == n_gpus
