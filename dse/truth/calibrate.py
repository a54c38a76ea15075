"""Calibration of the default profile's efficiencies to measured runs, by gradient.

A few physical parameters of the GPU as it runs (`FIELDS`: the achieved fraction of the tensor-core
peak for large matmuls, the GEMM dimension at which a matmul reaches half of it, the achieved
fraction of HBM bandwidth of memory-bound kernels) are fitted to measured iteration times by
minimising the mean squared log error of the very kernels the search runs,

    loss(theta) = sum_i w_i log(T_i(theta) / T_i,measured)^2 / sum_i w_i,

with `jax.grad` through `kernels.evaluate_candidates` and Adam (optax). Each parameter lives in its
physical range through a sigmoid, lo + (hi - lo) sigmoid(theta), so it never leaves it (an
efficiency is never above 1, i.e. never above peak). Network parameters are not fitted: runs with
tensor parallelism inside one node and no data parallelism cannot identify them, and they come
from the system preset (spec sheets).

Quality is the leave-one-model-out error: the runs of each model are predicted by a calibration
fitted without any of them (the held-out rows' w_i are 0, so every fold reuses one compiled loss). A
run whose source states a doubt about its configuration (the `doubt` column: a printed layout that
differs from the recipe's configuration at that release, say) has w_i = 0 in every fit and is left
out of every error; its predictions are reported apart.

The result is a config (`conf/calibration/NAME.yaml`) with the fitted values, the errors and their
provenance (data, command, date); the default profile applies it to every system (`apply_calibration`).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import yaml

from dse.truth.calibration import FIELDS, Calibration, band_key, band_parts, group_key, kind
from dse.truth.schema import has_doubt
from dse.runtime import float64
from dse.spec.checks import not_finite
from dse.spec.specs import SpecError, load_system

# --------------------------------------------------------------------------------------------
# fitting


def _to_physical(theta):
    """Physical values of `FIELDS` from logits (the last axis of `theta`, one logit a field)."""
    import jax.numpy as jnp

    out = {}
    for i, (k, (lo, hi)) in enumerate(FIELDS.items()):
        out[k] = lo + (hi - lo) * (1.0 / (1.0 + jnp.exp(-theta[..., i])))
    return out


def _to_theta(values: Mapping[str, float]) -> np.ndarray:
    theta = []
    for k, (lo, hi) in FIELDS.items():
        x = (float(values.get(k, (lo + hi) / 2)) - lo) / (hi - lo)
        x = min(max(x, 1e-3), 1 - 1e-3)
        theta.append(math.log(x / (1 - x)))
    return np.array(theta, dtype=np.float64)


#: The weight of the ridge that keeps each generation's and framework's effect near the pooled
#: values where their runs cannot pin them (a field the runs do not move, fp8_eff without FP8 runs, fp4_eff)
#: and shrinks the others toward them. Chosen with `PAIR_RIDGE` by the dense corpus's leave-one-source-out
#: error (`dse calibrate --csv corpus --steps 800 --fold-steps 300 --ridge W --pair-ridge F`, 133 runs,
#: 2026-11-29), at F = 100: 3e-5 7.0% mean, 1e-4 6.8%, 3e-4 6.8% (and the lowest leave-one-model-out, 8.1%),
#: 1e-3 7.1%, 3e-3 7.5%. With the pairs' ridge equal to the others' (F = 1; 130 runs, 2026-11-28): 1e-5 8.3%, 3e-4
#: 7.8%, 1e-3 7.8%, 3e-3 7.9%, 1e-2 8.4%; at 1e-5 the effects were free and traded fields against each
#: other (Hopper FSDP2: hbm_eff 0.38, fp8_eff 0.96).
RIDGE = 3e-4

#: The ridge on the effect of a generation and a framework measured together (a pair, `group:`), as a
#: multiple of `RIDGE`: a hierarchical prior, the interaction shrunk harder than the main effects, so that
#: a pair is predicted from its generation's and its framework's effects unless its own runs insist. With
#: the pairs' ridge equal to the others' (1), the fit split what one pair's runs taught between the pair
#: and its generation; holding out the only A100 Megatron source then predicted it 12% slow on average.
#: Leave-one-source-out error of the dense corpus at `RIDGE` 1e-3 (same command, --pair-ridge F): F = 1
#: 7.5% mean (Ampere Megatron 12.2%), 10 7.2% (6.3%), 100 7.1% (4.9%), 1000 7.0% (4.7%), 1e5 (no pair
#: effects) 7.0% (4.6%), in sample 6.3% at every F; at `RIDGE` 3e-4: F = 100 6.8% (2.2%), 1000 6.8% (2.2%).
#: The pairs add little the corpus measures; 100 leaves a pair of many runs of its own (a cluster a user
#: calibrates to) room to move.
PAIR_RIDGE = 100.0


def ridge_weights(effects: list[str], ridge: float, pair_ridge: float) -> np.ndarray:
    """The ridge's weight on each parameter row: 0 for the pooled row, `ridge` for a generation's or a
    framework's effect, `ridge` x `pair_ridge` for a pair's (`group:`)."""
    return np.array([0.0] + [ridge * (pair_ridge if e.startswith("group:") else 1.0) for e in effects])


def effect_names(generation: str, framework: str) -> tuple[str, ...]:
    """The effects a run of `generation` and `framework` takes besides the pooled values: its
    generation's, its framework's and its pair's (the names `Fitter.effects` lists)."""
    return (f"generation:{generation}", f"framework:{framework}", f"group:{group_key(generation, framework)}")


@dataclass
class _Batch:
    """The runs of one engine configuration (strategy, profile) as kernel inputs of N rows."""

    profile: Any
    strategy: str
    cands: Any
    workload: Any
    system: Any  # kernels.System of (N,) arrays, the fitted fields replaced at each step
    rows: np.ndarray  # positions of these rows in the measured vector
    design: np.ndarray  # (N, 1 + effects): 1 for the pooled values, 1 for the row's generation and framework
    arch: Any = None  # the runs' static block shape (`ModelSpec.arch`: MoE, latent attention, pipeline split)

    @property
    def moe(self) -> bool:
        return bool(self.arch is not None and self.arch.moe)


def run_groups(calls) -> tuple[list[str], list[str]]:
    """(the generation, the framework) of each run of `calls`, in their order."""
    gens, fws = [], []
    for call in calls:
        gen = load_system(call.system).generation
        gens += [gen] * len(call.rows)
        fws += [call.framework] * len(call.rows)
    return gens, fws


def _batches(calls, profile, effects: list[str]) -> list[_Batch]:
    from dse.explore.engine import to_candidates
    from dse.truth.measured import run_profile
    from kernels.params import System, Workload

    groups: dict[Any, list] = {}
    for k, call in enumerate(calls):  # the kernels are static in the profile, strategy and block shape
        groups.setdefault((run_profile(profile, call), call.strategy, call.model.arch), []).append(k)
    out = []
    offsets = np.cumsum([0] + [len(c.rows) for c in calls])
    for (prof, strategy, arch), ks in groups.items():
        tables = [calls[k].table for k in ks]
        table = {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}
        works, systems, designs = [], [], []
        for k in ks:
            n = len(calls[k].rows)
            w = calls[k].model.workload(calls[k].global_batch)
            works.append([np.full(n, x) for x in w])
            spec = load_system(calls[k].system, nvs_size=calls[k].nvs_size)
            systems.append([np.full(n, np.float64(x)) for x in spec.params()])
            row = np.zeros(1 + len(effects))
            row[0] = 1.0
            for name in effect_names(spec.generation, calls[k].framework):
                if name in effects:
                    row[1 + effects.index(name)] = 1.0
            designs.append(np.tile(row, (n, 1)))
        workload = Workload(*(np.concatenate([w[i] for w in works]) for i in range(len(Workload._fields))))
        system = System(*(np.concatenate([s[i] for s in systems]) for i in range(len(System._fields))))
        rows = np.concatenate([np.arange(offsets[k], offsets[k + 1]) for k in ks])
        out.append(_Batch(prof, strategy, to_candidates(table), workload, system, rows, np.concatenate(designs),
                          arch))
    return out


class Fitter:
    """The loss and gradient over a set of measured runs, compiled one engine batch at a time; fits
    with optax.Adam.

    The parameters are logits of `FIELDS`: a pooled row and one row per effect (a GPU generation,
    a framework, and each generation and framework measured together); a run's logits are the
    pooled row plus its generation's, its framework's and its pair's, so a generation and a
    framework never measured together are still predicted (additively), and the ridge `RIDGE` keeps
    an effect at 0 where no run moves it (`PAIR_RIDGE` times harder on a pair's).

    Each batch (`_batches`: one strategy, profile and block shape) is its own compiled program, and
    one more sums their squared log errors and gradients with the ridge: XLA compiles the batches
    one by one faster than one program holding them all (which, for the corpus, drew its
    slow-compile warning); each fit sends its weights to the device once.

    Mixture-of-experts runs move only `MOE_FIELDS` (the host's time of a dropless block): the
    efficiencies are the dense runs' to fit (the gradient of an MoE batch stops at them), and each
    kind's squared log errors are a mean over its own runs, so adding MoE runs to a fit leaves the
    dense runs' fit as it was (what an MoE run's errors hold that no mechanism models yet, GPT-OSS's
    say, never pulls a matmul efficiency)."""

    def __init__(self, calls, measured: np.ndarray, profile="default", effects: list[str] | None = None,
                 ridge: float = RIDGE, pair_ridge: float = PAIR_RIDGE):
        import jax
        import jax.numpy as jnp

        from kernels.iteration import evaluate_candidates

        self.measured = np.asarray(measured, dtype=np.float64)
        self.effects = list(effects or [])
        log_meas = np.log(self.measured)
        self._parts = []

        weights = jnp.asarray(ridge_weights(self.effects, ridge, pair_ridge))[:, None]  # a row's ridge, 0: pooled

        def combine(theta, values, grads):  # the batches' normalized sums and the ridge on the effects
            value = sum(values) + jnp.sum(weights * theta ** 2)
            grad = sum(grads) + 2.0 * weights * theta
            return value, grad

        self._combine = jax.jit(combine)
        batches = _batches(calls, profile, self.effects)
        self.design = np.zeros((len(self.measured), 1 + len(self.effects)))  # each run's pooled and effect rows
        for b in batches:
            self.design[b.rows] = b.design
        for b in batches:
            def times(theta, b=b):
                fields = _to_physical(jnp.asarray(b.design) @ theta)
                if b.moe:  # an MoE run moves its own fields only
                    fields = {k: v if k in MOE_FIELDS else jax.lax.stop_gradient(v) for k, v in fields.items()}
                s = b.system._replace(**fields)
                return evaluate_candidates(b.strategy, b.cands, b.workload, s, b.profile, moe=b.arch).iteration_time

            def squared(theta, weights, times=times, target=jnp.asarray(log_meas[b.rows])):
                r = jnp.log(times(theta)) - target
                return jnp.sum(weights * r * r)

            self._parts.append((b.rows, jax.jit(times), jax.jit(jax.value_and_grad(squared))))
        self._moe = [b.moe for b in batches]

    def _batch_weights(self, weights: np.ndarray) -> list:
        """Each batch's weights over the weights' sum over the runs of its kind, dense or MoE (the
        loss's normalization: a mean over each kind), once per fit."""
        import jax.numpy as jnp

        w = np.asarray(weights, dtype=np.float64)
        total = {moe: sum(float(w[rows].sum()) for (rows, _, _), m in zip(self._parts, self._moe) if m == moe)
                 for moe in (False, True)}
        return [jnp.asarray(w[rows] / total[moe] if total[moe] > 0 else np.zeros(len(rows)))
                for (rows, _, _), moe in zip(self._parts, self._moe)]

    def _step(self, theta, batch_weights: list):
        values, grads = zip(*(vg(theta, w) for (_, _, vg), w in zip(self._parts, batch_weights)))
        return self._combine(theta, values, grads)

    def loss_and_grad(self, theta, weights: np.ndarray) -> tuple[float, np.ndarray]:
        """sum_i w_i log(T_i / T_i,measured)^2 / sum_i w_i + the ridge on the effects (`ridge_weights`) and
        its gradient."""
        import jax.numpy as jnp

        return self._step(jnp.asarray(theta), self._batch_weights(weights))

    def start(self, values: Mapping[str, float] | None = None) -> np.ndarray:
        """Parameters with the pooled row at `values` (default: the middle of each range), no effects."""
        theta = np.zeros((1 + len(self.effects), len(FIELDS)))
        if values:
            theta[0] = _to_theta(values)
        return theta

    def informed(self, weights: np.ndarray, tags: list[str]) -> np.ndarray:
        """Which parameters (rows: pooled, then the effects; columns: `FIELDS`) the runs of nonzero
        weight move: an effect only through runs that take it, fp8_eff, fp4_eff and fp8_rowwise_eff only
        through runs of their precisions or recipe, host_moe_time only through dropless MoE runs
        (`RUN_FIELDS`, by each run's `run_tags`), the pooled row's too (a field only held-out runs move is
        not the fold's to know: it starts where every fit starts). The others have no gradient but the ridge's."""
        w = np.asarray(weights) > 0
        out = np.zeros((1 + len(self.effects), len(FIELDS)), dtype=bool)
        for j, field in enumerate(FIELDS):
            runs = w & moving(field, tags)
            out[:, j] = self.design[runs].sum(axis=0) > 0
        return out

    def predict(self, theta: np.ndarray) -> np.ndarray:
        out = np.empty(len(self.measured))
        for rows, times, _ in self._parts:
            out[rows] = np.asarray(times(theta))
        return out

    def fit(self, weights: np.ndarray | None = None, start: np.ndarray | None = None,
            steps: int = 400, learning_rate: float = 0.05) -> np.ndarray:
        """The fitted parameters (pooled row, then the effects), from `start` (default `self.start()`)."""
        import jax.numpy as jnp
        import optax

        w = self._batch_weights(np.ones(len(self.measured)) if weights is None else weights)
        theta = jnp.asarray(self.start() if start is None else start)
        opt = optax.adam(learning_rate)
        state = opt.init(theta)
        for _ in range(steps):
            _, g = self._step(theta, w)
            updates, state = opt.update(g, state)
            theta = optax.apply_updates(theta, updates)
        return np.asarray(theta)

    def values(self, theta: np.ndarray, generation: str = "", framework: str = "") -> dict[str, float]:
        """The physical values of a generation and framework (the pooled ones for "")."""
        row = np.array(theta[0])
        for name in effect_names(generation, framework):
            if name in self.effects:
                row = row + theta[1 + self.effects.index(name)]
        return {k: float(v) for k, v in _to_physical(row).items()}


#: The tag of a run whose MoE blocks route dropless (`Profile.moe_dropless`): the runs that move host_moe_time.
DROPLESS = "dropless"
#: The tag of an FP8 run scaled per row (`EngineCall.rowwise`, `Profile.fp8_rowwise`): the runs that
#: move fp8_rowwise_eff.
ROWWISE = "rowwise"
#: The calibrated fields only runs of these tags (`run_tags`: a precision, "rowwise" or "dropless") move.
RUN_FIELDS = {"fp8_eff": ("fp8", "mxfp8"), "fp4_eff": ("nvfp4",), "fp8_rowwise_eff": (ROWWISE,),
              "host_moe_time": (DROPLESS,)}
#: The tag of a mixture-of-experts run, and the only calibrated fields such a run moves (`Fitter`).
MOE = "moe"
MOE_FIELDS = ("host_moe_time",)


def moving(field: str, tags) -> np.ndarray:
    """Which runs (by their `run_tags`) move `field`: every run, or those of its `RUN_FIELDS` tags;
    an MoE run only `MOE_FIELDS`."""
    parts = [set(t.split("+")) for t in tags]
    out = np.array([field in MOE_FIELDS or MOE not in p for p in parts], dtype=bool)
    if field in RUN_FIELDS:
        out &= np.array([bool(p & set(RUN_FIELDS[field])) for p in parts], dtype=bool)
    return out


def fitted_fields(tags) -> list[str]:
    """The fields a fit identifies (`run_tags` of its runs, or their precisions): all of `FIELDS` but
    fp8_eff when no run is FP8 or MXFP8, fp4_eff when none is NVFP4, fp8_rowwise_eff when none is scaled
    per row and host_moe_time when none is a dropless MoE run (no run moves them)."""
    tags = list(tags)
    return [k for k in FIELDS if moving(k, tags).any()]


def check_estimable(labels: list[str], sources: list[str], tags: list[str]) -> None:
    """Refuse, in one SpecError line and before any fit, a calibration whose fits or errors cannot be
    estimated: leave-one-model-out needs runs of two models or more, and every fit (on all runs, and
    without each model's, and without each source's when there are several) at least as many runs
    as fitted fields; else a fit is underdetermined or an error NaN."""
    fields = fitted_fields(tags)
    need = len(fields)
    if tags and all(MOE in t.split("+") for t in tags):
        raise SpecError(f"the {len(tags)} valid runs are all mixture-of-experts runs, which move only "
                        f"{', '.join(MOE_FIELDS)}: the efficiencies are fitted on dense runs; add them "
                        "(--csv corpus)")
    models = dict.fromkeys(labels)
    if len(models) < 2:
        raise SpecError(f"the {len(labels)} valid run(s) are all of model {next(iter(models), '?')!r}; "
                        "the calibration's error is leave-one-model-out, which needs runs of at least 2 models")
    for tag, groups in (("model", labels), ("source", sources if len(set(sources)) > 1 else [])):
        for g in dict.fromkeys(groups):
            left = sum(x != g for x in groups)
            if left < need:
                raise SpecError(f"leaving out {tag} {g!r} leaves {left} run(s) to fit {need} fields "
                                f"({', '.join(fields)}); every held-out fit needs at least {need}: add runs")


def run_doubts(runs, calls) -> np.ndarray:
    """Which runs, in call order, carry a stated doubt (a nonblank `doubt` column: the printed layout
    differs from the recipe's configuration at that release, say): predicted like the others, but
    never fitted nor counted in a calibration's errors, which report them apart."""
    cells = _in_order(runs, calls, "doubt") if "doubt" in runs.rows.columns else [None] * sum(len(c.rows) for c in calls)
    return np.array(has_doubt(cells), dtype=bool)


def _kept(values, mask) -> list:
    """The `values` of the runs `mask` keeps."""
    return [v for v, k in zip(values, mask) if k]


def _in_order(runs, calls, column: str) -> list:
    """`column` of the valid runs in the order of the engine calls `calls` (`dse.truth.measured.plan`)."""
    by_row = {r: i for i, r in enumerate(runs.rows["row"].to_list())}
    values = runs.rows[column]
    return [values[by_row[r]] for c in calls for r in c.rows]


def _groups(runs, calls) -> tuple[list[str], list[str], list[str]]:
    """Each run's model, source (its `source_id`, else its file's name) and precision, in call order."""
    stem = Path(str(runs.source)).stem if "," not in str(runs.source) else "corpus"
    models = _in_order(runs, calls, "model")
    sources = ([str(s or stem) for s in _in_order(runs, calls, "source_id")] if "source_id" in runs.rows.columns
               else [stem] * len(models))
    return models, sources, _in_order(runs, calls, "precision")


def run_tags(precisions: list[str], calls) -> list[str]:
    """Each run's tags, in call order: its precision, "+rowwise" for an FP8 run scaled per row, "+moe"
    for a mixture of experts and "+dropless" for one routed dropless (`RUN_FIELDS`, `MOE_FIELDS`:
    which fitted fields it moves)."""
    moe = [bool(c.model.arch.moe) for c in calls for _ in c.rows]
    host = [bool(c.dropless and c.model.arch.moe) for c in calls for _ in c.rows]
    rowwise = [bool(c.rowwise) for c in calls for _ in c.rows]
    return [p + (f"+{ROWWISE}" if r else "") + (f"+{MOE}" if m else "") + (f"+{DROPLESS}" if h else "")
            for p, r, m, h in zip(precisions, rowwise, moe, host)]


def check_runs(runs) -> None:
    """The valid measured runs (`MeasuredRuns`) a calibration can be estimated from
    (`check_estimable`), checked before any fit: one SpecError line otherwise."""
    from dse.truth.measured import plan

    if runs.rows.height == 0:
        raise SpecError(f"csv = {str(runs.source)!r}: no valid measured run to fit")
    calls = plan(runs)
    labels, sources, precisions = _groups(runs, calls)
    fit = ~run_doubts(runs, calls)
    if not fit.any():
        raise SpecError(f"csv = {str(runs.source)!r}: every valid run has a stated doubt (column doubt); none to fit")
    try:
        check_estimable(*(_kept(x, fit) for x in (labels, sources, run_tags(precisions, calls))))
    except SpecError as err:
        raise SpecError(f"csv = {str(runs.source)!r}: {err}") from None


def errors(pred: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    e = np.abs(np.asarray(pred) / np.asarray(measured) - 1.0)
    return {"mean": float(np.mean(e)), "max": float(np.max(e))}


@dataclass
class Result:
    calibration: Calibration
    labels: list[str]  # each run's model
    sources: list[str]  # each run's source (source_id)
    keys: list[str]  # each run's generation/precision/framework
    measured: np.ndarray
    fitted: np.ndarray  # in-sample predictions
    held_out: np.ndarray  # leave-one-model-out predictions
    held_out_source: np.ndarray  # leave-one-source-out predictions
    folds: dict[str, np.ndarray]  # "model:label" or "source:id" -> parameters fitted without it
    doubt: np.ndarray  # the runs with a stated doubt (`run_doubts`): not fitted, not in the errors


def _held_out(fitter: Fitter, theta: np.ndarray, labels: list[str], tags: list[str], steps: int, tag: str,
              folds: dict[str, np.ndarray], fit: np.ndarray | None = None) -> np.ndarray:
    """Predictions of each group of runs (by `labels`) from a fit without that group. Each fit starts
    from `theta` (the fit on every run) with the effects the remaining runs cannot move set to 0,
    their value without those runs (`Fitter.informed`): an effect only the held-out runs pinned (the
    pair of a generation and a framework one source alone measured, say) must not start from what it
    learnt from them. (Adam, being scale-free, also walks such an effect back under the ridge alone, at
    its learning rate a step; the reset does not depend on that, nor on `steps`.) `fit`: which runs any fit
    may take (False: a run with a stated doubt, `run_doubts`; None: every run), predicted all the same."""
    fit = np.ones(len(labels), dtype=bool) if fit is None else np.asarray(fit, dtype=bool)
    held = np.empty(len(labels))
    for label in dict.fromkeys(labels):
        out = np.array([lab == label for lab in labels])
        weights = (~out & fit).astype(np.float64)
        start = np.where(fitter.informed(weights, tags), theta, 0.0)
        fold = fitter.fit(weights=weights, start=start, steps=steps)
        folds[f"{tag}:{label}"] = fold
        held[out] = fitter.predict(fold)[out]
    return held


def _by_kind(moe: list[bool], fitted: np.ndarray, held_src: np.ndarray, held: np.ndarray,
             measured: np.ndarray) -> dict[str, dict]:
    """The errors of the dense runs and of the MoE runs apart: runs, in sample, leave-one-source-out,
    leave-one-model-out (mean and max |error|)."""
    out = {}
    for m in (False, True):
        mask = np.array(moe) == m
        out[kind(m)] = {"runs": int(mask.sum()),
                        **{name: {k: round(v, 6) for k, v in errors(p[mask], measured[mask]).items()}
                           for name, p in (("in_sample", fitted), ("leave_one_source_out", held_src),
                                           ("leave_one_model_out", held))}}
    return out


def _grouped(labels: list[str], held: np.ndarray, measured: np.ndarray) -> dict[str, dict]:
    """The held-out errors of the runs of each label (sorted): mean, max and runs."""
    out = {}
    for label in sorted(set(labels)):
        mask = np.array([x == label for x in labels])
        out[label] = {**errors(held[mask], measured[mask]), "runs": int(mask.sum())}
    return out


def _bands(held: np.ndarray, measured: np.ndarray, keys: list[str], sources: list[str], n_sources: int) -> dict:
    """The held-out errors of each generation/precision/framework: mean, max, runs, sources and which
    held-out error they are (a fit of one source holds out models only)."""
    kind = "leave-one-source-out" if n_sources > 1 else "leave-one-model-out"
    return {key: {"mean": round(e["mean"], 6), "max": round(e["max"], 6), "runs": e["runs"],
                  "sources": len({s for s, k in zip(sources, keys) if k == key}), "kind": kind}
            for key, e in _grouped(keys, held, measured).items()}


def by_axis(keys: list[str], held: np.ndarray, measured: np.ndarray) -> dict[str, dict[str, dict[str, dict]]]:
    """The held-out errors of each kind's runs (dense, MoE) by GPU generation and by framework, from
    their band keys (`band_parts`): {kind: {"generation": {name: {"mean", "max", "runs"}}, "framework":
    {...}}}, the coarser view beside the bands."""
    parts = [band_parts(k) for k in keys]
    out: dict[str, dict[str, dict[str, dict]]] = {}
    for moe in sorted({p[3] for p in parts}):
        rows = np.array([p[3] == moe for p in parts])
        out[kind(moe)] = {axis: _grouped([p[at] for p, r in zip(parts, rows) if r], held[rows], measured[rows])
                          for axis, at in (("generation", 0), ("framework", 2))}
    return out


@float64
def calibrate(runs=None, name: str = "calibration", profile="default", steps: int = 400,
              command: str = "", fold_steps: int | None = None, ridge: float = RIDGE,
              pair_ridge: float = PAIR_RIDGE) -> Result:
    """Fit `FIELDS` to the measured runs (a path, a list of paths, `MeasuredRuns` or None for the
    packaged CSV): the pooled values and an effect of each GPU generation and framework present,
    with leave-one-source-out folds (the errors of each generation, precision and framework: the
    bands answers carry) and leave-one-model-out folds; rows with errors are skipped (see
    `runs.errors`). Each held-out fit starts from the fit on every run and takes `fold_steps` Adam
    steps (default: `steps`); `ridge` weighs the effects' ridge (`RIDGE`), `pair_ridge` times more on a
    pair's (`PAIR_RIDGE`). A run with a stated doubt (`run_doubts`) is in no fit and in none of the
    calibration's errors: its predictions are reported apart (provenance "doubtful")."""
    from dse.truth.measured import MeasuredRuns, plan, read_runs

    fold_steps = steps if fold_steps is None else fold_steps
    if not isinstance(runs, MeasuredRuns):
        runs = read_runs(runs)
    check_runs(runs)
    calls = plan(runs)
    measured = np.array(_in_order(runs, calls, "measured_iter_s"))
    labels, sources, precisions = _groups(runs, calls)
    gens, fws = run_groups(calls)
    moe = [bool(c.model.arch.moe) for c in calls for _ in c.rows]
    keys = [band_key(g or "unknown", p, f, m) for g, p, f, m in zip(gens, precisions, fws, moe)]
    effects = ([f"generation:{g}" for g in sorted(set(gens)) if g] + [f"framework:{f}" for f in sorted(set(fws))]
               + [f"group:{group_key(g, f)}" for g, f in sorted(set(zip(gens, fws))) if g]
               if len(set(gens)) > 1 or len(set(fws)) > 1 else [])  # the names of `effect_names`
    fitter = Fitter(calls, measured, profile, effects, ridge=ridge, pair_ridge=pair_ridge)
    doubt = run_doubts(runs, calls)
    ok = ~doubt  # the runs fitted and counted; those with a stated doubt are predicted and reported apart
    systems, kept_gens, kept_fws = (sorted(set(_kept(x, ok))) for x in (_in_order(runs, calls, "system"), gens, fws))
    theta = fitter.fit(weights=ok.astype(np.float64), steps=steps)
    fitted = fitter.predict(theta)
    folds: dict[str, np.ndarray] = {}
    tags = run_tags(precisions, calls)
    held = _held_out(fitter, theta, labels, tags, fold_steps, "model", folds, ok)
    n_sources = len(set(_kept(sources, ok)))
    held_src = _held_out(fitter, theta, sources, tags, fold_steps, "source", folds, ok) if n_sources > 1 else held
    # a field no run moves is not identified and not written: fp8_eff without an FP8 run, fp4_eff, host_moe_time
    unfitted = set(FIELDS) - set(fitted_fields(_kept(tags, ok)))

    def identified(values: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in values.items() if k not in unfitted}

    groups = {}
    if effects:
        for g in (g for g in kept_gens if g):
            for f in kept_fws:
                groups[group_key(g, f)] = identified(fitter.values(theta, g, f))
    m_ok = measured[ok]
    doubtful = ({"doubtful": {"runs": int(doubt.sum()),
                              **{n: {k: round(v, 6) for k, v in errors(p[doubt], measured[doubt]).items()}
                                 for n, p in (("predicted", fitted), ("leave_one_source_out", held_src))}}}
                if doubt.any() else {})
    cal = Calibration(
        name=name,
        values=identified(fitter.values(theta)),
        in_sample=errors(fitted[ok], m_ok),
        leave_one_model_out=errors(held[ok], m_ok),
        provenance={"data": ", ".join(Path(p).name for p in str(runs.source).split(", ")), "runs": int(ok.sum()),
                    **doubtful, "gpus": ", ".join(systems),
                    "generations": [g for g in kept_gens if g], "frameworks": kept_fws,
                    "sources": sorted(set(_kept(sources, ok))), "kinds": sorted({kind(m) for m in _kept(moe, ok)}),
                    **({"by_kind": _by_kind(_kept(moe, ok), fitted[ok], held_src[ok], held[ok], m_ok)}
                       if len(set(_kept(moe, ok))) > 1 else {}),
                    "command": command or "dse calibrate", "date": _dt.date.today().isoformat(),
                    "method": f"optax.adam(0.05), {steps} steps ({fold_steps} from that fit for each held-out "
                              f"fold), mean squared log error"
                              + (f" with effects of {', '.join(effects)} (ridge {ridge:g}, "
                                 f"{pair_ridge:g} times that on a pair's)" if effects else "")
                              + f", leave-one-source-out over {n_sources} sources and leave-one-model-out "
                                f"over {len(set(_kept(labels, ok)))} models"
                              + (f"; {int(doubt.sum())} runs with a stated doubt (column doubt) neither fitted "
                                 "nor counted" if doubt.any() else "")},
        groups=groups,
        bands=_bands(held_src[ok], m_ok, _kept(keys, ok), _kept(sources, ok), n_sources),  # every fit's (band_for)
        leave_one_source_out=errors(held_src[ok], m_ok) if n_sources > 1 else {},
    )
    return Result(cal, labels, sources, keys, measured, fitted, held, held_src, folds, doubt)


def write_calibration(cal: Calibration, path: str | Path | None = None) -> Path:
    """Write `cal` as conf/calibration/NAME.yaml (or `path`), atomically."""
    from dse.truth.calibration import CALIBRATION_DIR

    path = Path(path) if path else CALIBRATION_DIR / f"{cal.name}.yaml"
    body = {
        "values": {k: round(v, 6) for k, v in cal.values.items()},
        "in_sample": {k: round(v, 6) for k, v in cal.in_sample.items()},
        "leave_one_model_out": {k: round(v, 6) for k, v in cal.leave_one_model_out.items()},
        **({"leave_one_source_out": {k: round(v, 6) for k, v in cal.leave_one_source_out.items()}}
           if cal.leave_one_source_out else {}),
        **({"groups": {g: {k: round(v, 6) for k, v in vals.items()} for g, vals in cal.groups.items()}}
           if cal.groups else {}),
        **({"bands": cal.bands} if cal.bands else {}),
        "provenance": cal.provenance,
    }
    bad = not_finite({k: v for k, v in body.items() if k != "provenance"})  # the groups and bands too
    if bad is not None:
        raise SpecError(f"calibration {cal.name!r}: {bad[0]} = {bad[1]} is not a finite number; not written "
                        "(a calibration is never stored as NaN)")
    path.parent.mkdir(parents=True, exist_ok=True)
    head = ("# Efficiencies of the default profile, fitted to measured training runs by `dse calibrate`\n"
            "# (jax.grad through the search kernels, optax). Fields: see dse/truth/calibrate.py FIELDS.\n")
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(head + yaml.safe_dump(body, sort_keys=False))
    tmp.replace(path)
    return path
