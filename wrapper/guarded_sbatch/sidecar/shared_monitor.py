"""The per-user shared monitor: one job watches every guarded run of its user.

Each run keeps what a per-job sidecar has: its own state file, report file (sidecar-monitor.out in the
run's folder, FINAL_SUMMARY included), evidence and note, so a STOP of one run never touches another.
What is shared is the scheduler: one `squeue --me` per `job_poll_s` answers for every run (a run's
own calls would be N x 12 an hour), and stopping a run is the only per-run call. Runs come and go
through the registration folder (records.monitor_registry); the monitor leaves when none is left, and
requeues itself (same job id) when Slurm warns it of its time limit (USR1); a requeued or restarted
monitor resumes every run from its state file.
"""

from __future__ import annotations

import os

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from guarded_sbatch.core import door
from guarded_sbatch.records import monitor_registry as registry
from guarded_sbatch.core.redact import remember_fingerprints
from guarded_sbatch.core.errors import GuardedError, SchedulerError
from guarded_sbatch.core.fsutil import read_json
from guarded_sbatch.records.registry import RunRecord, mark_over, runs_root
from guarded_sbatch.sources.run_sources import RunSources, SourceSpec, flagged_specs, specs_from_flags
from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.table import recorded_policy
from guarded_sbatch.scheduler.interface import (
    JobInfo, JobState, JobWatch, NodeLoss, Scheduler, SchedulerDefaults, SubmitRequest, cannot_requeue,
)
from guarded_sbatch.sidecar.counted import CountedScheduler, _cpu_seconds, _peak_rss_mb
from guarded_sbatch.sidecar.loop import Sidecar
from guarded_sbatch.sidecar.settings import SidecarSettings

log = logging.getLogger(__name__)
REPORT_FILE = "sidecar-monitor.out"


@dataclass
class MonitorSettings:
    folder: Path
    job_id: str | None  # the monitor's own job (None when run by hand)
    fast_interval_s: float = 60.0
    job_poll_s: float = 300.0
    max_runs: int = 200


class _SharedView(SchedulerDefaults):
    """What one run's Sidecar sees as its scheduler: states from the monitor's last batched query;
    a stop (info, cancel, the wait for the end) goes to the real scheduler. It submits, requeues and watches
    nothing: the monitor alone does (one query for all its runs)."""

    name = "slurm-shared"
    accepts_submissions = False

    def __init__(self, monitor: "SharedMonitor", job_id: str, *, free: bool = False) -> None:
        self.monitor = monitor
        self.job_id = job_id
        self.stopping = False
        # free: the monitor asks about every run at each of its own queries, so a run's loop may read the
        # answer at every poll (an array's watcher); else the loop asks at its own job_poll_s
        self.free_state_queries = free

    def state(self, job_id: str) -> JobState:
        if self.stopping:
            return self.monitor.scheduler.state(job_id)
        return self.monitor.snapshot_state(job_id)

    def info(self, job_id: str) -> JobInfo:
        return self.monitor.scheduler.info(job_id) if self.stopping else self.monitor.run_info(job_id)

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        self.stopping = True
        self.monitor.scheduler.cancel(job_id, signal_name=signal_name)

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        return {job_id: self.state(job_id) for job_id in job_ids}

    def submit(self, request: SubmitRequest) -> str:
        raise SchedulerError(f"run {self.job_id} is watched by a shared monitor, which submits nothing for it")

    def requeue(self, job_id: str) -> None:
        raise cannot_requeue(self.name, job_id)

    def node_losses(self, job_id: str) -> list[NodeLoss]:
        return []  # asked per run, it would be a call per run; the monitor's one query is all it asks

    def watch_job_end(self, job_id: str) -> JobWatch | None:
        return None

    def estimate_start(self, request: SubmitRequest) -> float | None:
        return None

    def active_job_names(self) -> set[str]:
        return self.monitor.scheduler.active_job_names()

    def user_jobs(self) -> list[JobInfo]:
        return self.monitor.scheduler.user_jobs()

    def job_process_groups(self) -> dict[str, int]:
        return self.monitor.scheduler.job_process_groups()

    def current_user(self) -> str:
        return self.monitor.scheduler.current_user()


_: type[Scheduler] = _SharedView


@dataclass
class _Run:
    job_id: str
    sidecar: Sidecar
    out: TextIO
    registered_at: float


class SharedMonitor:
    def __init__(
        self, settings: MonitorSettings, scheduler: Scheduler, out: TextIO, *,
        clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.calls = CountedScheduler(scheduler)
        self.scheduler: Scheduler = self.calls
        self.out = out
        self.clock = clock
        self.sleep = sleep
        self.runs: dict[str, _Run] = {}
        self.snapshot: dict[str, JobState] = {}
        self.snapshot_at = 0.0
        self.polls = 0
        self.stops = 0
        self._leave_reason = ""

    def emit(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    # --- the shared scheduler view ------------------------------------------------------------------

    def snapshot_state(self, job_id: str) -> JobState:
        state = self.snapshot.get(job_id)
        if state is None:
            run = self.runs.get(job_id)
            # registered after the last query: it was just submitted, so it is at least queued
            return JobState.PENDING if run is not None and run.registered_at >= self.snapshot_at else JobState.UNKNOWN
        return state

    def run_info(self, job_id: str) -> JobInfo:
        """What a run's loop is told of its job (its folder, output, start; asked once per run)."""
        return self.scheduler.info(job_id)

    def refresh_snapshot(self, now: float) -> None:
        ids = list(self.runs)
        if not ids:
            return
        self.snapshot = self.scheduler.states(ids)  # Slurm: one squeue for every run
        self.snapshot_at = now

    # --- runs ---------------------------------------------------------------------------------------

    def adopt(self) -> None:
        for entry in registry.registrations(self.settings.folder):
            job_id = str(entry["job_id"])
            if job_id in self.runs or len(self.runs) >= self.settings.max_runs:
                continue
            self.adopt_entry(entry)

    def adopt_entry(self, entry: dict[str, Any], *, free_states: bool = False) -> _Run | None:
        """Start watching one registered run: its own Sidecar, report file, state and evidence, the sources as its
        record has them (what a per-job sidecar reads). None when it was finished already (then retired)."""
        job_id = str(entry["job_id"])
        run_dir = Path(entry["run_dir"])
        remember_fingerprints(entry.get("secret_fingerprints") or [])  # this launch's secrets, masked too
        out = os.fdopen(door.open_raw(run_dir / REPORT_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                                      | os.O_NONBLOCK, 0o600), "a", encoding="utf-8")
        record = _record(run_dir)
        policy = recorded_policy(record.judge, record.run_name) if record is not None else JudgePolicy()
        sidecar_settings = SidecarSettings(
            run_name=str(entry.get("run_name") or f"job-{job_id}"), job_id=job_id,
            state_file=run_dir / "sidecar-state.json", evidence_dir=run_dir / "evidence",
            notes_path=Path(entry["notes"]) if entry.get("notes") else None,
            stop_command=entry.get("stop_command") or None,
            sources=_named_sources(entry, record),
            fast_interval_s=self.settings.fast_interval_s,
            full_interval_s=float(entry.get("full_interval_s") or 1800.0),
            job_poll_s=self.settings.job_poll_s, policy=policy,
            identity=RunSources.from_json(record.sources) if record is not None else None,
        )
        view = _SharedView(self, job_id, free=free_states)
        sidecar = Sidecar(sidecar_settings, view, out, clock=self.clock, sleep=self.sleep)
        sidecar.emit(f"monitor: watched by shared monitor job {self.settings.job_id or '(by hand)'}\n")
        run = _Run(job_id, sidecar, out, float(entry.get("registered_at", 0.0)))
        self.runs[job_id] = run
        if not sidecar.begin():
            self._retire(run)
            return None
        self.emit(f"monitor: watching run {sidecar_settings.run_name} (job {job_id}), {len(self.runs)} runs\n")
        return run

    def _retire(self, run: _Run) -> None:
        registry.retire(self.settings.folder, run.job_id)
        run.out.close()
        self.runs.pop(run.job_id, None)

    def poll(self, now: float) -> None:
        self.polls += 1
        self.adopt()
        if not self.snapshot_at or now - self.snapshot_at >= self.settings.job_poll_s:
            self.refresh_snapshot(now)
        for run in list(self.runs.values()):
            if self._leave_reason:
                return
            self.poll_run(run)

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
        self.emit(f"monitor: shared monitor {self.settings.job_id or '(by hand)'} starts on {self.settings.folder}\n")
        try:
            while True:
                self.poll(self.clock())
                if self._leave_reason:
                    return self._requeue_or_leave()
                if not self.runs:
                    with registry.locked(self.settings.folder):
                        if not registry.live_count(self.settings.folder):
                            if self.settings.job_id:
                                registry.clear_monitor(self.settings.folder, self.settings.job_id)
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
        """Seconds until the next poll."""
        return self.settings.fast_interval_s

    def _sleep_unless_leaving(self, seconds: float) -> None:
        end = self.clock() + seconds
        while not self._leave_reason and self.clock() < end:
            self.sleep(min(1.0, max(0.0, end - self.clock())))

    def _requeue_or_leave(self) -> int:
        self.emit(f"monitor: {self._leave_reason}\n")
        if self._leave_reason.startswith("time limit") and self.settings.job_id:
            if self.scheduler.supports_requeue:
                for run in self.runs.values():
                    run.sidecar.state.save(run.sidecar.settings.state_file)
                self.emit(f"monitor: requeueing job {self.settings.job_id}; every run resumes from its state\n")
                self.scheduler.requeue(self.settings.job_id)
        return 0


def _named_sources(entry: dict[str, Any], record: RunRecord | None) -> list[SourceSpec]:
    """The sources named with guard flags: the record's, or (a registration without a record) the entry's."""
    if record is not None:
        return flagged_specs(record)
    return specs_from_flags({"tensorboard": list(entry.get("tb", [])), "wandb": list(entry.get("wandb", [])),
                             "textlog": list(entry.get("log", []))}, origin="the run's registration")


def _record(run_dir: Path) -> RunRecord | None:
    """The run's record: without its recorded sources a run adopted before its job starts would be judged on
    whatever its folder holds."""
    raw = read_json(run_dir / "run.json")
    return RunRecord.from_json(raw) if isinstance(raw, dict) and raw.get("run_id") else None


def install_signal_handlers(monitor: SharedMonitor) -> None:
    """USR1 (Slurm's warning before the time limit): requeue; TERM (scancel, requeue from outside):
    save and leave; the next monitor process resumes every run from its state."""
    signal.signal(signal.SIGUSR1, lambda *_: monitor.request_leave("time limit near: requeueing"))
    signal.signal(signal.SIGTERM, lambda *_: monitor.request_leave("terminated: saving every run's state"))
