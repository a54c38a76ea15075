"""Specs, presets, validation messages and the public API (`dse.evaluate`, `dse.evaluate_many`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
import yaml

import dse
from dse.spec.specs import ModelSpec, SpecError, SystemSpec, load_model, load_system

# GPT3-1T tp1d on B200, NVS 8, n = 4096: the reference optimum of spec section 10
OPTIMUM = dict(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", profile="lbnl",
               n1=4, n_p=128, n_d=8, microbatch=1, nvs1=4, nvs_p=2, nvs_d=1)
T_OPTIMUM = 9.039049610051995

TIME_PARTS = ("t_compute", "t_memory", "t_tp_comm", "t_dp_comm", "t_pp_comm", "t_bubble")
MEMORY_PARTS = ("mem_weights", "mem_grads", "mem_optimizer", "mem_activations")


# -------------------------------------------------------------------------------------------------
# presets


SYSTEMS = {  # spec section 2.2
    "b200": dict(matrix_flops=2500, vector_flops=339, hbm_bandwidth=8000, hbm_capacity=192, nvlink_bandwidth=900,
                 nvlink_eff=0.7, nvlink_latency=2.5e-6, ib_bandwidth=100, ib_eff=0.7, ib_latency=5e-6, nic_factor=1),
    "a100": dict(matrix_flops=312, vector_flops=78, hbm_bandwidth=1555, hbm_capacity=80, nvlink_bandwidth=300,
                 nvlink_eff=0.7, nvlink_latency=2.5e-6, ib_bandwidth=25, ib_eff=0.7, ib_latency=5e-6, nic_factor=1),
    "h200": dict(matrix_flops=989.4, vector_flops=133.8, hbm_bandwidth=4800, hbm_capacity=141),
    "b200_next": dict(matrix_flops=3750, vector_flops=508.5, hbm_bandwidth=16000, hbm_capacity=384,
                      nvlink_bandwidth=3600, nvlink_eff=0.8, nvlink_latency=5e-6, ib_bandwidth=200, ib_eff=0.8,
                      ib_latency=1e-5),
}
HIDDEN = dict(compute_eff=0.8, flop_latency=2e-5, hbm_eff=1.0, element_size=2e-9, mask_element_size=1e-9)


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_system_presets(name):
    s = load_system(name)
    assert isinstance(s, SystemSpec) and s.name == name
    for k, v in {**SYSTEMS[name], **HIDDEN}.items():
        assert getattr(s, k) == v, k
    p = s.params()
    assert float(p.matrix_flops) == SYSTEMS[name]["matrix_flops"]
    assert float(p.element_size) == 2e-9


MODELS = {  # spec section 2.1: l, e, h, depth, parameters of the modelled blocks
    "gpt3_1t": (2048, 25600, 160, 128, 1.006665728e12),
    "vit_era5": (64800, 12288, 64, 48, 8.697899e10),
    "gpt3_175b": (2048, 12288, 96, 96, 1.73958e11),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_presets(name):
    l, e, h, d, params = MODELS[name]
    m = load_model(name)
    assert (m.seq_len, m.hidden, m.heads, m.depth, m.ffn) == (l, e, h, d, 4 * e)
    assert m.head_dim == e // h
    assert m.params == pytest.approx(params, rel=1e-6)
    assert m.params_per_block == 12 * e * e + 4 * e + 6 * e


def test_training_samples():
    assert load_model("gpt3_1t").samples == 1e12 / 2048 == 488_281_250
    assert load_model("vit_era5").samples == 2.8e7


def test_ffn_defaults_to_four_times_hidden():
    m = load_model({"name": "toy", "seq_len": 1024, "hidden": 1536, "heads": 12, "depth": 4})
    assert m.ffn == 4 * 1536
    assert m.samples is None
    assert load_model("gpt3_1t", ffn=1000).ffn == 1000
    assert isinstance(m, ModelSpec)


def test_replace_revalidates():
    s = load_system("b200").replace(hbm_capacity=96.0, hbm_bandwidth=4000.0)
    assert (s.hbm_capacity, s.hbm_bandwidth, s.matrix_flops) == (96.0, 4000.0, 2500.0)
    with pytest.raises(SpecError, match=r"hbm_capacity"):
        load_system("b200").replace(hbm_capacity=0.0)


# -------------------------------------------------------------------------------------------------
# error messages: one line, naming the field and the bad value


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg and msg.strip() == msg and msg
    return msg


def evaluate_error(**changes) -> str:
    args = {**OPTIMUM, **changes}
    args = {k: v for k, v in args.items() if v is not None}
    with pytest.raises(SpecError) as err:
        dse.evaluate(**args)
    return one_line(err)


@pytest.mark.parametrize("field,value,valid", [
    ("model", "gpt5", ["gpt3_175b", "gpt3_1t", "vit_era5"]),
    ("system", "x100", ["a100", "b200", "b200_next", "h200"]),
    ("profile", "fast", ["default", "lbnl"]),
    ("strategy", "tp3d", ["summa", "tp1d", "tp2d"]),
])
def test_unknown_names(field, value, valid):
    msg = evaluate_error(**{field: value})
    assert msg.startswith(field) and repr(value) in msg
    for v in valid:
        assert v in msg


@pytest.mark.parametrize("field,value", [
    ("n1", 0), ("n_d", -8), ("n_p", 2.5), ("microbatch", True), ("n2", False), ("nvs1", 0), ("nvs_p", -2),
])
def test_bad_degrees(field, value):
    msg = evaluate_error(**{field: value})
    assert msg.startswith(f"{field} = {value}")
    assert "integer" in msg


@pytest.mark.parametrize("changes,field,value,rule", [
    (dict(n_p=3), "n_p", "3", "128"),  # depth of GPT3-1T
    (dict(n_d=3), "n_d", "3", "4096"),  # global batch
    (dict(microbatch=3), "microbatch", "3", "512"),  # per-replica batch 4096 / 8
    (dict(microbatch=1024), "microbatch", "1024", "512"),
    (dict(nvs1=3), "nvs1", "3", "n1 = 4"),
    (dict(nvs_d=2, nvs_p=1, n_d=8), "nvs_d", "2", None),  # nvs_d = 2 divides n_d; product 8 fits
    (dict(nvs_p=4), "nvs1*nvs2*nvs_p*nvs_d", "16", "nvs_size = 8"),
    (dict(n2=2, n_d=4), "cp", "2 (tp1d's n2)", "lbnl"),  # seed 001's tp1d has no context parallelism
    (dict(strategy="summa", n2=1), "n_b", None, "summa"),
    (dict(n_b=4), "n_b", "4", "summa"),
])
def test_invalid_configurations(changes, field, value, rule):
    if rule is None:  # a valid variant: no error
        r = dse.evaluate(**{**OPTIMUM, **changes})
        assert r["nvs_d"] == 2
        return
    msg = evaluate_error(**changes)
    assert msg.startswith(field)
    if value is not None:
        assert msg.startswith(f"{field} = {value}")
    assert rule in msg


def test_unknown_yaml_field(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text("name: toy\nseq_len: 1024\nhidden: 1536\nheads: 12\ndepth: 4\nnorm_eps: 1e-5\n")
    with pytest.raises(SpecError) as err:
        load_model(yaml.safe_load(path.read_text()))
    msg = one_line(err)
    assert msg.startswith("model.norm_eps") and "unknown" in msg and "hidden" in msg

    data = dataclasses.asdict(load_system("b200"))
    data["pcie_bandwidth"] = 64
    with pytest.raises(SpecError) as err:
        load_system(data)
    assert one_line(err).startswith("system.pcie_bandwidth")


@pytest.mark.parametrize("field,value", [
    ("hbm_capacity", -1), ("ib_latency", -1e-6), ("matrix_flops", 0), ("nvlink_eff", 1.5), ("ib_eff", 0.0),
])
def test_bad_system_fields(field, value):
    with pytest.raises(SpecError) as err:
        load_system("b200", **{field: value})
    msg = one_line(err)
    assert msg.startswith(f"system.{field} = {float(value)}") or msg.startswith(f"system.{field} = {value}")
    # the same through the API, with a system mapping
    data = {**dataclasses.asdict(load_system("b200")), field: value}
    msg = evaluate_error(system=data)
    assert msg.startswith(f"system.{field}")


def test_bad_model_fields():
    with pytest.raises(SpecError) as err:
        load_model("gpt3_1t", heads=7)  # 7 does not divide 25600
    msg = one_line(err)
    assert msg.startswith("model.heads = 7")
    with pytest.raises(SpecError) as err:
        load_model("gpt3_1t", depth=0)
    assert one_line(err).startswith("model.depth = 0")


# -------------------------------------------------------------------------------------------------
# dse.evaluate


KEYS = ("iteration_time", "throughput", "memory", "feasible") + TIME_PARTS + MEMORY_PARTS


def test_evaluate_keys_and_sums():
    r = dse.evaluate(**OPTIMUM)
    for k in KEYS:
        assert k in r, k
    assert isinstance(r["feasible"], bool) and r["feasible"]
    assert all(isinstance(r[k], float) for k in KEYS if k != "feasible")
    assert r["iteration_time"] == pytest.approx(T_OPTIMUM, rel=1e-12)
    assert sum(r[k] for k in TIME_PARTS) == pytest.approx(r["iteration_time"], rel=1e-12)
    assert sum(r[k] for k in MEMORY_PARTS) == pytest.approx(r["memory"], rel=1e-12)
    assert r["throughput"] == pytest.approx(4096 / r["iteration_time"], rel=1e-14)
    assert r["n_gpus"] == 4096
    assert r["training_days"] == pytest.approx(488_281_250 / r["throughput"] / 86400, rel=1e-12)


@pytest.mark.parametrize("model", ["gpt3_1t", "vit_era5", "gpt3_175b"])
@pytest.mark.parametrize("strategy, profile", [("tp1d", "default"), ("tp1d", "lbnl"), ("tp2d", "default"),
                                               ("tp2d", "lbnl"), ("summa", "default"), ("summa", "lbnl")])
@pytest.mark.parametrize("n_p", [1, 8])
def test_weights_and_gradients_are_the_parameters_of_a_stage(model, strategy, profile, n_p):
    """Without tensor parallelism nothing is sharded: fp16 weights and gradients each take
    2 bytes per parameter (the default profile's fp32 gradients 4) of the stage's depth / n_p blocks, 4 e^2 + 2 e f + f + 6 e parameters per
    block (QKV and output projections, the two MLP matrices, their biases, two LayerNorms). Under
    lbnl, SUMMA's LayerNorms shard floor(l / n1) = l features instead of e (spec section 11):
    4 (l - e) parameters more per block. The default profile adds the V x e embedding (tied with
    the logit layer) that the first and last stages each hold."""
    m = load_model(model)
    e, f = m.hidden, m.ffn
    per_block = 4 * e * e + 2 * e * f + f + 6 * e
    if strategy == "summa" and profile == "lbnl":
        per_block += 4 * (m.seq_len - m.hidden)
    r = dse.evaluate(model=model, system="b200", nvs_size=8, strategy=strategy, profile=profile, n_p=n_p, n_d=8,
                     nvs1=1, nvs2=1, nvs_p=1, nvs_d=8, **({"n_b": 1} if strategy == "summa" else {}))
    want = ((m.depth // n_p) * per_block + (m.vocab or 0) * e * (profile == "default")) * 2e-9
    assert r["mem_weights"] == pytest.approx(want, rel=1e-12, abs=0)
    # the default profile keeps Megatron-LM's fp32 main gradients, 4 bytes per parameter (the ZeRO
    # change, kernels.state.StateBytes); lbnl seed 001's 2 bytes
    grad_bytes = 2 if profile == "lbnl" else 4
    assert r["mem_grads"] == pytest.approx(want * grad_bytes / 2, rel=1e-12, abs=0)


def test_evaluate_global_batch():
    r = dse.evaluate(**{**OPTIMUM, "global_batch": 2048})
    assert r["throughput"] == pytest.approx(2048 / r["iteration_time"], rel=1e-14)
    assert r["iteration_time"] < T_OPTIMUM


def test_evaluate_infeasible_is_a_result():
    r = dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", n1=4)
    assert r["feasible"] is False and r["memory"] > 192


def test_evaluate_autofills_one_domain():
    # 8 GPUs fit one NVS domain of 8: the assignment defaults to the degrees
    r = dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp2d", n1=2, n2=2, n_d=2)
    assert (r["nvs1"], r["nvs2"], r["nvs_p"], r["nvs_d"]) == (2, 2, 1, 2)
    explicit = dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp2d", n1=2, n2=2, n_d=2,
                            nvs1=2, nvs2=2, nvs_p=1, nvs_d=2)
    assert explicit == r


def test_tp1d_context_parallel_group_defaults_like_the_others():
    """tp1d's context-parallel group (cp, its n2) in a job that fits one domain sits in it, as every
    other group does: nvs_cp defaults to cp (it defaulted to 1, spreading the ring over domains the
    job does not have), the same row as given explicitly and as n2/nvs2; across domains it must be
    given, and the error names it nvs_cp; cp is tp1d's name only."""
    cfg = dict(model="llama3_8b", system="dgx_h100", global_batch=512, strategy="tp1d", n1=1, n_d=4)
    r = dse.evaluate(cp=2, **cfg)
    assert r["nvs2"] == 2 and r["n2"] == 2
    assert dse.evaluate(cp=2, nvs_cp=2, **cfg) == r == dse.evaluate(n2=2, nvs2=2, **cfg)
    apart = dse.evaluate(cp=2, nvs_cp=1, **cfg)  # the ring split over two domains is slower
    assert apart["iteration_time"] > r["iteration_time"]
    assert dse.evaluate(**cfg)["nvs2"] == 1  # no context parallelism: nothing to place
    with pytest.raises(SpecError, match=r"^nvs_cp: missing; the job's 16 GPUs span NVS domains of 8.*nvs1, nvs_cp"):
        dse.evaluate(cp=2, nvs1=1, nvs_p=1, nvs_d=4, **{**cfg, "n_d": 8})
    with pytest.raises(SpecError, match=r"^cp = 2: cp is strategy tp1d's context-parallel degree \(its n2\); "
                                        r"strategy 'tp2d' takes n2=2$"):
        dse.evaluate(cp=2, **{**cfg, "strategy": "tp2d"})
    with pytest.raises(SpecError, match=r"^cp = 2: cp is tp1d's n2, which is given as n2 = 4; give one of them$"):
        dse.evaluate(cp=2, n2=4, **cfg)


def test_a_group_share_beyond_the_domain_is_named_first():
    """nvs1 = 2 in domains of one GPU is the error, not the shares left out because the job spans
    domains (it said "nvs_p: missing")."""
    with pytest.raises(SpecError, match=r"^nvs1 = 2: more GPUs of one group in an NVS domain than it holds; "
                                        r"must be <= nvs_size = 1$"):
        dse.evaluate(model="llama3_8b", system="dgx_h100", nvs_size=1, strategy="tp1d", n1=2, nvs1=2)


def test_evaluate_needs_assignment_across_domains():
    msg = evaluate_error(nvs1=None, nvs_p=None, nvs_d=None)
    assert msg.startswith("nvs1") and "4096" in msg and "8" in msg


def test_partial_assignment_in_one_domain():
    """A job that fits one domain: the missing group shares either default to the degrees or the
    error says what is wrong, without claiming that the job spans domains."""
    try:
        r = dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", n1=4, nvs1=4)
    except SpecError as err:
        msg = str(err)
        assert "\n" not in msg
        assert "span" not in msg, msg
    else:
        assert (r["nvs1"], r["nvs2"], r["nvs_p"], r["nvs_d"]) == (4, 1, 1, 1)


# -------------------------------------------------------------------------------------------------
# dse.evaluate_many


def test_evaluate_many_dict_and_frame():
    table = {"n1": [4, 4, 8], "n_p": [128, 64, 16], "n_d": [8, 32, 32], "microbatch": [1, 2, 1],
             "nvs1": [4, 4, 8], "nvs_p": [2, 1, 1], "nvs_d": [1, 2, 1]}
    kw = dict(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", profile="lbnl")
    a = dse.evaluate_many(table, **kw)
    b = dse.evaluate_many(pl.DataFrame(table), **kw)
    c = dse.evaluate_many({k: np.array(v, dtype=np.int64) for k, v in table.items()}, **kw)
    assert a.equals(b) and a.equals(c)
    assert a["n2"].to_list() == [1, 1, 1] and a["nvs2"].to_list() == [1, 1, 1] and a["n_b"].to_list() == [1, 1, 1]
    assert a["n_gpus"].to_list() == [4096, 8192, 4096]
    assert a["iteration_time"][0] == pytest.approx(T_OPTIMUM, rel=1e-12)
    for i in range(3):
        one = dse.evaluate(**kw, **{k: v[i] for k, v in table.items()})
        row = a.row(i, named=True)
        for k in KEYS:
            assert row[k] == one[k], k


def test_evaluate_many_summa_needs_panels():
    table = {"n1": [8], "n2": [1], "n_p": [128], "n_d": [16], "microbatch": [1], "nvs1": [8], "nvs_p": [1],
             "nvs_d": [1]}
    with pytest.raises(SpecError) as err:
        dse.evaluate_many(table, model="gpt3_1t", system="b200", nvs_size=8, strategy="summa", profile="lbnl")
    assert one_line(err).startswith("candidates.n_b")
    out = dse.evaluate_many({**table, "n_b": [8]}, model="gpt3_1t", system="b200", nvs_size=8, strategy="summa",
                            profile="lbnl")
    assert out["iteration_time"][0] == pytest.approx(3.1922488032709015, rel=1e-12)


@pytest.mark.parametrize("bad,index,field", [
    ({"n_p": [128, 200, 128]}, 1, "n_p = 200"),
    ({"n_d": [8, 8, 5]}, 2, "n_d = 5"),
    ({"nvs1": [4, 4, 3]}, 2, "nvs1 = 3"),
    ({"n1": [4, 0, 4]}, 1, "n1 = 0"),
])
def test_evaluate_many_names_bad_row(bad, index, field):
    table = {"n1": [4, 4, 4], "n_p": [128, 128, 128], "n_d": [8, 8, 8], "microbatch": [1, 1, 1],
             "nvs1": [4, 4, 4], "nvs_p": [2, 2, 2], "nvs_d": [1, 1, 1]}
    table.update(bad)
    with pytest.raises(SpecError) as err:
        dse.evaluate_many(table, model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d")
    assert one_line(err).startswith(f"candidate {index}: {field}")


def test_evaluate_many_column_errors():
    kw = dict(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d")
    with pytest.raises(SpecError) as err:
        dse.evaluate_many({"n1": [4]}, **kw)
    assert one_line(err).startswith("candidates.n_p")
    with pytest.raises(SpecError) as err:
        dse.evaluate_many({"n1": [4, 4], "n_p": [1], "n_d": [1], "microbatch": [1], "nvs1": [4], "nvs_p": [1],
                           "nvs_d": [1]}, **kw)
    assert "lengths" in one_line(err)
    with pytest.raises(SpecError) as err:
        dse.evaluate_many({"n1": [4.5], "n_p": [1], "n_d": [1], "microbatch": [1], "nvs1": [4], "nvs_p": [1],
                           "nvs_d": [1]}, **kw)
    assert one_line(err).startswith("candidates.n1")


def test_evaluate_many_rejects_panels_outside_summa():
    table = {"n1": [4], "n_p": [1], "n_d": [1], "microbatch": [1], "nvs1": [4], "nvs_p": [1], "nvs_d": [1], "n_b": [4]}
    with pytest.raises(SpecError, match=r"^n_b = 4: only strategy 'summa' has panels"):
        dse.evaluate_many(table, model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d")


def test_did_you_mean_names_what_holds_the_word_or_is_nearest():
    from dse.spec.checks import did_you_mean

    cols = ["training_days", "network_cost", "cluster_cost_usd", "cost_per_run_usd", "t_host", "memory"]
    assert did_you_mean("cost", cols) == "did you mean one of network_cost, cluster_cost_usd, cost_per_run_usd? "
    assert did_you_mean("trainig_days", cols) == "did you mean training_days? "
    assert did_you_mean("memroy", cols) == "did you mean memory? "
    assert did_you_mean("zzz", cols) == "" and did_you_mean("days", ["x"]) == ""
