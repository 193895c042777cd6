"""A jump that the spike detector cannot see yet: the trailing baselines need MIN_BASELINE_POINTS earlier points,
so in a history that starts mid-run (a sidecar started late, a rotated or cut log, `tail -c` through a log
command) a loss that jumps in its first few points becomes its own baseline. Such a jump, far above every
earlier value of the window and held since, is a WAIT that names it: the history cannot confirm a spike or a
divergence yet, and it must never read as healthy. The same for the gradient norm, when the training loss rose with
it (its median since the jump above its best before by a fifth or more): two signals agreeing, too few points to
call it."""

from __future__ import annotations

import numpy as np

from guarded_sbatch.judge.baseline import MIN_BASELINE_POINTS
from guarded_sbatch.judge.findings import Finding, fmt, median
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason


def check_short_window_jump(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    if not keys.train_loss:
        return None
    steps, values = history.finite_series(keys.train_loss)
    n = len(values)
    if n < 1 + policy.short_jump_points or np.any(values <= 0):
        return None
    # the jump must start where no baseline exists yet (later ones are the spike detector's)
    for start in range(1, min(n - policy.short_jump_points, MIN_BASELINE_POINTS) + 1):
        before, since = values[:start], values[start:]
        if float(np.min(since)) >= policy.short_jump_ratio * float(np.max(before)):
            level = float(median(since))
            evidence = (
                f"{keys.train_loss} {fmt(level)} (median of {len(since)} points since step {int(steps[start])}) vs "
                f"{fmt(float(median(before)))} before it"
            )
            return Finding.wait(
                Reason.DIVERGENCE,
                f"training loss jumped at step {int(steps[start])} and stayed up: {evidence}; the history is too "
                "short to tell a spike from a divergence yet: watching",
                Anomaly("jump", keys.train_loss, int(steps[start]), level, evidence),
            )
    return None


def check_short_window_grad_jump(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    if not keys.grad_norm or not keys.train_loss:
        return None
    steps, values = history.finite_series(keys.grad_norm)
    n = len(values)
    if n < 1 + policy.short_jump_points or n > 2 * MIN_BASELINE_POINTS or np.any(values <= 0):
        return None
    loss_steps, losses = history.series(keys.train_loss)
    for start in range(1, min(n - policy.short_jump_points, MIN_BASELINE_POINTS) + 1):
        before, since = values[:start], values[start:]
        if float(np.min(since)) < policy.short_jump_ratio * float(np.max(before)):
            continue
        jump_step = int(steps[start])
        earlier = losses[(loss_steps < jump_step) & np.isfinite(losses)]
        later = losses[(loss_steps >= jump_step) & np.isfinite(losses)]
        if not len(earlier) or len(later) < policy.short_jump_points:
            return None
        best, level = float(np.min(earlier)), float(median(later))
        if best <= 0 or level < 1.2 * best:
            return None
        evidence = (f"{keys.grad_norm} {fmt(float(median(since)))} (median since step {jump_step}) vs "
                    f"{fmt(float(np.max(before)))} at most before; {keys.train_loss} {fmt(level)} since then vs its best "
                    f"{fmt(best)}")
        return Finding.wait(
            Reason.GRAD_EXPLOSION,
            f"gradient norm jumped at step {jump_step} and the training loss rose with it: {evidence}; too few points "
            "to call it yet: watching",
            Anomaly("grad_jump", keys.grad_norm, jump_step, float(median(since)), evidence),
        )
    return None
