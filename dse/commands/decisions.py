"""What `dse sensitivity`, `dse codesign` and `dse whatif` share: the question of the overrides and
the configuration it is about (given by its keys, or the search's optimum)."""

from __future__ import annotations

from dse.interface.overrides import Resolved, parse, resolve
from dse.decisions.sensitivity import POINT_KEYS, Point, resolve_point
from dse.spec.checks import TP1D_ALIASES
from dse.spec.specs import SpecError


def resolved(overrides, group: str) -> Resolved:
    """The overrides composed with the configuration's keys (`conf/point/`) and `group`'s config."""
    return resolve(overrides, [f"+{group}=default"], point=True)


def given_keys(overrides) -> list[str]:
    """The keys of the configuration (n1=, n_p=, cp=, ...) that the overrides set, as written."""
    return [o.input_line for o in parse(overrides) if o.key_or_group in (*POINT_KEYS, *TP1D_ALIASES)]


def given_point(overrides) -> bool:
    """Whether the overrides set any key of the configuration (n1=, n_p=, cp=, ...)."""
    return bool(given_keys(overrides))


def refuse_point(overrides, command: str) -> None:
    """One SpecError line when a command that searches the configuration itself is given one."""
    keys = given_keys(overrides)
    if keys:
        raise SpecError(f"{keys[0]}: {command} searches the parallel configuration again at every hardware point, "
                        "so it takes no configuration keys (n1, n_p, n_d, ...); leave them out, or ask "
                        "dse sensitivity or dse eval about one configuration")


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
        p = resolve_point(strategy=res.strategy(), **q, **res.point())
        if not p.row["feasible"]:
            raise SpecError(f"the configuration given does not fit: it needs {p.row['memory']:.4g} GB per GPU and the "
                            f"HBM of {p.system.name} holds {p.system.hbm_capacity:g} GB; give one that fits "
                            "(dse eval shows its memory breakdown), or leave the configuration keys out to take "
                            "the search's optimum")
        return p
    return resolve_point(strategy=res.job.strategies, **q)


def describe_point(p: Point) -> str:
    """One line: the strategy, every key of the configuration, its time and memory."""
    from dse.interface.reproduce import plan

    r = p.row
    days = f", {r['training_days']:.3g} training days" if r.get("training_days") else ""
    return (f"{plan(r, p.strategy)} on {r['n_gpus']} GPUs: "
            f"{r['iteration_time']:.5g} s per iteration, memory {r['memory']:.4g} of {p.system.hbm_capacity:g} GB{days}")


def reproduce_line(res: Resolved, p: Point) -> str:
    """`reproduce: dse eval ...`: the command that evaluates the configuration `p` alone."""
    from dse.interface.reproduce import eval_command

    return "reproduce: " + eval_command(res.job, {**p.row, "nvs_size": p.system.nvs_size}, p.strategy)
