"""The k best rows per (system, group) segment of a search, merged chunk by chunk, ties broken by the candidate columns."""

from __future__ import annotations

from typing import Callable

import numpy as np

from dse.explore.ranking import lexsort_keys



class TopK:
    """The k best rows per segment, merged chunk by chunk.

    Rank order: `dse.explore.ranking` (throughput descending, then the candidate columns ascending).
    Rows with throughput below the current k-th of their segment are discarded before any sorting.
    The rows are kept in buckets of `bucket` consecutive segments, and an offer merges only with
    the buckets it touches: the search numbers segments group-major (group x systems + system) and
    streams group by group, so a chunk touches the few buckets of its groups, not every row kept
    so far (a wide hardware axis keeps millions). `columns`: how the rows offered (packed
    candidate words, `dse.explore.packing.pack`) become candidate columns, for ties and for `cols`; None when
    they are the columns. Rows are kept as offered: a merge concatenates and gathers three words a
    row, not sixteen columns.
    """

    def __init__(self, k: int, n_segments: int, bucket: int = 4096,
                 columns: Callable[[np.ndarray], np.ndarray] | None = None):
        self.k = k
        self._columns = columns or (lambda rows: rows)
        self.bucket = min(max(1, int(bucket)), 1 << 16)  # a segment's place in its bucket: 16 bits (`_merge`)
        self.threshold = np.full(n_segments, -np.inf)
        self._rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # bucket: (seg, score, cols)

    def _column(self, i: int, empty: np.ndarray) -> np.ndarray:
        parts = [self._rows[b][i] for b in sorted(self._rows)]
        return np.concatenate(parts) if parts else empty

    @property
    def seg(self) -> np.ndarray:
        """Segment of each kept row; rows sorted by segment, then rank."""
        return self._column(0, np.zeros(0, dtype=np.int64))

    @property
    def score(self) -> np.ndarray:
        return self._column(1, np.zeros(0))

    @property
    def cols(self) -> np.ndarray:
        """(rows, columns) candidate columns; (0, 0) before any row."""
        rows = self._column(2, None)
        return np.zeros((0, 0), dtype=np.int64) if rows is None else self._columns(rows)

    def add(self, seg: np.ndarray, score: np.ndarray, cols: np.ndarray) -> None:
        """Offer rows (segment id, throughput, candidate columns); non-finite scores are ignored.
        Rows below their segment's current k-th are dropped; the rest are merged (and sorted once)
        with the rows kept in their buckets."""
        keep = np.isfinite(score) & (score >= self.threshold[seg])
        if not keep.all():
            seg, score, cols = seg[keep], score[keep], cols[keep]
        if not len(seg):
            return
        b = seg // self.bucket
        first, last = int(b.min()), int(b.max())
        if first == last:  # the usual offer: one bucket
            self._merge(first, seg, score, cols)
            return
        for i in np.unique(b).tolist():
            at = b == i
            self._merge(i, seg[at], score[at], cols[at])

    def _merge(self, b: int, seg: np.ndarray, score: np.ndarray, cols: np.ndarray) -> None:
        """Merge rows of bucket b with the rows it keeps: with those of the segments from the
        lowest to the highest offered (kept rows are sorted by segment, so a slice), the rows of
        the bucket's other segments set aside unsorted and put back around the merged ones."""
        before = after = None
        if b in self._rows:
            old = self._rows[b]
            lo, hi = np.searchsorted(old[0], seg.min(), side="left"), np.searchsorted(old[0], seg.max(), side="right")
            before, after = tuple(x[:lo] for x in old), tuple(x[hi:] for x in old)
            seg, score, cols = (np.concatenate([old[0][lo:hi], seg]), np.concatenate([old[1][lo:hi], score]),
                                np.concatenate([old[2][lo:hi], cols]))
        # by segment, then score descending: a sort by score, then a stable one by the segment's
        # place in the bucket (16 bits: NumPy's radix sort), faster than np.lexsort on the
        # thousands of rows of a merge. Equal (segment, score) rows are ordered by their columns below.
        by_score = np.argsort(-score)
        order = by_score[np.argsort((seg[by_score] - b * self.bucket).astype(np.uint16), kind="stable")]
        s_seg, s_score = seg[order], score[order]
        same = (s_seg[1:] == s_seg[:-1]) & (s_score[1:] == s_score[:-1])
        if same.any():  # ties: the columns decide (`dse.explore.ranking`), sorted within each run of equal (segment, score)
            tied = np.flatnonzero(np.r_[same, False] | np.r_[False, same])  # positions in a run of equal keys
            run = np.cumsum(np.r_[True, ~same])[tied]  # the run each belongs to (runs are contiguous)
            rows = order[tied]
            # (run, columns): within a run the segment and score are equal, so its order is the columns'
            order[tied] = rows[np.lexsort(lexsort_keys(run, np.zeros(len(rows)), self._columns(cols[rows])))]
        # the tie order moved rows only within runs of equal (segment, score): s_seg and s_score
        # stand, and the columns are gathered for the kept rows alone
        rank = np.arange(len(s_seg)) - np.searchsorted(s_seg, s_seg, side="left")
        keep = rank < self.k
        merged = (s_seg[keep], s_score[keep], cols[order[keep]])
        if before is not None and (len(before[0]) or len(after[0])):
            merged = tuple(np.concatenate([x, y, z]) for x, y, z in zip(before, merged, after))
        self._rows[b] = merged
        full = rank == self.k - 1
        self.threshold[s_seg[full]] = s_score[full]
