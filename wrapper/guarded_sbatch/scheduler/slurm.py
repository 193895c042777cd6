"""The Slurm backend: its actions (submit and its estimate, cancel, requeue, the job-end watch, sbatch's own
pass-through) here, its questions about jobs in slurm_queries.py; the scheduler/slurm*.py modules are the only ones
that run Slurm's commands (sbatch, squeue, scontrol, sacct, scancel, srun, sinfo), each through slurm_run.py.

Every command goes through runner.run_command with a timeout. A controller that does not answer is reported
as SlurmUnreachableError (a SchedulerError), or as JobState.UNKNOWN by state(): never as a final state.
"""

from __future__ import annotations

import os
import time
import shutil
from collections.abc import Sequence
from pathlib import Path

from guarded_sbatch.core.errors import CommandError, SchedulerError, UsageError
from guarded_sbatch.core.remembered import recall, remember
from guarded_sbatch.core.runner import CommandResult, run_command
from guarded_sbatch.scheduler.interface import BackendTraits, Scheduler, SubmitRequest
from guarded_sbatch.scheduler.slurm_parse import (
    error_lines, is_unknown_job, is_unreachable, parse_parsable_job_id, parse_test_only_start,
)
from guarded_sbatch.scheduler.slurm_queries import SlurmQueries
from guarded_sbatch.scheduler.slurm_run import SlurmUnreachableError, raise_if_unreachable, run_slurm
from guarded_sbatch.scheduler.slurm_watch import JobEndWatch

_NO_ESTIMATE_BEYOND_S = 366 * 24 * 3600


def sbatch_words(request: SubmitRequest) -> list[str]:
    """sbatch's options for a request: the user's own as given, then what the guard asks in sbatch's words (a later
    option wins in sbatch, so the guard's comment, which keeps the user's in front of its marker, comes last)."""
    words = list(request.sbatch_options)
    if request.job_name is not None:
        words.append(f"--job-name={request.job_name}")
    if request.output is not None:
        words.append(f"--output={request.output}")
    if request.after is not None:
        words += [f"--dependency=after:{request.after}", "--kill-on-invalid-dep=yes"]
    if request.comment is not None:
        words.append(f"--comment={request.comment}")
    return words


class SlurmScheduler(SlurmQueries):
    """Scheduler protocol over a real Slurm cluster."""

    name = "slurm"
    traits = BackendTraits(
        free_state_queries=False,  # each query is an RPC to slurmctld
        supports_requeue=True,
        wait_poll_s=10.0,  # one squeue per 10 s, as sbatch --wait's own backoff
        cancel_command="scancel",
        whole_second_times=True,
        marks_submissions=True,  # the site's cli_filter / job_submit plugins read the marker
        keeps_script_copy=True,  # slurmctld stores the script at submission
        sbatch_native=True,
        multi_node=True,
    )

    # --- submission ----------------------------------------------------------------------------------

    def submit(self, request: SubmitRequest) -> str:
        """`sbatch --parsable <options> script <args>` with the user's options unchanged; returns the job id."""
        argv = ["sbatch", "--parsable", *sbatch_words(request), str(request.script), *request.script_args]
        result = run_slurm(argv, timeout=self.submit_timeout_s, env=self._submit_env(request), cwd=self._checked_workdir(request))
        if result.returncode != 0:
            raise_if_unreachable(result)
            raise SchedulerError(f"sbatch rejected the job: {error_lines(result.stderr or result.stdout, 'sbatch')}")
        job_id = parse_parsable_job_id(result.stdout)
        if job_id is None:
            raise SchedulerError(
                f"sbatch printed no job id (stdout: {result.stdout.strip()!r}); check `squeue -u {self.current_user()}`"
            )
        return job_id

    def estimate_start(self, request: SubmitRequest) -> float | None:
        """Epoch seconds from `sbatch --test-only`; None when Slurm cannot tell. Raises when sbatch rejects the request."""
        argv = ["sbatch", "--test-only", *sbatch_words(request), str(request.script), *request.script_args]
        env = {**self._submit_env(request), "SLURM_TIME_FORMAT": "%s"}
        try:
            result = run_slurm(argv, timeout=self.submit_timeout_s, env=env, cwd=self._checked_workdir(request))
        except SlurmUnreachableError:
            return None
        if result.returncode != 0:
            if is_unreachable(result.stderr):
                return None
            raise SchedulerError(f"sbatch --test-only rejected the job: {error_lines(result.stderr, 'sbatch')}")
        start = parse_test_only_start(result.stderr + "\n" + result.stdout)
        if start is not None and start > time.time() + _NO_ESTIMATE_BEYOND_S:
            return None  # running jobs without a time limit: Slurm answers with the end of time (year 2500+)
        return start

    def requeue(self, job_id: str) -> None:
        """`scontrol requeue`: the job goes back to the queue under the same id (its process is ended)."""
        result = run_slurm(["scontrol", "requeue", job_id], timeout=self.query_timeout_s)
        if result.returncode != 0:
            raise_if_unreachable(result)
            raise SchedulerError(f"scontrol requeue {job_id} failed: {error_lines(result.stderr, 'scontrol')}")

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        """scancel the job; with a signal, send it instead (`B:SIG` to the batch shell only, else to all steps)."""
        signal = signal_name
        argv = ["scancel"]
        if signal and "." in job_id:  # a step: its own processes
            argv.append(f"--signal={signal}")
        elif signal:
            batch_only = signal.upper().startswith("B:")
            argv += ["--batch" if batch_only else "--full", f"--signal={signal[2:] if batch_only else signal}"]
        argv.append(job_id)
        result = run_slurm(argv, timeout=self.query_timeout_s)
        if result.returncode == 0 or is_unknown_job(result.stderr):
            return  # already ended or purged: nothing left to cancel
        raise_if_unreachable(result)
        raise SchedulerError(f"scancel {job_id} failed: {error_lines(result.stderr, 'scancel')}")

    def watch_job_end(self, job_id: str) -> "JobEndWatch":
        """Start an idle overlapping step in the job (one RPC); it ends when the job ends, so the
        sidecar learns of the end within a poll without asking slurmctld again and again."""
        return JobEndWatch(job_id)

    def job_process_groups(self) -> dict[str, int]:
        return {}  # a job's processes are told by the SLURM_JOB_ID they carry (sidecar/job_writers.py)

    def _checked_workdir(self, request: SubmitRequest) -> Path:
        workdir = Path(request.workdir) if request.workdir is not None else Path.cwd()
        if not workdir.is_dir():
            raise UsageError(f"working folder {workdir} does not exist: create it or submit from another folder")
        script = request.script if Path(request.script).is_absolute() else workdir / request.script
        if not Path(script).is_file():
            raise UsageError(f"batch script {request.script} not found in {workdir}: check the path")
        return workdir

    @staticmethod
    def _submit_env(request: SubmitRequest) -> dict[str, str]:
        return request.job_environment()


def sbatch_answers(timeout_s: float = 10.0) -> bool:
    """True when an `sbatch` is on PATH and says its version in time (the "auto" backend's test). `--version` asks
    no daemon, so a yes is remembered while the binary is the same file (a loop of launches asks once)."""
    found = shutil.which("sbatch")
    if found is None:
        return False
    binary = os.path.realpath(found)
    if recall("sbatch-answers", binary):
        return True
    try:
        answers = run_command([found, "--version"], timeout=timeout_s, check=False).returncode == 0
    except CommandError:
        return False
    if answers:
        remember("sbatch-answers", binary, True, [binary])
    return answers


def sbatch_pass_through(options: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
    """sbatch with options that submit nothing (--help, --usage, --version): its output and exit code as they are."""
    return run_command(["sbatch", *options], timeout=timeout_s, check=False)


BACKEND: type[Scheduler] = SlurmScheduler  # what the registry (scheduler/__init__.py) makes
