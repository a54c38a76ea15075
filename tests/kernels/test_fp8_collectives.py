"""What quantized matmuls move: their operands read from HBM in the narrow format, the
sequence-parallel allgathers that feed them sent quantized (torchao's float8 tensor parallelism,
`Profile.fp8_tp_gather`) and the parameters allgathered in their FP8 copy
(`Profile.fp8_param_gather`). Expected values are counted by hand from Llama 3 8B's shapes."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import dse
import dse.truth.measured as dm
from dse.explore.engine import stack_systems
from dse.spec.specs import load_model, load_system
from dse.truth.runs import PACKAGED_CSV
from kernels.block_time import block_cost
from kernels.blocks import block_layers
from kernels.iteration import prepare
from kernels.data_parallel import model_state
from kernels.params import PROFILES, Candidates, arch_of, state_bytes
from kernels.traffic import iteration_traffic

LLAMA = load_model("llama3_8b")  # no biases (`LLAMA.arch`): its blocks' weights are the linears' and the norms'

E, F, KV = 4096, 14336, 8 * 128  # Llama 3 8B: hidden, MLP width, key/value features
EPS = 2e-9  # GB per 2-byte element


def candidate(**kw):
    base = dict(n1=1, n2=1, n_p=1, n_d=8, microbatch=1, nvs1=1, nvs2=1, nvs_p=1, nvs_d=8, n_b=1, interleave=1,
                recompute=0, seq_par=1, precision=0, zero=3, ep=1)
    return Candidates(**{k: np.float64(v) for k, v in {**base, **kw}.items()})


def layers(profile="default", **kw):
    w = load_model("llama3_8b").workload(64)
    s = stack_systems([load_system("dgx_h100").params()])
    c, w, s = prepare(candidate(**kw), w, s)
    return {x.name: x for x in block_layers("tp1d", c, w, s, PROFILES[profile], arch_of(False))}


def test_an_fp8_linear_reads_its_operands_in_one_byte():
    # fc1 of Llama 3 8B (4,096 -> 2 x 14,336, one rank), 8,192 tokens: forward it reads its input
    # (8192 x 4096) and its weight (4096 x 28,672); backward the weight, the output gradient twice
    # and the input. Under FP8 each of those bytes halves; the outputs it writes do not
    bf16, fp8 = layers(precision=0)["fc1"], layers(precision=1)["fc1"]
    tokens, up = 8192, 2 * F
    forward = (tokens * E + E * up) * EPS / 2
    backward = (E * up + 2 * tokens * up + tokens * E) * EPS / 2
    assert float(bf16.traffic_f[0] - fp8.traffic_f[0]) == pytest.approx(forward, rel=1e-12)
    assert float(bf16.traffic_b[0] - fp8.traffic_b[0]) == pytest.approx(backward, rel=1e-12)


def test_torchao_float8_tensor_parallelism_gathers_the_norms_outputs_in_fp8():
    # tp 8 with sequence parallelism, microbatch 1 x 8,192 tokens: each LayerNorm's allgather
    # carries 8192 x 4096 elements, 2 bytes each; fsdp2's float8 TP sends them in 1 byte, the
    # row-parallel reduce-scatters (fc2's output) stay 2-byte, and bf16 matmuls change nothing
    full = 8192 * E * EPS
    for profile, precision, share in (("default", 1, 1.0), ("fsdp2", 1, 0.5), ("fsdp2", 0, 1.0)):
        got = layers(profile, n1=8, nvs1=8, precision=precision)
        assert float(got["ln1"].comm_f[0].volume[0]) == pytest.approx(full * share, rel=1e-12)
        assert float(got["ln2"].comm_b[0].volume[0]) == pytest.approx(full * share, rel=1e-12)
        assert float(got["fc2"].comm_f[0].volume[0]) == pytest.approx(full, rel=1e-12)


def test_fp8_parameter_allgathers_send_the_linears_weights_in_one_byte():
    # one Llama 3 8B block: linears 4096 x (4096 + 2 x 1024) + 4096 x 4096 + 4096 x 28,672 +
    # 14,336 x 4096 parameters; the rest, Megatron's block's norms (gain and bias, 4 x 4096; Llama's
    # linears have no biases, `model.bias`); under FP8 the linears go in 1 byte
    w = load_model("llama3_8b").workload(64)
    s = stack_systems([load_system("dgx_h100").params()])
    linears = E * (E + 2 * KV) + E * E + E * 2 * F + F * E
    rest = 4 * E
    for switch, precision, sent in ((False, 1, (linears + rest) * 2), (True, 1, linears + rest * 2),
                                    (True, 0, (linears + rest) * 2)):
        profile = PROFILES["fsdp2"]._replace(fp8_param_gather=switch)
        c, w2, s2 = prepare(candidate(precision=precision), w, s)
        blk = block_cost("tp1d", c, w2, s2, profile, moe=LLAMA.arch)
        assert float(blk.weight[0]) == pytest.approx((linears + rest) * 2 / 1e9, rel=1e-12)
        assert float(blk.gathered_weight[0]) == pytest.approx(sent / 1e9, rel=1e-12)


def _point(**kw):
    return dict(model="llama3_8b", system="dgx_h100", n1=1, n_d=64, microbatch=2, global_batch=128,
                recompute="selective", precision="fp8", nvs1=1, nvs_p=1, nvs_d=8, **kw)


def test_the_fp8_parameter_allgather_shortens_the_exposed_data_parallel_time_only_where_it_gathers():
    base = PROFILES["fsdp2"]
    on = base._replace(fp8_param_gather=True)
    # ZeRO-3: every block gathered forward and backward; sending half the linears' bytes cannot
    # take longer, and takes less where the allgathers were exposed
    slow, fast = (dse.evaluate(**_point(zero=3), profile=p) for p in (base, on))
    assert fast["t_dp_comm"] < slow["t_dp_comm"]
    assert fast["t_compute"] == slow["t_compute"] and fast["memory"] == slow["memory"]
    # ZeRO-0 allreduces gradients: no parameter allgather to narrow
    a, b = (dse.evaluate(**_point(zero=0), profile=p) for p in (base, on))
    assert a["t_dp_comm"] == b["t_dp_comm"]


def test_traffic_accounting_moves_the_gathered_bytes():
    # ZeRO-3 over 8 GPUs, 64 sequences of 1: 8 microbatches, each gathering the 32 blocks forward
    # and backward; every GPU sends 7/8 of each allgather. FP8 parameter allgathers save one byte
    # for each linear parameter: 16 x 32 x linears x 1 B x 7/8
    w = load_model("llama3_8b").workload(64)
    s = stack_systems([load_system("dgx_h100").params()])
    c, w, s = prepare(candidate(precision=1), w, s)
    off, on = (iteration_traffic("tp1d", c, w, s, PROFILES["fsdp2"]._replace(fp8_param_gather=g))
               for g in (False, True))
    linears = E * (E + 2 * KV) + E * E + E * 2 * F + F * E
    assert float(off.dp_hb[0] - on.dp_hb[0]) == pytest.approx(16 * 32 * linears * 1e-9 * 7 / 8, rel=1e-12)
    assert float(off.tp_hb[0]) == float(on.tp_hb[0]) == 0.0


def _torchtitan_rows(**where):
    """The predictions of the packaged torchtitan runs whose columns equal `where` (only those predicted)."""
    from helpers import packaged_runs

    runs = packaged_runs("torchtitan_fsdp2.csv", *(pl.col(k) == v for k, v in where.items()))
    frame = dm.predict(runs).frame
    assert frame.height == runs.rows.height  # every selected run predicted
    for k, v in where.items():
        frame = frame.filter(pl.col(k) == v)
    return frame


def test_rowwise_scaling_communicates_in_high_precision():
    # torchtitan's 8B tp 8 runs of one table: the same layout under tensorwise and rowwise float8;
    # rowwise sends its TP collectives 2-byte, so it is predicted slower than tensorwise
    frame = _torchtitan_rows(model="llama3.1-8b", tp=8, precision="fp8", async_tp=False)
    t = dict(zip(frame["fp8_recipe"], frame["predicted_iter_s"]))
    assert t["rowwise"] > t["tensorwise"]


@pytest.mark.parametrize("cells, column", [
    ({"precision": "bf16", "fp8_recipe": "rowwise"}, "fp8_recipe"),
    ({"precision": "bf16", "fp8_param_gather": "true"}, "fp8_param_gather"),
    ({"precision": "fp8", "fp8_recipe": "rowwise", "fp8_param_gather": "true"}, "fp8_param_gather"),
    ({"precision": "fp8", "fp8_recipe": "blockwise"}, "fp8_recipe"),
])
def test_fp8_columns_refused_where_they_cannot_hold(tmp_path, cells, column):
    src = PACKAGED_CSV.parent / "torchtitan_fsdp2.csv"
    frame = pl.read_csv(src, infer_schema_length=0).head(1)
    frame = frame.with_columns(*(pl.lit(v).alias(k) for k, v in cells.items()))
    path = tmp_path / "runs.csv"
    frame.write_csv(path)
    runs = dm.read_runs(str(path))
    assert [e.column for e in runs.errors] == [column]
    assert column in str(runs.errors[0])


def _state(profile, zero, precision=1, blocks=32.0, dp=8.0, emb=128256 * E * EPS):
    w = load_model("llama3_8b").workload(64)
    s = stack_systems([load_system("dgx_h100").params()])
    c, w, s = prepare(candidate(precision=precision, zero=zero), w, s)
    blk = block_cost("tp1d", c, w, s, profile, moe=LLAMA.arch)
    weights, grads, optimizer = model_state(np.float64(zero), blk, blk.weight - blk.expert_weight, np.float64(emb),
                                            np.float64(blocks), np.float64(dp), None, state_bytes(profile), s,
                                            profile)
    return float(weights[0]), float(grads[0]), float(optimizer[0])


def test_megatron_fp8_parameters_hold_no_two_byte_copy():
    # Megatron's --fp8-param-gather: the linears' parameters are FP8 tensors. On an H100 (an FP8
    # copy and its transpose) a Llama 3 8B block then holds linears x 2 x 1 B + the rest x 2 B, not
    # linears x (2 + 2) B: 32 blocks hold 32 x linears x 2 B less; gradients and Adam unchanged
    linears = E * (E + 2 * KV) + E * E + E * 2 * F + F * E
    rest = 4 * E
    emb = 128256 * E * EPS
    base = PROFILES["default"]
    on = base._replace(fp8_param_gather=True)
    for zero in (0, 1, 2):
        w_off, g_off, o_off = _state(base, zero)
        w_on, g_on, o_on = _state(on, zero)
        assert w_off == pytest.approx(32 * (linears * 4 + rest * 2) * 1e-9 + emb, rel=1e-12)
        assert w_on == pytest.approx(32 * (linears * 2 + rest * 2) * 1e-9 + emb, rel=1e-12)
        assert (g_on, o_on) == (g_off, o_off)
    # bf16 matmuls have no FP8 parameters
    assert _state(on, 1, precision=0) == _state(base, 1, precision=0)


def test_megatron_fsdp_shards_and_gathers_fp8_parameters_in_one_byte():
    # ZeRO-3 over 8 GPUs: each GPU keeps 1/8 of the stage's parameters, the linears' in 1 byte
    # under FP8 parameters, and two gathered modules (one prefetched): the largest of a block
    # (its FP8 copy and transpose, 2 x linears x 1 B, + the rest in 2 B) and the 2-byte embedding
    linears = E * (E + 2 * KV) + E * E + E * 2 * F + F * E
    rest = 4 * E
    emb = 128256 * E * EPS
    on = PROFILES["default"]._replace(fp8_param_gather=True)
    shards = (32 * (linears + rest * 2) * 1e-9 + emb) / 8
    largest = max(2 * (linears + rest) * 1e-9, emb)
    assert _state(on, 3)[0] == pytest.approx(shards + 2 * largest, rel=1e-12)
    # torchao's float8 all-gather under FSDP2 keeps its shards and gathered blocks 2-byte
    fsdp2 = PROFILES["fsdp2"]
    assert _state(fsdp2._replace(fp8_param_gather=True), 3) == _state(fsdp2, 3)


def test_nemotron4_340b_fits_on_h100_with_megatron_fp8_parameters(tmp_path):
    # NeMo 24.12 trained Nemotron-4 340B on 128 H100s (tp 8, pp 8, vp 12, published: it ran) with
    # NeMo 2.0's FP8 recipe, which sets fp8_params: predicted to fit in the 80 GB only as such
    src = PACKAGED_CSV.parent / "nemo_perf_dense.csv"
    rows = pl.read_csv(src, infer_schema_length=0).filter(
        (pl.col("model") == "nemotron4-340b") & (pl.col("source_id") == "nemo-24.12"))
    assert rows.height == 1 and rows["fp8_param_gather"].to_list() == ["true"]
    paths = []
    for flag in ("true", "false"):
        paths.append(tmp_path / f"{flag}.csv")
        rows.with_columns(pl.lit(flag).alias("fp8_param_gather")).write_csv(paths[-1])
    on, off = (dm.predict(dm.read_runs(str(p))).frame.row(0, named=True) for p in paths)
    assert on["fits"] and not off["fits"]
    # the difference is the linears' 2-byte copies of one stage: 12 blocks x 3.45e9 / 8 parameters
    linears = 18432 * (18432 + 2 * 8 * 192) + 18432 * 18432 + 2 * 18432 * 73728
    assert off["predicted_memory_gb"] - on["predicted_memory_gb"] == pytest.approx(12 * linears / 8 * 2e-9, rel=1e-9)
