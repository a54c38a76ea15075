"""DeepSeek-V3's DualPipe schedule (`profile.pp_schedule = dualpipe`) against the closed forms of the
DeepSeek-V3 technical report (arXiv 2412.19437, section 3.2.1 and Table 2): a bubble of
(PP/2 - 1)(F&B + B - 3W), twice the parameters, PP + 1 microbatches of activations (the end GPUs
with the embedding's and the loss's beside them), and GPUs that hold a stage from each end of the
pipeline."""

from __future__ import annotations

import numpy as np
import pytest

import dse
from dse.explore.space import Question, configurations
from dse.spec.specs import load_model
from helpers import first, one_candidate
from kernels.block_time import direction_time
from kernels.blocks import block_layers, embedding_layers, logit_layers
from kernels.iteration import prepare
from kernels.params import PROFILES, Candidates

MODEL = dict(name="gpt_test", seq_len=2048, hidden=4096, heads=32, depth=8, ffn=16384, vocab=51200)
SYSTEM = "dgx_a100_80gb"
PLAIN = PROFILES["default"]._replace(embeddings=False, memory_reserve=0.0, calibration="none")
POINT = dict(model=MODEL, system=SYSTEM, n1=1, n_p=4, n_d=2, microbatch=1, nvs1=1, nvs_p=4, nvs_d=2,
             global_batch=32, recompute=1, zero=1)
CANDIDATE = dict(n1=1, n2=1, n_p=4, n_d=2, microbatch=1, nvs1=1, nvs2=1, nvs_p=4, nvs_d=2, n_b=1, interleave=1,
                 recompute=1, seq_par=1, precision=0, zero=1, ep=1)


def dual(profile):
    return profile._replace(pp_schedule="dualpipe")


def forward_parts(layers, s, profile):
    """(forward time, forward compute) of one block: every layer's roofline and collectives."""
    times = [direction_time(x, True, s, profile, "two_tier") for x in layers]
    return sum(first(t.comp + t.mem + t.comm) for t in times), sum(first(t.comp) for t in times)


def both_directions(layers, s, profile, part):
    return sum(first(getattr(direction_time(x, d, s, profile, "two_tier"), part)) for x in layers for d in (True, False))


def test_bubble_is_the_reports_closed_form():
    """Without vocabulary layers every stage is alike: per microbatch a stage takes T = F + B + W, and
    the bubble is (n_p/2 - 1)(F&B + B - 3W) = (n_p/2 - 1)(2T - F - 4W), W the weight gradients taken
    as the forward's compute; F and W summed over the block's layers here, T from the iteration."""
    r = dse.evaluate(profile=dual(PLAIN), **POINT)
    m, n_p, blocks = 16, 4, 2
    stage = (r["iteration_time"] - r["t_bubble"] - r["t_dp_comm"] - r["t_optimizer"]) / m
    model = load_model(MODEL)
    c, w, s = prepare(one_candidate(CANDIDATE), model.workload(32), dse.load_system(SYSTEM).params())
    f, comp = forward_parts(block_layers("tp1d", c, w, s, PLAIN), s, PLAIN)
    expected = (n_p / 2 - 1) * (2 * stage - blocks * f - 4 * blocks * comp)
    assert expected > 0.0
    assert r["t_bubble"] == pytest.approx(expected, rel=1e-9)
    # 1F1B's (n_p - 1) stage times, against DualPipe's: a GEMM-bound block's F&B + B - 3W is about F
    one = dse.evaluate(profile=PLAIN, **POINT)
    assert r["t_bubble"] < one["t_bubble"] / 3


#: each strategy compiles two programs of its own: tp1d in the default suite, the others with -m slow
@pytest.mark.parametrize("strategy", ["tp1d", pytest.param("tp2d", marks=pytest.mark.slow),
                                      pytest.param("summa", marks=pytest.mark.slow)])
def test_memory_holds_two_stages_and_one_more_microbatch(strategy):
    """Two stages' weights and gradients, the optimizer states over twice the copies (ZeRO-1: the
    same bytes), n_p + 1 microbatches of activations where 1F1B's first stage holds n_p; ZeRO-0 keeps
    both stages' optimizer states. The same in every strategy."""
    for zero, opt in ((1, 1.0), (0, 2.0)):
        point = {**POINT, "zero": zero, "strategy": strategy, **({"n_b": 1} if strategy == "summa" else {})}
        one = dse.evaluate(profile=PLAIN, **point)
        two = dse.evaluate(profile=dual(PLAIN), **point)
        assert two["mem_weights"] == pytest.approx(2 * one["mem_weights"], rel=1e-12)
        assert two["mem_grads"] == pytest.approx(2 * one["mem_grads"], rel=1e-12)
        assert two["mem_optimizer"] == pytest.approx(opt * one["mem_optimizer"], rel=1e-12)
        assert two["mem_activations"] == pytest.approx(one["mem_activations"] * (4 + 1) / 4, rel=1e-12)
        assert two["t_dp_comm"] == pytest.approx(2 * one["t_dp_comm"], rel=1e-12)


def test_end_gpus_hold_both_ends_activations():
    """An end GPU holds the first stage with n_p microbatches in flight and the last with one (Table 2's
    n_p + 1: without vocabulary layers every GPU holds n_p + 1 stages' worth), and beside them the
    embedding's and the logit layer and loss's activations, both (1F1B's ends are two GPUs: the larger
    of the two)."""
    prof = PLAIN._replace(embeddings=True)
    model = load_model(MODEL)
    c, w, s = prepare(one_candidate(CANDIDATE), model.workload(32), dse.load_system(SYSTEM).params())
    head = sum(first(x.activation) for x in embedding_layers("tp1d", c, w, s))
    tail = sum(first(x.activation) for x in logit_layers("tp1d", c, w, s))
    plain = dse.evaluate(profile=dual(PLAIN), **POINT)["mem_activations"]
    two = dse.evaluate(profile=dual(prof), **POINT)["mem_activations"]
    assert tail > head >= 0.0  # the lookup keeps nothing; the final norm, logits and loss do
    assert two == pytest.approx(plain + head + tail, rel=1e-12)
    one = dse.evaluate(profile=prof, **POINT)["mem_activations"]  # 1F1B: the first stage, the larger here
    assert one == pytest.approx(dse.evaluate(profile=PLAIN, **POINT)["mem_activations"] + head, rel=1e-12)


def test_end_gpus_take_the_mean_of_the_first_and_last_stage():
    """With the embedding and the logit layer and loss, 1F1B's pace is its busiest end stage; under
    DualPipe the end GPUs run half the microbatches through each end, so the compute per microbatch
    is a middle stage's plus the mean of the embedding's and the logits' (their layers summed here)."""
    prof = PLAIN._replace(embeddings=True)
    m = 16
    mid = dse.evaluate(profile=dual(PLAIN), **POINT)["t_compute"] / m
    model = load_model(MODEL)
    c, w, s = prepare(one_candidate(CANDIDATE), model.workload(32), dse.load_system(SYSTEM).params())
    head = both_directions(embedding_layers("tp1d", c, w, s), s, prof, "comp")
    tail = both_directions(logit_layers("tp1d", c, w, s), s, prof, "comp")
    two = dse.evaluate(profile=dual(prof), **POINT)
    one = dse.evaluate(profile=prof, **POINT)
    assert two["t_compute"] == pytest.approx(m * (mid + 0.5 * (head + tail)), rel=1e-9)
    assert one["t_compute"] == pytest.approx(m * (mid + max(head, tail)), rel=1e-9)
    assert tail > head  # the logits outweigh the embedding lookup


def test_one_stage_is_unchanged():
    """Without a pipeline there is nothing to pair: every metric is 1F1B's."""
    point = {**POINT, "n_p": 1, "nvs_p": 1, "nvs_d": 2}
    one = dse.evaluate(profile=PROFILES["default"], **point)
    two = dse.evaluate(profile=dual(PROFILES["default"]), **point)
    for k in ("iteration_time", "memory", "t_bubble", "mem_weights", "mem_activations", "t_dp_comm"):
        assert two[k] == pytest.approx(one[k], rel=1e-12), k


def test_search_enumerates_only_what_dualpipe_runs():
    """The search space under DualPipe: no interleaving, n_p even or 1, an even microbatch count of at
    least n_p; 1F1B's space holds the odd and interleaved pipelines too."""
    model = load_model(dict(MODEL, depth=12))
    base = configurations(Question(model, "tp1d", 48), 24)
    cfg = configurations(Question(model, "tp1d", 48, dualpipe=True), 24)
    m = (48 // cfg["n_d"]) // cfg["microbatch"]
    piped = cfg["n_p"] > 1
    assert len(cfg["n_p"]) > 0 and piped.any()
    assert (cfg["interleave"] == 1).all()
    assert ((cfg["n_p"][piped] % 2 == 0) & (m[piped] % 2 == 0) & (m[piped] >= cfg["n_p"][piped])).all()
    assert (base["n_p"] % 2 == 1).any() and (base["n_p"] > 1).any() and (base["interleave"] > 1).any()
    rows = set(zip(*(cfg[k].tolist() for k in ("n1", "n_p", "n_d", "microbatch", "interleave", "recompute"))))
    base_rows = set(zip(*(base[k].tolist() for k in ("n1", "n_p", "n_d", "microbatch", "interleave", "recompute"))))
    assert rows < base_rows


def test_search_answers_under_the_schedule():
    """`dse.search` with the DualPipe profile: its best row is one DualPipe runs, and that row
    evaluated alone under the same profile gives the same time."""
    prof = dual(PROFILES["default"])
    res = dse.search(model="llama3_8b", system="dgx_h100", n_gpus=64, strategy="tp1d", profile=prof,
                     global_batch=256, top_k=3)
    best = res.row(0, named=True)
    n_p, m = best["n_p"], (256 // best["n_d"]) // best["microbatch"]
    assert best["interleave"] == 1 and (n_p == 1 or (n_p % 2 == 0 and m % 2 == 0 and m >= n_p))
    keys = ("n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p", "nvs_d", "interleave", "recompute",
            "seq_par", "precision", "zero")
    alone = dse.evaluate(model="llama3_8b", system="dgx_h100", strategy="tp1d", profile=prof, global_batch=256,
                         **{k: best[k] for k in keys})
    assert alone["iteration_time"] == pytest.approx(best["iteration_time"], rel=1e-12)


@pytest.mark.parametrize("overrides, message", [
    (["n_p=3", "nvs_p=1", "nvs_d=1", "n_d=2"],
     "n_p = 3: profile.pp_schedule = 'dualpipe' pairs stage i with stage n_p - 1 - i; n_p must be even (or 1)"),
    (["n_p=2", "interleave=2", "nvs_p=1", "nvs_d=1", "n_d=2"],
     "interleave = 2: profile.pp_schedule = 'dualpipe' has no virtual stages; must be 1"),
    (["n_p=2", "nvs_p=1", "nvs_d=1", "n_d=1", "microbatch=64"],
     "microbatch count = 1 (global batch / n_d / microbatch): profile.pp_schedule = 'dualpipe' feeds half from "
     "each end; must be even and >= n_p = 2"),
])
def test_schedule_errors_are_one_line(capsys, overrides, message):
    from dse.cli import main

    args = ["eval", "model=llama3_8b", "system=dgx_h100", "strategy=tp1d", "n1=8", "nvs1=8", "global_batch=64",
            "profile.pp_schedule=dualpipe"]
    assert main(args + overrides) == 2
    assert capsys.readouterr().err == f"dse eval: error: {message}\n"


def test_dualpipe_needs_megatrons_block(capsys):
    from dse.cli import main

    args = ["eval", "model=llama3_8b", "system=dgx_h100", "strategy=tp1d", "profile=lbnl", "n1=8", "nvs1=8",
            "n_p=2", "nvs_p=1", "n_d=1", "nvs_d=1", "global_batch=64", "profile.pp_schedule=dualpipe"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("dse eval: error: profile.pp_schedule = 'dualpipe': profile ") and "must be '1f1b'" in err
