"""A run's pace from the timestamps on its step lines: `2026-03-02 14:01:07 step 10 loss …`, `[14:01:07] iter 10`,
`step 10 | loss 2.3 | 14:01:07`, `{"step": 10, "time": "2026-03-02T14:01:07"}`, `step=10 time=1772460067.2`.

A line counts when it carries both a time of day (with or without its date; a clock without a date that goes back
has passed midnight) or a Unix time, and a step number named as such (`step 10`, `step: 10`, `"step": 10`,
`iter=10`, `[10/500]`). A step that goes back starts the count again (a resumed run): the pace is that of the
last stretch of rising steps, over its first and last stamped lines."""

from __future__ import annotations

import re
from datetime import datetime

DATE_TIME = re.compile(r"(?<!\d)(?:(\d{4}-\d{2}-\d{2})[ T_]|(?<![\d:]))([01]\d|2[0-3]):([0-5]\d):([0-5]\d)"
                       r"(?:[.,](\d+))?(?![\d:])")
UNIX_TIME = re.compile(r"(?<![\d.])(1[5-9]\d{8})(?:\.(\d+))?(?![\d])")
STEP = re.compile(
    r"\b(?:global[_ ]step|step|iter(?:ation)?|it)\b['\"]?\s{0,2}[:=#]?\s{0,2}['\"]?(\d{1,12})(?!\d*[:.]\d)"
    r"|\[(\d{1,12})/\d{1,12}\]", re.IGNORECASE)
MIN_POINTS = 2
DAY_S = 86400.0


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
    stretch: list[tuple[float, int]] = []
    best: list[tuple[float, int]] = []
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
