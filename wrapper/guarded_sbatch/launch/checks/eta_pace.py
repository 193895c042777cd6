"""A run's pace from the timestamps on its step lines: `2026-03-02 14:01:07 step 10 loss …`, `[14:01:07] iter 10`,
`step 10 | loss 2.3 | 14:01:07`, `{"step": 10, "time": "2026-03-02T14:01:07"}`, `step=10 time=1772460067.2`.

A line counts when it carries both a time of day (with or without its date; a clock without a date that goes back
has passed midnight) or a Unix time, and a step number named as such (`step 10`, `step: 10`, `"step": 10`,
`iter=10`, `[10/500]`). A step that goes back starts the count again (a resumed run): the pace is that of the
last stretch of rising steps, over its first and last stamped lines. A reference run's TensorBoard events give the
same pairs (each scalar's wall time and step), read with the project's own reader, bounded."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from guarded_sbatch.core.numpy_load import import_numpy

DATE_TIME = re.compile(r"(?<!\d)(?:(\d{4}-\d{2}-\d{2})[ T_]|(?<![\d:]))([01]\d|2[0-3]):([0-5]\d):([0-5]\d)"
                       r"(?:[.,](\d+))?(?![\d:])")
UNIX_TIME = re.compile(r"(?<![\d.])(1[5-9]\d{8})(?:\.(\d+))?(?![\d])")
STEP = re.compile(
    r"\b(?:global[_ ]step|step|iter(?:ation)?|it)\b['\"]?\s{0,2}[:=#]?\s{0,2}['\"]?(\d{1,12})(?!\d*[:.]\d)"
    r"|\[(\d{1,12})/\d{1,12}\]", re.IGNORECASE)
MIN_POINTS = 2
DAY_S = 86400.0
MAX_EVENT_POINTS = 200_000  # of a reference's TensorBoard events: the pace needs a stretch, never the whole run


def _stamp(line: str) -> float | None:
    """Seconds of the line's timestamp: from the epoch when it has a date or is a Unix time, else of its day."""
    match = DATE_TIME.search(line)
    if match is not None:
        date, hours, minutes, seconds, fraction = match.groups()
        clock = int(hours) * 3600 + int(minutes) * 60 + int(seconds) + (float(f"0.{fraction}") if fraction else 0.0)
        if date:
            try:
                return datetime.fromisoformat(date).timestamp() + clock
            except ValueError:
                return None
        return -1.0 - clock  # a clock without a date: negative, told apart from the dated ones
    unix = UNIX_TIME.search(line)
    if unix is not None:
        return float(unix.group(1)) + (float(f"0.{unix.group(2)}") if unix.group(2) else 0.0)
    return None


def _step(line: str) -> int | None:
    match = STEP.search(line)
    return int(match.group(1) or match.group(2)) if match is not None else None


def seconds_per_step_from_stamps(text: str) -> tuple[float, int, int] | None:
    """(seconds per step, first step, last step) of the last stretch of rising stamped steps; None without one."""
    return pace_of(_stamped_steps(text))


def _stamped_steps(text: str) -> Iterable[tuple[float, int]]:
    day = 0.0
    last_clock: float | None = None
    for line in text.splitlines():
        if len(line) > 2000:
            continue
        stamp = _stamp(line)
        if stamp is None:
            continue
        step = _step(line)
        if step is None:
            continue
        if stamp < 0:  # a clock without a date: keep it rising over midnight
            clock = -1.0 - stamp
            if last_clock is not None and clock + 60 < last_clock:
                day += DAY_S
            last_clock = clock
            stamp = day + clock
        yield stamp, step


def pace_of(pairs: Iterable[tuple[float, int]]) -> tuple[float, int, int] | None:
    """(seconds per step, first step, last step) over the last stretch of (time, step) pairs rising in both."""
    stretch: list[tuple[float, int]] = []
    best: list[tuple[float, int]] = []
    for stamp, step in pairs:
        if stretch and (step <= stretch[-1][1] or stamp < stretch[-1][0]):
            best = stretch if len(stretch) >= MIN_POINTS else best
            stretch = []
        stretch.append((stamp, step))
    chosen = stretch if len(stretch) >= MIN_POINTS else best
    if len(chosen) < MIN_POINTS:
        return None
    (first_t, first_step), (last_t, last_step) = chosen[0], chosen[-1]
    if last_t <= first_t or last_step <= first_step:
        return None
    return (last_t - first_t) / (last_step - first_step), first_step, last_step


def seconds_per_step_from_events(folders: Iterable[Path]) -> tuple[float, str] | None:
    """A reference run's pace from its TensorBoard events: the wall time and step of its most logged scalar."""
    from guarded_sbatch.sources.base import SourceError  # noqa: PLC0415 - a reference with events only
    from guarded_sbatch.sources.kinds import open_source  # noqa: PLC0415

    import_numpy()  # the reader's, with one OpenBLAS thread (its start-up threads spin on every core)
    for folder in folders:
        try:
            batch = open_source("tensorboard", folder).read_batch(MAX_EVENT_POINTS)
        except (SourceError, OSError):
            continue
        by_key = _timed_steps(batch)
        if not by_key:
            continue
        key = max(by_key, key=lambda k: len(by_key[k]))
        found = pace_of(by_key[key])
        if found is not None:
            return found[0], f"{key} step {found[1]}→{found[2]} wall times in the TensorBoard events of {folder}"
    return None


def _timed_steps(batch: object) -> dict[str, list[tuple[float, int]]]:
    """(wall time, step) pairs per key, in the order written: from the reader's columns (key: steps, wall times,
    values) or its points."""
    by_key: dict[str, list[tuple[float, int]]] = {}
    if isinstance(batch, dict):
        for key, (steps, wall_times, _) in batch.items():
            by_key[str(key)] = [(float(t), int(s)) for t, s in zip(list(wall_times), list(steps)) if t > 0]
    elif isinstance(batch, list):
        for point in batch:
            if point.wall_time > 0:
                by_key.setdefault(point.key, []).append((point.wall_time, point.step))
    return {key: pairs for key, pairs in by_key.items() if pairs}


def last_step_of(text: str) -> int | None:
    """The step named by the last line that names one: a finished run's last logged step."""
    last: int | None = None
    for line in text.splitlines():
        if len(line) <= 2000 and (step := _step(line)) is not None:
            last = step
    return last


def budget_key(values: dict[str, object], last_step: int) -> str | None:
    """The one whole-number config key whose value a finished run ran to: its last logged step, or up to 2 % (a
    logging stride) past it (`iters: 400` beside a log that ends at step 400). None when none or several fit."""
    fits = []
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            continue
        if last_step >= MIN_POINTS and 0 <= value - last_step <= 0.02 * value + 1:
            fits.append(key)
    return fits[0] if len(fits) == 1 else None
