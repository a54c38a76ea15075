"""Enumeration of the design space into dense int64 columns (seed 001 section III-E; spec section 7).

A question (model, global batch B, GPU count n, NVS domain size, strategy) becomes every candidate
(n1, n2, n_p, n_d, microbatch, nvs1, nvs2, nvs_p, nvs_d, n_b). The enumeration is NumPy over divisor
grids: masks over (n1, n2, n_p) triples, then over microbatch divisors, SUMMA panel counts and NVS
assignments, with no loop over candidates. It works for any n and NVS size.

Rules (reference search, `profile=lbnl`):

* degrees: n1 divides n, heads and hidden; tp1d: n2 = 1 and floor(3e/n1) >= 128; tp2d, summa:
  n2 divides n/n1, floor(e/n1) >= 128 and floor(l/n2) >= 128, summa also e mod n2 = 0. n_p divides
  n/(n1 n2) and the depth. n_d = n/(n1 n2 n_p) divides B.
* microbatch b divides B/n_d, and b l is a multiple of n1 (tp1d), n2 (summa) or n1 n2 (tp2d).
* summa panels: s = max(n1, n2); if e/s < 512 only n_b = s, else every s 2^k (k < ceil(log2 floor(e/s)))
  with e mod s 2^k = 0 and floor(e/(s 2^k)) >= 512.
* NVS assignment: if n <= NVS the whole job is in one domain (nvs_x = the degrees); otherwise every
  ordered factorisation NVS = nvs1 nvs2 nvs_d nvs_p with each factor dividing its degree.

The default rule differs in two places: when n > NVS and NVS does not divide n (so the reference
finds no assignment), each domain holds g GPUs of the job, g the largest divisor of n not above the
NVS size, and the assignments are the ordered factorisations of g; and n_p need not divide the depth
of a dense model (Megatron's uneven stages, the first ceil(d / n_p) blocks deep), only be at most it;
so for an MoE model with moe_every = 1 (every block after the dense-first ones MoE).
For every (n, NVS) where NVS divides n or n <= NVS, and n_p dividing the depth, the two spaces are
identical.

The default and railonly rules add the interleaving v of Megatron's schedule: every v dividing
depth / n_p, with n_p > 1 dividing the depth and m = B / (n_d b) a multiple of n_p when v > 1
(seed 000 Appendix C), and the recompute modes and matmul precisions the profile searches.
Every rule crosses the candidates with the ZeRO stages of the question (`zero`), except where the
data-parallel group is one GPU (n_d = 1; tp2d: n_d n2 = 1): there every stage is the same
configuration, so only the first stage asked for is kept.
The railonly rule (profiles with the rail-only papers' flop_count compute model, Megatron PTD-P,
strategy tp1d) also requires n1 to divide the sequence length. Its placements are the default's.

Context parallelism (the default rule with Megatron's block, strategy tp1d, dense and MoE models): tp1d's
n2 is Megatron-LM's context-parallel degree cp, every divisor of n / n1 with, for cp > 1,

* l divisible by 2 cp for a causal model (the 2 cp load-balanced chunks), by cp otherwise;
* l / cp divisible by n1 (the sequence-parallel regions hold l / (cp n1) rows);
* l / cp >= 128 rows per GPU (`MIN_SHARD`, tp2d's minimum sequence shard);

and n1 cp n_p n_d = n. Its placements are the 4-factor ones of tp2d (nvs1, nvs2 = the context
group's, nvs_d, nvs_p: Megatron's rank order puts the tensor group inside the context group).
cp = 1 gives exactly the candidates of the 1D space without context parallelism; the lbnl and
railonly rules keep n2 = 1.

MoE models add the expert-parallel degree ep (`with_experts`): the default rule enumerates every ep
dividing E and the stage's GPUs the experts spread over (n2 n_d, or n1 n2 n_d with whole experts
per GPU, profile switch expert_tp off; SUMMA: n_d); the lbnl and railonly rules take ep = gcd(n_d, E) only, the experts spread
over as many replicas as divide both (seed 002's setup, and what every MoE number of `dse` was
before ep became an axis). Dense models have ep = 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from dse.spec.specs import MAX_BATCH, MAX_GPUS, ModelSpec, SpecError, check_block, check_choice, check_int, check_unique
from kernels.params import PROFILES, STRATEGIES

COLUMNS = ("n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p", "nvs_d", "n_b", "interleave",
           "recompute", "seq_par", "precision", "zero", "ep")

MIN_SHARD = 128  # minimum feature / sequence shard of the reference search
MIN_PANEL = 512  # minimum SUMMA panel width


@lru_cache(maxsize=4096)
def divisors(n: int) -> np.ndarray:
    """Sorted divisors of n >= 1 as int64."""
    n = int(n)
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return np.array(sorted(set(small + [n // d for d in small])), dtype=np.int64)


@lru_cache(maxsize=1024)
def ordered_factorizations(n: int, parts: int) -> np.ndarray:
    """Every ordered tuple of `parts` positive integers whose product is n, shape (F, parts)."""
    rows = np.ones((1, 0), dtype=np.int64)
    rem = np.array([n], dtype=np.int64)
    d = divisors(n)
    for i in range(parts - 1):
        # extend each partial tuple by every divisor of its remaining product
        ok = rem[:, None] % d[None, :] == 0
        r, k = np.nonzero(ok)
        rows = np.concatenate([rows[r], d[k, None]], axis=1)
        rem = rem[r] // d[k]
    return np.concatenate([rows, rem[:, None]], axis=1)


def domain_share(n: int, nvs: int, profile: str) -> int:
    """GPUs of the job inside each NVS domain (0 if the reference finds no placement)."""
    if n <= nvs:
        return n
    if nvs and n % nvs == 0:
        return nvs
    if profile == "lbnl":
        return 0  # the reference fills every domain or finds no placement
    d = divisors(n)
    return int(d[d <= nvs].max())


@dataclass(frozen=True)
class Question:
    """What a search answers: one model and batch, one strategy, a set of GPU counts and NVS sizes."""

    model: ModelSpec
    strategy: str
    global_batch: int
    profile: str = "default"
    max_interleave: int = 0  # the largest interleaving enumerated (0: no cap)
    recompute: tuple[int, ...] = ()  # recompute modes searched (codes of kernels.params.RECOMPUTE)
    precision: tuple[int, ...] = (0,)  # matmul precisions searched (codes of kernels.params.PRECISIONS)
    zero: tuple[int, ...] = ()  # ZeRO stages searched (kernels.params.ZERO_STAGES; () the rule's own)
    # tp1d enumerates Megatron's context-parallel degree cp as n2 (None: under the default rule, for
    # dense and MoE models; `dse.explore.engine.space_options` turns it off for profiles without Megatron's block)
    context_parallel: bool | None = None
    # MoE experts sharded over the tensor-parallel group (`kernels.params.Profile.expert_tp`): ep
    # then spreads over the stage's other GPUs (n2 n_d); off, over all of them (n1 n2 n_d)
    expert_tp: bool = True
    # pipeline parallelism searched (False: n_p = 1 only; CPU activation offloading, which
    # Megatron-core runs without a pipeline: `kernels.params.Profile.offload_layers`)
    pipeline: bool = True
    # DeepSeek-V3's DualPipe (`kernels.params.Profile.pp_schedule`): no interleaving, an even n_p (or 1)
    # and an even microbatch count >= n_p
    dualpipe: bool = False

    def __post_init__(self):
        check_choice("strategy", self.strategy, STRATEGIES)
        check_choice("profile", self.profile, PROFILES)
        cp_ok = self.strategy == "tp1d" and self.profile == "default"
        if self.context_parallel is None:
            object.__setattr__(self, "context_parallel", cp_ok)
        elif self.context_parallel and not cp_ok:
            raise SpecError(f"context_parallel = True: context parallelism is strategy tp1d's degree cp under "
                            f"the default rule, not {self.strategy!r} under {self.profile!r}")
        if not self.recompute:  # Megatron's block all three; seed 001's model and the rail-only papers: selective
            object.__setattr__(self, "recompute", (0, 1, 2) if self.profile == "default" else (1,))
        if not self.zero:  # the rule's profile's stages (dse.explore.engine.zero_stages of PROFILES[rule])
            object.__setattr__(self, "zero", {"default": (1, 2, 3), "railonly": (0,)}.get(self.profile, (1,)))
        object.__setattr__(self, "global_batch", check_int("global_batch", self.global_batch, 1, MAX_BATCH))
        m = self.model
        check_block(m, self.strategy, self.profile == "default", self.profile)
        if any(p != 0 for p in self.precision) and (self.profile != "default" or self.strategy == "summa"):
            raise SpecError(f"profile.precision: fp8 is modelled by profile default with strategy tp1d or tp2d, "
                            f"not {self.profile!r} with {self.strategy!r}")
        bad = [z for z in self.zero if z not in (0, 1, 2, 3)]
        if bad:
            raise SpecError(f"zero = {bad[0]!r}: the ZeRO stages are 0, 1, 2, 3")
        if self.profile == "railonly" and self.strategy != "tp1d":
            raise SpecError(f"strategy = {self.strategy!r}: profile 'railonly' models Megatron PTD-P, "
                            "strategy must be tp1d")


def _cross(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair (x[i], y[j]), i outer: `np.meshgrid(x, y, indexing="ij")` raveled, without its
    overhead (the enumeration calls this a few times per GPU count)."""
    return np.repeat(x, len(y)), np.tile(y, len(x))


def parallel_degrees(q: Question, n: int) -> dict[str, np.ndarray]:
    """All (n1, n2, n_p, n_d) of the strategy for n GPUs, before microbatch and placement."""
    m, B = q.model, q.global_batch
    e, h, l, depth = m.hidden, m.heads, m.seq_len, m.depth
    dv = divisors(n)
    n1 = dv[(h % dv == 0) & (e % dv == 0) & (m.kv_heads % dv == 0)]
    if q.strategy == "tp1d":
        n1 = n1[(3 * e) // n1 >= MIN_SHARD]
        n2 = context_degrees(m, dv) if q.context_parallel else np.ones(1, dtype=np.int64)
        a, b = _cross(n1, n2)
        ok = ((n // a) % b == 0) & ((b == 1) | ((l // b) % a == 0))  # l / (cp n1) rows per SP region
        ok &= l // (a * b) >= 1  # >= 1 token per GPU: searched candidates have seq_par = 1 (checks.check_sequence_shards)
        a, b = a[ok], b[ok]
    else:
        n1 = n1[e // n1 >= MIN_SHARD]
        a, b = _cross(n1, dv)
        ok = ((n // a) % b == 0) & (l // b >= MIN_SHARD) & (l // (a * b) >= 1)  # >= 1 token per shard
        if q.strategy == "summa":
            ok &= e % b == 0
        a, b = a[ok], b[ok]
    t = a * b
    # pipeline degree: divides n / t and the depth
    i, p = _cross(np.arange(len(t)), dv)
    ok = ((n // t[i]) % p == 0) & (n % t[i] == 0)
    if q.profile == "default" and (not m.moe or m.moe_every == 1):
        ok &= p <= depth  # Megatron's uneven stages: the first take ceil(d / n_p)
    else:
        ok &= depth % p == 0
    if m.moe and m.moe_every > 1:  # every stage holds whole dense/MoE alternations
        ok &= (depth // p) % m.moe_every == 0
    if not q.pipeline:
        ok &= p == 1
    i, p = i[ok], p[ok]
    d = n // (t[i] * p)
    ok = (d <= B) & (B % d == 0)
    return {"n1": a[i][ok], "n2": b[i][ok], "n_p": p[ok], "n_d": d[ok]}


def context_degrees(m: ModelSpec, dv: np.ndarray) -> np.ndarray:
    """tp1d's context-parallel degrees among the divisors `dv`: 1, and every cp > 1 that cuts the
    sequence into 2 cp equal chunks (a causal model's load balance; cp chunks when not causal) of
    l / cp >= `MIN_SHARD` rows per GPU."""
    l = m.seq_len
    chunks = dv * (2 if m.causal else 1)
    return dv[(dv == 1) | ((l % chunks == 0) & (l // dv >= MIN_SHARD))]


def placement_parts(q: Question) -> int:
    """Groups the NVS assignment splits a domain into: tp1d without context parallelism 3 (nvs1,
    nvs_d, nvs_p; nvs2 = 1), otherwise 4 (nvs1, nvs2, nvs_d, nvs_p)."""
    return 3 if q.strategy == "tp1d" and not q.context_parallel else 4


def with_microbatches(q: Question, deg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cross the degrees with every admissible microbatch size."""
    B, l = q.global_batch, q.model.seq_len
    bs = divisors(B)
    k = len(deg["n1"])
    i, j = _cross(np.arange(k), np.arange(len(bs)))
    b = bs[j]
    n1, n2, nd = deg["n1"][i], deg["n2"][i], deg["n_d"][i]
    split = {"tp1d": n1, "summa": n2, "tp2d": n1 * n2}[q.strategy]
    ok = ((B // nd) % b == 0) & ((b * l) % split == 0)
    if q.profile == "railonly":
        ok &= l % n1 == 0  # the sequence splits evenly over tensor (sequence) parallelism
    out = {c: v[i][ok] for c, v in deg.items()}
    out["microbatch"] = b[ok]
    return out


def with_panels(q: Question, cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cross SUMMA configurations with their panel counts n_b (other strategies: n_b = 1)."""
    if q.strategy != "summa":
        return {**cfg, "n_b": np.ones_like(cfg["n1"])}
    e = q.model.hidden
    s = np.maximum(cfg["n1"], cfg["n2"])
    # the panel counts depend on s alone: found once per distinct s, then each row repeated
    uniq, inv = np.unique(s, return_inverse=True)
    lists = [_panel_counts(e, int(x)) for x in uniq]
    per = np.array([len(x) for x in lists], dtype=np.int64)
    flat = np.concatenate(lists + [np.zeros(0, dtype=np.int64)])
    start = np.concatenate([[0], np.cumsum(per)[:-1]])
    reps = per[inv]
    i = np.repeat(np.arange(len(s)), reps)
    within = np.arange(len(i)) - np.repeat(np.cumsum(reps) - reps, reps)
    out = {c: v[i] for c, v in cfg.items()}
    out["n_b"] = flat[start[inv][i] + within]
    return out


def _panel_counts(e: int, s: int) -> np.ndarray:
    """SUMMA's panel counts n_b for hidden size e on an s-wide grid side, ascending: n_b = s * 2^j
    for each doubling j below ceil(log2(floor(e / s))) that divides e into panels of at least
    MIN_PANEL columns; just s when e / s < MIN_PANEL."""
    if e < MIN_PANEL * s:  # e / s < 512 (true division)
        return np.array([s], dtype=np.int64)
    kk = math.ceil(math.log2(max(e // s, 1)))  # log2 of an integer is exact at powers of two
    nb = [s << j for j in range(min(kk, 63))]
    return np.array([x for x in nb if x > 0 and e % x == 0 and e // x >= MIN_PANEL], dtype=np.int64)


def dualpipe_rules(n_p, microbatches, interleave) -> dict[str, np.ndarray]:
    """What DeepSeek-V3's DualPipe schedule (`kernels.params.Profile.pp_schedule`) cannot run, each
    a mask over the candidates: an interleaved schedule, an odd pipeline (it pairs stage i with
    stage n_p - 1 - i) and, with a pipeline, a microbatch count that is odd or below n_p (half enter
    from each end). The search keeps the rows of none; `dse.api` names the first one a row breaks."""
    n_p, m, v = (np.asarray(x) for x in (n_p, microbatches, interleave))
    piped = n_p > 1
    return {"interleave": v != 1, "n_p": piped & (n_p % 2 != 0), "microbatches": piped & ((m % 2 != 0) | (m < n_p))}


def with_interleave(q: Question, cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cross configurations with the interleaving v of the pipeline schedule (lbnl: 1 only) and the
    recompute modes of the question. Sequence parallelism is always on (seq_par = 1): it is never
    slower than off and needs less memory."""
    cfg = with_zero(q, _with_recompute(q, cfg))
    lay = q.model.layout  # an explicit pipeline layout fixes n_p x v to its stages
    if q.profile == "lbnl" or not len(cfg["n1"]):
        keep = np.ones(len(cfg["n1"]), dtype=bool) if lay is None else cfg["n_p"] == lay.stages
        return {**{c: x[keep] for c, x in cfg.items()}, "interleave": np.ones_like(cfg["n1"][keep])}
    # the layers the pipeline splits: the blocks (MTP blocks too), and the embedding and loss where
    # they count as layers (Megatron's pipeline-split flags or a layout; with n_p > 1, as v > 1)
    layers = q.model.pipeline_places
    per_stage = layers // cfg["n_p"]
    vs = divisors(layers)
    i, j = _cross(np.arange(len(per_stage)), np.arange(len(vs)))
    v = vs[j]
    m = (q.global_batch // cfg["n_d"][i]) // cfg["microbatch"][i]
    # v > 1 needs a pipeline (n_p > 1: with one stage it changes nothing) and m a multiple of n_p
    even = layers % cfg["n_p"][i] == 0  # interleaving needs equal stages
    ok = (per_stage[i] % v == 0) & ((v == 1) | (even & (cfg["n_p"][i] > 1) & (m % cfg["n_p"][i] == 0)))
    if q.max_interleave:
        ok &= v <= q.max_interleave
    if q.dualpipe:
        for broken in dualpipe_rules(cfg["n_p"][i], m, v).values():
            ok &= ~broken
    if lay is not None:
        ok &= cfg["n_p"][i] * v == lay.stages
    keep = i[ok]  # each column gathered once, at the rows kept
    out = {c: x[keep] for c, x in cfg.items()}
    out["interleave"] = v[ok]
    return out


def _with_recompute(q: Question, cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    modes = np.array([(r, p) for r in q.recompute for p in q.precision], dtype=np.int64).reshape(-1, 2)
    k = len(cfg["n1"])
    i, j = _cross(np.arange(k), np.arange(len(modes)))
    out = {c: v[i] for c, v in cfg.items()}
    out["recompute"] = modes[j, 0]
    out["seq_par"] = np.ones(len(i), dtype=np.int64)
    out["precision"] = modes[j, 1]
    return out


def with_zero(q: Question, cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cross configurations with the ZeRO stages of the question; a data-parallel group of one
    GPU keeps only the first stage (sharding over one GPU changes nothing)."""
    stages = np.asarray(q.zero, dtype=np.int64)
    k = len(cfg["n1"])
    i, j = _cross(np.arange(k), np.arange(len(stages)))
    # the data-parallel group (`kernels.blocks.data_parallel_group`): tp2d's and tp1d's n2 replicas too
    group = cfg["n_d"][i] * (cfg["n2"][i] if q.strategy != "summa" else 1)
    ok = (group > 1) | (j == 0)
    keep = i[ok]
    out = {c: v[keep] for c, v in cfg.items()}
    out["zero"] = stages[j[ok]]
    return out


def expert_span(strategy: str, n1, n2, n_d, expert_tp: bool = True):
    """(GPUs, their name): the GPUs of a pipeline stage the expert-parallel group spreads over, which
    ep must divide (`kernels.blocks.expert_group`): n2 n_d with the experts sharded over the
    tensor-parallel group (ETP = TP), n1 n2 n_d with whole experts per GPU (ETP = 1), n_d under SUMMA."""
    if strategy == "summa":
        return n_d, "n_d"
    return (n2 * n_d, "n2*n_d") if expert_tp else (n1 * n2 * n_d, "n1*n2*n_d")


def with_experts(q: Question, cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cross configurations with their expert-parallel degrees ep (dense models: ep = 1). The
    default rule takes every ep dividing E and the stage's GPUs the experts spread over
    (`kernels.blocks.expert_group`): n2 n_d with the experts sharded over the tensor-parallel group,
    n1 n2 n_d without (`Question.expert_tp`), n_d under SUMMA; lbnl and railonly take ep =
    gcd(n_d, E) only."""
    nd = cfg["n_d"]
    if not q.model.moe or not len(nd):
        return {**cfg, "ep": np.ones_like(nd)}
    if q.profile != "default":
        return {**cfg, "ep": np.gcd(nd, np.int64(q.model.experts))}
    span, _ = expert_span(q.strategy, cfg["n1"], cfg["n2"], nd, q.expert_tp)
    top = np.gcd(span, np.int64(q.model.experts))
    eps = divisors(q.model.experts)
    i, j = _cross(np.arange(len(nd)), np.arange(len(eps)))
    ok = top[i] % eps[j] == 0
    out = {c: v[i][ok] for c, v in cfg.items()}
    out["ep"] = eps[j][ok]
    return out


def configurations(q: Question, n: int) -> dict[str, np.ndarray]:
    """Every configuration for n GPUs before the NVS placement."""
    return with_experts(q, with_interleave(q, with_panels(q, with_microbatches(q, parallel_degrees(q, n)))))


def configurations_many(q: Question, ns: Sequence[int],
                        degrees: Sequence[dict[str, np.ndarray]] | None = None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """`configurations` of several GPU counts in one pass: the degrees of each count, then the
    microbatch, panel, schedule, recompute, ZeRO and expert crossings once over all of them (each
    is row by row, so the rows of each count come out as `configurations(q, n)` gives them, in
    that order). Returns (the rows, the offsets of each count's rows: count i is rows
    offsets[i]:offsets[i + 1]). `degrees`: each count's `parallel_degrees`, when known."""
    parts = list(degrees) if degrees is not None else [parallel_degrees(q, n) for n in ns]
    deg = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
    deg["_count"] = np.repeat(np.arange(len(ns), dtype=np.int64), [len(p["n1"]) for p in parts])
    cfg = with_experts(q, with_interleave(q, with_panels(q, with_microbatches(q, deg))))
    count = cfg.pop("_count")
    return cfg, np.searchsorted(count, np.arange(len(ns) + 1), side="left")


def parse_gpu_counts(spec) -> list[int]:
    """GPU counts from an int, a list, or a string: '4096', '4,8,16', 'pow2:4:16384', 'range:8:64:8'.
    Each count is in [1, MAX_GPUS], there are at most MAX_GPU_COUNTS of them, each given once."""
    from dse.spec.specs import MAX_GPU_COUNTS

    def one(v):
        return check_int("n_gpus", v, 1, MAX_GPUS)

    def ints(text: str, form: str) -> list[int]:
        try:
            return [int(x) for x in text.split(":")]
        except ValueError:
            raise SpecError(f"n_gpus = {spec!r}: expected {form} with integers") from None

    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return [one(spec)]
    if isinstance(spec, str):
        s = spec.strip()
        if s.startswith("pow2:"):
            parts = ints(s[5:], "'pow2:LOW:HIGH'")
            if len(parts) != 2:
                raise SpecError(f"n_gpus = {spec!r}: expected 'pow2:LOW:HIGH'")
            lo, hi = (one(x) for x in parts)
            if lo & (lo - 1) or hi & (hi - 1) or lo > hi:
                raise SpecError(f"n_gpus = {spec!r}: LOW and HIGH must be powers of two with LOW <= HIGH")
            return [1 << k for k in range(lo.bit_length() - 1, hi.bit_length())]
        if s.startswith("range:"):
            parts = ints(s[6:], "'range:LOW:HIGH[:STEP]'")
            if len(parts) not in (2, 3):
                raise SpecError(f"n_gpus = {spec!r}: expected 'range:LOW:HIGH[:STEP]'")
            lo, hi, step = parts if len(parts) == 3 else (*parts, 1)
            lo, hi, step = one(lo), one(hi), check_int("n_gpus step", step, 1, MAX_GPUS)
            if lo > hi:
                raise SpecError(f"n_gpus = {spec!r}: LOW = {lo} is above HIGH = {hi}; write 'range:{hi}:{lo}'")
            k = (hi - lo) // step + 1
            if k > MAX_GPU_COUNTS:
                raise SpecError(f"n_gpus = {spec!r}: {k:,} GPU counts; at most {MAX_GPU_COUNTS:,} in one job "
                                "(raise STEP or split the range)")
            return list(range(lo, hi + 1, step))
        try:
            vals = [int(x) for x in s.split(",") if x.strip()]
        except ValueError:
            raise SpecError(f"n_gpus = {spec!r}: expected integers, 'pow2:LOW:HIGH' or 'range:LOW:HIGH[:STEP]'") from None
        spec_list = vals
    else:
        try:
            spec_list = list(spec)
        except TypeError:
            raise SpecError(f"n_gpus = {spec!r}: expected an integer or a list of integers") from None
    if not spec_list:
        raise SpecError("n_gpus = []: give at least one GPU count")
    if len(spec_list) > MAX_GPU_COUNTS:
        raise SpecError(f"n_gpus: {len(spec_list):,} GPU counts; at most {MAX_GPU_COUNTS:,} in one job")
    vals = [one(v) for v in spec_list]
    check_unique("n_gpus", vals, "GPU count")
    return vals
