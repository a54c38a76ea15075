"""Enumeration of the design space (spec section 7): counts, validity, placements, streaming."""

from __future__ import annotations

import math
import re
from itertools import product
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dse.api import validate_candidates
from dse.explore.pieces import iter_space
from dse.explore.placement import count, enumerate_space
from dse.explore.space import COLUMNS, Question, domain_share, ordered_factorizations, parse_gpu_counts
from dse.spec.specs import SpecError, load_model

COUNTS_FILE = Path(__file__).resolve().parents[1] / "reference" / "lbnl_candidate_counts.txt"
TAGS = {"1d": "tp1d", "2d(summa)": "summa", "2d-seqp": "tp2d"}
LINE = re.compile(
    r"^(?P<model>\S+)\s+NVS(?P<nvs>\d+)\s+n=\s*(?P<n>\d+)\s+"
    r"1d=\s*(?P<tp1d>\d+) \(par\s+(?P<tp1d_par>\d+)\)\s+"
    r"2d\(summa\)=\s*(?P<summa>\d+) \(par\s+(?P<summa_par>\d+)\)\s+"
    r"2d-seqp=\s*(?P<tp2d>\d+) \(par\s+(?P<tp2d_par>\d+)\)\s*$"
)


def reference_counts() -> dict[tuple[str, int, int, str], tuple[int, int]]:
    """(model, nvs, n, strategy) -> (candidates, parallel configurations) of the reference code."""
    out = {}
    for line in COUNTS_FILE.read_text().splitlines():
        if not line.strip():
            continue
        m = LINE.match(line)
        assert m, f"unparsed line: {line!r}"
        model = m["model"].lower()
        for s in ("tp1d", "summa", "tp2d"):
            out[(model, int(m["nvs"]), int(m["n"]), s)] = (int(m[s]), int(m[f"{s}_par"]))
    return out


COUNTS = reference_counts()
POW2 = [1 << k for k in range(2, 15)]


def rows(table: dict) -> np.ndarray:
    return np.stack([table[c] for c in COLUMNS], axis=1)


def sorted_rows(a: np.ndarray) -> np.ndarray:
    """The rows of `a` in lexicographic order (a multiset comparison by two array equalities)."""
    return a[np.lexsort(a.T[::-1])]


def test_counts_file_complete():
    assert len(COUNTS) == 2 * 3 * 13 * 3
    assert {k[:3] for k in COUNTS} == {(m, v, n) for m in ("gpt3_1t", "vit_era5") for v in (4, 8, 64) for n in POW2}
    # spot values quoted in spec section 7.5
    assert COUNTS[("gpt3_1t", 8, 16384, "tp1d")] == (2027, 241)
    assert COUNTS[("gpt3_1t", 64, 16384, "summa")] == (115938, 4075)
    assert COUNTS[("gpt3_1t", 8, 16384, "tp2d")] == (22696, 1624)
    assert COUNTS[("gpt3_1t", 4, 2048, "tp1d")][0] == 1810
    assert COUNTS[("gpt3_1t", 8, 4096, "tp1d")][0] == 2544
    sums = {v: sum(COUNTS[("gpt3_1t", v, n, "tp1d")][0] for n in POW2) for v in (4, 8, 64)}
    assert sums == {4: 15098, 8: 20219, 64: 24275}
    sums = {v: sum(COUNTS[("vit_era5", v, n, "tp1d")][0] for n in POW2) for v in (4, 8, 64)}
    assert sums == {4: 11281, 8: 14834, 64: 16250}


@pytest.mark.parametrize("model", ["gpt3_1t", "vit_era5"])
@pytest.mark.parametrize("strategy", ["tp1d", "tp2d", "summa"])
@pytest.mark.parametrize("nvs", [4, 8, 64])
def test_reference_counts_and_validity(model, strategy, nvs):
    spec = load_model(model)
    q = Question(spec, strategy, 4096, "lbnl")
    wrong = []
    for n in POW2:
        got = count(q, n, nvs)
        if got != COUNTS[(model, nvs, n, strategy)]:
            wrong.append((n, got, COUNTS[(model, nvs, n, strategy)]))
        t = enumerate_space(q, n, nvs)
        assert len(t["n1"]) == got[0]
        if not got[0]:
            continue
        assert all(t[c].dtype == np.int64 for c in COLUMNS)
        validate_candidates(t, spec, nvs, strategy, 4096)  # raises on any invalid row
        assert np.all(t["n1"] * t["n2"] * t["n_p"] * t["n_d"] == n)
        assert len(np.unique(rows(t), axis=0)) == got[0]  # no duplicates
        if strategy != "summa":
            assert np.all(t["n_b"] == 1)
        if strategy == "tp1d":
            assert np.all(t["n2"] == 1) and np.all(t["nvs2"] == 1)
    assert not wrong, f"(n, ours, reference): {wrong}"


# -------------------------------------------------------------------------------------------------
# ordered factorizations


def factorization_count(n: int, parts: int) -> int:
    """Ordered factorizations of n into `parts` positive factors: prod over primes C(a + parts - 1, parts - 1)."""
    total, p, m = 1, 2, n
    while p * p <= m:
        a = 0
        while m % p == 0:
            m //= p
            a += 1
        total *= math.comb(a + parts - 1, parts - 1)
        p += 1
    if m > 1:
        total *= parts
    return total


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 20000), parts=st.integers(1, 5))
def test_ordered_factorizations(n, parts):
    f = ordered_factorizations(n, parts)
    assert f.shape == (factorization_count(n, parts), parts)
    assert f.dtype == np.int64
    assert np.all(f >= 1)
    assert np.all(np.prod(f, axis=1) == n)
    assert len(np.unique(f, axis=0)) == len(f)


def test_ordered_factorizations_small():
    assert sorted(map(tuple, ordered_factorizations(4, 2))) == [(1, 4), (2, 2), (4, 1)]
    assert sorted(map(tuple, ordered_factorizations(6, 3))) == sorted(
        t for t in product(range(1, 7), repeat=3) if t[0] * t[1] * t[2] == 6)
    assert ordered_factorizations(1, 4).tolist() == [[1, 1, 1, 1]]
    assert ordered_factorizations(64, 4).shape[0] == math.comb(9, 3)


# -------------------------------------------------------------------------------------------------
# placements for any n and NVS size


def largest_divisor_upto(n: int, bound: int) -> int:
    return max(d for d in range(1, min(n, bound) + 1) if n % d == 0)


@pytest.mark.parametrize("n", [12, 96, 384, 1000])
@pytest.mark.parametrize("nvs", [6, 8, 72])
def test_domain_share(n, nvs):
    g = domain_share(n, nvs, "default")
    assert g == (n if n <= nvs else largest_divisor_upto(n, nvs))
    lb = domain_share(n, nvs, "lbnl")
    assert lb == (n if n <= nvs else (nvs if n % nvs == 0 else 0))


def placements(deg: tuple[int, ...], g: int, strategy: str) -> set[tuple[int, int, int, int]]:
    """Every (nvs1, nvs2, nvs_p, nvs_d) with product g, each dividing its degree (brute force)."""
    n1, n2, n_p, n_d = deg
    out = set()
    for a in range(1, n1 + 1):
        for b in range(1, n2 + 1):
            for p in range(1, n_p + 1):
                if g % (a * b * p):
                    continue
                d = g // (a * b * p)
                if n1 % a or n2 % b or n_p % p or n_d % d:
                    continue
                # tp1d's nvs2 is its context-parallel group's (n2 = cp): it divides n2 like the others
                # (it was forced to 1 when tp1d had no n2; with n2 = 1 it still is)
                out.add((a, b, p, d))
    return out


NON_POW2 = [(n, nvs) for n in (12, 96, 384, 1000) for nvs in (6, 8, 72)]


@pytest.mark.parametrize("strategy", ["tp1d", "tp2d", "summa"])
def test_non_power_of_two_default(strategy):
    sizes = {}
    for model in ("gpt3_1t", "vit_era5", "gpt3_175b"):
        spec = load_model(model)
        q = Question(spec, strategy, 4096, "default")
        for n, nvs in NON_POW2:
            t = enumerate_space(q, n, nvs)
            k = len(t["n1"])
            sizes[(model, n, nvs)] = k
            if not k:
                continue
            validate_candidates(t, spec, nvs, strategy, 4096)
            assert np.all(t["n1"] * t["n2"] * t["n_p"] * t["n_d"] == n)
            for c, d in (("nvs1", "n1"), ("nvs2", "n2"), ("nvs_p", "n_p"), ("nvs_d", "n_d")):
                assert np.all(t[d] % t[c] == 0)
            placed = t["nvs1"] * t["nvs2"] * t["nvs_p"] * t["nvs_d"]
            if n > nvs:
                g = largest_divisor_upto(n, nvs)
                assert np.all(placed == g), (model, n, nvs)
                # every admissible assignment of each parallel configuration, and nothing else
                by_cfg: dict = {}
                for r in rows(t):
                    cfg = (r[0], r[1], r[2], r[3], r[4], r[9])
                    by_cfg.setdefault(cfg, set()).add((r[5], r[6], r[7], r[8]))
                for cfg, got in list(by_cfg.items())[:40]:
                    assert got == placements(tuple(int(x) for x in cfg[:4]), g, strategy), cfg
            else:
                for c, d in (("nvs1", "n1"), ("nvs2", "n2"), ("nvs_p", "n_p"), ("nvs_d", "n_d")):
                    assert np.array_equal(t[c], t[d])
    # the non-power-of-two counts do produce work for the models with a factor 3 (ViT depth 48,
    # GPT3-175B depth 96)
    assert sizes[("vit_era5", 96, 8)] > 0 and sizes[("gpt3_175b", 384, 72)] > 0
    assert sizes[("vit_era5", 12, 8)] > 0


def test_lbnl_without_placement_is_empty(vit_era5):
    """12 GPUs in domains of 8: the reference finds no assignment (8 does not divide 12)."""
    for strategy in ("tp1d", "tp2d", "summa"):
        q_lbnl = Question(vit_era5, strategy, 4096, "lbnl")
        q_def = Question(vit_era5, strategy, 4096, "default")
        cands, par = count(q_lbnl, 12, 8)
        assert cands == 0 and par > 0
        t = enumerate_space(q_def, 12, 8)
        assert len(t["n1"]) > 0
        assert np.all(t["nvs1"] * t["nvs2"] * t["nvs_p"] * t["nvs_d"] == 6)


@pytest.mark.parametrize("strategy", ["tp1d", "tp2d", "summa"])
def test_default_equals_lbnl_where_nvs_divides(strategy, gpt3_1t):
    for n, nvs in ((16, 64), (1024, 8), (4096, 64), (64, 4)):
        # zero=(1,): the default rule also searches ZeRO stages 2 and 3, as it does recompute modes;
        # and without tp1d's context parallelism, which the reference's space does not have
        a = rows(enumerate_space(Question(gpt3_1t, strategy, 4096, "default", max_interleave=1, recompute=(1,),
                                          zero=(1,), context_parallel=False), n, nvs))
        b = rows(enumerate_space(Question(gpt3_1t, strategy, 4096, "lbnl"), n, nvs))
        assert np.array_equal(a, b)


# -------------------------------------------------------------------------------------------------
# streaming


@pytest.mark.parametrize("strategy", ["tp1d", "tp2d", "summa"])
def test_iter_space_pieces(strategy, gpt3_1t, vit_era5):
    for spec, profile, ns, nvss in ((gpt3_1t, "lbnl", [256, 4096, 12], [8, 64]),
                                    (vit_era5, "default", [96, 1024], [6, 8])):
        q = Question(spec, strategy, 4096, profile)
        got: dict = {}
        for n, nvs, piece in iter_space(q, ns, nvss, max_rows=500):
            assert 0 < len(piece["n1"]) <= 500
            got.setdefault((n, nvs), []).append(rows(piece))
        for n in ns:
            for nvs in nvss:
                full = rows(enumerate_space(q, n, nvs))
                if not len(full):
                    assert (n, nvs) not in got
                    continue
                parts = np.concatenate(got[(n, nvs)])
                assert len(parts) == len(full)
                assert np.array_equal(sorted_rows(parts), sorted_rows(full))  # the same rows, none twice
                assert len(np.unique(full, axis=0)) == len(full)
                assert len(got[(n, nvs)]) > 1 or len(full) <= 500


def test_parse_gpu_counts():
    assert parse_gpu_counts("pow2:4:16384") == POW2
    assert parse_gpu_counts(4096) == [4096]
    assert parse_gpu_counts("4,8,96") == [4, 8, 96]
    assert parse_gpu_counts("range:8:32:8") == [8, 16, 24, 32]
    assert parse_gpu_counts([12, 96]) == [12, 96]
    for bad in ("pow2:3:16", "pow2:16:4", "abc", [], "range:x:8"):
        with pytest.raises(SpecError) as err:
            parse_gpu_counts(bad)
        assert "\n" not in str(err.value) and str(err.value).startswith("n_gpus")


# -------------------------------------------------------------------------------------------------
# counts that do not fill the NVS domains, and empty spaces: said, never silent


def test_domain_note_says_how_a_partial_domain_is_filled():
    from dse.explore.pieces import domain_note

    assert domain_note(2304, 72, "default") is None  # 32 whole NVL72 racks
    assert domain_note(64, 72, "default") is None  # inside one domain
    note = domain_note(16384, 72, "default")
    # 16384 = 2^14: the largest divisor not above 72 is 64; 256 domains, 8 GPUs of each idle
    assert "not a multiple of the NVS size 72" in note and "64 GPUs" in note and "256 domains" in note
    assert "8 GPUs of each left idle" in note
    assert "no placement" in domain_note(16384, 72, "lbnl")


def test_empty_space_names_the_rule_that_emptied_it():
    from dse.explore.pieces import explain_empty

    gpt = load_model("gpt3_1t")  # 160 heads, depth 128, hidden 25600
    # 3 GPUs: n1 = 3 divides no head count, n_p = 3 not the depth, so n_d = 3, which 4096 is not a multiple of
    q = Question(gpt, "tp1d", 4096, profile="lbnl")
    assert count(q, 3, 8)[0] == 0
    assert "no data-parallel degree" in explain_empty(q, 3, 8) and "4096" in explain_empty(q, 3, 8)
    # the same on 3 GPUs with a batch of 3 exists
    assert count(Question(gpt, "tp1d", 3, profile="lbnl"), 3, 8)[0] > 0


def test_reasons_of_many_groups_equal_each_group_examined_alone():
    """`explain_groups` (each GPU count examined once, the search's configuration counts trusted)
    says for every empty group what `explain_empty` says examining it from scratch."""
    from dse.explore.pieces import configuration_counts, explain_empty, explain_groups

    q = Question(load_model("gpt3_1t"), "tp1d", 4096, profile="lbnl")
    ns = [3, 12, 100, 192, 320, 1000, 4096, 16383]
    counts = dict(zip(ns, configuration_counts(q, ns)[0]))
    empty = [(nvs, n) for n in ns for nvs in (7, 8, 72) if count(q, n, nvs)[0] == 0]
    assert {0} < set(counts.values()) and any(counts[n] for _, n in empty)  # both causes occur
    got = explain_groups(q, empty, counts)
    assert list(got) == empty
    assert got == {(nvs, n): explain_empty(q, n, nvs) for nvs, n in empty}
    assert explain_groups(q, empty) == got  # without the counts: the same


def test_search_reports_empty_groups_and_partial_domains():
    from dse.explore.search import run_search

    res = run_search(model="gpt3_1t", system="gb200_nvl72", strategy="tp1d", n_gpus=[2300, 2304])
    notes = res.stats["notes"]
    assert any("2300" in n and "50 GPUs" in n for n in notes)  # 2300 = 46 x 50
    assert any(n.startswith("no candidate: tp1d on 2300 GPUs") for n in notes)
    assert not any("2304" in n for n in notes)  # 32 full racks: nothing to say
    assert res.top.filter(res.top["n_gpus"] == 2304).height > 0


def test_a_strategy_that_cannot_model_the_question_is_said_and_left_out():
    from dse.explore.search import check_strategies

    ok, notes = check_strategies(("tp1d", "tp2d", "summa"), model="deepseek_v3", system="dgx_h100", n_gpus=256,
                                 global_batch=256)
    assert ok == ["tp1d", "tp2d"]
    assert notes == ["summa: not searched: model.attention = 'mla': strategy 'summa' models multi-head attention; "
                     "use tp1d or tp2d"]
    # every strategy refusing is the first refusal, as an error
    with pytest.raises(SpecError, match="model.attention = 'mla': strategy 'summa'"):
        check_strategies(("summa",), model="deepseek_v3", system="dgx_h100", n_gpus=256, global_batch=256)


def test_summa_panel_counts_follow_the_rule_row_by_row():
    """`with_panels` against the spec's n_b rule (spec section 'n_b') written out per row: s =
    max(n1, n2); n_b = s when e / s < 512, else each s * 2^k, k < ceil(log2(floor(e / s))), that
    divides e into panels of at least 512 columns; rows in order, each row's n_b ascending."""
    from types import SimpleNamespace

    from dse.explore.space import with_panels

    s1 = np.arange(1, 200, dtype=np.int64)
    cfg = {"n1": np.repeat(s1, 3), "n2": np.tile(np.array([1, 6, 64], dtype=np.int64), len(s1)),
           "tag": np.arange(3 * len(s1), dtype=np.int64)}
    for e in (512, 1000, 4096, 7168, 12288, 25600, 52224):
        got = with_panels(SimpleNamespace(strategy="summa", model=SimpleNamespace(hidden=e)), cfg)
        want = []
        for n1, n2, tag in zip(cfg["n1"].tolist(), cfg["n2"].tolist(), cfg["tag"].tolist()):
            s = max(n1, n2)
            if e / s < 512:
                nbs = [s]
            else:
                top = 0
                while 2 ** top < e // s:  # the smallest top with 2^top >= floor(e / s): ceil(log2(.))
                    top += 1
                nbs = [s * 2 ** k for k in range(top) if e % (s * 2 ** k) == 0 and e // (s * 2 ** k) >= 512]
            want += [(n1, n2, tag, nb) for nb in nbs]
        assert list(zip(*(got[c].tolist() for c in ("n1", "n2", "tag", "n_b")))) == want, e
        assert got["n_b"].dtype == np.int64


def test_a_piece_holds_every_allowed_placement_and_writes_in_any_ranges():
    """`placement_piece`: configuration i with every ordered split of the domain share into
    (nvs1, nvs2, nvs_d, nvs_p) whose parts divide their degrees, by brute force over the
    configurations and the splits, in that order; written range by range into strided views of a
    wider array (the search's call slabs), the rows are the same."""
    from itertools import product

    from dse.explore.placement import placement_piece
    from dse.explore.space import configurations

    q = Question(load_model("gpt3_1t"), "tp2d", 4096, profile="lbnl")
    n, nvs = 1024, 8
    cfg = configurations(q, n)
    g = domain_share(n, nvs, "lbnl")
    assert 1 < g < n
    want = []
    for i in range(len(cfg["n1"])):
        for f1, f2, fd, fp in product(range(1, g + 1), repeat=4):
            if f1 * f2 * fd * fp != g:
                continue
            if all(int(cfg[c][i]) % f == 0 for c, f in (("n1", f1), ("n2", f2), ("n_d", fd), ("n_p", fp))):
                row = {c: int(cfg[c][i]) for c in cfg}
                row.update(nvs1=f1, nvs2=f2, nvs_d=fd, nvs_p=fp)
                want.append(tuple(row[c] for c in COLUMNS))
    piece = placement_piece(q, cfg, n, nvs)
    table = piece.table()
    assert piece.rows == len(want) > 100
    assert sorted(map(tuple, table.T.tolist())) == sorted(want)
    wide = np.full((3, len(COLUMNS), piece.rows), -1, dtype=np.int64)
    cuts = [0, 7, 8, piece.rows // 2, piece.rows]
    for a, b in zip(cuts, cuts[1:]):
        piece.write(wide[1, :, a:b], a, b)
    np.testing.assert_array_equal(wide[1], table)
    assert (wide[0] == -1).all() and (wide[2] == -1).all()


@pytest.mark.parametrize("model, strategy, n, nvs", [("gpt3_1t", "tp2d", 1024, 8), ("gpt3_1t", "tp1d", 4096, 64),
                                                    ("gpt3_1t", "summa", 16384, 1024), ("gpt3_175b", "tp2d", 6144, 3072)])
def test_a_piece_lists_placements_in_order_and_counts_them(model, strategy, n, nvs):
    """The rows of a piece in their order: configuration by configuration, and within one the
    splits (nvs1, nvs2, nvs_d, nvs_p) of the domain share in lexicographic order, each part
    dividing its degree (checked directly, configuration by configuration); `placement_count`
    is their number. Shares of 8, 64, 1024 and 3072 GPUs (4, 7, 11 and 22 divisors: few or
    many possible gcd tuples)."""
    from dse.explore.placement import constant_columns, placement_count, placement_piece
    from dse.explore.space import configurations, placement_parts

    q = Question(load_model(model), strategy, 4096, profile="lbnl")
    cfg = configurations(q, n)
    g = domain_share(n, nvs, "lbnl")
    assert 1 < g < n
    divs = [d for d in range(1, g + 1) if g % d == 0]
    splits = [(a, b, c, g // (a * b * c)) for a, b, c in product(divs, repeat=3) if g % (a * b * c) == 0]
    if placement_parts(q) == 3:  # tp1d without context parallelism: nvs2 = 1
        splits = [s for s in splits if s[1] == 1]
    splits = np.array(sorted(splits), dtype=np.int64)
    deg = np.stack([cfg[c] for c in ("n1", "n2", "n_d", "n_p")], axis=1)
    want = []
    for i in range(len(deg)):
        for s in splits[(deg[i] % splits == 0).all(axis=1)]:
            row = {c: int(cfg[c][i]) for c in cfg}
            row.update(nvs1=int(s[0]), nvs2=int(s[1]), nvs_d=int(s[2]), nvs_p=int(s[3]))
            want.append(tuple(row[c] for c in COLUMNS))
    piece = placement_piece(q, cfg, n, nvs)
    assert list(map(tuple, piece.table().T.tolist())) == want
    assert placement_count(q, cfg, n, nvs) == len(want) > 100
    # the columns of one value written as fills: the same rows, in any ranges
    one = {c for c in cfg if len(set(cfg[c].tolist())) == 1}
    assert constant_columns(cfg) == one and {"recompute", "ep"} <= one
    filled = placement_piece(q, cfg, n, nvs, constant_columns(cfg))
    out = np.full((len(COLUMNS), len(want) + 2), -1, dtype=np.int64)
    cut = len(want) // 3
    filled.write(out[:, 1:1 + cut], 0, cut)
    filled.write(out[:, 1 + cut:-1], cut, len(want))
    assert list(map(tuple, out[:, 1:-1].T.tolist())) == want
    assert (out[:, 0] == -1).all() and (out[:, -1] == -1).all()


def test_packed_words_hold_every_field_at_its_extremes():
    """`pack` / `unpack` (NumPy) and `dse.explore.engine.unpack_candidates` (the program's decoder) give
    back every column for values at 0, 1 and the top of each field (the top bit of a word and of
    each 32-bit half set), and random ones; a value beyond its field is an error naming it."""
    import jax

    from dse.explore.engine import unpack_candidates
    from dse.explore.packing import PACKED_WORDS, PACKING, pack, unpack

    rng = np.random.default_rng(7)
    top = np.array([(1 << bits) - 1 for _, _, _, bits in PACKING], dtype=np.int64)[:, None]
    table = np.concatenate([np.zeros((16, 1), dtype=np.int64), np.ones((16, 1), dtype=np.int64), top,
                            rng.integers(0, top + 1, size=(16, 997))], axis=1)
    words = pack(table)
    assert words.shape == (PACKED_WORDS, table.shape[1]) and words.dtype == np.int64
    assert (words[:2, 2] < 0).all()  # the top values set bit 63 of words 0 and 1 (the decoder's sign case)
    np.testing.assert_array_equal(unpack(words), table)
    with jax.enable_x64(True):
        got = jax.jit(unpack_candidates)(words)
    np.testing.assert_array_equal(np.stack([np.asarray(x) for x in got]), table)
    assert all(np.asarray(x).dtype == np.int64 for x in got)
    for r, c in ((0, "n1"), (4, "microbatch"), (10, "interleave"), (14, "zero")):
        bad = table.copy()
        bad[r, 5] = top[r, 0] + 1
        with pytest.raises(ValueError, match=c):
            pack(bad)


@pytest.mark.parametrize("model, strategy, profile", [("gpt3_1t", "tp2d", "lbnl"), ("gpt3_1t", "summa", "lbnl"),
                                                      ("gpt3_1t", "tp1d", "default"), ("mixtral_8x7b", "tp1d", "default"),
                                                      ("gpt3_175b", "tp2d", "default")])
def test_packed_pieces_are_the_candidates(model, strategy, profile):
    """`iter_pieces(..., packed=True)` yields, piece for piece, the packed words of the candidates
    `iter_pieces` yields (whole jobs inside a domain, split ones, uneven shares, 3 and 4 part
    placements, MoE expert degrees, context parallelism, interleaving, recompute, ZeRO), and
    `packs` holds for these questions: each column's largest value fits its field."""
    from dse.explore.engine import profile_of, space_options
    from dse.explore.packing import PACKING, packs, unpack
    from dse.explore.pieces import iter_pieces

    q = Question(load_model(model), strategy, 1024, **space_options(profile_of(profile)))
    ns, nvss = [8, 64, 96, 1024, 6144], [8, 72]
    assert packs(q, ns)
    plain = list(iter_pieces(q, ns, nvss, max_rows=5000))
    packed = list(iter_pieces(q, ns, nvss, max_rows=5000, packed=True))
    assert [(n, v, p.rows) for n, v, p in plain] == [(n, v, p.rows) for n, v, p in packed]
    tables = [p.table() for _, _, p in plain]
    for t, (_, _, p) in zip(tables, packed):
        np.testing.assert_array_equal(unpack(p.table()), t)
    every = np.concatenate(tables, axis=1)
    assert every.shape[1] > 10_000
    for r, (c, _, _, bits) in enumerate(PACKING):
        assert every[r].max() < 1 << bits, c
    varied = {c for r, c in enumerate(COLUMNS) if len(np.unique(every[r])) > 1}
    assert {"n1", "n_p", "n_d", "microbatch", "nvs1", "nvs_d"} <= varied


def test_packs_says_no_where_a_field_could_overflow():
    """`packs`: GPU counts, global batch, depth and experts beyond their fields leave a search
    unpacked (its columns as they are)."""
    from dse.explore.packing import packs

    m = load_model("gpt3_1t")
    q = Question(m, "tp2d", 4096, profile="lbnl")
    assert packs(q, [4, 65535]) and not packs(q, [4, 65536])
    assert not packs(Question(m, "tp2d", 1 << 16, profile="lbnl"), [1024])
    assert packs(Question(m, "tp2d", (1 << 16) - 1, profile="lbnl"), [1024])
