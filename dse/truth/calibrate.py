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
fitted without any of them (the weights w_i of the held-out rows are 0, so every fold reuses one
compiled loss).

The result is a config (`conf/calibration/NAME.yaml`) with the fitted values, the errors and their
provenance (data, command, date); the default profile applies it to every system
(`apply_calibration`).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import yaml

from dse.truth.calibration import FIELDS, Calibration
from dse.runtime import float64
from dse.spec.specs import SpecError, load_system

# --------------------------------------------------------------------------------------------
# fitting


def _to_physical(theta):
    import jax.numpy as jnp

    out = {}
    for i, (k, (lo, hi)) in enumerate(FIELDS.items()):
        out[k] = lo + (hi - lo) * (1.0 / (1.0 + jnp.exp(-theta[i])))
    return out


def _to_theta(values: Mapping[str, float]) -> np.ndarray:
    theta = []
    for k, (lo, hi) in FIELDS.items():
        x = (float(values[k]) - lo) / (hi - lo)
        x = min(max(x, 1e-3), 1 - 1e-3)
        theta.append(math.log(x / (1 - x)))
    return np.array(theta, dtype=np.float64)


@dataclass
class _Batch:
    """The runs of one engine configuration (strategy, profile) as kernel inputs of N rows."""

    profile: Any
    strategy: str
    cands: Any
    workload: Any
    system: Any  # kernels.System of (N,) arrays, the fitted fields replaced at each step
    rows: np.ndarray  # positions of these rows in the measured vector


def _batches(calls, profile) -> list[_Batch]:
    from dse.explore.engine import to_candidates
    from dse.truth.measured import run_profile
    from kernels.params import System, Workload

    groups: dict[Any, list] = {}
    for k, call in enumerate(calls):
        groups.setdefault((run_profile(profile, call), call.strategy), []).append(k)
    out = []
    offsets = np.cumsum([0] + [len(c.rows) for c in calls])
    for (prof, strategy), ks in groups.items():
        tables = [calls[k].table for k in ks]
        table = {c: np.concatenate([t[c] for t in tables]) for c in tables[0]}
        works = []
        systems = []
        for k in ks:
            n = len(calls[k].rows)
            w = calls[k].model.workload(calls[k].global_batch)
            works.append([np.full(n, x) for x in w])
            s = load_system(calls[k].system, nvs_size=calls[k].nvs_size).params()
            systems.append([np.full(n, np.float64(x)) for x in s])
        workload = Workload(*(np.concatenate([w[i] for w in works]) for i in range(len(Workload._fields))))
        system = System(*(np.concatenate([s[i] for s in systems]) for i in range(len(System._fields))))
        rows = np.concatenate([np.arange(offsets[k], offsets[k + 1]) for k in ks])
        out.append(_Batch(prof, strategy, to_candidates(table), workload, system, rows))
    return out


class Fitter:
    """One compiled loss and gradient over a set of measured runs; fits with optax.Adam."""

    def __init__(self, calls, measured: np.ndarray, profile="default"):
        import jax
        import jax.numpy as jnp

        from kernels.iteration import evaluate_candidates

        self.measured = np.asarray(measured, dtype=np.float64)
        batches = _batches(calls, profile)
        n = len(self.measured)

        def predict(theta):
            fields = _to_physical(theta)
            out = jnp.zeros(n)
            for b in batches:
                s = b.system._replace(**{k: jnp.broadcast_to(v, b.system.compute_eff.shape)
                                         for k, v in fields.items()})
                t = evaluate_candidates(b.strategy, b.cands, b.workload, s, b.profile).iteration_time
                out = out.at[b.rows].set(t)
            return out

        log_meas = jnp.log(jnp.asarray(self.measured))

        def loss(theta, weights):
            r = jnp.log(predict(theta)) - log_meas
            return jnp.sum(weights * r * r) / jnp.sum(weights)

        self._predict = jax.jit(predict)
        self._grad = jax.jit(jax.value_and_grad(loss))

    def predict(self, values: Mapping[str, float]) -> np.ndarray:
        return np.asarray(self._predict(_to_theta(values)))

    def fit(self, weights: np.ndarray | None = None, start: Mapping[str, float] | None = None,
            steps: int = 400, learning_rate: float = 0.05) -> dict[str, float]:
        """The fitted fields, starting from `start` (default: the middle of each range)."""
        import jax.numpy as jnp
        import optax

        w = jnp.ones(len(self.measured)) if weights is None else jnp.asarray(weights, dtype=jnp.float64)
        theta = jnp.asarray(_to_theta(start) if start else np.zeros(len(FIELDS)))
        opt = optax.adam(learning_rate)
        state = opt.init(theta)
        for _ in range(steps):
            _, g = self._grad(theta, w)
            updates, state = opt.update(g, state)
            theta = optax.apply_updates(theta, updates)
        return {k: float(v) for k, v in _to_physical(theta).items()}


def errors(pred: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    e = np.abs(np.asarray(pred) / np.asarray(measured) - 1.0)
    return {"mean": float(np.mean(e)), "max": float(np.max(e))}


@dataclass
class Result:
    calibration: Calibration
    labels: list[str]
    measured: np.ndarray
    fitted: np.ndarray  # in-sample predictions
    held_out: np.ndarray  # leave-one-model-out predictions
    folds: dict[str, dict[str, float]]  # model label -> values fitted without it


@float64
def calibrate(runs=None, name: str = "calibration", profile="default", steps: int = 400,
              command: str = "") -> Result:
    """Fit `FIELDS` to the measured runs (a path, `MeasuredRuns` or None for the packaged CSV),
    with the leave-one-model-out folds; rows with errors are skipped (see `runs.errors`)."""
    from dse.truth.measured import MeasuredRuns, plan, read_runs

    if not isinstance(runs, MeasuredRuns):
        runs = read_runs(runs)
    if runs.rows.height == 0:
        raise SpecError("calibrate: no valid measured run to fit")
    calls = plan(runs)
    order = [r for c in calls for r in c.rows]
    by_row = {r: i for i, r in enumerate(runs.rows["row"].to_list())}
    frame = runs.rows
    measured = np.array([frame["measured_iter_s"][by_row[r]] for r in order])
    labels = [frame["model"][by_row[r]] for r in order]
    systems = sorted({frame["system"][by_row[r]] for r in order})
    fitter = Fitter(calls, measured, profile)
    values = fitter.fit(steps=steps)
    fitted = fitter.predict(values)
    held = np.empty_like(measured)
    folds = {}
    for label in dict.fromkeys(labels):
        out = np.array([lab == label for lab in labels])
        v = fitter.fit(weights=(~out).astype(np.float64), start=values, steps=steps)
        folds[label] = v
        held[out] = fitter.predict(v)[out]
    source = getattr(runs, "source", "")
    cal = Calibration(
        name=name,
        values=values,
        in_sample=errors(fitted, measured),
        leave_one_model_out=errors(held, measured),
        provenance={"data": str(source), "runs": len(measured), "gpus": ", ".join(systems),
                    "command": command or "dse calibrate", "date": _dt.date.today().isoformat(),
                    "method": f"optax.adam(0.05), {steps} steps, mean squared log error, "
                              f"leave-one-model-out over {len(folds)} models"},
    )
    return Result(cal, labels, measured, fitted, held, folds)


def write_calibration(cal: Calibration, path: str | Path | None = None) -> Path:
    """Write `cal` as conf/calibration/NAME.yaml (or `path`), atomically."""
    from dse.truth.calibration import CALIBRATION_DIR

    path = Path(path) if path else CALIBRATION_DIR / f"{cal.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "values": {k: round(v, 6) for k, v in cal.values.items()},
        "in_sample": {k: round(v, 6) for k, v in cal.in_sample.items()},
        "leave_one_model_out": {k: round(v, 6) for k, v in cal.leave_one_model_out.items()},
        "provenance": cal.provenance,
    }
    head = ("# Efficiencies of the default profile, fitted to measured training runs by `dse calibrate`\n"
            "# (jax.grad through the search kernels, optax). Fields: see dse/truth/calibrate.py FIELDS.\n")
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(head + yaml.safe_dump(body, sort_keys=False))
    tmp.replace(path)
    return path
