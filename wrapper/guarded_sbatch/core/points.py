"""The point model every source yields and the judge reads."""

from __future__ import annotations

from typing import NamedTuple


class MetricPoint(NamedTuple):
    """One logged value. NaN and Inf are kept as they are. A named tuple: a million of them are
    built per second by the TensorBoard reader, and a tuple is the cheapest immutable record."""

    step: int
    wall_time: float  # epoch seconds; 0.0 when the source has none
    key: str
    value: float


def newest_per_key_step(points: list[MetricPoint]) -> list[MetricPoint]:
    """De-duplicate by (key, step): the newest value wins (latest wall time; on a tie, the later one).

    A resumed job repeats steps it had already logged. Order of first appearance is kept.
    """
    chosen: dict[tuple[str, int], int] = {}
    kept: list[MetricPoint] = []
    for point in points:
        slot = chosen.get((point.key, point.step))
        if slot is None:
            chosen[(point.key, point.step)] = len(kept)
            kept.append(point)
        elif point.wall_time >= kept[slot].wall_time:
            kept[slot] = point
    return kept


def merge_into_history(history: dict[str, dict[int, MetricPoint]], points: list[MetricPoint]) -> None:
    """Fold a batch from read_new() into a per-key, per-step history (repeated steps replace older ones).

    Sources report a repeated (key, step) again when a later read brings a newer value for it.
    """
    for point in points:
        per_step = history.setdefault(point.key, {})
        previous = per_step.get(point.step)
        if previous is None or point.wall_time >= previous.wall_time:
            per_step[point.step] = point
