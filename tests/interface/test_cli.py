"""The `dse` command: one grammar (Hydra overrides) in every entry point, errors and exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import polars as pl
import pytest

import dse
from dse.cli import SUBCOMMANDS, main
from dse.commands.validate import TARGETS
from dse.explore.space import COLUMNS

OPTIMUM_ARGS = ["model=gpt3_1t", "system=b200", "system.nvs_size=8", "strategy=tp1d", "profile=lbnl", "n1=4",
                "n_p=128", "n_d=8", "microbatch=1", "nvs1=4", "nvs_p=2", "nvs_d=1"]


def test_eval_prints_breakdown(capsys):
    assert main(["eval"] + OPTIMUM_ARGS) == 0
    out = capsys.readouterr().out
    # spec section 10: t = 9.039049610051995 s, throughput 453.14498500428505, memory 98.09789184 GB
    assert out.startswith("gpt3_1t on b200 (NVS 8), strategy tp1d, profile lbnl, network two_tier")
    assert re.search(r"iteration 9\.03905 s", out)
    assert "453.145" in out and "98.0979" in out
    lines = {ln.split("  ")[0].strip(): ln for ln in out.splitlines() if ln.strip()}
    for label, value in (("compute", "6.57507"), ("TP communication", "0.542026"), ("DP communication", "0.098383"),
                         ("PP communication", "0.0227622"), ("pipeline bubble", "1.77694"),
                         ("exposed HBM", "0.0238723"), ("iteration", "9.03905"), ("activations", "87.2835"),
                         ("weights", "3.93252"), ("optimizer states", "2.94939")):
        assert label in lines and value in lines[label], label
    assert "fits" in out


def test_eval_json(capsys):
    assert main(["eval"] + OPTIMUM_ARGS + ["--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["iteration_time"] == pytest.approx(9.039049610051995, rel=1e-12)


def test_eval_layers(capsys):
    assert main(["eval", "--layers"] + OPTIMUM_ARGS) == 0  # flags and overrides in any order
    out = capsys.readouterr().out
    fc1 = next(ln for ln in out.splitlines() if ln.startswith("fc1 "))
    assert "2.6843" in fc1 and "1.31072" in fc1 and "0.00136215" in fc1


@pytest.mark.parametrize("bad,field", [("n_p=3", "n_p = 3"), ("nvs1=3", "nvs1 = 3"),
                                       ("system=x100", "system=x100: no such preset"),
                                       ("system.nvs_size=0", "system.nvs_size = 0"),
                                       ("strategy=all", "one configuration has one strategy")])
def test_eval_bad_value(capsys, bad, field):
    key = bad.split("=")[0]
    args = [a for a in OPTIMUM_ARGS if a.split("=")[0] != key] + [bad]
    assert main(["eval"] + args) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("dse eval: error:") and field in err
    assert cap.out == ""


def _ranked(out: str) -> list[dict]:
    header = next(ln.split() for ln in out.splitlines() if ln.split()[:2] == ["rank", "n1"])
    return [dict(zip(header, ln.split())) for ln in out.splitlines() if re.match(r"^\s*\d+\s+\d+\s+\d+", ln)]


def test_search_prints_ranked_rows(capsys):
    assert main(["search", "n_gpus=4096", "system.nvs_size=8", "search.top_k=3", "profile=lbnl",
                 "strategy=tp1d"]) == 0
    out = capsys.readouterr().out
    ranked = _ranked(out)
    assert [r["rank"] for r in ranked] == ["1", "2", "3"]
    assert "2,544 candidates" in out  # spec section 7.5: GPT3-1T 1D, n = 4096, NVS 8
    top = dse.search(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", n_gpus=4096, top_k=3,
                     profile="lbnl")
    for got, exp in zip(ranked, top.iter_rows(named=True)):
        for c in ("n1", "n_p", "n_d", "microbatch", "nvs1", "nvs_p", "nvs_d"):
            assert int(got[c]) == exp[c], c
        assert float(got["iteration_time"]) == pytest.approx(exp["iteration_time"], rel=1e-4)
    times = [float(r["iteration_time"]) for r in ranked]
    assert times == sorted(times)


def test_search_says_which_rows_are_tp1ds(capsys):
    """`dse search` over every strategy shows a tp2d configuration with n2 = 1 once, as tp1d's, and
    the tp2d group's head says how many of its fastest were left out for that (it showed fewer rows
    than search.top_k without a word)."""
    k = 100  # Llama 3 8B on 64 B200s: most of tp2d's fastest, not all, have n2 = 1
    assert main(["search", "model=llama3_8b", "system=dgx_b200", "n_gpus=64", "global_batch=512",
                 "strategy.names=[tp1d,tp2d]", f"search.top_k={k}"]) == 0
    out = capsys.readouterr().out
    head = next(ln for ln in out.splitlines() if ln.startswith("system=dgx_b200") and "which are tp1d's" in ln)
    left = int(re.search(rf"; (\d+) of the {k} fastest have n2 = 1, which are tp1d's, not shown", head).group(1))
    block = out.split(head, 1)[1].split("\n\n", 1)[0]
    shown = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith(("rank", "-"))]
    assert 0 < left < k and len(shown) == k - left
    n2 = next(ln for ln in block.splitlines() if ln.startswith("rank")).split().index("n2")
    assert all(ln.split()[n2] != "1" for ln in shown)  # what is shown is tp2d's own


def test_search_grid_and_several_systems(capsys):
    """`+search.grid.<field>` with or without `+`; several systems as one axis need one NVS size."""
    common = ["strategy=tp1d", "n_gpus=256", "search.top_k=1", "profile=lbnl"]
    assert main(["search", "+search.grid.hbm_capacity=[96,192]", *common]) == 0
    plus = capsys.readouterr().out
    assert main(["search", "search.grid.hbm_capacity=[96,192]", *common]) == 0
    assert capsys.readouterr().out.split("\n", 1)[1] == plus.split("\n", 1)[1]  # all but the timing line
    assert "system=b200, hbm_capacity=96.0, nvs_size=4, n_gpus=256" in plus

    assert main(["search", "system=a100,h200", *common]) == 2
    assert "different NVS sizes (a100 4, h200 64)" in capsys.readouterr().err
    assert main(["search", "system=a100,h200", "system.nvs_size=8", *common]) == 0
    out = capsys.readouterr().out
    assert "system=a100, nvs_size=8" in out and "system=h200, nvs_size=8" in out


def _best_line(out: str) -> dict:
    line = next(ln for ln in out.splitlines() if ln.startswith("best: "))
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def test_one_question_one_answer_in_every_entry_point(tmp_path, capsys):
    """H200 with no NVS size given: `dse`, `dse search`, `dse eval` and the API all take the
    preset's (64) and find the same best configuration."""
    question = ["model=gpt3_1t", "system=h200", "strategy=tp1d", "n_gpus=1024", "search.top_k=1"]
    api = dse.search(model="gpt3_1t", system="h200", strategy="tp1d", n_gpus=1024, top_k=1).row(0, named=True)
    assert api["nvs_size"] == 64

    assert main(["search", *question]) == 0
    out = capsys.readouterr().out
    assert "system=h200, nvs_size=64, n_gpus=1024" in out
    row = _ranked(out)[0]
    cols = ("n1", "n_p", "n_d", "microbatch", "nvs1", "nvs_p", "nvs_d")
    assert {c: int(row[c]) for c in cols} == {c: api[c] for c in cols}

    run = subprocess.run([sys.executable, "-m", "dse.cli", *question, f"output.root={tmp_path}/data",
                          f"hydra.run.dir={tmp_path}/run", "search.progress=false"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "gpt3_1t tp1d on h200 (NVS 64, two_tier, default)" in run.stdout
    best = _best_line(run.stdout)
    assert {c: best[c] for c in ("n1", "n_p", "n_d", "microbatch")} == {c: api[c] for c in ("n1", "n_p", "n_d",
                                                                                         "microbatch")}
    rows = pl.read_parquet(next((tmp_path / "data").rglob("*.parquet"))).filter(pl.col("rank") == 1)
    assert rows["nvs_size"].to_list() == [64]
    assert {c: rows[c][0] for c in cols} == {c: api[c] for c in cols}
    assert rows["iteration_time"][0] == api["iteration_time"]

    point = {c: api[c] for c in COLUMNS}  # the degrees, placement, interleaving, recompute mode, sequence parallelism
    assert main(["eval", "model=gpt3_1t", "system=h200", "strategy=tp1d", "--json",
                 *(f"{c}={v}" for c, v in point.items())]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["nvs_size"] == 64 and r["iteration_time"] == pytest.approx(api["iteration_time"], rel=1e-12)
    r = dse.evaluate(model="gpt3_1t", system="h200", strategy="tp1d", **point)
    assert r["nvs_size"] == 64 and r["iteration_time"] == pytest.approx(api["iteration_time"], rel=1e-12)


@pytest.mark.parametrize("command", [[], ["search"], ["eval"], ["traffic"], ["study"], ["profiles"], ["bench"]])
@pytest.mark.parametrize("override,closest", [
    ("system.nvs_sise=8", "system.nvs_size"),
    ("+system.nvs_sise=8", "system.nvs_size"),
    ("nvs_sise=8", "system.nvs_size"),
    ("global_bach=8", "global_batch"),
    ("search.topk=3", "search.top_k"),
    ("+search.grid.hbm_capacty=[96,192]", "search.grid.hbm_capacity"),
    ("profile.pipeline_ib_links=false", "profile.pipeline_ib_links_free"),
    ("system=h201", "system=h200"),
])
def test_unknown_key_names_the_closest_one(capsys, command, override, closest):
    assert main([*command, override]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    prog = " ".join(["dse", *command])
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"{prog}: error: ") and f"did you mean {closest}?" in err
    assert "Traceback" not in err and cap.out == ""


def test_the_configuration_keys_belong_to_eval_and_traffic(capsys):
    """A configuration's key given where the whole space is searched says whose key it is (not the
    nearest search key: `n1` is no misspelt `model.ffn`), a near miss of one too; in `dse eval`,
    which takes them, a misspelling is a plain one."""
    for argv, head in ((["search", "n1=4"], "dse search: error: n1: a key of one configuration"),
                       (["n1=4"], "dse: error: n1: a key of one configuration"),
                       (["ep=8"], "dse: error: ep: a key of one configuration"),
                       (["mircobatch=2"], "dse: error: mircobatch: unknown key; microbatch is a key of one configuration")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(head) and "`dse eval`" in err and len(err.splitlines()) == 1, err
        assert "did you mean" not in err
    assert main(["eval", "micro_batch=2"]) == 2
    assert "did you mean microbatch?" in capsys.readouterr().err


def test_a_sweep_without_multirun_says_how_to_ask_for_it(capsys, tmp_path, monkeypatch):
    """A comma list without -m is one line naming `dse -m` (and the one-job spelling where there is
    one), exit status 2, nothing written; not Hydra's text."""
    monkeypatch.chdir(tmp_path)
    for argv, hint in ((["system=dgx_h100,dgx_b200"], "or `dse search` to rank them together"),
                       (["n_gpus=64,128"], "or n_gpus=[64,128] to search them in one job"),
                       (["model=llama3_8b,llama3_70b"], "(one job per value)")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        line = argv[0]
        assert err.startswith(f"dse: error: {line}: a list of values is a sweep; run `dse -m {line}`"), err
        assert err.rstrip().endswith(hint) and len(err.splitlines()) == 1 and "HYDRA" not in err, err
    assert not (tmp_path / "outputs").exists()


def test_renamed_and_retired_spellings_say_what_to_write(capsys):
    assert main(["search", "search.nvs_sizes=[8,64]"]) == 2
    assert "search.nvs_sizes: renamed; write system.nvs_size=[A,B,...]" in capsys.readouterr().err
    for argv, hint in ((["eval", "--n-p", "128"], "write n_p=128"),
                       (["search", "--nvs-size", "8,64"], "write system.nvs_size=[8,64]"),
                       (["search", "--grid", "hbm_capacity=96,192"], "write search.grid.hbm_capacity=[96,192]"),
                       (["traffic", "--model=gpt3_175b"], "write model=gpt3_175b"),
                       (["study", "--profile", "default"], "write profile=default")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and hint in err, err


def test_a_pair_matrix_the_placement_cannot_lay_out_is_refused_in_one_line(capsys, tmp_path):
    # Mixtral's 8-GPU expert groups fold over part of n_d = 64: no product of whole degrees
    out = tmp_path / "m"
    assert main(["traffic", "model=mixtral_8x7b", "system=dgx_h100", "strategy=tp1d", "n1=1", "n_d=64", "ep=8",
                 "nvs1=1", "nvs_p=1", "nvs_d=8", "zero=3", "n_gpus=64", "--matrix", str(out)]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dse traffic: error: --matrix: "), err
    assert "without --matrix" in err and "Traceback" not in err and cap.out == ""
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_outside_dse_m_is_an_error(capsys):
    assert main(["eval", "strategy=tp1d", "n1=2,4"]) == 2
    assert "run it with dse -m" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[k, "--help"] for k in SUBCOMMANDS if k != "validate"]
                         + [["validate", k, "--help"] for k in TARGETS])
def test_every_subcommand_is_named_as_typed(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    name = " ".join(argv[:-1])
    assert capsys.readouterr().out.startswith(f"usage: dse {name} ")


@pytest.mark.parametrize("target", list(TARGETS))
def test_validate_help_lists_each_target_with_its_own_options(capsys, target):
    """`dse validate --help` names every target and the options it takes after its name, the same
    flags as the target's own help (`dse validate measured --csv ...`, README)."""
    from dse.commands.validate import ABOUT

    assert main(["validate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "usage: dse validate [-h] WHAT [OPTIONS ...]" in text and "dse validate WHAT --help" in text
    assert f"{target} {ABOUT[target][0]} options: {ABOUT[target][1]}" in text
    with pytest.raises(SystemExit):
        main(["validate", target, "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert _flags(ABOUT[target][1]) == _flags(usage) - {"-h"}, usage


def _flags(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--?[a-z][\w-]*", text))


@pytest.mark.parametrize("argv, words", [
    ([], "WHAT: missing; valid: lbnl, nic, railonly, moe, measured, devices"),
    (["nope"], "WHAT = 'nope': not a target; valid: lbnl,"),
    (["--csv", "x"], "WHAT = '--csv': an option before its target (give the target first"),
])
def test_validate_without_a_target_is_one_line(capsys, argv, words):
    with pytest.raises(SystemExit) as exc:
        main(["validate", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dse validate: error: {words}") and err.count("\n") == 1, err


@pytest.mark.parametrize("word, closest", [("evaluate", "eval"), ("serach", "search"), ("Study", "study"),
                                            ("xyzzy", None)])
def test_an_unknown_subcommand_is_one_line_naming_the_closest(capsys, word, closest):
    """A first word that is neither a subcommand nor an override would reach Hydra, which prints a
    traceback of its override grammar; it is one line instead, before any configuration is read."""
    assert main([word, "model=gpt3_1t"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dse: error: unknown subcommand {word!r}")
    assert (f"did you mean {closest!r}?" in err) if closest else "did you mean" not in err
    assert "eval, search," in err


@pytest.mark.parametrize("argv", [[], ["--cfg", "job"], ["-m", "model=gpt3_1t"], ["--multirun"], ["+foo=1"],
                                  ["~model.vocab"], ["--info"], ["model=gpt3_1t"], ["hydra.run.dir=x"]])
def test_what_hydra_reads_is_not_a_stray_word(argv):
    from dse.cli import is_stray_word

    assert not is_stray_word(argv)
    assert is_stray_word(["evaluate", *argv])


def test_an_empty_first_word_suggests_nothing(capsys):
    assert main(["", "model=gpt3_1t"]) == 2
    assert "did you mean" not in capsys.readouterr().err


def test_validate_needs_a_target(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["validate"])
    assert exc.value.code == 2
    assert "WHAT: missing" in capsys.readouterr().err


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_leaving_fast_still_says_everything_and_runs_the_exit_handlers():
    """The console script ends with `os._exit` (no interpreter teardown), but only after the
    output is flushed and the exit handlers ran, and with the exit status it was given."""
    run = _python("import atexit, sys\n"
                  "from dse.cli import _leave\n"
                  "atexit.register(lambda: print('handler ran'))\n"
                  "sys.stdout.write('said, not flushed')\n"
                  "sys.stderr.write('to stderr')\n"
                  "_leave(3)\n"
                  "print('never')\n")
    assert run.returncode == 3
    assert run.stdout == "said, not flushedhandler ran\n"
    assert run.stderr == "to stderr"


def test_leaving_waits_for_a_running_thread():
    """A non-daemon thread still at work gets the normal exit, which waits for it."""
    run = _python("import threading, time\n"
                  "from dse.cli import _leave\n"
                  "t = threading.Thread(target=lambda: (time.sleep(0.3), print('thread done')))\n"
                  "t.start()\n"
                  "_leave(4)\n")
    assert run.returncode == 4
    assert run.stdout == "thread done\n"


def test_the_console_script_keeps_exit_statuses():
    """`python -m dse.cli` is the console script (`run`): 0 with the whole answer, 2 with one
    error line for bad input, 0 for --help."""
    ok = subprocess.run([sys.executable, "-m", "dse.cli", "search", *OPTIMUM_ARGS[:5], "n_gpus=4096"],
                        capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "system=b200, nvs_size=8, n_gpus=4096" in ok.stdout and _ranked(ok.stdout)
    bad = subprocess.run([sys.executable, "-m", "dse.cli", "search", "model=nope"],
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "model=nope" in bad.stderr
    helped = subprocess.run([sys.executable, "-m", "dse.cli", "search", "--help"],
                            capture_output=True, text=True, timeout=600)
    assert helped.returncode == 0 and "usage" in helped.stdout.lower()


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`dse ... | head -1`: the output's reader closes the pipe before the command has printed; the
    command ends with status 1 and says nothing more (no BrokenPipeError traceback)."""
    proc = subprocess.Popen([sys.executable, "-c", "import dse.cli; dse.cli.run()", "--usage"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the command has imported its modules, let alone printed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert err == ""


def test_decision_commands_name_their_own_keys(capsys):
    """A bad field of `dse sensitivity` is named by its key, before the optimum is searched; equal
    codesign bounds are said to be empty (not inverted) with what to do instead."""
    assert main(["sensitivity", "model=llama3_8b", "system=dgx_h100", "n_gpus=64",
                 "sensitivity.fields=[hbm_bandwith]"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dse sensitivity: error: sensitivity.fields: 'hbm_bandwith' is not a system field; "
                          "valid: ") and "hbm_bandwidth" in err and len(err.splitlines()) == 1, err
    assert main(["codesign", "model=llama3_8b", "system=dgx_h100", "n_gpus=64",
                 "codesign.bounds.matrix_flops=[989,989]"]) == 2
    assert capsys.readouterr().err.strip() == (
        "dse codesign: error: codesign.bounds.matrix_flops = [989, 989]: empty (lo = hi); set "
        "system.matrix_flops to fix it; lo must be below hi")


def test_an_moe_switch_on_a_dense_model_is_said_to_change_nothing(capsys, tmp_path, monkeypatch):
    """A switch only MoE blocks read, set on a dense model, leaves the answer as it is: said in a
    note (it ran in silence, the profile named default+custom); on an MoE model, no note."""
    monkeypatch.chdir(tmp_path)
    base = ["system=dgx_h100", "n_gpus=64", "strategy=tp1d", "search.top_k=1", "profile.moe_dispatcher=deepep"]
    assert main(["search", "model=llama3_8b", *base]) == 0
    assert ("note: profile.moe_dispatcher = deepep changes nothing here: llama3_8b has no experts"
            in capsys.readouterr().out)
    from dse.interface.app import run_job
    from tests.helpers import config

    lines: list[str] = []  # `dse` itself, in process without Hydra's run (its logging outlives capsys)
    run_job(config("model=llama3_8b", *base[:-2], "profile.moe_dispatcher=deepep", "output.write=false",
                   "search.progress=false"), echo=lines.append)
    assert any(ln.startswith("note: profile.moe_dispatcher = deepep changes nothing here") for ln in lines)
    assert main(["search", "model=mixtral_8x7b", "global_batch=512", *base]) == 0
    assert "changes nothing here" not in capsys.readouterr().out
