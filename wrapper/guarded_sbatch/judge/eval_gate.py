"""Evidence from the evaluations around a training-signal finding: a finite loss spike, a slow climb or
a gradient-norm explosion is not a STOP while the key eval metric, evaluated since it began, is at or
near its best (not worse than its best by more than `eval_regress_rel`)."""

from __future__ import annotations

import numpy as np

from guarded_sbatch.judge.findings import fmt
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.select import RunKeys


def eval_near_best_since(history: MetricHistory, keys: RunKeys, policy: JudgePolicy, since_step: int) -> str | None:
    """A sentence naming the evidence when the key metric's newest eval (at or after since_step) is at or
    near its best; None when there is no such eval or it is clearly worse."""
    key = keys.key_metric
    if key is None:
        return None
    steps, values = history.finite_series(key)
    if len(values) < 2 or int(steps[-1]) < since_step:
        return None
    oriented = values if keys.directions.get(key, "min") == "min" else -values
    best_index = int(np.argmin(oriented))
    best = float(oriented[best_index])
    if float(oriented[-1]) - best > policy.eval_regress_rel * max(abs(best), 1e-12):
        return None
    return (
        f"{key} {fmt(float(values[-1]))} at step {int(steps[-1])} is at or near its best "
        f"{fmt(float(values[best_index]))} (step {int(steps[best_index])})"
    )
