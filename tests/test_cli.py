"""The `dse` command: eval, search and validate argument handling."""

from __future__ import annotations

import re

import pytest

import dse
from dse.cli import main

OPTIMUM_ARGS = ["--model", "gpt3_1t", "--system", "b200", "--nvs-size", "8", "--strategy", "tp1d", "--profile",
                "lbnl", "--n1", "4", "--n-p", "128", "--n-d", "8", "--microbatch", "1", "--nvs1", "4",
                "--nvs-p", "2", "--nvs-d", "1"]


def test_eval_prints_breakdown(capsys):
    assert main(["eval"] + OPTIMUM_ARGS) == 0
    out = capsys.readouterr().out
    # spec section 10: t = 9.039049610051995 s, throughput 453.14498500428505, memory 98.09789184 GB
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
    import json

    assert main(["eval"] + OPTIMUM_ARGS + ["--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["iteration_time"] == pytest.approx(9.039049610051995, rel=1e-12)


def test_eval_layers(capsys):
    assert main(["eval"] + OPTIMUM_ARGS + ["--layers"]) == 0
    out = capsys.readouterr().out
    fc1 = next(ln for ln in out.splitlines() if ln.startswith("fc1 "))
    assert "2.6843" in fc1 and "1.31072" in fc1 and "0.00136215" in fc1


@pytest.mark.parametrize("bad,field", [(["--n-p", "3"], "n_p = 3"), (["--nvs1", "3"], "nvs1 = 3"),
                                       (["--system", "x100"], "system = 'x100'")])
def test_eval_bad_value(capsys, bad, field):
    args = list(OPTIMUM_ARGS)
    flag = bad[0]
    if flag in args:
        i = args.index(flag)
        args[i + 1] = bad[1]
    else:
        args += bad
    assert main(["eval"] + args) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert len(err.splitlines()) == 1
    assert "error:" in err and field in err
    assert cap.out == ""


def test_search_prints_ranked_rows(capsys):
    assert main(["search", "--n-gpus", "4096", "--nvs-size", "8", "--top-k", "3", "--profile", "lbnl"]) == 0
    out = capsys.readouterr().out
    ranked = [ln.split() for ln in out.splitlines() if re.match(r"^\s*\d+\s+\d+\s+\d+", ln)]
    assert [r[0] for r in ranked] == ["1", "2", "3"]
    assert "2,544 candidates" in out  # spec section 7.5: GPT3-1T 1D, n = 4096, NVS 8
    # the printed rows are the API's top 3 (default model gpt3_1t, strategy tp1d)
    top = dse.search(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", n_gpus=4096, top_k=3,
                     profile="lbnl")
    header = next(ln.split() for ln in out.splitlines() if ln.split()[:2] == ["rank", "n1"])
    for row, exp in zip(ranked, top.iter_rows(named=True)):
        got = dict(zip(header, row))
        for c in ("n1", "n_p", "n_d", "microbatch", "nvs1", "nvs_p", "nvs_d"):
            assert int(got[c]) == exp[c], c
        assert float(got["iteration_time"]) == pytest.approx(exp["iteration_time"], rel=1e-4)
    times = [float(dict(zip(header, r))["iteration_time"]) for r in ranked]
    assert times == sorted(times)


def test_search_bad_strategy(capsys):
    assert main(["search", "--strategy", "tp3d"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error:" in err and "tp3d" in err


def test_validate_needs_a_target(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["validate"])
    assert exc.value.code == 2
    assert "what" in capsys.readouterr().err
