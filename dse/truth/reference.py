"""The stored results of the seed-001 reference code (B200, every strategy, model and NVS size).

Each JSON file holds, for every GPU count, the reference's top-10 configurations with their
throughput, memory and full time/memory breakdown (`stats`). This module turns them into candidate
tables and expected values, for `dse validate lbnl` and the parity tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: reference stats field -> our metric column
STATS = {
    "t": "iteration_time",
    "flops_per_gpu": "flops_per_gpu",
    "mem": "memory",
    "t_comp": "t_compute",
    "t_mem": "t_memory",
    "t_tp_comm": "t_tp_comm",
    "t_dp_comm": "t_dp_comm",
    "t_pp_comm": "t_pp_comm",
    "t_bubble": "t_bubble",
    "wts_mem": "mem_weights",
    "wts_grad_mem": "mem_grads",
    "wts_optimizer_states_mem": "mem_optimizer",
    "acts_mem": "mem_activations",
}
#: reference fraction field -> the time component it divides by the iteration time
FRACTIONS = {
    "comp_frac": "t_compute",
    "mem_frac": "t_memory",
    "tp_comm_frac": "t_tp_comm",
    "dp_comm_frac": "t_dp_comm",
    "pp_comm_frac": "t_pp_comm",
    "bubble_frac": "t_bubble",
}


def default_dir() -> Path:
    """tests/reference/lbnl in a checkout, else ../shared/reference/lbnl beside it."""
    root = Path(__file__).resolve().parents[2]
    for p in (root / "tests" / "reference" / "lbnl", root.parent / "shared" / "reference" / "lbnl"):
        if p.is_dir():
            return p
    return root / "tests" / "reference" / "lbnl"


@dataclass
class ReferenceFile:
    path: Path
    strategy: str
    model: str
    system: str
    nvs: int
    global_batch: int
    n_gpus: list[int]  # every GPU count searched
    entries: list[dict]  # flattened top lists, each with n_gpus, rank, candidate columns, expected values

    @property
    def name(self) -> str:
        return self.path.name


def candidate_of(strategy: str, cfg: dict, stats: dict) -> dict[str, int]:
    """The candidate columns of one stored configuration."""
    if strategy == "tp1d":
        return dict(n1=cfg["tp"], n2=1, n_p=cfg["pp"], n_d=cfg["dp"], microbatch=cfg["mbs"],
                    nvs1=stats["nv_tp"], nvs2=1, nvs_p=stats["nv_pp"], nvs_d=stats["nv_dp"], n_b=1, interleave=1,
                    recompute=1, seq_par=1, precision=0, zero=1, ep=1)
    return dict(n1=cfg["tp1"], n2=cfg["tp2"], n_p=cfg["pp"], n_d=cfg["dp"], microbatch=cfg["mbs"],
                nvs1=stats["nv_tp1"], nvs2=stats["nv_tp2"], nvs_p=stats["nv_pp"], nvs_d=stats["nv_dp"],
                n_b=cfg.get("nb", 1), interleave=1, recompute=1, seq_par=1, precision=0, zero=1, ep=1)


def expected_of(entry: dict) -> dict[str, float]:
    """Expected metric values of one stored configuration, keyed by our column names."""
    s = entry["stats"]
    out = {"throughput": entry["throughput"]}
    out.update({ours: float(s[theirs]) for theirs, ours in STATS.items()})
    out.update({f"{k}": float(s[k]) for k in FRACTIONS})
    return out


def load(path: str | Path) -> ReferenceFile:
    path = Path(path)
    d = json.loads(path.read_text())
    entries = []
    for g in d["by_n_gpus"]:
        for rank, e in enumerate(g["top"], start=1):
            entries.append({"n_gpus": g["n_gpus"], "rank": rank, **candidate_of(d["strategy"], e["config"], e["stats"]),
                            "expected": expected_of(e)})
    return ReferenceFile(path=path, strategy=d["strategy"], model=d["model"].lower(), system=d["gpu"].lower(),
                         nvs=int(d["nvs"]), global_batch=int(d["global_batch"]),
                         n_gpus=[g["n_gpus"] for g in d["by_n_gpus"]], entries=entries)


def load_all(directory: str | Path | None = None) -> list[ReferenceFile]:
    directory = Path(directory) if directory else default_dir()
    return [load(p) for p in sorted(directory.glob("*.json"))]


def table_of(ref: ReferenceFile) -> dict[str, np.ndarray]:
    cols = ("n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p", "nvs_d", "n_b", "interleave",
            "recompute", "seq_par", "precision", "zero", "ep")
    return {c: np.array([e[c] for e in ref.entries], dtype=np.int64) for c in cols}


def relative_error(ours: float, theirs: float) -> float:
    """|ours - theirs| / |theirs|; for theirs == 0, |ours| (so an exact zero is required)."""
    return abs(ours - theirs) / abs(theirs) if theirs != 0 else abs(ours)
