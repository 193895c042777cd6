"""fp16 dynamic loss scaling: the steps an optimizer skipped on an overflow (excused elsewhere), and the loss scale
collapsing (the optimizer skips every step).

A collapse is any of: the scale stuck at its floor with most steps of a window skipped; driven to the floor by a
streak of drops with no growth between; an overflow at the floor at `loss_scale_floor_overflows` logged events in a
row (DeepSpeed's `Attempted loss scale: 1, reducing to 1`: nothing left to reduce); drops at
`loss_scale_step_drops` consecutive steps ending within 8x of the floor (every step overflows); a scale below
2**-10 x the floor just dropped again (the gradients overflow fp16 even scaled down a thousandfold). A streak of
drops is counted in halvings: a logged drop from 32768 to 785 is five overflows or more between two log lines.
"""

from __future__ import annotations

import math

import numpy as np

from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.findings import Finding, fmt
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason

_FAR_BELOW = 2.0 ** -10  # a scale this far below the floor: the gradients overflow even scaled down a thousandfold
_NEAR = 8.0  # drops at consecutive steps down to within this factor of the floor

def fp16_skipped_steps(history: MetricHistory, keys: RunKeys) -> set[int]:
    """Steps at which an fp16 optimizer skipped its update: the skip counter moved or the scale dropped."""
    skipped: set[int] = set()
    if keys.skipped:
        steps, values = history.series(keys.skipped)
        cumulative = looks_cumulative(values, keys.skipped)
        previous = 0.0
        for step, value in zip(steps.tolist(), values.tolist()):
            if (cumulative and value > previous) or (not cumulative and value > 0):
                skipped.add(step)
            previous = value
    if keys.loss_scale:
        steps, values = history.series(keys.loss_scale)
        drops = np.nonzero(np.diff(values) < 0)[0] + 1
        skipped.update(int(steps[i]) for i in drops)
    return skipped


def looks_cumulative(values: np.ndarray, key: str = "") -> bool:
    """A running count (DeepSpeed `skipped=`) never decreases and moves; a per-interval count goes up
    and down. Megatron's `number of skipped/nan iterations` are per interval even when constant."""
    if key.lower().startswith("number of"):
        return False
    finite = values[np.isfinite(values)]
    if len(finite) < 2:
        return False
    diffs = np.diff(finite)
    return bool(np.all(diffs >= 0) and np.any(diffs > 0))


def skip_rate(history: MetricHistory, keys: RunKeys, first_step: int, last_step: int) -> float | None:
    """Fraction of steps in (first_step, last_step] that were skipped; None without a skip counter."""
    if not keys.skipped or last_step <= first_step:
        return None
    steps, values = history.series(keys.skipped)
    if len(steps) == 0:
        return None
    inside = (steps > first_step) & (steps <= last_step)
    if not np.any(inside):
        return None
    if looks_cumulative(values, keys.skipped):
        before = values[steps <= first_step]
        start = float(before[-1]) if len(before) else float(values[inside][0])
        count = float(values[inside][-1]) - start
    else:
        count = float(np.nansum(values[inside]))
    return min(1.0, count / (last_step - first_step))


def check_loss_scale_collapse(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """The optimizer skips every step (see the module doc for the shapes). Judged on the scale alone (no loss point
    needed)."""
    if not keys.loss_scale:
        return None
    steps, scales = history.series(keys.loss_scale)
    if len(steps) < 2:
        return None
    for rule in (_far_below_floor, _dropped_to_floor, _overflows_at_floor, _stuck_at_floor):
        found = rule(history, keys, policy, steps, scales)
        if found is not None:
            return found
    return None


def _collapse(keys: RunKeys, step: int, scale: float, message: str) -> Finding:
    return Finding.hard_stop(Reason.LOSS_SCALE_COLLAPSE, message,
                             Anomaly("loss_scale_collapse", keys.loss_scale or "", step, scale))


def _far_below_floor(history: MetricHistory, keys: RunKeys, policy: JudgePolicy, steps: np.ndarray,
                     scales: np.ndarray) -> Finding | None:
    last = float(scales[-1])
    if not last < float(scales[-2]) or last > policy.loss_scale_floor * _FAR_BELOW:
        return None
    return _collapse(keys, int(steps[-1]), last, (
        f"fp16 loss scale dropped again to {fmt(last)} at step {int(steps[-1])}, over a thousand times below its "
        f"floor {fmt(policy.loss_scale_floor)}: the gradients overflow fp16 even scaled down that far"))


def _dropped_to_floor(history: MetricHistory, keys: RunKeys, policy: JudgePolicy, steps: np.ndarray,
                      scales: np.ndarray) -> Finding | None:
    """A streak of drops with no growth between: `loss_scale_drop_streak` of them down to the floor, or
    `loss_scale_step_drops` at consecutive steps down to within 8x of it."""
    floor = policy.loss_scale_floor * (1 + 1e-6)
    streak, before = _drop_streak(scales)
    if not streak or scales[-1] > _NEAR * floor or not scales[-1] > 0:
        return None
    ratio = float(scales[before]) / float(scales[-1])
    # a non-finite scale (a fuzzed or broken log) counts as one drop: no halvings can be told from it
    halvings = int(round(math.log2(ratio))) if scales[before] > 0 and math.isfinite(ratio) else streak
    first, last = int(steps[before]), int(steps[-1])
    every_step = streak >= policy.loss_scale_step_drops and last - int(steps[before + 1]) <= 2 * streak
    if not (every_step or (max(streak, halvings) >= policy.loss_scale_drop_streak and scales[-1] <= floor)):
        return None
    how = "at consecutive steps " if every_step else ""
    return _collapse(keys, first, float(scales[-1]), (
        f"fp16 loss scale dropped at each of its last {streak} changes {how}({halvings} halvings) with no growth "
        "between, from "
        f"{fmt(float(scales[before]))} at step {first} to {fmt(float(scales[-1]))} at step {last} (floor "
        f"{fmt(policy.loss_scale_floor)}): every step overflows, the run no longer trains"))


def _overflows_at_floor(history: MetricHistory, keys: RunKeys, policy: JudgePolicy, steps: np.ndarray,
                        scales: np.ndarray) -> Finding | None:
    """Overflow events one after another, at consecutive steps with no growth of the scale between: at the floor
    (`loss_scale_floor_overflows` of them: nothing is left to reduce), or down to within 8x of it
    (`loss_scale_step_drops` of them: every step overflows)."""
    if not keys.overflow:
        return None
    events, values = history.series(keys.overflow)
    floor = policy.loss_scale_floor * (1 + 1e-6)
    count, at_floor, later_step, later_scale = 0, 0, None, None
    for step, value in zip(events[::-1].tolist(), values[::-1].tolist()):
        scale = history.value_at(keys.loss_scale or "", step)
        if not value > 0 or scale is None or (later_step is not None and later_step - step > 2):
            break
        if later_scale is not None and scale < later_scale:
            break  # the scale grew between these events: not one unbroken stretch of overflows
        count += 1
        if scale <= floor and at_floor == count - 1:
            at_floor += 1
        later_step, later_scale = step, scale
    last = float(scales[-1])
    if at_floor >= policy.loss_scale_floor_overflows:
        return _collapse(keys, int(events[-at_floor]), last, (
            f"fp16 overflow at the loss scale's floor ({fmt(last)}) at each of the last {at_floor} logged steps, "
            f"since step {int(events[-at_floor])}: the optimizer skips every step, nothing is left to reduce"))
    if count >= policy.loss_scale_step_drops and last <= _NEAR * floor:
        return _collapse(keys, int(events[-count]), last, (
            f"fp16 overflow at each of {count} consecutive steps since step {int(events[-count])}, the loss scale "
            f"halved each time down to {fmt(last)} (floor {fmt(policy.loss_scale_floor)}): every step overflows"))
    return None


def _stuck_at_floor(history: MetricHistory, keys: RunKeys, policy: JudgePolicy, steps: np.ndarray,
                    scales: np.ndarray) -> Finding | None:
    at_floor = scales <= policy.loss_scale_floor * (1 + 1e-6)
    if not at_floor[-1]:
        return None
    above = np.nonzero(~at_floor)[0]
    first_at_floor = int(steps[above[-1] + 1]) if len(above) else int(steps[0])
    last_step = int(steps[-1])
    if last_step - first_at_floor < policy.loss_scale_window_steps:
        return None
    window_start = last_step - policy.loss_scale_window_steps
    rate = skip_rate(history, keys, window_start, last_step)
    if rate is None:  # no skip counter: a non-finite grad norm at almost every logged step says the same
        rate = _nonfinite_fraction(history, keys.grad_norm or keys.train_loss, window_start, last_step)
    if rate is None or rate < policy.loss_scale_min_skip_rate:
        return None
    return _collapse(keys, first_at_floor, float(scales[-1]), (
        f"fp16 loss scale stuck at its floor ({fmt(float(scales[-1]))}) since step {first_at_floor} with "
        f"{rate:.0%} of the last {policy.loss_scale_window_steps} steps skipped: the run no longer trains"))


def _drop_streak(scales: np.ndarray) -> tuple[int, int]:
    """(how many of the series' last changes of value were all drops, the index of the value before the first
    of them); repeated values in between do not count."""
    with np.errstate(invalid="ignore"):  # inf - inf (a garbage scale): no change, as NaN != 0 is not one either
        moves = np.nonzero(np.nan_to_num(np.diff(scales)) != 0)[0]  # i: scales[i] -> scales[i + 1] changed
    rises = np.nonzero(scales[moves + 1] > scales[moves])[0]
    streak = moves[rises[-1] + 1 :] if len(rises) else moves
    return len(streak), (int(streak[0]) if len(streak) else len(scales) - 1)


def _nonfinite_fraction(history: MetricHistory, key: str | None, first_step: int, last_step: int) -> float | None:
    if not key:
        return None
    steps, values = history.series(key)
    inside = (steps > first_step) & (steps <= last_step)
    if np.count_nonzero(inside) < 2:
        return None
    return float(np.mean(~np.isfinite(values[inside])))
