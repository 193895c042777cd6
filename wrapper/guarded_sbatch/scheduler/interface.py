"""The scheduler interface shared by the Slurm and local backends."""

from __future__ import annotations

import enum
import getpass
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from guarded_sbatch.core.errors import SchedulerError, UsageError


class SchedulerUnreachableError(SchedulerError):
    """The scheduler did not answer (slurmctld or slurmdbd down, timed out): retry later, never a final state."""


class JobState(enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    REQUEUED = "REQUEUED"  # pending again after a requeue: the same run continues
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    UNKNOWN = "UNKNOWN"  # the scheduler could not tell (e.g. slurmctld down); never a reason to act

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def is_active(self) -> bool:
        return self in (JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED)


_TERMINAL = {
    JobState.COMPLETED,
    JobState.FAILED,
    JobState.CANCELLED,
    JobState.TIMEOUT,
    JobState.PREEMPTED,
    JobState.NODE_FAIL,
    JobState.OUT_OF_MEMORY,
}


@dataclass(frozen=True)
class SubmitRequest:
    """What to submit: the script file and its args, the user's own sbatch options (passed through unchanged), and
    what the guard itself asks of the job in scheduler words (each backend says it in its own dialect)."""

    script: Path
    # the user's pass-through options: the sbatch dialect the drop-in accepts (Slurm takes them as they are, the
    # local backend emulates a subset, scheduler/local_options.py); never a word the guard generates
    sbatch_options: tuple[str, ...] = ()
    script_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # added to the submitting environment
    workdir: Path | None = None  # where the job is submitted from (default: the current folder)
    after: str | None = None  # start once this job has started; never, and end, if it cannot (it ended, is unknown)
    comment: str | None = None  # the job's comment as the guard sets it (the user's own with the guard's marker)
    # the guard's own jobs (a sidecar, a watcher) name themselves and their output; each wins over the script's lines
    job_name: str | None = None
    output: str | None = None  # an absolute path; %j is the job's id

    def job_environment(self) -> dict[str, str]:
        """The submitting environment plus `env`, less what names a process of the submitting session: a job
        handed the W&B service token of a notebook or test process joins that process's wandb service, and a
        requeued attempt is then refused its own run id ("run ID ... is in use")."""
        merged = {**os.environ, **self.env}
        for name in SESSION_BOUND_ENV:
            merged.pop(name, None)
        return merged


SESSION_BOUND_ENV = ("WANDB_SERVICE",)


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: JobState
    name: str = ""
    owner: str = ""
    work_dir: str = ""
    stdout_path: str = ""  # expanded (%j etc. filled in)
    time_limit_s: int | None = None
    start_time: float | None = None  # epoch seconds
    end_time: float | None = None
    exit_code: int | None = None
    reason: str = ""
    pgid: int | None = None  # local backend: the job's process group (its processes write the run's files)


class JobWatch(Protocol):
    """Something in the job that ends with it (Slurm: an idle step), so its end is noticed without asking."""

    def ended(self) -> bool: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class NodeLoss:
    """One run of a job (1 = the first) that ended NODE_FAIL: a node died under it (scheduler/slurm_nodes.py)."""

    run: int
    nodes: str  # the job's nodes in that run, as Slurm writes them (mnode[1-2])
    ended_at: float | None
    down: tuple[str, ...]  # those nodes Slurm holds down or failed now, each "NAME (reason)"

    def describe(self, job_id: str) -> str:
        dead = ", ".join(self.down) if self.down else "none of them down any more"
        return f"job {job_id} lost a node: run {self.run} ended NODE_FAIL on {self.nodes} (down: {dead})"


@dataclass(frozen=True)
class BackendTraits:
    """How one backend differs from another, as data: each backend class states its one value (`traits`), read
    instead of comparing backend names (`backend_traits(name)` reads it without making a backend). The defaults are
    the most modest answers."""

    free_state_queries: bool = False  # a state query costs nothing (no controller to ask): asked at every poll
    supports_requeue: bool = False
    wait_poll_s: float = 10.0  # seconds between the state queries of a `--wait`
    cancel_command: str = "cancel"  # what a user's cancel of a job is called in `status` ("scancel")
    whole_second_times: bool = False  # start and end times are whole seconds (compared with a STOP's time, floored)
    # the site's plugins see every submission: a launch's jobs carry the guard's marker (launch/marking.py)
    marks_submissions: bool = False
    # it keeps its own copy of a submitted script, so the launch's temporary one may go once submitted
    keeps_script_copy: bool = False
    # each job is a process group on this host: `info().pgid` names it, `job_process_groups()` lists them
    process_groups_here: bool = False
    # sbatch itself takes the submissions: it answers sbatch's informational modes (`--test-only`) and reads the
    # script's #SBATCH lines (an `#SBATCH --wait` would block it before the guard is submitted)
    sbatch_native: bool = False
    multi_node: bool = False  # a job may span nodes with job steps (srun): a launcher command (torchrun ...) can run


class Scheduler(Protocol):
    """A place where jobs run: every member the launch, the CLI, the sidecar and the shared monitor use.
    Every method has a bounded run time. What a backend cannot do is answered as data (an empty list, None,
    False), or for `requeue` with SchedulerError, never by the method being absent. How backends differ is data
    too: its `traits`."""

    @property
    def name(self) -> str:
        """Its name in the registry (scheduler/__init__.py `BACKENDS`) and in a run's record."""
        ...

    @property
    def traits(self) -> BackendTraits: ...

    def submit(self, request: SubmitRequest) -> str:
        """Submit and return the job id."""
        ...

    def state(self, job_id: str) -> JobState: ...

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        """The states of many jobs in one query where the backend has one (Slurm: one squeue), else per job."""
        ...

    def info(self, job_id: str) -> JobInfo: ...

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        """Cancel the job; with signal_name (e.g. "USR1") only send that signal."""
        ...

    def requeue(self, job_id: str) -> None:
        """Put the job back in the queue under its id; SchedulerError where the backend cannot."""
        ...

    def live_steps(self, job_id: str) -> list[str]:
        """The job's running steps that a signal can reach apart from the job's own cancel (Slurm: `J.0`, not the
        batch shell); [] where a job has none (its cancel ends all its processes)."""
        ...

    def node_losses(self, job_id: str) -> list[NodeLoss]:
        """The job's runs that ended because a node died; [] where nodes cannot die (or nobody records it)."""
        ...

    def watch_job_end(self, job_id: str) -> JobWatch | None:
        """Start a watch that ends with the job; None where the backend has none."""
        ...

    def current_user(self) -> str: ...

    def estimate_start(self, request: SubmitRequest) -> float | None:
        """Epoch seconds when the job would start (sbatch --test-only); None when unknown."""
        ...

    def active_job_names(self) -> set[str]:
        """Names of the current user's queued or running jobs."""
        ...

    def user_jobs(self) -> list[JobInfo]:
        """Every job of the current user the scheduler lists now, in ONE query: queued, running, or ended
        within its memory (a job absent from the list is over); id ("J_T" per array task), state and name.
        SchedulerError when it does not answer. The launch asks this once (launch/live_jobs.py)."""
        ...

    def job_process_groups(self) -> dict[str, int]:
        """The process group of each live job, by job id, where the backend runs a job as one process group on
        this host (local); {} where it does not (Slurm)."""
        ...


def cannot_requeue(backend: str, job_id: str) -> SchedulerError:
    """The one answer of a backend without requeue."""
    return SchedulerError(f"the {backend} backend cannot requeue job {job_id}; submit it again instead")


class SchedulerDefaults:
    """The answers of a backend that lacks a part (requeue, node deaths, a job-end watch, a start estimate, a queue of
    named jobs, process groups) and the most modest traits: a backend inherits them and states only what differs,
    its `traits` as one class attribute (sources' SourceBase likewise; dask-jobqueue's job classes)."""

    name: str = ""
    traits = BackendTraits()

    def state(self, job_id: str) -> JobState:
        raise NotImplementedError

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        return {job_id: self.state(job_id) for job_id in job_ids}

    def requeue(self, job_id: str) -> None:
        raise cannot_requeue(self.name, job_id)

    def node_losses(self, job_id: str) -> list[NodeLoss]:
        return []

    def live_steps(self, job_id: str) -> list[str]:
        return []

    def watch_job_end(self, job_id: str) -> JobWatch | None:
        return None

    def current_user(self) -> str:
        return getpass.getuser()

    def estimate_start(self, request: SubmitRequest) -> float | None:
        return None

    def active_job_names(self) -> set[str]:
        return set()

    def job_process_groups(self) -> dict[str, int]:
        return {}


def signal_named(name: str) -> signal.Signals:
    """The signal a job is sent for `--signal`-style NAME ("USR1", "TERM"); UsageError for any other word."""
    found = signal.Signals.__members__.get(f"SIG{name}")
    if found is None:
        raise UsageError(f"unknown signal {name!r}; use a name such as USR1, TERM or INT")
    return found

