"""The mechanisms that carry the calibration from DGX A100 to later GPUs and runs, against closed
forms: the GEMM knee in machine balances, fused attention at its own efficiency, Transformer
Engine's FP8 casts, tensor-parallel collectives pipelined with GEMMs, interleaved pipeline
transfers overlapped with compute; and the held-out published H100 FP8 runs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import dse
import dse.truth.measured as dm
from kernels.iteration import layer_table
from kernels.params import PROFILES, Candidates
from kernels.roofline import gemm_knee

PLAIN = PROFILES["default"]._replace(embeddings=False, memory_reserve=0.0, calibration="none")
MODEL = dict(name="gpt_test", seq_len=2048, hidden=4096, heads=32, depth=4, ffn=16384, vocab=51200)


def cand(**kw):
    c = dict(n1=1, n2=1, n_p=1, n_d=1, microbatch=1, nvs1=1, nvs2=1, nvs_p=1, nvs_d=1, n_b=1, interleave=1,
             recompute=1, seq_par=1, precision=0, zero=1, ep=1)
    c.update(kw)
    return Candidates(*(np.array([c[k]]) for k in Candidates._fields))


def test_gemm_knee_is_counted_in_machine_balances():
    """K_0 = matmul_knee x peak / bandwidth: A100 80GB 312 TFLOP/s over 2,039 GB/s = 153.0 FLOP/B,
    H100 SXM 989 over 3,350 = 295.2 FLOP/B (the datasheets' figures)."""
    a100 = dse.load_system({"name": "a", **_fields("dgx_a100_80gb"), "matmul_knee": 2.0}).params()
    h100 = dse.load_system({"name": "h", **_fields("dgx_h100"), "matmul_knee": 2.0}).params()
    assert float(gemm_knee(a100)) == pytest.approx(2.0 * 312e3 / 2039.0, rel=1e-12)
    assert float(gemm_knee(h100)) == pytest.approx(2.0 * 989e3 / 3350.0, rel=1e-12)


def _fields(name):
    from dataclasses import asdict

    d = asdict(dse.load_system(name))
    d.pop("name")
    return d


@pytest.mark.parametrize("strategy", ["tp1d", "tp2d", "summa"])
def test_fused_attention_runs_at_its_own_efficiency(strategy):
    """Under flash attention the core's time is its matmul FLOPs at attention_eff of the peak, in
    every strategy: forward 4 b h s^2 q, backward 10 b h s^2 q, causal keeping (s + 1) / (2 s) of them."""
    m = dse.load_model(MODEL)
    s = dse.load_system("dgx_h100").params()
    t = layer_table(strategy, cand(), m.workload(1), s, PLAIN._replace(attention_eff=0.5, attention_tiles=0.0))
    b, h, l, q = 1, 32, 2048, 128
    keep = (l + 1) / (2 * l) if m.causal else 1.0
    fwd = 4 * b * h * l * l * q * keep * 1e-12
    peak = 0.5 * 989.0
    assert float(t["fusedla"]["t_f"][0]) == pytest.approx(2.0e-5 + fwd / peak, rel=1e-9)
    assert float(t["fusedla"]["t_b"][0]) == pytest.approx(2.0e-5 + 2.5 * fwd / peak, rel=1e-9)
    # 0: the system's compute_eff, as before the field existed
    off = layer_table(strategy, cand(), m.workload(1), s, PLAIN._replace(attention_eff=0.0))
    assert float(off["fusedla"]["t_f"][0]) < float(t["fusedla"]["t_f"][0])


@pytest.mark.parametrize("strategy", ["tp1d", "tp2d", "summa"])
@pytest.mark.parametrize("hidden, share", [(2048, 0.80), (3072, 0.90), (6144, 0.73), (8192, 0.73)])
def test_fused_attention_efficiency_follows_the_head_width(strategy, hidden, share):
    """32 heads of 64, 96, 192 and 256: the cuDNN kernel measured on an H100 (docs/gpu.md run 20) reaches
    0.80 (width 64) and 0.73 (192) of its rate at width 128; 96 is halfway to 64 (0.90); 256, beyond the
    widths measured, keeps 192's. The core's forward at 0.5 x that share of the 989 TFLOP/s peak."""
    m = dse.load_model(dict(MODEL, hidden=hidden, ffn=4 * hidden))
    s = dse.load_system("dgx_h100").params()
    t = layer_table(strategy, cand(), m.workload(1), s, PLAIN._replace(attention_eff=0.5, attention_tiles=0.0))
    b, h, l, q = 1, 32, 2048, hidden // 32
    fwd = 4 * b * h * l * l * q * (l + 1) / (2 * l) * 1e-12
    assert float(t["fusedla"]["t_f"][0]) == pytest.approx(2.0e-5 + fwd / (0.5 * share * 989.0), rel=1e-9)
    assert float(t["fusedla"]["t_b"][0]) == pytest.approx(2.0e-5 + 2.5 * fwd / (0.5 * share * 989.0), rel=1e-9)


@pytest.mark.parametrize("strategy, n1, n2, b", [("tp1d", 4, 1, 1), ("tp1d", 1, 1, 2), ("tp1d", 1, 4, 1),
                                                  ("tp2d", 2, 2, 1), ("summa", 2, 2, 1)])
def test_fused_attention_efficiency_follows_its_parallel_work(strategy, n1, n2, b):
    """A microbatch's local heads x 128-row query tiles are the kernel's thread blocks, n; at K = 208 its
    rate is (n / (n + 208)) / (2048 / 2256) of attention_eff's, at most 1. 32 heads of 128 on 2,048 tokens:
    8 heads on a GPU at tp 4, 16 tiles each (n = 128, 0.4196); 32 heads, 2 sequences (n = 1,024, 0.9034);
    context parallelism 4: 512 query rows, 4 tiles a head (n = 128); n1 = n2 = 2 in tp2d and under
    Megatron's block in SUMMA: 16 heads of 1,024 query rows (n = 128)."""
    m = dse.load_model(MODEL)
    s = dse.load_system("dgx_h100").params()
    c = cand(n1=n1, n2=n2, nvs1=n1, nvs2=n2, microbatch=b)
    on = layer_table(strategy, c, m.workload(1), s, PLAIN._replace(attention_eff=0.5))
    off = layer_table(strategy, c, m.workload(1), s, PLAIN._replace(attention_eff=0.5, attention_tiles=0.0))
    rows = 2048 // n2
    n = b * (32 // n1) * -(-rows // 128)
    factor = min(n / (n + 208.0) * (2256.0 / 2048.0), 1.0)
    for key, comm in (("t_f", "comm_f"), ("t_b", "comm_b")):  # the kernel's time: its latency and collectives off
        work_on = float(on["fusedla"][key][0] - on["fusedla"][comm][0]) - 2.0e-5
        work_off = float(off["fusedla"][key][0] - off["fusedla"][comm][0]) - 2.0e-5
        assert work_off / work_on == pytest.approx(factor, rel=1e-9)


def test_tile_factor_reproduces_the_measured_head_counts():
    """docs/gpu.md run 17 (H100): 8 heads of 128 on one 8,192-token sequence ran at 0.783 (cuDNN) and 0.795
    (FlashAttention-2) of 32 heads' rate, forward and backward; the profiles' K (208, 192) give those ratios to
    0.2%. Run 20's problems, 4,096 thread blocks and more, ran within 7% of one another whatever their heads
    at equal length and width; the factor is 1 for all of them."""
    import json
    from pathlib import Path

    from kernels.attention import tile_factor
    from kernels.frameworks import FRAMEWORKS

    gpu = Path(__file__).resolve().parents[2] / "docs" / "gpu"
    rows = [json.loads(x) for x in (gpu / "2026-11-27-h100-17-kernels.jsonl").read_text().splitlines()]
    backends = {"cudnn": PLAIN, "flash": PLAIN._replace(**FRAMEWORKS["fsdp2"])}
    for backend, profile in backends.items():
        rate = {r["heads"]: r["fwd_bwd_tflops"] for r in rows if r.get("kind") == "attention"
                and r["backend"] == backend and r["seq"] == 8192 and r.get("d_qk") == 128}
        measured = rate[8] / rate[32]
        engine = float(tile_factor(profile, 1, 8, 8192)) / float(tile_factor(profile, 1, 32, 8192))
        assert engine == pytest.approx(measured, rel=2e-3)
    # the figures docs/models.md quotes: Llama 3 70B at tp 8 (8 heads a GPU), 8,192 tokens: 512 tiles, at cp 2 256
    assert float(tile_factor(PLAIN, 1, 8, 8192)) == pytest.approx(512 / 720 * 2256 / 2048, rel=1e-12)  # 0.7833
    assert float(tile_factor(PLAIN, 1, 8, 4096)) == pytest.approx(256 / 464 * 2256 / 2048, rel=1e-12)  # 0.6078
    run20 = [json.loads(x) for x in (gpu / "2026-11-27-h100-20-attention.jsonl").read_text().splitlines()]
    for backend, profile in backends.items():
        for seq in (4096, 8192):
            for d in (64, 128, 192):
                same = [r for r in run20 if r.get("kind") == "attention" and r["backend"] == backend
                        and r["seq"] == seq and r["d"] == d]
                assert len(same) == 3
                assert all(float(tile_factor(profile, r["batch"], r["heads"], seq)) == 1.0 for r in same)
                rates = [r["fwd_bwd_tflops"] for r in same]
                assert max(rates) / min(rates) < 1.07


def test_latent_attention_takes_the_mean_head_width():
    """DeepSeek-V3's heads: q and k 192 wide, v 128: a mean width of 160, halfway from 128 to 192
    (0.865 under cuDNN's 0.73 at 192); FlashAttention-2's table (0.86 at 64, 0.90 at 192) at 64 and 160."""
    from kernels.attention import width_factor
    from kernels.frameworks import FRAMEWORKS

    assert float(width_factor(PLAIN, 192, 128)) == pytest.approx(0.865, rel=1e-12)
    fsdp = PLAIN._replace(**FRAMEWORKS["fsdp2"])
    assert float(width_factor(fsdp, 64, 64)) == pytest.approx(0.86, rel=1e-12)
    assert float(width_factor(fsdp, 192, 128)) == pytest.approx(0.95, rel=1e-12)
    assert float(width_factor(fsdp, 128, 128)) == 1.0


def test_fp8_casts_cost_four_bytes_per_element():
    """FP8 adds the casts of fc2's input (b s f/t) and vproj's (b s e/t) forward and of every
    linear's output gradient backward (fc1 b s 2f/t under SwiGLU... here GELU: f/t; fc2 e; qkv
    3e/t; vproj e), each 4 bytes per element, on the activation layer and the out-projection's
    bias-dropout-add (dpr_v)."""
    m = dse.load_model(MODEL)
    s = dse.load_system("dgx_h100").params()
    t, bl, e, f = 2, 2048, 4096, 16384
    bf16 = layer_table("tp1d", cand(n1=t, nvs1=t), m.workload(1), s, PLAIN)
    fp8 = layer_table("tp1d", cand(n1=t, nvs1=t, precision=1), m.workload(1), s, PLAIN)
    gb = 1e-9

    def extra(layer, key):
        return float(fp8[layer][key][0] - bf16[layer][key][0])

    assert extra("act1", "traffic_f") == pytest.approx(4 * bl * f / t * gb, rel=1e-12)
    assert extra("act1", "traffic_b") == pytest.approx(4 * bl * (f / t + e) * gb, rel=1e-12)
    assert extra("dpr_v", "traffic_f") == pytest.approx(4 * bl * e / t * gb, rel=1e-12)
    assert extra("dpr_v", "traffic_b") == pytest.approx(4 * bl * (3 * e / t + e) * gb, rel=1e-12)


def _tp(profile, **system):
    return dse.evaluate(model=MODEL, system={"name": "s", **_fields("dgx_h100"), **system}, profile=profile,
                        global_batch=1, n1=8, nvs1=8, microbatch=1)


def test_tp_collectives_hide_under_the_gemms_they_pipeline_with():
    on, off = PLAIN, PLAIN._replace(tp_comm_overlap=False)
    # NVLink ten times faster than H100's: the block's collectives are shorter than its GEMMs
    fast = dict(nvlink_bandwidth=4500.0, nvlink_latency=0.0)
    assert _tp(on, **fast)["t_tp_comm"] == 0.0 and _tp(off, **fast)["t_tp_comm"] > 0.0
    # NVLink a thousand times slower: exposed = collectives - GEMMs, per block and direction
    slow = dict(nvlink_bandwidth=0.45)
    a, b = _tp(on, **slow), _tp(off, **slow)
    assert 0.0 < a["t_tp_comm"] < b["t_tp_comm"]
    assert a["t_tp_comm"] >= b["t_tp_comm"] - b["t_compute"] - b["t_memory"]  # never more hidden than the GEMMs
    assert a["t_compute"] == pytest.approx(b["t_compute"], rel=1e-12)


def test_a_faster_tensor_core_never_exposes_more_tp_communication():
    """The overlap window is each GEMM's whole time, max(compute, HBM): as the matrix rate grows
    and the GEMMs turn memory-bound, the window stops shrinking at their HBM time, so the iteration
    never gets slower (with a window of compute alone, the collectives hidden under a memory-bound
    GEMM would reappear). Brute force over matrix rates from 0.5x to 64x the H100's."""
    slow = dict(nvlink_bandwidth=45.0)  # collectives longer than the GEMMs at the faster rates
    base = _fields("dgx_h100")["matrix_flops"]
    times = [_tp(PLAIN, **slow, matrix_flops=base * k) for k in (0.5, 1, 2, 4, 8, 16, 32, 64)]
    its = [t["iteration_time"] for t in times]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(its, its[1:]))
    assert times[-1]["t_memory"] > 0.0  # the fastest rates do reach memory-bound GEMMs
    assert times[0]["t_tp_comm"] < times[-1]["t_tp_comm"]  # less compute hides less


def test_tp_overlap_needs_the_group_inside_one_domain():
    """The overlap exchanges through NVLink peer memory: with the 8-GPU tensor group split over
    two 4-GPU domains (nvs1 = 4) every collective stays exposed, as without the overlap."""
    on, off = PLAIN, PLAIN._replace(tp_comm_overlap=False)
    kw = dict(model=MODEL, system="dgx_h100", nvs_size=4, global_batch=2, n1=8, nvs1=4, n_d=2, nvs_d=1,
              n_p=1, nvs_p=1, microbatch=1)
    a, b = dse.evaluate(profile=on, **kw), dse.evaluate(profile=off, **kw)
    assert a["t_tp_comm"] > 0.0
    # exactly as without it: Megatron's asynchronous backward reductions under the weight gradients
    assert a["t_tp_comm"] == pytest.approx(b["t_tp_comm"], rel=1e-12)
    assert a["iteration_time"] == pytest.approx(b["iteration_time"], rel=1e-12)


def test_interleaved_transfers_hide_under_other_chunks():
    """v = 1: 2 p2p per microbatch exposed either way; v > 1: 2 v max(p2p - chunk, 0), 0 here."""
    kw = dict(model=MODEL, system="dgx_h100", global_batch=8, n1=1, n_p=2, nvs_p=2, microbatch=1)
    on, off = PLAIN, PLAIN._replace(pp_comm_overlap=False)
    assert dse.evaluate(profile=on, **kw)["t_pp_comm"] == pytest.approx(
        dse.evaluate(profile=off, **kw)["t_pp_comm"], rel=1e-12)
    assert dse.evaluate(profile=on, interleave=2, **kw)["t_pp_comm"] == 0.0
    assert dse.evaluate(profile=off, interleave=2, **kw)["t_pp_comm"] > 0.0


def test_nemo_h100_fp8_runs_within_their_band():
    """The twelve NeMo 24.07 H100 FP8 runs of the corpus (GELU, SwiGLU and Nemotron's squared-ReLU
    MLPs; tensor, context, pipeline and interleaved parallelism) are all predicted, within the
    held-out band the shipped calibration stores for Hopper FP8 Megatron runs (`dse calibrate
    --show corpus2026`: mean 7.3%, max 22.6%)."""
    from dse.truth.calibration import load_calibration

    from helpers import packaged_runs

    runs = packaged_runs("nemo_perf_dense.csv", pl.col("source_id") == "nemo-24.07")  # predict only those
    got = dm.predict(runs).frame
    assert got.height == 12 and (got["source_id"] == "nemo-24.07").all()
    band = load_calibration("corpus2026").band_for("hopper", "fp8")
    err = got["error"].abs()
    assert err.mean() <= band["mean"] and err.max() <= band["max"]


def test_measured_runs_take_the_overlaps_and_tied_embeddings(tmp_path):
    from helpers import GOOD, HEADER, write_csv

    header = HEADER + ("tied_embeddings", "tp_comm_overlap", "pp_comm_overlap", "zero")
    rows = [{**GOOD, "tied_embeddings": "", "tp_comm_overlap": "", "pp_comm_overlap": "", "zero": ""},
            {**GOOD, "gpu": "H100-SXM", "tied_embeddings": "no", "tp_comm_overlap": "", "pp_comm_overlap": "0",
             "zero": "3"},
            {**GOOD, "tp_comm_overlap": "often"},
            {**GOOD, "zero": "4"}]
    runs = dm.read_runs(write_csv(tmp_path / "runs.csv", rows, header))
    # blank: tied; overlaps by GPU (A100 runs predate them, later GPUs' Megatron-core has them); ZeRO 1
    assert runs.rows.select("tied_embeddings", "tp_comm_overlap", "pp_comm_overlap", "zero").rows() == [
        (True, False, False, 1), (False, True, False, 3)]
    assert [str(e) for e in runs.errors] == [
        "row 3 (m22b): tp_comm_overlap = often: must be a boolean (true | false | 1 | 0 | yes | no)",
        "row 4 (m22b): zero = 4: must be a ZeRO stage 0 | 1 | 2 | 3"]
    # the stage reaches the engine: ZeRO-3 holds less than ZeRO-1 of the same run
    two = [{**GOOD, "dp": "2", "gpus": "16", "global_batch": "8", "zero": z} for z in ("1", "3")]
    calls = dm.plan(dm.read_runs(write_csv(tmp_path / "two.csv", two, header)))
    assert [c.table["zero"].tolist() for c in calls] == [[1, 3]]
    res = dm.predict(write_csv(tmp_path / "two.csv", two, header))
    assert res.errors == () and res.frame.height == 2
