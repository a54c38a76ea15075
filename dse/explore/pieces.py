"""A question's candidate stream: its configurations enumerated in batches of GPU counts and placed, piece by piece, group by group; and why a group has no candidate."""

from __future__ import annotations

from dataclasses import replace as dataclasses_replace
from typing import Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from dse.explore.packing import pack
from dse.explore.placement import _FACTOR, Piece, compact_piece, constant_columns, placement_piece
from dse.explore.space import (
    COLUMNS,
    Question,
    configurations_many,
    domain_share,
    ordered_factorizations,
    parallel_degrees,
    placement_parts,
    with_interleave,
    with_microbatches,
    with_panels,
)


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


#: configuration rows `configuration_counts` keeps for the search that follows it (16 int64 columns:
#: 64 MB at most). 2^19 holds the 285,330 of GPT3-1T's default 1D space over n = 4 ... 16384 (7.0M
#: candidates a system), which the search then does not enumerate a second time.
KEEP_ROWS = 1 << 19


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
