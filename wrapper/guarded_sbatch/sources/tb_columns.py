"""The points a TensorBoard read collects, per key as numpy columns (steps, wall times, values, arrival order):
what sources/tb_records.py decodes into, and how sources/tensorboard.py hands them over (columns for the
sidecar's history, MetricPoint objects for read_new)."""

from __future__ import annotations

import numpy as np

from guarded_sbatch.sources.points import MetricPoint

_Columns = tuple[np.ndarray, np.ndarray, np.ndarray]


class ColumnSink:
    """Points collected per key as arrays (steps, wall times, values, arrival order); len() counts the points."""

    def __init__(self) -> None:
        self.parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, key: str, order: np.ndarray, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> None:
        self.parts.setdefault(key, []).append((order, steps, walls, values))
        self.count += len(steps)

    def _joined(self) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        out = {}
        for key, pieces in self.parts.items():
            order, steps, walls, values = pieces[0] if len(pieces) == 1 else \
                (np.concatenate([p[i] for p in pieces]) for i in range(4))
            if len(order) > 1 and np.any(order[1:] < order[:-1]):  # decoded both ways: back to arrival order
                by_arrival = np.argsort(order, kind="stable")
                order, steps, walls, values = order[by_arrival], steps[by_arrival], walls[by_arrival], values[by_arrival]
            out[key] = (order, steps, walls, values)
        return dict(sorted(out.items(), key=lambda item: int(item[1][0][0])))  # keys in order of first arrival

    def columns(self, *, newest_by_wall_time: bool) -> dict[str, _Columns]:
        """{key: (steps, walls, values)} in arrival order; with newest_by_wall_time one point per step, the one with
        the latest wall time (the later on a tie), as sources.points.newest_per_key_step chooses."""
        out = {}
        for key, (_, steps, walls, values) in self._joined().items():
            if newest_by_wall_time:
                order = np.lexsort((np.arange(len(steps)), walls, steps))
                sorted_steps = steps[order]
                chosen = np.sort(order[np.append(sorted_steps[1:] != sorted_steps[:-1], True)])
                steps, walls, values = steps[chosen], walls[chosen], values[chosen]
            out[key] = (steps, walls, values)
        return out

    def points(self) -> list[MetricPoint]:
        """Every point in arrival order."""
        joined = self._joined()
        if not joined:
            return []
        names = list(joined)
        arrival = np.argsort(np.concatenate([columns[0] for columns in joined.values()]), kind="stable")
        which = np.concatenate([np.full(len(columns[0]), i) for i, columns in enumerate(joined.values())])[arrival]
        steps, walls, values = (np.concatenate([columns[i] for columns in joined.values()])[arrival].tolist()
                                for i in (1, 2, 3))
        make = tuple.__new__  # the object MetricPoint(...) builds, without the named tuple's Python-level __new__
        return [make(MetricPoint, (s, w, names[k], v)) for s, w, k, v in zip(steps, walls, which.tolist(), values)]
