"""The watcher of N runs: one job watching the runs registered in one folder (records/monitor_registry.py) — the
per-user monitor (every guarded run of its user, `sidecar.mode = "per-user"`) or a job array's watcher (every task
of the array, `array-<J>`, each task a run of its own).

Each run is watched as the per-job sidecar watches its one: the same loop (sidecar/loop.py) on the plan its record
gives (sidecar/plan.py), its own state file, report file (sidecar-monitor.out in the run's folder, FINAL_SUMMARY
included), evidence and note, so a STOP of one run never touches another, and each run polled at its own cadence.
What is shared is the scheduler: one `states()` query (Slurm: one `squeue`) at the shortest `job_poll_s` of the runs
answers for every run (a run's own calls would be N x 12 an hour), each run's loop reads its job's state from that
answer at every poll, and stopping a run is the only per-run call. Runs come and go through the registration folder;
the watcher leaves when none is left, and requeues itself (same job id) when Slurm warns it of its time limit (USR1);
a requeued or restarted watcher resumes every run from its state file.

An array's watcher adopts a task once the scheduler says it has started (or ended): under a throttle
(`--array 0-255%4`) most tasks wait for hours, and no source is opened, no loop kept, for a task that has not.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.core.fsutil import read_json
from guarded_sbatch.core.redact import remember_fingerprints
from guarded_sbatch.records import monitor_registry as registry
from guarded_sbatch.records.registry import RunRecord, mark_over, runs_root
from guarded_sbatch.scheduler.interface import JobInfo, JobState, NodeLoss, Scheduler
from guarded_sbatch.sidecar.counted import CountedScheduler, _cpu_seconds, _peak_rss_mb
from guarded_sbatch.sidecar.loop import Sidecar
from guarded_sbatch.sidecar.plan import WatchPlan, plan_of
from guarded_sbatch.sources.run_sources import RunSources

from guarded_sbatch.core.config import SidecarJobSettings

if TYPE_CHECKING:
    from guarded_sbatch.core.config import Config

REPORT_FILE = "sidecar-monitor.out"
MAX_RUNS = 1024  # runs one watcher reads at once (a pending array task costs nothing; more running ones wait)
_NOT_STARTED = (JobState.PENDING, JobState.REQUEUED, JobState.UNKNOWN)


@dataclass(frozen=True)
class _Waiting:
    entry: dict[str, Any]
    record: RunRecord
    plan: WatchPlan


@dataclass
class _Run:
    job_id: str
    sidecar: Sidecar
    out: TextIO
    record: RunRecord


class SharedMonitor:
    """The watcher of the runs registered in `folder` (see the module's docstring)."""

    def __init__(
        self, folder: Path, scheduler: Scheduler, out: TextIO, *, job_id: str | None = None,
        site: Config | None = None, clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.folder = folder
        self.job_id = job_id  # the watcher's own job (None when run by hand)
        self.site = site  # where alerts go and the audit trail (sidecar/plan.py)
        self.array = folder.name.startswith("array-")
        self.calls = CountedScheduler(scheduler)
        self.scheduler: Scheduler = self.calls
        self.out = out
        self.clock = clock
        self.sleep = sleep
        self.runs: dict[str, _Run] = {}
        self.waiting: dict[str, _Waiting] = {}  # registered runs not adopted yet (an array's pending tasks)
        self.next_poll: dict[str, float] = {}
        self.snapshot: dict[str, JobState] = {}
        self.snapshot_at = 0.0
        self.polls = 0
        self.stops = 0
        self._leave_reason = ""

    def emit(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    # --- what a run's loop is told of its job (sidecar/job_poll.py SharedAnswers) -------------------------

    def state(self, job_id: str) -> JobState:
        state = self.snapshot.get(job_id)
        if state is None:
            # registered after the last query: it was just submitted, so it is at least queued
            return JobState.PENDING if job_id in self.runs else JobState.UNKNOWN
        return state

    def info(self, job_id: str) -> JobInfo:
        """A run's folder and output as its record has them (the launch expanded %A/%a for it) and its state from
        the last query: on Slurm asking `scontrol show job` once per run would be a call per run. Where a question
        costs nothing (the local backend, whose job info carries the job's process group) it is asked."""
        run = self.runs.get(job_id)
        sources = RunSources.from_json(run.record.sources) if run is not None else None
        if self.scheduler.traits.free_state_queries or sources is None or not sources.workdir:
            return self.scheduler.info(job_id)
        return JobInfo(job_id, self.state(job_id), owner="", work_dir=sources.workdir, stdout_path=sources.stdout)

    def node_losses(self, job_id: str) -> list[NodeLoss]:
        return []  # asked per run, it would be a call per run; the watcher's one query is all it asks

    def refresh_snapshot(self, now: float) -> None:
        ids = [*self.runs, *self.waiting]
        if not ids:
            return
        self.snapshot = self.scheduler.states(ids)  # Slurm: one squeue for every run
        self.snapshot_at = now
        for job_id in self.runs:
            if self.snapshot.get(job_id, JobState.UNKNOWN).is_terminal:
                self.next_poll[job_id] = now  # ended: its last read and final report at this poll

    # --- runs ---------------------------------------------------------------------------------------

    def poll(self, now: float) -> None:
        self.polls += 1
        for entry in registry.registrations(self.folder, known=frozenset([*self.runs, *self.waiting])):
            self._register(entry)
        if not self.snapshot_at or now - self.snapshot_at >= self.job_poll_s:
            self.refresh_snapshot(now)
        self._adopt_waiting(now)
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

    def _adopt_waiting(self, now: float) -> None:
        for job_id in list(self.waiting):
            if len(self.runs) >= MAX_RUNS:
                return  # the others wait for a place; every one keeps its registration
            if self.array and self.snapshot.get(job_id, JobState.UNKNOWN) in _NOT_STARTED:
                continue
            if self.adopt(self.waiting.pop(job_id)) is not None:
                self.next_poll[job_id] = now

    def _register(self, entry: dict[str, Any]) -> None:
        """A registration seen: its run's record read, once, into the plan its loop will follow."""
        job_id, run_dir = str(entry["job_id"]), Path(entry["run_dir"])
        remember_fingerprints(entry.get("secret_fingerprints") or [])  # this launch's secrets, masked too
        raw = read_json(run_dir / "run.json", own=True)  # the user's own record only, as list_runs
        if not (isinstance(raw, dict) and raw.get("run_id")):
            self.emit(f"monitor: job {job_id}'s run record {run_dir / 'run.json'} is not there; not watched\n")
            registry.retire(self.folder, job_id)
            return
        record = RunRecord.from_json(raw)
        self.waiting[job_id] = _Waiting(entry, record, plan_of(record, run_dir, site=self.site))

    @property
    def job_poll_s(self) -> float:
        """How often the scheduler is asked: the shortest of the runs' own (an array's tasks record at most 30 s)."""
        plans = [*(run.sidecar.settings for run in self.runs.values()), *(w.plan for w in self.waiting.values())]
        return min((plan.sidecar.job_poll_s for plan in plans), default=SidecarJobSettings.job_poll_s)

    def adopt(self, waiting: _Waiting) -> _Run | None:
        """Start watching one registered run: its own loop on its record's plan, report file, state and evidence.
        None when it was finished already (then retired)."""
        plan, job_id = waiting.plan, str(waiting.entry["job_id"])
        out = os.fdopen(door.open_raw(plan.state_file.parent / REPORT_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                                          | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600), "a", encoding="utf-8")
        sidecar = Sidecar(plan, self.scheduler, out, clock=self.clock, sleep=self.sleep, answers=self)
        sidecar.emit(f"monitor: watched by {'array watcher' if self.array else 'shared monitor'} job "
                     f"{self.job_id or '(by hand)'}\n")
        run = _Run(job_id, sidecar, out, waiting.record)
        self.runs[job_id] = run
        if not sidecar.begin():
            self._retire(run)
            return None
        self.emit(f"monitor: watching run {plan.run_name} (job {job_id}), {len(self.runs)} runs\n")
        return run

    def _retire(self, run: _Run) -> None:
        registry.retire(self.folder, run.job_id)
        run.out.close()
        self.runs.pop(run.job_id, None)

    def poll_run(self, run: _Run) -> None:
        """One poll of one run; a run that is done is retired."""
        try:
            code = run.sidecar.poll_once()
        except (GuardedError, OSError) as exc:  # one run's trouble never stops the others
            run.sidecar.emit(f"monitor: this poll failed: {exc}\n")
            return
        run.sidecar.state.save(run.sidecar.settings.state_file)
        if code is not None:
            if run.sidecar.state.evidence:
                self.stops += 1
            ended, run_dir = run.sidecar.job_state, run.sidecar.settings.state_file.parent
            if ended.is_terminal and run_dir.parent == runs_root():  # a launch never asks about this run again
                try:
                    mark_over({run_dir.name: ended.value})
                except OSError:
                    pass  # the launch asks the scheduler instead
            self.emit(f"monitor: run {run.sidecar.settings.run_name} (job {run.job_id}) done: "
                      f"{run.sidecar.state.last_decision} {run.sidecar.state.last_reason}\n")
            self._retire(run)

    # --- the loop -----------------------------------------------------------------------------------

    def request_leave(self, reason: str) -> None:
        self._leave_reason = reason

    def run(self) -> int:
        cpu_start = _cpu_seconds()
        what = "array watcher" if self.array else "shared monitor"
        self.emit(f"monitor: {what} {self.job_id or '(by hand)'} starts on {self.folder}\n")
        try:
            while True:
                self.poll(self.clock())
                if self._leave_reason:
                    return self._requeue_or_leave()
                if not self.runs and not self.waiting:
                    with registry.locked(self.folder):
                        if not registry.live_count(self.folder):
                            if self.job_id:
                                registry.clear_monitor(self.folder, self.job_id)
                            self.emit("monitor: no live runs left; leaving\n")
                            return 0
                self._sleep_unless_leaving(self.pause(self.clock()))
        finally:
            for run in list(self.runs.values()):
                run.sidecar.state.save(run.sidecar.settings.state_file)
                run.out.close()
            cpu = _cpu_seconds() - cpu_start
            self.emit(f"monitor: resources: peak RSS {_peak_rss_mb():.1f} MB, CPU {cpu:.2f} s over {self.polls} polls, "
                      f"{self.calls.count} scheduler calls, {self.stops} runs stopped\n")

    def pause(self, now: float) -> float:
        """Seconds until the earliest of: a run's next poll, the next scheduler query."""
        due = [self.snapshot_at + self.job_poll_s, *(self.next_poll.get(j, now) for j in self.runs)]
        return max(1.0, min(due) - now)

    def _sleep_unless_leaving(self, seconds: float) -> None:
        end = self.clock() + seconds
        while not self._leave_reason and self.clock() < end:
            self.sleep(min(1.0, max(0.0, end - self.clock())))

    def _requeue_or_leave(self) -> int:
        self.emit(f"monitor: {self._leave_reason}\n")
        if self._leave_reason.startswith("time limit") and self.job_id:
            if self.scheduler.traits.supports_requeue:
                for run in self.runs.values():
                    run.sidecar.state.save(run.sidecar.settings.state_file)
                self.emit(f"monitor: requeueing job {self.job_id}; every run resumes from its state\n")
                self.scheduler.requeue(self.job_id)
        return 0


def install_signal_handlers(monitor: SharedMonitor) -> None:
    """USR1 (Slurm's warning before the time limit): requeue; TERM (scancel, requeue from outside):
    save and leave; the next monitor process resumes every run from its state."""
    signal.signal(signal.SIGUSR1, lambda *_: monitor.request_leave("time limit near: requeueing"))
    signal.signal(signal.SIGTERM, lambda *_: monitor.request_leave("terminated: saving every run's state"))
