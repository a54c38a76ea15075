"""Answers a user can act on: every answer names its whole configuration and the `dse eval` command
that gives the same time; a configuration given is evaluated as given or refused in one line."""

from __future__ import annotations

import re
import shlex

import polars as pl
import pytest

from dse.api import evaluate
from dse.cli import main
from dse.interface.answer import ties
from dse.interface.app import run_job
from dse.interface.reproduce import configuration, config_text
from tests.helpers import config

SMALL = ("model=llama3_8b", "system=dgx_h100", "n_gpus=64", "output.write=false", "output.show=3")


def _answer(*overrides: str) -> str:
    lines: list[str] = []
    run_job(config(*SMALL, *overrides), echo=lines.append)
    return "\n".join(lines)


def _best(text: str) -> tuple[float, list[str]]:
    """The best line's seconds per iteration and its `reproduce:` command's arguments."""
    best = next(ln for ln in text.splitlines() if ln.startswith("best: "))
    seconds = float(re.search(r": ([0-9.e+-]+) s per iteration", best).group(1))
    command = next(ln for ln in text.splitlines() if ln.startswith("reproduce: "))
    argv = shlex.split(command.removeprefix("reproduce: "))
    assert argv[:2] == ["dse", "eval"]
    return seconds, argv[2:]


def _eval_seconds(argv, capsys) -> float:
    assert main(["eval", *argv, "--json"]) == 0, capsys.readouterr().err
    import json

    return json.loads(capsys.readouterr().out)["iteration_time"]


@pytest.mark.parametrize("extra", [
    (),
    ("model.seq_len=4096", "global_batch=512"),
    ("profile.precision=fp8", "strategy=tp1d"),
    ("+search.grid.hbm_bandwidth=[2000.0,3350.0]", "strategy=tp1d"),
    ("system.nvs_size=[4,8]", "strategy=tp1d", "n_gpus=32"),
    ("network=rail_only", "strategy=tp2d", "profile.zero=any"),
])
def test_the_printed_command_reproduces_the_best_time(capsys, extra):
    seconds, argv = _best(_answer(*extra))
    capsys.readouterr()
    assert _eval_seconds(argv, capsys) == pytest.approx(seconds, rel=5e-4)  # the line prints 4 digits


def test_a_model_of_its_own_name_is_reproduced_by_its_fields(capsys):
    """A changed model given a name of its own is no preset: the command names it once and gives
    every field (it named it twice), and reproduces the time."""
    seconds, argv = _best(_answer("model.depth=16", "model.name=llama3_8b_d16", "strategy=tp1d"))
    assert [a for a in argv if a.startswith("model.name=")] == ["model.name=llama3_8b_d16"]
    assert "model.depth=16" in argv and not any(a.startswith("model=") for a in argv)
    capsys.readouterr()
    assert _eval_seconds(argv, capsys) == pytest.approx(seconds, rel=5e-4)


def test_the_best_line_names_every_key_of_the_configuration():
    best = next(ln for ln in _answer("strategy=tp1d").splitlines() if ln.startswith("best: "))
    for key in ("n1=", "cp=", "n_p=", "n_d=", "microbatch=", "nvs1=", "nvs_cp=", "nvs_p=", "nvs_d=", "interleave=",
                "recompute=", "seq_par=", "precision=", "zero=", "ep="):
        assert f" {key}" in best, key


def test_moe_command_reproduces_the_expert_parallel_degree(capsys):
    """An MoE best with its ep named: `dse eval`'s own default (gcd(n_d, experts)) is not used."""
    text = _answer("model=mixtral_8x7b", "strategy=tp1d", "n_gpus=128", "global_batch=256")
    seconds, argv = _best(text)
    ep = next(a for a in argv if a.startswith("ep="))
    capsys.readouterr()
    assert _eval_seconds(argv, capsys) == pytest.approx(seconds, rel=5e-4)
    n_d = int(next(a for a in argv if a.startswith("n_d=")).split("=")[1])
    other = [a if not a.startswith("ep=") else f"ep={1 if ep != 'ep=1' else min(8, n_d)}" for a in argv]
    if other != argv:  # another expert-parallel degree is another time: the key matters
        assert _eval_seconds(other, capsys) != pytest.approx(seconds, rel=1e-6)


@pytest.mark.parametrize("model,system,cfg", [
    ("gpt3_175b", "dgx_h100", dict(n1=8, n_p=8, n_d=16, microbatch=1, nvs1=8, nvs_p=1, nvs_d=1)),
    ("llama3_70b", "dgx_h100", dict(n1=4, n_p=4, n_d=8, microbatch=2, nvs1=4, nvs_p=2, nvs_d=1, interleave=2,
                                    recompute="full")),
    ("mixtral_8x7b", "dgx_h100", dict(n1=2, n_p=2, n_d=16, microbatch=1, nvs1=2, nvs_p=1, nvs_d=4, ep=8)),
])
def test_tp2d_with_n2_of_one_is_tp1d(model, system, cfg):
    """Why the answer shows a tp2d row with n2 = 1 once, as tp1d's: both give the same time and memory."""
    a = evaluate(model=model, system=system, strategy="tp1d", nvs2=1, **cfg)
    b = evaluate(model=model, system=system, strategy="tp2d", n2=1, nvs2=1, **cfg)
    for k in ("iteration_time", "memory", "t_tp_comm", "t_dp_comm", "t_bubble"):
        assert a[k] == b[k], k


def test_answer_shows_a_shared_configuration_once():
    text = _answer()
    tp2d = next(part for part in text.split("\n\n") if part.startswith("tp2d:"))
    rows = [ln.split() for ln in tp2d.splitlines() if re.match(r"\s+64\s+\d", ln)]
    header = next((ln.split() for ln in tp2d.splitlines() if ln.startswith("n_gpus")), None)
    if header is None:  # every fast tp2d configuration has n2 = 1
        assert "which are tp1d's" in tp2d
    else:
        assert all(r[header.index("n2")] != "1" for r in rows)
    assert text.count("best: ") == 1


def test_ties_mark_rows_within_the_band_of_the_fastest():
    top = pl.DataFrame({"n_gpus": [64, 64, 64, 128], "iteration_time": [10.0, 10.5, 11.5, 4.0],
                        "error_band": [0.1, 0.1, 0.1, 0.1]})
    assert ties(top)["tie"].to_list() == [False, True, False, False]
    # a row exactly as fast as the fastest is a tie; the first of them is the reference
    same = pl.DataFrame({"n_gpus": [64, 64, 64, 64], "iteration_time": [10.0, 10.0, 10.0, 10.9],
                         "error_band": [0.1, 0.1, 0.1, 0.1]})
    assert ties(same)["tie"].to_list() == [False, True, True, True]
    none = top.with_columns(pl.lit(None, dtype=pl.Float64).alias("error_band"))
    assert ties(none)["tie"].null_count() == 4  # no band: no verdict


def test_the_best_line_counts_the_ties_the_tables_show():
    """The best line's "N other configurations shown are within that band" is the number of rows
    the tables above it mark as ties (it counted every kept row, shown or not), and a row as fast as
    the best is one of them."""
    text = _answer("profile.precision=fp8", "output.show=4")
    marked = 0
    for block in text.split("\n\n"):
        lines = block.splitlines()
        header = next((i for i, ln in enumerate(lines) if ln.split()[:2] == ["n_gpus", "rank"]), None)
        if header is None or "tie" not in lines[header].split():
            continue
        rows = [ln.split() for ln in lines[header + 2:]]
        marked += sum(r[-1] == "yes" for r in rows)
        best = float(rows[0][lines[header].split().index("iteration_time")])
        assert all(r[-1] == "yes" for r in rows[1:] if float(r[lines[header].split().index("iteration_time")]) == best)
    best_line = next(ln for ln in text.splitlines() if ln.startswith("best: "))
    stated = re.search(r"; (\d+) other configurations? shown (?:are|is) within that band", best_line)
    assert marked > 0 and int(stated.group(1)) == marked, (marked, best_line)


@pytest.mark.parametrize("row,text", [
    ({"n1": 2, "n2": 4, "n_p": 1, "n_d": 8, "microbatch": 1, "nvs1": 2, "nvs2": 4, "nvs_p": 1, "nvs_d": 1,
      "interleave": 1, "recompute": 2, "seq_par": 1, "precision": 1, "zero": 3, "ep": 1},
     "n1=2 cp=4 n_p=1 n_d=8 microbatch=1 nvs1=2 nvs_cp=4 nvs_p=1 nvs_d=1 interleave=1 recompute=full seq_par=true "
     "precision=fp8 zero=3 ep=1"),
    ({"n1": 2, "n2": 4, "n_p": 1, "n_d": 8, "microbatch": 1, "nvs1": 2, "nvs2": 4, "nvs_p": 1, "nvs_d": 1,
      "interleave": 1, "recompute": "none", "seq_par": False, "precision": "bf16", "zero": 1, "ep": 4},
     "n1=2 cp=4 n_p=1 n_d=8 microbatch=1 nvs1=2 nvs_cp=4 nvs_p=1 nvs_d=1 interleave=1 recompute=none seq_par=false "
     "precision=bf16 zero=1 ep=4"),
])
def test_configuration_decodes_codes_and_names_alike(row, text):
    assert config_text(configuration(row, "tp1d")) == text


GIVEN = ["model=llama3_8b", "system=dgx_h100", "strategy=tp1d", "n1=8", "n_d=4", "nvs1=8", "nvs_p=1", "nvs_d=1"]


@pytest.mark.parametrize("command", ["eval", "sensitivity", "whatif", "traffic"])
def test_a_gpu_count_that_is_not_the_configurations_is_refused(capsys, command):
    assert main([command, *GIVEN, "n_gpus=64"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "n_gpus = 64" in err and "uses 32 GPUs" in err and "give n_gpus=32" in err


def test_the_configurations_own_gpu_count_is_accepted(capsys):
    assert main(["eval", *GIVEN, "n_gpus=32", "--json"]) == 0
    assert '"n_gpus": 32' in capsys.readouterr().out


def test_codesign_refuses_a_configuration(capsys):
    assert main(["codesign", "model=llama3_8b", "system=dgx_h100", "n_gpus=64", "n1=8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "n1=8" in err and "takes no configuration keys" in err


TOO_BIG = ["model=llama3_70b", "system=dgx_h100", "strategy=tp1d", "n1=1", "n_d=8", "nvs1=1", "nvs_p=1", "nvs_d=8"]


@pytest.mark.parametrize("command", ["sensitivity", "whatif"])
def test_a_configuration_that_does_not_fit_is_said_first(capsys, command):
    assert main([command, *TOO_BIG]) == 2
    err = capsys.readouterr().err.strip()
    need = evaluate(model="llama3_70b", system="dgx_h100", strategy="tp1d", n1=1, n_d=8, nvs1=1, nvs_p=1,
                    nvs_d=8)["memory"]
    assert err.count("\n") == 0 and "does not fit" in err and f"{need:.4g} GB" in err and "85.52 GB" in err


def test_eval_says_does_not_fit_on_its_first_line(capsys):
    assert main(["eval", *TOO_BIG]) == 0  # eval shows the breakdown of what does not fit
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("DOES NOT FIT") and "85.52 GB" in first


def test_sensitivity_headroom_is_how_far_the_capacity_can_fall():
    """At capacity x (1 - headroom) the configuration stops fitting, just above it still fits."""
    from dse.decisions.sensitivity import analyse, resolve_point

    from dse.spec.specs import load_system

    p = resolve_point(model="llama3_8b", system="dgx_h100", strategy="tp1d", n1=2, n_d=4, nvs1=2, nvs_p=1, nvs_d=4)
    head = analyse(p, ["hbm_capacity"]).frame["headroom"][0]
    edge = p.system.hbm_capacity * (1.0 - head)
    for factor, fits in ((1.0001, True), (0.9999, False)):
        r = evaluate(model="llama3_8b", system=load_system("dgx_h100").replace(hbm_capacity=edge * factor),
                     strategy="tp1d", n1=2, n_d=4, nvs1=2, nvs_p=1, nvs_d=4)
        assert r["feasible"] == fits


def test_traffic_names_the_expert_parallel_degree_and_its_bytes_apart(capsys):
    args = ["model=mixtral_8x7b", "system=dgx_h100", "strategy=tp1d", "n1=4", "n_p=2", "n_d=8", "nvs1=4",
            "nvs_p=1", "nvs_d=2", "ep=8"]
    assert main(["traffic", *args]) == 0
    out = capsys.readouterr().out
    cfg = next(ln for ln in out.splitlines() if ln.startswith("configuration:"))
    assert " ep=8 " in cfg
    from dse.traffic import traffic_one

    row = traffic_one(model="mixtral_8x7b", system="dgx_h100", strategy="tp1d", n1=4, n_p=2, n_d=8, nvs1=4,
                      nvs_p=1, nvs_d=2, ep=8)
    assert row["ep"] == 8 and row["ep_gb"] == pytest.approx(row["ep_hb"] + row["ep_rail"] + row["ep_cross"])
    ep_line = next(ln for ln in out.splitlines() if ln.startswith("EP "))
    assert f"{row['ep_gb']:.6g}" in ep_line


def test_search_prints_one_best_line_that_reproduces(capsys):
    assert main(["search", "model=llama3_8b", "system=dgx_h100,dgx_b200", "n_gpus=64", "strategy=tp1d",
                 "search.top_k=2"]) == 0
    out = capsys.readouterr().out
    assert out.count("best: ") == 1 and " of dgx_b200 " in out  # the faster GPU wins at the same count
    seconds, argv = _best(out)
    assert "system=dgx_b200" in argv
    assert _eval_seconds(argv, capsys) == pytest.approx(seconds, rel=5e-4)


@pytest.mark.parametrize("strategy", ["tp1d", "tp2d"])
def test_search_never_ranks_less_than_one_token_per_shard(strategy):
    """seq_len 4 on 64 GPUs: no candidate splits a sequence over more than 4 GPUs (brute force over
    the rows the search keeps)."""
    from dse.explore.search import search

    top = search(model={"name": "tiny", "seq_len": 4, "hidden": 1024, "heads": 16, "depth": 8, "ffn": 4096},
                 system="dgx_h100", strategy=strategy, n_gpus=64, global_batch=512, top_k=50)
    assert top.height > 0 or strategy == "tp2d"  # tp2d's sequence shards need 128 tokens: none here
    assert ((top["n1"] * top["n2"]) <= 4).all()


@pytest.mark.parametrize("model,given,batch,source", [
    ("deepseek_v3", None, 15360, "the model preset's published batch"),  # DeepSeek-V3 report, section 4.2
    ("gpt3_175b", None, 1536, "the model preset's published batch"),  # Narayanan et al. 2021, Table 1
    ("llama3_405b", None, 2048, "the model preset's published batch"),  # 16M tokens / 8,192 (Llama 3, 3.4.1)
    ("llama3_8b", None, 4096, "the default: the model preset publishes none"),
    ("deepseek_v3", 512, 512, "given"),
])
def test_the_global_batch_is_the_presets_published_one_unless_given(model, given, batch, source):
    from dse.interface.app import Job

    job = Job.from_config(config(f"model={model}", *([f"global_batch={given}"] if given else [])))
    assert (job.global_batch, job.batch_source) == (batch, source)


def test_eval_says_where_its_global_batch_comes_from(capsys):
    assert main(["eval", "model=gpt3_175b", "system=dgx_h100", "strategy=tp1d", "n1=8", "n_p=8", "n_d=16", "nvs1=8",
                 "nvs_p=1", "nvs_d=1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("global batch 1536 (the model preset's published batch)")


def test_a_grid_study_ends_with_one_best_line_that_reproduces(capsys):
    """Seven hardware points: the tables show each group's fastest, the question still gets one answer."""
    grid = "+search.grid.hbm_bandwidth=[2000.0,2500.0,3000.0,3350.0,4000.0,5000.0,6000.0]"
    text = _answer(grid, "strategy=tp1d", "n_gpus=32")
    assert "fastest configuration per hbm_bandwidth" in text and text.count("best: ") == 1
    seconds, argv = _best(text)
    assert "system.hbm_bandwidth=6000.0" in argv  # the fastest memory wins
    capsys.readouterr()
    assert _eval_seconds(argv, capsys) == pytest.approx(seconds, rel=5e-4)


def test_seed_reference_systems_say_so(capsys):
    """Seed 001's systems (a100, h200, b200 with its NVS sizes) and its projected b200_next are
    named as such on the answer line and by `dse eval`; shipped systems carry no such note."""
    from dse.cli import main
    from dse.spec.specs import SpecError, load_system

    assert {n: load_system(n).status for n in ("a100", "b200", "h200", "b200_next", "dgx_b200")} == {
        "a100": "reference", "b200": "reference", "h200": "reference", "b200_next": "projected", "dgx_b200": ""}
    with pytest.raises(SpecError, match=r"^system.status = 'maybe': must be one of reference \| projected \| announced"):
        load_system("dgx_b200", status="maybe")
    assert main(["eval", "model=llama3_8b", "system=b200", "strategy=tp1d", "n1=4", "n_p=1", "n_d=2",
                 "microbatch=1", "nvs1=4", "nvs_p=1", "nvs_d=1", "global_batch=64"]) == 0
    out = capsys.readouterr().out
    assert "system b200: a seed paper's reference values, not a shipped system (NVS 4)" in out


def test_answer_line_note_of_a_reference_system():
    from types import SimpleNamespace

    from dse.interface.answer import system_status
    from dse.spec.specs import load_system

    assert system_status(SimpleNamespace(system=load_system("b200_next"))) == (
        " [system b200_next: a projected generation, not a shipped system (NVS 64)]")
    assert system_status(SimpleNamespace(system=load_system("gb200_nvl72"))) == ""


def test_printed_overrides_quote_a_pipeline_layout(capsys):
    """A string value Hydra's grammar would not read bare (a layout's '|', '(' and '*') is printed
    quoted, and the printed override reads back to the same model."""
    from dse.cli import main
    from dse.interface.reproduce import _value

    layout = "Et*4|(t*4|)*14tmL"
    assert _value(layout) == "'Et*4|(t*4|)*14tmL'" and _value("layernorm+moe_act") == "layernorm+moe_act"
    argv = ["eval", "model=deepseek_v3", "model.mtp=1", f"model.pipeline_layout={_value(layout)}",
            "system=gb200_nvl72", "system.nvs_size=64", "strategy=tp1d", "n1=1", "n_p=16", "n_d=16",
            "microbatch=1", "nvs1=1", "nvs_p=4", "nvs_d=16", "ep=16", "global_batch=2048"]
    assert main(argv) == 0
    assert "iteration " in capsys.readouterr().out
