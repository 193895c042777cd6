"""Times for people: always the local time zone with its abbreviation (e.g. `14:32 CET`)."""

from __future__ import annotations

from datetime import datetime


def local_timestamp(epoch: float, *, seconds: bool = False) -> str:
    moment = datetime.fromtimestamp(epoch).astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z" if seconds else "%Y-%m-%d %H:%M %Z")
