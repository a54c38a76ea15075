"""Where the GPUs of a configuration sit: the search's placement of the parallel grid on HB domains.

A configuration (n1, n2, n_p, n_d) with (nvs1, nvs2, nvs_p, nvs_d) GPUs of each group per HB domain
puts K = nvs1 nvs2 nvs_p nvs_d GPUs of the job in every domain, a box of the parallel grid. A grid
coordinate splits into a position inside the box and a box index: i1 = a1 nvs1 + l1 (likewise n2,
n_d), and for the pipeline ip = a_p nvs_p + (l_p if a_p is even else nvs_p - 1 - l_p): the stages
snake through alternate domains, so the boundary between two domains joins the same local position
on both sides. Then

    local rank (rail)  l1 + nvs1 (l2 + nvs2 (l_d + nvs_d l_p))     tensor parallelism innermost,
    domain             a1 + A1 (a2 + A2 (a_d + A_d a_p))           then data, then pipeline
    global rank        domain K + local rank

with A1 = n1/nvs1 etc. Every group (fix all coordinates but one axis) holds the same local ranks in
each of its domains, hence is rail-aligned. Ranks count the job's GPUs only: where a domain has
more than K GPUs, the rest are idle and not drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.spec.specs import SpecError
from dse.traffic.per_gpu import AXES


@dataclass(frozen=True)
class Placement:
    """Global ranks of a configuration's GPUs (module docstring).

    rank     (n1, n2, n_p, n_d) int64: the GPU of each grid coordinate
    domain   (n,) HB domain of each rank;  rail: (n,) its local rank in the domain
    per_domain  K, the job's GPUs per domain
    """

    rank: np.ndarray
    domain: np.ndarray
    rail: np.ndarray
    per_domain: int

    @property
    def n(self) -> int:
        return int(self.rank.size)

    def coords(self) -> dict[str, np.ndarray]:
        """(n,) grid coordinates i1, i2, ip, id of every rank."""
        out = {}
        for axis, name in enumerate(("i1", "i2", "ip", "id")):
            idx = np.indices(self.rank.shape)[axis].ravel()
            col = np.empty(self.n, dtype=np.int64)
            col[self.rank.ravel()] = idx
            out[name] = col
        return out

    def members(self, axes: tuple[str, ...]) -> np.ndarray:
        """(groups, g) ranks of every group that varies `axes` (the others fixed), each group in the
        order of its grid coordinates (the last of `axes` innermost): for one axis, the order of the
        group's ranks in that parallelism (a ring's order, e.g. the context-parallel ring's)."""
        pos = [AXES.index(a) for a in axes]
        rest = [i for i in range(4) if i not in pos]
        g = int(np.prod([self.rank.shape[i] for i in pos])) if pos else 1
        return np.transpose(self.rank, rest + pos).reshape(-1, g)

    def groups(self, axes: tuple[str, ...]) -> np.ndarray:
        """(groups, y, x) ranks of every group that varies `axes` (the others fixed), as the grid of
        `kernels.fabrics`: row r = the group's r-th domain, column c = its c-th rail. Raises
        ValueError if a group is not rail-aligned (not the case for any placement made here)."""
        members = self.members(axes)
        g = members.shape[1]
        order = np.lexsort((self.rail[members], self.domain[members]), axis=-1)
        members = np.take_along_axis(members, order, axis=-1)
        rails = np.unique(self.rail[members[0]])
        x = len(rails)
        y = g // x
        grid = members.reshape(-1, y, x)
        dom, rail = self.domain[grid], self.rail[grid]
        if x * y != g or not ((dom == dom[:, :, :1]).all() and (rail == rail[:, :1, :]).all()):
            raise ValueError(f"the group over {axes} is not rail-aligned in this placement")
        return grid


def placement(n1: int, n2: int, n_p: int, n_d: int, nvs1: int, nvs2: int, nvs_p: int, nvs_d: int) -> Placement:
    """The search's placement of a configuration on HB domains (module docstring)."""
    deg = np.array([n1, n2, n_p, n_d], dtype=np.int64)
    box = np.array([nvs1, nvs2, nvs_p, nvs_d], dtype=np.int64)
    if (deg % box).any():
        raise SpecError(f"nvs = {tuple(box)}: each must divide its degree in {tuple(deg)}")
    i1, i2, ip, i_d = np.indices(tuple(deg), dtype=np.int64)
    a1, l1 = np.divmod(i1, nvs1)
    a2, l2 = np.divmod(i2, nvs2)
    a_d, l_d = np.divmod(i_d, nvs_d)
    a_p, q = np.divmod(ip, nvs_p)
    l_p = np.where(a_p % 2 == 0, q, nvs_p - 1 - q)
    A1, A2, A_d = n1 // nvs1, n2 // nvs2, n_d // nvs_d
    k = int(box.prod())
    local = l1 + nvs1 * (l2 + nvs2 * (l_d + nvs_d * l_p))
    domain = a1 + A1 * (a2 + A2 * (a_d + A_d * a_p))
    rank = domain * k + local
    n = rank.size
    ranks = np.arange(n, dtype=np.int64)
    return Placement(rank=rank, domain=ranks // k, rail=ranks % k, per_domain=k)
