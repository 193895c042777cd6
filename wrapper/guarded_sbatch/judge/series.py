"""One metric series of the history (judge/history.py): numpy columns of steps, values and wall times, grown in
blocks. An append of later steps costs what the new points cost; anything else is a sorted merge in which the newest
point of a step wins. Arrays handed out (`steps`, `values`, `walls`) are never changed afterwards: growth, merges and
thinning build new buffers."""

from __future__ import annotations

from typing import Any

import numpy as np

_MIN_GROWTH = 16


class Series:
    """One key's points: steps ascending and unique, with their values and wall times."""

    __slots__ = ("_steps", "_values", "_walls", "n", "cache")

    def __init__(self) -> None:
        self._steps = np.empty(0, dtype=np.int64)
        self._values = np.empty(0, dtype=np.float64)
        self._walls = np.empty(0, dtype=np.float64)
        self.n = 0
        self.cache: dict[str, Any] = {}

    @property
    def steps(self) -> np.ndarray:
        return self._steps[: self.n]

    @property
    def values(self) -> np.ndarray:
        return self._values[: self.n]

    @property
    def walls(self) -> np.ndarray:
        return self._walls[: self.n]

    def merge(self, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> None:
        """Add columns (in arrival order: a later duplicate of a step wins)."""
        count = len(steps)
        if count == 0:
            return
        if self.appends(steps):
            self._append(steps, walls, values)
            return
        all_steps = np.concatenate((self.steps, steps))
        order = np.argsort(all_steps, kind="stable")
        sorted_steps = all_steps[order]
        keep = np.empty(len(order), dtype=bool)
        keep[-1] = True
        np.not_equal(sorted_steps[1:], sorted_steps[:-1], out=keep[:-1])  # the last of equal steps is the newest
        chosen = order[keep]
        self._replace(
            all_steps[chosen],
            np.concatenate((self.walls, walls))[chosen],
            np.concatenate((self.values, values))[chosen],
        )

    def appends(self, steps: np.ndarray) -> bool:
        """Whether `steps` only extend the series (strictly increasing, after its last step)."""
        ordered = len(steps) < 2 or bool(np.all(steps[1:] > steps[:-1]))
        return ordered and (self.n == 0 or not len(steps) or steps[0] > self._steps[self.n - 1])

    def _append(self, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> None:
        end = self.n + len(steps)
        if end > len(self._steps):
            capacity = end if not self.n else max(end, self.n + max(_MIN_GROWTH, self.n // 2))
            # new buffers: arrays handed out before keep their (unchanged) content
            self._steps, self._values, self._walls = (_grown(column, self.n, capacity)
                                                      for column in (self._steps, self._values, self._walls))
        self._steps[self.n : end] = steps
        self._values[self.n : end] = values
        self._walls[self.n : end] = walls
        self.n = end

    def _replace(self, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> None:
        # new buffers: arrays handed out before stay as they were
        self._steps, self._values, self._walls = steps, values, walls
        self.n = len(steps)

    def thin(self, keep_after_step: int) -> None:
        """Drop every other finite point at steps <= keep_after_step (the last of them stays)."""
        old_count = int(np.searchsorted(self.steps, keep_after_step, side="right"))  # steps ascend
        if old_count < 3:
            return
        if np.isfinite(self.values[:old_count]).all():  # every old point counts: slices, not masks
            last = slice(old_count - 1, old_count - old_count % 2)  # the last old point, when the step drops it
            self._replace(*(np.concatenate((column[:old_count:2], column[last], column[old_count : self.n]))
                            for column in (self.steps, self.walls, self.values)))
            return
        old = np.nonzero((self.steps <= keep_after_step) & np.isfinite(self.values))[0]
        drop = old[1::2]
        if len(drop) and drop[-1] == old[-1]:
            drop = drop[:-1]
        if not len(drop):
            return
        keep = np.ones(self.n, dtype=bool)
        keep[drop] = False
        self._replace(self.steps[keep], self.walls[keep], self.values[keep])

    def value_at(self, step: int) -> float | None:
        index = int(np.searchsorted(self.steps, step))
        if index < self.n and int(self._steps[index]) == step:
            return float(self._values[index])
        return None


def _grown(column: np.ndarray, used: int, capacity: int) -> np.ndarray:
    grown = np.empty(capacity, dtype=column.dtype)
    grown[:used] = column[:used]
    return grown
