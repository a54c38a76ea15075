"""PyTorch's eager operators (`Profile.elementwise`, `kernels.eager`), against byte counts made by hand
from torchtitan's Llama operators, and the switch in every entry point.

Llama 3 8B, tp 1, microbatch 1, l = 8192 tokens, e = 4096, f = 14336, 32 query and 8 key/value heads
of 128: a norm acts on 8192 x 4096 elements, SwiGLU writes 8192 x 14336, the rotary embeddings turn
8192 x (32 + 8) x 128 query and key elements. Eager RMSNorm moves 36 B an element forward and 76 B
backward where the fused kernel moves 4 and 10; SwiGLU 10 and 18 where fused 6 and 10; the rotary
embeddings 20 each way against a fused pass's 4 (which no mode counts); an FP8 cast 6 against 4.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

import dse
from dse.explore.engine import profile_of
from dse.spec.specs import SpecError, load_model, load_system
from dse.truth.measured import plan
from dse.truth.runs import read_runs, resolve_many
from kernels.iteration import layer_table
from kernels.params import PROFILES, Candidates

H100 = load_system("dgx_h100").params()
L, E, F, HEADS, KV, Q = 8192, 4096, 14336, 32, 8, 128
NORM, ACT, ROPE = L * E, L * F, L * (HEADS + KV) * Q


@lru_cache(maxsize=None)
def table(elementwise: str, precision: int = 0, profile=PROFILES["fsdp2"], mlp: str = "swiglu"):
    c = Candidates(**{k: np.int64(1) for k in ("n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p",
                                               "nvs_d", "n_b", "interleave")},
                   precision=np.int64(precision))
    w = load_model("llama3_8b", seq_len=L, mlp=mlp).workload(64)
    out = layer_table("tp1d", c, w, H100, profile._replace(elementwise=elementwise))
    return {k: {f: float(np.asarray(v)) for f, v in d.items()} for k, d in out.items()}


def extra(name: str, field: str, elementwise: str, precision: int = 0, mlp: str = "swiglu") -> float:
    """Bytes a layer moves under `elementwise` beyond the fused kernels."""
    return (table(elementwise, precision, mlp=mlp)[name][field] - table("fused", precision, mlp=mlp)[name][field]) * 1e9


@pytest.mark.parametrize("name, fwd, bwd", [
    ("ln1", NORM * 32, NORM * 66), ("ln2", NORM * 32, NORM * 66),
    ("act1", ACT * 4, ACT * 8), ("qkv", ROPE * 16, ROPE * 16),
])
def test_eager_operators_move_the_counted_bytes(name, fwd, bwd):
    assert extra(name, "traffic_f", "eager") == pytest.approx(fwd, rel=1e-9)
    assert extra(name, "traffic_b", "eager") == pytest.approx(bwd, rel=1e-9)


def test_a_fused_norm_leaves_the_norms_alone():
    """torchtitan's Triton RMSNorm (norm_type fused_rmsnorm) under eager PyTorch: the norms are one
    kernel each way, the activation and the rotary embeddings still eager."""
    assert extra("ln1", "traffic_f", "eager_fused_norm") == 0.0
    assert extra("ln2", "traffic_b", "eager_fused_norm") == 0.0
    assert extra("act1", "traffic_b", "eager_fused_norm") == pytest.approx(ACT * 8, rel=1e-9)
    assert extra("qkv", "traffic_f", "eager_fused_norm") == pytest.approx(ROPE * 16, rel=1e-9)


def test_squared_relu_in_eager_pytorch():
    """NeMo 2.0's squared ReLU, torch.pow(F.relu(x), 2), on 8192 x 14336 elements (the same model with a
    squared-ReLU MLP): forward relu reads and writes 2 B an element and the square 2 more each, 8 B where
    one kernel moves 4; backward PyTorch's pow gradient copies x (2 + 2), scales it (2 + 2) and multiplies
    the incoming gradient (2 + 2 + 2), relu's threshold_backward reads two and writes one (2 + 2 + 2): 20 B
    where the fused kernel moves 6. Megatron-core with its activation unfused ("eager_activation") pays that
    and nothing else: its norms, rotary embeddings and FP8 casts stay in Transformer Engine's kernels."""
    for mode in ("eager", "eager_activation"):
        assert extra("act1", "traffic_f", mode, mlp="relu2") == pytest.approx(ACT * 4, rel=1e-9)
        assert extra("act1", "traffic_b", mode, mlp="relu2") == pytest.approx(ACT * 14, rel=1e-9)
    for name, field in (("ln1", "traffic_f"), ("ln2", "traffic_b"), ("qkv", "traffic_f"), ("qkv", "traffic_b")):
        assert extra(name, field, "eager_activation", mlp="relu2") == 0.0
        assert extra(name, field, "eager_activation") == 0.0
    assert extra("act1", "traffic_b", "eager_activation", precision=1, mlp="relu2") == pytest.approx(ACT * 14, rel=1e-9)
    assert extra("act1", "traffic_f", "eager_activation", precision=1, mlp="relu2") == pytest.approx(ACT * 4, rel=1e-9)
    # Megatron's gated MLP unfused: torch.chunk of fc1's output, silu and the product forward (10 B an output
    # element against 6); backward the product's two gradients, silu's, and the split's gradient, which
    # concatenates the two halves' (read 2 x 2 B, write 2 x 2 B): 26 B against 10
    assert extra("act1", "traffic_f", "eager_activation") == pytest.approx(ACT * 4, rel=1e-9)
    assert extra("act1", "traffic_b", "eager_activation") == pytest.approx(ACT * 16, rel=1e-9)
    # GELU is one kernel either way
    assert extra("act1", "traffic_f", "eager_activation", mlp="gelu") == 0.0
    assert extra("act1", "traffic_b", "eager_activation", mlp="gelu") == 0.0


def test_eager_fp8_casts_take_their_amax_pass():
    """Under FP8 the activation's layer also carries fc2's input cast forward (8192 x 14336) and the
    output gradients of fc1 (2 x 14336 wide) and fc2 (4096) backward: 2 B more each eagerly."""
    fwd = extra("act1", "traffic_f", "eager", precision=1) - ACT * 4
    bwd = extra("act1", "traffic_b", "eager", precision=1) - ACT * 8
    assert fwd == pytest.approx(ACT * 2, rel=1e-9)
    assert bwd == pytest.approx(L * (2 * F + E) * 2, rel=1e-9)


def test_matmuls_and_memory_are_the_same():
    fused, eager = table("fused"), table("eager")
    for name in ("fc1", "fc2", "vproj", "fusedla"):
        assert eager[name] == fused[name]
    assert {k: v["activation"] for k, v in eager.items()} == {k: v["activation"] for k, v in fused.items()}


def test_eager_is_slower_through_the_api():
    kw = dict(model="llama3_8b", system="dgx_h100", strategy="tp1d", global_batch=64, n1=1, n_p=1, n_d=8,
              microbatch=1, nvs1=1, nvs_p=1, nvs_d=8, recompute="selective")
    fused = dse.evaluate(profile=PROFILES["fsdp2"], **kw)
    eager = dse.evaluate(profile=PROFILES["fsdp2"]._replace(elementwise="eager"), **kw)
    assert eager["iteration_time"] > fused["iteration_time"]
    assert eager["memory"] == fused["memory"]


def test_bad_values_are_refused():
    with pytest.raises(SpecError, match=r"^profile.elementwise = 'jit': must be one of eager, eager_activation, "
                                        r"eager_fused_norm, fused$"):
        profile_of(PROFILES["default"]._replace(elementwise="jit"))
    with pytest.raises(SpecError, match=r"^profile.elementwise = 'eager': profile 'custom' counts its elementwise "
                                        r"layers as the seed papers do; must be 'fused'$"):
        profile_of(PROFILES["lbnl"]._replace(elementwise="eager"))


def test_packaged_runs_declare_how_their_elementwise_work_ran():
    """The packaged torchtitan runs: torch.compile off is eager, with the Triton RMSNorm where the
    run's configuration chose it (Llama 2 13B and Llama 3 8B on A100). NeMo 2.0's eight Nemotron runs
    (24.12, 25.02, 25.04) run their squared ReLU unfused; NeMo 1.0's three (24.07) compiled it. Every
    other run fused."""
    measured = read_runs(resolve_many("corpus"))
    calls, runs = plan(measured), measured.rows
    seen = {c.elementwise for c in calls}
    assert seen == {"fused", "eager", "eager_fused_norm", "eager_activation"}
    assert all(c.elementwise in ("fused", "eager_activation") for c in calls if c.framework == "megatron")
    unfused = runs.filter(runs["elementwise"] == "eager_activation")
    assert unfused.height == 8
    assert set(unfused["mlp"]) == {"relu2"}
    assert set(unfused["source_id"]) == {"nemo-24.12", "nemo-25.02", "nemo-25.04"}
    nemo1 = runs.filter((runs["mlp"] == "relu2") & (runs["source_id"] == "nemo-24.07"))
    assert nemo1.height == 3 and set(nemo1["elementwise"]) == {"fused"}
