"""decide(history) -> Verdict: the checks in a fixed, documented order.

Order (the first STOP in this order wins; else the first WAIT; else CONTINUE with every note):
  0. the log ends in a crash (traceback, CUDA OOM, NCCL timeout...): STOP, however few points; a run
     interrupted by a signal from outside (Ctrl-C, the checkpoint signal before the time limit, a
     preemption, a scancel) is a WAIT that any later STOP finding overrides: it may be requeued; a log cut off
     inside a traceback (a crash that cannot say why) is a STOP after the checks below, which can
  1. loss-scale collapse (fp16: scale stuck at its floor, steps skipped every time)
  2. non-finite training loss, and the hidden NaN (`loss 0.0` beside `grad_norm nan`), confirmed by a second
     logged point, the explosion just before it, a second independent signal (the evaluation non-finite too) or
     by time (still the newest point while the job runs on: RunContext); fp16 skipped steps (skip counter moved /
     loss scale dropped) are excused; then a NaN-iteration counter (Megatron prints no loss for those)
  3. evidence by strength (checks_strength.py): a jump by orders of magnitude still held, a loss far above the
     chance level, big spikes that keep coming (counted over the run)
  4. non-finite grad norm or LR (outside skipped steps)
  5. evaluations failing (non-finite) every time; a loss below 0 where its kind cannot be (a box / CE / MSE loss,
     or a steady positive loss that jumped below 0: checks_sign.py): WAIT, STOP when it persists
  6. training-loss spike that does not recover / sustained divergence (WAIT while the key eval is
     at or near its best), a jump in a window too short for a baseline (WAIT), then a slow climb of the
     training loss above its best
  7. gradient-norm explosion (open: WAIT)
  8. LR schedule stuck at 0
  9. plateau from the start, then stagnation mid-run (checks_stall.py)
 10. key eval metric regressing from its own best (WAIT first, STOP after a patience in evals or steps)
 11. staleness (only while a live job is watched) -> WAIT
Notes (recovered spikes, a NaN that went away, LR restarts, eval vs baseline) never stop a run.
Hard faults first, whatever the history's length: a crash, a non-finite loss confirmed at a second logged step
(or right after an explosion), a loss scale collapsing step after step are STOPs with one loss point or none.
Thin evidence: with fewer than `min_loss_points` training-loss points only the soft findings (trends) become a
WAIT; a finding on strong evidence (Finding.hard) decides however few points there are. A short window is still
judged for what it shows: a jump far above its own earlier level is a WAIT that names it (checks_window.py). The
NaN checks run even when no loss key is logged (a log whose only signal is `grad norm: nan`); no loss key at all is
start-up (too_early) until the run has logged at a few steps, then UNGUARDED (its lines cannot be judged:
judge/unguarded.py names what was seen and the option that names the loss). Every WAIT and STOP message names its evidence: the
metric, its values and their steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from guarded_sbatch.core.jsonnum import non_finite_text
from guarded_sbatch.judge import (checks_anyslot, checks_climb, checks_crash, checks_dead, checks_eval, checks_finite,
                                  checks_nohistory, checks_scale, checks_schedule, checks_sign, checks_stall,
                                  checks_strength, checks_swing, checks_trend, checks_window, unguarded)
from guarded_sbatch.judge.findings import Finding
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.keys import Direction
from guarded_sbatch.judge.policy import JudgePolicy, RunContext
from guarded_sbatch.judge.select import RunKeys, select_keys
from guarded_sbatch.judge.verdict import Anomaly, Decision, Reason, Verdict


@dataclass(frozen=True)
class CheckInput:
    """What every check may look at."""

    history: MetricHistory
    keys: RunKeys
    policy: JudgePolicy
    context: RunContext | None
    excused: Any  # fp16 skipped steps (checks_finite.fp16_skipped_steps)
    warned: Any = frozenset()  # ... and the steps the library warned of an inf/nan or overflow (optimizer metrics)


# The checks, in the documented order (the first STOP wins, else the first WAIT). A new check is one function
# in a judge/checks_*.py module and one line here (a new module: its import above too; tests/test_judge_check_added.py).
CHECKS: list[tuple[str, Callable[[CheckInput], Finding | None]]] = [
    ("loss_scale_collapse", lambda c: checks_scale.check_loss_scale_collapse(c.history, c.keys, c.policy)),
    ("non_finite_loss", lambda c: checks_finite.check_nonfinite_loss(c.history, c.keys, c.policy, c.excused,
                                                                      c.context)),
    ("magnitude_jump", lambda c: checks_strength.check_magnitude_jump(c.history, c.keys, c.policy)),
    ("absurd_loss", lambda c: checks_strength.check_absurd_loss(c.history, c.keys, c.policy)),
    ("any_non_finite", lambda c: checks_anyslot.check_any_nonfinite(c.history, c.keys, c.policy, c.excused,
                                                                    c.context)),
    ("any_explosion", lambda c: checks_anyslot.check_any_explosion(c.history, c.keys, c.policy)),
    ("never_finite", lambda c: checks_nohistory.check_never_finite(c.history, c.keys, c.policy)),
    ("above_chance", lambda c: checks_strength.check_above_chance(c.history, c.keys, c.policy)),
    ("repeated_spikes", lambda c: checks_strength.check_repeated_spikes(c.history, c.keys, c.policy)),
    ("nan_counter", lambda c: checks_finite.check_nan_counter(c.history, c.keys, c.policy)),
    ("nan_warnings", lambda c: checks_anyslot.check_nan_warnings(c.history, c.keys, c.policy)),
    ("non_finite_optimizer", lambda c: checks_finite.check_nonfinite_optimizer_metrics(c.history, c.keys, c.policy,
                                                                                        c.excused | c.warned)),
    ("eval_failing", lambda c: checks_finite.check_eval_failing(c.history, c.keys, c.policy)),
    ("negative_loss", lambda c: checks_sign.check_negative_loss(c.history, c.keys, c.policy)),
    ("loss_trend", lambda c: checks_trend.check_loss_trend(c.history, c.keys, c.policy)),
    ("short_window_jump", lambda c: checks_window.check_short_window_jump(c.history, c.keys, c.policy)),
    ("short_window_grad_jump", lambda c: checks_window.check_short_window_grad_jump(c.history, c.keys, c.policy)),
    ("any_swing", lambda c: checks_swing.check_any_swing(c.history, c.keys, c.policy)),
    ("loss_climb", lambda c: checks_climb.check_loss_climb(c.history, c.keys, c.policy)),
    ("grad_explosion", lambda c: checks_trend.check_grad_explosion(c.history, c.keys, c.policy,
                                                                   c.excused | c.warned)),
    ("lr_schedule", lambda c: checks_schedule.check_lr_schedule(c.history, c.keys, c.policy)),
    ("frozen_model", lambda c: checks_nohistory.check_frozen_model(c.history, c.keys, c.policy)),
    ("lr_at_zero", lambda c: checks_nohistory.check_lr_at_zero(c.history, c.keys, c.policy)),
    ("decibel_chance", lambda c: checks_nohistory.check_decibel_chance(c.history, c.keys, c.policy)),
    ("chance_stuck", lambda c: checks_nohistory.check_chance_stuck(c.history, c.keys, c.policy)),
    ("frozen_loss", lambda c: checks_dead.check_frozen_loss(c.history, c.keys, c.policy)),
    ("zero_signal", lambda c: checks_dead.check_zero_signal(c.history, c.keys, c.policy)),
    ("no_gradient", lambda c: checks_dead.check_no_gradient(c.history, c.keys, c.policy)),
    ("batch_invariant", lambda c: checks_nohistory.check_batch_invariant(c.history, c.keys, c.policy)),
    ("plateau_from_start", lambda c: checks_trend.check_plateau_from_start(c.history, c.keys, c.policy, c.context)),
    ("stagnation", lambda c: checks_stall.check_stagnation(c.history, c.keys, c.policy)),
    ("eval_at_zero", lambda c: checks_dead.check_eval_at_zero(c.history, c.keys, c.policy)),
    ("flat_score", lambda c: checks_dead.check_flat_score(c.history, c.keys, c.policy)),
    ("train_falls_eval_rises", lambda c: checks_swing.check_train_falls_eval_rises(c.history, c.keys, c.policy)),
    ("eval_regressing", lambda c: checks_eval.check_eval_regressing(c.history, c.keys, c.policy)),
    ("stale", lambda c: _check_stale(c.policy, c.context)),
    ("eval_vs_baseline", lambda c: checks_eval.check_eval_vs_baseline(c.history, c.keys, c.policy)),
    ("other_non_finite", lambda c: checks_finite.check_other_nonfinite(c.history, c.keys)),
]


# the checks that read the training loss whichever way it improves; the others take a loss as lower-is-better, and do
# not see a score chosen as the objective (SI-SNR, PSNR: objective.py)
DIRECTION_FREE = frozenset({"loss_scale_collapse", "non_finite_loss", "absurd_loss", "any_non_finite", "any_explosion",
                            "never_finite", "frozen_model", "decibel_chance",
                            "nan_counter", "nan_warnings", "non_finite_optimizer", "eval_failing", "grad_explosion",
                            "lr_schedule", "frozen_loss", "eval_at_zero", "eval_regressing", "stale",
                            "eval_vs_baseline", "other_non_finite"})


def _for(name: str, inputs: CheckInput) -> CheckInput:
    """What check `name` is given: a higher-is-better objective only to the checks that read either direction."""
    if inputs.keys.loss_direction is not Direction.HIGHER_IS_BETTER or name in DIRECTION_FREE:
        return inputs
    return dataclasses.replace(inputs, keys=dataclasses.replace(inputs.keys, train_loss=None))


def _once_each(anomalies: Iterable[Anomaly]) -> tuple[Anomaly, ...]:
    """One anomaly per kind, metric and step: two checks that see the same point (a held jump, a loss beyond any
    real loss) name it once, in the earlier check's words."""
    seen: set[tuple[str, str, int]] = set()
    unique: list[Anomaly] = []
    for anomaly in anomalies:
        if (anomaly.kind, anomaly.metric, anomaly.step) not in seen:
            seen.add((anomaly.kind, anomaly.metric, anomaly.step))
            unique.append(anomaly)
    return tuple(unique)


def decide(
    history: MetricHistory, policy: JudgePolicy | None = None, context: RunContext | None = None
) -> Verdict:
    """The decision on a metric history: CONTINUE, WAIT or STOP with its reason, message and anomalies.
    Pure: the same history, policy and context give the same verdict. The checks run in CHECKS' order."""
    policy = policy or JudgePolicy()
    last_step = history.last_step
    if last_step is None:
        return Verdict(Decision.WAIT, Reason.NO_DATA, "no metric points yet", last_step=None)
    keys = select_keys(history, policy)
    summary = _summary(history, keys, policy)
    crashed = checks_crash.check_crashed(history)
    cause_unknown = checks_crash.cause_unknown(history)
    nothing_to_judge = keys.train_loss is None and not keys.eval_keys and not _has_optimizer_signal(keys)
    # dead or dying: nothing else matters, unless the crash cannot say why (a cut-off traceback) and a check can
    if crashed is not None and crashed.decision is Decision.STOP and (nothing_to_judge or not cause_unknown):
        return Verdict(Decision.STOP, crashed.reason, crashed.message, crashed.anomalies, last_step, summary)
    if nothing_to_judge:
        return _nothing_to_judge(history, policy, crashed, summary)

    excused = checks_scale.fp16_skipped_steps(history, keys)
    inputs = CheckInput(history, keys, policy, context, excused, checks_anyslot.warned_steps(history, keys))
    checks = [check(_for(name, inputs)) for name, check in CHECKS]
    findings = [*checks, crashed] if cause_unknown else [crashed, *checks]
    present = [f for f in findings if f is not None]
    anomalies = _once_each(a for f in present for a in f.anomalies)
    loss_points = len(history.series(keys.train_loss)[0]) if keys.train_loss else 0
    thin = loss_points < policy.min_loss_points

    first = _first_stop_or_wait(present, loss_points if thin and keys.train_loss is not None else None)
    if first is not None:
        decision, reason, message = first
        return Verdict(decision, reason, message, anomalies, last_step, summary)
    if thin and keys.train_loss is not None and not _falling(history, keys, policy):
        return Verdict(
            Decision.WAIT, Reason.TOO_EARLY,
            f"only {loss_points} training-loss points so far; need {policy.min_loss_points}",
            anomalies, last_step, summary,
        )
    if keys.train_loss is None and not keys.eval_keys:  # only optimizer metrics, which look finite: no loss judged
        return _nothing_to_judge(history, policy, None, summary, anomalies)
    if keys.loss_guessed and not keys.eval_keys:  # nothing wrong found, but nothing says the series judged is a loss that learns
        return Verdict(Decision.WAIT, Reason.UNGUARDED,
                       f"no series is named like a loss, and the one judged by what it does shows no learning: "
                       f"{keys.loss_why}; not calling it healthy (name the loss with {unguarded.KEY_FLAG})",
                       anomalies, last_step, summary)
    notes = [f.message for f in present]
    if thin and keys.train_loss is not None:
        notes.append(f"only {loss_points} training-loss points, not rising: trends are judged from "
                     f"{policy.min_loss_points}")
    message = "healthy" + (f" ({'; '.join(notes)})" if notes else "")
    if keys.train_loss is None:
        message += f"; no training loss logged, judged on {keys.key_metric} only"
    return Verdict(Decision.CONTINUE, Reason.HEALTHY, message, anomalies, last_step, summary)


def _nothing_to_judge(history: MetricHistory, policy: JudgePolicy, crashed: Finding | None,
                      summary: dict[str, Any], anomalies: tuple[Anomaly, ...] = ()) -> Verdict:
    """The WAIT of a run that logged no training loss or eval metric (its optimizer metrics, if any, judged finite):
    start-up (too_early) for its first few logged steps, then UNGUARDED, naming the series seen and the option that
    names the loss."""
    last_step = history.last_step
    if crashed is not None:
        return Verdict(Decision.WAIT, crashed.reason, crashed.message, crashed.anomalies, last_step, summary)
    logged = history.keys()
    if _logged_steps(history, logged) < policy.startup_steps_without_loss:
        return Verdict(
            Decision.WAIT, Reason.TOO_EARLY,
            f"no training loss logged yet (start-up; logged so far: {', '.join(logged[:8]) or 'nothing'})",
            anomalies, last_step, summary,
        )
    # logged for a while, still nothing a loss: the run is not guarded, and the fix is to name the loss
    return Verdict(Decision.WAIT, Reason.UNGUARDED,
                   unguarded.unread_message(history, unguarded.KEY_FLAG), anomalies, last_step, summary)


def _first_stop_or_wait(present: list[Finding], thin_loss_points: int | None) -> tuple[Decision, Reason, str] | None:
    """The first STOP in check order, else the first WAIT; None when every finding is a note. With too few
    training-loss points (`thin_loss_points`), a STOP that is not a hard fact becomes a WAIT for more."""
    for finding in present:
        if finding.decision is not Decision.STOP:
            continue
        if thin_loss_points is not None and not finding.hard and finding.reason not in HARD_REASONS:
            return (Decision.WAIT, finding.reason,
                    f"{finding.message} (only {thin_loss_points} training-loss points: waiting for more)")
        return Decision.STOP, finding.reason, finding.message
    for finding in present:
        if finding.decision is Decision.WAIT:
            return Decision.WAIT, finding.reason, finding.message
    return None


# findings that are facts, not trends: a few points are enough evidence
HARD_REASONS = frozenset({
    Reason.NON_FINITE_LOSS, Reason.HIDDEN_NAN, Reason.NON_FINITE_METRIC, Reason.EVAL_FAILING,
    Reason.LOSS_SCALE_COLLAPSE, Reason.CRASHED,
})


def _falling(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> bool:
    """A short loss series that shows nothing wrong: one finite point, or the newest of several within noise (10 %) of
    the first or below it, none at twice it. Too few points for a trend, but no evidence of a problem either: healthy so far."""
    values = history.series(keys.train_loss or "")[1]
    finite = values[np.isfinite(values)]
    if keys.loss_direction is Direction.HIGHER_IS_BETTER:  # a score chosen as the objective: rising is learning
        finite = -finite
    if policy.chance_loss is not None and len(finite) and finite[-1] >= policy.chance_multiple * policy.chance_loss:
        return False  # far above the chance level: waiting for the points that decide it
    if len(finite) < 2:
        return len(finite) == 1  # one finite reading: nothing rises, nothing to compare it with; hard findings decide
    first, size = float(finite[0]), abs(float(finite[0]))  # a loss may be negative (a Dice loss, a log-likelihood)
    return finite[-1] <= first + 0.1 * size and float(np.max(finite)) <= first + size


def _logged_steps(history: MetricHistory, keys: list[str]) -> int:
    """How many distinct steps the run has logged anything at (bounded: only whether it is a few matters)."""
    seen: set[int] = set()
    for key in keys:
        seen.update(history.series(key)[0][-64:].tolist())
    return len(seen)


def _has_optimizer_signal(keys: RunKeys) -> bool:
    return any((keys.grad_norm, keys.nan_counter, keys.loss_scale, keys.lr))


def _check_stale(policy: JudgePolicy, context: RunContext | None) -> Finding | None:
    if context is None or not context.job_live or context.seconds_since_last_point is None:
        return None
    if context.seconds_since_last_point < policy.stale_after_seconds:
        return None
    minutes = context.seconds_since_last_point / 60
    return Finding.wait(
        Reason.STALE,
        f"no new metric point for {minutes:.0f} min while the job is running: the trainer may be hung "
        "or logging elsewhere",
    )


def _summary(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> dict[str, Any]:
    summary: dict[str, Any] = {"keys": {
        "train_loss": keys.train_loss, "key_metric": keys.key_metric, "lr": keys.lr,
        "grad_norm": keys.grad_norm, "loss_scale": keys.loss_scale,
    }, "loss_key": keys.loss_why}
    for label, key in (("train_loss", keys.train_loss), ("lr", keys.lr), ("grad_norm", keys.grad_norm),
                       ("loss_scale", keys.loss_scale)):
        if key:
            steps, values = history.series(key)
            if len(values):
                summary[label] = {"step": int(steps[-1]), "value": _json_float(float(values[-1]))}
    if keys.key_metric:
        steps, values = history.series(keys.key_metric)
        trend = checks_eval.eval_trend(steps, values, keys.directions.get(keys.key_metric, "min"), policy)
        summary["key_metric"] = {"key": keys.key_metric, **{k: _json_float(v) for k, v in trend.items()}}
    return summary


def _json_float(value: Any) -> Any:
    if isinstance(value, float) and not np.isfinite(value):
        return non_finite_text(value)  # the one encoding of core/jsonnum.py
    return value


def describe(verdict: Verdict) -> str:
    """One line for logs: decision, reason and message."""
    return f"{verdict.decision.value} ({verdict.reason.value}) at step {verdict.last_step}: {verdict.message}"


__all__ = ["decide", "describe", "JudgePolicy", "RunContext"]
