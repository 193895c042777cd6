"""The learning-rate schedule: an LR held at 0 from the start cannot learn (STOP); a restart is noted."""

from __future__ import annotations

import numpy as np

from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.findings import Finding, fmt
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason


def check_lr_schedule(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """STOP when the LR has been 0 from the start for `lr_zero_patience_steps`; note a restart."""
    if not keys.lr:
        return None
    steps, values = history.finite_series(keys.lr)
    if len(values) < 2:
        return None
    if np.all(values == 0) and int(steps[-1]) - int(steps[0]) >= policy.lr_zero_patience_steps:
        return Finding.stop(
            Reason.LR_SCHEDULE,
            f"learning rate ({keys.lr}) has been 0 since step {int(steps[0])}: the run cannot learn",
            Anomaly("lr_zero", keys.lr, int(steps[0]), 0.0),
        )
    peak_so_far = np.maximum.accumulate(values)
    before, peak_before = values[:-1], peak_so_far[:-1]  # vectorized: a poll must not loop over the history
    with np.errstate(over="ignore"):  # an LR near the float maximum: the product is inf, the comparison still right
        restarts = (np.nonzero(
            (before > 0) & (before < peak_before / policy.lr_restart_ratio)
            & (values[1:] >= policy.lr_restart_ratio * before)
        )[0] + 1).tolist()
    if restarts:
        i = restarts[-1]
        return Finding.note(
            Reason.LR_SCHEDULE,
            f"learning rate restarted at step {int(steps[i])} ({fmt(float(values[i - 1]))} -> {fmt(float(values[i]))})",
            Anomaly("lr_restart", keys.lr, int(steps[i]), float(values[i])),
        )
    return None
