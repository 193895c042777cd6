"""What the Slurm backend asks Slurm about jobs: squeue for live states, scontrol for a job's details and the
cluster's config, sacct for jobs that are gone, each final state remembered (slurm_cache.py) so a finished job is
asked about once. A controller that does not answer is JobState.UNKNOWN from state(), never a final state."""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import SchedulerError
from guarded_sbatch.scheduler.interface import JobInfo, JobState, NodeLoss, SchedulerDefaults
from guarded_sbatch.scheduler.slurm_cache import FinalStateCache, info_from_fields, info_to_fields
from guarded_sbatch.scheduler.slurm_nodes import node_losses
from guarded_sbatch.scheduler.slurm_parse import (
    error_lines,
    is_unknown_job,
    job_info_from_sacct,
    job_info_from_scontrol,
    parse_key_values,
    sacct_job_row,
    sacct_states,
    slurm_state,
    task_parts,
)
from guarded_sbatch.scheduler.slurm_run import query_env, raise_if_unreachable, run_slurm

# Every state a job can be in while it still holds (or waits for) its place in the queue.
_ACTIVE_STATES_FILTER = "pending,running,suspended,completing,configuring,requeued"
_SACCT_FIELDS = ("JobID", "JobName", "User", "WorkDir", "Timelimit", "Start", "End", "ExitCode", "State")


class SlurmQueries(SchedulerDefaults):
    """The questions of the Scheduler protocol, asked of a real Slurm cluster (slurm.py's SlurmScheduler adds the
    actions: submit, cancel, requeue)."""

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

    # --- questions about jobs ------------------------------------------------------------------------

    def state(self, job_id: str) -> JobState:
        """Live state from squeue; once the job is gone, the remembered final state or sacct; else UNKNOWN."""
        try:
            result = run_slurm(["squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T"], timeout=self.query_timeout_s)
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
        result = run_slurm(
            ["scontrol", "-o", "show", "job", job_id], timeout=self.query_timeout_s, env=query_env()
        )
        if result.returncode == 0:
            for line in result.stdout.splitlines():
                if line.startswith("JobId="):
                    info = job_info_from_scontrol(parse_key_values(line))
                    if info.state.is_terminal:
                        self._remember(job_id, info_to_fields(info))
                    return info
        raise_if_unreachable(result)
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
            result = run_slurm(["squeue", "--me", "-r", "-h", "-t", "all", "-o", "%i|%T"], timeout=self.query_timeout_s)
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
            result = run_slurm(argv, timeout=self.query_timeout_s, env=query_env())
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
        return node_losses(job_id, self.query_timeout_s)

    def live_steps(self, job_id: str) -> list[str]:
        """The job's srun steps now (`squeue -s`): a signal to a step reaches its processes while the job lives, which
        the job's own cancel cannot hurry (slurmctld turns a job's KILL into a cancel: TERM, then KILL after KillWait).
        The batch shell and the extern step are left to the cancel."""
        result = run_slurm(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], timeout=self.query_timeout_s)
        if result.returncode != 0:
            raise_if_unreachable(result)
            return []  # gone already (or never started): nothing to signal
        steps = (line.strip() for line in result.stdout.splitlines())
        return [step for step in steps if step and step.rsplit(".", 1)[-1] not in ("batch", "extern", "interactive")]

    def current_user(self) -> str:
        return pwd.getpwuid(os.getuid()).pw_name

    def active_job_names(self) -> set[str]:
        """Names of this user's pending/running jobs (squeue's text output: `squeue --json` ignores -u in 22.05)."""
        argv = ["squeue", "-h", "-u", self.current_user(), "-t", _ACTIVE_STATES_FILTER, "-o", "%j"]
        result = run_slurm(argv, timeout=self.query_timeout_s)
        if result.returncode != 0:
            raise_if_unreachable(result)
            raise SchedulerError(f"squeue failed: {error_lines(result.stderr, 'squeue')}")
        return {line for line in result.stdout.splitlines() if line.strip()}

    def user_jobs(self) -> list[JobInfo]:
        """This user's jobs in one `squeue --me -r -t all` (an array's tasks one per line, `J_T`; jobs that ended
        within MinJobAge with their final state); a job not listed ended before that."""
        argv = ["squeue", "--me", "-r", "-h", "-t", "all", "-o", "%i|%T|%j"]
        result = run_slurm(argv, timeout=self.query_timeout_s)
        if result.returncode != 0:
            raise_if_unreachable(result)
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
        result = run_slurm(argv, timeout=self.query_timeout_s, env=query_env())
        if result.returncode != 0:
            raise_if_unreachable(result)
            raise SchedulerError(f"sacct failed: {error_lines(result.stderr, 'sacct')}")
        return sacct_job_row(result.stdout, job_id, _SACCT_FIELDS)

    def _slurm_config(self) -> dict[str, str]:
        if self._config is None:
            result = run_slurm(["scontrol", "show", "config"], timeout=self.query_timeout_s)
            if result.returncode != 0:
                raise_if_unreachable(result)
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

