"""The sidecar loop: discover → read → decide → report; on STOP: stop, evidence, note, FINAL_SUMMARY.

Fast polls (default every 60 s) read new points and act at once on a STOP. A full report is
printed every full interval (default 30 min; it grows while the run stays healthy and shrinks after
an anomaly), when the decision changes, and at the end. The scheduler is asked about the job
sparingly: every `job_poll_s` (default 300 s, so ≤ 12 calls an hour). On Slurm an idle step
inside the job (scheduler.slurm.JobEndWatch) ends with the job, so a finished job is noticed at
the next fast poll without polling slurmctld; where that step cannot run, the run's files going
quiet trigger the question instead.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.judge.verdict import Decision, Verdict
from guarded_sbatch.sidecar.report import DATA_SOURCE_LABELS, CheckReport, render_final_summary
from guarded_sbatch.scheduler.base import JobState, Scheduler
from guarded_sbatch.sidecar.state import SidecarState
from guarded_sbatch.sidecar.settings import SidecarSettings
from guarded_sbatch.sidecar.source_set import SourceSet

MAX_FULL_INTERVAL_S = 4 * 3600.0


class Sidecar:
    def __init__(
        self,
        settings: SidecarSettings,
        scheduler: Scheduler | None,
        out: TextIO,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.out = out
        self.clock = clock
        self.sleep = sleep
        self.state = SidecarState.load(settings.state_file)
        self.calls = CountedScheduler(scheduler) if scheduler is not None else None
        self.scheduler: Any = self.calls  # every scheduler call the sidecar makes goes through the count
        self.sources = SourceSet(settings, self.scheduler)
        self.job_state: JobState = JobState.UNKNOWN
        self._job_watch: Any = None  # scheduler.slurm.JobEndWatch while the job runs
        self._watch_starts = 0
        self._tracker_recorded = False
        self._asked_since_start = False  # a (re)started sidecar asks about the job at its first poll
        self._cpu_at_start = _cpu_seconds()
        self._checks_at_start = self.state.checks

    def emit(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def begin(self) -> bool:
        """Start or resume from the state file; False when the run was finished already."""
        now = self.clock()
        if self.state.finished:
            # a requeue after the end: say so in one line; the FINAL_SUMMARY was printed once already
            self.emit(f"sidecar: this run was already finished by an earlier sidecar ({self.state.last_decision} "
                      f"{self.state.last_reason} at step {self.state.last_step}); nothing to do\n")
            return False
        if self.state.started_at:
            self.state.restarts += 1
            self.emit(f"sidecar: resuming (restart {self.state.restarts}) after {self.state.checks} checks\n")
        else:
            self.state.started_at = now
            self.state.full_interval_s = self.settings.full_interval_s
            self.state.next_full_report_at = now  # first full report as soon as there is something to say
        return True

    def run(self) -> int:
        if not self.begin():
            return 0
        try:
            while True:
                exit_code = self.poll_once()
                self.state.save(self.settings.state_file)
                if exit_code is not None:
                    return exit_code
                self.sleep(self.settings.fast_interval_s)
        finally:
            if self._job_watch is not None:
                self._job_watch.close()
            self._record_resources()

    # one fast poll; returns an exit code when the loop should end
    def poll_once(self) -> int | None:
        now = self.clock()
        self.state.checks += 1
        new_points = self.sources.read()
        if new_points:
            self.state.last_new_data_at = now
        self._maybe_poll_job(now, bool(new_points))
        if new_points and not self._tracker_recorded:
            self._record_tracker_run()
        verdict = self._judge(now)
        self.state.data_source = DATA_SOURCE_LABELS.get(self.sources.active_kind, "unreachable")
        if verdict.decision is Decision.STOP:
            return self._stop(verdict, now)
        ended = self.job_state.is_terminal
        changed = (verdict.decision.value, verdict.reason.value) != (self.state.last_decision, self.state.last_reason)
        new_anomaly = any(self._anomaly_id(a) not in self.state.reported_anomalies for a in verdict.anomalies)
        if ended or changed or new_anomaly or now >= self.state.next_full_report_at:
            self._full_report(verdict, now, ending=ended)
        self._remember(verdict)
        if ended:
            self.state.finished = True
            self.state.final_summary = f"training job {self.settings.job_id} ended {self.job_state.value}; sidecar done\n"
            self.emit(self.state.final_summary)
            return 0
        return None

    def _record_tracker_run(self) -> None:
        """Once the W&B run behind the metrics is known, note it in the run's record (kill/restart
        delete it there). Only for sidecars of a guarded run: they live in the run's folder."""
        run = self.sources.wandb_run_info()
        if run is None:
            return
        self._tracker_recorded = True
        from guarded_sbatch.core.fsutil import read_json, write_json_atomic
        from guarded_sbatch.core.redact import redact

        run_json = self.settings.state_file.parent / "run.json"
        record = read_json(run_json)
        if not isinstance(record, dict) or record.get("tracker", {}).get("run_path"):
            return
        record["tracker"] = {"kind": "wandb", **{k: redact(v) for k, v in run.items()}}
        try:
            write_json_atomic(run_json, record)
        except OSError as exc:
            self.emit(f"sidecar: could not record the W&B run in {run_json}: {exc}\n")

    def _judge(self, now: float) -> Verdict:
        from guarded_sbatch.judge.policy import RunContext

        live = self.settings.job_id is not None and self.job_state is not JobState.UNKNOWN and not self.job_state.is_terminal
        since = now - self.state.last_new_data_at if self.state.last_new_data_at else None
        return judge_sources(self.sources, self.settings.policy, RunContext(job_live=live, seconds_since_last_point=since))

    def _maybe_poll_job(self, now: float, had_new_points: bool) -> None:
        if self.scheduler is None or self.settings.job_id is None:
            return
        cheap = getattr(self.scheduler, "name", "") == "local"
        since_poll = now - self.state.last_job_poll_at
        due = cheap or not self._asked_since_start or since_poll >= self.settings.job_poll_s
        watch = self._job_watch
        if watch is not None and watch.ended():
            due, self._job_watch = True, None  # the job (or its watch step) ended: ask which
        elif watch is None and not cheap:
            # no watch step: a finished job shows up as files that went quiet
            quiet_for = now - (self.state.last_new_data_at or self.state.started_at)
            quiet = not had_new_points and not self.sources.stdout_grew()
            if quiet and quiet_for >= self.state.quiet_threshold_s and since_poll >= self.state.quiet_threshold_s:
                due = True
                self.state.quiet_threshold_s = min(self.state.quiet_threshold_s * 2, self.settings.job_poll_s)
        if not due:
            return
        self._asked_since_start = True
        try:
            self.job_state = self.scheduler.state(self.settings.job_id)
        except GuardedError:
            self.job_state = JobState.UNKNOWN
        if self.job_state is JobState.UNKNOWN and self.state.last_job_state != JobState.UNKNOWN.value:
            self.emit(f"sidecar: the scheduler could not tell the state of job {self.settings.job_id} "
                      "(controller down or restarting?); carrying on, nothing is stopped for that\n")
        elif self.job_state is not JobState.UNKNOWN and self.state.last_job_state == JobState.UNKNOWN.value:
            self.emit(f"sidecar: the scheduler answers again: job {self.settings.job_id} is {self.job_state.value}\n")
        self.state.last_job_state = self.job_state.value
        if cheap:
            self.state.last_job_poll_at = now
            return
        self.state.record_job_poll(now)
        start_watch = getattr(self.scheduler, "watch_job_end", None)
        if self.job_state is JobState.RUNNING and self._job_watch is None and start_watch and self._watch_starts < 3:
            self._job_watch = start_watch(self.settings.job_id)
            self._watch_starts += 1
            self.state.record_job_poll(now)  # creating the step is one call to slurmctld too

    def _full_report(self, verdict: Verdict, now: float, *, ending: bool) -> None:
        interval = self.state.full_interval_s
        if verdict.anomalies or verdict.decision is not Decision.CONTINUE:
            interval = max(self.settings.fast_interval_s * 5, self.settings.full_interval_s / 4)
            self.state.healthy_streak = 0
        else:
            self.state.healthy_streak += 1
            if self.state.healthy_streak >= 3:
                interval = min(interval * 1.5, MAX_FULL_INTERVAL_S)
        self.state.full_interval_s = interval
        self.state.next_full_report_at = now + interval
        self.state.full_reports += 1
        report = CheckReport(
            when=now, data_source=self.state.data_source, run=self._run_label(), verdict=verdict,
            evidence=self.sources.files_inspected()[:6], next_check=None if ending else now + interval,
        )
        self.emit("\n" + report.render())

    def _remember(self, verdict: Verdict) -> None:
        previous_step = self.state.last_step
        self.state.last_decision = verdict.decision.value
        self.state.last_reason = verdict.reason.value
        self.state.last_message = verdict.message
        self.state.last_step = verdict.last_step
        for anomaly in verdict.anomalies:
            ident = self._anomaly_id(anomaly)
            if ident not in self.state.reported_anomalies:
                self.state.reported_anomalies.append(ident)
        self.state.reported_anomalies = self.state.reported_anomalies[-200:]
        self._observe_step_rate(verdict.last_step)
        del previous_step

    def _record_resources(self) -> None:
        """Peak RSS, CPU time per poll and scheduler calls of this sidecar process, in its state and output."""
        polls = max(1, self.state.checks - self._checks_at_start)
        cpu = _cpu_seconds() - self._cpu_at_start
        self.state.peak_rss_mb = round(_peak_rss_mb(), 1)
        self.state.cpu_seconds = round(self.state.cpu_seconds + cpu, 3)
        self.state.scheduler_calls += self.calls.count if self.calls is not None else 0
        self.emit(f"sidecar: resources: peak RSS {self.state.peak_rss_mb:.1f} MB, CPU {cpu:.2f} s over {polls} "
                  f"polls ({1000 * cpu / polls:.1f} ms/poll), {self.calls.count if self.calls else 0} scheduler "
                  "calls by this process\n")
        try:
            self.state.save(self.settings.state_file)
        except OSError:
            pass  # the figures are in the output already

    def _observe_step_rate(self, last_step: int | None) -> None:
        """Steps per second as the sidecar sees them arrive (for status's live ETA)."""
        if last_step is None or not self.state.last_new_data_at:
            return
        if self.state.first_step_seen is None:
            self.state.first_step_seen, self.state.first_step_seen_at = last_step, self.state.last_new_data_at
            return
        elapsed = self.state.last_new_data_at - self.state.first_step_seen_at
        if elapsed > 0 and last_step > self.state.first_step_seen:
            self.state.step_rate = (last_step - self.state.first_step_seen) / elapsed

    @staticmethod
    def _anomaly_id(anomaly: object) -> str:
        return f"{getattr(anomaly, 'kind', '')}:{getattr(anomaly, 'metric', '')}:{getattr(anomaly, 'step', '')}"

    def _run_label(self) -> str:
        job = f" (job {self.settings.job_id})" if self.settings.job_id else ""
        return f"{self.settings.run_name}{job} — {self.sources.describe()}"

    def _stop(self, verdict: Verdict, now: float) -> int:
        from guarded_sbatch.actions.evidence import write_evidence
        from guarded_sbatch.actions.notes import append_project_note
        from guarded_sbatch.actions.stop import StopOutcome, stop_run

        self._full_report(verdict, now, ending=True)
        if self.state.stop_requested_at:
            # an earlier process of this watcher stopped the run and was ended before it could finish:
            # one stop per run, whatever restarts happen in between
            outcome = StopOutcome("none", True, f"stop requested already at {self.state.stop_requested_at:.0f} by an "
                                        "earlier watcher process")
        else:
            self.state.stop_requested_at = now
            self.state.save(self.settings.state_file)
            outcome = stop_run(self.scheduler, self.settings.job_id, self.settings.stop_command)
        self.emit(f"sidecar: stop {'done' if outcome.ok else 'FAILED'}: {outcome.detail}\n")
        history = self.sources.history()
        series = {key: tuple(map(list, history.series(key))) for key in history.keys()}
        evidence_path = None
        try:
            bundle = write_evidence(
                self.settings.evidence_dir, verdict, series,  # type: ignore[arg-type]
                run={"name": self.settings.run_name, "job_id": self.settings.job_id,
                     "data_source": self.state.data_source, "source": self.sources.describe()},
                files_inspected=self.sources.files_inspected(), log_path=self.sources.stdout_path(),
                stop_detail=outcome.detail,
            )
            evidence_path = str(bundle.json_path)
        except OSError as exc:
            self.emit(f"sidecar: could not write evidence to {self.settings.evidence_dir}: {exc}\n")
        note_detail = "not configured"
        if self.settings.notes_path is not None:
            note = (
                f"### {self.settings.run_name}: STOP ({verdict.reason.value})\n"
                f"- {verdict.message}\n- step {verdict.last_step}; {outcome.detail}\n- evidence: {evidence_path}"
            )
            try:
                append_project_note(self.settings.notes_path, note)
                note_detail = f"appended to {self.settings.notes_path}"
            except GuardedError as exc:
                note_detail = f"FAILED: {exc}"
        summary = render_final_summary(
            run=self.settings.run_name, job_id=self.settings.job_id, verdict=verdict, stop_detail=outcome.detail,
            evidence_path=evidence_path, note_detail=note_detail, when=self.clock(),
        )
        self.emit("\n" + summary)
        self._remember(verdict)
        self.state.finished = True
        self.state.final_summary = summary
        self.state.evidence = evidence_path or ""
        return 0


def judge_sources(sources: SourceSet, policy: object | None, context: object) -> Verdict:
    """The verdict on the sources' history; with nothing readable, or the judged source unreadable
    now, WAIT and say why (what was read before still stops a run that is clearly broken)."""
    from guarded_sbatch.judge.decide import decide
    from guarded_sbatch.judge.policy import JudgePolicy
    from guarded_sbatch.judge.verdict import Reason

    history = sources.history()
    verdict = decide(history, policy if policy is not None else JudgePolicy(), context)  # type: ignore[arg-type]
    if not len(history) and sources.read_error:
        return Verdict(Decision.WAIT, Reason.SOURCE_UNREADABLE, f"no metrics could be read: {sources.read_error}")
    active_error = sources.active_error
    if active_error and verdict.decision is not Decision.STOP:
        return Verdict(
            Decision.WAIT, Reason.SOURCE_UNREADABLE,
            f"cannot read the metrics now ({active_error}); judged up to step {verdict.last_step}, "
            "waiting for the source to come back",
            verdict.anomalies, verdict.last_step, verdict.summary,
        )
    return verdict


class CountedScheduler:
    """The scheduler with a count of the calls made through it (each one at least one Slurm RPC)."""

    COUNTED = frozenset({"state", "info", "cancel", "watch_job_end", "submit"})

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.count = 0

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if name not in self.COUNTED or not callable(value):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return value(*args, **kwargs)

        return counted


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mb() -> float:
    """VmHWM of this process (the peak resident set), in MB; ru_maxrss where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def check_once(settings: SidecarSettings) -> tuple[Verdict, str]:
    """The one-shot check: read what is there now and judge it as it stands (no staleness)."""
    from guarded_sbatch.judge.policy import RunContext

    sources = SourceSet(settings, None)
    sources.read()
    verdict = judge_sources(sources, settings.policy, RunContext(job_live=False))
    return verdict, DATA_SOURCE_LABELS.get(sources.active_kind, "unreachable")
