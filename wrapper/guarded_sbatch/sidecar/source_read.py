"""One source's part of a poll: its new points into its history (in bounded batches, sanitised on the way in),
the crashes its job printed beside them, and every failure as one line; the source set (source_set.py) reads each
of its sources through this."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.sources.points import sanitize_points
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.sources.base import MetricSource
from guarded_sbatch.sources.files import OUT_OF_MEMORY


def out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or OUT_OF_MEMORY in str(exc)


def one_line(exc: BaseException, describe: object = None) -> str:
    """`source: error` in one line, whatever the error (a message with newlines is folded)."""
    where = ""
    if callable(describe):
        try:
            where = f"{describe()}: "
        except Exception:  # noqa: BLE001
            where = ""
    text = " ".join((str(exc) if isinstance(exc, GuardedError) else f"{type(exc).__name__}: {exc}").split())
    if where and text.startswith(where):
        where = ""  # the reader named itself already
    return (where + text)[:500]


_BATCH_POINTS = 100_000


def read_into(history: MetricHistory, source: MetricSource, failures: list[Exception], notes: list[str]) -> int:
    """The source's new points into its history (a backlog, from a restarted watcher or a long run, in bounded
    batches kept as arrays), then the crashes the job printed, as events beside them; how many points came."""
    try:
        added = history.add_batches(_batches(source, failures, notes), newest_by_wall_time=source.batched)
    except Exception as exc:  # noqa: BLE001 - a value the history cannot hold: name it, go on
        failures.append(exc)
        added = 0
    for event in source.take_crashes():
        history.note_crash(event)
    return added


def _batches(source: MetricSource, failures: list[Exception], notes: list[str]) -> Iterator[Any]:
    """The source's new points, in batches where the reader can stop early (TensorBoard); a read
    error ends the batches and is put in failures (what was read before it is kept). Point lists are
    sanitised on the way in (steps outside ±2**53 dropped, values beyond float range made ±inf)."""
    batched = source.batched
    while True:
        try:
            points = source.read_batch(_BATCH_POINTS)  # TensorBoard: numpy columns, no object per point
            dropped: list[str] = []
            if not batched and not source.points_sanitized:
                points, dropped = sanitize_points(points)
        except Exception as exc:  # noqa: BLE001 - one source's failure is a WAIT, never a crash
            failures.append(exc)
            return
        notes.extend([*source.take_notes(), *dropped])  # the reader's own sanitising, then ours
        if not points:
            return
        yield points
        if not batched:
            return


def unreachable_path(source: MetricSource, *, had_data: bool) -> str:
    """Why a file-based source's path cannot be read now ("" when it can, or it has no path).
    A path not there yet is normal before the trainer's first write; gone after data came, it is not."""
    path = source.path
    if path is None:
        return ""
    if not os.path.lexists(path):
        return "path not found (moved or deleted?)" if had_data else ""
    mode = os.R_OK | (os.X_OK if path.is_dir() else 0)
    if not os.access(path, mode):
        return "permission denied"
    return ""
