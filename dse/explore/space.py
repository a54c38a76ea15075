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
dividing gcd(n_d, E); the lbnl and railonly rules take ep = gcd(n_d, E) only, the experts spread
over as many replicas as divide both (seed 002's setup, and what every MoE number of `dse` was
before ep became an axis). Dense models have ep = 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import replace as dataclasses_replace
from functools import lru_cache
from typing import Collection, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from dse.spec.specs import MAX_BATCH, MAX_GPUS, ModelSpec, SpecError, check_block, check_choice, check_int, check_unique
from kernels.params import PRECISIONS, PROFILES, RECOMPUTE, STRATEGIES, ZERO_STAGES

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

    def __post_init__(self):
        check_choice("strategy", self.strategy, STRATEGIES)
        check_choice("profile", self.profile, PROFILES)
        cp_ok = self.strategy == "tp1d" and self.profile == "default"
        if self.context_parallel is None:
            object.__setattr__(self, "context_parallel", cp_ok)
        elif self.context_parallel and not cp_ok:
            raise SpecError(f"context_parallel = True: context parallelism is strategy tp1d's degree cp under "
                            f"the default rule, not {self.strategy!r} under {self.profile!r}")
        if not self.recompute:  # seed 001's model and the rail-only papers: selective only
            object.__setattr__(self, "recompute", (1, 2) if self.profile == "default" else (1,))
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
        a, b = a[ok], b[ok]
    else:
        n1 = n1[e // n1 >= MIN_SHARD]
        a, b = _cross(n1, dv)
        ok = ((n // a) % b == 0) & (l // b >= MIN_SHARD)
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


def with_interleave(q: Question, cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cross configurations with the interleaving v of the pipeline schedule (lbnl: 1 only) and the
    recompute modes of the question. Sequence parallelism is always on (seq_par = 1): it is never
    slower than off and needs less memory."""
    cfg = with_zero(q, _with_recompute(q, cfg))
    if q.profile == "lbnl" or not len(cfg["n1"]):
        return {**cfg, "interleave": np.ones_like(cfg["n1"])}
    per_stage = q.model.depth // cfg["n_p"]
    vs = divisors(q.model.depth)
    i, j = _cross(np.arange(len(per_stage)), np.arange(len(vs)))
    v = vs[j]
    m = (q.global_batch // cfg["n_d"][i]) // cfg["microbatch"][i]
    # v > 1 needs a pipeline (n_p > 1: with one stage it changes nothing) and m a multiple of n_p
    even = q.model.depth % cfg["n_p"][i] == 0  # interleaving needs equal stages
    ok = (per_stage[i] % v == 0) & ((v == 1) | (even & (cfg["n_p"][i] > 1) & (m % cfg["n_p"][i] == 0)))
    if q.max_interleave:
        ok &= v <= q.max_interleave
    out = {c: x[i][ok] for c, x in cfg.items()}
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
    out = {c: v[i[ok]] for c, v in cfg.items()}
    out["zero"] = stages[j[ok]]
    return out


def with_experts(q: Question, cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cross configurations with their expert-parallel degrees ep (dense models: ep = 1). ep divides
    E and n_d; the default rule takes every such ep, lbnl and railonly ep = gcd(n_d, E) only."""
    nd = cfg["n_d"]
    if not q.model.moe or not len(nd):
        return {**cfg, "ep": np.ones_like(nd)}
    top = np.gcd(nd, np.int64(q.model.experts))
    if q.profile != "default":
        return {**cfg, "ep": top}
    eps = divisors(q.model.experts)
    i, j = _cross(np.arange(len(nd)), np.arange(len(eps)))
    ok = top[i] % eps[j] == 0
    out = {c: v[i][ok] for c, v in cfg.items()}
    out["ep"] = eps[j][ok]
    return out


def configurations(q: Question, n: int) -> dict[str, np.ndarray]:
    """Every configuration for n GPUs before the NVS placement."""
    return with_experts(q, with_interleave(q, with_panels(q, with_microbatches(q, parallel_degrees(q, n)))))


def with_placements(q: Question, cfg: dict[str, np.ndarray], n: int, nvs: int) -> dict[str, np.ndarray]:
    """Cross configurations with every NVS assignment (nvs1, nvs2, nvs_p, nvs_d): the candidate
    columns (`COLUMNS`), each a row of one `placement_table`."""
    return dict(zip(COLUMNS, placement_table(q, cfg, n, nvs)))


# ----------------------------------------------------------------------------------------------
# packed candidates: three int64 words a candidate instead of sixteen columns

#: (column, word, first bit, bits) of each candidate column in the packed form (`pack`): word 0 the
#: degrees, word 1 the NVS assignment in the same order (so a job inside one domain, whose
#: assignment is its degrees, has word 1 = word 0), word 2 the rest. A search whose candidates fit
#: (`packs`) writes a configuration's words once and each candidate as three gathers (its
#: configuration's words 0 and 2, its factorisation's word 1), not one gather per column, and its
#: program reads 24 bytes a candidate, not 128 (`dse.explore.engine.ChunkKernel`, `packed`).
PACKING = (  # in `COLUMNS` order
    ("n1", 0, 0, 16), ("n2", 0, 16, 16), ("n_p", 0, 32, 16), ("n_d", 0, 48, 16), ("microbatch", 2, 0, 16),
    ("nvs1", 1, 0, 16), ("nvs2", 1, 16, 16), ("nvs_p", 1, 32, 16), ("nvs_d", 1, 48, 16),
    ("n_b", 2, 16, 16), ("interleave", 2, 32, 12), ("recompute", 2, 56, 2), ("seq_par", 2, 58, 1),
    ("precision", 2, 59, 1), ("zero", 2, 60, 2), ("ep", 2, 44, 12),
)
PACKED_WORDS = 3
assert tuple(c for c, *_ in PACKING) == COLUMNS
# word 1 lays out the NVS groups as word 0 the degrees: a job inside one domain has word 1 = word 0
assert all(PACKING[COLUMNS.index(a)][2:] == PACKING[COLUMNS.index(b)][2:]
           for a, b in (("nvs1", "n1"), ("nvs2", "n2"), ("nvs_p", "n_p"), ("nvs_d", "n_d")))
assert all(at // 32 == (at + bits - 1) // 32 for _, _, at, bits in PACKING)  # none straddles a word's halves
# the coded columns' fields hold every code (a new mode needs a wider field, and `pack` would say so)
assert all(len(codes) <= 1 << dict((c, b) for c, _, _, b in PACKING)[c]
           for c, codes in (("recompute", RECOMPUTE), ("precision", PRECISIONS), ("zero", ZERO_STAGES)))


def packs(q: Question, n_gpus: Sequence[int]) -> bool:
    """Whether every candidate of q over these GPU counts fits the packed words (`PACKING`): each
    degree and NVS group (at most the GPU count), microbatch (at most the global batch), SUMMA
    panel count (`_panel_counts`: at most max(n, hidden / MIN_PANEL)), interleaving (at most the
    depth) and expert-parallel degree (at most E) below 2^16, 2^16, 2^16, 2^12 and 2^12."""
    m = q.model
    n = max(int(x) for x in n_gpus)
    return (n < 1 << 16 and q.global_batch < 1 << 16 and m.hidden // MIN_PANEL < 1 << 16
            and m.depth < 1 << 12 and (m.experts or 1) < 1 << 12)


def pack(table) -> np.ndarray:
    """Candidates as packed words: a (columns, N) int64 table in `COLUMNS` order, or a mapping of
    columns, to a (PACKED_WORDS, N) int64 table. A value outside its field is an error (`packs`
    decides before a search whether its candidates fit)."""
    get = table.__getitem__ if isinstance(table, Mapping) else (lambda c: table[COLUMNS.index(c)])
    n = len(np.asarray(get("n1")).reshape(-1))
    out = np.zeros((PACKED_WORDS, n), dtype=np.uint64)
    for c, w, at, bits in PACKING:
        v = np.asarray(get(c), dtype=np.int64)
        if v.size and (v.min() < 0 or v.max() >= 1 << bits):
            raise ValueError(f"{c} = {int(v.max() if v.max() >= 1 << bits else v.min())}: outside its {bits}-bit "
                             f"field of the packed candidates (dse.explore.space.packs)")
        out[w] |= v.astype(np.uint64) << np.uint64(at)
    return out.view(np.int64)


def unpack(words: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """`pack` undone: (PACKED_WORDS, N) words to the (columns, N) int64 table (into `out` when
    given). The program decodes the same `PACKING` its own way (`dse.explore.engine.unpack_candidates`,
    from 32-bit halves, for the vector unit); NumPy is faster with whole-word shifts in place (the
    halves' form makes temporaries)."""
    u = np.asarray(words, dtype=np.int64).view(np.uint64)
    out = np.empty((len(COLUMNS), u.shape[1]), dtype=np.int64) if out is None else out
    view = out.view(np.uint64)
    for r, (_, w, at, bits) in enumerate(PACKING):
        np.right_shift(u[w], np.uint64(at), out=view[r])
        view[r] &= np.uint64((1 << bits) - 1)
    return out


def in_form(table: np.ndarray, packed: bool) -> np.ndarray:
    """A (columns, N) int64 table in `COLUMNS` order as a kernel taking `packed` candidates reads
    it: packed (`pack`), or as it is (also a table already packed)."""
    table = np.asarray(table, dtype=np.int64)
    return pack(table) if packed and len(table) == len(COLUMNS) else table


@lru_cache(maxsize=1024)
def _factor_words(g: int, parts: int) -> np.ndarray:
    """Word 1 of each ordered factorisation of a domain's share g (`_factor_table`), read-only."""
    cols = _factor_table(g, parts)[0]
    f = len(ordered_factorizations(g, parts))
    w = pack({**{c: np.broadcast_to(cols[a], f) for c, a in _FACTOR.items()},
              **{c: np.zeros(f, dtype=np.int64) for c in COLUMNS if c not in _FACTOR}})[1]
    w.setflags(write=False)
    return w


#: The column of each NVS assignment in `_placement_classes`'s factorisations.
_FACTOR = {"nvs1": 0, "nvs2": 1, "nvs_d": 2, "nvs_p": 3}


class Piece(NamedTuple):
    """Candidate rows not yet gathered: column r (`COLUMNS` order; word r of packed candidates,
    `pack`) of row i is `src[idx[i]]` for
    `sources[r] = (src, idx)`, or `src[i]` when idx is None, or src itself when it is one value
    (a 0-d array: the column is constant); or, `sources` a (columns, rows) int64 table
    (`Piece.of`), its rows as they are. `write` gathers a range of rows straight into the
    caller's array (the search's call slabs), so a row is written once."""

    sources: tuple | np.ndarray
    rows: int

    @staticmethod
    def of(table: np.ndarray) -> "Piece":
        """A (columns, rows) int64 table as a piece (written with one copy per range)."""
        table = np.asarray(table, dtype=np.int64)
        return Piece(table, table.shape[1])

    def write(self, out: np.ndarray, lo: int, hi: int) -> None:
        """Rows lo:hi into `out` ((columns, hi - lo) int64; each out[r] a contiguous row)."""
        if isinstance(self.sources, np.ndarray):
            out[...] = self.sources[:, lo:hi]
            return
        for r, (src, idx) in enumerate(self.sources):
            if not src.ndim:
                out[r] = src  # a constant column: a fill, no gather
            elif idx is None:
                out[r] = src[lo:hi]
            else:
                np.take(src, idx[lo:hi], out=out[r], mode="clip")  # indices in range: no buffering

    def table(self) -> np.ndarray:
        """Every row, as one (columns, rows) int64 table (the packed words of a packed piece)."""
        if isinstance(self.sources, np.ndarray):
            return self.sources
        out = np.empty((len(self.sources), self.rows), dtype=np.int64)
        self.write(out, 0, self.rows)
        return out


def placement_piece(q: Question, cfg: dict[str, np.ndarray], n: int, nvs: int,
                    constant: Collection[str] = (), words: np.ndarray | None = None) -> Piece:
    """`with_placements` as a `Piece`: configuration i with factorisation j for each (i, j) the
    placement allows (i ascending, then j ascending), nothing gathered yet. `constant`: columns
    of `cfg` the caller knows to hold one value (`constant_columns`), written as fills. `words`:
    the configurations packed (`pack`, (PACKED_WORDS, configurations)): the piece is then of
    packed candidates, three sources (word 1 the factorisation's, `_factor_words`)."""
    g = domain_share(n, nvs, q.profile)
    k = len(cfg["n1"])
    if g == 0 or k == 0:
        return Piece.of(np.zeros((len(COLUMNS) if words is None else PACKED_WORDS, 0), dtype=np.int64))

    def own(c: str, idx: np.ndarray | None):
        src = np.asarray(cfg[c], dtype=np.int64)
        return (np.array(src[0]), None) if c in constant else (src, idx)

    if g == n:  # one domain holds the job: every group lies inside it
        if words is not None:  # word 1 (the assignment) is word 0 (the degrees)
            return Piece(((words[0], None), (words[0], None), (words[2], None)), k)
        same = {"nvs1": "n1", "nvs2": "n2", "nvs_p": "n_p", "nvs_d": "n_d"}
        return Piece(tuple(own(same.get(c, c), None) for c in COLUMNS), k)
    cols, ok, kind = _placement_classes(q, cfg, g)
    per_kind = np.count_nonzero(ok, axis=1)  # factorisations each kind takes
    take = per_kind[kind]  # ... and each configuration
    total = int(take.sum())
    i = np.repeat(np.arange(k), take)
    # j: each configuration's kind's factorisations, in order: row u of ok's column indices
    # starts at kind_start[u] of `js`, and configuration i's candidates at first[i] of the rows
    js = np.nonzero(ok)[1]
    kind_start = np.cumsum(per_kind) - per_kind
    first = np.cumsum(take) - take
    j = js[np.repeat(kind_start[kind] - first, take) + np.arange(total)]
    if words is not None:
        return Piece(((words[0], i), (_factor_words(g, placement_parts(q)), j), (words[2], i)), total)
    sources = tuple((cols[_FACTOR[c]], j) if c in _FACTOR else own(c, i) for c in COLUMNS)
    return Piece(sources, total)


class CompactPiece(NamedTuple):
    """A piece of packed candidates (`pack`) not expanded into rows: configuration i's candidates
    are its words 0 and 2 (`w0[i]`, `w2[i]`) with, for r < take[i], word 1 (the NVS assignment)
    `lists[start[i] + r]`, or word 0 itself when `start[i]` is -1 (the job inside one domain: one
    candidate, `placement_piece`'s rule). `kind`, `kind_start`, `kind_rows`: the placement class
    of each configuration and where its class's list lies in `lists` (None in one domain), so a
    consumer can copy the lists a slice of configurations uses. The rows, in order, are those of
    `placement_piece` (configuration i ascending, then its factorisations ascending); an
    accelerator's search expands them in its program (`dse.explore.device_stream`)."""

    w0: np.ndarray
    w2: np.ndarray
    take: np.ndarray
    start: np.ndarray
    lists: np.ndarray
    kind: np.ndarray | None
    kind_start: np.ndarray | None
    kind_rows: np.ndarray | None
    rows: int

    def table(self) -> np.ndarray:
        """Every row, as one (PACKED_WORDS, rows) int64 table of packed words."""
        i = np.repeat(np.arange(len(self.take)), self.take)
        r = np.arange(self.rows) - np.repeat(np.cumsum(self.take) - self.take, self.take)
        s = self.start[i]
        w1 = np.where(s < 0, self.w0[i], self.lists[np.maximum(s, 0) + r] if len(self.lists) else 0)
        return np.stack([self.w0[i], w1, self.w2[i]]).astype(np.int64)


def compact_piece(q: Question, cfg: dict[str, np.ndarray], n: int, nvs: int, words: np.ndarray) -> CompactPiece:
    """`placement_piece` of packed configurations `words` ((PACKED_WORDS, configurations), `pack`)
    as a `CompactPiece`: per configuration its words and candidate count, and the NVS assignment
    words of each placement class once, not one row per candidate."""
    g = domain_share(n, nvs, q.profile)
    k = len(cfg["n1"])
    none = np.zeros(0, dtype=np.int64)
    if g == 0 or k == 0:
        return CompactPiece(none, none, none, none, none, None, None, None, 0)
    if g == n:  # one domain holds the job: word 1 is word 0, one candidate per configuration
        ones = np.ones(k, dtype=np.int64)
        return CompactPiece(words[0], words[2], ones, -ones, none, None, None, None, k)
    _, ok, kind = _placement_classes(q, cfg, g)
    kind_rows = np.count_nonzero(ok, axis=1)
    kind_start = np.cumsum(kind_rows) - kind_rows
    lists = _factor_words(g, placement_parts(q))[np.nonzero(ok)[1]]
    take = kind_rows[kind]
    has = take > 0  # configurations without a placement have no candidate
    if not has.all():
        words, take, kind = words[:, has], take[has], kind[has]
    return CompactPiece(words[0], words[2], take, kind_start[kind], lists, kind, kind_start, kind_rows,
                        int(take.sum()))


def constant_columns(cfg: dict[str, np.ndarray]) -> frozenset[str]:
    """The columns of configurations `cfg` that hold one value (a profile without recomputation
    choices, a dense model's ep, ...): their candidates' columns are fills, not gathers."""
    return frozenset(c for c, v in cfg.items() if len(v) and v[0] == v.min() == v.max())


def placement_table(q: Question, cfg: dict[str, np.ndarray], n: int, nvs: int) -> np.ndarray:
    """`with_placements` as one (columns, candidates) int64 table in `COLUMNS` order."""
    return placement_piece(q, cfg, n, nvs).table()


def placement_count(q: Question, cfg: dict[str, np.ndarray], n: int, nvs: int) -> int:
    """`len(with_placements(q, cfg, n, nvs)["n1"])` without building the rows."""
    g = domain_share(n, nvs, q.profile)
    k = len(cfg["n1"])
    if g == 0 or k == 0:
        return 0
    if g == n:
        return k
    _, ok, kind = _placement_classes(q, cfg, g)
    return int(np.count_nonzero(ok, axis=1) @ np.bincount(kind, minlength=len(ok)))


@lru_cache(maxsize=1024)
def _factor_table(g: int, parts: int) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray, np.ndarray]:
    """(columns, d, at, fits) of a domain's share g: its ordered factorisations into (nvs1,
    nvs2, nvs_d, nvs_p), column by column (nvs2 = 1 when `parts` is 3; a column of one value as
    that value, a 0-d array); g's divisors d; each factor's place among them (at, (F, 4)); and
    fits[a][x, f], whether factorisation f's factor a divides d[x]. Read-only: shared by every
    piece of the share."""
    f = ordered_factorizations(g, parts)
    if parts == 3:  # (nvs1, nvs_d, nvs_p); nvs2 = 1
        f = np.concatenate([f[:, :1], np.ones((len(f), 1), dtype=np.int64), f[:, 1:]], axis=1)
    # a column of one value (nvs2 = 1 of three parts, any column of g = 1) as that value: a fill
    cols = tuple(np.array(f[0, a]) if (f[:, a] == f[0, a]).all() else np.ascontiguousarray(f[:, a]) for a in range(4))
    d = divisors(g)
    at = np.searchsorted(d, f)
    divides = d[:, None] % d[None, :] == 0  # [x, y]: d[y] divides d[x]
    fits = np.stack([divides[:, at[:, a]] for a in range(4)])  # (4, divisors, F)
    for x in (d, at, fits, *cols):
        x.setflags(write=False)
    return cols, d, at, fits


def _placement_classes(q: Question, cfg: dict[str, np.ndarray], g: int) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
    """(columns, ok, kind): the ordered factorisations of a domain's share g into (nvs1, nvs2,
    nvs_d, nvs_p), column by column (`_factor_table`); each configuration's kind (kind[i]); and
    ok[u, j], whether configurations of kind u take factorisation j (each factor divides its
    degree).

    A factor divides g, so it divides a degree exactly when it divides the degree's gcd with g:
    a configuration's placements depend on those four gcds alone, which the many configurations
    that differ only in microbatch, panels, interleaving, recomputation ... share. The
    divisibility is decided once per kind (distinct gcd tuple), not once per configuration."""
    cols, d, at, fits = _factor_table(g, placement_parts(q))
    n_div = len(d)  # <= 504 for g <= 2^24, so a kind's key, < n_div^4, fits an int64
    key = np.zeros(len(cfg["n1"]), dtype=np.int64)
    for c in ("n1", "n2", "n_d", "n_p"):  # the factorisations' order; each gcd by its place among g's divisors
        key = key * n_div + np.searchsorted(d, np.gcd(cfg[c], g))
    if n_div ** 4 <= max(1 << 16, 4 * len(key)):  # few possible keys: mark them, no sort
        seen = np.zeros(n_div ** 4, dtype=bool)
        seen[key] = True
        kinds = np.flatnonzero(seen)
        kind = (np.cumsum(seen) - 1)[key]
    else:
        kinds, kind = np.unique(key, return_inverse=True)
        kind = kind.reshape(-1)
    ok = np.ones((len(kinds), len(at)), dtype=bool)
    for a in range(4):  # the kind's gcd (by its place) against each factorisation's factor: rows of fits[a]
        ok &= fits[a].take((kinds // n_div ** (3 - a)) % n_div, axis=0)
    return cols, ok, kind


def enumerate_space(q: Question, n: int, nvs: int) -> dict[str, np.ndarray]:
    """Every candidate for n GPUs in NVS domains of `nvs`, as int64 columns (`COLUMNS` order)."""
    n = check_int("n_gpus", n)
    nvs = check_int("nvs_size", nvs)
    cfg = configurations(q, n)
    out = with_placements(q, cfg, n, nvs)
    return {c: np.ascontiguousarray(out[c], dtype=np.int64) for c in COLUMNS}


def count(q: Question, n: int, nvs: int) -> tuple[int, int]:
    """(candidates, distinct parallel configurations without NVS assignment) for n GPUs."""
    cfg = configurations(q, n)
    cands = enumerate_space(q, n, nvs)
    return len(cands["n1"]), len(cfg["n1"])


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


BATCH_DEGREES = 4096  # parallel-degree rows of the GPU counts enumerated together (`iter_space`)


def _batches(q: Question, ns: Sequence[int]) -> Iterator[tuple[list[int], list[dict[str, np.ndarray]]]]:
    """GPU counts in consecutive batches of at most `BATCH_DEGREES` parallel-degree rows (a count
    with more is a batch alone), with their degrees."""
    degrees = [parallel_degrees(q, n) for n in ns]
    i = 0
    while i < len(ns):
        j, rows = i + 1, len(degrees[i]["n1"])
        while j < len(ns) and rows + len(degrees[j]["n1"]) <= BATCH_DEGREES:
            rows += len(degrees[j]["n1"])
            j += 1
        yield list(ns[i:j]), degrees[i:j]
        i = j


#: configuration rows `configuration_counts` keeps for the search that follows it (64 MB at most)
KEEP_ROWS = 1 << 18


class Enumerated(NamedTuple):
    """The first batches of a question's configurations (`configuration_counts` keeps them, so
    that `iter_space` does not enumerate them again): each (GPU counts, rows, offsets) as
    `configurations_many` gives them."""

    ns: tuple
    batches: tuple


def configuration_counts(q: Question, ns: Sequence[int], keep_rows: int = 0) -> tuple[list[int], Enumerated]:
    """`len(configurations(q, n)["n1"])` of each GPU count, enumerated in batches, and the first
    batches themselves while their rows total at most `keep_rows` (`Enumerated`)."""
    out, kept, rows, prefix = [], [], 0, True
    for batch, degrees in _batches(q, ns):
        cfgs, offsets = configurations_many(q, batch, degrees)
        out.extend(np.diff(offsets).tolist())
        rows += int(offsets[-1])
        prefix = prefix and rows <= keep_rows  # a prefix of the batches, so iter_space can go on after it
        if prefix:
            kept.append((tuple(batch), cfgs, offsets))
    return out, Enumerated(tuple(ns), tuple(kept))


def enumerated_batches(q: Question, ns: list[int], known: Enumerated | None):
    """(batch, rows, offsets) of every batch of `ns`: the ones `known` holds, then the rest."""
    done = 0
    if known is not None and tuple(known.ns) == tuple(ns):
        for batch, cfgs, offsets in known.batches:
            yield list(batch), cfgs, offsets
            done += len(batch)
    for batch, degrees in _batches(q, ns[done:]):
        cfgs, offsets = configurations_many(q, batch, degrees)
        yield batch, cfgs, offsets


def iter_space(
    q: Question, n_gpus, nvs_sizes, max_rows: int = 1 << 18, known: Enumerated | None = None
) -> Iterator[tuple[int, int, dict[str, np.ndarray]]]:
    """`iter_pieces` with each piece as a dict of int64 columns (`COLUMNS`)."""
    for n, nvs, piece in iter_pieces(q, n_gpus, nvs_sizes, max_rows, known):
        yield n, nvs, dict(zip(COLUMNS, piece.table()))


def iter_pieces(
    q: Question, n_gpus, nvs_sizes, max_rows: int = 1 << 18, known: Enumerated | None = None,
    packed: bool = False, compact: bool = False,
) -> Iterator[tuple[int, int, Piece]]:
    """Yield (n, nvs, candidates) pieces of at most about `max_rows` rows, each a `Piece`
    (`placement_piece`: gathered where the caller writes them), group by group: each
    (n, nvs) group's pieces come one after another (GPU counts outer, NVS sizes inner).

    GPU counts with few parallel degrees are enumerated together (`configurations_many`), so a
    question of many small groups costs a few array passes, not a few per group. Large groups are
    split over slices of their parallel configurations so that memory stays bounded by the piece
    size, not by the size of the space. `known`: batches `configuration_counts` already
    enumerated for these GPU counts (the search's size estimate), used instead of enumerating
    them again. `packed`: pieces of packed candidates (`pack`; the caller checked `packs`), each
    batch's configurations packed once. `compact` (with `packed`): each piece a `CompactPiece`,
    the placements not expanded into rows.
    """
    for batch, cfgs, offsets in enumerated_batches(q, list(n_gpus), known):
        constant = constant_columns(cfgs)  # of the whole batch, so of each of its slices
        words = pack({**cfgs, **dict.fromkeys(_FACTOR, np.int64(0))}) if packed else None
        for j, n in enumerate(batch):
            lo_n, hi_n = int(offsets[j]), int(offsets[j + 1])
            if hi_n == lo_n:
                continue
            for nvs in nvs_sizes:
                g = domain_share(n, nvs, q.profile)
                if g == 0:
                    continue
                # placements multiply rows by at most the number of factorisations
                fan = 1 if g == n else len(ordered_factorizations(g, placement_parts(q)))
                step = max(1, max_rows // max(fan, 1))
                for lo in range(lo_n, hi_n, step):
                    hi = min(lo + step, hi_n)
                    part = {c: v[lo:hi] for c, v in cfgs.items()}
                    if compact:
                        piece = compact_piece(q, part, n, nvs, words[:, lo:hi])
                    else:
                        piece = placement_piece(q, part, n, nvs, constant, None if words is None else words[:, lo:hi])
                    if piece.rows:
                        yield n, nvs, piece


def domain_note(n: int, nvs: int, profile: str) -> str | None:
    """A line saying how a job of n GPUs is laid on NVS domains of `nvs` when it does not fill
    them (n > nvs and nvs does not divide n), or None when it does."""
    if n <= nvs or n % nvs == 0:
        return None
    g = domain_share(n, nvs, profile)
    if g == 0:
        return (f"n_gpus = {n}: not a multiple of the NVS size {nvs}; profile {profile!r} places jobs on whole "
                f"domains only, so there is no placement (use a multiple of {nvs})")
    return (f"n_gpus = {n}: not a multiple of the NVS size {nvs}; each domain holds {g} GPUs of the job "
            f"({n // g} domains, {nvs - g} GPUs of each left idle); a multiple of {nvs} fills them")


def explain_empty(q: Question, n: int, nvs: int, configurations: int | None = None) -> str:
    """Why the space of q has no candidate for n GPUs in NVS domains of `nvs` (one line): the
    first enumeration step that leaves nothing, with the rule that emptied it. `configurations`:
    the count of n's parallel configurations when the caller knows it (a search does: more than
    none leaves only the placement to blame, without enumerating again)."""
    return explain_groups(q, [(nvs, n)], {n: configurations or 0})[(nvs, n)]


def explain_groups(q: Question, groups: Sequence[tuple[int, int]],
                   configurations: Mapping[int, int] | None = None) -> dict[tuple[int, int], str]:
    """`explain_empty` of each (nvs, n) group, each GPU count's configurations examined once for
    all its NVS sizes (a search over many GPU counts has many empty groups); `configurations`
    as in `explain_empty`, by GPU count."""
    known = configurations or {}
    reasons: dict[int, str | None] = {}
    out = {}
    for nvs, n in groups:
        where = f"{q.strategy} on {n} GPUs"
        if n not in reasons:
            reasons[n] = None if known.get(n) else _configurations_reason(q, n, where)
        out[(nvs, n)] = reasons[n] or _placement_reason(q, n, nvs, where)
    return out


def _configurations_reason(q: Question, n: int, where: str) -> str | None:
    """Why n GPUs have no parallel configuration (None when they have some)."""
    m, B = q.model, q.global_batch
    deg = parallel_degrees(q, n)
    if not len(deg["n1"]):
        # every n_d divides n: with a batch of n, only the shape rules remain
        if not len(parallel_degrees(dataclasses_replace(q, global_batch=n), n)["n1"]):
            return (f"{where}: no tensor x pipeline degrees divide {n} GPUs (n1 must divide heads {m.heads}, "
                    f"kv_heads {m.kv_heads} and hidden {m.hidden}; n_p the depth {m.depth} or at most it)")
        return (f"{where}: no data-parallel degree n_d = n / (n1 n2 n_p) divides global_batch {B}; "
                f"choose a GPU count whose data-parallel share divides the batch")
    mb = with_microbatches(q, deg)
    if not len(mb["n1"]):
        return (f"{where}: no microbatch size b divides global_batch / n_d with b x seq_len {m.seq_len} "
                f"split evenly over the sequence-sharding degree")
    cfg = with_interleave(q, with_panels(q, mb))
    if not len(cfg["n1"]):
        return f"{where}: no SUMMA panel count or pipeline schedule fits the configurations"
    return None


def _placement_reason(q: Question, n: int, nvs: int, where: str) -> str:
    """Why n GPUs with parallel configurations have no placement on NVS domains of `nvs`."""
    g = domain_share(n, nvs, q.profile)
    if g == 0:
        return domain_note(n, nvs, q.profile) or f"{where}: no NVS placement"
    return (f"{where}: no parallel group sizes factor the {g} GPUs per NVS domain "
            f"(each of nvs1, nvs2, nvs_p, nvs_d must divide its degree)")


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
