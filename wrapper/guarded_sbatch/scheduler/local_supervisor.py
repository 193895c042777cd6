"""Runs one local job: waits for its dependency, runs the script in its own process group,
enforces the time limit, and records the final state. Started detached by LocalScheduler."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from guarded_sbatch.core.errors import CommandError
from guarded_sbatch.core.fsutil import read_json, write_json_atomic
from guarded_sbatch.core.runner import start_process
from guarded_sbatch.scheduler.interface import JobState

ARGV_ENV = "GUARDED_SBATCH_LOCAL_ARGV"

POLL_S = 0.25
KILL_GRACE_S = 5.0


def _set_state(folder: Path, **fields: object) -> None:
    current = read_json(folder / "job.json") or {}
    write_json_atomic(folder / "job.json", {**current, **fields})


def _cancel_requested(folder: Path) -> bool:
    return (folder / "cancel").exists()


def _wait_for_dependency(folder: Path, spec: dict) -> bool:
    """True when the job may start; False when it was cancelled or its dependency can never be met."""
    parent = spec.get("after_job")
    if not parent:
        return True
    parent_folder = folder.parent / str(parent)
    _set_state(folder, reason="Dependency")
    while True:
        if _cancel_requested(folder):
            return False
        status = read_json(parent_folder / "job.json")
        if status is None and not (parent_folder / "spec.json").exists():
            return not spec.get("kill_on_invalid_dep")
        if status:
            state = JobState(status.get("state", "UNKNOWN"))
            if state == JobState.RUNNING or status.get("start_time"):
                return True
            if state.is_terminal:
                return False  # ended without ever starting
        time.sleep(POLL_S)


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _not_for_the_supervisor(signum: int, frame: object) -> None:
    """The supervisor lives in its own session; a SIGINT that reaches it anyway leaves the job supervised."""


def main(folder: Path) -> int:
    # started while the launch blocked SIGINT (launch/submit.py); the job must be interruptible again, also where
    # the launch ignored SIGINT (nohup, a script's background `&`): an ignored signal is inherited across exec, a
    # caught one is reset to its default action, so the supervisor catches it (and does nothing with it)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, _not_for_the_supervisor)
    spec = read_json(folder / "spec.json")
    if spec is None:
        return 2
    if not _wait_for_dependency(folder, spec):
        reason = "cancelled" if _cancel_requested(folder) else "DependencyNeverSatisfied"
        _set_state(folder, state=JobState.CANCELLED.value, end_time=time.time(), reason=reason)
        return 0
    stdout = open(spec["stdout_path"], "ab")
    stderr = open(spec["stderr_path"], "ab") if spec.get("stderr_path") else None
    real_argv = os.environ.pop(ARGV_ENV, "")
    argv = json.loads(real_argv) if real_argv else spec["argv"]
    env = {**os.environ, **spec.get("env", {})}
    env.update({name: os.environ[name] for name in spec.get("env", {}) if name in os.environ})  # unredacted
    try:
        proc = start_process(argv, cwd=spec["work_dir"], stdout=stdout, stderr=stderr,
                             stderr_to_stdout=stderr is None, env=env)
    except CommandError as exc:
        _set_state(folder, state=JobState.FAILED.value, end_time=time.time(), reason=str(exc))
        return 0
    started = time.time()
    _set_state(folder, state=JobState.RUNNING.value, start_time=started, pid=proc.pid, pgid=proc.pid, reason="")
    limit = spec.get("time_limit_s")
    timed_out = False
    kill_deadline: float | None = None
    while proc.poll() is None:
        now = time.time()
        if limit is not None and not timed_out and now - started > limit:
            timed_out = True
            _kill_group(proc.pid, signal.SIGTERM)
            kill_deadline = now + KILL_GRACE_S
        if _cancel_requested(folder) and kill_deadline is None:
            _kill_group(proc.pid, signal.SIGTERM)
            kill_deadline = now + KILL_GRACE_S
        if kill_deadline is not None and now > kill_deadline:
            _kill_group(proc.pid, signal.SIGKILL)
        time.sleep(POLL_S)
    _kill_group(proc.pid, signal.SIGKILL)  # like Slurm: nothing of the job outlives it
    rc = proc.returncode
    if _cancel_requested(folder):
        state = JobState.CANCELLED
    elif timed_out:
        state = JobState.TIMEOUT
    else:
        state = JobState.COMPLETED if rc == 0 else JobState.FAILED
    _set_state(folder, state=state.value, end_time=time.time(), exit_code=rc)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
