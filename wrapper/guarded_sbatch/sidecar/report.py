"""The training-check report (one block per full check) and the FINAL_SUMMARY block."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from guarded_sbatch.core.jsonnum import non_finite_text
from guarded_sbatch.judge.verdict import Verdict
from guarded_sbatch.core.redact import redact
from guarded_sbatch.core.sanitize import visible
from guarded_sbatch.core.timefmt import local_timestamp
from guarded_sbatch.core.waiting import elapsed_text

if TYPE_CHECKING:
    from guarded_sbatch.core.config import SidecarJobSettings


@dataclass(frozen=True)
class CheckReport:
    when: float
    data_source: str
    run: str
    verdict: Verdict
    evidence: Sequence[str]
    next_check: float | None  # the next poll; None: the loop is ending
    next_full_report: float | None = None  # the next full report, unless something changes first
    poll_interval_s: float | None = None

    def render(self) -> str:
        anomalies = "; ".join(
            f"{a.kind} in {a.metric} at step {a.step}" + (f" ({a.message})" if a.message else "")
            for a in self.verdict.anomalies
        ) or "none"
        lines = [
            f"## Training Check - {local_timestamp(self.when)}",
            "",
            f"- Data source: {self.data_source}",
            f"- Run: {self.run}",
            f"- Recent metrics: {summarise_metrics(self.verdict)}{_loss_key(self.verdict)}",
            f"- Anomalies: {anomalies}",
            f"- Evidence: {', '.join(self.evidence) or 'none'}",
            f"- Decision: {self.verdict.decision.value}",
            f"- Reason: {_reason(self.verdict)}",
            f"- Next check: {self._next_check()}",
        ]
        return visible(redact("\n".join(lines))) + "\n"

    def _next_check(self) -> str:
        if not self.next_check:
            return "none (ending)"
        text = local_timestamp(self.next_check, seconds=True)
        if self.poll_interval_s:
            text += f" (every {_duration(self.poll_interval_s)})"
        if self.next_full_report:
            text += f"; next full report by {local_timestamp(self.next_full_report)} or at any change"
        return text


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Describes(Protocol):
    def describe(self) -> str: ...


class Cadence(Protocol):
    """The settings a sidecar's start lines read (sidecar/plan.py's WatchPlan has them all)."""

    @property
    def sidecar(self) -> SidecarJobSettings: ...

    @property
    def startup_poll_s(self) -> float: ...

    @property
    def startup_grace_s(self) -> float: ...

    @property
    def notify(self) -> Describes | None: ...


def cadence_text(settings: Cadence) -> str:
    """The line that says how often the sidecar looks (printed once at its start)."""
    fast, full, poll = settings.sidecar.fast_interval_s, settings.sidecar.full_interval_s, settings.sidecar.job_poll_s
    return (f"checks the metrics every {_duration(fast)}, acts at once on a STOP, prints a full report every "
            f"{_duration(full)} and on any change, asks the scheduler at most every {_duration(poll)}")


def cadence_line(settings: Cadence) -> str:
    notify = settings.notify
    alerts = notify.describe() if notify is not None else "no alerts configured"
    return f"sidecar: {cadence_text(settings)}; alerts: {alerts}\n"


def startup_line(settings: Cadence, sources: str) -> str:
    poll = min(settings.sidecar.fast_interval_s, settings.startup_poll_s)
    grace = settings.startup_grace_s
    return (f"sidecar: waiting for the run's first metrics ({sources}); looking every {poll:.0f} s for up to "
            f"{grace:.0f} s before reporting a missing source\n")


def startup_progress_line(settings: Cadence, waited_s: float) -> str:
    return (f"sidecar: still no metrics after {elapsed_text(waited_s)}; looking until {settings.startup_grace_s:.0f} s, "
            "then a missing source is reported\n")


def _reason(verdict: Verdict) -> str:
    message = verdict.message.strip()
    reason = verdict.reason.value
    if not message or message == reason:
        return reason
    if message.startswith(reason):  # "healthy (...)", never "healthy: healthy (...)"
        return message
    return f"{reason}: {message}"


def one_line(verdict: Verdict, data_source: str) -> str:
    """`monitor --once` without --json: decision, step, loss and the reason in one line."""
    summary = verdict.summary or {}
    keys = summary.get("keys") or {}
    parts = [verdict.decision.value]
    if verdict.last_step is not None:
        parts.append(f"step {verdict.last_step}")
    loss = summary.get("train_loss")
    if isinstance(loss, dict) and "value" in loss:
        parts.append(f"{keys.get('train_loss') or 'loss'}={_fmt(loss['value'])}")
    return f"{' '.join(parts)}: {_reason(verdict)} [{data_source}]"


def _loss_key(verdict: Verdict) -> str:
    """`(loss judged: KEY, why)`: which key the judge took as the training loss (judge/select.py)."""
    why = (verdict.summary or {}).get("loss_key")
    return f" (loss judged: {why})" if isinstance(why, str) and why else ""


def summarise_metrics(verdict: Verdict) -> str:
    summary = verdict.summary or {}
    keys = summary.get("keys") or {}
    parts = [f"step {verdict.last_step}"] if verdict.last_step is not None else []
    for label in ("train_loss", "lr", "grad_norm", "loss_scale"):
        entry = summary.get(label)
        if isinstance(entry, dict) and "value" in entry:
            parts.append(f"{keys.get(label) or label}={_fmt(entry['value'])}")
    metric = summary.get("key_metric")
    if isinstance(metric, dict):
        details = ", ".join(f"{k} {_fmt(v)}" for k, v in metric.items() if k != "key")
        parts.append(f"{metric.get('key')}: {details}" if details else str(metric.get("key")))
    return "; ".join(parts) or "no metrics yet"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else non_finite_text(value)
    return str(value)


def render_final_summary(
    *, run: str, job_id: str | None, verdict: Verdict, stop_detail: str, evidence_path: str | None,
    note_detail: str, when: float, alert_detail: str | None = None,
) -> str:
    lines = [
        "FINAL_SUMMARY",
        f"- Time: {local_timestamp(when)}",
        f"- Run: {run}" + (f" (job {job_id})" if job_id else ""),
        f"- Decision: {verdict.decision.value} ({verdict.reason.value})",
        f"- Reason: {verdict.message}",
        f"- Last step: {verdict.last_step}",
        f"- Action: {stop_detail}",
        f"- Evidence: {evidence_path or 'none'}",
        f"- Project note: {note_detail}",
    ]
    if alert_detail is not None:
        lines.insert(-1, f"- Alert: {alert_detail}")
    return visible(redact("\n".join(lines))) + "\n"
