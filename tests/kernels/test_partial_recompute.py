"""Partial full recomputation (`Profile.recompute_layers`, Megatron's recompute_method block with
recompute_num_layers N): the first N blocks of each model chunk are recomputed and keep only their
input, the others keep every activation, in every strategy and entry point."""

from __future__ import annotations

import pytest

import dse
from dse.explore.engine import profile_of
from dse.spec.specs import SpecError
from dse.truth.measured import plan
from dse.truth.runs import read_runs, resolve_many
from kernels.params import PROFILES

BASE = PROFILES["default"]._replace(calibration="none")
KW = dict(model="llama3_8b", system="dgx_h100", global_batch=64, n1=1, n_d=8, microbatch=1, nvs1=1, nvs_d=8,
          precision="bf16")
GB = 1e-9


def run(recompute, layers=0, strategy="tp1d", **kw):
    args = {**KW, "n_p": 1, "nvs_p": 1, "strategy": strategy, "recompute": recompute, **kw}
    if strategy == "summa":
        args.update(n2=1, nvs2=1, n_b=1)
    return dse.evaluate(profile=BASE._replace(recompute_layers=layers), **args)


#: every (strategy, N) is a compiled program of its own (two on tp2d and SUMMA): the default suite
#: checks tp1d's N = 5, the program `test_other_modes_are_unchanged` compiles as well; the rest of
#: the product, the ends N = 1 and 31 and the other strategies, runs with -m slow
_DIAGONAL = {(5, "tp1d")}


@pytest.mark.parametrize("n, strategy", [
    pytest.param(n, s, marks=() if (n, s) in _DIAGONAL else pytest.mark.slow)
    for n in (1, 5, 31) for s in ("tp1d", "tp2d", "summa")])
def test_the_blocks_not_recomputed_keep_every_activation(strategy, n):
    """Llama 3 8B, one stage of its 32 blocks, one 8,192-token microbatch: full recomputation keeps
    each block's input, I = 8,192 x 4,096 x 2 B, and holds one block's activations A while it
    recomputes it; without recomputation each block keeps A. So none - full = 31 A - 32 I gives A,
    and recomputing N blocks keeps (32 - N)(A - I) more than recomputing all 32."""
    full, none, part = run("full", strategy=strategy), run("none", strategy=strategy), run("full", n, strategy)
    i = 8192 * 4096 * 2 * GB
    a = (none["mem_activations"] - full["mem_activations"] + 32 * i) / 31
    assert a > i
    assert part["mem_activations"] - full["mem_activations"] == pytest.approx((32 - n) * (a - i), rel=1e-9)
    # the recomputed forward: N of the 32 blocks' (the blocks' own compute is the same in every mode)
    extra = full["t_compute"] - none["t_compute"]
    assert part["t_compute"] == pytest.approx(none["t_compute"] + n / 32 * extra, rel=1e-9)
    assert part["iteration_time"] < full["iteration_time"]


def test_n_counts_blocks_of_each_model_chunk():
    """Four stages of 8 blocks in 2 chunks of 4: N = 2 recomputes half of each chunk (not a quarter
    of the stage); N = 4 and more, every block: the full recomputation's numbers exactly."""
    kw = dict(n_p=4, nvs_p=1, interleave=2, n_d=2, nvs_d=2, global_batch=64)
    full, none = run("full", **kw), run("none", **kw)
    half = run("full", 2, **kw)
    assert half["t_compute"] == pytest.approx(0.5 * (full["t_compute"] + none["t_compute"]), rel=1e-9)
    for n in (4, 9):
        assert run("full", n, **kw) == full


def test_other_modes_are_unchanged():
    for mode in ("none", "selective"):
        assert run(mode, 5) == run(mode)


def test_bad_values_are_refused():
    with pytest.raises(SpecError, match=r"^profile.recompute_layers = 5: profile 'custom' has no full recomputation "
                                        r"to limit \(seed 001's block\); must be 0$"):
        profile_of(PROFILES["lbnl"]._replace(recompute_layers=5))


def test_the_measured_run_with_recompute_num_layers_is_predicted():
    """NVIDIA's 25.11 Llama 3 8B FP8 run on 8 H100s recomputes 5 of its 32 layers
    (recompute_num_layers 5, dse/data/measured/nvidia_perf_dense.md): planned with the profile's
    recompute_layers 5; every other run recomputes all its blocks (0)."""
    runs = read_runs(resolve_many("corpus"))
    assert not [e for e in runs.errors if "recompute_layers" in str(e)]
    partial = [c for c in plan(runs) if c.recompute_layers]
    assert [(c.model.name, c.recompute_layers, len(c.rows)) for c in partial] == [("llama3_8b", 5, 1)]
