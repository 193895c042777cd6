"""What each check returns, and the robust statistics the checks share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from guarded_sbatch.judge.verdict import Anomaly, Decision, Reason

MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution times this is its standard deviation


@dataclass(frozen=True)
class Finding:
    """One check's conclusion. `decision` None means: a note only (the run may still be healthy)."""

    decision: Decision | None
    reason: Reason
    message: str
    anomalies: tuple[Anomaly, ...] = field(default_factory=tuple)
    hard: bool = False  # strong evidence: decides with any number of training-loss points (ordered_checks.py)

    @classmethod
    def note(cls, reason: Reason, message: str, *anomalies: Anomaly) -> Finding:
        return cls(None, reason, message, tuple(anomalies))

    @classmethod
    def stop(cls, reason: Reason, message: str, *anomalies: Anomaly) -> Finding:
        return cls(Decision.STOP, reason, message, tuple(anomalies))

    @classmethod
    def hard_stop(cls, reason: Reason, message: str, *anomalies: Anomaly) -> Finding:
        """A STOP on strong evidence (an explosion by orders of magnitude, a loss far above chance, a NaN that
        stays): it needs no minimum of points."""
        return cls(Decision.STOP, reason, message, tuple(anomalies), hard=True)

    @classmethod
    def wait(cls, reason: Reason, message: str, *anomalies: Anomaly) -> Finding:
        return cls(Decision.WAIT, reason, message, tuple(anomalies))


def median(values: Any, axis: int | None = None) -> Any:
    """np.median(values, axis) (NaN where a NaN is among the values), bit for bit, from one sort: np.median
    partitions at three places and loads numpy.ma for its NaN check (10 ms), both slow on the many small
    windows the checks take."""
    a = np.asarray(values)
    if axis is None:
        a, axis = a.ravel(), 0
    count = a.shape[axis]
    if count == 0 or a.dtype.kind not in "fiu":
        return np.median(a, axis=axis)
    ordered = np.sort(a, axis=axis)  # NaN last
    as_float = np.float64 if a.dtype.kind in "iu" else a.dtype
    middle = np.take(ordered, (count - 1) // 2, axis=axis).astype(as_float)
    if count % 2 == 0:  # np.mean of the two middle values: their sum, halved
        middle = (middle + np.take(ordered, count // 2, axis=axis).astype(as_float)) / 2
    if a.dtype.kind == "f":
        last = np.take(ordered, -1, axis=axis)
        middle = np.where(np.isnan(last), last, middle)
    return middle if middle.ndim else middle[()]


def typical_spacing(steps: np.ndarray) -> float:
    """Median distance in steps between logged points (1 when unknown)."""
    if len(steps) < 2:
        return 1.0
    gaps = np.diff(steps)
    if gaps.dtype.kind not in "iu":
        return max(1.0, float(median(gaps)))
    # integer steps (the history's): median()'s arithmetic without its array calls (asked ~7 times a poll)
    gaps.sort()
    half = len(gaps) // 2
    middle = float(gaps[half]) if len(gaps) % 2 else (float(gaps[half - 1]) + float(gaps[half])) / 2
    return max(1.0, middle)


def points_in(window_steps: int, steps: np.ndarray, minimum: int = 8, maximum: int = 1024) -> int:
    """How many logged points a window of `window_steps` steps holds, for this series' cadence."""
    return int(min(maximum, max(minimum, round(window_steps / typical_spacing(steps)))))


def fmt(value: float) -> str:
    return f"{value:.4g}"


def window_medians(values: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(index of each window's last point, the windows, their medians) for the w-point windows ending every
    max(1, w // 8) points from the first, and at the newest: a few medians per window are enough to follow a
    series' level, and cheap at every poll."""
    stride = max(1, w // 8)
    end_index = np.arange(w - 1, len(values), stride)
    if end_index[-1] != len(values) - 1:
        end_index = np.append(end_index, len(values) - 1)
    windows = sliding_window_view(values, w)[end_index - (w - 1)]
    return end_index, windows, median(windows, axis=1)
