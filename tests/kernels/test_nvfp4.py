"""NVFP4 matmuls (`precision=nvfp4`, code 2): the rate they run at, the bytes their quantized
tensors store, and their refusals. Expected values come from the engine at FP8 (the same program
with FP8's rate) and from the format's bytes: 4-bit values and one 1-byte scale per 16 values,
0.5625 bytes against FP8's 1 and bf16's 2."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest

import dse
from dse.explore.packing import pack, unpack
from dse.explore.space import COLUMNS
from dse.spec.specs import SpecError
from kernels.params import PRECISIONS, PROFILES

MODEL = dict(name="m", seq_len=4096, hidden=4096, heads=32, depth=16, ffn=14336, vocab=32000, kv_heads=8, mlp="swiglu")
POINT = dict(nvs_size=8, strategy="tp1d", global_batch=32, n1=2, n_p=2, n_d=2, nvs1=2, nvs_p=2, nvs_d=2,
             microbatch=1, recompute="none", zero=1)
NVFP4 = 0.5 + 1 / 16  # bytes a value


#: the default profile with the system's own efficiencies (no calibration replacing fp8_eff, fp4_eff)
UNCALIBRATED = PROFILES["default"]._replace(calibration="none")


def run(precision: str, profile=UNCALIBRATED, **system_changes):
    system = {**asdict(dse.load_system("gb200_nvl72")), **system_changes}
    return dse.evaluate(model=MODEL, system=system, precision=precision, profile=profile, **POINT)


def test_the_codes():
    assert PRECISIONS == ("bf16", "fp8", "nvfp4")


def test_nvfp4_at_fp8s_rate_takes_fp8s_time():
    """Given FP8's rate and efficiency, NVFP4 matmuls take exactly FP8's time (what differs is memory)."""
    s = dse.load_system("gb200_nvl72")
    same = run("nvfp4", matrix_flops_fp4=s.matrix_flops_fp8, fp4_eff=s.fp8_eff)
    fp8 = run("fp8")
    for k in ("iteration_time", "t_compute", "t_memory", "t_tp_comm"):
        assert same[k] == pytest.approx(fp8[k], rel=1e-12), k


def test_a_faster_fp4_rate_is_faster_and_bf16_ignores_it():
    slow, fast = run("nvfp4", matrix_flops_fp4=6000.0), run("nvfp4", matrix_flops_fp4=12000.0)
    assert fast["t_compute"] < slow["t_compute"]
    assert run("bf16", matrix_flops_fp4=6000.0)["iteration_time"] == run("bf16", matrix_flops_fp4=12000.0)["iteration_time"]


def test_stored_inputs_and_weight_copies_take_the_formats_bytes():
    """Against bf16, FP8 saves 1 of each stored quantized input's 2 bytes and NVFP4 2 - 0.5625:
    the activation savings are in the ratio 1.4375 / 1; the cached weight copies add 1 and 0.5625
    bytes a parameter: the weight additions in the ratio 0.5625. With materialized attention, whose
    backward keeps no 2-byte attention output beside the out-projection's quantized copy
    (tests/kernels/test_te_memory.py counts that one under flash attention)."""
    bf16, fp8, fp4 = (run(p, profile=UNCALIBRATED._replace(flash_attention=False)) for p in ("bf16", "fp8", "nvfp4"))
    saved8 = bf16["mem_activations"] - fp8["mem_activations"]
    saved4 = bf16["mem_activations"] - fp4["mem_activations"]
    assert saved8 > 0 and saved4 / saved8 == pytest.approx((2 - NVFP4) / 1.0, rel=1e-9)
    added8 = fp8["mem_weights"] - bf16["mem_weights"]
    added4 = fp4["mem_weights"] - bf16["mem_weights"]
    assert added8 > 0 and added4 / added8 == pytest.approx(NVFP4, rel=1e-9)


def test_a_system_without_an_fp4_rate_refuses_nvfp4():
    with pytest.raises(SpecError, match=r"precision = nvfp4: system 'dgx_h100' has no NVFP4 rate \(system.matrix_flops_fp4 = 0\)"):
        dse.evaluate(model=MODEL, system="dgx_h100", precision="nvfp4", **POINT)
    with pytest.raises(SpecError, match="profile.precision = nvfp4: system 'dgx_h100' has no NVFP4 rate"):
        dse.search(model=MODEL, system="dgx_h100", n_gpus=8, global_batch=32, strategy="tp1d",
                   profile=PROFILES["default"]._replace(precision="nvfp4"))


def test_the_search_enumerates_nvfp4_where_asked():
    prof = PROFILES["default"]
    top = dse.search(model=MODEL, system="gb200_nvl72", n_gpus=8, global_batch=32, strategy="tp1d", top_k=3,
                     profile=prof._replace(precision="all"))
    assert {PRECISIONS[c] for c in top["precision"]} == {"nvfp4"}  # the fastest rate wins on every top row
    only = dse.search(model=MODEL, system="gb200_nvl72", n_gpus=8, global_batch=32, strategy="tp1d", top_k=1,
                      profile=prof._replace(precision="nvfp4"))
    best = only.row(0, named=True)
    point = {k: best[k] for k in COLUMNS if k not in ("n_b",)}
    again = dse.evaluate(model=MODEL, system="gb200_nvl72", global_batch=32, strategy="tp1d", **point)
    assert again["iteration_time"] == pytest.approx(best["iteration_time"], rel=1e-12)


def test_precision_two_packs_and_unpacks():
    table = np.ones((len(COLUMNS), 3), dtype=np.int64)
    table[COLUMNS.index("precision")] = [0, 1, 2]
    table[COLUMNS.index("zero")] = [3, 2, 1]
    assert np.array_equal(unpack(pack(table)), table)
