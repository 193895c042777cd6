"""The Slurm backend: the one module that runs Slurm's commands (sbatch, squeue, scontrol, sacct, scancel).

Every command goes through runner.run_command with a timeout. A controller that does not answer is reported
as SlurmUnreachableError (a SchedulerError), or as JobState.UNKNOWN by state(): never as a final state.
"""

from __future__ import annotations

import os
import time
import pwd
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import CommandError, SchedulerError, UsageError
from guarded_sbatch.core.remembered import recall, remember
from guarded_sbatch.core.runner import CommandResult, run_command
from guarded_sbatch.scheduler.interface import (
    BackendTraits, JobInfo, JobState, NodeLoss, Scheduler, SchedulerDefaults, SchedulerUnreachableError, SubmitRequest,
)
from guarded_sbatch.scheduler.slurm_cache import FinalStateCache, info_from_fields, info_to_fields
from guarded_sbatch.scheduler.slurm_nodes import node_losses
from guarded_sbatch.scheduler.slurm_watch import JobEndWatch
from guarded_sbatch.scheduler.slurm_parse import (
    error_lines,
    is_unknown_job,
    is_unreachable,
    job_info_from_sacct,
    job_info_from_scontrol,
    parse_key_values,
    parse_parsable_job_id,
    parse_test_only_start,
    sacct_job_row,
    sacct_states,
    slurm_state,
    task_parts,
)

# Every state a job can be in while it still holds (or waits for) its place in the queue.
_ACTIVE_STATES_FILTER = "pending,running,suspended,completing,configuring,requeued"
_SACCT_FIELDS = ("JobID", "JobName", "User", "WorkDir", "Timelimit", "Start", "End", "ExitCode", "State")


class SlurmUnreachableError(SchedulerUnreachableError):
    """slurmctld (or slurmdbd) did not answer."""


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


class SlurmScheduler(SchedulerDefaults):
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

    def __init__(
        self,
        *,
        state_dir: Path | None = None,
        query_timeout_s: float = 30.0,
        submit_timeout_s: float = 60.0,
    ) -> None:
        self.query_timeout_s = query_timeout_s
        self.submit_timeout_s = submit_timeout_s
        self.final_states = FinalStateCache(state_dir)
        self._config: dict[str, str] | None = None

    # --- submission ----------------------------------------------------------------------------------

    def submit(self, request: SubmitRequest) -> str:
        """`sbatch --parsable <options> script <args>` with the user's options unchanged; returns the job id."""
        argv = ["sbatch", "--parsable", *sbatch_words(request), str(request.script), *request.script_args]
        result = self._run(argv, timeout=self.submit_timeout_s, env=self._submit_env(request), cwd=self._checked_workdir(request))
        if result.returncode != 0:
            self._raise_if_unreachable(result)
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
            result = self._run(argv, timeout=self.submit_timeout_s, env=env, cwd=self._checked_workdir(request))
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

    # --- questions about jobs ------------------------------------------------------------------------

    def state(self, job_id: str) -> JobState:
        """Live state from squeue; once the job is gone, the remembered final state or sacct; else UNKNOWN."""
        try:
            result = self._run(["squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T"], timeout=self.query_timeout_s)
        except SchedulerError:
            return JobState.UNKNOWN
        rows = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        if result.returncode == 0 and rows:
            state = slurm_state(rows[0])
            if state.is_terminal:
                self._remember(job_id, {"job_id": job_id, "state": state.value})
            return state
        if result.returncode != 0 and not is_unknown_job(result.stderr):
            return JobState.UNKNOWN  # unreachable, or an answer we do not understand: never guess a final state
        try:
            return self._state_of_gone_job(job_id)
        except SchedulerError:
            return JobState.UNKNOWN

    def info(self, job_id: str) -> JobInfo:
        """Details from `scontrol -o show job` (expanded StdOut path); from memory or sacct once the job is gone."""
        result = self._run(
            ["scontrol", "-o", "show", "job", job_id], timeout=self.query_timeout_s, env=self._query_env()
        )
        if result.returncode == 0:
            for line in result.stdout.splitlines():
                if line.startswith("JobId="):
                    info = job_info_from_scontrol(parse_key_values(line))
                    if info.state.is_terminal:
                        self._remember(job_id, info_to_fields(info))
                    return info
        self._raise_if_unreachable(result)
        if result.returncode != 0 and not is_unknown_job(f"{result.stderr}\n{result.stdout}"):
            raise SchedulerError(f"scontrol could not show job {job_id}: {error_lines(result.stderr, 'scontrol')}")
        remembered = self._remembered(job_id)
        if remembered is not None and "work_dir" in remembered:
            return info_from_fields(remembered)
        if self.accounting_enabled():
            row = self._sacct_row(job_id)
            if row is not None:
                return job_info_from_sacct(row)
        if remembered is not None:
            return info_from_fields(remembered)
        raise SchedulerError(
            f"Slurm no longer knows job {job_id} (it ended more than MinJobAge ago and accounting is off); "
            "check the job's output file"
        )

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        """The states of many jobs with one `squeue --me -r` (all states, so a job that ended within
        MinJobAge is seen with its final state; `-r` lists an array's pending tasks one per line, `J_T`, as
        its running ones are); a job no longer listed gets its remembered final state, else one batched sacct
        (`-X`: a line per task) when accounting is on, else UNKNOWN. On no answer: all UNKNOWN."""
        wanted = [str(j) for j in job_ids]
        try:
            result = self._run(["squeue", "--me", "-r", "-h", "-t", "all", "-o", "%i|%T"], timeout=self.query_timeout_s)
        except SchedulerError:
            return {j: JobState.UNKNOWN for j in wanted}
        if result.returncode != 0:
            return {j: JobState.UNKNOWN for j in wanted}
        listed: dict[str, JobState] = {}
        for line in result.stdout.splitlines():
            job, _, state_text = line.strip().partition("|")
            if job:
                listed[job] = slurm_state(state_text)
        states: dict[str, JobState] = {}
        gone: list[str] = []
        known = self._remembered_many(wanted)  # one read of the cache for the whole list (an array's 256 tasks)
        for job in wanted:
            if job in listed:
                states[job] = listed[job]
                if listed[job].is_terminal and job not in known:
                    self._remember(job, {"job_id": job, "state": listed[job].value})
            else:
                remembered = known.get(job)
                if remembered is not None:
                    states[job] = slurm_state(str(remembered.get("state", "")))
                else:
                    gone.append(job)
        states.update(self._gone_states(gone))
        return states

    def _gone_states(self, job_ids: list[str]) -> dict[str, JobState]:
        if not job_ids:
            return {}
        unknown = {j: JobState.UNKNOWN for j in job_ids}
        try:
            if not self.accounting_enabled():
                return unknown
            # an array's tasks asked by its id: every task's line, and the range still pending, in one answer
            asked = dict.fromkeys((parts[0] if (parts := task_parts(j)) else j) for j in job_ids)
            argv = ["sacct", "-n", "-P", "-X", "-j", ",".join(asked), "-o", "JobID,State"]
            result = self._run(argv, timeout=self.query_timeout_s, env=self._query_env())
        except SchedulerError:
            return unknown
        if result.returncode != 0:
            return unknown
        states = sacct_states(result.stdout, job_ids)
        for job, state in states.items():
            if state.is_terminal:
                self._remember(job, {"job_id": job, "state": state.value})
        return states

    def node_losses(self, job_id: str) -> list[NodeLoss]:
        """The job's runs that ended NODE_FAIL (a node died), with the nodes down now; [] without accounting."""
        return node_losses(self, job_id)

    def requeue(self, job_id: str) -> None:
        """`scontrol requeue`: the job goes back to the queue under the same id (its process is ended)."""
        result = self._run(["scontrol", "requeue", job_id], timeout=self.query_timeout_s)
        if result.returncode != 0:
            self._raise_if_unreachable(result)
            raise SchedulerError(f"scontrol requeue {job_id} failed: {error_lines(result.stderr, 'scontrol')}")

    def live_steps(self, job_id: str) -> list[str]:
        """The job's srun steps now (`squeue -s`): a signal to a step reaches its processes while the job lives, which
        the job's own cancel cannot hurry (slurmctld turns a job's KILL into a cancel: TERM, then KILL after KillWait).
        The batch shell and the extern step are left to the cancel."""
        result = self._run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], timeout=self.query_timeout_s)
        if result.returncode != 0:
            self._raise_if_unreachable(result)
            return []  # gone already (or never started): nothing to signal
        steps = (line.strip() for line in result.stdout.splitlines())
        return [step for step in steps if step and step.rsplit(".", 1)[-1] not in ("batch", "extern", "interactive")]

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
        result = self._run(argv, timeout=self.query_timeout_s)
        if result.returncode == 0 or is_unknown_job(result.stderr):
            return  # already ended or purged: nothing left to cancel
        self._raise_if_unreachable(result)
        raise SchedulerError(f"scancel {job_id} failed: {error_lines(result.stderr, 'scancel')}")

    def current_user(self) -> str:
        return pwd.getpwuid(os.getuid()).pw_name

    def watch_job_end(self, job_id: str) -> "JobEndWatch":
        """Start an idle overlapping step in the job (one RPC); it ends when the job ends, so the
        sidecar learns of the end within a poll without asking slurmctld again and again."""
        return JobEndWatch(job_id)

    def job_process_groups(self) -> dict[str, int]:
        return {}  # a job's processes are told by the SLURM_JOB_ID they carry (sidecar/job_writers.py)

    def active_job_names(self) -> set[str]:
        """Names of this user's pending/running jobs (squeue's text output: `squeue --json` ignores -u in 22.05)."""
        argv = ["squeue", "-h", "-u", self.current_user(), "-t", _ACTIVE_STATES_FILTER, "-o", "%j"]
        result = self._run(argv, timeout=self.query_timeout_s)
        if result.returncode != 0:
            self._raise_if_unreachable(result)
            raise SchedulerError(f"squeue failed: {error_lines(result.stderr, 'squeue')}")
        return {line for line in result.stdout.splitlines() if line.strip()}

    def user_jobs(self) -> list[JobInfo]:
        """This user's jobs in one `squeue --me -r -t all` (an array's tasks one per line, `J_T`; jobs that ended
        within MinJobAge with their final state); a job not listed ended before that."""
        argv = ["squeue", "--me", "-r", "-h", "-t", "all", "-o", "%i|%T|%j"]
        result = self._run(argv, timeout=self.query_timeout_s)
        if result.returncode != 0:
            self._raise_if_unreachable(result)
            raise SchedulerError(f"squeue failed: {error_lines(result.stderr, 'squeue')}")
        rows = (line.strip().split("|", 2) for line in result.stdout.splitlines() if line.strip())
        return [JobInfo(row[0], slurm_state(row[1]), name=row[2]) for row in rows if len(row) == 3]

    def accounting_enabled(self) -> bool:
        """Whether slurmdbd accounting is on (so sacct can answer about finished jobs)."""
        storage = self._slurm_config().get("AccountingStorageType", "accounting_storage/none")
        return storage.strip() != "accounting_storage/none"

    def cluster_name(self) -> str:
        return self._slurm_config().get("ClusterName", "")

    # --- internals -----------------------------------------------------------------------------------

    def _state_of_gone_job(self, job_id: str) -> JobState:
        remembered = self._remembered(job_id)
        if remembered is not None:
            return slurm_state(str(remembered.get("state", "")))
        if task_parts(job_id) is not None:  # a task cancelled while pending has no line of its own
            return self._gone_states([job_id])[job_id]
        if self.accounting_enabled():
            row = self._sacct_row(job_id)
            if row is not None:
                state = slurm_state(row["State"])
                if state.is_terminal:
                    self._remember(job_id, info_to_fields(job_info_from_sacct(row)))
                return state
        return JobState.UNKNOWN

    def _sacct_row(self, job_id: str) -> dict[str, str] | None:
        """The job's own sacct line (slurm_parse.sacct_job_row: its ExitCode the job's, a signal from `.batch`)."""
        argv = ["sacct", "-n", "-P", "-j", job_id, "-o", ",".join(_SACCT_FIELDS)]
        result = self._run(argv, timeout=self.query_timeout_s, env=self._query_env())
        if result.returncode != 0:
            self._raise_if_unreachable(result)
            raise SchedulerError(f"sacct failed: {error_lines(result.stderr, 'sacct')}")
        return sacct_job_row(result.stdout, job_id, _SACCT_FIELDS)

    def _slurm_config(self) -> dict[str, str]:
        if self._config is None:
            result = self._run(["scontrol", "show", "config"], timeout=self.query_timeout_s)
            if result.returncode != 0:
                self._raise_if_unreachable(result)
                raise SchedulerError(f"scontrol show config failed: {error_lines(result.stderr, 'scontrol')}")
            config: dict[str, str] = {}
            for line in result.stdout.splitlines():
                key, sep, value = line.partition("=")
                if sep and key.strip() and " " not in key.strip():
                    config[key.strip()] = value.strip()
            self._config = config
        return self._config

    def _remember(self, job_id: str, fields: dict[str, Any]) -> None:
        try:
            self.final_states.put(self.cluster_name(), job_id, fields)
        except (OSError, SchedulerError):
            pass  # remembering is best effort: the answer in hand is still right

    def _remembered(self, job_id: str) -> dict[str, Any] | None:
        return self.final_states.get(self.cluster_name(), job_id)

    def _remembered_many(self, job_ids: list[str]) -> dict[str, dict[str, Any]]:
        try:
            return self.final_states.get_many(self.cluster_name(), job_ids)
        except SchedulerError:
            return {}

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

    @staticmethod
    def _query_env() -> dict[str, str]:
        return {**os.environ, "SLURM_TIME_FORMAT": "%s"}

    def _run(
        self, argv: list[str], *, timeout: float, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> CommandResult:
        try:
            return run_command(argv, timeout=timeout, env=env, cwd=cwd, check=False)
        except CommandError as error:
            if error.timed_out:
                raise SlurmUnreachableError(
                    f"slurmctld is not answering: `{argv[0]}` got no reply within {timeout:.0f} s; "
                    "check `sinfo` or ask your admin"
                ) from None
            raise SchedulerError(
                f"cannot run `{argv[0]}` ({error.stderr.strip()}): is Slurm installed on this machine? "
                "Without Slurm, use the local scheduler"
            ) from None

    @staticmethod
    def _raise_if_unreachable(result: CommandResult) -> None:
        if result.returncode != 0 and is_unreachable(result.stderr):
            raise SlurmUnreachableError(
                f"slurmctld is not answering: {error_lines(result.stderr, result.argv[0])}; "
                "check `sinfo` or ask your admin"
            )


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
