"""Quiet hours: the config's `quiet_hours` entries ("22:00-07:00", "Mon-Fri 12:00-13:00") as daily windows on some
weekdays, and whether a moment falls in one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time
from pathlib import Path

from guarded_sbatch.core.errors import UsageError

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
QUIET_ENTRY = re.compile(r"^(?:(?P<days>[A-Za-z,\-]+)\s+)?(?P<start>\d{1,2}:\d{2})\s*-\s*(?P<end>\d{1,2}:\d{2})$")


@dataclass(frozen=True)
class QuietWindow:
    """A daily window (may cross midnight) on some weekdays (0 = Monday); the weekday is that of its start."""

    start: time
    end: time  # time(0, 0) with end_of_day=True stands for 24:00
    weekdays: frozenset[int]
    text: str
    end_of_day: bool = False

    def contains(self, moment: datetime) -> bool:
        minute = moment.hour * 60 + moment.minute
        start = self.start.hour * 60 + self.start.minute
        end = 24 * 60 if self.end_of_day else self.end.hour * 60 + self.end.minute
        if start < end:
            return moment.weekday() in self.weekdays and start <= minute < end
        # crosses midnight: the late part belongs to today, the early part to yesterday's window
        if minute >= start:
            return moment.weekday() in self.weekdays
        return minute < end and (moment.weekday() - 1) % 7 in self.weekdays


def parse_quiet_hours(entry: str, sources: tuple[Path, ...] = ()) -> QuietWindow:
    """"22:00-07:00" (every day), "Mon-Fri 12:00-13:00", "Sat,Sun 00:00-24:00"."""
    where = ", ".join(map(str, sources)) or "config"
    match = QUIET_ENTRY.match(entry.strip())
    if not match:
        raise UsageError(f"{where}: quiet_hours entry {entry!r} is not like \"22:00-07:00\" or \"Mon-Fri 12:00-13:00\"")
    start, start_eod = _clock(match["start"], entry, where)
    end, end_of_day = _clock(match["end"], entry, where)
    if start_eod:
        raise UsageError(f"{where}: quiet_hours entry {entry!r} cannot start at 24:00; use 00:00")
    days = _weekdays(match["days"], entry, where) if match["days"] else frozenset(range(7))
    return QuietWindow(start, end, days, entry.strip(), end_of_day=end_of_day)


def _clock(text: str, entry: str, where: str) -> tuple[time, bool]:
    hours, minutes = (int(part) for part in text.split(":"))
    if (hours, minutes) == (24, 0):
        return time(0, 0), True
    if hours > 23 or minutes > 59:
        raise UsageError(f"{where}: quiet_hours entry {entry!r} has an impossible time {text}")
    return time(hours, minutes), False


def _weekdays(text: str, entry: str, where: str) -> frozenset[int]:
    days: set[int] = set()
    for part in text.lower().split(","):
        first, _, last = part.partition("-")
        try:
            begin = WEEKDAYS.index(first[:3])
            finish = WEEKDAYS.index(last[:3]) if last else begin
        except ValueError:
            raise UsageError(f"{where}: quiet_hours entry {entry!r}: unknown weekday in {part!r} (use Mon..Sun)") from None
        day = begin
        days.add(day)
        while day != finish:
            day = (day + 1) % 7
            days.add(day)
    return frozenset(days)
