"""The sidecar loop: discover → read → decide → report; on STOP: stop, evidence, note, FINAL_SUMMARY.

Fast polls (default every 10 s: reading a local file's new bytes is cheap) read new points and act at once on
a STOP. A full report is printed every full interval (default 30 min; it grows while the run stays healthy and
shrinks after an anomaly), when the decision changes, and at the end. The job's state comes from job_poll.py,
which asks the scheduler sparingly (≤ 12 calls an hour by default).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from guarded_sbatch.sidecar.logs import stream_logger
from guarded_sbatch.judge.policy import RunContext
from guarded_sbatch.judge.table import policy_table
from guarded_sbatch.judge.history import MAX_SERIES_ENV
from guarded_sbatch.sidecar.one_shot import judge_sources
from guarded_sbatch.sources.files import OUT_OF_MEMORY
from guarded_sbatch.judge.verdict import Anomaly, Decision, Reason, Verdict
from guarded_sbatch.sidecar.report import (
    CheckReport, cadence_line, render_final_summary, startup_line, startup_progress_line,
)
from guarded_sbatch.scheduler.interface import JobState, Scheduler
from guarded_sbatch.sidecar.alerts import alert, alert_wait_or_crash, audit_stop
from guarded_sbatch.sidecar.job_poll import JobPoll, SharedAnswers
from guarded_sbatch.sidecar.unguarded_time import sidecar_verdict

from guarded_sbatch.sidecar.counted import CountedScheduler, _cpu_seconds, _peak_rss_mb
from guarded_sbatch.sidecar.state import SidecarState
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sources.kinds import label as source_label
from guarded_sbatch.sidecar.source_set import SourceSet
from guarded_sbatch.core.redact import redact
from guarded_sbatch.records.registry import update_record
from guarded_sbatch.sidecar.stop_record import (
    append_stop_note, save_evidence, share_stop_of, stop_of_another, stopped_before,
)
from guarded_sbatch.actions.stop_run import StopOutcome, stop_run
from guarded_sbatch.sidecar.agent_stop import stop_one_run

MAX_FULL_INTERVAL_S = 4 * 3600.0


class Sidecar:
    def __init__(
        self,
        settings: WatchPlan,
        scheduler: Scheduler | None,
        out: TextIO,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        answers: SharedAnswers | None = None,
    ) -> None:
        self.settings = settings
        self.answers = answers
        self.out = out
        self.clock = clock
        self.sleep = sleep
        self.state = SidecarState.load(settings.state_file)
        self.log = stream_logger("sidecar", out)
        self.calls = CountedScheduler(scheduler) if scheduler is not None else None
        self.scheduler: Scheduler | None = self.calls  # every scheduler call the sidecar makes goes through the count
        self.sources = SourceSet(settings, self.scheduler, info=answers.info if answers is not None else None)
        self._tracker_recorded = False
        self._out_of_memory_alerted = False
        self._cpu_at_start = _cpu_seconds()
        self._checks_at_start = self.state.checks
        self.job_poll = JobPoll(settings, self.scheduler, answers, self.state, self.sources.stdout_grew, self._diag)
        self._arrivals: list[float] = []  # the last polls that brought new points: the run's own pace (RunContext)
        self._startup_said_at = 5.0  # seconds into the start-up grace when "still no metrics" is said next

    @property
    def job_state(self) -> JobState:
        return self.job_poll.job_state

    def _diag(self, text: str, level: int = logging.INFO) -> None:
        """A diagnostic line (not a report block) through logging, in the one format of sidecar/logs.py."""
        self.log.log(level, text.rstrip("\n"))

    def emit(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def begin(self) -> bool:
        """Start or resume from the state file; False when the run was finished already."""
        now = self.clock()
        if self.state.finished:
            # a requeue after the end: say so in one line; the FINAL_SUMMARY was printed once already
            self._diag(f"this run was already finished by an earlier sidecar ({self.state.last_decision} "
                      f"{self.state.last_reason} at step {self.state.last_step}); nothing to do\n")
            return False
        if self.state.started_at:
            self.state.restarts += 1
            self._diag(f"resuming (restart {self.state.restarts}) after {self.state.checks} checks\n")
        else:
            self.state.started_at = now
            self.state.full_interval_s = self.settings.sidecar.full_interval_s
            self.state.next_full_report_at = now  # first full report as soon as there is something to say
        self.emit(cadence_line(self.settings))
        changed = policy_table(self.settings.policy) if self.settings.policy is not None else {}
        if changed:
            self._diag("judging with the run's [judge] thresholds: " + ", ".join(f"{k} = {v}" for k, v in changed.items()))
        return True

    def run(self) -> int:
        if not self.begin():
            return 0
        try:
            while True:
                try:
                    exit_code = self.poll_once()
                except Exception as exc:  # noqa: BLE001 - never fatal: the run must not go unguarded
                    exit_code = None
                    try:
                        self._poll_failed("the poll", exc)
                    except MemoryError:
                        pass  # not even the message fits: the next poll tries again
                try:
                    self.state.save(self.settings.state_file)
                except Exception as exc:  # noqa: BLE001 - MemoryError included: the watch goes on
                    self._poll_failed("saving the sidecar state", exc)
                if exit_code is not None:
                    return exit_code
                self.sleep(self._poll_interval(self.clock()))
        finally:
            self.job_poll.close()
            self._record_resources()

    # one fast poll; returns an exit code when the loop should end
    def poll_once(self) -> int | None:
        now = self.clock()
        self.state.checks += 1
        new_points = self._read_sources(now)
        try:
            self.job_poll.maybe_poll(now, bool(new_points))
        except Exception as exc:  # noqa: BLE001
            self._poll_failed("asking the scheduler about the job", exc)
        if new_points and not self._tracker_recorded:
            try:
                self._record_tracker_run()
            except Exception as exc:  # noqa: BLE001
                self._tracker_recorded = True  # once is enough to say it
                self._poll_failed("recording the W&B run", exc)
        self.sources.crashes.job_over = self.job_state.is_terminal  # a printed crash needs no more confirming
        handled, code = self._another_watchers_stop(now)
        if handled:
            return code
        if self.job_state.is_terminal:
            self._last_read()
        try:
            verdict = self._judge(now)
        except Exception as exc:  # noqa: BLE001 - the judge failing must not end the watch
            what = self._poll_failed("judging the metrics", exc)
            verdict = Verdict(Decision.WAIT, Reason.SOURCE_UNREADABLE,
                              f"this poll could not be judged ({what}); waiting, the watch goes on")
        verdict = sidecar_verdict(self, verdict, now, new_points)  # no judged loss for minutes: UNGUARDED
        self.state.data_source = source_label(self.sources.active_kind)
        ended = self.job_state.is_terminal
        if verdict.decision is Decision.STOP:
            return self._stop(verdict, now, ended=ended)
        if not ended and self._starting_up(now, verdict):
            return None
        self._maybe_alert_wait_or_crash(verdict, now, ended)
        changed = (verdict.decision.value, verdict.reason.value) != (self.state.last_decision, self.state.last_reason)
        new_anomaly = any(self._anomaly_id(a) not in self.state.reported_anomalies for a in verdict.anomalies)
        if ended or changed or new_anomaly or now >= self.state.next_full_report_at:
            self._full_report(verdict, now, ending=ended)
        self._remember(verdict)
        if ended:
            self.state.finished = True
            self.state.final_summary = (
                f"training job {self.settings.job_id} ended {self.job_state.value}; sidecar done (final decision "
                f"{verdict.decision.value} {verdict.reason.value} at step {verdict.last_step})\n"
            )
            self.emit(self.state.final_summary)
            return 0
        return None

    def _another_watchers_stop(self, now: float) -> tuple[bool, int | None]:
        """Another watcher of this run stopped it (state.share_stop): its STOP is the run's, told here once the job
        has ended; (True, the poll's exit code) then and while that stop is under way, (False, None) otherwise."""
        if self.job_state.is_terminal:
            self.state.take_shared_stop(self.settings.state_file)
        if not self.state.stop_by:
            return False, None
        told = stop_of_another(self.settings, self.state, self.job_state.is_terminal, now, self._diag)
        if told is None:  # its stop is under way (or did not take: then this sidecar guards the run again)
            return True, None
        self._last_read()
        return True, self._stop(told, now, ended=True)

    def _read_sources(self, now: float) -> int:
        """The poll's read of every source (a failure named, never fatal); how many new points came."""
        try:
            new_points = self.sources.read()
        except Exception as exc:  # noqa: BLE001 - a source failing is a WAIT with the error named
            new_points = 0
            self._poll_failed("reading the metrics", exc)
        if OUT_OF_MEMORY in (self.sources.read_error or "") and not self._out_of_memory_alerted:
            self._poll_failed("reading the metrics", MemoryError(self.sources.read_error))  # alerts once
        if self.sources.notes:  # points dropped or clamped on the way in: say so once per batch
            self._diag(f"{'; '.join(self.sources.notes)}\n")
            self.sources.notes = []
        if new_points:
            self.state.last_new_data_at = now
            self._arrivals = [*self._arrivals[-8:], now]
        return new_points

    def _last_read(self) -> None:
        """The job has ended: one last read of every source (what it wrote between the last poll's read and its
        end, its final flushes), so the final decision and report are made from all of it."""
        try:
            if self.sources.read():
                self.state.last_new_data_at = self.clock()
        except Exception as exc:  # noqa: BLE001 - the last word is judged on what was read before
            self._poll_failed("the last read after the job ended", exc)

    def _poll_failed(self, doing: str, exc: BaseException) -> str:
        """Count and name one failure inside a poll; the loop goes on. Returns the one-line error."""

        text = redact(" ".join(f"{type(exc).__name__}: {exc}".split()))[:300]
        self.state.poll_errors += 1
        repeated = text == self.state.last_poll_error
        self.state.last_poll_error = text
        if not repeated or self.state.poll_errors % 10 == 0:
            self._diag(f"{doing} failed at check {self.state.checks} ({text}); treated as WAIT, "
                      f"the watch goes on ({self.state.poll_errors} failed poll step(s) so far)\n", logging.WARNING)
        if isinstance(exc, MemoryError) and not self._out_of_memory_alerted:
            self._out_of_memory_alerted = True  # said once: the watch goes on, but it may be judging less
            self._alert("sidecar_error", Verdict(
                Decision.WAIT, Reason.SOURCE_UNREADABLE,
                f"{doing} ran out of memory at check {self.state.checks}; the sidecar goes on watching, but raise "
                f"its memory (sidecar mem) or lower {MAX_SERIES_ENV} if this repeats"))
        return text

    def _record_tracker_run(self) -> None:
        """Once the W&B run behind the metrics is known, note it in the run's record (kill/restart
        delete it there). Only for sidecars of a guarded run: they live in the run's folder."""
        run = self.sources.wandb_run_info()
        if run is None:
            return
        self._tracker_recorded = True

        run_json = self.settings.state_file.parent / "run.json"
        if not run_json.is_file():
            return

        def record_tracker(record: dict[str, object]) -> None:
            tracker = record.get("tracker")
            if not (isinstance(tracker, dict) and tracker.get("run_path")):
                record["tracker"] = {"kind": "wandb", **run}

        try:
            update_record(run_json.parent, record_tracker)
        except OSError as exc:
            self._diag(f"could not record the W&B run in {run_json}: {exc}\n", logging.WARNING)

    def _judge(self, now: float) -> Verdict:
        live = self.settings.job_id is not None and self.job_state is not JobState.UNKNOWN and not self.job_state.is_terminal
        since = now - self.state.last_new_data_at if self.state.last_new_data_at else None
        gaps = sorted(b - a for a, b in zip(self._arrivals, self._arrivals[1:]))
        pace = gaps[len(gaps) // 2] if gaps else None  # the median gap between polls that brought new points
        if pace is not None and pace <= 1.5 * self.settings.sidecar.fast_interval_s:
            pace = None  # new points at (nearly) every poll: the run logs faster than it is watched
        return judge_sources(self.sources, self.settings.policy,
                             RunContext(job_live=live, seconds_since_last_point=since, point_interval_s=pace))

    def _full_report(self, verdict: Verdict, now: float, *, ending: bool) -> None:
        interval = self.state.full_interval_s
        if verdict.anomalies or verdict.decision is not Decision.CONTINUE:
            interval = max(self.settings.sidecar.fast_interval_s * 5, self.settings.sidecar.full_interval_s / 4)
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
            evidence=self.sources.files_inspected()[:6],
            next_check=None if ending else now + self._poll_interval(now),
            next_full_report=None if ending else now + interval, poll_interval_s=self._poll_interval(now),
        )
        self.emit("\n" + report.render())

    def _remember(self, verdict: Verdict) -> None:
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

    def _record_resources(self) -> None:
        """Peak RSS, CPU time per poll and scheduler calls of this sidecar process, in its state and output."""
        polls = max(1, self.state.checks - self._checks_at_start)
        cpu = _cpu_seconds() - self._cpu_at_start
        self.state.peak_rss_mb = round(_peak_rss_mb(), 1)
        self.state.cpu_seconds = round(self.state.cpu_seconds + cpu, 3)
        self.state.scheduler_calls += self.calls.count if self.calls is not None else 0
        self._diag(f"resources: peak RSS {self.state.peak_rss_mb:.1f} MB, CPU {cpu:.2f} s over {polls} "
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
    def _anomaly_id(anomaly: Anomaly) -> str:
        return f"{anomaly.kind}:{anomaly.metric}:{anomaly.step}"

    def _run_label(self) -> str:
        job = f" (job {self.settings.job_id})" if self.settings.job_id else ""
        return f"{self.settings.run_name}{job} — {self.sources.describe()}"

    def _stop(self, verdict: Verdict, now: float, *, ended: bool = False) -> int | None:
        agent_run = None if ended else self.sources.agent_process()
        if agent_run is not None:  # one of a sweep agent's W&B runs: its process alone, the watch goes on (tracker_runs.py)
            self._full_report(verdict, now, ending=False)
            self.emit(stop_one_run(self.settings, self.sources, verdict, data_source=self.state.data_source, pid=agent_run))
            self._remember(verdict)
            return None
        self._full_report(verdict, now, ending=True)
        self.state.take_shared_stop(self.settings.state_file)
        stopped_already = stopped_before(self.settings, self.state)
        if stopped_already:  # one stop per run, whichever of its watchers (or their restarts) made it
            outcome = StopOutcome("none", True, stopped_already)
        elif ended:  # it died by itself (a crash, a NaN): the verdict and its evidence, nothing to stop
            outcome = StopOutcome("none", True, f"training job {self.settings.job_id} had already ended "
                                                f"{self.job_state.value}; nothing to stop")
        else:
            # the decision is saved with the intent, before the cancel: `status` names the guard from the moment
            # the job ends, not once the evidence is written (cli/lifecycle.stopped_by)
            self.state.stop_requested_at = now
            self.state.last_decision, self.state.last_reason = verdict.decision.value, verdict.reason.value
            self.state.last_message = verdict.message
            self.state.last_step = verdict.last_step
            self.state.save(self.settings.state_file)
            share_stop_of(self.settings, self.state, verdict, self.emit)
            outcome = stop_run(self.scheduler, self.settings.job_id, self.settings.stop_command,
                               stop_target=self.settings.stop_target, grace_s=self.settings.stop_grace_s,
                               kill_grace_s=self.settings.sidecar.kill_grace_s)
        self._diag(f"stop {'done' if outcome.ok else 'FAILED'}: {outcome.detail}\n")
        evidence_path, plot_path = None, None
        try:
            evidence_path, plot_path = save_evidence(self.settings, self.sources, verdict,
                                                     data_source=self.state.data_source, stop_detail=outcome.detail)
        except Exception as exc:  # noqa: BLE001 - the run is stopped already; say what went wrong
            self._diag(f"could not write evidence to {self.settings.evidence_dir}: {exc}\n", logging.WARNING)
        # the alert and the FINAL_SUMMARY go out first: the note and the audit record go to files others can
        # reach (a lock held on them is bounded by the door's deadline, and never delays these two)
        alert_detail = self._alert("stop", verdict, evidence=evidence_path,
                                   plot=plot_path)  # after the stop, never before
        pending = (f"to {self.settings.notes_path}, written after this summary" if self.settings.notes_path is not None
                   else "not configured")
        summary = render_final_summary(
            run=self.settings.run_name, job_id=self.settings.job_id, verdict=verdict, stop_detail=outcome.detail,
            evidence_path=evidence_path, note_detail=pending, when=self.clock(), alert_detail=alert_detail,
        )
        self.emit("\n" + summary)
        if self.settings.notes_path is not None:
            note_detail = append_stop_note(self.settings, verdict, stop_detail=outcome.detail, evidence_path=evidence_path)
            self.emit(f"sidecar: project note: {note_detail}\n")
        audit_stop(self, verdict, evidence_path)
        self._remember(verdict)
        self.state.finished = True
        self.state.final_summary = summary
        self.state.evidence = evidence_path or ""
        if not stopped_already and not ended:
            self.state.stop_detail = outcome.detail
            share_stop_of(self.settings, self.state, verdict, self.emit)
        return 0

    # ---- start-up grace and alerts (sidecar/report.py, actions/notify.py); kept apart from the rest ----
    def _poll_interval(self, now: float) -> float:
        """Look for the first metrics often during the start-up grace, then at the normal cadence."""
        if not self.state.last_new_data_at and now - self.state.started_at < self.settings.startup_grace_s:
            return min(self.settings.sidecar.fast_interval_s, self.settings.startup_poll_s)
        return self.settings.sidecar.fast_interval_s

    def _starting_up(self, now: float, verdict: Verdict) -> bool:
        """No metrics yet within the grace after the start: one line, not an "unreachable" report."""
        if self.state.last_new_data_at or now - self.state.started_at >= self.settings.startup_grace_s:
            return False
        if self.sources.hard_error:  # there but unreadable (a FIFO, a device): say so at once
            return False
        if verdict.decision is not Decision.WAIT or verdict.reason not in (Reason.SOURCE_UNREADABLE, Reason.NO_DATA):
            return False
        if not self.state.startup_note_shown:
            self.state.startup_note_shown = True
            self.emit(startup_line(self.settings, self.sources.describe()))
        elif now - self.state.started_at >= self._startup_said_at:  # a wait says how it goes, at growing gaps
            self._startup_said_at = 2 * (now - self.state.started_at)
            self.emit(startup_progress_line(self.settings, now - self.state.started_at))
        return True

    def _maybe_alert_wait_or_crash(self, verdict: Verdict, now: float, ended: bool) -> None:
        alert_wait_or_crash(self, verdict, now, ended)

    def _alert(self, event: str, verdict: Verdict, *, evidence: str | None = None, plot: Path | None = None) -> str:
        return alert(self, event, verdict, evidence=evidence, plot=plot)

