"""Runs one local job, or every task of a local job array: waits for its dependency, runs each task in its
own process group (at most `%N` at once), enforces the time limit, and records each final state. Started
detached by LocalScheduler."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import CommandError
from guarded_sbatch.core.fsutil import read_json, write_json_atomic
from guarded_sbatch.core.runner import StartedProcess, start_process
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.local_files import OutputRefused, open_job_output
from guarded_sbatch.scheduler.local_jobs import JobFolders

ARGV_ENV = "GUARDED_SBATCH_LOCAL_ARGV"

POLL_S = 0.25
KILL_GRACE_S = 5.0
# A job that ran reports its batch script's own wait status, as Slurm does (scontrol, and sacct's `.batch` line:
# `0:15` when SIGTERM ended it); one cancelled before it started has no batch step: sacct writes `0:0`.
NEVER_RAN = 0


def _set_state(folder: Path, **fields: object) -> None:
    current = read_json(folder / "job.json") or {}
    write_json_atomic(folder / "job.json", {**current, **fields})


def _cancel_requested(folder: Path) -> bool:
    return (folder / "cancel").exists()


def _wait_for_dependency(folder: Path, spec: dict, tasks: list[Path]) -> bool:
    """True when the job may start; False when it was cancelled or its dependency can never be met."""
    parent = spec.get("after_job")
    if not parent:
        return True
    jobs = JobFolders(folder.parent)
    for task in tasks:
        _set_state(task, reason="Dependency")
    while True:
        if all(_cancel_requested(task) for task in tasks):
            return False
        answer = jobs.dependency(str(parent))
        if answer == "missing":
            return not spec.get("kill_on_invalid_dep")
        if answer != "wait":
            return answer == "go"
        time.sleep(POLL_S)


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _not_for_the_supervisor(signum: int, frame: object) -> None:
    """The supervisor lives in its own session; a SIGINT that reaches it anyway leaves the job supervised."""


def _task_env(spec: dict[str, Any]) -> dict[str, str]:
    """The job's environment: the supervisor's (the submitting one, secrets unredacted), the job's own
    additions, then this job's or task's SLURM_* variables."""
    own = spec.get("env", {})
    slurm = spec.get("slurm_env", {})
    env = {**os.environ, **own}
    env.update({name: os.environ[name] for name in own if name in os.environ and name not in slurm})  # unredacted
    env.update(slurm)
    return env


def _open_outputs(spec: dict[str, Any]) -> tuple[int, int | None]:
    append = bool(spec.get("append"))
    stdout = open_job_output(spec["stdout_path"], append=append)
    err_path = spec.get("stderr_path")
    if not err_path or os.path.abspath(err_path) == os.path.abspath(spec["stdout_path"]):
        return stdout, None
    try:
        return stdout, open_job_output(err_path, append=append)
    except OutputRefused:
        os.close(stdout)
        raise


@dataclass
class Running:
    """One started task: its process and the clock of its limit."""

    folder: Path
    proc: StartedProcess
    started: float
    limit: float | None
    timed_out: bool = False
    kill_deadline: float | None = None
    ended_fd: int | None = None  # a pidfd: readable once the task's process has ended (None: polled only)

    def watch(self, now: float) -> bool:
        """Enforce the limit and a cancel; True once the task has ended (and is recorded)."""
        if self.limit is not None and not self.timed_out and now - self.started > self.limit:
            self.timed_out = True
            self._terminate(now)
        if _cancel_requested(self.folder) and self.kill_deadline is None:
            self._terminate(now)
        if self.kill_deadline is not None and now > self.kill_deadline:
            _kill_group(self.proc.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            return False
        _kill_group(self.proc.pid, signal.SIGKILL)  # like Slurm: nothing of the job outlives it
        if self.ended_fd is not None:
            os.close(self.ended_fd)
        rc = self.proc.returncode
        if _cancel_requested(self.folder):
            state = JobState.CANCELLED
        elif self.timed_out:
            state = JobState.TIMEOUT
        else:
            state = JobState.COMPLETED if rc == 0 else JobState.FAILED
        _set_state(self.folder, state=state.value, end_time=time.time(), exit_code=rc)
        return True

    def _terminate(self, now: float) -> None:
        _kill_group(self.proc.pid, signal.SIGTERM)
        self.kill_deadline = now + KILL_GRACE_S


def _start(folder: Path, argv: list[str]) -> Running | None:
    """Start one task; None when it could not start (recorded FAILED with the one line why)."""
    spec = read_json(folder / "spec.json")
    if not isinstance(spec, dict):
        _set_state(folder, state=JobState.FAILED.value, end_time=time.time(), reason="its spec.json is unreadable")
        return None
    try:
        stdout, stderr = _open_outputs(spec)
    except OutputRefused as exc:
        sys.stderr.write(f"job {folder.name}: {exc}\n")  # the supervisor's log
        _set_state(folder, state=JobState.FAILED.value, end_time=time.time(), reason=str(exc))
        return None
    out = os.fdopen(stdout, "wb")
    err = os.fdopen(stderr, "wb") if stderr is not None else None
    try:
        proc = start_process(argv, cwd=spec["work_dir"], stdout=out, stderr=err, stderr_to_stdout=err is None,
                             env=_task_env(spec))
    except CommandError as exc:
        _set_state(folder, state=JobState.FAILED.value, end_time=time.time(), reason=str(exc))
        return None
    finally:
        out.close()
        if err is not None:
            err.close()
    started = time.time()
    _set_state(folder, state=JobState.RUNNING.value, start_time=started, pid=proc.pid, pgid=proc.pid, reason="")
    limit = spec.get("time_limit_s")
    return Running(folder, proc, started, float(limit) if limit is not None else None, ended_fd=_pidfd(proc.pid))


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # a kernel before 5.3: the poll's cadence alone
        return None


def _wait(running: list[Running]) -> None:
    """Until a task ends (its slot is handed on at once) or the next poll of cancels and limits is due."""
    fds = [task.ended_fd for task in running if task.ended_fd is not None]
    if fds:
        select.select(fds, [], [], POLL_S)
    else:
        time.sleep(POLL_S)


def run_tasks(tasks: list[Path], argv: list[str], throttle: int) -> None:
    """Run the tasks in order, at most `throttle` at once; a task cancelled before it starts never does."""
    pending = list(tasks)
    running: list[Running] = []
    held = False
    while pending or running:
        for task in [t for t in pending if _cancel_requested(t)]:
            pending.remove(task)
            _set_state(task, state=JobState.CANCELLED.value, end_time=time.time(), exit_code=NEVER_RAN,
                       reason="cancelled")
        while pending and len(running) < throttle:
            started = _start(pending.pop(0), argv)
            if started is not None:
                running.append(started)
        if pending and not held:  # squeue's reason for a task held back by the array's %N
            held = True
            for task in pending:
                _set_state(task, reason="JobArrayTaskLimit")
        now = time.time()
        running = [task for task in running if not task.watch(now)]
        if pending or running:
            _wait(running)


def main(folder: Path) -> int:
    # started while the launch blocked SIGINT (launch/submit.py); the job must be interruptible again, also where
    # the launch ignored SIGINT (nohup, a script's background `&`): an ignored signal is inherited across exec, a
    # caught one is reset to its default action, so the supervisor catches it (and does nothing with it)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, _not_for_the_supervisor)
    spec = read_json(folder / "spec.json")
    if spec is None:
        return 2
    array = spec.get("array") or {}
    tasks = [folder.parent / str(array["tasks"][t]) for t in sorted(array["tasks"], key=int)] if array else [folder]
    if not _wait_for_dependency(folder, spec, tasks):
        reason = "DependencyNeverSatisfied"
        for task in tasks:
            why = "cancelled" if _cancel_requested(task) else reason
            _set_state(task, state=JobState.CANCELLED.value, end_time=time.time(), exit_code=NEVER_RAN,
                       reason=why)
        return 0
    real_argv = os.environ.pop(ARGV_ENV, "")
    argv = json.loads(real_argv) if real_argv else spec["argv"]
    run_tasks(tasks, argv, int(array.get("throttle") or len(tasks)))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
