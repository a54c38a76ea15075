"""`profile.act_fp8_store` (Megatron-core's --activation-func-fp8-input-store; DeepSeek-V3's FP8
SwiGLU inputs): a gated MLP keeps its activation's 2 f / n1 input features per token as 1-byte
copies, with a cast pass each way. Expected values are closed forms written out here."""

from __future__ import annotations

import pytest

import dse
from dse.spec.specs import SpecError, load_model
from kernels.iteration import layer_table
from helpers import first as f, one_candidate
from kernels.params import PROFILES

DEFAULT = PROFILES["default"]
FP8_STORE = DEFAULT._replace(act_fp8_store=True)
GB = 1e-9

BASE = dict(n1=4, n2=1, n_p=1, n_d=2, microbatch=2, nvs1=4, nvs2=1, nvs_p=1, nvs_d=2, n_b=1, interleave=1,
            recompute=1, seq_par=1, precision=0, zero=1, ep=1)


def table(model, profile, strategy="tp1d", **kw):
    m = load_model(model)
    s = dse.load_system("dgx_h100").params()
    return layer_table(strategy, one_candidate(BASE, **kw), m.workload(64), s, profile, "two_tier", m.arch)


@pytest.mark.parametrize("strategy, precision", [("tp1d", 0), ("tp1d", 1), ("tp2d", 1), ("summa", 0)])
def test_swiglu_input_kept_in_one_byte_with_a_cast_each_way(strategy, precision):
    """Llama 3 8B (f = 14,336, l = 8,192), b = 2, n1 = 4, n2 = 1: the activation's input is
    2 b l f / n1 elements in every strategy, stored at 2 bytes plainly and at 1 byte with the switch,
    in BF16 and FP8 alike; the forward reads them at 2 bytes and writes the copy at 1 (3 bytes an
    element), the backward reads the copy and writes 2 bytes again (3 more)."""
    m = load_model("llama3_8b")
    assert m.ffn == 14336 and m.seq_len == 8192
    inputs = 2 * 2 * 8192 * (14336 // 4)
    plain = table("llama3_8b", DEFAULT, strategy, precision=precision)
    fp8 = table("llama3_8b", FP8_STORE, strategy, precision=precision)
    assert f(plain["act1"]["activation"]) == pytest.approx(inputs * 2 * GB, rel=1e-12)
    assert f(fp8["act1"]["activation"]) == pytest.approx(inputs * 1 * GB, rel=1e-12)
    for d in ("traffic_f", "traffic_b"):
        assert f(fp8["act1"][d]) - f(plain["act1"][d]) == pytest.approx(inputs * 3 * GB, rel=1e-9)
    # nothing else of the block changes
    for name in plain:
        if name != "act1":
            for k in ("activation", "traffic_f", "traffic_b", "flops_f", "flops_b"):
                assert f(fp8[name][k]) == f(plain[name][k]), (name, k)


def test_gelu_mlp_is_untouched():
    """GPT-3's GELU MLP has no gated input to keep: the switch changes nothing."""
    plain, fp8 = table("gpt3_175b", DEFAULT), table("gpt3_175b", FP8_STORE)
    for name in plain:
        for k in ("activation", "traffic_f", "traffic_b"):
            assert f(fp8[name][k]) == f(plain[name][k]), (name, k)


def test_experts_and_shared_experts_keep_one_byte_copies():
    """DeepSeek-V3 (e = 7,168, 256 experts of width 2,048, top-8, one shared expert, l = 4,096),
    b = 1, n1 = 1, ETP = 1, ep = 8: the busiest GPU's experts take the 8 l routed copies, their
    activation's input 2 x 2,048 features each; the shared expert 2 x 2,048 on each of the l tokens."""
    kw = dict(n1=1, nvs1=1, n_d=8, nvs_d=8, microbatch=1, ep=8)
    profile = DEFAULT._replace(expert_tp=False)
    plain = table("deepseek_v3", profile, **kw)
    fp8 = table("deepseek_v3", profile._replace(act_fp8_store=True), **kw)
    routed = 8 * 4096 * 2 * 2048
    shared = 4096 * 2 * 2048
    assert f(plain["expert-act1"]["activation"]) == pytest.approx(routed * 2 * GB, rel=1e-12)
    assert f(fp8["expert-act1"]["activation"]) == pytest.approx(routed * 1 * GB, rel=1e-12)
    assert f(plain["shared-act1"]["activation"]) == pytest.approx(shared * 2 * GB, rel=1e-12)
    assert f(fp8["shared-act1"]["activation"]) == pytest.approx(shared * 1 * GB, rel=1e-12)


def test_a_whole_configuration_stores_less_and_casts_more():
    """One configuration evaluated both ways (n_p = 1, no recomputation: every block keeps one
    microbatch's activations): the activation memory falls by 32 blocks x 2 b l f / n1 input
    elements (gate and up, b = 2), one byte saved each, and the iteration is slower (the casts are HBM passes)."""
    common = dict(model="llama3_8b", system="dgx_h100", strategy="tp1d", n1=4, n_p=1, n_d=2, microbatch=2,
                  nvs1=4, nvs_p=1, nvs_d=2, recompute="none", precision="fp8", global_batch=64)
    plain = dse.evaluate(**common)
    fp8 = dse.evaluate(**common, profile=FP8_STORE)
    saved = 32 * 2 * 2 * 8192 * (14336 // 4) * 1 * GB  # 32 blocks, one microbatch, 1 byte saved per element
    assert plain["mem_activations"] - fp8["mem_activations"] == pytest.approx(saved, rel=1e-9)
    assert fp8["iteration_time"] > plain["iteration_time"]


def test_refused_outside_megatrons_block():
    """Seed 001's block (profile lbnl) has no gated MLP under Megatron's layers: one line, no compute."""
    with pytest.raises(SpecError, match=r"profile.act_fp8_store = true: .*Megatron's block only"):
        dse.evaluate(model="gpt3_1t", system="b200", strategy="tp1d",
                     profile=PROFILES["lbnl"]._replace(act_fp8_store=True), n1=4, n_p=128, n_d=8, microbatch=1,
                     nvs1=4, nvs_p=2, nvs_d=1, nvs_size=8)


def test_a_measured_run_takes_the_column(tmp_path):
    """A measured run's `act_fp8_store` column reaches the engine: the same Llama 3 8B run with it
    predicts less activation memory by the blocks' halved SwiGLU inputs, and a GELU run with it is
    refused in one line naming the column."""
    from helpers import GOOD, HEADER, write_csv
    import dse.truth.measured as dm

    llama = {**GOOD, "model": "llama3-8b", "heads": 32, "hidden": 4096, "layers": 32, "ffn": 14336, "seq_len": 8192,
             "vocab": 128256, "kv_heads": 8, "mlp": "swiglu", "tp": 4, "pp": 1, "dp": 2, "gpus": 8,
             "global_batch": 64, "micro_batch": 2, "interleave": 1, "recompute": "none",
             "sequence_parallel": "true", "gpu": "H100-SXM", "measured_iter_s": 10.0}
    header = (*HEADER, "kv_heads", "mlp", "act_fp8_store")
    rows = [{**llama, "act_fp8_store": ""}, {**llama, "act_fp8_store": "true", "measured_iter_s": 10.5},
            {**GOOD, "kv_heads": "", "mlp": "gelu", "act_fp8_store": "yes"}]
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", rows, header))
    assert [str(e) for e in runs.errors] == [
        f"row 3 ({GOOD['model']}): act_fp8_store = true: only a gated MLP (mlp swiglu) keeps an activation input "
        "to store in FP8 (the run's mlp is gelu); leave it blank"]
    frame = dm.predict(runs).frame
    mem = frame["mem_activations"].to_list()
    saved = 32 * 2 * 2 * 8192 * (14336 // 4) * 1 * GB  # blocks x (gate, up) x b x l x f / tp, one byte each
    assert mem[0] - mem[1] == pytest.approx(saved, rel=1e-9)
