"""Alerts where people already look (Slack, Teams, Matrix, email, ntfy, webhooks ...) through apprise.

Configured as `[notify] urls = [...]` and `on = [...]` in the site or user config. The URLs carry
passwords and tokens: they are never printed, logged or written; outcomes name a service only by its
URL scheme ("mailto", "json"). Sending is bounded in time and never raises: an alert that fails must
never hold up or undo a STOP (the sidecar sends only after the job is stopped).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.core.redact import redact

EVENTS = ("stop", "wait_long", "crash", "sidecar_error")
TITLES = {
    "stop": "STOPPED",
    "wait_long": "waiting for a long time",
    "crash": "training job ended badly",
    "sidecar_error": "the sidecar failed",
}
SEND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class NotifySettings:
    urls: tuple[str, ...] = field(default=(), repr=False)  # secrets: kept out of repr
    on: frozenset[str] = frozenset(EVENTS)
    wait_long_s: float = 3600.0
    timeout_s: float = SEND_TIMEOUT_S

    def wants(self, event: str) -> bool:
        return bool(self.urls) and event in self.on

    def describe(self) -> str:
        """For people: how many services and their kinds, never the URLs."""
        if not self.urls:
            return "no alerts configured"
        return f"{len(self.urls)} service(s) ({', '.join(service_kinds(self.urls))}) on {', '.join(sorted(self.on))}"


@dataclass(frozen=True)
class Alert:
    event: str
    run: str
    job_id: str | None
    decision: str
    reason: str
    message: str
    key_values: str = ""
    evidence: str | None = None
    plot: Path | None = None
    step: int | None = None

    def title(self) -> str:
        job = f" (job {self.job_id})" if self.job_id else ""
        return redact(f"guarded-sbatch: {self.run}{job} {TITLES.get(self.event, self.event)}: {self.reason}")

    def body(self) -> str:
        lines = [
            f"Run: {self.run}",
            f"Job: {self.job_id or '-'}",
            f"Decision: {self.decision} ({self.reason})",
            f"Reason: {self.message}",
            f"Step: {self.step if self.step is not None else '-'}",
            f"Key values: {self.key_values or '-'}",
            f"Evidence: {self.evidence or 'none'}",
            f"Host: {socket.gethostname()}",
        ]
        if self.plot is not None:
            lines.append(f"Plot: {self.plot} (attached where the service takes files)")
        return redact("\n".join(lines))


@dataclass(frozen=True)
class NotifyOutcome:
    sent: int
    failed: int
    detail: str  # safe to print: schemes only


def service_kinds(urls: Sequence[str]) -> list[str]:
    return [url.partition("://")[0].lower() or "?" for url in urls]


def send_alert(settings: NotifySettings, alert: Alert) -> NotifyOutcome:
    """Send to every configured service; never raises, never takes much longer than settings.timeout_s."""
    if not settings.wants(alert.event):
        return NotifyOutcome(0, 0, "not configured for this event")
    result: dict[str, NotifyOutcome] = {}

    def work() -> None:
        try:
            result["outcome"] = _send(settings.urls, alert)
        except Exception as exc:  # noqa: BLE001 - an alert must never break the caller; the text may hold a URL
            result["outcome"] = NotifyOutcome(0, len(settings.urls), f"alert failed ({type(exc).__name__})")

    worker = threading.Thread(target=work, name="guarded-sbatch-notify", daemon=True)
    worker.start()
    worker.join(settings.timeout_s)
    if worker.is_alive():
        return NotifyOutcome(0, len(settings.urls), f"alert not confirmed within {settings.timeout_s:.0f} s "
                                                    f"({', '.join(service_kinds(settings.urls))})")
    return result.get("outcome", NotifyOutcome(0, len(settings.urls), "alert failed"))


def _send(urls: Sequence[str], alert: Alert) -> NotifyOutcome:
    import apprise  # lazy: only the sidecar sends, and only on an event

    quiet = logging.getLogger("apprise")
    was_disabled = quiet.disabled
    quiet.disabled = True  # apprise's own log lines may quote a URL
    try:
        attach = [str(alert.plot)] if alert.plot is not None and alert.plot.is_file() else None
        sent, failed = [], []
        for url, kind in zip(urls, service_kinds(urls)):
            client = apprise.Apprise()
            if not client.add(url):
                failed.append(f"{kind} (URL not understood)")
                continue
            ok = client.notify(title=alert.title(), body=alert.body(), attach=attach)
            (sent if ok else failed).append(kind)
    finally:
        quiet.disabled = was_disabled
    detail = f"sent to {len(sent)} of {len(urls)} service(s)"
    if sent:
        detail += f" ({', '.join(sent)})"
    if failed:
        detail += f"; failed: {', '.join(failed)}"
    return NotifyOutcome(len(sent), len(failed), detail)
