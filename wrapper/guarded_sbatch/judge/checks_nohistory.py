"""Strength without history: evidence that needs no earlier level, so a log that starts mid-run (a paste, a cut or
rotated log, a sidecar started late) is judged for what it shows (issue 41). Each decides with any number of points.

- A frozen model: every training-loss series the run logs (two or more) repeats its value exactly at each of its last
  `frozen_all_points` logged points, one of them printed to 4 significant digits or more (a loss term printed again
  until it is next computed repeats alone; all of them together is weights that do not move; a lone loss repeating
  itself is left to checks_dead.py, which asks for an earlier better value or a chance level); or the loss moved by
  less than `frozen_rel` (relative) between its last two logged values while it did move (different values, printed
  to 7 digits or more: a reprint is exactly equal, an average over many samples that changes in its seventh digit
  comes from a model that no longer changes). Not once the LR has decayed to a tenth of its peak (a schedule's end).
- A series never finite: a non-finite value at every one of the last `nonfinite_loss_points` (and at least 3) points of
  a series logged as densely as the training lines, never finite in the log (a log that starts once the run is broken).
  Not the optimizer's own series, timing or counters, nor an evaluation (a metric printed `nan` until it is computed
  is an evaluation's).
- A learning rate at zero: the LR logged as exactly 0, or held at a tiny value (at most `tiny_lr`, within a factor 2),
  at each of its last `lr_zero_points` points (at least) while the training loss did not fall since (the median of the
  second half of those losses not 5 % below the first half's): nothing trains. A schedule that ends at 0 logs it once,
  at its last step, and its tail falls by orders of magnitude (not held); a tiny LR under which the loss falls (a summed
  loss) trains.
- A classifier at its chance level: the trailing stretch of losses, at least `chance_stuck_points` of them spanning
  `chance_stuck_steps` steps or more and starting after the run's first steps, all within `chance_stuck_tolerance`
  (relative) of ln k for a whole k >= 2 for which the ln grid is coarser than that (1 / (k ln k) >= 2 x the
  tolerance: beyond, any level is near some ln k): a model that outputs the uniform guess on every batch (its loss
  does not even vary with the batch).
- A loss that does not vary with the batch (a WAIT, not a STOP): its last `batch_spread_points` values within
  `batch_spread_max` of their median while they still change: per-batch losses of a model that learns vary by a per
  cent or more; a model whose output does not depend on its input does not (a running
  average late in a long epoch may not either, hence only a WAIT). Not once the LR has decayed to a tenth of its peak.
- A decibel score at its chance level: a signal-to-noise objective (SNR, SI-SNR, SDR) within `db_chance_band` dB of
  0 dB (the output no better than its input mixture) at each of its last `chance_stuck_points` logged points, after
  being further from it at its first (the run moved to chance, it did not start there) or for all of a run of at
  least twice that many points.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from guarded_sbatch.judge.checks_anyslot import watched_series
from guarded_sbatch.judge.checks_dead import _significant_digits
from guarded_sbatch.judge.checks_stall import _lr_decayed
from guarded_sbatch.judge.findings import Finding, fmt, median
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.objective import is_decibel
from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason

_MIN_DIGITS = 4
_NEAR_DIGITS = 7


def check_frozen_model(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    if not keys.train_loss or _lr_decayed(history, keys.lr):
        return None  # the end of a decayed schedule: a loss that stops moving has converged
    n = policy.frozen_all_points
    losses = [keys.train_loss, *keys.loss_parts]
    frozen: list[tuple[str, float]] = []
    for key in losses:
        steps, values = history.series(key)
        recent = values[-n:]
        if len(values) < n or not np.all(np.isfinite(recent)) or not np.all(recent == recent[0]):
            break
        frozen.append((key, float(recent[0])))
    else:
        if len(frozen) >= 2 and any(_significant_digits(v) >= _MIN_DIGITS for _, v in frozen):
            steps = history.series(keys.train_loss)[0]
            shown = ", ".join(f"{k} = {v!r}" for k, v in frozen[:4])
            evidence = (f"every training-loss series repeats its value exactly at each of its last {n} logged points "
                        f"({shown}; steps {int(steps[-n])} to {int(steps[-1])})")
            return Finding.hard_stop(Reason.FROZEN_LOSS, f"the model does not train: {evidence} (strong evidence: "
                                     "losses computed on new batches do not repeat themselves while the weights move)",
                                     Anomaly("frozen_loss", keys.train_loss, int(steps[-n]), frozen[0][1], evidence))
    steps, values = history.series(keys.train_loss)
    if len(values) < 2 or not np.all(np.isfinite(values[-2:])):
        return None
    a, b = float(values[-2]), float(values[-1])
    if a == b or min(_significant_digits(a), _significant_digits(b)) < _NEAR_DIGITS:
        return None
    if abs(a - b) > policy.frozen_rel * max(abs(a), abs(b)):
        return None
    evidence = (f"{keys.train_loss} {a!r} at step {int(steps[-2])}, {b!r} at step {int(steps[-1])}: it moved by "
                f"{abs(a - b) / max(abs(a), abs(b)):.1g} of itself")
    return Finding.hard_stop(Reason.FROZEN_LOSS, f"the model does not train: {evidence} (strong evidence: a loss "
                             f"recomputed that changes by less than {policy.frozen_rel:g} of itself comes from weights "
                             "that no longer change)",
                             Anomaly("frozen_loss", keys.train_loss, int(steps[-2]), b, evidence))


def check_never_finite(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    densest = max((len(history.series(k)[0]) for k in history.keys()), default=0)
    candidates = watched_series(history, keys) + ([keys.train_loss] if keys.train_loss else [])
    for key in candidates:
        steps, values = history.series(key)
        n = len(values)
        if n < max(3, policy.nonfinite_loss_points) or n < densest / 2 or np.any(np.isfinite(values)):
            continue
        evidence = f"{key} is {values[-1]} at every one of its {n} logged points (steps {int(steps[0])} to {int(steps[-1])})"
        return Finding.hard_stop(Reason.NON_FINITE_METRIC, f"{evidence}: never a finite value, the run is broken",
                                 Anomaly("nan", key, int(steps[0]), None, evidence))
    return None


def check_lr_at_zero(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    if not keys.lr or not keys.train_loss:
        return None
    steps, values = history.series(keys.lr)
    n = policy.lr_zero_points
    low = float(np.min(values[-n:])) if len(values) >= n else -1.0
    if len(values) < n or not (0.0 <= low and float(np.max(values[-n:])) <= min(policy.tiny_lr, 2 * low)):
        return None  # not a tiny LR held constant (a schedule's tail falls by orders of magnitude: not held)
    nonzero = np.nonzero(~((values >= low) & (values <= max(2 * low, 0.0))))[0]
    zero_since = int(steps[nonzero[-1] + 1]) if len(nonzero) else int(steps[0])
    loss_steps, losses = history.finite_series(keys.train_loss)
    during = losses[loss_steps >= zero_since]
    if len(during) < 3:
        return None
    half = max(1, len(during) // 2)
    head, tail = float(median(during[:half])), float(median(during[-half:]))
    if tail < head - 0.05 * abs(head):
        return None  # the loss still falls: not what an LR of zero gives
    zeros = int(np.count_nonzero(steps >= zero_since))
    what = "exactly 0" if low == 0.0 else f"at {fmt(low)} (at most {policy.tiny_lr:g})"
    evidence = (f"{keys.lr} {what} at each of its logged points since step {zero_since} ({zeros} of them) "
                f"while {keys.train_loss} went from {fmt(head)} to {fmt(tail)} (medians of the first and last halves)")
    return Finding.hard_stop(Reason.LR_SCHEDULE, f"the learning rate is (about) zero: {evidence}: nothing trains",
                             Anomaly("lr_zero", keys.lr, zero_since, 0.0, evidence))


@functools.lru_cache(maxsize=8)
def _chance_classes(tolerance: float) -> tuple[int, ...]:
    """Every k >= 2 whose ln k is told apart from ln(k + 1) at this tolerance (the same for every poll: kept)."""
    return tuple(k for k in range(2, 10_000) if 1.0 / (k * math.log(k)) >= 2 * tolerance)


def check_chance_stuck(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    if not keys.train_loss:
        return None
    steps, values = history.finite_series(keys.train_loss)
    n, tol = policy.chance_stuck_points, policy.chance_stuck_tolerance
    if len(values) < n:
        return None
    level = float(median(values[-n:]))
    found = next((k for k in _chance_classes(tol) if abs(level - math.log(k)) <= tol * math.log(k)), None)
    if found is None:
        return None
    away = np.nonzero(np.abs(values - math.log(found)) > tol * math.log(found))[0]
    start = int(away[-1]) + 1 if len(away) else 0  # the trailing stretch at ln k
    if len(values) - start < n or int(steps[-1]) - int(steps[start]) < policy.chance_stuck_steps:
        return None
    if int(steps[start]) <= policy.plateau_max_first_step:
        return None  # an untrained classifier starts there: only later is it stuck
    recent = values[start:]
    n = len(recent)
    evidence = (f"{keys.train_loss} between {fmt(float(np.min(recent)))} and {fmt(float(np.max(recent)))} at each of its "
                f"last {n} logged points (steps {int(steps[-n])} to {int(steps[-1])}): ln {found} = "
                f"{fmt(math.log(found))}, the loss of a uniform guess over {found} classes")
    return Finding.hard_stop(Reason.PLATEAU_FROM_START, f"a classifier still at its chance level: {evidence} (strong "
                             "evidence: the loss does not even vary with the batch, the output is the uniform guess)",
                             Anomaly("plateau", keys.train_loss, int(steps[-n]), float(recent[-1]), evidence))


def check_batch_invariant(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """WAIT: the last `batch_spread_points` losses all within `batch_spread_max` of
    their median while they still change (from one point to the next at least half the time: not one value printed
    again), up and down (a loss that only falls or only rises in that band is a smoothed curve still moving)."""
    if not keys.train_loss or _lr_decayed(history, keys.lr):
        return None  # the end of a decayed schedule: a loss that stops moving has converged
    steps, values = history.finite_series(keys.train_loss)
    n = policy.batch_spread_points
    if len(values) < n:
        return None
    recent = values[-n:]
    level = abs(float(median(recent)))
    spread = float(np.ptp(recent))
    steps_between = np.diff(recent)
    if level == 0 or spread > policy.batch_spread_max * level or np.count_nonzero(steps_between) < (n - 1) / 2:
        return None
    if np.all(steps_between <= 0) or np.all(steps_between >= 0):
        return None  # one way all along: a smoothed loss (a running mean, a synthetic curve) still moving, not batch noise
    evidence = (f"{keys.train_loss} between {fmt(float(np.min(recent)))} and {fmt(float(np.max(recent)))} at each of its "
                f"last {n} logged points (steps {int(steps[-n])} to {int(steps[-1])}): {spread / level:.2%} of its level")
    return Finding.wait(Reason.STAGNATION, f"the loss does not vary with the batch: {evidence}; a model whose output "
                        "no longer depends on its input (or a running average late in an epoch): watching",
                        Anomaly("stagnation", keys.train_loss, int(steps[-n]), float(recent[-1]), evidence))


def check_decibel_chance(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    key = keys.train_loss
    if not key or not is_decibel(key):
        return None
    steps, values = history.finite_series(key)
    n = policy.chance_stuck_points
    if len(values) < n:
        return None
    band = policy.db_chance_band
    recent = values[-n:]
    if float(np.max(np.abs(recent))) > band:
        return None
    moved_there = float(np.max(np.abs(values[: max(1, len(values) - n)]))) > band
    if not moved_there and len(values) < 2 * n:
        return None
    evidence = (f"{key} between {fmt(float(np.min(recent)))} and {fmt(float(np.max(recent)))} dB at each of its last {n} "
                f"logged points (steps {int(steps[-n])} to {int(steps[-1])}), after {fmt(float(values[0]))} at step "
                f"{int(steps[0])}")
    return Finding.hard_stop(Reason.PLATEAU_FROM_START, f"stuck at the chance level of a decibel score: {evidence}: "
                             f"within {band:g} dB of 0 dB, the output is no better than its input",
                             Anomaly("plateau", key, int(steps[-n]), float(recent[-1]), evidence))
