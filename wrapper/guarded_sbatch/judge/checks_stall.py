"""Stagnation mid-run: the loss improved, then stopped improving while the optimizer still thrashes.

The plateau check (checks_trend) looks only at a run flat from its start. A run can also stall later: after
`stall_min_progress` of improvement, the smoothed training loss (the median of trailing windows) makes no new best
for a span relative to the run's own pace: max(`stall_min_steps`, `stall_pace_factor` x the steps it took to reach
that best). That alone is also what a converged run looks like, so it takes more: the gradient norm over the span is
noisy ((q90 - q10) / median >= `stall_grad_spread`) and at least twice its median while the loss fell (the
optimizer moves hard and gets nowhere), the learning rate,
when logged, has not decayed to a tenth of its peak (a plateau at the end of a decayed schedule is convergence), and
the key evaluation, when logged, made no new best during the span. WAIT from half the span, STOP after all of it.
"""

from __future__ import annotations

import numpy as np

from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.findings import MAD_TO_SIGMA, Finding, fmt, median, points_in, window_medians
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason

_MIN_POINTS = 20
_BEST_MARGIN = 0.01  # a new best must beat the old one by 1 %
_GRAD_RISE = 2.0  # the grad norm during the stall at least this x its median while the loss fell
_NOISE_ERRORS = 3  # ... and by 3 standard errors of a window's median (noise makes a new low now and then)


def _track(steps: np.ndarray, values: np.ndarray,
           policy: JudgePolicy) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Medians of the trailing windows (every few points, and the newest) with their end steps, the window, and
    the noise of one such median (its standard error, from the newest window's spread)."""
    w = points_in(policy.climb_window_steps, steps, minimum=8, maximum=policy.baseline_max_points)
    w = min(w, max(4, len(values) // 4))
    end_index, windows, track = window_medians(values, w)
    spread = MAD_TO_SIGMA * float(median(np.abs(windows[-1] - track[-1])))
    return track, steps[end_index], w, 1.2533 * spread / np.sqrt(w)


def _grad_spread(history: MetricHistory, key: str | None, since: int) -> float | None:
    """(q90 - q10) / median of the grad norm after `since`, when it is also at least twice its median before
    (the optimizer thrashing harder than while it made progress); None otherwise."""
    if not key:
        return None
    steps, values = history.series(key)
    finite = np.isfinite(values)
    inside, before = values[(steps > since) & finite], values[(steps <= since) & finite]
    if len(inside) < 8 or len(before) < 4:
        return None
    mid = float(median(inside))
    if mid <= 0 or mid < _GRAD_RISE * float(median(before)):
        return None
    low, high = np.quantile(inside, [0.1, 0.9])
    return float(high - low) / mid


def _lr_decayed(history: MetricHistory, key: str | None) -> bool:
    if not key:
        return False
    values = history.series(key)[1]
    values = values[np.isfinite(values)]
    return bool(len(values)) and float(values[-1]) <= 0.1 * float(np.max(values))


def _eval_improved_since(history: MetricHistory, keys: RunKeys, since: int) -> bool:
    key = keys.key_metric
    if key is None:
        return False
    steps, values = history.finite_series(key)
    if not len(values) or int(steps[-1]) <= since:
        return False
    oriented = values if keys.directions.get(key, "min") == "min" else -values
    before = oriented[steps <= since]
    return not len(before) or float(np.min(oriented[steps > since])) < float(np.min(before))


def check_stagnation(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    if not keys.train_loss:
        return None
    steps, values = history.finite_series(keys.train_loss)
    if len(values) < _MIN_POINTS:
        return None
    track, ends, w, noise = _track(steps, values, policy)
    start = float(track[0])
    if start <= 0:
        return None
    # the first window that got within the margin of the overall best: where the progress ended
    best_value = float(np.min(track))
    margin = max(_BEST_MARGIN * best_value, _NOISE_ERRORS * noise)
    best_index = int(np.nonzero(track <= best_value + margin)[0][0])
    best_step = int(ends[best_index])
    progress = (start - best_value) / start
    if progress < policy.stall_min_progress:
        return None
    last_step = int(steps[-1])
    span = max(policy.stall_min_steps, int(policy.stall_pace_factor * (best_step - int(steps[0]))))
    stalled_for = last_step - best_step
    if stalled_for < span // 2:
        return None
    spread = _grad_spread(history, keys.grad_norm, best_step)
    if spread is None or spread < policy.stall_grad_spread:
        return None
    if _lr_decayed(history, keys.lr) or _eval_improved_since(history, keys, best_step):
        return None
    evidence = (f"{keys.train_loss} median over {w} points {fmt(float(track[-1]))} at step {last_step}, no new best "
                f"since {fmt(best_value)} at step {best_step} ({progress:.0%} below its start {fmt(start)}), for "
                f"{stalled_for} steps (the run took {best_step - int(steps[0])} to get there), with a noisy "
                f"{keys.grad_norm} (spread {spread:.2g} x its median)")
    anomaly = Anomaly("stagnation", keys.train_loss, best_step, float(track[-1]), evidence)
    if stalled_for < span:
        return Finding.wait(Reason.STAGNATION, f"training stalled mid-run: {evidence}; STOP at step "
                            f"{best_step + span} if no new best", anomaly)
    return Finding.stop(Reason.STAGNATION, f"training stalled mid-run: {evidence}: no longer worth its cost", anomaly)
