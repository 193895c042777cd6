"""A scheduler over one existing process of the current user: the job id is its pid.

For runs started by someone else's launcher (submitit's local executor, a trainer started by hand): the
sidecar watches the process and, on STOP, ends it — SIGTERM (submitit's controller forwards it to its tasks),
then SIGKILL after a grace period. Only the user's own processes are touched; the job id is re-checked
against the process's start time recorded at adoption, so a reused pid is never signalled.
"""

from __future__ import annotations

import os
import signal
import time

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import SchedulerError, UsageError
from guarded_sbatch.scheduler.interface import (
    JobInfo, JobState, Scheduler, SchedulerDefaults, SubmitRequest, signal_named,
)

GRACE_S = 10.0


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = door.read_proc(f"/proc/{pid}/stat").decode("utf-8", "replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    return text[text.rfind(")") + 2 :].split()


def process_start_ticks(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def job_id_for(pid: int) -> str:
    """The job id of a live process: `<pid>@<start ticks>`, so a pid reused later never matches."""
    ticks = process_start_ticks(pid)
    if ticks is None:
        raise UsageError(f"no process {pid}; give the pid of a running process of yours")
    return f"{pid}@{ticks}"


def _split(job_id: str) -> tuple[int, str | None]:
    pid_text, _, ticks = job_id.partition("@")
    if not pid_text.isdigit():
        raise UsageError(f"process job id {job_id!r} is not PID or PID@START")
    return int(pid_text), ticks or None


class ProcessScheduler(SchedulerDefaults):
    name = "process"
    accepts_submissions = False  # it adopts a process someone else started

    def _alive(self, job_id: str) -> bool:
        pid, ticks = _split(job_id)
        fields = _stat_fields(pid)
        if fields is None or fields[0] in ("Z", "X"):
            return False
        return ticks is None or (len(fields) > 19 and fields[19] == ticks)

    def _owned(self, pid: int) -> bool:
        try:
            return os.stat(f"/proc/{pid}").st_uid == os.getuid()
        except OSError:
            return False

    def submit(self, request: SubmitRequest) -> str:
        raise SchedulerError("the process backend adopts running processes; it cannot submit jobs")

    def state(self, job_id: str) -> JobState:
        return JobState.RUNNING if self._alive(job_id) else JobState.COMPLETED

    def info(self, job_id: str) -> JobInfo:
        pid, _ = _split(job_id)
        state = self.state(job_id)
        work_dir = ""
        if state is JobState.RUNNING:
            try:
                work_dir = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                work_dir = ""
        return JobInfo(job_id=job_id, state=state, owner=self.current_user(), work_dir=work_dir)

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        pid, _ = _split(job_id)
        if not self._alive(job_id):
            return
        if not self._owned(pid):
            raise SchedulerError(f"process {pid} belongs to another user; not signalling it")
        first = signal_named(signal_name) if signal_name else signal.SIGTERM
        try:
            os.kill(pid, first)
        except ProcessLookupError:
            return
        if signal_name:
            return
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            if not self._alive(job_id):
                return
            time.sleep(0.2)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def user_jobs(self) -> list[JobInfo]:
        """Every live process of the user, as `PID@START`: a process not listed has ended."""
        jobs: list[JobInfo] = []
        for name in os.listdir("/proc"):
            if name.isdigit() and self._owned(int(name)):
                ticks = process_start_ticks(int(name))
                if ticks is not None:
                    jobs.append(JobInfo(job_id=f"{name}@{ticks}", state=JobState.RUNNING))
        return jobs


BACKEND: type[Scheduler] = ProcessScheduler  # what the registry (scheduler/__init__.py) makes
