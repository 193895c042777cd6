"""Evidence by strength, not by count: findings strong enough to decide with however few points there are.

- A jump by orders of magnitude: the training loss at >= 10**jump_orders x its level before (the median of the
  points before the jump), reached within `jump_within_points` logged points, 10 x above where the run started,
  and still there. A loss of 1e13 after 2.3 is never noise.
- A loss far above the chance level: at >= `chance_multiple` x the loss of guessing uniformly (`chance_loss`,
  ln(classes) from the run's config), or, when that is not known, >= `first_loss_multiple` x the first logged
  loss (an untrained model's loss is about its chance level), at `chance_points` logged points in a row.
- A loss no model is trained to: a finite training loss at >= 10**absurd_loss_orders (1e30 by default; float32
  ends at 3.4e38) is numbers about to overflow, whatever the loss's scale and however few points there are.
- Memory: big spikes (a point >= `spike_memory_ratio` x the median of the points before it, and 10 x above where
  the run started) are counted over the whole run; `spike_memory_count` of them is a STOP even when each one dropped
  back (a run that keeps spiking by orders of magnitude), one is a note (a warm-up spike).

Each is a function of the history alone, so a restarted watcher says the same. The message says which evidence
decided and how strong it was (orders of magnitude, multiples of the chance level, how many spikes).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.keys import key_words
from guarded_sbatch.judge.findings import Finding, fmt, median
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason

_BEFORE_POINTS = 16  # the level before a point: the median of up to this many points before it
_HEAD_POINTS = 5  # where the run started: the median of its first points
_JUMP_LOOKBACK = 64  # how far back the start of a jump that is still held is looked for
FLOAT32_MAX = float(np.finfo(np.float32).max)  # 3.4e38: where a float32 loss overflows to inf
# a jump or a big spike lands this far above where the run started (the heavy tail of a tiny batch's losses
# reaches back up to about the untrained level, not 10x above it)
_ABOVE_HEAD = 10.0


def _finite_loss(history: MetricHistory, keys: RunKeys) -> tuple[np.ndarray, np.ndarray]:
    if not keys.train_loss:
        return np.empty(0, dtype=np.int64), np.empty(0)
    steps, values = history.series(keys.train_loss)
    finite = np.isfinite(values)
    return steps[finite], values[finite]


def _orders(ratio: float) -> str:
    return f"{math.log10(ratio):.1f} orders of magnitude" if ratio > 0 else "?"


def jump_in(steps: np.ndarray, values: np.ndarray, policy: JudgePolicy) -> tuple[int, float, int, float] | None:
    """(onset step, peak, peak step, level before) of the latest jump by `jump_orders` orders of magnitude, reached
    within `jump_within_points` points, 10 x above where the series started and still held; None when there is none
    (or it came back down since: a spike for the memory check)."""
    n = len(values)
    if n < 2:
        return None
    factor = 10.0 ** policy.jump_orders
    within = policy.jump_within_points
    # the latest onset t (1 <= t < n) whose jump is reached within `within` points and held since; the candidates'
    # levels, heads and peaks taken at once (a poll's cost is bounded by the lookback, not one median per candidate)
    first = max(0, n - _JUMP_LOOKBACK) + 1
    onsets = np.arange(first, n)
    head = _heads(values, first, n)
    peak = values[first:n].copy()
    for offset in range(1, min(within, n - first)):
        np.maximum(peak[: n - first - offset], values[first + offset : n], out=peak[: n - first - offset])
    # the comparisons negated as the loop they replace wrote them (a NaN compares False); the levels before (the
    # costly part) only when some peak is 10 x above the head (never, while a loss falls)
    with np.errstate(over="ignore"):  # a level near the float maximum: the product is inf, the comparison still right
        jumps = ~(head <= 0) & ~(peak < _ABOVE_HEAD * head)
        if not jumps.any():
            return None
        level = _levels_before(values, first, n)
        jumps &= ~(level <= 0) & ~(peak < factor * level)
    if not jumps.any():
        return None
    i = int(np.flatnonzero(jumps)[-1])
    t = int(onsets[i])
    since = values[t:]
    if float(np.min(since)) < factor / 10 * float(level[i]):
        return None
    top = int(np.argmax(since[:within]))
    return int(steps[t]), float(peak[i]), int(steps[t + top]), float(level[i])


def _levels_before(values: np.ndarray, first: int, n: int) -> np.ndarray:
    """median(values[max(0, t - _BEFORE_POINTS) : t]) for t in first..n-1 (the full windows in one sort)."""
    full = max(first, _BEFORE_POINTS)
    short = [float(median(values[max(0, t - _BEFORE_POINTS) : t])) for t in range(first, min(full, n))]
    if full >= n:
        return np.array(short, dtype=np.float64)
    windows = sliding_window_view(values[full - _BEFORE_POINTS : n - 1], _BEFORE_POINTS)
    return np.concatenate([np.array(short, dtype=np.float64), np.asarray(median(windows, axis=1), dtype=np.float64)])


def _heads(values: np.ndarray, first: int, n: int) -> np.ndarray:
    """median(values[: min(_HEAD_POINTS, t)]) for t in first..n-1."""
    out = np.empty(n - first, dtype=np.float64)
    for t in range(first, min(_HEAD_POINTS, n)):
        out[t - first] = float(median(values[:t]))
    if n > max(first, _HEAD_POINTS):
        out[max(first, _HEAD_POINTS) - first :] = float(median(values[:_HEAD_POINTS]))
    return out


def check_magnitude_jump(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """STOP at once on a jump by `jump_orders` orders of magnitude that is still held."""
    steps, values = _finite_loss(history, keys)
    found = jump_in(steps, values, policy)
    if found is None:
        return None
    onset, peak, peak_step, level = found
    t = int(np.searchsorted(steps, onset))
    top = int(np.searchsorted(steps, peak_step)) - t
    before = values[max(0, t - _BEFORE_POINTS) : t]
    evidence = (f"{keys.train_loss} {fmt(peak)} at step {peak_step} after {fmt(level)} (median of the "
                f"{len(before)} points before step {onset}): x{peak / level:.3g}, {_orders(peak / level)} "
                f"within {top + 1} logged point(s), {fmt(float(values[-1]))} at step {int(steps[-1])}")
    return Finding.hard_stop(
        Reason.DIVERGENCE,
        f"training loss exploded: {evidence} (strong evidence: >= {policy.jump_orders:g} orders of magnitude "
        "decides with any number of points)",
        Anomaly("explosion", keys.train_loss or "", onset, peak, evidence),
    )


def check_absurd_loss(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """STOP at once when the newest finite training loss is at or above 10**absurd_loss_orders."""
    steps, values = _finite_loss(history, keys)
    bound = 10.0 ** policy.absurd_loss_orders
    if not len(values) or float(values[-1]) < bound:
        return None
    value, step = float(values[-1]), int(steps[-1])
    evidence = f"{keys.train_loss} {fmt(value)} at step {step}"
    return Finding.hard_stop(
        Reason.DIVERGENCE,
        f"training loss beyond any real loss: {evidence} (strong evidence: >= 1e{policy.absurd_loss_orders:g}, "
        f"{_orders(FLOAT32_MAX / value)} below float32's limit, decides with any number of points)",
        Anomaly("explosion", keys.train_loss or "", step, value, evidence),
    )


def chance_level(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> tuple[float, str] | None:
    """(the level, what it is) to compare the training loss with: the chance loss when known, else the first
    logged loss times first_loss_multiple / chance_multiple (so both read as `chance_multiple` x the level)."""
    if policy.chance_loss is not None and policy.chance_loss > 0:
        return policy.chance_loss, f"the chance level {fmt(policy.chance_loss)} (loss of guessing uniformly)"
    steps, values = _finite_loss(history, keys)
    if not len(values) or values[0] <= 0:
        return None
    return float(values[0]), f"the first logged loss {fmt(float(values[0]))} (step {int(steps[0])})"


_DETECTION_WORDS = frozenset({"box", "bbox", "obj", "dfl", "rpn", "mask", "kpt", "seg", "giou", "iou"})


def _detection_loss(keys: RunKeys) -> bool:
    return any(set(key_words(k)) & _DETECTION_WORDS for k in (keys.train_loss or "", *keys.loss_parts))


def check_above_chance(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """STOP when the last `chance_points` losses are all far above the chance level (or the first logged loss)."""
    steps, values = _finite_loss(history, keys)
    found = chance_level(history, keys, policy)
    if found is None or len(values) < policy.chance_points:
        return None
    level, what = found
    if policy.chance_loss and _detection_loss(keys):
        return None  # a detector's loss (box, objectness, mask terms) is no cross-entropy over the classes
    multiple = policy.chance_multiple if policy.chance_loss else policy.first_loss_multiple
    if policy.chance_loss is None and len(values) <= policy.chance_points:
        return None  # the first loss is the level itself: it takes points after it
    recent = values[-policy.chance_points :]
    if float(np.min(recent)) < multiple * level:
        return None
    above = np.nonzero(values < multiple * level)[0]
    onset = int(steps[above[-1] + 1]) if len(above) else int(steps[0])
    held = len(values) - (int(above[-1]) + 1 if len(above) else 0)
    evidence = (f"{keys.train_loss} {fmt(float(recent[-1]))} at step {int(steps[-1])}, >= {multiple:g} x {what} at "
                f"each of the last {held} logged points since step {onset} (x{float(np.min(recent)) / level:.3g} "
                "at the least)")
    return Finding.hard_stop(
        Reason.DIVERGENCE,
        f"training loss far above chance: {evidence}: worse than guessing (strong evidence: decides with any "
        "number of points)",
        Anomaly("above_chance", keys.train_loss or "", onset, float(recent[-1]), evidence),
    )


def big_spikes(steps: np.ndarray, values: np.ndarray, ratio: float) -> list[tuple[int, float, float]]:
    """(step, peak, level before) of each big spike: a run of points >= ratio x the median of the points before
    its first one, and >= 10 x where the run started. Vectorised: the median is taken only where the minimum before
    allows a spike (median >= min)."""
    n = len(values)
    if n < 3:
        return []
    width = min(_BEFORE_POINTS, n - 1)
    padded = np.concatenate([np.full(width, np.inf), values[:-1]])
    lowest = np.min(sliding_window_view(padded, width), axis=1)  # lowest[i]: min of the points before i
    head = float(median(values[:_HEAD_POINTS]))
    with np.errstate(invalid="ignore", over="ignore"):  # ratio x a huge value is inf: no spike above it
        candidates = np.nonzero((values >= ratio * lowest) & (lowest > 0) & (values >= _ABOVE_HEAD * head))[0]
    spikes: list[tuple[int, float, float]] = []
    last_index = -2
    for i in candidates[candidates >= 2].tolist():
        level = float(median(values[max(0, i - _BEFORE_POINTS) : i]))
        if level <= 0 or values[i] < ratio * level:
            continue
        if i == last_index + 1 and spikes:  # the same episode: keep its peak
            step, peak, before = spikes[-1]
            if values[i] > peak:
                spikes[-1] = (step, float(values[i]), before)
        else:
            spikes.append((int(steps[i]), float(values[i]), level))
        last_index = i
    return spikes


def check_repeated_spikes(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """Spikes by orders of magnitude counted over the run: `spike_memory_count` of them is a STOP; fewer a note."""
    steps, values = _finite_loss(history, keys)
    spikes = big_spikes(steps, values, policy.spike_memory_ratio)
    if not spikes:
        return None
    listed = ", ".join(f"{fmt(peak)} at step {step} (x{peak / level:.3g})" for step, peak, level in spikes[-5:])
    anomalies = [Anomaly("big_spike", keys.train_loss or "", step, peak,
                         f"{fmt(peak)} after {fmt(level)}: {_orders(peak / level)}") for step, peak, level in spikes[-5:]]
    if len(spikes) >= policy.spike_memory_count:
        return Finding.hard_stop(
            Reason.LOSS_SPIKE,
            f"training loss keeps spiking by orders of magnitude: {len(spikes)} spikes of >= "
            f"{policy.spike_memory_ratio:g} x the level before them over the run ({listed}), even where it came back "
            f"down (strong evidence: {policy.spike_memory_count} such spikes decide)",
            *anomalies,
        )
    return Finding.note(Reason.LOSS_SPIKE, f"{len(spikes)} big loss spike(s) over the run: {listed}",
                        *anomalies)

