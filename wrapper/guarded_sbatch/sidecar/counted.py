"""What one watcher process costs: its scheduler calls (each at least one Slurm RPC), CPU time and peak RSS."""

from __future__ import annotations

import resource
from guarded_sbatch.core import door
from guarded_sbatch.scheduler.delegating import DelegatingScheduler
from guarded_sbatch.scheduler.interface import JobInfo, JobState, JobWatch, Scheduler, SubmitRequest


class CountedScheduler(DelegatingScheduler):
    """The scheduler with a count of the calls made through it (each one at least one Slurm RPC)."""

    def __init__(self, inner: Scheduler) -> None:
        super().__init__(inner)
        self.count = 0

    def submit(self, request: SubmitRequest) -> str:
        self.count += 1
        return self.inner.submit(request)

    def state(self, job_id: str) -> JobState:
        self.count += 1
        return self.inner.state(job_id)

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        self.count += 1
        return self.inner.states(job_ids)

    def info(self, job_id: str) -> JobInfo:
        self.count += 1
        return self.inner.info(job_id)

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        self.count += 1
        self.inner.cancel(job_id, signal_name=signal_name)

    def live_steps(self, job_id: str) -> list[str]:
        self.count += 1
        return self.inner.live_steps(job_id)

    def requeue(self, job_id: str) -> None:
        self.count += 1
        self.inner.requeue(job_id)

    def watch_job_end(self, job_id: str) -> JobWatch | None:
        watch = self.inner.watch_job_end(job_id)
        if watch is not None:  # a backend without a watch answered without a call
            self.count += 1
        return watch


_: type[Scheduler] = CountedScheduler


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mb() -> float:
    """VmHWM of this process (the peak resident set), in MB; ru_maxrss where /proc is missing."""
    try:
        for line in door.read_proc("/proc/self/status").decode("ascii", "replace").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
