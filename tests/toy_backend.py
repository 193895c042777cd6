"""A toy scheduler backend: each job a plain subprocess (`bash SCRIPT ARGS`) in a process group of its own on this host,
started and waited for by a small runner process (this module run as `python -P -m guarded_sbatch.scheduler.toy DIR`).

Its own id scheme (`toy-1`, `toy-2`, ...) and its own state files (`<state dir>/toy-jobs/<id>/state.json`, written
by the runner). It reads none of sbatch's options (each is accepted and ignored) and no #SBATCH line, only the
request's scheduler words: `after` holds a job until the named one has started (and cancels it when that one ended or
never existed); `job_name`; `output` (%j: the id), else `slurm-<id>.out` in the folder it was submitted from (sbatch's
default name, so the launch's record of a job's log names it).

tests/test_toy_backend.py installs it, on a copy of the package, as `scheduler/toy.py` with one registry line.
"""

from __future__ import annotations

import getpass
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import SchedulerError, UsageError
from guarded_sbatch.core.fsutil import make_private_dirs, read_json, state_dir, write_json_atomic
from guarded_sbatch.core.pychild import python_argv
from guarded_sbatch.core.runner import start_process
from guarded_sbatch.scheduler.interface import (
    BackendTraits, JobInfo, JobState, Scheduler, SchedulerDefaults, SubmitRequest, signal_named,
)

POLL_S = 0.2
CANCEL_GRACE_S = 3.0


class ToyScheduler(SchedulerDefaults):
    """Jobs as subprocesses of a runner each; what differs from SchedulerDefaults is stated here, as data."""

    name = "toy"
    # a state query reads a file on this host
    traits = BackendTraits(free_state_queries=True, wait_poll_s=0.5, cancel_command="toy cancel", process_groups_here=True)

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_dir() / "toy-jobs"

    def submit(self, request: SubmitRequest) -> str:
        workdir = Path(os.path.abspath(request.workdir or os.getcwd()))
        script = request.script if request.script.is_absolute() else workdir / request.script
        if not script.is_file():
            raise UsageError(f"no batch script {script}")
        make_private_dirs(self.root)
        job_id, folder = self._new_job_folder()
        output = request.output.replace("%j", job_id) if request.output else str(workdir / f"slurm-{job_id}.out")
        write_json_atomic(folder / "spec.json", {
            "argv": ["bash", str(script), *request.script_args], "workdir": str(workdir), "after": request.after,
            "name": request.job_name or script.name, "owner": getpass.getuser(), "output": output})
        runner = start_process(python_argv("-m", __name__, str(folder)), env=request.job_environment(), cwd="/")
        write_json_atomic(folder / "state.json", {"state": "PENDING", "runner": runner.pid})
        return job_id

    def _new_job_folder(self) -> tuple[str, Path]:
        number = len(list(self.root.iterdir())) + 1
        while True:
            folder = self.root / f"toy-{number}"
            try:
                folder.mkdir(mode=0o700)
                return folder.name, folder
            except FileExistsError:
                number += 1

    def _read(self, job_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        folder = self.root / job_id
        spec, status = read_json(folder / "spec.json"), read_json(folder / "state.json")
        if not isinstance(spec, dict) or not isinstance(status, dict):
            raise SchedulerError(f"no toy job {job_id}")
        return spec, status

    def info(self, job_id: str) -> JobInfo:
        spec, status = self._read(job_id)
        state = JobState(status["state"])
        if not state.is_terminal and not Path(f"/proc/{status.get('runner')}").exists():
            state = JobState.FAILED  # its runner is gone without a word: the job cannot go on
        return JobInfo(job_id=job_id, state=state, name=spec["name"], owner=spec["owner"], work_dir=spec["workdir"],
                       stdout_path=spec["output"], start_time=status.get("start"), end_time=status.get("end"),
                       exit_code=status.get("exit_code"), pgid=status.get("pgid") if state.is_active else None)

    def state(self, job_id: str) -> JobState:
        try:
            return self.info(job_id).state
        except SchedulerError:
            return JobState.UNKNOWN

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        _, status = self._read(job_id)
        pgid = status.get("pgid")
        if signal_name is not None:
            if pgid:
                os.killpg(pgid, signal_named(signal_name))
            return
        (self.root / job_id / "cancelled").touch()
        if not pgid or JobState(status["state"]).is_terminal:
            return  # a pending job: its runner sees the mark and never starts it
        deadline = time.monotonic() + CANCEL_GRACE_S
        sig = signal.SIGTERM
        while True:
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                return
            if time.monotonic() > deadline:
                sig = signal.SIGKILL
            time.sleep(POLL_S)

    def user_jobs(self) -> list[JobInfo]:
        if not self.root.is_dir():
            return []
        jobs = []
        for folder in sorted(self.root.iterdir()):
            try:
                jobs.append(self.info(folder.name))
            except SchedulerError:
                continue
        return jobs

    def active_job_names(self) -> set[str]:
        return {job.name for job in self.user_jobs() if not job.state.is_terminal}

    def job_process_groups(self) -> dict[str, int]:
        return {job.job_id: job.pgid for job in self.user_jobs() if job.pgid}


BACKEND: type[Scheduler] = ToyScheduler  # what the registry (scheduler/__init__.py) makes


def _write_state(folder: Path, **values: Any) -> None:
    write_json_atomic(folder / "state.json", {"runner": os.getpid(), **values})


def _wait_for_start(folder: Path, after: str) -> bool:
    """True once job `after` has started; False (the job is cancelled) when it was cancelled first, or `after` ended
    or never existed."""
    parent = folder.parent / after / "state.json"
    while not (folder / "cancelled").exists():
        status = read_json(parent)
        if isinstance(status, dict) and status.get("start"):
            return True
        if not isinstance(status, dict) or JobState(status["state"]).is_terminal:
            return False
        time.sleep(POLL_S)
    return False


def run_job(folder: Path) -> int:
    """The runner: wait for `after`, run the job in its own process group, record each state."""
    spec = read_json(folder / "spec.json")
    if not isinstance(spec, dict):
        return 2
    if spec.get("after") and not _wait_for_start(folder, spec["after"]):
        _write_state(folder, state="CANCELLED", end=time.time())
        return 0
    with open(spec["output"], "ab") as out:
        job = start_process(spec["argv"], cwd=spec["workdir"], stdout=out, stderr_to_stdout=True, new_session=True)
    started = time.time()
    _write_state(folder, state="RUNNING", start=started, pgid=job.pid)
    while job.poll() is None:
        time.sleep(POLL_S)
    code = job.returncode or 0
    state = "CANCELLED" if (folder / "cancelled").exists() else "COMPLETED" if code == 0 else "FAILED"
    _write_state(folder, state=state, start=started, end=time.time(), exit_code=code)
    return 0


if __name__ == "__main__":
    sys.exit(run_job(Path(sys.argv[1])))
