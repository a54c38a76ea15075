"""MoE memory is that of the pipeline stage that holds the most, not of the one that sets the pace.
Brute force: a model whose first stage is all dense-first blocks and whose second is all MoE
blocks must need what the larger of two uniform models needs, one all-MoE and one dense, each
stage counted as the first."""

from __future__ import annotations

import pytest

import dse
from kernels.params import PROFILES

BASE = dict(name="m", seq_len=8192, hidden=2048, heads=16, depth=8, ffn=16384, vocab=32000, mlp="swiglu")
MOE = dict(BASE, experts=64, moe_top_k=2, expert_ffn=1024, moe_every=1)
# without a calibration: no host time (the default's calibrated one would let the dropless MoE stage's
# issue time set the pace; the memory is the same either way)
POINT = dict(system="dgx_h100", nvs_size=8, strategy="tp1d", global_batch=16, n1=1, n_p=2, n_d=4, microbatch=1,
             nvs1=1, nvs_p=2, nvs_d=4, recompute="selective", zero=1,
             profile=PROFILES["default"]._replace(calibration="none"))
MEMORY = ("mem_weights", "mem_grads", "mem_optimizer", "mem_activations", "memory")


def test_the_heaviest_stage_sets_the_memory_not_the_slowest():
    mixed = dse.evaluate(model={**MOE, "dense_layers": 4}, ep=1, **POINT)  # stage 0 dense, stage 1 MoE
    all_moe = dse.evaluate(model={**MOE, "dense_layers": 0}, ep=1, **POINT)
    dense = dse.evaluate(model=BASE, **POINT)
    # the dense stage sets the pace (its 16,384-wide MLP against two 1,024-wide experts per token) ...
    assert dense["iteration_time"] > all_moe["iteration_time"]
    # ... while the MoE stage, 64 experts' weights and their state, holds the most
    assert all_moe["memory"] > dense["memory"]
    for k in MEMORY:
        assert mixed[k] == pytest.approx(all_moe[k], rel=1e-12), k
    # with 2 dense-first blocks of 4 the second candidate stage is the mixed one: still the heavier
    half = dse.evaluate(model={**MOE, "dense_layers": 2}, ep=1, **POINT)
    assert half["memory"] == pytest.approx(all_moe["memory"], rel=1e-12)


def test_a_dense_first_stage_heavier_than_the_moe_stages_sets_the_memory():
    """The other way round: with ep = 4 each GPU keeps 16 of the 64 experts, and a dense stage of
    65,536-wide MLPs holds more than the MoE stage: the dense stage's memory is the model's."""
    wide = dict(BASE, ffn=65536)
    mixed = dse.evaluate(model={**MOE, "ffn": 65536, "dense_layers": 4}, ep=4, **POINT)
    dense = dse.evaluate(model=wide, **POINT)
    all_moe = dse.evaluate(model={**MOE, "ffn": 65536, "dense_layers": 0}, ep=4, **POINT)
    assert dense["memory"] > all_moe["memory"]
    for k in MEMORY:
        assert mixed[k] == pytest.approx(dense[k], rel=1e-12), k
