"""The x-axis a W&B user sees, applied to the history rows of a `.wandb` log, and media filtering.

Per key, in this order:
  1. `define_metric(name or glob, step_metric=S)` when the log holds its metric record: the key's
     step is the value of S in the same row, else S's last logged value (wandb's step_sync).
  2. else the run's step-like key (`trainer/global_step`, `train/global_step`, `global_step`, `iter`,
     `step`, in that priority), the first one logged with an integral value >= 0 (nanoGPT logs
     `iter` once per eval: its points sit at iterations, not at `_step` 0, 1, 2, ...).
  3. else `_step`: the count of `log()` calls (Axis.LOG_CALL), or the user's own `log(step=...)`
     (Axis.STEP) once `_step` has skipped a value, which counting calls never does.
The counters themselves (step metrics, step-like keys) are the x-axis, never metrics. A value that
goes back on its axis is a rewind (a run resumed from a checkpoint): the newest value wins.

Media (`wandb.Image`, `Table`, `Histogram`, ...) are dicts with a `_type` field; wandb >= 0.19 logs
them flattened (`loss_vis.size`, `loss_vis.width`, `loss_vis._type`, ...). Every key under a path
that ever carried a `_type` is dropped, so an image's byte size is never taken for a loss.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field

from guarded_sbatch.sources.points import STEP_LIKE_KEYS, Axis, MetricPoint, axis_of_counter


@dataclass
class WandbRow:
    """One decoded history record: `_step`, `_timestamp` and every numeric item by its dotted key."""

    step: int | None = None
    timestamp: float = 0.0
    values: dict[str, float] = field(default_factory=dict)
    media_paths: set[str] = field(default_factory=set)  # dotted paths of dicts that carried `_type`


def _is_integral(value: float) -> bool:
    return math.isfinite(value) and value >= 0 and value == int(value)


def _under(key: str, prefixes: set[str]) -> bool:
    if not prefixes:
        return False
    if key in prefixes:
        return True
    parts = key.split(".")
    return any(".".join(parts[:i]) in prefixes for i in range(1, len(parts)))


@dataclass
class WandbAxes:
    """Stateful across the records of one run (and its resumed parts)."""

    step_metrics: dict[str, str] = field(default_factory=dict)  # metric name -> its step metric
    glob_step_metrics: list[tuple[str, str]] = field(default_factory=list)  # (glob, step metric)
    default_key: str | None = None  # the run's step-like key, once seen
    counters: dict[str, float] = field(default_factory=dict)  # last value of every step metric / step key
    media_paths: set[str] = field(default_factory=set)
    user_steps: bool = False  # `_step` skipped a value: the user passes log(step=...)
    step_offset: int = 0  # added to `_step` of a resumed part whose count restarted
    _last_log_step: int | None = None
    _axes: dict[str, Axis] = field(default_factory=dict)
    _step_metric_cache: dict[str, str | None] = field(default_factory=dict)
    _counter_names: set[str] = field(default_factory=lambda: set(STEP_LIKE_KEYS))  # never metrics

    def axes(self) -> dict[str, Axis]:
        return dict(self._axes)

    def define(self, name: str, glob_name: str, step_metric: str) -> None:
        """A metric record: `define_metric(name or glob, step_metric=...)`."""
        if not step_metric:
            return
        if name:
            self.step_metrics[name] = step_metric
        elif glob_name:
            self.glob_step_metrics.append((glob_name, step_metric))
        self._step_metric_cache.clear()
        self._counter_names.add(step_metric)

    def _step_metric_of(self, key: str) -> str | None:
        try:
            return self._step_metric_cache[key]
        except KeyError:
            pass
        found = self.step_metrics.get(key)
        if found is None:
            for glob, step_metric in self.glob_step_metrics:
                if fnmatch.fnmatchcase(key, glob):
                    found = step_metric
                    break
        self._step_metric_cache[key] = found
        return found

    def points(self, row: WandbRow) -> list[MetricPoint]:
        """The row's metrics as points on their axes (nothing when the row carries no position at all)."""
        values, log_step = self._follow_row(row)
        counter_names = self._counter_names
        default_step, default_axis = self._default_position(log_step)
        defined = bool(self.step_metrics or self.glob_step_metrics)
        points: list[MetricPoint] = []
        axes = self._axes
        timestamp = row.timestamp
        for key, value in values.items():
            if key in counter_names:
                continue
            step: int | None
            step_metric = self._step_metric_of(key) if defined else None
            if step_metric is not None and step_metric in self.counters:
                step, axis = int(self.counters[step_metric]), axis_of_counter(step_metric)
            else:
                step, axis = default_step, default_axis
            if step is None:
                continue
            axes[key] = axis
            points.append(MetricPoint(step, timestamp, key, value))
        return points

    def _follow_row(self, row: WandbRow) -> tuple[dict[str, float], int | None]:
        """What the row tells about positions (media keys, the log call's step, counters, the step-like key);
        its values without media, and its log step."""
        if row.media_paths:
            self.media_paths |= row.media_paths
        values = row.values
        if self.media_paths:
            values = {k: v for k, v in values.items() if not _under(k, self.media_paths)}
        log_step = None if row.step is None else row.step + self.step_offset
        if log_step is not None:
            if self._last_log_step is not None and log_step > self._last_log_step + 1:
                self.user_steps = True
            if self._last_log_step is None or log_step > self._last_log_step:
                self._last_log_step = log_step
        for key in self._counter_names.intersection(values):
            if math.isfinite(values[key]):
                self.counters[key] = values[key]
        if self.default_key is None:
            self.default_key = next(
                (k for k in STEP_LIKE_KEYS if k in values and _is_integral(values[k])), None)
        return values, log_step

    def _default_position(self, log_step: int | None) -> tuple[int | None, Axis]:
        """Where a key without a step metric goes: the step-like key's value, else `_step`."""
        if self.default_key is not None and self.default_key in self.counters:
            counter = self.counters[self.default_key]
            if _is_integral(counter):
                return int(counter), axis_of_counter(self.default_key)
        return log_step, Axis.STEP if self.user_steps else Axis.LOG_CALL
