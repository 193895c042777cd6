"""Evidence in any slot of the training lines, whatever the slot's name (issue 41).

A NaN or a 1e22 sits where the trainer put it: a loss term under a name nobody taught the judge, a score column, an
unnamed `value2`. These checks look at every series except the optimizer's own (learning rate, gradient norm, loss
scale, skip counters: checks_finite.py / checks_scale.py judge those, fp16-aware), timing, throughput, memory and
counters (objective.never_objective), the judged training loss and the evaluations (their own checks):

- non-finite: a series that was finite and is non-finite at its last `nonfinite_loss_points` logged points (not fp16
  skipped steps) is a STOP; at its newest point only, a WAIT (a STOP once time confirms it: RunContext, as for the
  loss); a non-finite value followed by finite ones is a note (a transient NaN that recovered); a series that was
  never finite (a metric the tool prints as `nan` until it is computed) says nothing, unless it is the log's newest
  reading, after every other series (a WAIT: a run that prints that its criterion is not a number, then ends);
- an explosion: a jump by >= 10**jump_orders x the level before it (checks_strength.py), held, to at least
  `explosion_min_value` (numbers that large are no normalised quantity a trainer logs), or any value at or above
  10**absurd_loss_orders;
- the library's own inf/nan warnings (`nan/inf warnings`, counted by the text reader): once is a note; a warning at
  each of the last `nan_warning_streak` logged training steps is a STOP (every step skipped: the run no longer
  trains; an fp16 scale search after the start halves a few dozen times at most).
"""

from __future__ import annotations

import numpy as np

from guarded_sbatch.judge.checks_finite import _held, _hold_seconds, _trailing_streak
from guarded_sbatch.judge.checks_strength import _JUMP_LOOKBACK as _LOOKBACK
from guarded_sbatch.judge.checks_strength import jump_in
from guarded_sbatch.judge.findings import Finding, fmt
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.policy import JudgePolicy, RunContext
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason


def watched_series(history: MetricHistory, keys: RunKeys) -> list[str]:
    """Every series these checks look at (see the module doc; select.py names them once per decision)."""
    return [key for key in keys.watched if key in history]


def check_any_nonfinite(history: MetricHistory, keys: RunKeys, policy: JudgePolicy, excused: set[int],
                        context: RunContext | None) -> Finding | None:
    waiting: Finding | None = None
    for key in watched_series(history, keys):
        steps, values = history.series(key)
        if not len(values) or np.isfinite(values[-1]):
            continue
        bad = ~np.isfinite(values)
        if np.all(bad):
            if waiting is None and _newest_reading(history, key):
                waiting = Finding.wait(
                    Reason.NON_FINITE_METRIC,
                    f"the log's newest reading is non-finite: {key} = {values[-1]} at step {int(steps[-1])}, after "
                    "every other series; watching for the next", Anomaly("nan", key, int(steps[-1]), None,
                                                                          f"{key} non-finite"))
            continue
        counted = bad & ~np.isin(steps, list(excused))
        if not counted[-1]:
            continue
        streak = _trailing_streak(bad)
        onset = int(steps[len(steps) - streak])
        anomaly = Anomaly("nan", key, onset, None, f"{key} non-finite since step {onset}")
        last_finite = float(values[len(values) - streak - 1])
        what = f"{key} is {values[-1]} (after {fmt(last_finite)} at step {int(steps[len(steps) - streak - 1])})"
        if streak >= policy.nonfinite_loss_points:
            return Finding.hard_stop(Reason.NON_FINITE_METRIC,
                                     f"{what} at the last {streak} logged steps, since step {onset}: the model's "
                                     "numbers are non-finite", anomaly)
        held = _held(policy, context)
        if held:
            return Finding.hard_stop(Reason.NON_FINITE_METRIC, f"{what} at step {onset}, {held}", anomaly)
        if waiting is None:
            waiting = Finding.wait(
                Reason.NON_FINITE_METRIC,
                f"{what} at step {onset}; STOP if the next logged step is non-finite too, or if it is still the newest "
                f"point after {_hold_seconds(policy, context):.0f} s while the job runs", anomaly)
    return waiting


def _newest_reading(history: MetricHistory, key: str) -> bool:
    """Whether `key`'s newest point comes after the newest point of every other series (the log's last reading)."""
    last = int(history.series(key)[0][-1])
    return all(k == key or not len(s := history.series(k)[0]) or int(s[-1]) < last for k in history.keys())


def check_any_explosion(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    bound = 10.0 ** policy.absurd_loss_orders
    for key in watched_series(history, keys):
        steps, values = history.series(key)
        tail = np.abs(values[-4 * _LOOKBACK:])  # fmax skips NaN: nothing large among the newest points, no jump
        if not len(values) or not float(np.fmax.reduce(tail)) >= min(bound, policy.explosion_min_value):
            continue
        finite = np.isfinite(values)
        steps, values = steps[finite], np.abs(values[finite])
        if not len(values):
            continue
        if float(values[-1]) >= bound:
            evidence = f"{key} {fmt(float(values[-1]))} at step {int(steps[-1])}"
            return Finding.hard_stop(
                Reason.DIVERGENCE, f"a logged value beyond any real one: {evidence} (strong evidence: >= "
                f"1e{policy.absurd_loss_orders:g}, numbers about to overflow)",
                Anomaly("explosion", key, int(steps[-1]), float(values[-1]), evidence))
        found = jump_in(steps, values, policy)
        if found is None:
            continue
        onset, peak, peak_step, level = found
        if peak < policy.explosion_min_value:
            continue
        evidence = (f"{key} {fmt(peak)} at step {peak_step} after {fmt(level)} (median before step {onset}): "
                    f"x{peak / level:.3g}, {np.log10(peak / level):.1f} orders of magnitude, {fmt(float(values[-1]))} "
                    f"at step {int(steps[-1])}")
        return Finding.hard_stop(
            Reason.DIVERGENCE, f"{key} exploded: {evidence} (strong evidence: >= {policy.jump_orders:g} orders of "
            f"magnitude to >= {fmt(policy.explosion_min_value)}, held, decides with any number of points)",
            Anomaly("explosion", key, onset, peak, evidence))
    return None


def warned_steps(history: MetricHistory, keys: RunKeys) -> set[int]:
    """The steps at which the library warned of an inf/nan or an overflow (the count moved)."""
    if not keys.nan_warnings:
        return set()
    steps, values = history.series(keys.nan_warnings)
    moved = np.diff(values, prepend=0.0) > 0
    return {int(s) for s in steps[moved]}


def check_nan_warnings(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    warned = warned_steps(history, keys)
    if not warned:
        return None
    key = keys.nan_warnings or ""
    training = sorted({int(s) for k in history.keys() if k != key for s in history.series(k)[0]} | warned)
    streak = 0
    for step in reversed(training):
        if step not in warned:
            break
        streak += 1
    first = min(warned)
    if streak >= policy.nan_warning_streak:
        onset = training[len(training) - streak]
        return Finding.hard_stop(
            Reason.NON_FINITE_METRIC,
            f"the training library warned of an inf/nan value (or skipped the step) at each of the last {streak} "
            f"logged steps, since step {onset}: every step is skipped, the run no longer trains",
            Anomaly("nan", key, onset, None, f"{len(warned)} inf/nan warnings"))
    return Finding.note(Reason.NON_FINITE_METRIC,
                        f"the training library warned of an inf/nan value or an overflow {len(warned)} time(s), "
                        f"first at step {first}",
                        Anomaly("nan_warning", key, first, None, f"{len(warned)} inf/nan warnings"))
