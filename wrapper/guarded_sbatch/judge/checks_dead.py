"""A run that does not train at all: nothing moves, or nothing is learned.

- Zero signal: every logged training loss so far exactly 0.0, with the gradient norm exactly 0.0 beside it, at
  `min_loss_points` points or more: there is nothing to learn from (the labels all masked, the loss detached).
  A loss that reaches about 0 after training (a small data set learned by heart) had non-zero values before.
- A frozen loss: the last `frozen_points` logged losses identical to 4 significant digits or more, above a better
  value the run had before (an average over thousands of samples does not repeat itself while the weights move; a
  best value printed again until it is next computed is no sign), or equal to 1e-4 and at ln(k), the loss of a
  uniform guess over k = 2..20 classes (a classifier stuck at chance). Strong evidence: any number of points.
  A progress bar's postfix redrawn unchanged is not a new reading (sources/textlog.py keeps only changed values).
- The key evaluation at its worst: a higher-is-better key metric exactly 0 at each of its evaluations, two or more,
  never above 0 (a detector that finds nothing, an OCR model that reads nothing): WAIT; STOP at twice
  `eval_zero_points`.
- A per-step score that does not move: a key metric logged at every training step (an RL run's reward) within
  0.5 % over its last `flat_score_points` values while the training loss moves by 30 % or more over the same
  steps: WAIT (the policy may have collapsed to one answer; a few points cannot tell).
"""

from __future__ import annotations

import math

import numpy as np

from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.findings import Finding, fmt
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason

_CHANCE_CLASSES = range(2, 21)
_FROZEN_SPREAD = 1e-4  # relative
_CHANCE_CLOSE = 1e-3  # relative distance to ln(k)
_MIN_DIGITS = 4


def _significant_digits(value: float) -> int:
    digits = f"{abs(value):.12g}".split("e")[0].replace(".", "").lstrip("0").rstrip("0")
    return len(digits)


def check_zero_signal(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    if not keys.train_loss or not keys.grad_norm:
        return None
    steps, values = history.series(keys.train_loss)
    if len(values) < policy.min_loss_points or np.any(values != 0.0):
        return None
    grads = [history.value_at(keys.grad_norm, int(s)) for s in steps]
    if any(g is None or g != 0.0 for g in grads):
        return None
    evidence = (f"{keys.train_loss} and {keys.grad_norm} exactly 0.0 at every one of the {len(values)} logged steps "
                f"({int(steps[0])} to {int(steps[-1])})")
    return Finding.stop(Reason.ZERO_LOSS, f"nothing to learn from: {evidence} (labels all masked, or the loss "
                        "detached from the model?)", Anomaly("zero_loss", keys.train_loss, int(steps[0]), 0.0, evidence))


def check_frozen_loss(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    if not keys.train_loss:
        return None
    steps, values = history.series(keys.train_loss)
    n = policy.frozen_points
    if len(values) < n:
        return None
    recent = values[-n:]
    if not np.all(np.isfinite(recent)) or float(np.min(recent)) <= 0:
        return None
    low, high = float(np.min(recent)), float(np.max(recent))
    if high - low > _FROZEN_SPREAD * high:
        return None
    chance = next((k for k in _CHANCE_CLASSES if abs(high - math.log(k)) <= _CHANCE_CLOSE * math.log(k)), None)
    # identical values that are also the run's best may be a value printed again until it is next computed (a
    # smoothed loss updated every N steps): frozen only above a better value the run had before
    earlier = values[:-n][np.isfinite(values[:-n])]
    identical = (low == high and _significant_digits(high) >= _MIN_DIGITS and len(earlier) > 0
                 and float(np.min(earlier)) < high)
    if chance is None and not identical:
        return None
    what = (f"at {fmt(high)} = ln {chance}, the loss of a uniform guess over {chance} classes" if chance is not None
            else f"at exactly {high!r} each time")
    evidence = f"{keys.train_loss} frozen {what}, at the last {n} logged steps ({int(steps[-n])} to {int(steps[-1])})"
    return Finding.hard_stop(Reason.FROZEN_LOSS, f"the run does not train: {evidence} (strong evidence: an average "
                             "loss does not repeat itself while the weights move)",
                             Anomaly("frozen_loss", keys.train_loss, int(steps[-n]), high, evidence))


def check_eval_at_zero(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    key = keys.key_metric
    if key is None or keys.directions.get(key, "min") != "max":
        return None
    steps, values = history.series(key)
    n = policy.eval_zero_points
    if len(values) < min(2, n) or np.any(values != 0.0):
        return None
    evidence = f"{key} exactly 0 at each of its {len(values)} evaluations (steps {int(steps[0])} to {int(steps[-1])})"
    anomaly = Anomaly("eval_at_zero", key, int(steps[0]), 0.0, evidence)
    if len(values) >= 2 * n:
        return Finding.stop(Reason.EVAL_REGRESSING, f"nothing learned: {evidence}", anomaly)
    return Finding.wait(Reason.EVAL_REGRESSING, f"nothing learned yet: {evidence}; STOP at {2 * n} such evaluations",
                        anomaly)


_FLAT_SCORE = 0.005
_MOVING_LOSS = 0.3


def check_flat_score(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    key, n = keys.key_metric, policy.flat_score_points
    if key is None or not keys.train_loss:
        return None
    steps, values = history.series(key)
    loss_steps, losses = history.series(keys.train_loss)
    if len(values) < n or len(losses) < n or not np.array_equal(steps[-n:], loss_steps[-n:]):
        return None  # not logged at every training step: an evaluation, which may well be flat at its best
    recent, moving = values[-n:], losses[-n:]
    if not (np.all(np.isfinite(recent)) and np.all(np.isfinite(moving))):
        return None
    scale = max(abs(float(np.median(recent))), 1e-12)
    loss_scale = max(float(np.max(np.abs(moving))), 1e-12)
    if float(np.ptp(recent)) > _FLAT_SCORE * scale or float(np.ptp(moving)) < _MOVING_LOSS * loss_scale:
        return None
    evidence = (f"{key} between {fmt(float(np.min(recent)))} and {fmt(float(np.max(recent)))} over the last {n} "
                f"steps ({int(steps[-n])} to {int(steps[-1])}) while {keys.train_loss} moved between "
                f"{fmt(float(np.min(moving)))} and {fmt(float(np.max(moving)))}")
    return Finding.wait(Reason.STAGNATION, f"a per-step score that does not move: {evidence}; collapsed to one answer?",
                        Anomaly("flat_score", key, int(steps[-n]), float(recent[-1]), evidence))


_NO_GRAD_POINTS = 3
_NOT_FALLING = 0.01  # the loss's later half not this much below its earlier half


def check_no_gradient(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """The gradient norm exactly 0.0 at each of the last points (a non-finite one among them counts as no gradient
    either), with a training loss well above 0 that does not fall: no gradient reaches the weights. A gradient norm
    printed as 0 while the loss falls is a placeholder the trainer logs, and a loss at about 0 (an RL objective
    with equal rewards) has nothing to push: neither is judged. STOP from `min_loss_points` points, WAIT before."""
    if not keys.train_loss or not keys.grad_norm:
        return None
    steps, grads = history.series(keys.grad_norm)
    recent = grads[-max(policy.min_loss_points, _NO_GRAD_POINTS):]
    if np.count_nonzero(recent == 0.0) < _NO_GRAD_POINTS or np.any(np.isfinite(recent) & (recent != 0.0)):
        return None
    first_step = int(steps[len(grads) - len(recent)])
    loss_steps, losses = history.series(keys.train_loss)
    losses = losses[(loss_steps >= first_step) & np.isfinite(losses)]
    if len(losses) < _NO_GRAD_POINTS or float(np.min(np.abs(losses))) < 1e-3:
        return None
    half = len(losses) // 2
    if float(np.median(losses[half:])) < (1 - _NOT_FALLING) * float(np.median(losses[:half])):
        return None
    evidence = (f"{keys.grad_norm} exactly 0 (or not finite) at each of its last {len(recent)} points (steps "
                f"{first_step} to {int(steps[-1])}) while {keys.train_loss} stays at about {fmt(float(np.median(losses)))}")
    anomaly = Anomaly("no_gradient", keys.grad_norm, first_step, 0.0, evidence)
    if len(recent) >= policy.min_loss_points:
        return Finding.stop(Reason.FROZEN_LOSS, f"the run does not train: no gradient reaches the weights: {evidence}",
                            anomaly)
    return Finding.wait(Reason.FROZEN_LOSS, f"no gradient reaches the weights yet: {evidence}; STOP at "
                        f"{policy.min_loss_points} such points", anomaly)
