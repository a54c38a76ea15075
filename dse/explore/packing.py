"""Packed candidates: three int64 words a candidate instead of sixteen columns (`PACKING`)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from dse.explore.space import COLUMNS, MIN_PANEL, Question
from kernels.params import PRECISIONS, RECOMPUTE, ZERO_STAGES


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
    ("precision", 2, 59, 2), ("zero", 2, 61, 2), ("ep", 2, 44, 12),
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
                             f"field of the packed candidates (dse.explore.packing.packs)")
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
