"""The no-Slurm backend: each job is a process group run by a detached supervisor.

A job's folder holds job.json (its state, written atomically by the supervisor) and a cancel
marker. States follow Slurm's names so the sidecar and status code never branch on the backend.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.core.errors import CommandError, SchedulerError, UsageError
from guarded_sbatch.core.fsutil import make_private_dirs, read_json, state_dir, write_json_atomic
from guarded_sbatch.core.redact import redact, redact_args
from guarded_sbatch.core.pychild import python_argv
from guarded_sbatch.core.runner import start_process
from guarded_sbatch.core.run_sources import expand_filename_pattern
from guarded_sbatch.scheduler.interface import (
    JobInfo, JobState, JobWatch, NodeLoss, Scheduler, SubmitRequest, cannot_requeue, signal_named,
)
from guarded_sbatch.scheduler.local_supervisor import ARGV_ENV
from guarded_sbatch.core.sbatch.argv import parse_sbatch_words
from guarded_sbatch.core.sbatch.options import effective_options
from guarded_sbatch.core.sbatch.script import parse_script
import fcntl


@dataclass(frozen=True)
class LocalOptions:
    job_name: str
    output: str
    error: str | None
    chdir: str | None
    time_limit_s: int | None
    after_job: str | None
    kill_on_invalid_dep: bool
    ntasks: str | None = None
    cpus_per_task: str | None = None
    partition: str | None = None


def parse_local_options(options: tuple[str, ...], script: Path, env: dict[str, str]) -> LocalOptions:
    """The options the local backend honours, with sbatch's precedence (command line > SBATCH_* >
    #SBATCH lines); options that change how many times or when the job runs are refused, every other option
    is accepted and ignored."""

    parsed, _ = parse_sbatch_words(list(options))
    directives = [(f"{script} line {d.line_number}", o) for d in parse_script(script, env).directives for o in d.options]
    effective = effective_options(parsed, directives, env)
    for option, what in (("array", "a job array"), ("hold", "a held job"), ("begin", "a deferred start")):
        if effective.has(option):  # accepted and ignored, they would run something other than what was asked
            raise UsageError(f"the local backend runs each job once, now: it cannot run {what} (--{option}); "
                             "drop the option, or submit to Slurm (--guard-backend slurm)")
    dependency = effective.get("dependency") or ""
    after_job = None
    if dependency:
        kind, _, job = dependency.partition(":")
        if kind != "after" or not job:
            raise UsageError(f"the local backend understands only --dependency=after:ID, not {dependency!r}")
        after_job = job.split(":")[0]
    kill_flag = (effective.get("kill-on-invalid-dep") or "yes").lower() in {"yes", "true", "1"}
    return LocalOptions(
        job_name=effective.job_name or "",
        output=effective.get("output") or "slurm-%j.out",  # sbatch's default
        error=effective.get("error"),
        chdir=effective.get("chdir"),
        time_limit_s=effective.time_limit_s,
        after_job=after_job,
        kill_on_invalid_dep=kill_flag if effective.has("kill-on-invalid-dep") else False,
        ntasks=effective.get("ntasks") or effective.get("ntasks-per-node"),  # one node: the same count
        cpus_per_task=effective.get("cpus-per-task"),
        partition=effective.get("partition"),
    )


def job_variables(options: LocalOptions, *, job_id: str, job_name: str, submit_dir: Path, user: str) -> dict[str, str]:
    """The SLURM_* variables a batch script reads, true to what the local backend runs: one task on this host."""
    host = socket.gethostname()
    node = host.split(".")[0]
    ntasks = options.ntasks or "1"
    values = {
        "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_JOB_NAME": job_name,
        "SLURM_SUBMIT_DIR": str(submit_dir), "SLURM_SUBMIT_HOST": host, "SLURM_CLUSTER_NAME": "local",
        "SLURM_NTASKS": ntasks, "SLURM_NPROCS": ntasks, "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1",
        "SLURM_NODELIST": node, "SLURM_JOB_NODELIST": node, "SLURMD_NODENAME": node, "SLURM_TOPOLOGY_ADDR": node,
        "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_USER": user,
        "SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_GID": str(os.getgid()),
    }
    if options.cpus_per_task:
        values["SLURM_CPUS_PER_TASK"] = options.cpus_per_task
    if options.partition:
        values["SLURM_JOB_PARTITION"] = options.partition
    return values


KEPT_SLURM_ENV = ("SLURM_CONF", "SLURM_TIME_FORMAT")  # how Slurm's own commands are reached, not what the job is


def expand_output_pattern(pattern: str, job_id: str, job_name: str, user: str) -> str:
    """sbatch's filename pattern on this machine (%j %x %u %A %a %N; %a of a job that is no array is
    4294967294, as Slurm writes it)."""
    return expand_filename_pattern(pattern, job_id=job_id, job_name=job_name, user=user,
                                   node=socket.gethostname().split(".")[0], array_task="4294967294")


def _without_slurm_job(env: dict[str, str]) -> dict[str, str]:
    """The submitting environment less the SLURM_* variables of a job it may itself run in (salloc, srun)."""
    return {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SLURMD_")) or k in KEPT_SLURM_ENV}


class LocalScheduler:
    """Jobs as local process groups, with Slurm's states."""

    name = "local"
    free_state_queries = True  # a file on this host: asked at every poll
    supports_requeue = False

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_dir() / "local-jobs"
        self._live_from = 0  # job_process_groups: every lower id had ended at its last call

    def job_dir(self, job_id: str) -> Path:
        if not job_id.isdigit():
            raise UsageError(f"{job_id!r} is not a local job id (expected digits)")
        return self.root / job_id

    def _next_id(self) -> str:

        make_private_dirs(self.root)
        counter = os.open(self.root / "counter", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(counter, "r+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            current = int(handle.read().strip() or "0")
            handle.seek(0)
            handle.truncate()
            handle.write(str(current + 1))
        return str(current + 1)

    def test_only(self, request: SubmitRequest) -> str:
        """What `sbatch --test-only` says (on stderr), without creating a job, as sbatch does."""
        base = Path(os.path.abspath(request.workdir or os.getcwd()))
        script = request.script if request.script.is_absolute() else base / request.script
        parse_local_options(tuple(o for o in request.sbatch_options if o != "--test-only"), script,
                            request.job_environment())  # the same errors a real submission would give
        start = time.strftime("%Y-%m-%dT%H:%M:%S")
        return (f"sbatch: Job {self._peek_next_id()} to start at {start} using 1 processors on nodes "
                f"{socket.gethostname().split('.')[0]} in partition local")

    def _peek_next_id(self) -> str:
        try:
            return str(int((self.root / "counter").read_text(encoding="utf-8").strip() or "0") + 1)
        except (OSError, ValueError):
            return "1"

    def submit(self, request: SubmitRequest) -> str:
        if "--test-only" in request.sbatch_options:
            raise UsageError("--test-only creates no job; use LocalScheduler.test_only")
        base = Path(os.path.abspath(request.workdir or os.getcwd()))  # the supervisor runs in its own folder
        script = request.script if request.script.is_absolute() else base / request.script
        options = parse_local_options(request.sbatch_options, script, request.job_environment())
        workdir = (base / options.chdir) if options.chdir else base
        if not workdir.is_dir():
            raise UsageError(f"working folder {workdir} does not exist; create it or fix --chdir")
        job_id = self._next_id()
        while self.job_dir(job_id).exists():  # a leftover folder (the counter was reset): skip its id
            job_id = self._next_id()
        user = self.current_user()
        job_name = options.job_name or script.name
        stdout_path = workdir / expand_output_pattern(options.output, job_id, job_name, user)
        stderr_path = (
            workdir / expand_output_pattern(options.error, job_id, job_name, user)
            if options.error else None
        )
        folder = self.job_dir(job_id)
        make_private_dirs(folder.parent)
        os.mkdir(folder, 0o700)  # fails when it exists: one job per folder
        os.chmod(folder, 0o700)
        argv = ["bash", str(script.resolve()), *request.script_args]
        slurm_env = job_variables(options, job_id=job_id, job_name=job_name, submit_dir=base, user=user)
        spec = {
            "job_id": job_id,
            "name": job_name,
            "owner": user,
            "argv": redact_args(argv),  # the real one reaches the supervisor through its environment only
            "work_dir": str(workdir.resolve()),
            "stdout_path": str(stdout_path),
            "stderr_path": str(stderr_path) if stderr_path else None,
            "time_limit_s": options.time_limit_s,
            "after_job": options.after_job,
            "kill_on_invalid_dep": options.kill_on_invalid_dep,
            "env": {name: redact(f"{name}={value}").partition("=")[2]
                    for name, value in {**request.env, **slurm_env, "GUARDED_SBATCH_JOB_ID": job_id}.items()},
            "submit_time": time.time(),
        }
        write_json_atomic(folder / "spec.json", spec)
        write_json_atomic(folder / "job.json", {"state": JobState.PENDING.value})
        log = os.fdopen(os.open(folder / "supervisor.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600), "ab")
        try:
            # Detached on purpose: the supervisor outlives the CLI that submitted the job.
            proc = start_process(
                python_argv("-m", "guarded_sbatch.scheduler.local_supervisor", str(folder.resolve())), cwd=folder,
                stdout=log, stderr_to_stdout=True,
                env={**_without_slurm_job(request.job_environment()), **slurm_env, ARGV_ENV: json.dumps(argv)},
            )
        except CommandError as exc:
            raise SchedulerError(f"cannot start the local job supervisor: {exc.stderr}") from None
        finally:
            log.close()
        write_json_atomic(folder / "supervisor.json", {"pid": proc.pid})
        return job_id

    def _status(self, job_id: str) -> tuple[dict, dict]:
        folder = self.job_dir(job_id)
        spec = read_json(folder / "spec.json")
        if spec is None:
            raise SchedulerError(f"no local job {job_id}; see `guarded-sbatch status` for your runs")
        status = read_json(folder / "job.json") or {"state": JobState.UNKNOWN.value}
        state = JobState(status.get("state", "UNKNOWN"))
        if not state.is_terminal and not self._supervisor_alive(folder):
            status = read_json(folder / "job.json") or status  # it may have finished just now
            if not JobState(status.get("state", "UNKNOWN")).is_terminal:
                status = {**status, "state": JobState.FAILED.value, "reason": "supervisor vanished"}
        return spec, status

    @staticmethod
    def _supervisor_alive(folder: Path) -> bool:
        info = read_json(folder / "supervisor.json")
        if not info:
            return True  # just submitted
        try:
            os.kill(int(info["pid"]), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:
            with open(f"/proc/{int(info['pid'])}/stat", encoding="ascii") as handle:
                return handle.read().split(") ")[-1][:1] != "Z"
        except OSError:
            return False

    def state(self, job_id: str) -> JobState:
        return JobState(self._status(job_id)[1]["state"])

    def info(self, job_id: str) -> JobInfo:
        spec, status = self._status(job_id)
        return JobInfo(
            job_id=job_id,
            state=JobState(status["state"]),
            name=spec["name"],
            owner=spec["owner"],
            work_dir=spec["work_dir"],
            stdout_path=spec["stdout_path"],
            time_limit_s=spec["time_limit_s"],
            start_time=status.get("start_time"),
            end_time=status.get("end_time"),
            exit_code=status.get("exit_code"),
            reason=status.get("reason", ""),
            pgid=status.get("pgid"),
        )

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        folder = self.job_dir(job_id)
        spec, status = self._status(job_id)
        if JobState(status["state"]).is_terminal:
            return
        sig = signal_named(signal_name) if signal_name else signal.SIGTERM
        if signal_name is None:
            (folder / "cancel").write_text(str(time.time()), encoding="utf-8")
        pgid = status.get("pgid")
        if pgid:
            try:
                os.killpg(int(pgid), sig)
            except ProcessLookupError:
                pass

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        return {job_id: self.state(job_id) for job_id in job_ids}

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
                    spec, status = self._status(folder.name)
                except SchedulerError:
                    continue
                if not JobState(status["state"]).is_terminal:
                    names.add(spec["name"])
        return names

    def job_process_groups(self) -> dict[str, int]:
        """Asked at every sidecar poll: ids are handed out in order and an ended local job stays ended, so the
        jobs below the oldest one live at the last call are not read again (not every job the user ever ran)."""
        try:
            ids = sorted(int(name) for name in os.listdir(self.root) if name.isdigit())
        except OSError:
            return {}
        live = {job: pgid for job in ids if job >= self._live_from and (pgid := self._live_group(job)) is not None}
        self._live_from = min(live, default=ids[-1] + 1 if ids else 0)
        return {str(job): pgid for job, pgid in live.items() if pgid}

    def _live_group(self, job: int) -> int | None:
        """None once the job has ended; else its process group (0 while it is not known yet)."""
        status = read_json(self.root / str(job) / "job.json")
        status = status if isinstance(status, dict) else {}  # none yet: just submitted
        try:
            if JobState(status.get("state", JobState.PENDING.value)).is_terminal:
                return None
            return int(status.get("pgid") or 0)
        except (TypeError, ValueError):
            return 0  # a record being rewritten: read again next time


_: type[Scheduler] = LocalScheduler
