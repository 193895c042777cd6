"""A scheduler that hands every member of the Scheduler protocol, by name, to another one.

Wrappers (the sidecar's call count, the launch's marker) subclass it and override only what they change;
anything the protocol gains is added here once, and mypy checks the wrapper against the protocol.
"""

from __future__ import annotations

from guarded_sbatch.scheduler.interface import BackendTraits, JobInfo, JobState, JobWatch, NodeLoss, Scheduler, SubmitRequest


class DelegatingScheduler:
    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def traits(self) -> BackendTraits:
        return self.inner.traits

    def submit(self, request: SubmitRequest) -> str:
        return self.inner.submit(request)

    def state(self, job_id: str) -> JobState:
        return self.inner.state(job_id)

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        return self.inner.states(job_ids)

    def info(self, job_id: str) -> JobInfo:
        return self.inner.info(job_id)

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        self.inner.cancel(job_id, signal_name=signal_name)

    def live_steps(self, job_id: str) -> list[str]:
        return self.inner.live_steps(job_id)

    def requeue(self, job_id: str) -> None:
        self.inner.requeue(job_id)

    def node_losses(self, job_id: str) -> list[NodeLoss]:
        return self.inner.node_losses(job_id)

    def watch_job_end(self, job_id: str) -> JobWatch | None:
        return self.inner.watch_job_end(job_id)

    def current_user(self) -> str:
        return self.inner.current_user()

    def estimate_start(self, request: SubmitRequest) -> float | None:
        return self.inner.estimate_start(request)

    def active_job_names(self) -> set[str]:
        return self.inner.active_job_names()

    def user_jobs(self) -> list[JobInfo]:
        return self.inner.user_jobs()

    def job_process_groups(self) -> dict[str, int]:
        return self.inner.job_process_groups()


_: type[Scheduler] = DelegatingScheduler
