"""A candidate gives bit for bit the same metrics alone as inside any batch.

For each strategy and profile (and tp1d under `railonly`), 100,000 candidates drawn from the
enumerated space of several models, GPU counts (powers of two under `lbnl`; 48, 96, 384, 1536 and
4096 under `default` and `railonly`) and
NVS sizes (4, 8, 64, 72), each with its own randomly perturbed B200 system, are evaluated (1) in
one jitted call on the full arrays and (2) one at a time, as 0-d scalar programs (`lax.map`).
Every metric must be identical. The production paths (`dse.explore.engine.run_metrics`, the padded table
kernel, and `dse.explore.engine.chunk_kernel`, the blocked, sharded chunk kernel) must agree with (2) bit
for bit as well, on a subset. The default run takes one profile per strategy (and tp1d under
`railonly`): every strategy and every profile; `-m slow` all seven cases.
"""

from __future__ import annotations

import dse  # noqa: F401  (XLA flags before any JAX computation)

from functools import partial

import jax
import numpy as np
import pytest
from jax import lax

from dse.explore.engine import METRIC_COLUMNS, chunk_kernel, run_metrics, stack_systems
from dse.explore.placement import enumerate_space
from dse.explore.space import Question
from dse.spec.specs import load_model, load_system
from kernels.iteration import evaluate_candidates
from kernels.params import PROFILES, Candidates, System, Workload

N = 100_000  # candidates per strategy and profile
K = 4096  # candidates of the production-path subset (one chunk)
S = 2  # systems of the production-path subset
MODELS = ("gpt3_1t", "vit_era5", "gpt3_175b")
GROUPS = {
    "lbnl": [(n, nvs) for n in (64, 1024, 16384) for nvs in (4, 8, 64, 72)],
    "default": [(n, nvs) for n in (48, 96, 384, 1536, 4096) for nvs in (4, 8, 64, 72)],
}
GROUPS["railonly"] = GROUPS["default"]
EFFICIENCIES = ("nvlink_eff", "ib_eff", "compute_eff", "hbm_eff")


@partial(jax.jit, static_argnums=(0, 1))
def batched(strategy, profile, c, w, s):
    return evaluate_candidates(strategy, c, w, s, profile)


@partial(jax.jit, static_argnums=(0, 1))
def one_at_a_time(strategy, profile, c, w, s):
    return lax.map(lambda x: evaluate_candidates(strategy, x[0], x[1], x[2], profile), (c, w, s))


def random_systems(rng, size: int) -> System:
    """B200 with every field scaled by a factor in [0.5, 2]; efficiencies drawn in (0.3, 1]."""
    base = load_system("b200").params()
    fields = {}
    for name in System._fields:
        if name in EFFICIENCIES:
            fields[name] = 1.0 - rng.uniform(0.0, 0.7, size)
        else:
            fields[name] = float(getattr(base, name)) * rng.uniform(0.5, 2.0, size)
    return System(**fields)


def pool(strategy: str, profile: str):
    """Every candidate of every (model, n, nvs) group of the profile, with its model index."""
    groups = []
    for mi, name in enumerate(MODELS):
        q = Question(load_model(name), strategy, 4096, profile)
        for n, nvs in GROUPS[profile]:
            t = enumerate_space(q, n, nvs)
            if len(t["n1"]):
                groups.append((mi, n, nvs, t))
    return groups


def draw(strategy: str, profile: str, seed: int):
    """N candidates: first K gpt3_1t candidates (each paired with S systems), then random ones."""
    rng = np.random.default_rng(seed)
    groups = pool(strategy, profile)
    assert {g[0] for g in groups} >= {0, 1}, "both seed-001 models must contribute"
    # the production-path subset: K gpt3_1t candidates x S systems, system-major
    gpt = [g for g in groups if g[0] == 0]
    pick = rng.integers(0, len(gpt), K)
    rows = [rng.integers(len(gpt[p][3]["n1"])) for p in pick]
    sub = {c: np.array([gpt[p][3][c][r] for p, r in zip(pick, rows)], dtype=np.int64) for c in Candidates._fields}
    sub_systems = random_systems(rng, S)
    # the rest: a group uniformly, then a candidate of it uniformly
    rest = N - S * K
    gi = rng.integers(0, len(groups), rest)
    cols = {c: np.empty(rest, dtype=np.int64) for c in Candidates._fields}
    model_idx = np.empty(rest, dtype=np.int64)
    for g, (mi, _, _, t) in enumerate(groups):
        sel = np.nonzero(gi == g)[0]
        r = rng.integers(0, len(t["n1"]), len(sel))
        for c in Candidates._fields:
            cols[c][sel] = t[c][r]
        model_idx[sel] = mi
    cand = Candidates(*(np.concatenate([np.tile(sub[c], S), cols[c]]) for c in Candidates._fields))
    models = np.concatenate([np.zeros(S * K, dtype=np.int64), model_idx])
    wl = [load_model(m).workload(4096) for m in MODELS]
    work = Workload(*(np.array([int(getattr(wl[i], f)) for i in range(len(MODELS))], dtype=np.int64)[models]
                      for f in Workload._fields))
    sysrest = random_systems(rng, rest)
    systems = System(*(np.concatenate([np.repeat(np.asarray(a), K), b]) for a, b in zip(sub_systems, sysrest)))
    return cand, work, systems, Candidates(**sub), sub_systems, wl[0]


CASES = [(s, p) for s in ("tp1d", "tp2d", "summa") for p in ("lbnl", "default")] + [("tp1d", "railonly")]
IDS = [f"{s}-{p}" for s, p in CASES]
# The production paths compile two more programs per case; the default run checks them on one
# profile per strategy, the slow run on all seven cases.
PRIMARY = {("tp1d", "lbnl"), ("tp2d", "default"), ("summa", "lbnl")}
PRODUCTION_CASES = [pytest.param(c, id=i, marks=() if c in PRIMARY else pytest.mark.slow)
                    for c, i in zip(CASES, IDS)]
# Each case compiles its own two programs and evaluates N candidates one at a time: the default run
# checks the batch against one-at-a-time and the invariants on every strategy and every profile
# (the primary cases and tp1d under railonly), the slow run on all seven cases.
BATCH_CASES = [pytest.param(c, id=i, marks=() if c in PRIMARY | {("tp1d", "railonly")} else pytest.mark.slow)
               for c, i in zip(CASES, IDS)]


@pytest.fixture(scope="module", params=BATCH_CASES)
def case(request):
    strategy, profile = request.param
    seed = CASES.index(request.param) + 1
    cand, work, systems, sub, sub_systems, sub_work = draw(strategy, profile, seed)
    prof = PROFILES[profile]
    batch = jax.device_get(batched(strategy, prof, cand, work, systems))
    single = jax.device_get(one_at_a_time(strategy, prof, cand, work, systems))
    return dict(strategy=strategy, profile=prof, cand=cand, systems=systems, batch=batch, single=single, sub=sub,
                sub_systems=sub_systems, sub_work=sub_work)


def test_sample_is_broad(case):
    c = case["cand"]
    n = c.n1 * c.n2 * c.n_p * c.n_d
    assert len(n) == N
    assert len(np.unique(np.stack(c, axis=1), axis=0)) > 2000
    assert len(np.unique(n)) >= 3
    placed = c.nvs1 * c.nvs2 * c.nvs_p * c.nvs_d
    assert (placed < n).any() and (placed == n).any()  # multi-domain and single-domain jobs
    if case["strategy"] != "tp1d":
        assert (c.n2 > 1).any()
    if case["strategy"] == "summa":
        assert (c.n_b > np.maximum(c.n1, c.n2)).any()


def test_batch_equals_one_at_a_time(case):
    batch, single = case["batch"], case["single"]
    assert np.all(np.isfinite(single.iteration_time)) and np.all(single.iteration_time > 0)
    assert single.feasible.any() and not single.feasible.all()
    for k in METRIC_COLUMNS:
        a, b = np.asarray(getattr(batch, k)), np.asarray(getattr(single, k))
        assert a.shape == b.shape == (N,)
        diff = np.nonzero(a != b)[0]
        assert len(diff) == 0, f"{k}: {len(diff)} candidates differ, first {diff[:3]}: {a[diff[:3]]} vs {b[diff[:3]]}"


@pytest.mark.parametrize("case", PRODUCTION_CASES, indirect=True)
def test_run_metrics_equals_one_at_a_time(case):
    """The padded table kernel on the first S*K rows (one model, a system per row)."""
    c = case["cand"]
    head = Candidates(*(x[:S * K] for x in c))
    systems = System(*(np.repeat(np.asarray(x), K) for x in case["sub_systems"]))
    out = run_metrics(case["strategy"], case["profile"], head, case["sub_work"], systems)
    for k in METRIC_COLUMNS:
        np.testing.assert_array_equal(out[k], np.asarray(getattr(case["single"], k))[:S * K], err_msg=k)


@pytest.mark.parametrize("case", PRODUCTION_CASES, indirect=True)
def test_chunk_kernel_equals_one_at_a_time(case):
    """The chunk kernel: K candidates x S systems in one call, (S, K) results."""
    kern = chunk_kernel(case["strategy"], case["profile"], K, S, tuple(METRIC_COLUMNS))
    assert kern.chunk == K
    out = kern(case["sub"], case["sub_work"], stack_systems(
        [System(*(np.asarray(x)[i] for x in case["sub_systems"])) for i in range(S)]))
    for k in METRIC_COLUMNS:
        got = out[k]
        assert got.shape == (S, K)
        np.testing.assert_array_equal(got.reshape(-1), np.asarray(getattr(case["single"], k))[:S * K], err_msg=k)


def test_invariants(case):
    """On random systems: the breakdowns add up, throughput = B / t, feasibility is the capacity
    test, and a parallel degree of 1 costs exactly 0 (DESIGN section 4). (Weights and gradients
    memory are checked against the parameter count in tests/spec/test_specs_api.py.)"""
    r = {k: np.asarray(getattr(case["single"], k)) for k in METRIC_COLUMNS}
    c = case["cand"]
    t = r["iteration_time"]
    parts = r["t_compute"] + r["t_memory"] + r["t_tp_comm"] + r["t_dp_comm"] + r["t_pp_comm"] + r["t_bubble"]
    parts = parts + r["t_optimizer"]
    np.testing.assert_allclose(parts, t, rtol=1e-12, atol=0)
    mem = r["mem_weights"] + r["mem_grads"] + r["mem_optimizer"] + r["mem_activations"] + r["mem_reserved"]
    np.testing.assert_allclose(mem, r["memory"], rtol=1e-12, atol=0)
    np.testing.assert_allclose(r["throughput"] * t, 4096.0, rtol=1e-14)
    for k in METRIC_COLUMNS:
        if k != "feasible":
            assert np.all(r[k] >= 0), k
    assert np.array_equal(r["feasible"], r["memory"] <= case["systems"].hbm_capacity)
    assert np.all(r["t_compute"] > 0) and np.all(r["flops_per_gpu"] > 0)
    # tp1d's n2 is Megatron's context-parallel degree: its weights are replicated over cp too
    dp_group = c.n_d * (c.n2 if case["strategy"] in ("tp1d", "tp2d") else 1)
    assert np.all(r["t_dp_comm"][dp_group == 1] == 0) and np.all(r["t_dp_comm"][dp_group > 1] > 0)
    # exposed transfers: every 1F1B one; under the interleaved schedule with pp_comm_overlap, only
    # what outlasts another chunk's compute (may be none)
    exposed = c.n_p > 1
    if case["profile"].pp_comm_overlap:
        exposed &= c.interleave == 1
    assert np.all(r["t_pp_comm"][c.n_p == 1] == 0) and np.all(r["t_pp_comm"][exposed] > 0)
    assert np.all(r["t_bubble"][c.n_p == 1] == 0) and np.all(r["t_bubble"][c.n_p > 1] > 0)
    no_tp = (c.n1 == 1) & (c.n2 == 1)
    assert no_tp.any()
    # tp1d with n1 = 1 and cp > 1 communicates only the context-parallel K, V ring, which the
    # attention it overlaps may hide wholly: exposed time >= 0 there (checked above)
    ring_only = (c.n1 == 1) & (c.n2 > 1) & (case["strategy"] == "tp1d")
    assert np.all(r["t_tp_comm"][no_tp] == 0)
    if case["profile"].tp_comm_overlap and case["strategy"] != "summa":  # may hide under the GEMMs
        assert (r["t_tp_comm"][~no_tp] == 0).any() and (r["t_tp_comm"][~no_tp] > 0).any()
    else:
        assert np.all(r["t_tp_comm"][~no_tp & ~ring_only] > 0)
