"""The NVS placements of configurations: each (configuration, factorisation of its domain share) a candidate, as pieces not yet gathered."""

from __future__ import annotations

from functools import lru_cache
from typing import Collection, NamedTuple

import numpy as np

from dse.explore.packing import PACKED_WORDS, pack
from dse.explore.space import (
    COLUMNS,
    Question,
    configurations,
    divisors,
    domain_share,
    ordered_factorizations,
    placement_parts,
)
from dse.spec.specs import check_int


def with_placements(q: Question, cfg: dict[str, np.ndarray], n: int, nvs: int) -> dict[str, np.ndarray]:
    """Cross configurations with every NVS assignment (nvs1, nvs2, nvs_p, nvs_d): the candidate
    columns (`COLUMNS`), each a row of one `placement_table`."""
    return dict(zip(COLUMNS, placement_table(q, cfg, n, nvs)))


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
