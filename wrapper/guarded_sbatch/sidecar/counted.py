"""What one watcher process costs: its scheduler calls (each at least one Slurm RPC), CPU time and peak RSS."""

from __future__ import annotations

import resource
from typing import Any

from guarded_sbatch.scheduler.interface import Scheduler


class CountedScheduler:
    """The scheduler with a count of the calls made through it (each one at least one Slurm RPC)."""

    COUNTED = frozenset({"state", "info", "cancel", "watch_job_end", "submit"})

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.count = 0

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if name not in self.COUNTED or not callable(value):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return value(*args, **kwargs)

        return counted


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mb() -> float:
    """VmHWM of this process (the peak resident set), in MB; ru_maxrss where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
