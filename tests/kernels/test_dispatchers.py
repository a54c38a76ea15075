"""Megatron-core's token dispatchers (`profile.moe_dispatcher`): what each all-to-all carries and how
many local reorderings of the routed copies each runs. Expected values: exact enumeration of every
routing of small expert sets, binomial coefficients, and the passes counted off the dispatchers'
code paths (kernels/experts.py)."""

from __future__ import annotations

import itertools
import math

import pytest

import dse
from dse.cli import main
from dse.spec.specs import load_model
from kernels.blocks import block_layers
from kernels.experts import dispatch_share, regroup_passes, unhit_share
from kernels.iteration import prepare
from helpers import first, one_candidate
from kernels.params import PROFILES, Workload

f = first
DEFAULT = PROFILES["default"]._replace(expert_tp=False)
EPS = 2e-9  # GB per bf16 element


@pytest.mark.parametrize("experts, held, k", [(128, 16, 8), (256, 32, 8), (128, 2, 4), (12, 3, 3), (8, 7, 2),
                                              (8, 8, 1), (10, 1, 10)])
def test_unhit_share_is_the_binomial_ratio(experts, held, k):
    """C(E - g, k) / C(E, k), 0 where fewer than k experts lie outside the g."""
    want = math.comb(experts - held, k) / math.comb(experts, k)
    assert f(unhit_share(experts, held, k)) == pytest.approx(want, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("experts, k, gpus", [(12, 3, 1), (12, 3, 2), (12, 3, 3), (12, 3, 4), (12, 3, 6),
                                              (12, 3, 12), (16, 4, 8), (16, 2, 4)])
@pytest.mark.parametrize("dispatcher", ["deepep", "hybridep"])
def test_fused_dispatch_sends_each_token_once_per_gpu(experts, k, gpus, dispatcher):
    """Every routing of a token (each k-subset of the E experts equally likely, as forced balance
    makes them) enumerated: the mean count of distinct GPUs holding its experts (E / gpus each,
    contiguous as Megatron places them), over k copies, is the share the fused exchange carries."""
    per = experts // gpus
    subsets = list(itertools.combinations(range(experts), k))
    mean = sum(len({e // per for e in s}) for s in subsets) / len(subsets)
    w = Workload(1, 1, 1, 1, 1, 1, experts=experts, moe_tokens=k)
    got = f(dispatch_share(DEFAULT._replace(moe_dispatcher=dispatcher), w, gpus))
    assert got == pytest.approx(mean / k, rel=1e-12)
    assert dispatch_share(DEFAULT, w, gpus) == 1.0  # alltoall: every copy


@pytest.mark.parametrize("dispatcher, per_gpu, passes", [
    ("alltoall", 16.0, 2.0), ("alltoall", 1.0, 1.0), ("deepep", 16.0, 1.0), ("deepep", 1.0, 1.0),
    ("hybridep", 16.0, 1.0), ("hybridep", 1.0, 1.0)])
def test_regroup_passes_by_dispatcher(dispatcher, per_gpu, passes):
    """alltoall: permute before the exchange, sort_chunks_by_idxs after it with more than one local
    expert (and their inverses); DeepEP and HybridEP: the expansion into expert order after the
    exchange (HybridEP's inside its dispatch call), however many experts a GPU holds."""
    before, after = regroup_passes(DEFAULT._replace(moe_dispatcher=dispatcher), per_gpu)
    assert f(before) == f(after) == passes


@pytest.mark.parametrize("dispatcher", ["alltoall", "deepep", "hybridep"])
def test_block_carries_and_reorders_what_its_dispatcher_does(dispatcher):
    """Qwen3-30B-A3B (128 experts, top-8, e = 2048) on 8 GPUs, ep = 8 (16 experts each), one sequence of
    4,096 tokens a microbatch: 8 l e routed elements; the exchanges carry every copy under alltoall and
    8 (1 - C(112, 8) / C(128, 8)) / 8 of them under the fused dispatchers; the reorderings move
    2 elements' bytes per copy and pass, 2 passes each way under alltoall, 1 under the fused ones."""
    m = load_model("qwen3_30b_a3b")
    c = one_candidate(dict(n1=1, n2=1, n_p=1, n_d=8, microbatch=1, nvs1=1, nvs2=1, nvs_p=1, nvs_d=8, n_b=1,
                           interleave=1, recompute=1, seq_par=1, precision=0, zero=1, ep=8))
    s = dse.load_system("dgx_h100").params()
    cf, wf, sf = prepare(c, m.workload(64), s)
    layers = {x.name: x for x in block_layers("tp1d", cf, wf, sf, DEFAULT._replace(moe_dispatcher=dispatcher),
                                              m.arch)}
    copies = 8 * 4096 * 2048
    share = 1.0 if dispatcher == "alltoall" else 8 * (1 - math.comb(112, 8) / math.comb(128, 8)) / 8
    for name in ("dispatch", "combine"):
        for comm in (layers[name].comm_f[0], layers[name].comm_b[0]):
            assert f(comm.volume) == pytest.approx(copies * share * EPS, rel=1e-12)
    passes = {"alltoall": 2, "deepep": 1, "hybridep": 1}[dispatcher]
    for name in ("permute", "unpermute"):
        assert f(layers[name].traffic_f) == f(layers[name].traffic_b) == pytest.approx(
            2 * copies * EPS * passes, rel=1e-12)


def test_measured_column_sets_the_dispatcher_and_refuses_others(tmp_path):
    """A run's `token_dispatcher` reaches the profile that predicts it (blank: the profile's own);
    a value outside the three is one line naming the column, the value and the valid ones."""
    from dse.truth.measured import plan, run_profile
    from dse.truth.runs import read_runs

    head = ("model,preset,seq_len,tp,pp,dp,gpus,global_batch,micro_batch,interleave,recompute,sequence_parallel,"
            "gpu,measured_iter_s,ep,precision,token_dispatcher")
    row = "qwen3-30b,qwen3_30b_a3b,4096,1,1,8,8,512,1,1,none,true,B200,10.0,8,bf16,{}"
    p = tmp_path / "runs.csv"
    p.write_text("\n".join([head, row.format("hybridep"), row.format("")]) + "\n")
    calls = plan(read_runs(p))
    got = sorted(run_profile("default", call).moe_dispatcher for call in calls)
    assert got == ["alltoall", "hybridep"]
    p.write_text("\n".join([head, row.format("nccl")]) + "\n")
    runs = read_runs(p)
    assert [e.column for e in runs.errors] == ["token_dispatcher"]
    assert runs.errors[0].message == "nccl: must be one of alltoall | deepep | hybridep"


def test_profile_switch_is_checked_in_one_line(capsys):
    args = ["eval", "model=qwen3_30b_a3b", "system=dgx_b200", "strategy=tp1d", "profile.moe_dispatcher=nccl"]
    assert main(args) == 2
    assert capsys.readouterr().err == (
        "dse eval: error: profile.moe_dispatcher = 'nccl': must be one of alltoall, deepep, hybridep\n")



@pytest.mark.parametrize("experts, k, gpus, per_domain", [(16, 3, 8, 2), (16, 4, 8, 4), (12, 2, 6, 3), (12, 3, 6, 2)])
def test_fused_dispatch_crosses_once_per_domain(experts, k, gpus, per_domain):
    """Every routing enumerated: of the GPUs outside the sender's domain that a token's experts sit on,
    the fused exchanges cross to each other domain once; the inter-domain share is the mean count of
    those domains over the mean count of those GPUs (the exchange's bytes, not a mean of ratios)."""
    from kernels.experts import crossing_share

    per_gpu = experts // gpus
    subsets = list(itertools.combinations(range(experts), k))
    gpus_of = [{e // per_gpu for e in s} for s in subsets]
    other_gpus = sum(len({g for g in hit if g // per_domain != 0}) for hit in gpus_of) / len(subsets)
    other_domains = sum(len({g // per_domain for g in hit} - {0}) for hit in gpus_of) / len(subsets)
    w = Workload(1, 1, 1, 1, 1, 1, experts=experts, moe_tokens=k)
    assert f(crossing_share(w, gpus, per_domain)) == pytest.approx(other_domains / other_gpus, rel=1e-12)
    assert f(crossing_share(w, gpus, gpus)) == 1.0  # one domain: nothing crosses


def test_fused_dispatch_applies_its_crossing_share_to_the_exchange():
    """DeepSeek-V3 (256 experts, top-8) with ep = 64 over 8 nodes of 8: the alltoall dispatcher sends every
    copy across; DeepEP's exchange carries the per-GPU share and its inter-domain step the domain share."""
    from kernels.experts import crossing_share

    m = load_model("deepseek_v3")
    c = one_candidate(dict(n1=1, n2=1, n_p=1, n_d=64, microbatch=1, nvs1=1, nvs2=1, nvs_p=1, nvs_d=8, n_b=1,
                           interleave=1, recompute=1, seq_par=1, precision=0, zero=1, ep=64))
    s = dse.load_system("dgx_h800").params()
    cf, wf, sf = prepare(c, m.workload(64), s)
    got = {d: next(x for x in block_layers("tp1d", cf, wf, sf, DEFAULT._replace(moe_dispatcher=d), m.arch)
                   if x.name == "dispatch").comm_f[0] for d in ("alltoall", "deepep")}
    assert got["alltoall"].cross == 1.0
    assert f(got["deepep"].cross) == pytest.approx(f(crossing_share(wf, 64.0, 8.0)), rel=1e-12)
    assert 0.6 < f(got["deepep"].cross) < 0.75  # 4.6 other nodes for 6.6 other GPUs a token


def test_api_refuses_an_unknown_dispatcher_before_compute():
    """A `Profile` given to the API is checked as the command line's override is: one SpecError line."""
    from dse.spec.specs import SpecError

    with pytest.raises(SpecError, match=r"^profile.moe_dispatcher = 'nccl': must be one of alltoall, deepep, hybridep$"):
        dse.evaluate(model="qwen3_30b_a3b", system="dgx_b200", strategy="tp1d", n_d=8, nvs_d=8, global_batch=64,
                     ep=8, profile=PROFILES["default"]._replace(moe_dispatcher="nccl"))
