"""A training loss that climbs slowly above its best (no NaN, no spike): the median of the trailing
`climb_window_steps` is compared with the best such median so far. Clearly above it (by more than
`climb_rel`) is WAIT; still above after `climb_patience_steps` steps or `climb_patience_points` logged
points (whichever first, so a per-epoch run gets there too) is a STOP, unless the key eval metric,
evaluated since the climb began, is at or near its best."""

from __future__ import annotations

import numpy as np

from guarded_sbatch.judge.eval_gate import eval_near_best_since
from guarded_sbatch.judge.findings import MAD_TO_SIGMA, Finding, fmt, median, points_in, window_medians
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason


def check_loss_climb(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    if not keys.train_loss:
        return None
    steps, values = history.finite_series(keys.train_loss)
    w = points_in(policy.climb_window_steps, steps, minimum=8, maximum=policy.baseline_max_points)
    if len(values) < 2 * w:
        return None
    end_index, windows, track = window_medians(values, w)  # track[k]: median of the w points ending at ends[k]
    ends = steps[end_index]
    best_index = int(np.argmin(track))
    best = float(track[best_index])
    if best <= 0:
        return None
    # the margin is never below 4 standard errors of a window's median (noisy small-batch losses), nor
    # near zero below 2 % of where the loss started
    spread = MAD_TO_SIGMA * float(median(np.abs(windows[-1] - track[-1])))
    margin = max(policy.climb_rel * best, 4 * 1.2533 * spread / np.sqrt(w), 0.02 * float(track[0]))
    above = track > best + margin
    if not above[-1]:
        return None
    below = np.nonzero(~above)[0]
    onset_index = int(below[-1]) + 1
    onset = int(ends[onset_index])
    last_step = int(steps[-1])
    current = float(track[-1])
    evidence = (
        f"median {keys.train_loss} over the last {w} points {fmt(current)} at step {last_step} vs its best "
        f"{fmt(best)} (window ending at step {int(ends[best_index])}), {current / best - 1:.0%} higher since "
        f"step {onset}"
    )
    anomaly = Anomaly("loss_climbing", keys.train_loss, onset, current, evidence)
    points = int(np.count_nonzero(steps >= onset))
    if last_step - onset >= policy.climb_patience_steps or points >= policy.climb_patience_points:
        good_eval = eval_near_best_since(history, keys, policy, onset)
        if good_eval is not None:
            return Finding.wait(Reason.LOSS_CLIMBING, f"training loss climbing: {evidence}; but {good_eval}", anomaly)
        return Finding.stop(Reason.LOSS_CLIMBING, f"training loss climbing: {evidence}", anomaly)
    return Finding.wait(
        Reason.LOSS_CLIMBING,
        f"training loss climbing: {evidence}; STOP after {policy.climb_patience_steps} steps or "
        f"{policy.climb_patience_points} points unless it turns",
        anomaly,
    )
