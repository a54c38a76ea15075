"""The size of a search, known before it starts, and the limit it must stay under.

`estimate` counts a search's candidates from the enumeration's own steps (the parallel
configurations of each GPU count times the NVS placements each can take, an upper bound of what
`dse.explore.pieces.iter_space` yields) and multiplies by the hardware grid; from that it gives a rough wall
time and the memory the search holds. `check_size` refuses a search above its limit with one
`SpecError` line carrying the estimate, before any kernel is compiled; a bound above the limit is
replaced by the exact count (`exact_candidates`: each configuration's placements by their
divisibility mask, without building them; the bound can be several times the count), so a search
is never refused for candidates it does not have:

    search.max_candidates = 1e9 (default, `DEFAULT_MAX_CANDIDATES`): a search of more candidates
    stops with e.g. `search.max_candidates = 1,000,000,000: this search has about 3.1e+10
    candidates (...); raise search.max_candidates to run it`.

Raising the limit runs it: searches stream in fixed-size chunks, so memory does not grow with
the candidate count (only `output.rows=all` writes every row, about 0.25 KB each on disk).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from dse.spec.specs import SpecError, check_int

#: Candidates (times hardware grid points) a search may evaluate unless the user raises the limit:
#: about 2 to 4 minutes of a 2-core CPU, seconds on a GPU.
DEFAULT_MAX_CANDIDATES = 1_000_000_000
#: Candidates per second assumed for the time estimate (a 2-core CPU, float64; `dse bench`).
RATE = 5e6
#: Upper bound of the limit itself (int64-safe counters, and days of CPU).
MAX_LIMIT = 1 << 50
#: Bytes a kept row takes in a Parquet file (zstd), for the disk estimate of output.rows=all.
ROW_BYTES = 250


class Estimate(NamedTuple):
    """A search's size before it runs."""

    candidates: int  # configurations x hardware grid points (an upper bound; exact when over the limit)
    groups: int  # (NVS size, GPU count) groups with at least one configuration
    seconds: float  # rough wall time on a 2-core CPU (`RATE`)
    disk_gb: float  # what output.rows=all would write
    enumerated: Any = None  # `dse.explore.pieces.Enumerated`: the first configurations, for the search to reuse
    configurations: Any = None  # {GPU count: how many parallel configurations it has (before placements)}

    def describe(self) -> str:
        return (f"about {self.candidates:.3g} candidates in {self.groups} group(s), "
                f"~{_duration(self.seconds)} on a 2-core CPU, memory bounded by the chunk size, "
                f"{self.disk_gb:.3g} GB on disk with output.rows=all")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.3g} h"


def estimate(q, n_gpus: Sequence[int], nvs_sizes: Sequence[int], n_systems: int = 1) -> Estimate:
    """The candidates of question `q` (`dse.explore.space.Question`) over GPU counts and NVS sizes, times
    `n_systems` hardware points: for each group, the parallel configurations times the placements
    of one domain's share (`iter_space`'s own bound), without building the placements."""
    from dse.explore.pieces import KEEP_ROWS, configuration_counts
    from dse.explore.space import domain_share, ordered_factorizations, placement_parts

    total = groups = 0
    counts, enumerated = configuration_counts(q, list(n_gpus), KEEP_ROWS)
    configs = dict(zip(n_gpus, counts))
    for nvs in nvs_sizes:
        for n in n_gpus:
            k = configs[n]
            g = domain_share(n, nvs, q.profile)
            if k == 0 or g == 0:
                continue
            fan = 1 if g == n else len(ordered_factorizations(g, placement_parts(q)))
            total += k * fan
            groups += 1
    total *= max(1, int(n_systems))
    return Estimate(total, groups, total / RATE, total * ROW_BYTES / 1e9, enumerated, configs)


def exact_candidates(q, n_gpus: Sequence[int], nvs_sizes: Sequence[int], rows: int = 1 << 16) -> int:
    """The candidates `dse.explore.pieces.iter_space` yields for one hardware point, counted without
    building them: each configuration's NVS placements by their divisibility mask (`rows`
    configurations at a time), the enumeration's own rule."""
    from dse.explore.pieces import enumerated_batches
    from dse.explore.placement import placement_count

    total = 0
    for batch, cfgs, offsets in enumerated_batches(q, list(n_gpus), None):
        for j, n in enumerate(batch):
            for lo in range(int(offsets[j]), int(offsets[j + 1]), rows):
                part = {c: v[lo:min(lo + rows, int(offsets[j + 1]))] for c, v in cfgs.items()}
                total += sum(placement_count(q, part, n, nvs) for nvs in nvs_sizes)
    return total


def max_candidates(value) -> int:
    """The limit as given (None: the default), an integer in [1, MAX_LIMIT] (1e9 written as a
    float is taken when it is a whole number)."""
    if value is None:
        return DEFAULT_MAX_CANDIDATES
    if isinstance(value, float) and value.is_integer() and 1 <= value <= MAX_LIMIT:
        value = int(value)
    return check_int("search.max_candidates", value, 1, MAX_LIMIT)


def check_size(q, n_gpus: Sequence[int], nvs_sizes: Sequence[int], n_systems: int, limit=None) -> Estimate:
    """`estimate`, refused with one SpecError line when above `limit` (`max_candidates`)."""
    limit = max_candidates(limit)
    est = estimate(q, n_gpus, nvs_sizes, n_systems)
    if est.candidates > limit:  # the quick bound is over: count exactly before refusing
        exact = exact_candidates(q, n_gpus, nvs_sizes) * max(1, int(n_systems))
        est = est._replace(candidates=exact, seconds=exact / RATE, disk_gb=exact * ROW_BYTES / 1e9)
    if est.candidates > limit:
        raise SpecError(f"search.max_candidates = {limit:,}: {q.strategy} would evaluate {est.describe()}; "
                        "raise search.max_candidates (max_candidates= in Python) to run it, or narrow "
                        "n_gpus, system.nvs_size or search.grid")
    return est
