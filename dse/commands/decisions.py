"""What `dse sensitivity`, `dse codesign` and `dse whatif` share: the question of the overrides and
the configuration it is about (given by its keys, or the search's optimum)."""

from __future__ import annotations

from dse.interface.overrides import Resolved, parse, resolve
from dse.decisions.sensitivity import POINT_KEYS, Point, resolve_point
from dse.spec.specs import SpecError


def resolved(overrides, group: str) -> Resolved:
    """The overrides composed with the configuration's keys (`conf/point/`) and `group`'s config."""
    return resolve(overrides, [f"+{group}=default"], point=True)


def given_point(overrides) -> bool:
    """Whether the overrides set any key of the configuration (n1=, n_p=, cp=, ...)."""
    return any(o.key_or_group in (*POINT_KEYS, "cp") for o in parse(overrides))


def question(res: Resolved) -> dict:
    """The keywords of `dse.decisions.sensitivity.resolve_point` but the configuration: one NVS size, one GPU count."""
    job = res.job
    if len(job.n_gpus) != 1:
        raise SpecError(f"n_gpus = {job.n_gpus}: give one GPU count")
    return dict(model=job.model, system=res.system(), profile=job.profile, global_batch=job.global_batch,
                network=job.network, n_gpus=job.n_gpus[0])


def point_of(overrides, res: Resolved) -> Point:
    """The configuration the command is about: the overrides' keys (one strategy), or the
    search's optimum over the strategies asked."""
    q = question(res)
    if given_point(overrides):
        q.pop("n_gpus")
        return resolve_point(strategy=res.strategy(), **q, **res.point())
    return resolve_point(strategy=res.job.strategies, **q)


def describe_point(p: Point) -> str:
    """One line: the strategy, the configuration and its time."""
    r = p.row
    second = "cp" if p.strategy == "tp1d" else "n2"
    cfg = (f"{p.strategy} n1={r['n1']} {second}={r['n2']} n_p={r['n_p']} n_d={r['n_d']} microbatch={r['microbatch']}"
           f" nvs1={r['nvs1']} nvs2={r['nvs2']} nvs_p={r['nvs_p']} nvs_d={r['nvs_d']}"
           + (f" n_b={r['n_b']}" if p.strategy == "summa" else "")
           + (f" interleave={r['interleave']}" if r["interleave"] != 1 else "")
           + f" zero={r['zero']} on {r['n_gpus']} GPUs")
    days = f", {r['training_days']:.3g} training days" if r.get("training_days") else ""
    return f"{cfg}: {r['iteration_time']:.5g} s per iteration, memory {r['memory']:.4g} GB{days}"
