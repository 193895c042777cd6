"""Non-finite values, fp16-aware: loss-scale collapse, NaN/Inf loss, hidden NaN, NaN grad norm / LR,
evaluations that fail every time, and NaN in any other logged metric (a note only)."""

from __future__ import annotations

import numpy as np

from guarded_sbatch.judge.findings import Finding, fmt, median
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.core.judge_policy import JudgePolicy, RunContext
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason


def fp16_skipped_steps(history: MetricHistory, keys: RunKeys) -> set[int]:
    """Steps at which an fp16 optimizer skipped its update: the skip counter moved or the scale dropped."""
    skipped: set[int] = set()
    if keys.skipped:
        steps, values = history.series(keys.skipped)
        cumulative = _looks_cumulative(values, keys.skipped)
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


def _looks_cumulative(values: np.ndarray, key: str = "") -> bool:
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
    if _looks_cumulative(values, keys.skipped):
        before = values[steps <= first_step]
        start = float(before[-1]) if len(before) else float(values[inside][0])
        count = float(values[inside][-1]) - start
    else:
        count = float(np.nansum(values[inside]))
    return min(1.0, count / (last_step - first_step))


def check_loss_scale_collapse(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """The scale stuck at its floor with steps skipped every time, or driven down to it by a streak of drops with
    no growth between: the optimizer skips every step. Judged on the scale alone (no loss point needed)."""
    if not keys.loss_scale:
        return None
    steps, scales = history.series(keys.loss_scale)
    if len(steps) < 2:
        return None
    at_floor = scales <= policy.loss_scale_floor * (1 + 1e-6)
    if not at_floor[-1]:
        return None
    streak, before = _drop_streak(scales)
    if streak >= policy.loss_scale_drop_streak:
        first = int(steps[before])
        return Finding.stop(
            Reason.LOSS_SCALE_COLLAPSE,
            f"fp16 loss scale dropped at each of its last {streak} changes with no growth between, from "
            f"{fmt(float(scales[before]))} at step {first} to {fmt(float(scales[-1]))} at step {int(steps[-1])}: "
            "every step overflows, the run no longer trains",
            Anomaly("loss_scale_collapse", keys.loss_scale, first, float(scales[-1])),
        )
    # start of the current stretch at the floor
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
    return Finding.stop(
        Reason.LOSS_SCALE_COLLAPSE,
        f"fp16 loss scale stuck at its floor ({fmt(float(scales[-1]))}) since step {first_at_floor} with "
        f"{rate:.0%} of the last {policy.loss_scale_window_steps} steps skipped: the run no longer trains",
        Anomaly("loss_scale_collapse", keys.loss_scale, first_at_floor, float(scales[-1])),
    )


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


def _trailing_streak(bad: np.ndarray) -> int:
    good = np.nonzero(~bad)[0]
    return len(bad) if len(good) == 0 else len(bad) - 1 - int(good[-1])


def check_nonfinite_loss(
    history: MetricHistory, keys: RunKeys, policy: JudgePolicy, excused: set[int], context: RunContext | None = None
) -> Finding | None:
    """NaN/Inf training loss, and HF's hidden NaN (`loss: 0.0` beside `grad_norm: nan`). Confirmed by a second
    logged point, by the exploded loss just before it, by a second independent signal (the evaluation failing too),
    or by time: the non-finite loss stays the newest point while the job runs on."""
    if not keys.train_loss:
        return None
    steps, values = history.series(keys.train_loss)
    if len(steps) == 0:
        return None
    nonfinite = ~np.isfinite(values)
    hidden = np.zeros(len(steps), dtype=bool)
    if keys.grad_norm:
        for i in np.nonzero(values == 0.0)[0]:
            grad = history.value_at(keys.grad_norm, int(steps[i]))
            hidden[i] = grad is not None and not np.isfinite(grad)
    counted = (nonfinite | hidden) & ~np.isin(steps, list(excused))
    if not np.any(counted):
        return None
    streak = _trailing_streak(counted)
    if streak == 0:
        first_bad = int(steps[np.nonzero(counted)[0][-1]])
        return Finding.note(
            Reason.NON_FINITE_LOSS,
            f"a non-finite training loss at step {first_bad} was followed by finite values",
            Anomaly("nan_recovered", keys.train_loss, first_bad, None, "non-finite loss, then finite again"),
        )
    onset_index = len(steps) - streak
    onset = int(steps[onset_index])
    is_hidden = bool(hidden[-1])  # the newest bad point is a 0.0 beside a NaN grad norm
    reason = Reason.HIDDEN_NAN if is_hidden else Reason.NON_FINITE_LOSS
    what = (
        "training loss logged as 0.0 beside a NaN/Inf grad norm (a NaN hidden by the trainer's log filter)"
        if is_hidden
        else f"training loss is {values[-1]}"
    )
    anomaly = Anomaly("hidden_nan" if is_hidden else "nan", keys.train_loss, onset, None, what)
    if streak >= policy.nonfinite_loss_points:
        return Finding.stop(reason, f"{what} at the last {streak} logged steps (since step {onset})", anomaly)
    confirmed = (_explosion_before(steps, values, counted, onset_index, policy)
                 or _eval_failed_too(history, keys, int(steps[onset_index - 1]) if onset_index else onset - 1)
                 or _held(policy, context))
    if confirmed:
        return Finding.stop(reason, f"{what} at step {onset}, {confirmed}", anomaly)
    return Finding.wait(
        reason, f"{what} at step {onset}; STOP if the next logged step is non-finite too, or if it is still the "
        f"newest point after {_hold_seconds(policy, context):.0f} s while the job runs", anomaly
    )


def _eval_failed_too(history: MetricHistory, keys: RunKeys, since_step: int) -> str:
    """A second, independent non-finite signal: an evaluation's newest value, logged after the last finite training
    loss, is non-finite too ("" when none is)."""
    for key in keys.eval_keys:
        steps, values = history.series(key)
        if len(values) and not np.isfinite(values[-1]) and int(steps[-1]) > since_step:
            return (f"and {key} is {values[-1]} at step {int(steps[-1])}: two independent non-finite signals "
                    "(training and evaluation) decide at once")
    return ""


def _hold_seconds(policy: JudgePolicy, context: RunContext | None) -> float:
    """How long a non-finite newest loss must stay the newest: `nonfinite_hold_seconds`, and at least
    `nonfinite_hold_intervals` of the run's own intervals between new points."""
    interval = context.point_interval_s if context is not None and context.point_interval_s else 0.0
    return max(policy.nonfinite_hold_seconds, policy.nonfinite_hold_intervals * interval)


def _held(policy: JudgePolicy, context: RunContext | None) -> str:
    """Time as evidence: the job runs on and nothing newer came for the hold ("" otherwise; never for files read
    after the fact)."""
    if context is None or not context.job_live or context.seconds_since_last_point is None:
        return ""
    hold = _hold_seconds(policy, context)
    if context.seconds_since_last_point < hold:
        return ""
    return (f"still the newest point {context.seconds_since_last_point:.0f} s later while the job runs on "
            f"(hold {hold:.0f} s): the next point is not coming, a progress bar redraws one line")


def _explosion_before(steps: np.ndarray, values: np.ndarray, counted: np.ndarray, onset_index: int,
                      policy: JudgePolicy) -> str:
    """Why the first non-finite loss needs no second one: the finite loss just before it had already exploded
    (>= `nonfinite_after_explosion_ratio` x the median of the finite losses before that); "" when it had not."""
    if onset_index < 2 or counted[onset_index - 1]:
        return ""
    last = float(values[onset_index - 1])
    earlier = values[: onset_index - 1]
    earlier = np.abs(earlier[np.isfinite(earlier)][-64:])
    if not np.isfinite(last) or not len(earlier):
        return ""
    before = float(median(earlier))
    if before <= 0 or abs(last) < policy.nonfinite_after_explosion_ratio * before:
        return ""
    return (f"right after the loss exploded to {fmt(last)} at step {int(steps[onset_index - 1])} "
            f"(median {fmt(before)} before)")


def check_nan_counter(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """Megatron counts NaN iterations and then prints no loss at all: the counter is the evidence."""
    if not keys.nan_counter:
        return None
    steps, values = history.series(keys.nan_counter)
    counts = np.diff(values, prepend=0.0) if _looks_cumulative(values, keys.nan_counter) else values
    bad = np.nan_to_num(counts, nan=1.0) > 0
    streak = _trailing_streak(bad)
    if streak == 0:
        return None
    onset = int(steps[len(steps) - streak])
    anomaly = Anomaly("nan", keys.nan_counter, onset, None, f"{keys.nan_counter} > 0 since step {onset}")
    if streak >= policy.nonfinite_loss_points:
        return Finding.stop(
            Reason.NON_FINITE_LOSS,
            f"the trainer counted NaN iterations ({keys.nan_counter}) at each of the last {streak} logged "
            f"steps, since step {onset}",
            anomaly,
        )
    return Finding.wait(Reason.NON_FINITE_LOSS, f"NaN iterations counted at step {onset}", anomaly)


def check_nonfinite_optimizer_metrics(
    history: MetricHistory, keys: RunKeys, policy: JudgePolicy, excused: set[int]
) -> Finding | None:
    """NaN/Inf grad norm (outside fp16 skipped steps) or LR at the last N logged steps."""
    for key in (keys.grad_norm, keys.lr):
        if not key:
            continue
        steps, values = history.series(key)
        counted = ~np.isfinite(values) & ~np.isin(steps, list(excused))
        streak = _trailing_streak(counted)
        if streak >= policy.nonfinite_patience_points:
            onset = int(steps[len(steps) - streak])
            return Finding.stop(
                Reason.NON_FINITE_METRIC,
                f"{key} is {values[-1]} at the last {streak} logged steps (since step {onset})",
                Anomaly("nan", key, onset, None, f"{key} non-finite"),
            )
        if streak:
            onset = int(steps[len(steps) - streak])
            return Finding.wait(
                Reason.NON_FINITE_METRIC,
                f"{key} is {values[-1]} at step {int(steps[-1])} ({streak} logged step(s) since step {onset}, "
                "not a skipped fp16 step); STOP after "
                f"{policy.nonfinite_patience_points}",
                Anomaly("nan", key, onset, None, f"{key} non-finite"),
            )
    return None


def check_eval_failing(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """Non-finite evaluations: the key metric's newest eval non-finite is WAIT, N in a row (any eval key)
    is STOP; an earlier failure that was followed by finite evals is a note."""
    notes: list[Anomaly] = []
    waiting: Finding | None = None
    for key in keys.eval_keys:
        steps, values = history.series(key)
        bad = ~np.isfinite(values)
        if not np.any(bad):
            continue
        streak = _trailing_streak(bad)
        if streak >= policy.eval_fail_patience:
            onset = int(steps[len(steps) - streak])
            return Finding.stop(
                Reason.EVAL_FAILING,
                f"evaluation failed ({key} = {values[-1]}) at each of the last {streak} evaluations, "
                f"steps {', '.join(str(int(s)) for s in steps[-streak:][:6])}",
                Anomaly("eval_failing", key, onset, None, f"{key} non-finite {streak} times in a row"),
            )
        if streak and key == keys.key_metric and waiting is None:
            onset = int(steps[len(steps) - streak])
            waiting = Finding.wait(
                Reason.EVAL_FAILING,
                f"{key} is {values[-1]} at step {int(steps[-1])} ({streak} non-finite evaluation(s) in a row "
                f"since step {onset}); STOP after {policy.eval_fail_patience}",
                Anomaly("eval_nan", key, onset, None, f"{key} non-finite at step {onset}"),
            )
            continue
        last_bad = int(steps[np.nonzero(bad)[0][-1]])
        notes.append(Anomaly("eval_nan", key, last_bad, None, f"{key} non-finite at step {last_bad}"))
    if waiting is not None:
        return Finding(waiting.decision, waiting.reason, waiting.message, waiting.anomalies + tuple(notes))
    if notes:
        return Finding.note(Reason.EVAL_FAILING, "an evaluation returned a non-finite value", *notes)
    return None


def check_other_nonfinite(history: MetricHistory, keys: RunKeys) -> Finding | None:
    """NaN/Inf in any metric not judged elsewhere: reported, never a reason to stop."""
    judged = {keys.train_loss, keys.lr, keys.grad_norm, keys.loss_scale, keys.skipped, *keys.eval_keys}
    notes = []
    for key in history.keys():
        if key in judged:
            continue
        steps, values = history.series(key)
        bad = np.nonzero(~np.isfinite(values))[0]
        if len(bad):
            notes.append(Anomaly("nan", key, int(steps[bad[-1]]), None, f"{key} non-finite ({len(bad)} points)"))
    if notes:
        return Finding.note(Reason.NON_FINITE_METRIC, "non-finite values in other metrics", *notes[:5])
    return None
