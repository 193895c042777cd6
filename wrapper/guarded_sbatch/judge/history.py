"""The metric history the decision core judges: points per key, sorted by step, de-duplicated.

Columnar: per key, numpy arrays of steps, values and wall times, grown in blocks. Points come in as
MetricPoints (`add`) or as a reader's batches of columns (`add_batches`); a poll whose new steps
all follow the last one is an append (O(new points)), anything else a sorted merge.

A resumed job repeats steps and a reader may deliver a point twice: (key, step) is unique and the
newest point wins. Memory is bounded: past `max_points_per_key` points, the part of a series older
than `full_resolution_steps` behind its last step is thinned to every other point (non-finite
values are always kept, so a NaN is never forgotten). Runs of a few hundred thousand logged steps
stay exact; the checks look mostly at the recent window, which is never thinned.

The number of distinct series is capped too (`max_series`, GUARDED_SBATCH_MAX_SERIES, default
DEFAULT_MAX_SERIES): per-sample or per-layer logging, or a file written to exhaust the watcher, may carry a
million tags. The loss-like series are kept first (training loss and eval metrics, then learning rate and loss
scale, then gradient norms, then the rest): at the cap a new series of a higher rank takes the place of the
newest kept one of a lower rank; the others are counted (`dropped_series`), never stored, and the judge says so.
A series starts with room for what it was given (not a block), so a million one-point series stay small.

Each series also holds a small cache for the checks' trailing statistics (`stats_cache`): the
statistics of a prefix that has not changed are not computed again, so a poll costs what its new
points cost plus a bounded window.

A crash the job printed is not a metric: it is a typed event (sources/points `CrashEvent`, with its `CrashState`),
which a text-log reader hands over beside its points (`take_crashes()`: CONFIRMED when found, DISMISSED once
training went on after it) and the history keeps apart from the metric series (`note_crash`). The watcher
(sidecar/crash_confirm.py) moves an event between PRINTED and CONFIRMED.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from guarded_sbatch.judge.keys import Role, classify_key
from guarded_sbatch.sources.points import CrashEvent, CrashState, MetricPoint
from guarded_sbatch.judge.series import Series


class Reader(Protocol):
    """What the history takes from a metric source (sources/base.py MetricSource has both)."""

    def read_new(self) -> list[MetricPoint]: ...

    def take_crashes(self) -> list[CrashEvent]: ...


DEFAULT_MAX_POINTS_PER_KEY = 50_000
DEFAULT_FULL_RESOLUTION_STEPS = 20_000
DEFAULT_MAX_SERIES = 5_000
MAX_SERIES_ENV = "GUARDED_SBATCH_MAX_SERIES"
DROPPED_NAMES_KEPT = 100_000  # names of dropped series remembered (to count them once); beyond, "at least"
_RANKS = {Role.TRAIN_LOSS: 0, Role.EVAL_METRIC: 0, Role.LEARNING_RATE: 1, Role.LOSS_SCALE: 1, Role.SKIPPED_STEPS: 1,
          Role.GRAD_NORM: 2}
_LOWEST_RANK = 3


def default_max_series() -> int:
    try:
        return max(1, int(os.environ.get(MAX_SERIES_ENV, "") or DEFAULT_MAX_SERIES))
    except ValueError:
        return DEFAULT_MAX_SERIES


def series_rank(key: str) -> int:
    """0 for the loss-like series judged first, up to _LOWEST_RANK for the rest."""
    return _RANKS.get(classify_key(key).role, _LOWEST_RANK)


class MetricHistory:
    """All points seen so far, per metric key."""

    def __init__(
        self,
        *,
        max_points_per_key: int = DEFAULT_MAX_POINTS_PER_KEY,
        full_resolution_steps: int = DEFAULT_FULL_RESOLUTION_STEPS,
        max_series: int | None = None,
    ) -> None:
        self._series: dict[str, Series] = {}
        self._crashes: dict[str, CrashEvent] = {}  # by CrashEvent.key, in the order first seen
        self._max_points_per_key = max_points_per_key
        self._full_resolution_steps = full_resolution_steps
        self._last_wall_time: float | None = None
        self.max_series = default_max_series() if max_series is None else max_series
        self._kept_by_rank: list[list[str]] = [[] for _ in range(_LOWEST_RANK + 1)]
        self._dropped: set[str] = set()
        self.dropped_more = False  # more series were dropped than DROPPED_NAMES_KEPT names remembered

    @property
    def dropped_series(self) -> int:
        """How many distinct series were not kept (at least this many when dropped_more)."""
        return len(self._dropped)

    def cap_message(self) -> str:
        """One line naming the cap when series were dropped ("" when none were)."""
        if not self._dropped:
            return ""
        count = f"{'more than ' if self.dropped_more else ''}{len(self._dropped)}"
        return (f"the run logs more distinct series than the cap of {self.max_series} ({MAX_SERIES_ENV}): {count} "
                "of them not judged (loss, eval, learning rate and grad norm series are judged first)")

    def _admit(self, key: str) -> bool:
        """Whether a new series `key` is kept (making room by dropping a lower-ranked one at the cap)."""
        if key in self._dropped:
            return False
        rank = series_rank(key)
        if len(self._series) >= self.max_series:
            lower = next((r for r in range(_LOWEST_RANK, rank, -1) if self._kept_by_rank[r]), None)
            if lower is None:
                self._drop(key)
                return False
            self._drop(self._kept_by_rank[lower].pop())
        self._kept_by_rank[rank].append(key)
        return True

    def _drop(self, key: str) -> None:
        self._series.pop(key, None)
        if len(self._dropped) < DROPPED_NAMES_KEPT:
            self._dropped.add(key)
        else:
            self.dropped_more = True

    @classmethod
    def from_points(cls, points: Iterable[MetricPoint], **limits: int) -> MetricHistory:
        history = cls(**limits)
        history.add(points)
        return history

    def read_from(self, reader: Reader) -> int:
        """What a reader wrote since its last call: its points, and the crashes it found or saw training go on
        after. Returns how many points it gave."""
        count = self.add(reader.read_new())
        for event in reader.take_crashes():
            self.note_crash(event)
        return count

    def add(self, points: Iterable[MetricPoint]) -> int:
        """Add points; returns how many were given. A repeated (key, step) replaces the older value."""
        return self.add_batches([points])

    def add_batches(self, batches: Iterable[Any], *, newest_by_wall_time: bool = False) -> int:
        """add() of all the batches' points, holding only one batch of point objects at a time (a
        backlog of a million points is kept as arrays, not objects). A series is thinned after each batch
        that extends it, as if the batches had come one poll at a time, so a backlog never sits in memory
        whole. A batch is a sequence of MetricPoints or {key: (steps, wall_times, values)}. With
        newest_by_wall_time, a (key, step) repeated across batches keeps its latest wall time (the later
        on a tie): what the reader that made the batches does inside each one."""
        touched: dict[str, int | None] = {}  # key -> its last step before this call (thinning moves indices)
        collected: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        count = 0
        for batch in batches:
            columns: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
            if isinstance(batch, dict):
                columns = {k: (np.asarray(v[0], dtype=np.int64), np.asarray(v[1], dtype=np.float64),
                               np.asarray(v[2], dtype=np.float64)) for k, v in batch.items()}
            else:
                columns = _columns_of(batch if isinstance(batch, (list, tuple)) else list(batch))
            for name, (steps, walls, values) in columns.items():
                count += len(steps)
                series = self._series.get(name)
                before = touched.setdefault(name, int(series.steps[-1]) if series is not None and series.n else None)
                if name in collected:
                    collected[name].append((steps, walls, values))
                elif not newest_by_wall_time or series is None or series.appends(steps):
                    self._add_one(name, steps, walls, values)
                else:  # a repeat across batches: take back this call's points, settle them at the end
                    first = 0 if before is None else int(np.searchsorted(series.steps, before, side="right"))
                    tail = (series.steps[first:].copy(), series.walls[first:].copy(), series.values[first:].copy())
                    series.n = first
                    collected[name] = [tail, (steps, walls, values)]
        for name, pieces in collected.items():
            steps, walls, values = (np.concatenate([p[i] for p in pieces]) for i in range(3))
            order = np.lexsort((np.arange(len(steps)), walls, steps))
            sorted_steps = steps[order]
            chosen = order[np.append(sorted_steps[1:] != sorted_steps[:-1], True)]
            self._add_one(name, steps[chosen], walls[chosen], values[chosen], thin=False)
        for name in touched:  # thinned once, after all the batches: what one add of them all does
            if name in self._series:  # not a series dropped at the cap
                self._thin_if_full(self._series[name])
        return count

    def _add_one(self, key: str, steps: np.ndarray, walls: np.ndarray, values: np.ndarray, *, thin: bool = True) -> None:
        series = self._series.get(key)
        if series is None:
            if not self._admit(key):
                return
            series = self._series[key] = Series()
        series.merge(steps, walls, values)
        positive = walls[walls > 0]
        if len(positive):
            newest = float(positive.max())
            if self._last_wall_time is None or newest > self._last_wall_time:
                self._last_wall_time = newest
        if thin:
            self._thin_if_full(series)

    def note_crash(self, event: CrashEvent) -> None:
        """A reader's crash event: a new crash, or one training went on after (which keeps the step it was seen at)."""
        known = self._crashes.get(event.key)
        if known is not None and event.state is CrashState.DISMISSED:
            event = dataclasses.replace(event, step=known.step)
        self._crashes[event.key] = event

    def crashes(self) -> list[CrashEvent]:
        """Every crash seen, in the order first seen."""
        return list(self._crashes.values())

    def open_crash(self) -> CrashEvent | None:
        """The latest crash that training did not go on after (the latest step; on a tie the later seen)."""
        found = None
        for event in self._crashes.values():
            if event.state is not CrashState.DISMISSED and (found is None or event.step >= found.step):
                found = event
        return found

    def put_crash(self, event: CrashEvent) -> None:
        """Record a crash event (new, or the same crash in another state)."""
        self._crashes[event.key] = event

    def _thin_if_full(self, series: Series) -> None:
        if series.n > self._max_points_per_key:
            series.thin(int(series.steps[-1]) - self._full_resolution_steps)

    def keys(self) -> list[str]:
        return sorted(self._series)

    def __contains__(self, key: object) -> bool:
        return key in self._series

    def __len__(self) -> int:
        """Points and crash events: a log whose only content is a crash has something to judge."""
        return sum(s.n for s in self._series.values()) + len(self._crashes)

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) sorted by step; empty arrays for an unknown key. Do not modify them."""
        series = self._series.get(key)
        if series is None:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        return series.steps, series.values

    def finite_series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """series(key) without its NaN/inf points (what a trend is read from)."""
        steps, values = self.series(key)
        finite = np.isfinite(values)
        return steps[finite], values[finite]

    def wall_times(self, key: str) -> np.ndarray:
        """Wall times of `key`'s points, in step order (0.0 where a source carries none). Do not modify."""
        series = self._series.get(key)
        return np.empty(0, dtype=np.float64) if series is None else series.walls

    def value_at(self, key: str, step: int) -> float | None:
        series = self._series.get(key)
        return None if series is None else series.value_at(step)

    def stats_cache(self, key: str, label: str) -> dict[str, Any]:
        """A scratch dict kept with `key`'s series, for the checks' incremental statistics. What is
        kept there must check itself against the data it is used with (the series may be thinned)."""
        series = self._series.get(key)
        if series is None:
            return {}
        return series.cache.setdefault(label, {})

    @property
    def last_step(self) -> int | None:
        ends = [int(s._steps[s.n - 1]) for s in self._series.values() if s.n]
        ends += [event.step for event in self._crashes.values()]
        return max(ends) if ends else None

    @property
    def last_wall_time(self) -> float | None:
        """Newest wall time seen (epoch seconds), None when the sources carry none."""
        return self._last_wall_time

    def truncated(self, max_step: int) -> MetricHistory:
        """A copy holding only points at steps <= max_step (for replaying a run as it grew)."""
        copy = MetricHistory(
            max_points_per_key=self._max_points_per_key, full_resolution_steps=self._full_resolution_steps,
            max_series=self.max_series,
        )
        copy._dropped, copy.dropped_more = set(self._dropped), self.dropped_more
        for key, series in self._series.items():
            inside = series.steps <= max_step
            if np.any(inside):
                copy._add_one(key, series.steps[inside], series.walls[inside], series.values[inside])
        copy._crashes = {key: event for key, event in self._crashes.items() if event.step <= max_step}
        return copy


def _columns_of(points: Sequence[MetricPoint]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """{key: (steps, wall_times, values)} in arrival order, keys in first-seen order."""
    if not points:
        return {}
    steps, walls, keys, values = zip(*points)  # transposed at C speed: no Python loop per point
    step_array = np.array(steps, dtype=np.int64)
    wall_array = np.array(walls, dtype=np.float64)
    value_array = np.array(values, dtype=np.float64)
    names = list(dict.fromkeys(keys))
    if len(names) == 1:
        return {names[0]: (step_array, wall_array, value_array)}
    code_of = {name: code for code, name in enumerate(names)}
    codes = np.fromiter(map(code_of.__getitem__, keys), dtype=np.int32, count=len(keys))
    order = np.argsort(codes, kind="stable")  # grouped by key, arrival order kept inside each group
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    columns = {}
    for code, name in enumerate(names):
        chosen = order[bounds[code] : bounds[code + 1]]
        columns[name] = (step_array[chosen], wall_array[chosen], value_array[chosen])
    return columns
