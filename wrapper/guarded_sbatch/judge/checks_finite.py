"""Non-finite values, fp16-aware (checks_scale.py: the steps an fp16 optimizer skipped): NaN/Inf loss, hidden NaN,
NaN grad norm / LR, evaluations that fail every time, and NaN in any other logged metric (a note only)."""

from __future__ import annotations

import numpy as np

from guarded_sbatch.judge.checks_scale import looks_cumulative
from guarded_sbatch.judge.findings import Finding, fmt, median
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.keys import key_words
from guarded_sbatch.judge.policy import JudgePolicy, RunContext
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason


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
    bad = nonfinite | hidden
    counted = bad & ~np.isin(steps, list(excused))
    if not np.any(counted):
        return _nonfinite_loss_parts(history, keys, policy, excused)
    # a skipped fp16 step excuses an isolated overflow; the non-finite losses before a newest one it does not
    # excuse count with it
    streak = _trailing_streak(bad) if counted[-1] else 0
    if streak == 0:
        parts = _nonfinite_loss_parts(history, keys, policy, excused)
        if parts is not None:
            return parts
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
                 or _terms_failed_too(history, keys, onset)
                 or _average_failed_too(history, keys, onset)
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


def _terms_failed_too(history: MetricHistory, keys: RunKeys, step: int) -> str:
    """Every other loss term non-finite at the same step (two or more of them): the model's outputs are non-finite,
    not one term ("" otherwise)."""
    if len(keys.loss_parts) < 2:
        return ""
    failed = [k for k in keys.loss_parts if (v := history.value_at(k, step)) is not None and not np.isfinite(v)]
    if len(failed) < 2 or len(failed) < len([k for k in keys.loss_parts if history.value_at(k, step) is not None]):
        return ""
    return (f"and every other loss term logged with it is non-finite too ({', '.join(failed[:5])}): the model's "
            "outputs are non-finite, not one term")


_AVERAGE_WORDS = frozenset({"avg", "average", "mean", "running", "smoothed", "ema", "moving"})


def _average_failed_too(history: MetricHistory, keys: RunKeys, step: int) -> str:
    """A running average of the loss non-finite at the same step: an average that took in a NaN stays NaN, so the
    NaN is held by construction ("" otherwise)."""
    for key in keys.loss_parts:
        value = history.value_at(key, step)
        if value is not None and not np.isfinite(value) and set(key_words(key)) & _AVERAGE_WORDS:
            return (f"and {key}, a running average of it, is {value} at the same step: an average that took in a "
                    "non-finite value stays non-finite")
    return ""


def _nonfinite_loss_parts(history: MetricHistory, keys: RunKeys, policy: JudgePolicy,
                          excused: set[int]) -> Finding | None:
    """Another training-loss series (an epoch mean, a loss term) non-finite at its last `nonfinite_loss_points`
    logged points while the judged one is not: a STOP too."""
    for key in keys.loss_parts:
        steps, values = history.series(key)
        counted = ~np.isfinite(values) & ~np.isin(steps, list(excused))
        if not len(values) or not counted[-1]:
            continue
        streak = _trailing_streak(~np.isfinite(values))
        if streak >= policy.nonfinite_loss_points:
            onset = int(steps[len(steps) - streak])
            return Finding.stop(
                Reason.NON_FINITE_LOSS,
                f"{key} (a training loss beside {keys.train_loss}) is {values[-1]} at the last {streak} logged steps "
                f"(since step {onset})",
                Anomaly("nan", key, onset, None, f"{key} non-finite"),
            )
    return None


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
    counts = np.diff(values, prepend=0.0) if looks_cumulative(values, keys.nan_counter) else values
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


_PERPLEXITY_WORDS = frozenset({"perplexity", "ppl"})


def check_eval_failing(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """Non-finite evaluations: the key metric's newest eval non-finite is WAIT, N in a row (any eval key) is STOP, a
    perplexity at inf at its newest eval is a STOP at once (exp overflowed); an earlier failure that was followed by
    finite evals is a note."""
    notes: list[Anomaly] = []
    waiting: Finding | None = None
    for key in keys.eval_keys:
        steps, values = history.series(key)
        bad = ~np.isfinite(values)
        if not np.any(bad):
            continue
        streak = _trailing_streak(bad)
        if streak and values[-1] == np.inf and set(key_words(key)) & _PERPLEXITY_WORDS:
            onset = int(steps[len(steps) - streak])
            return Finding.hard_stop(
                Reason.EVAL_FAILING,
                f"{key} is inf at step {int(steps[-1])} (since step {onset}): a perplexity is exp(cross-entropy), and "
                "it overflows only above ~88 nats per token, worse than a uniform guess over 1e38 tokens (strong "
                "evidence: no model that learns is there, decides with one evaluation)",
                Anomaly("eval_failing", key, onset, None, f"{key} inf since step {onset}"),
            )
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
