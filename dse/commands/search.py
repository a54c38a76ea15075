"""`dse search`: the fastest configurations of a study, printed per system, NVS size and GPU count.

    dse search model=gpt3_1t system=b200 system.nvs_size=8 strategy=tp1d n_gpus=4096
    dse search model=vit_era5 n_gpus=pow2:1024:16384 search.top_k=3
    dse search system=a100,b200 system.nvs_size=[8,64] strategy=tp2d search.top_k=1
    dse search search.grid.hbm_capacity=[96,192,384] search.grid.hbm_bandwidth=[4000,8000] search.top_k=1

The question is the one `dse` with the same overrides answers (conf/config.yaml: every strategy,
4096 GPUs, the system preset's NVS size unless system.nvs_size is set; `dse.interface.overrides`), without
writing a dataset. Several systems (system=a100,b200) are one array axis of the same kernel calls;
they must share an NVS size unless system.nvs_size is given.
"""

from __future__ import annotations

import argparse
import sys

import polars as pl

from dse.interface.overrides import reject_retired_flags, resolve_each
from dse.explore.search import check_strategies, evaluations_line, run_search
from dse.spec.checks import idle_switches
from dse.spec.specs import SpecError
from dse.interface.answer import band_note, fastest, grid_columns, shared_rows
from dse.interface.table import render_frame, with_context_columns, with_mechanisms

SHOW = ["n1", "n2", "n_p", "n_d", "microbatch", "nvs1", "nvs2", "nvs_p", "nvs_d", "n_b",
        "iteration_time", "throughput", "memory", "training_days"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dse search", description="search the design space; print the fastest configurations",
                                epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides, as for dse (model=, system=, system.nvs_size=, strategy=, n_gpus=, "
                        "profile=, network=, global_batch=, search.top_k=, search.grid.FIELD=[...], ...)")
    return p


def question(overrides) -> dict:
    """`run_search` keywords (but the strategy) and the strategies of the overrides' study."""
    each = resolve_each(overrides, "system")
    job = each[0].job
    sizes = [r.job.nvs_sizes for r in each]
    if any(s != sizes[0] for s in sizes):
        names = ", ".join(f"{r.job.system.name} {r.job.nvs_sizes[0]}" for r in each)
        raise SpecError(f"system.nvs_size: the systems have different NVS sizes ({names}); give system.nvs_size=N "
                        "or a list")
    return dict(model=job.model, system=[r.job.system for r in each], nvs_size=sizes[0], n_gpus=job.n_gpus,
                jobs={r.job.system.name: r.job for r in each},
                profile=job.profile, global_batch=job.global_batch, top_k=job.top_k, grid=job.grid,
                network=job.network, chunk=job.chunk, progress=job.progress and sys.stderr.isatty(),
                keep=job.keep, objectives=list(job.objectives), economics=job.economics,
                max_candidates=job.max_candidates,
                strategies=job.strategies, profile_name=job.profile_name)


def least_keys(keys) -> list[str]:
    """The group keys a row of the search carries (its system by name, not by grid id)."""
    return [k for k in keys if k != "system_id"]


def smallest_memory(q: dict, strategy: str, keys) -> dict[tuple, tuple[float, float]]:
    """Group -> (the least memory per GPU of any candidate, the group's HBM capacity), by a second
    pass over the search that keeps only each group's minimum (asked only where nothing fits)."""
    keys = least_keys(keys)
    best: dict[tuple, tuple[float, float]] = {}
    systems = q["system"] if isinstance(q["system"], (list, tuple)) else [q["system"]]
    hbm = {s.name: s.hbm_capacity for s in systems if hasattr(s, "name")}  # no grid: the system's own

    def keep(rows: pl.DataFrame) -> None:
        have = [k for k in keys if k in rows.columns]
        if have != keys:
            return
        cap = [pl.col("hbm_capacity").first()] if "hbm_capacity" in rows.columns and "hbm_capacity" not in keys else []
        g = rows.group_by(keys).agg(pl.col("memory").min(), *cap)
        for r in g.iter_rows(named=True):
            k = tuple(r[c] for c in keys)
            capacity = r.get("hbm_capacity", hbm.get(r.get("system")))
            if k not in best or r["memory"] < best[k][0]:
                best[k] = (r["memory"], capacity)

    run_search(strategy=strategy, **{**q, "top_k": 1, "progress": False}, keep_rows=keep)
    return best


def main(argv=None) -> int:
    argv = list(argv or [])
    reject_retired_flags(argv)
    args = parser().parse_args(argv)
    q = question(args.overrides)
    strategies, profile_name, jobs = q.pop("strategies"), q.pop("profile_name"), q.pop("jobs")
    plan_keys = ("model", "system", "nvs_size", "n_gpus", "profile", "global_batch", "top_k", "grid", "network", "max_candidates")
    # every strategy's inputs checked before any is searched; one that refuses is said and left out
    strategies, refused = check_strategies(strategies, **{k: q[k] for k in plan_keys})
    for note in refused + idle_switches(q["profile"], profile_name, q["model"]):
        print(note)
    tops = []
    for strategy in strategies:
        res = run_search(strategy=strategy, **q)
        tops.append(res.top.with_columns(pl.lit(strategy).alias("strategy")))
        st = res.stats
        print(f"{q['model'].name} {strategy} ({profile_name}): {evaluations_line(st)}, "
              f"compile {st['compile_s']:.2f} s")
        for note in st["notes"]:
            if not note.startswith("no candidate"):  # those are said at their group below
                print(f"  note: {note}")
        keys = ["system"] + [c for c in res.counts.columns if c not in ("system_id", "system", "nvs_size", "n_gpus",
                                                                         "candidates", "feasible", "infeasible")]
        keys += ["nvs_size", "n_gpus"]
        counts = res.counts
        least = None  # nothing fits somewhere: the least memory a candidate needs there, by group
        if ((counts["candidates"] > 0) & (counts["feasible"] == 0)).any():
            least = smallest_memory(q, strategy, keys)
        for group in counts.select(keys).unique(maintain_order=True).iter_rows(named=True):
            sel = pl.all_horizontal([pl.col(k) == v for k, v in group.items()])
            top = res.top.with_columns(pl.lit(strategy).alias("strategy")).filter(sel)
            shared = top.filter(shared_rows(top, strategies))
            top = top.filter(~shared_rows(top, strategies)).with_columns(pl.int_range(1, pl.len() + 1).alias("rank"))
            c = counts.filter(sel).row(0, named=True)
            label = ", ".join(f"{k}={v}" for k, v in group.items())
            head = f"{label}: {c['candidates']:,} candidates, {c['feasible']:,} fit"
            if len(shared) and not top.is_empty():  # the rows left out are tp1d's: say so, as `dse` does
                head += f"; {len(shared)} of the {len(shared) + len(top)} fastest have n2 = 1, which are tp1d's, not shown"
            if c["candidates"] == 0:
                print(f"{label}: no configuration exists: {st['empty'][(group['nvs_size'], group['n_gpus'])]}\n")
                continue
            if top.is_empty() and len(shared):
                print(head + "; its fastest configurations have n2 = 1, which are tp1d's\n")
                continue
            if top.is_empty():
                need = (least or {}).get(tuple(group.get(k) for k in least_keys(keys)))
                why = (f": the smallest configuration needs {need[0]:.4g} GB per GPU" if need else " in HBM")
                why += f", the HBM holds {need[1]:g} GB" if need and need[1] is not None else ""
                print(head + "; nothing fits" + why + "\n")
                continue
            cols = ["rank"] + [k for k in SHOW if k != "n_b" or strategy == "summa"]
            top, cols = with_mechanisms(top, cols)
            top, cols = with_context_columns(top, cols, strategy)  # tp1d: n2 is cp, shown when used
            print(render_frame(top, cols, formats={"iteration_time": ".5g", "throughput": ".5g",
                                                   "memory": ".4g", "training_days": ".3g"}, title=head))
            print()
    line = best_line(pl.concat(tops, how="diagonal_relaxed") if tops else pl.DataFrame(), strategies, jobs, q["grid"])
    if line:
        print(line)
    return 0


def best_line(top: pl.DataFrame, strategies, jobs, grid) -> str:
    """The whole question's fastest configuration over systems, NVS sizes, hardware points, GPU
    counts and strategies, every key named, its error band (`band_note`: that of its system's
    generation and its precision under its system's profile, as `dse` prints it), and the `dse eval`
    command that gives its time."""
    from dse.interface.reproduce import eval_command, plan

    r = fastest(top, strategies)
    if r is None:
        return ""
    grid_cols = tuple(grid_columns(grid))
    hw = "".join(f" {c}={r[c]:g}" for c in grid_cols)
    name = r.get("system") or next(iter(jobs))
    return (f"best: {plan(r, r['strategy'])} on {r['n_gpus']} GPUs of {name} "
            f"(NVS {r['nvs_size']}){hw}: {r['iteration_time']:.4g} s per iteration, {r['throughput']:.4g} samples/s"
            f"{band_note(jobs[name], r)}\n"
            f"reproduce: {eval_command(jobs[name], r, r['strategy'], grid_cols)}")
