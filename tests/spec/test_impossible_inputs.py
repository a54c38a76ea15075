"""Impossible inputs are one SpecError line naming the field, the value and what is valid, before any
compute: MoE routing beyond the experts, less than one token of a sequence per GPU, presets that are
not YAML mappings, goodput and training days outside their ranges, economics that are no mapping."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import dse
from dse.api import _failure
from dse.cli import main
from dse.decisions.whatif import Goodput, expected_training_days, goodput
from dse.results.economics import check_economics, resolve_economics
from dse.spec import specs
from dse.spec.checks import check_choice, check_sequence_shards
from dse.spec.specs import SpecError, load_model, read_preset


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


# ---------------------------------------------------------------------------------------------- MoE


@pytest.mark.parametrize("experts, top_k", [(4, 8), (2, 3), (8, 9), (16, 17)])
def test_top_k_above_the_experts(experts, top_k):
    with pytest.raises(SpecError) as exc:
        load_model("mixtral_8x7b", experts=experts, moe_top_k=top_k)
    assert one_line(exc) == (f"model.moe_top_k = {top_k}: must be <= model.experts = {experts} "
                             "(each token is routed to top_k of the experts)")


@pytest.mark.parametrize("top_k, rule", [(0, "must be an integer >= 1"), (-2, "must be an integer >= 1"),
                                         (1.5, "must be an integer >= 1"), (2.0, "must be an integer >= 1 (write 2)")])
def test_top_k_below_one_or_not_an_integer(top_k, rule):
    with pytest.raises(SpecError) as exc:
        load_model("mixtral_8x7b", moe_top_k=top_k)
    assert one_line(exc) == f"model.moe_top_k = {top_k}: {rule}"


def test_top_k_equal_to_the_experts_is_valid():
    assert load_model("mixtral_8x7b", moe_top_k=8).moe_top_k == 8


def test_cli_refuses_more_experts_per_token_than_experts(capsys):
    assert main(["eval", "model=mixtral_8x7b", "model.experts=4", "model.moe_top_k=8", "strategy=tp1d",
                 "system=h200", "n1=1", "n_p=1", "n_d=8", "nvs1=1", "nvs_p=1", "nvs_d=8"]) == 2
    cap = capsys.readouterr()
    assert cap.err.strip() == ("dse eval: error: model.moe_top_k = 8: must be <= model.experts = 4 (each token is "
                               "routed to top_k of the experts)")
    assert cap.out == ""


# ---------------------------------------------------------------------------- fields of a model spec


@pytest.mark.parametrize("field, value, message", [
    ("seq_len", 0, "model.seq_len = 0: must be an integer >= 1"),
    ("seq_len", -4, "model.seq_len = -4: must be an integer >= 1"),
    ("seq_len", 2 ** 70, "model.seq_len = 1180591620717411303424: must be an integer in [1, 1,099,511,627,776]"),
    ("depth", float("nan"), "model.depth = nan: must be an integer >= 1"),
    ("capacity_factor", float("nan"), "model.capacity_factor = nan: must be a finite number in (0.0, inf)"),
    ("capacity_factor", float("inf"), "model.capacity_factor = inf: must be a finite number in (0.0, inf)"),
    ("capacity_factor", -1.0, "model.capacity_factor = -1.0: must be in (0.0, inf)"),
    ("capacity_factor", 0.0, "model.capacity_factor = 0.0: must be in (0.0, inf)"),
    ("mlp", ["gelu"], "model.mlp = ['gelu']: must be one of gelu, relu2, swiglu"),
    ("attention", {"kind": "mha"}, "model.attention = {'kind': 'mha'}: must be one of mha, mla"),
])
def test_bad_model_fields(field, value, message):
    with pytest.raises(SpecError) as exc:
        load_model("mixtral_8x7b", **{field: value})
    assert one_line(exc) == message


def test_unknown_keys_of_any_type_are_named():
    with pytest.raises(SpecError) as exc:
        load_model({"name": "x", "seq_len": 8, "hidden": 8, "heads": 2, "depth": 2, 1: 2, "colour": 3})
    assert one_line(exc).startswith("model.1: unknown field; valid fields: name, seq_len, hidden, heads, depth, ")


def test_a_choice_of_an_unhashable_value_is_no_choice():
    with pytest.raises(SpecError) as exc:
        check_choice("model.mlp", ["gelu"], {"gelu": 0, "swiglu": 1})
    assert one_line(exc) == "model.mlp = ['gelu']: must be one of gelu, swiglu"


# ------------------------------------------------------------------------- tokens of a sequence per GPU


def shards(strategy, model, n1, n2=1, seq_par=1):
    table = {"n1": np.array([n1]), "n2": np.array([n2]), "seq_par": np.array([seq_par])}
    check_sequence_shards(table, model, strategy, _failure(table))


@pytest.mark.parametrize("strategy, seq_len, n1, n2, message", [
    ("tp1d", 1, 8, 1, "n1 = 8: sequence parallelism splits each sequence of model.seq_len = 1 tokens over n1 = 8 "
                      "GPUs, less than one token each; needs n1 <= 1 (or seq_par=false)"),
    ("tp1d", 4, 8, 1, "n1 = 8: sequence parallelism splits each sequence of model.seq_len = 4 tokens over n1 = 8 "
                      "GPUs, less than one token each; needs n1 <= 4 (or seq_par=false)"),
    ("tp1d", 8, 8, 2, "n1 = 8: sequence parallelism splits each sequence of model.seq_len = 8 tokens over "
                      "n1 x cp = 8 x 2 = 16 GPUs, less than one token each; needs n1 x cp <= 8 (or seq_par=false)"),
    ("tp2d", 4, 4, 2, "n1 = 4: sequence parallelism splits each sequence of model.seq_len = 4 tokens over "
                      "n1 x n2 = 4 x 2 = 8 GPUs, less than one token each; needs n1 x n2 <= 4 (or seq_par=false)"),
])
def test_less_than_one_token_per_gpu(strategy, seq_len, n1, n2, message):
    with pytest.raises(SpecError) as exc:
        shards(strategy, load_model("gpt3_1t", seq_len=seq_len), n1, n2)
    assert one_line(exc) == message


@pytest.mark.parametrize("strategy, seq_len, n1, n2, seq_par", [
    ("tp1d", 8, 8, 1, 1),  # one token each
    ("tp1d", 4, 8, 1, 0),  # no sequence parallelism: each GPU holds the whole sequence
    ("tp2d", 16, 4, 4, 1),
    ("summa", 4, 8, 4, 1),  # SUMMA's grid blocks hold floor(l / n2) rows
])
def test_one_token_per_gpu_or_more_is_valid(strategy, seq_len, n1, n2, seq_par):
    shards(strategy, load_model("gpt3_1t", seq_len=seq_len), n1, n2, seq_par)


def test_an_moe_block_routes_from_the_sequence_shard_even_without_sequence_parallelism():
    with pytest.raises(SpecError) as exc:
        shards("tp1d", load_model("mixtral_8x7b", seq_len=4), 8, seq_par=0)
    assert one_line(exc) == ("n1 = 8: an MoE block's token routing splits each sequence of model.seq_len = 4 "
                             "tokens over n1 = 8 GPUs, less than one token each; needs n1 <= 4")


def test_evaluate_refuses_less_than_one_token_per_gpu_before_any_compute():
    model = load_model("gpt3_175b", seq_len=2)
    with pytest.raises(SpecError, match=r"^n1 = 8: sequence parallelism splits each sequence of model.seq_len = 2 "):
        dse.evaluate(model=model, system="h200", strategy="tp1d", n1=8, n_p=1, n_d=1, nvs1=8, nvs_p=1, nvs_d=1)


def test_cli_eval_refuses_seq_len_one_on_eight_gpus(capsys):
    assert main(["eval", "model=gpt3_175b", "model.seq_len=1", "strategy=tp1d", "system=h200", "n1=8", "n_p=1",
                 "n_d=1", "nvs1=8", "nvs_p=1", "nvs_d=1", "seq_par=1"]) == 2
    cap = capsys.readouterr()
    assert cap.err.strip() == ("dse eval: error: n1 = 8: sequence parallelism splits each sequence of model.seq_len "
                               "= 1 tokens over n1 = 8 GPUs, less than one token each; needs n1 <= 1 "
                               "(or seq_par=false)")
    assert cap.out == ""


# ---------------------------------------------------------------------------------------- presets


@pytest.fixture
def conf(tmp_path, monkeypatch):
    """A config tree of one's own (conf/model/), read by `read_preset` instead of the project's."""
    (tmp_path / "model").mkdir()
    monkeypatch.setattr(specs, "CONF_DIR", tmp_path)
    read_preset.cache_clear()
    yield tmp_path / "model"
    read_preset.cache_clear()


@pytest.mark.parametrize("text, problem", [
    (b"name: x\nseq_len: [1,\n", "is not valid YAML (expected the node content, but found '<stream end>', "
                                 "line 3 column 1)"),
    (b"name: x\n  hidden: 8\n", "is not valid YAML (mapping values are not allowed here, line 2 column 9)"),
    (b"name: x\nhidden: \xff\xfe\n", "is not valid YAML (unacceptable character #x00ff: invalid start byte)"),
    (b"- name: x\n- hidden: 8\n", "must hold a mapping of fields, not a list"),
    (b"", "must hold a mapping of fields, not nothing"),
    (b"just words\n", "must hold a mapping of fields, not a str"),
])
def test_a_preset_that_is_no_mapping_is_one_line(conf, text, problem):
    (conf / "mine.yaml").write_bytes(text)
    with pytest.raises(SpecError) as exc:
        load_model("mine")
    assert one_line(exc) == f"model = 'mine': {conf / 'mine.yaml'} {problem}"


@pytest.mark.parametrize("line, message", [
    ("seq_len: .nan", "model.seq_len = nan: must be an integer >= 1"),
    ("seq_len: 99999999999999999999999", "model.seq_len = 99999999999999999999999: must be an integer in "
                                         "[1, 1,099,511,627,776]"),
    ("training_tokens: .inf", "model.training_tokens = inf: must be a finite number in (0.0, inf)"),
    ("training_tokens: -1.0e+12", "model.training_tokens = -1000000000000.0: must be in (0.0, inf)"),
])
def test_a_preset_with_impossible_numbers_is_one_line(conf, line, message):
    fields = {"name": "x", "seq_len": "8", "hidden": "8", "heads": "2", "depth": "2"}
    key = line.split(":")[0]
    body = "\n".join(f"{k}: {v}" for k, v in fields.items() if k != key) + f"\n{line}\n"
    (conf / "mine.yaml").write_text(body)
    with pytest.raises(SpecError) as exc:
        load_model("mine")
    assert one_line(exc) == message


def test_a_broken_preset_named_in_a_defaults_list_is_named(conf):
    (conf / "base.yaml").write_text("hidden: [8,\n")
    (conf / "mine.yaml").write_text("defaults: [base, _self_]\nname: x\n")
    with pytest.raises(SpecError) as exc:
        load_model("mine")
    assert one_line(exc).startswith(f"model = 'base': {conf / 'base.yaml'} is not valid YAML (")


# ----------------------------------------------------------------------------- goodput, training days


@pytest.mark.parametrize("days, good, message", [
    (-5, 0.9, "training_days = -5: must be a number of days >= 0 (inf: never done)"),
    (float("nan"), 0.9, "training_days = nan: must be a number of days >= 0 (inf: never done)"),
    ("10", 0.9, "training_days = 10: must be a number of days >= 0 (inf: never done)"),
    (10, 2.0, "goodput = 2.0: must be in [0.0, 1.0]"),
    (10, -0.5, "goodput = -0.5: must be in [0.0, 1.0]"),
    (10, float("nan"), "goodput = nan: must be a finite number in [0.0, 1.0]"),
    (10, Goodput(3600.0, 60.0, 1.5, 24.0), "goodput = 1.5: must be in [0.0, 1.0]"),
])
def test_expected_training_days_refuses_impossible_inputs(days, good, message):
    with pytest.raises(SpecError) as exc:
        expected_training_days(days, good)
    assert one_line(exc) == message


@pytest.mark.parametrize("days, good, want", [(10, 0.5, 20.0), (10, 0.0, math.inf), (math.inf, 0.9, math.inf),
                                              (0, 1.0, 0.0)])
def test_expected_training_days_of_valid_inputs(days, good, want):
    assert expected_training_days(days, good) == want


@pytest.mark.parametrize("n_gpus, message", [
    (0, "n_gpus = 0: must be an integer >= 1"),
    (-3, "n_gpus = -3: must be an integer >= 1"),
    (8.5, "n_gpus = 8.5: must be an integer >= 1"),
    (True, "n_gpus = True: must be an integer >= 1"),
    (2 ** 30, "n_gpus = 1073741824: must be an integer in [1, 16,777,216]"),
])
def test_goodput_refuses_impossible_gpu_counts(n_gpus, message):
    with pytest.raises(SpecError) as exc:
        goodput(1e-5, n_gpus, restart_s=60.0, checkpoint_s=60.0)
    assert one_line(exc) == message


def test_goodput_of_a_valid_job_is_a_fraction():
    g = goodput(1e-5, np.int64(1024), restart_s=60.0, checkpoint_s=60.0)
    assert 0.0 < g.goodput < 1.0 and g.mtbf_s == pytest.approx(3600.0 / (1e-5 * 1024))


# ------------------------------------------------------------------------------------------ economics


@pytest.mark.parametrize("value", [5, [1, 2], 2.5])
def test_economics_that_is_no_name_or_mapping(value):
    for call in (lambda: check_economics(value), lambda: resolve_economics(value, "dgx_h100")):
        with pytest.raises(SpecError) as exc:
            call()
        assert one_line(exc).startswith(f"economics = {value!r}: must be a preset name (")
        assert one_line(exc).endswith("a mapping of fields or an EconomicsSpec")


@pytest.mark.parametrize("systems", [5, "dgx_h100", ["dgx_h100", 2]])
def test_economics_systems_must_be_a_list_of_names(systems):
    with pytest.raises(SpecError) as exc:
        check_economics({"systems": systems})
    assert one_line(exc) == f"economics.systems = {systems!r}: must be a list of system preset names"


def test_the_shipped_presets_still_load():
    for name in specs.model_presets():
        assert load_model(name).name == name
    assert Path(specs.CONF_DIR).is_dir()
