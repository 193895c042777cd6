"""The user's jobs as one launch sees them: asked of the scheduler once, whatever the history.

The pre-flight wraps its scheduler in `OneQuery` (launch/preflight.py): the run-name check's `active_job_names`
and the own-folder check's liveness of recorded runs both read one `user_jobs()` answer (on Slurm one `squeue`),
so a launch costs one scheduler query with 1 or 1000 recorded runs. `liveness` says of each recorded job whether
it still runs; a job the scheduler no longer lists is over (the registry then remembers it: records/registry.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from guarded_sbatch.core.errors import SchedulerError
from guarded_sbatch.scheduler.delegating import DelegatingScheduler
from guarded_sbatch.scheduler.interface import JobInfo, JobState, Scheduler

LATE_S = 1.0  # a record written this close to the snapshot may be a job submitted just after it: never called over


@dataclass(frozen=True)
class Snapshot:
    jobs: dict[str, JobState]  # job id ("J_T" per array task) -> state, as the scheduler listed it
    taken_at: float  # epoch seconds, just before the query

    def state_of(self, job_id: str) -> JobState | None:
        """The job's state as listed (a record of a whole array, "J", by its tasks: live while one is; a
        heterogeneous job's by its components, "J+N"); None when the scheduler does not list it."""
        if job_id in self.jobs:
            return self.jobs[job_id]
        parts = [state for key, state in self.jobs.items() if key.startswith((f"{job_id}_", f"{job_id}+"))]
        live = [state for state in parts if not state.is_terminal]
        return live[0] if live else parts[0] if parts else None

    def may_be_newer(self, recorded_at: float) -> bool:
        """Whether a run recorded at that time may have been submitted after the snapshot (so that its absence
        from it says nothing)."""
        return recorded_at >= self.taken_at - LATE_S


class OneQuery(DelegatingScheduler):
    """A scheduler whose user_jobs() is asked once (its answer, or its error, kept for the launch)."""

    def __init__(self, inner: Scheduler) -> None:
        super().__init__(inner)
        self.snapshot: Snapshot | None = None
        self._error: SchedulerError | None = None
        self._listed: list[JobInfo] = []

    def user_jobs(self) -> list[JobInfo]:
        if self.snapshot is None and self._error is None:
            taken_at = time.time()
            try:
                self._listed = self.inner.user_jobs()
            except SchedulerError as exc:
                self._error = exc
            else:
                self.snapshot = Snapshot({job.job_id: job.state for job in self._listed}, taken_at)
        if self._error is not None:
            raise self._error
        return list(self._listed)

    def active_job_names(self) -> set[str]:
        return {job.name for job in self.user_jobs() if not job.state.is_terminal and job.name}


def one_query(scheduler: Scheduler | None) -> Scheduler | None:
    """The scheduler wrapped for one launch (a wrapper already in place is kept)."""
    if scheduler is None or isinstance(scheduler, OneQuery):
        return scheduler
    return OneQuery(scheduler)


def snapshot_of(scheduler: Scheduler) -> Snapshot:
    """One answer of the scheduler about the user's jobs: the launch's own when it has one. Raises SchedulerError."""
    if isinstance(scheduler, OneQuery):
        scheduler.user_jobs()
        assert scheduler.snapshot is not None  # user_jobs() raised otherwise
        return scheduler.snapshot
    taken_at = time.time()
    return Snapshot({job.job_id: job.state for job in scheduler.user_jobs()}, taken_at)


_: type[Scheduler] = OneQuery
