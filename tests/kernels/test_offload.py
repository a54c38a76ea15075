"""CPU activation offloading (`Profile.offload_layers`, Megatron-core's cpu_offloading_num_layers):
the memory it frees, the transfer time it exposes, and its refusals. Expected values come from
the engine's own model at another depth (brute force: offloading k blocks stores what k - 1 fewer
blocks would) and from the closed form of the exposed copies."""

from __future__ import annotations

from dataclasses import asdict

import pytest

import dse
from dse.spec.specs import SpecError
from kernels.params import PROFILES

DEFAULT = PROFILES["default"]
MODEL = dict(name="m", seq_len=4096, hidden=4096, heads=32, depth=32, ffn=14336, vocab=32000, kv_heads=8, mlp="swiglu")
POINT = dict(system="gb200_nvl72", nvs_size=8, strategy="tp1d", global_batch=16, n1=1, n_d=8, nvs_d=8,
             microbatch=2, recompute="none", zero=3)


def run(k: int = 0, depth: int = 32, host: float | None = None, **kw):
    system = asdict(dse.load_system("gb200_nvl72"))
    if host is not None:
        system["host_bandwidth"] = host
    return dse.evaluate(model={**MODEL, "depth": depth}, **{**POINT, "system": system, **kw},
                        profile=DEFAULT._replace(offload_layers=k))


#: every k is a compiled program of its own: the default suite takes the ends (31 is the one
#: `test_at_most_all_but_one_block_moves` compiles), the rest runs with -m slow
@pytest.mark.parametrize("k", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(10, marks=pytest.mark.slow),
                               31])
def test_offloading_k_blocks_stores_what_k_minus_one_fewer_blocks_would(k):
    """One offloaded block's copy is in transit on the GPU at a time: k blocks moved free k - 1
    blocks' stored activations, exactly the activations of a model k - 1 blocks shallower."""
    assert run(k)["mem_activations"] == pytest.approx(run(0, depth=32 - (k - 1))["mem_activations"], rel=1e-12)
    assert run(k)["mem_weights"] == run(0)["mem_weights"]


def test_at_most_all_but_one_block_moves():
    assert run(1000)["mem_activations"] == run(31)["mem_activations"]
    assert run(1000)["iteration_time"] == run(31)["iteration_time"]


def test_a_fast_host_link_hides_every_copy():
    """Each copy runs beside the next block's compute: at 1e6 GB/s it takes next to none, so the
    iteration is the one without offloading."""
    assert run(20, host=1e6)["iteration_time"] == pytest.approx(run(0)["iteration_time"], rel=1e-12)


def test_a_slow_host_link_exposes_the_copies_beyond_the_compute():
    """Where both copies of each moved block outlast its forward and backward, the exposed time is
    m k (2 A / bw - t_f - t_b): between two such bandwidths it changes by m k 2 A (1/bw1 - 1/bw2),
    A the block's stored activations (GB per microbatch, from the memory of one block more)."""
    k, m = 20, 16 // 8 // 2
    a = run(0)["mem_activations"] - run(0, depth=31)["mem_activations"]  # one microbatch in flight
    slow, slower = run(k, host=0.5), run(k, host=0.25)
    assert slower["t_offload"] - slow["t_offload"] == pytest.approx(m * k * 2 * a * (1 / 0.25 - 1 / 0.5), rel=1e-9)
    base = run(0)
    assert base["t_offload"] == 0.0 and slow["t_offload"] > 0.0
    for part in ("t_compute", "t_memory"):  # the copies are their own term: the GPU waits, it does not work
        assert slow[part] == pytest.approx(base[part], rel=1e-12)
    assert slow["compute_utilisation"] < base["compute_utilisation"]
    parts = ("t_compute", "t_memory", "t_tp_comm", "t_ep_comm", "t_dp_comm", "t_pp_comm", "t_bubble", "t_optimizer",
             "t_offload")
    assert sum(slow[p] for p in parts) == pytest.approx(slow["iteration_time"], rel=1e-12)


def test_offloading_needs_a_host_link_and_megatrons_block():
    with pytest.raises(SpecError, match=r"^profile.offload_layers = 4: system 'gb200_nvl72' has no host link "
                                        r"\(system.host_bandwidth = 0\)"):
        run(4, host=0.0)
    with pytest.raises(SpecError, match=r"^profile.offload_layers = 4: activation offloading is modelled under "
                                        r"Megatron's block only"):
        dse.evaluate(model={**MODEL}, **POINT, profile=PROFILES["lbnl"]._replace(offload_layers=4))
    with pytest.raises(SpecError, match=r"^profile.offload_layers = 4: system 'dgx_b300' has no host link"):
        dse.search(model=MODEL, system="dgx_b300", strategy="tp1d", n_gpus=8, global_batch=16,
                   profile=DEFAULT._replace(offload_layers=4))


def test_offloading_runs_without_a_pipeline_or_recomputation():
    """As in Megatron-core: given candidates with a pipeline or a recompute mode are refused in one
    line; the search enumerates n_p = 1 and recompute none only."""
    with pytest.raises(SpecError, match=r"^n_p = 2: CPU activation offloading \(profile.offload_layers = 4\) runs "
                                        r"without pipeline parallelism"):
        run(4, n_p=2, n_d=4, nvs_p=2, nvs_d=4)
    with pytest.raises(SpecError, match=r"^recompute: CPU activation offloading \(profile.offload_layers = 4\) runs "
                                        r"without activation recomputation"):
        run(4, recompute="selective")
    top = dse.search(model=MODEL, system="dgx_h100", strategy="tp1d", n_gpus=16, global_batch=16, top_k=50,
                     profile=DEFAULT._replace(offload_layers=4))
    assert len(top) > 0 and set(top["n_p"]) == {1} and set(top["recompute"]) == {0}  # RECOMPUTE["none"]


def test_switches_built_in_python_are_checked():
    with pytest.raises(SpecError, match=r"^profile.expert_imbalance = 0.0: must be in \[1.0, 64.0\]"):
        dse.evaluate(model=MODEL, **POINT, profile=DEFAULT._replace(expert_imbalance=0.0))
    with pytest.raises(SpecError, match=r"^profile.offload_layers = -2: must be an integer >= 0"):
        dse.evaluate(model=MODEL, **POINT, profile=DEFAULT._replace(offload_layers=-2))


def test_presets_carry_their_host_links():
    """PCIe Gen5 x16 on the HGX boards, NVLink-C2C on the Grace superchips (GB200: 900 GB/s
    bidirectional for two GPUs), PCIe Gen4 x16 on A100."""
    want = {"dgx_h100": 64.0, "dgx_h200": 64.0, "dgx_b200": 64.0, "gb200_nvl72": 225.0, "dgx_gh200": 450.0,
            "dgx_a100_80gb": 32.0}
    assert {name: dse.load_system(name).host_bandwidth for name in want} == want


def test_cli_takes_the_switch(capsys):
    from dse.cli import main

    args = ["eval", "model=llama3_8b", "system=gb200_nvl72", "system.nvs_size=8", "strategy=tp1d", "n_d=8",
            "nvs1=1", "nvs_p=1", "nvs_d=8", "global_batch=16", "microbatch=2", "recompute=none"]
    assert main(args) == 0
    plain = capsys.readouterr().out
    assert main(args + ["profile.offload_layers=16"]) == 0
    moved = capsys.readouterr().out

    def activations(out):
        return float(next(line.split()[1] for line in out.splitlines() if line.startswith("activations")))

    assert activations(moved) < activations(plain)
