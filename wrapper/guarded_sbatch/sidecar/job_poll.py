"""How a watcher learns its job's state: from the one query of a watcher of several runs (SharedAnswers), else by
asking the scheduler sparingly (every `job_poll_s`; on Slurm an idle step in the job ends with it, so its end is
noticed at the next fast poll; where that step cannot run, the run's files going quiet trigger the question)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.scheduler.interface import JobInfo, JobState, JobWatch, NodeLoss, Scheduler
from guarded_sbatch.sidecar.node_loss import NodeLossWatch
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.state import SidecarState

# the states of a job that is not running yet or again: its files growing mean it (re)started
_WAITING = frozenset({JobState.PENDING, JobState.REQUEUED, JobState.SUSPENDED, JobState.COMPLETING})
_WAKE_ASK_S = 30.0  # at most one such question per 30 s (files of another run in the same folder may grow)


class SharedAnswers(Protocol):
    """What a watcher of several runs (sidecar/shared_monitor.py) answers for each from its one scheduler query: a
    run's loop reads its job's state there at every poll, and asks the scheduler itself only to stop it."""

    def state(self, job_id: str) -> JobState: ...

    def info(self, job_id: str) -> JobInfo: ...

    def node_losses(self, job_id: str) -> list[NodeLoss]: ...


class JobPoll:
    def __init__(self, settings: WatchPlan, scheduler: Scheduler | None, answers: SharedAnswers | None,
                 state: SidecarState, stdout_grew: Callable[[], bool], diag: Callable[[str, int], None]) -> None:
        self.job_id = settings.job_id
        self.job_poll_s = settings.sidecar.job_poll_s
        self.scheduler = scheduler
        self.answers = answers
        self.state = state
        self.stdout_grew = stdout_grew
        self.diag = diag
        self.node_losses = NodeLossWatch(settings.job_id)
        self.job_state: JobState = JobState.UNKNOWN
        self.watch: JobWatch | None = None  # Slurm's idle step in the job while it runs
        self.watch_failures = 0  # watch steps that ended while their job ran on: after 3, files going quiet instead
        self.asked_since_start = False  # a (re)started watcher asks about the job at its first poll

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()

    def maybe_poll(self, now: float, had_new_points: bool) -> None:
        if self.scheduler is None or self.job_id is None:
            return
        if self.answers is not None:  # the watcher's one query answers for every run: read at each poll, free
            self.learn_state(self.answers.state(self.job_id), self.answers.node_losses)
            self.state.last_job_poll_at = now
            return
        cheap = self.scheduler.traits.free_state_queries
        since_poll = now - self.state.last_job_poll_at
        due = cheap or not self.asked_since_start or since_poll >= self.job_poll_s
        watch, watch_ended = self.watch, False
        if watch is not None and watch.ended():
            due, self.watch, watch_ended = True, None, True  # the job (or its watch step) ended: ask which
        elif watch is None and not cheap:
            alive = had_new_points or self.stdout_grew()
            if alive and self.job_state in _WAITING and since_poll >= _WAKE_ASK_S:
                # a job last seen waiting (queued, requeued, suspended) writes again: it runs, so ask now and arm
                # its watch step; left to the quiet files, its end would be noticed only a quiet threshold late
                due = True
            # no watch step: a finished job shows up as files that went quiet
            quiet_for = now - (self.state.last_new_data_at or self.state.started_at)
            if not alive and quiet_for >= self.state.quiet_threshold_s and since_poll >= self.state.quiet_threshold_s:
                due = True
                self.state.quiet_threshold_s = min(self.state.quiet_threshold_s * 2, self.job_poll_s)
        if not due:
            return
        self.asked_since_start = True
        try:
            state = self.scheduler.state(self.job_id)
        except GuardedError:
            state = JobState.UNKNOWN
        self.learn_state(state, self.scheduler.node_losses)
        if cheap:
            self.state.last_job_poll_at = now
            return
        self.state.record_job_poll(now)
        if watch_ended and self.job_state is JobState.RUNNING:
            self.watch_failures += 1  # the step ended but not the job: it could not run (a requeue is no failure)
        if self.job_state is JobState.RUNNING and self.watch is None and self.watch_failures < 3:
            self._start_watch(self.scheduler, self.job_id, now)

    def learn_state(self, state: JobState, node_losses: Callable[[str], list[NodeLoss]]) -> None:
        """The job's state as the scheduler answered; a change to or from "cannot tell" said once, and a run lost
        with a node (sidecar/node_loss.py)."""
        self.job_state = state
        if state is JobState.UNKNOWN and self.state.last_job_state != JobState.UNKNOWN.value:
            self.diag(f"the scheduler could not tell the state of job {self.job_id} "
                      "(controller down or restarting?); carrying on, nothing is stopped for that\n", logging.WARNING)
        elif state is not JobState.UNKNOWN and self.state.last_job_state == JobState.UNKNOWN.value:
            self.diag(f"the scheduler answers again: job {self.job_id} is {state.value}\n", logging.INFO)
        if state is JobState.RUNNING:
            self.state.job_note = ""
        for line in self.node_losses.after_poll(node_losses, self.state.last_job_state, state):
            self.diag(line, logging.WARNING)
            self.state.job_note = line.strip()
        self.state.last_job_state = state.value

    def _start_watch(self, scheduler: Scheduler, job_id: str, now: float) -> None:
        self.watch = scheduler.watch_job_end(job_id)
        if self.watch is not None:  # None: the backend has no watch
            self.state.record_job_poll(now)  # creating the step is one call to slurmctld too
