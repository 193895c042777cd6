"""The no-Slurm backend: each job is a process group run by a detached supervisor; a job array is one
supervisor running its tasks, each a job of its own (scheduler/local_jobs.py lays out the folders).

A job's folder holds job.json (its state, written atomically by the supervisor) and a cancel
marker. States follow Slurm's names so the sidecar and status code never branch on the backend.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import CommandError, SchedulerError, UsageError
from guarded_sbatch.core.fsutil import make_private_dirs, read_json, state_dir, write_json_atomic
from guarded_sbatch.core.pychild import python_argv
from guarded_sbatch.core.redact import redact, redact_args
from guarded_sbatch.core.runner import start_process
from guarded_sbatch.scheduler.interface import (
    BackendTraits, JobInfo, JobState, JobWatch, NodeLoss, Scheduler, SchedulerDefaults, SubmitRequest, cannot_requeue,
    signal_named,
)
from guarded_sbatch.scheduler.local_files import check_output_path
from guarded_sbatch.scheduler.local_ids import peek_next_id, take_free_ids
from guarded_sbatch.scheduler.local_jobs import JobFolders, aggregate_state

if TYPE_CHECKING:
    from guarded_sbatch.scheduler.local_options import LocalOptions, TaskIds

# The options (scheduler/local_options.py) parse sbatch scripts (sbatch/), which only a submission needs: imported
# there, not for `status`, `show`, `kill` or a sidecar, which ask job states only
__all__ = ["LocalScheduler"]

_NAMES_THE_ID = re.compile(r"%\d*[jA]")  # an output pattern that differs from one job id to the next


class LocalScheduler(SchedulerDefaults):
    """Jobs as local process groups, with Slurm's states; job arrays with Slurm's task ids (`A_T`)."""

    name = "local"
    # a state query reads a file on this host: asked at every poll
    traits = BackendTraits(free_state_queries=True, wait_poll_s=1.0, process_groups_here=True)

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_dir() / "local-jobs"
        self.jobs = JobFolders(self.root)
        self._live_from = 0  # job_process_groups: every lower id had ended at its last call

    def test_only(self, request: SubmitRequest) -> str:
        """What `sbatch --test-only` says (on stderr), without creating a job, as sbatch does."""
        base = Path(os.path.abspath(request.workdir or os.getcwd()))
        script = request.script if request.script.is_absolute() else base / request.script
        from guarded_sbatch.scheduler.local_options import parse_local_options  # noqa: PLC0415 - submission only

        parse_local_options(tuple(o for o in request.sbatch_options if o != "--test-only"), script,
                            request.job_environment())  # the same errors a real submission would give
        start = time.strftime("%Y-%m-%dT%H:%M:%S")
        return (f"sbatch: Job {peek_next_id(self.root)} to start at {start} using 1 processors on nodes "
                f"{socket.gethostname().split('.')[0]} in partition local")

    @staticmethod
    def _outputs(options: LocalOptions, task: TaskIds, job_name: str, user: str,
                 workdir: Path) -> tuple[Path, Path | None]:
        from guarded_sbatch.scheduler.local_options import expand_output_pattern  # noqa: PLC0415 - submission only

        stdout = workdir / expand_output_pattern(options.output, task.job_id, job_name, user, task)
        stderr = workdir / expand_output_pattern(options.error, task.job_id, job_name, user, task) if options.error \
            else None
        return stdout, stderr

    def _tasks(self, options: LocalOptions, first: int) -> list[TaskIds]:
        from guarded_sbatch.scheduler.local_options import TaskIds, array_task_ids  # noqa: PLC0415 - submission only

        return array_task_ids(first, options.array) if options.array else [TaskIds(str(first))]

    def _collision(self, options: LocalOptions, first: int, job_name: str, user: str, workdir: Path) -> str | None:
        """A file the jobs numbered from `first` would write over only because of their ids, or their folder."""
        by_id = [bool(p and _NAMES_THE_ID.search(p)) for p in (options.output, options.error)]
        for task in self._tasks(options, first):
            if (self.root / task.job_id).exists():
                return str(self.root / task.job_id)
            for named, path in zip(by_id, self._outputs(options, task, job_name, user, workdir)):
                if named and path is not None and os.path.lexists(path):
                    return str(path)
        return None

    def submit(self, request: SubmitRequest) -> str:
        if "--test-only" in request.sbatch_options:
            raise UsageError("--test-only creates no job; use LocalScheduler.test_only")
        base = Path(os.path.abspath(request.workdir or os.getcwd()))  # the supervisor runs in its own folder
        script = request.script if request.script.is_absolute() else base / request.script
        from guarded_sbatch.scheduler.local_options import job_variables, parse_local_options  # noqa: PLC0415 - submission only

        options = parse_local_options(request.sbatch_options, script, request.job_environment())
        options = replace(options, job_name=request.job_name or options.job_name, output=request.output or options.output)
        workdir = (base / options.chdir) if options.chdir else base
        if not workdir.is_dir():
            raise UsageError(f"working folder {workdir} does not exist; create it or fix --chdir")
        user = self.current_user()
        job_name = options.job_name or script.name
        count = options.array.count if options.array else 1
        first = take_free_ids(self.root, count, lambda n: self._collision(options, n, job_name, user, workdir))
        tasks = self._tasks(options, first)
        outputs = [self._outputs(options, task, job_name, user, workdir) for task in tasks]
        for path in dict.fromkeys(p for pair in outputs for p in pair if p is not None):
            why = check_output_path(str(path))
            if why:
                raise UsageError(f"cannot submit: {why}")
        argv = ["bash", str(script.resolve()), *request.script_args]
        common = {
            "name": job_name, "owner": user, "argv": redact_args(argv),  # the real argv reaches the supervisor only
            "work_dir": str(workdir.resolve()), "time_limit_s": options.time_limit_s, "append": options.append,
            # the guard's `after` (its sidecar) is read as such; a user's own --dependency=after:ID as sbatch would
            "after_job": request.after or options.after_job,
            "kill_on_invalid_dep": request.after is not None or options.kill_on_invalid_dep,
            "submit_time": time.time(),
        }
        array_job = tasks[-1].job_id  # the array's id: the job id of its last task, as on Slurm
        for task, (stdout, stderr) in zip(tasks, outputs):
            slurm_env = {**job_variables(options, job_id=task.job_id, job_name=job_name, submit_dir=base, user=user,
                                         task=task), "GUARDED_SBATCH_JOB_ID": task.key}
            spec: dict[str, Any] = {
                **common, "job_id": task.job_id, "key": task.key, "array_job_id": task.array_job,
                "array_task_id": task.task, "stdout_path": str(stdout), "stderr_path": str(stderr) if stderr else None,
                "slurm_env": slurm_env,
                "env": {name: redact(f"{name}={value}").partition("=")[2]
                        for name, value in {**request.env, **slurm_env}.items()},
            }
            if options.array and task.job_id == array_job:
                spec["array"] = {"tasks": {str(t.task): t.job_id for t in tasks}, "throttle": options.array.throttle}
            self._create_folder(task, spec)
        self._start_supervisor(self.root / array_job, request, argv)
        return array_job

    def _create_folder(self, task: TaskIds, spec: dict[str, Any]) -> None:
        folder = self.root / task.job_id
        make_private_dirs(folder.parent)
        try:
            door.make_new_dir(folder, 0o700)  # fails when it exists: one job per folder
        except FileExistsError:
            raise SchedulerError(f"local job {task.job_id} exists already (another submission took the id "
                                 "at the same moment); submit again") from None
        write_json_atomic(folder / "spec.json", spec)
        write_json_atomic(folder / "job.json", {"state": JobState.PENDING.value, "key": task.key})

    def _start_supervisor(self, folder: Path, request: SubmitRequest, argv: list[str]) -> None:
        log = os.fdopen(door.open_raw(folder / "supervisor.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                                      | os.O_NONBLOCK, 0o600), "ab")
        from guarded_sbatch.scheduler.local_options import without_slurm_job  # noqa: PLC0415 - submission only
        from guarded_sbatch.scheduler.local_supervisor import ARGV_ENV  # noqa: PLC0415 - submission only

        try:
            # Detached on purpose: the supervisor outlives the CLI that submitted the job.
            proc = start_process(
                python_argv("-m", "guarded_sbatch.scheduler.local_supervisor", str(folder.resolve())), cwd=folder,
                stdout=log, stderr_to_stdout=True,
                env={**without_slurm_job(request.job_environment()), ARGV_ENV: json.dumps(argv)},
            )
        except CommandError as exc:
            raise SchedulerError(f"cannot start the local job supervisor: {exc.stderr}") from None
        finally:
            log.close()
        write_json_atomic(folder / "supervisor.json", {"pid": proc.pid})

    def _member_status(self, job_id: str, jobs: JobFolders | None = None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        jobs = jobs or self.jobs
        return [jobs.status(folder) for folder in jobs.members(job_id)]

    def state(self, job_id: str) -> JobState:
        return self._state(job_id, self.jobs)

    def _state(self, job_id: str, jobs: JobFolders) -> JobState:
        members = self._member_status(job_id, jobs)
        states = [JobState(status.get("state", "UNKNOWN")) for _, status in members]
        return states[0] if len(states) == 1 and "array" not in members[0][0] else aggregate_state(states)

    def info(self, job_id: str) -> JobInfo:
        members = self._member_status(job_id)
        spec, status = members[-1]
        states = [JobState(s.get("state", "UNKNOWN")) for _, s in members]
        state = states[0] if len(members) == 1 and "array" not in spec else aggregate_state(states)
        starts = [s["start_time"] for _, s in members if s.get("start_time")]
        ends = [s["end_time"] for _, s in members if s.get("end_time")]
        codes = [s["exit_code"] for _, s in members if s.get("exit_code") is not None]
        return JobInfo(
            job_id=job_id, state=state, name=spec["name"], owner=spec["owner"], work_dir=spec["work_dir"],
            stdout_path=spec["stdout_path"], time_limit_s=spec["time_limit_s"],
            start_time=min(starts) if starts else None,
            end_time=max(ends) if ends and state.is_terminal else None,
            exit_code=max(codes, key=abs) if codes and state.is_terminal else None,
            reason=status.get("reason", ""), pgid=status.get("pgid") if len(members) == 1 else None,
        )

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        """Cancel a job, one array task (`A_T`), or a whole array (`A`, its pending tasks too); with
        signal_name only signal what runs."""
        sig = signal_named(signal_name) if signal_name else signal.SIGTERM
        live = [(folder, status) for folder in self.jobs.members(job_id)
                for status in [self.jobs.status(folder)[1]] if not JobState(status["state"]).is_terminal]
        if signal_name is None:
            # every member marked before any is signalled: a task that ends frees its slot, and a pending task
            # not yet marked would be started in it
            for folder, _ in live:
                door.write_atomic(folder / "cancel", str(time.time()), 0o600)
        for _, status in live:
            pgid = status.get("pgid")
            if pgid:
                try:
                    os.killpg(int(pgid), sig)
                except ProcessLookupError:
                    pass

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        """Every task of an array asked at once (the array watcher's poll) reads the array's list once."""
        jobs = self.jobs.memoized()
        return {job_id: self._state(job_id, jobs) for job_id in job_ids}

    def requeue(self, job_id: str) -> None:
        raise cannot_requeue(self.name, job_id)

    def node_losses(self, job_id: str) -> list[NodeLoss]:
        return []  # one host: a dead node is the whole machine, and nobody is left to tell

    def watch_job_end(self, job_id: str) -> JobWatch | None:
        return None  # its state is free to ask at every poll

    def current_user(self) -> str:
        return getpass.getuser()

    def estimate_start(self, request: SubmitRequest) -> float | None:
        return time.time()

    def active_job_names(self) -> set[str]:
        names: set[str] = set()
        if not self.root.is_dir():
            return names
        for folder in self.root.iterdir():
            if folder.name.isdigit():
                try:
                    spec, status = self.jobs.status(folder)
                except SchedulerError:
                    continue
                if not JobState(status["state"]).is_terminal:
                    names.add(spec["name"])
        return names

    def user_jobs(self) -> list[JobInfo]:
        """Every job folder of this backend (each array task as `A_T`, as the run records name it)."""
        jobs: list[JobInfo] = []
        for folder in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if folder.name.isdigit():
                try:
                    spec, status = self.jobs.status(folder)
                except SchedulerError:
                    continue
                key = str(status.get("key") or folder.name)
                jobs.append(JobInfo(key, JobState(status.get("state", "UNKNOWN")), name=str(spec.get("name", ""))))
        return jobs

    def job_process_groups(self) -> dict[str, int]:
        """Asked at every sidecar poll: ids are handed out in order and an ended local job stays ended, so the
        jobs below the oldest one live at the last call are not read again (not every job the user ever ran).
        An array task is named `A_T`, as the run records of its tasks name it."""
        try:
            ids = sorted(int(name) for name in os.listdir(self.root) if name.isdigit())
        except OSError:
            return {}
        live = {job: found for job in ids if job >= self._live_from and (found := self._live_group(job)) is not None}
        self._live_from = min(live, default=ids[-1] + 1 if ids else 0)
        return {key: pgid for key, pgid in live.values() if pgid}

    def _live_group(self, job: int) -> tuple[str, int] | None:
        """None once the job has ended; else its name and process group (0 while it is not known yet)."""
        status = read_json(self.root / str(job) / "job.json")
        status = status if isinstance(status, dict) else {}  # none yet: just submitted
        key = str(status.get("key") or job)
        try:
            if JobState(status.get("state", JobState.PENDING.value)).is_terminal:
                return None
            return key, int(status.get("pgid") or 0)
        except (TypeError, ValueError):
            return key, 0  # a record being rewritten: read again next time


BACKEND: type[Scheduler] = LocalScheduler  # what the registry (scheduler/__init__.py) makes
