"""The sidecar's alerts (actions/notify.py): STOP, a long WAIT, a crashed job, a run it cannot guard (UNGUARDED).
Sent after any action, bounded in time, never raising; each event at most once per run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guarded_sbatch.actions.notify import Alert, send_alert
from guarded_sbatch.judge.verdict import Decision, Reason, Verdict
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.sidecar.report import summarise_metrics

CRASH_STATES = frozenset({JobState.FAILED, JobState.OUT_OF_MEMORY, JobState.NODE_FAIL, JobState.TIMEOUT})


def alert_wait_or_crash(sidecar: Any, verdict: Verdict, now: float, ended: bool) -> None:
    state = sidecar.state
    if ended and sidecar.job_state in CRASH_STATES and "crash" not in state.alerts_sent:
        state.alerts_sent.append("crash")
        message = (f"training job {sidecar.settings.job_id} ended {sidecar.job_state.value} "
                   f"(last decision {verdict.decision.value}: {verdict.message})")
        alert(sidecar, "crash", _with_message(verdict, message))
        return
    if verdict.reason is Reason.UNGUARDED and "unguarded" not in state.alerts_sent:
        state.alerts_sent.append("unguarded")  # once per run: the guard is blind, and says how to fix it
        alert(sidecar, "unguarded", verdict)
    if verdict.decision is not Decision.WAIT:
        state.wait_since = 0.0
        return
    state.wait_since = state.wait_since or now
    notify = sidecar.settings.notify
    waited = now - state.wait_since
    if notify is not None and waited >= notify.wait_long_s and "wait_long" not in state.alerts_sent:
        state.alerts_sent.append("wait_long")
        alert(sidecar, "wait_long", _with_message(verdict, f"WAIT for {waited / 60:.0f} min: {verdict.message}"))


def alert(sidecar: Any, event: str, verdict: Verdict, *, evidence: str | None = None, plot: Path | None = None) -> str:
    """Send one alert; print one line (schemes only, never a URL); return the detail for FINAL_SUMMARY. A STOP's
    audit record is written apart (`audit_stop`), after the alert and the FINAL_SUMMARY are out."""
    settings = sidecar.settings
    notify = settings.notify
    if notify is None or not notify.wants(event):
        return "not configured"
    message = Alert(event=event, run=settings.run_name, job_id=settings.job_id, decision=verdict.decision.value,
                    reason=verdict.reason.value, message=verdict.message, key_values=summarise_metrics(verdict),
                    evidence=evidence, plot=plot, step=verdict.last_step)
    outcome = send_alert(notify, message)
    sidecar.emit(f"sidecar: alert ({event}): {outcome.detail}\n")
    return outcome.detail


def audit_stop(sidecar: Any, verdict: Verdict, evidence: str | None) -> None:
    """The STOP's audit record (a shared file another user may lock: bounded by the door's lock deadline)."""
    settings = sidecar.settings
    if settings.audit is None:
        return
    problem = settings.audit.record("stop", job=settings.job_id, run=settings.run_name, check=verdict.reason.value,
                                    reason=verdict.message, step=verdict.last_step, evidence=evidence)
    if problem:
        sidecar.emit(f"sidecar: could not write the audit record: {problem}\n")


def _with_message(verdict: Verdict, message: str) -> Verdict:
    return Verdict(verdict.decision, verdict.reason, message, verdict.anomalies, verdict.last_step, verdict.summary)
