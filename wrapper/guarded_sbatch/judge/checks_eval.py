"""Evaluation against the run's own best and against the baseline / target."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from guarded_sbatch.judge.findings import Finding, fmt, median
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason

_SMOOTH_EVALS = 3


def eval_trend(steps: np.ndarray, values: np.ndarray, direction: str, policy: JudgePolicy) -> dict[str, Any]:
    """improving / flat / regressing of an eval series, relative to its own best."""
    finite = np.isfinite(values)
    trailing_bad = int(len(finite) - (np.flatnonzero(finite)[-1] + 1)) if finite.any() else int(len(finite))
    steps, values = steps[finite], values[finite]
    if trailing_bad:  # the latest evals are NaN/Inf: no trend to claim
        return {"trend": "not finite", "non_finite_in_a_row": trailing_bad, "evals": int(len(values))}
    if len(values) < 2:
        return {"trend": "unknown", "evals": int(len(values))}
    sign = 1.0 if direction == "min" else -1.0  # work with "lower is better"
    oriented = sign * values
    best_index = int(np.argmin(oriented))
    best, last = float(values[best_index]), float(values[-1])
    scale = max(abs(best), 1e-12)
    worse_by = (oriented[-1] - oriented[best_index]) / scale
    previous_gain = (oriented[-2] - oriented[-1]) / scale
    if best_index == len(values) - 1 and previous_gain > policy.eval_flat_rel:
        trend = "improving"
    elif worse_by > policy.eval_regress_rel:
        trend = "regressing"
    else:
        trend = "flat"
    return {
        "trend": trend, "best": best, "best_step": int(steps[best_index]), "last": last,
        "last_step": int(steps[-1]), "worse_than_best_by": float(worse_by), "evals": int(len(values)),
    }


def check_eval_regressing(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """The key metric, smoothed over 3 evaluations (a lucky low is not a best), worse than its best smoothed
    value by more than eval_regress_rel: WAIT at the first such evaluation; STOP once it has stayed worse
    for eval_regress_patience_points evaluations, or for eval_regress_patience_steps steps over at least
    2 evaluations, whichever comes first (so runs that eval rarely, or per epoch, get there too)."""
    key = keys.key_metric
    if key is None:
        return None
    direction = keys.directions.get(key, "min")
    steps, values = history.finite_series(key)
    smooth = _SMOOTH_EVALS
    if len(values) < smooth + 1:
        return None
    oriented = values if direction == "min" else -values
    smoothed = _median_of_3(oriented) if smooth == 3 else median(sliding_window_view(oriented, smooth), axis=1)
    best_index = int(np.argmin(smoothed))
    best = float(smoothed[best_index])
    worse = smoothed - best > policy.eval_regress_rel * max(abs(best), 1e-12)
    if not worse[-1]:
        return None
    good = np.nonzero(~worse)[0]
    streak = len(worse) - 1 - int(good[-1])
    onset = int(steps[len(steps) - streak])
    best_step = int(steps[best_index + smooth - 1])
    last_step = int(steps[-1])
    sign = 1.0 if direction == "min" else -1.0
    recent = ", ".join(f"{fmt(float(v))}@{int(s)}" for s, v in zip(steps[-min(streak + 1, 5):], values[-min(streak + 1, 5):]))
    evidence = (
        f"{key} 3-eval median {fmt(sign * float(smoothed[-1]))} at step {last_step} vs its best "
        f"{fmt(sign * best)} (step {best_step}), worse at each of the last {streak} evaluations since step "
        f"{onset} (recent: {recent})"
    )
    anomaly = Anomaly("eval_regressing", key, onset, float(values[-1]), evidence)
    if streak >= policy.eval_regress_patience_points or (
        streak >= 2 and last_step - onset >= policy.eval_regress_patience_steps
    ):
        return Finding.stop(Reason.EVAL_REGRESSING, f"{evidence}: the run is overfitting or degrading", anomaly)
    return Finding.wait(
        Reason.EVAL_REGRESSING,
        f"{evidence}; STOP after {policy.eval_regress_patience_points} evaluations or "
        f"{policy.eval_regress_patience_steps} steps unless it recovers",
        anomaly,
    )


def _median_of_3(values: np.ndarray) -> np.ndarray:
    """np.median over each window of 3 (smoothed[j] ends at index j + 2), exactly, without sorting copies."""
    a, b, c = values[:-2], values[1:-1], values[2:]
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def check_eval_vs_baseline(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """Notes only: where the key metric stands against the target and the baseline."""
    key = keys.key_metric
    if key is None or (policy.baseline is None and policy.target is None):
        return None
    steps, values = history.series(key)
    finite = np.isfinite(values)
    if not np.any(finite):
        return None
    last = float(values[finite][-1])
    last_step = int(steps[finite][-1])
    better = (lambda a, b: a <= b) if keys.directions.get(key, "min") == "min" else (lambda a, b: a >= b)
    parts = []
    anomalies = []
    if policy.target is not None and better(last, policy.target):
        parts.append(f"{key} {fmt(last)} has reached the target {fmt(policy.target)}")
    if policy.baseline is not None:
        side = "better than" if better(last, policy.baseline) else "behind"
        parts.append(f"{key} {fmt(last)} is {side} the baseline {fmt(policy.baseline)}")
        if side == "behind":
            anomalies.append(Anomaly("behind_baseline", key, last_step, last))
    return Finding.note(Reason.HEALTHY, "; ".join(parts), *anomalies) if parts else None
