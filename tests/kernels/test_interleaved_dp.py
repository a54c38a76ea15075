"""Data-parallel overlap under Megatron's interleaved schedule (`kernels.data_parallel.chunked`): each
model chunk synchronizes its gradients (and gathers its parameters) with its last (first) microbatch,
so the earlier chunks' collectives run under the other chunks' microbatches. The closed form against
a first-in-first-out simulation of every block's collective, and its effect on a Megatron run."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import dse
from kernels.data_parallel import chunked, overlapped
from kernels.params import PROFILES

DEFAULT = PROFILES["default"]


def simulated(t_comm: float, t_hide: float, blocks: int, v: int, n_p: int) -> float:
    """Exposed time of the stage's collectives, event by event: the schedule's last group runs chunk v - 1,
    then v - 2, ... 0, each for n_p microbatches of blocks / v blocks of t_hide; a chunk's block issues
    its collective when its compute in the chunk's last microbatch is done; one stream runs them in order
    of issue, t_comm each. What runs past the end of the compute is exposed."""
    per = blocks // v
    clock, stream = 0.0, 0.0
    for _chunk in range(v):
        clock += (n_p - 1) * per * t_hide  # the chunk's earlier microbatches
        for _block in range(per):  # its last microbatch: each block issues its collective when done
            clock += t_hide
            stream = max(stream, clock) + t_comm
    return max(stream - clock, 0.0)


CASES = list(itertools.product((0.3, 1.0, 2.5, 7.0), (1, 2, 4, 12), (2, 4, 8)))


@pytest.mark.parametrize("t_comm,v,n_p", CASES)
def test_the_closed_form_is_the_simulated_stream(t_comm, v, n_p):
    blocks, t_hide = 24, 1.0
    got = float(chunked(np.float64(t_comm), np.float64(t_hide), np.float64(blocks), np.float64(v), np.float64(n_p)))
    assert got == pytest.approx(simulated(t_comm, t_hide, blocks, v, n_p), rel=1e-12, abs=1e-12)


def test_one_chunk_is_the_seed_sweep_exactly():
    """v = 1: one chunk, its collectives behind its own last microbatch only (seed 001's sweep), bit for bit."""
    for t_comm, t_hide, blocks in ((0.5, 1.0, 8.0), (3.0, 1.0, 24.0), (1.0, 1.0, 5.0), (2.0, 0.0, 7.0)):
        args = (np.float64(t_comm), np.float64(t_hide), np.float64(blocks))
        assert float(chunked(*args, np.float64(1.0), np.float64(8.0))) == float(overlapped(*args))


def test_interleaving_hides_part_of_a_slow_fabric_s_synchronization():
    """GPT-3 175B on 128 B200s (tp 8 in the node, pp 4, dp 4 over the NICs, 8 microbatches): each block's
    reduce-scatter and allgather over 400 Gb/s outlast its compute. One chunk hides them behind its last
    microbatch's blocks only; more chunks hide each earlier chunk's behind the 4 microbatches after it, so
    the exposed time falls as v grows (1, 2, 4, 12), and compute does not move with it."""
    common = dict(model="gpt3_175b", system="dgx_b200", strategy="tp1d", profile="default", global_batch=32,
                  n1=8, n_p=4, n_d=4, microbatch=1, nvs1=8, nvs_p=1, nvs_d=1, precision="fp8", recompute="none")
    runs = [dse.evaluate(**common, interleave=v) for v in (1, 2, 4, 12)]
    exposed = [r["t_dp_comm"] for r in runs]
    assert all(b < a for a, b in zip(exposed, exposed[1:]))
    assert exposed[-1] < 0.8 * exposed[0]
    assert all(r["t_compute"] == pytest.approx(runs[0]["t_compute"], rel=1e-12) for r in runs)
    # switched off (profile.dp_chunked=false), the stage's one sweep whatever v
    off = DEFAULT._replace(dp_chunked=False)
    swept = [dse.evaluate(**{**common, "profile": off}, interleave=v)["t_dp_comm"] for v in (1, 12)]
    assert swept[1] == swept[0] == pytest.approx(exposed[0], rel=1e-12)


def test_only_the_once_per_iteration_stages_are_chunked():
    """Under the default profile, ZeRO 1 (Megatron's distributed optimizer) synchronizes once per iteration and
    is chunked: its exposed time drops with v = 2; ZeRO 2 reduce-scatters after every microbatch and ZeRO 3
    gathers every microbatch, so their exposed data-parallel time does not depend on the interleave."""
    common = dict(model="llama3_70b", system="dgx_h100", strategy="tp1d", profile="default", global_batch=64,
                  n1=8, n_p=2, n_d=4, microbatch=1, nvs1=8, nvs_p=1, nvs_d=1)
    one, two = ({z: dse.evaluate(**common, zero=z, interleave=v)["t_dp_comm"] for z in (1, 2, 3)} for v in (1, 2))
    assert two[1] < 0.9 * one[1]
    assert two[2] == pytest.approx(one[2], rel=1e-12)
    assert two[3] == pytest.approx(one[3], rel=1e-12)


@pytest.mark.parametrize("t_hide", (0.0, 0.4, 3.0))
def test_one_block_chunks_and_other_compute_times(t_hide):
    """Chunks of one block (v = blocks) and compute from none to more than the collective, against the stream."""
    for t_comm, v, n_p in ((1.0, 24, 4), (2.0, 12, 1), (0.5, 6, 3)):
        got = float(chunked(np.float64(t_comm), np.float64(t_hide), np.float64(24.0), np.float64(v), np.float64(n_p)))
        assert got == pytest.approx(simulated(t_comm, t_hide, 24, v, n_p), rel=1e-12, abs=1e-12)
