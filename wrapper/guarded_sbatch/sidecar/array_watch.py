"""One watcher job for one job array: every task is a run of its own (record, sources, history, decision, report,
evidence, and a STOP that cancels that task alone, `scancel J_T`), all of them in one process.

It is the shared monitor (sidecar/shared_monitor.py) on the array's own registration folder
(records/monitor_registry.py, `array-<J>`), with these differences:
- a task is adopted once the scheduler says it has started (or ended): under a throttle (`--array 0-255%4`) most
  tasks wait for hours, and no source is opened, no loop kept, for a task that has not started;
- the scheduler is asked about every task of the array at once, one `states()` call every `job_poll_s` (30 s by
  default here: at most 120 calls an hour whatever the array's size), and each task's loop reads its state from
  that answer at every poll (free reads), so a task that ended is judged for the last time at the next query and
  the watcher leaves within one query of the last task's end;
- each task is polled at its own cadence (the start-up grace's quicker polls included), so one slow task does not
  set the pace of the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from guarded_sbatch.records import monitor_registry as registry
from guarded_sbatch.sources.run_sources import RunSources
from guarded_sbatch.scheduler.interface import JobInfo, JobState, Scheduler
from guarded_sbatch.sidecar.shared_monitor import MonitorSettings, SharedMonitor, _record

ARRAY_JOB_POLL_S = 30.0  # the one scheduler query for the whole array: a task's end is seen within this
_NOT_STARTED = (JobState.PENDING, JobState.REQUEUED, JobState.UNKNOWN)


class ArrayWatcher(SharedMonitor):
    """The watcher of one job array's tasks (see the module's docstring)."""

    def __init__(
        self, settings: MonitorSettings, scheduler: Scheduler, out: TextIO, *,
        clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(settings, scheduler, out, clock=clock, sleep=sleep)
        self.waiting: dict[str, dict[str, Any]] = {}  # registered tasks that have not started
        self.next_poll: dict[str, float] = {}
        self.entries: dict[str, dict[str, Any]] = {}  # the adopted tasks' registrations

    def refresh_snapshot(self, now: float) -> None:
        ids = [*self.runs, *self.waiting]
        if not ids:
            return
        self.snapshot = self.scheduler.states(ids)  # Slurm: one squeue -r for every task of the array
        self.snapshot_at = now
        for job_id, run in self.runs.items():
            if self.snapshot.get(job_id, JobState.UNKNOWN).is_terminal:
                self.next_poll[job_id] = now  # ended: its last read and final report at this poll

    def poll(self, now: float) -> None:
        self.polls += 1
        for entry in registry.registrations(self.settings.folder, known=frozenset([*self.runs, *self.waiting])):
            job_id = str(entry["job_id"])
            if job_id not in self.runs:
                self.waiting.setdefault(job_id, entry)
        if not self.snapshot_at or now - self.snapshot_at >= self.settings.job_poll_s:
            self.refresh_snapshot(now)
        self._adopt_started(now)
        for run in list(self.runs.values()):
            if self._leave_reason:
                return
            if self.next_poll.get(run.job_id, now) > now:
                continue
            self.poll_run(run)
            if run.job_id in self.runs:
                self.next_poll[run.job_id] = now + run.sidecar._poll_interval(now)
            else:
                self.next_poll.pop(run.job_id, None)

    def _adopt_started(self, now: float) -> None:
        for job_id in list(self.waiting):
            if len(self.runs) >= self.settings.max_runs:
                return  # the others wait for a place; every one keeps its registration
            if self.snapshot.get(job_id, JobState.UNKNOWN) in _NOT_STARTED:
                continue
            entry = self.waiting.pop(job_id)
            self.entries[job_id] = entry
            if self.adopt_entry(entry, free_states=True) is not None:
                self.next_poll[job_id] = now

    def run_info(self, job_id: str) -> JobInfo:
        """A task's folder and output as its record has them (the launch expanded %A/%a for it) and its state from
        the array's last query: on Slurm asking `scontrol show job J_T` once per task would be a call per task. Where
        a question costs nothing (the local backend, whose job info carries the task's process group) it is asked."""
        entry = self.entries.get(job_id)
        record = _record(Path(entry["run_dir"])) if entry is not None and not self.scheduler.traits.free_state_queries else None
        sources = RunSources.from_json(record.sources) if record is not None else None
        if sources is None or not sources.workdir:
            return self.scheduler.info(job_id)
        return JobInfo(job_id, self.snapshot_state(job_id), owner="", work_dir=sources.workdir,
                       stdout_path=sources.stdout)

    def pause(self, now: float) -> float:
        """Until the earliest of: a task's next poll, the next scheduler query (at most fast_interval_s)."""
        due = [self.snapshot_at + self.settings.job_poll_s, *(self.next_poll.get(j, now) for j in self.runs)]
        return max(1.0, min(self.settings.fast_interval_s, min(due) - now))

