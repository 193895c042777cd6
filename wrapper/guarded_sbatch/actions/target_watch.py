"""A stop target seen as a scheduler with one job, so a watcher started with `--stop tmux:/pid:/ssh:` and no
`--job` notices the run ending by itself (the session or process group gone: COMPLETED) exactly as it
notices a Slurm job ending. It cannot tell an exit code: a run that ended is COMPLETED here."""

from __future__ import annotations

from guarded_sbatch.actions.stop_targets import StopTarget, stop_target, target_alive
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.scheduler.interface import (
    BackendTraits, JobInfo, JobState, Scheduler, SchedulerDefaults, SubmitRequest, cannot_requeue,
)


class TargetWatch(SchedulerDefaults):
    """The Scheduler interface over one stop target (job id: the target's text)."""

    def __init__(self, target: StopTarget, *, grace_s: float = 30.0) -> None:
        self.target = target
        self.grace_s = grace_s
        here = target.kind in ("tmux", "pid")  # a tmux session's or a pid's processes run on this host
        self.name = "local" if here else "ssh"
        # asked at every poll (cheap); ssh on the watcher's job-poll cadence
        self.traits = BackendTraits(free_state_queries=here, process_groups_here=here)

    def state(self, job_id: str) -> JobState:
        alive = target_alive(self.target)
        return JobState.UNKNOWN if alive is None else (JobState.RUNNING if alive else JobState.COMPLETED)

    def info(self, job_id: str) -> JobInfo:
        return JobInfo(job_id=job_id, state=self.state(job_id), name=str(self.target), owner=self.current_user())

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        if signal_name is not None:
            raise UsageError(f"{self.target}: only a full stop is supported, not a single signal")
        stop_target(self.target, grace_s=self.grace_s)

    def requeue(self, job_id: str) -> None:
        raise cannot_requeue(f"stop target ({self.target})", job_id)

    def submit(self, request: SubmitRequest) -> str:
        raise UsageError("a stop target is watched, not submitted to")

    def user_jobs(self) -> list[JobInfo]:
        return []


_: type[Scheduler] = TargetWatch
