"""The metric history the decision core judges: points per key, sorted by step, de-duplicated.

A resumed job repeats steps and a reader may deliver a point twice: (key, step) is unique and the
newest point wins. Memory is bounded: past `max_points_per_key` points, the part of a series older
than `full_resolution_steps` behind its last step is thinned to every other point (non-finite
values are always kept, so a NaN is never forgotten). Runs of a few hundred thousand logged steps
stay exact; the checks look mostly at the recent window, which is never thinned.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from guarded_sbatch.core.points import MetricPoint

DEFAULT_MAX_POINTS_PER_KEY = 50_000
DEFAULT_FULL_RESOLUTION_STEPS = 20_000


class _Series:
    __slots__ = ("values_by_step", "wall_by_step", "_sorted_cache")

    def __init__(self) -> None:
        self.values_by_step: dict[int, float] = {}
        self.wall_by_step: dict[int, float] = {}
        self._sorted_cache: tuple[np.ndarray, np.ndarray] | None = None

    def put(self, point: MetricPoint) -> None:
        self.values_by_step[point.step] = float(point.value)
        self.wall_by_step[point.step] = float(point.wall_time)
        self._sorted_cache = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._sorted_cache is None:
            steps = np.fromiter(sorted(self.values_by_step), dtype=np.int64, count=len(self.values_by_step))
            values = np.fromiter(
                (self.values_by_step[int(s)] for s in steps), dtype=np.float64, count=len(steps)
            )
            self._sorted_cache = (steps, values)
        return self._sorted_cache

    def thin(self, keep_after_step: int) -> None:
        """Drop every other finite point at steps <= keep_after_step."""
        steps, values = self.arrays()
        old = [int(s) for s, v in zip(steps, values) if s <= keep_after_step and math.isfinite(v)]
        for position, step in enumerate(old):
            if position % 2 == 1 and position != len(old) - 1:
                del self.values_by_step[step]
                self.wall_by_step.pop(step, None)
        self._sorted_cache = None


class MetricHistory:
    """All points seen so far, per metric key."""

    def __init__(
        self,
        *,
        max_points_per_key: int = DEFAULT_MAX_POINTS_PER_KEY,
        full_resolution_steps: int = DEFAULT_FULL_RESOLUTION_STEPS,
    ) -> None:
        self._series: dict[str, _Series] = {}
        self._max_points_per_key = max_points_per_key
        self._full_resolution_steps = full_resolution_steps
        self._last_wall_time: float | None = None

    @classmethod
    def from_points(cls, points: Iterable[MetricPoint], **limits: int) -> MetricHistory:
        history = cls(**limits)
        history.add(points)
        return history

    def add(self, points: Iterable[MetricPoint]) -> int:
        """Add points; returns how many were given. A repeated (key, step) replaces the older value."""
        touched: set[str] = set()
        count = 0
        for point in points:
            series = self._series.get(point.key)
            if series is None:
                series = self._series[point.key] = _Series()
            series.put(point)
            touched.add(point.key)
            count += 1
            if point.wall_time > 0 and (self._last_wall_time is None or point.wall_time > self._last_wall_time):
                self._last_wall_time = point.wall_time
        for key in touched:
            series = self._series[key]
            if len(series.values_by_step) > self._max_points_per_key:
                last = max(series.values_by_step)
                series.thin(last - self._full_resolution_steps)
        return count

    def keys(self) -> list[str]:
        return sorted(self._series)

    def __contains__(self, key: object) -> bool:
        return key in self._series

    def __len__(self) -> int:
        return sum(len(s.values_by_step) for s in self._series.values())

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) sorted by step; empty arrays for an unknown key. Do not modify them."""
        series = self._series.get(key)
        if series is None:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        return series.arrays()

    def value_at(self, key: str, step: int) -> float | None:
        series = self._series.get(key)
        return None if series is None else series.values_by_step.get(step)

    @property
    def last_step(self) -> int | None:
        if not self._series:
            return None
        return max(max(s.values_by_step) for s in self._series.values() if s.values_by_step)

    @property
    def last_wall_time(self) -> float | None:
        """Newest wall time seen (epoch seconds), None when the sources carry none."""
        return self._last_wall_time

    def truncated(self, max_step: int) -> MetricHistory:
        """A copy holding only points at steps <= max_step (for replaying a run as it grew)."""
        copy = MetricHistory(
            max_points_per_key=self._max_points_per_key, full_resolution_steps=self._full_resolution_steps
        )
        for key, series in self._series.items():
            copy.add(
                MetricPoint(step, series.wall_by_step.get(step, 0.0), key, value)
                for step, value in series.values_by_step.items()
                if step <= max_step
            )
        return copy
