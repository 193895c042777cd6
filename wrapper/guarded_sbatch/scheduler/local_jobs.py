"""The local backend's job folders: which folder a job id names, and each job's state read from it.

`<root>/<id>/` holds one job: spec.json (what to run), job.json (its state, written by the supervisor),
a `cancel` marker. A job array `A` is one folder per task, each under the task's own job id; as on Slurm the
last task runs under the array's id, and its folder's spec.json also lists the array (`array.tasks`:
task id -> job id). `A_T` names task T, `A` the whole array; supervisor.json (the pid of the one
supervisor that runs the job or every task of the array) is in folder `A`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import SchedulerError, UsageError
from guarded_sbatch.core.fsutil import read_json
from guarded_sbatch.scheduler.interface import JobState

JOB_ID = re.compile(r"(\d+)(?:_(\d+))?")
# which state an array ended in when its tasks did not all complete: the worst first
_WORST_FIRST = (JobState.FAILED, JobState.OUT_OF_MEMORY, JobState.NODE_FAIL, JobState.TIMEOUT, JobState.PREEMPTED,
                JobState.CANCELLED)


def aggregate_state(states: list[JobState]) -> JobState:
    """One state for a whole array, as `status` shows a job: running while any task runs, pending while any
    waits, then COMPLETED only when every task did."""
    if not states:
        return JobState.UNKNOWN
    for live in (JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED, JobState.PENDING, JobState.UNKNOWN):
        if live in states:
            return JobState.RUNNING if live.is_active else live
    return next((s for s in _WORST_FIRST if s in states), JobState.COMPLETED)


class JobFolders:
    """Reads the job folders under one root; writes nothing."""

    def __init__(self, root: Path, *, memo: bool = False) -> None:
        self.root = root
        # one batch of questions (states of every task of an array) reads each array and supervisor once
        self._arrays: dict[str, dict[str, str] | None] | None = {} if memo else None
        self._alive: dict[str, bool] | None = {} if memo else None

    def memoized(self) -> JobFolders:
        """A reader for one batch of questions: each array's task list and supervisor read once."""
        return JobFolders(self.root, memo=True)

    @staticmethod
    def parse(job_id: str) -> tuple[str, int | None]:
        match = JOB_ID.fullmatch(job_id)
        if not match:
            raise UsageError(f"{job_id!r} is not a local job id (expected digits, or ARRAY_TASK for an array task)")
        return match.group(1), int(match.group(2)) if match.group(2) is not None else None

    def array_of(self, job: str) -> dict[str, str] | None:
        """An array's task id -> job id, when `job` is an array's id; else None."""
        if self._arrays is not None and job in self._arrays:
            return self._arrays[job]
        spec = read_json(self.root / job / "spec.json")
        array = spec.get("array") if isinstance(spec, dict) else None
        tasks = {str(k): str(v) for k, v in array["tasks"].items()} if isinstance(array, dict) else None
        if self._arrays is not None:
            self._arrays[job] = tasks
        return tasks

    def folder(self, job_id: str) -> Path:
        """The folder of one job or array task (an array's id alone: the folder of its last task)."""
        job, task = self.parse(job_id)
        if task is None:
            return self.root / job
        tasks = self.array_of(job)
        if tasks is None or str(task) not in tasks:
            raise SchedulerError(f"no local array task {job_id}; see `guarded-sbatch status` for your runs")
        return self.root / tasks[str(task)]

    def members(self, job_id: str) -> list[Path]:
        """The folders a job id stands for: every task of an array for the array's id, else its one folder."""
        job, task = self.parse(job_id)
        if task is None:
            tasks = self.array_of(job)
            if tasks is not None:
                return [self.root / tasks[t] for t in sorted(tasks, key=int)]
        return [self.folder(job_id)]

    def status(self, folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """One job's spec and state; a job whose supervisor has gone without recording an end FAILED."""
        spec = read_json(folder / "spec.json")
        if not isinstance(spec, dict):
            raise SchedulerError(f"no local job {folder.name}; see `guarded-sbatch status` for your runs")
        status = read_json(folder / "job.json") or {"state": JobState.UNKNOWN.value}
        if not JobState(status.get("state", "UNKNOWN")).is_terminal and not self.supervisor_alive(spec):
            status = read_json(folder / "job.json") or status  # it may have finished just now
            if not JobState(status.get("state", "UNKNOWN")).is_terminal:
                status = {**status, "state": JobState.FAILED.value, "reason": "supervisor vanished"}
        return spec, status

    def state_of(self, folder: Path) -> JobState:
        return JobState(self.status(folder)[1].get("state", "UNKNOWN"))

    def supervisor_alive(self, spec: dict[str, Any]) -> bool:
        home = str(spec.get("array_job_id") or spec.get("job_id"))
        if self._alive is None:
            return self._supervisor_alive(home)
        if home not in self._alive:
            self._alive[home] = self._supervisor_alive(home)
        return self._alive[home]

    def _supervisor_alive(self, home: str) -> bool:
        info = read_json(self.root / home / "supervisor.json")
        if not info:
            return True  # just submitted
        try:
            os.kill(int(info["pid"]), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:
            return door.read_proc(f"/proc/{int(info['pid'])}/stat").decode("ascii", "replace").split(") ")[-1][:1] != "Z"
        except OSError:
            return False

    def dependency(self, parent: str) -> str:
        """`after:PARENT` is "go" once it (every task of an array) has started, "never" when it ended without
        starting, "missing" when there is no such job, else "wait"."""
        try:
            folders = self.members(parent)
        except (SchedulerError, UsageError):
            return "missing"
        answers = set()
        for folder in folders:
            status = read_json(folder / "job.json")
            if status is None and not (folder / "spec.json").exists():
                return "missing"
            status = status if isinstance(status, dict) else {}
            state = JobState(status.get("state", JobState.PENDING.value))
            if state is JobState.RUNNING or status.get("start_time"):
                answers.add("go")
            elif state.is_terminal:
                return "never"
            else:
                answers.add("wait")
        return "wait" if "wait" in answers or not answers else "go"
