"""Alerts where people already look (Slack, Teams, Matrix, email, ntfy, webhooks ...) through apprise.

Configured as `[notify] urls = [...]` and `on = [...]` in the site or user config. The URLs carry
passwords and tokens: they are never printed, logged or written; outcomes name a service only by its
URL scheme ("mailto", "json"). Sending is bounded in time and never raises: an alert that fails must
never hold up or undo a STOP (the sidecar sends only after the job is stopped).
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.core.errors import CommandError
from guarded_sbatch.core.extras import installed, missing_line
from guarded_sbatch.core.sanitize import visible, visible_line
from guarded_sbatch.core.redact import redact
from guarded_sbatch.core.runner import run_command
from guarded_sbatch.core.pychild import CHILD_CWD, python_argv

EVENTS = ("stop", "wait_long", "crash", "sidecar_error", "unguarded")
TITLES = {
    "stop": "STOPPED",
    "wait_long": "waiting for a long time",
    "crash": "training job ended badly",
    "sidecar_error": "the sidecar failed",
    "unguarded": "NOT GUARDED (it judges no loss)",
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
        return visible_line(redact(f"guarded-sbatch: {self.run}{job} {TITLES.get(self.event, self.event)}: {self.reason}"))

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
        return visible(redact("\n".join(lines)))


@dataclass(frozen=True)
class NotifyOutcome:
    sent: int
    failed: int
    detail: str  # safe to print: schemes only


def service_kinds(urls: Sequence[str]) -> list[str]:
    return [url.partition("://")[0].lower() or "?" for url in urls]


def send_alert(settings: NotifySettings, alert: Alert) -> NotifyOutcome:
    """Send to every configured service; never raises, never takes much longer than settings.timeout_s.

    apprise runs in a child process (`python -m guarded_sbatch.actions.notify`): its ~20 MB never enter the
    sidecar, and a hung service is ended by the timeout. The URLs go to the child on stdin, never in its
    argv (which `ps` shows) or a file."""
    if not settings.wants(alert.event):
        return NotifyOutcome(0, 0, "not configured for this event")
    kinds = service_kinds(settings.urls)
    if not installed("apprise"):
        return NotifyOutcome(0, len(kinds), f"alert not sent ({', '.join(kinds)}): {missing_line('apprise', 'an alert')}")
    attach = [str(alert.plot)] if alert.plot is not None and alert.plot.is_file() else []
    request = json.dumps({"urls": list(settings.urls), "title": alert.title(), "body": alert.body(), "attach": attach})
    try:
        result = run_command(python_argv("-m", "guarded_sbatch.actions.notify"), input_text=request, cwd=CHILD_CWD,
                             timeout=settings.timeout_s, check=False)
    except CommandError as exc:
        what = f"not confirmed within {settings.timeout_s:.0f} s" if exc.timed_out else "could not start"
        return NotifyOutcome(0, len(kinds), f"alert {what} ({', '.join(kinds)})")
    try:
        answer = json.loads(result.stdout.strip().splitlines()[-1])
        sent, failed = list(answer["sent"]), list(answer["failed"])
    except (ValueError, IndexError, KeyError, TypeError):
        return NotifyOutcome(0, len(kinds), f"alert failed (exit {result.returncode}; {', '.join(kinds)})")
    return NotifyOutcome(len(sent), len(failed), _detail(sent, failed, len(kinds)))


def _detail(sent: list[str], failed: list[str], total: int) -> str:
    detail = f"sent to {len(sent)} of {total} service(s)"
    if sent:
        detail += f" ({', '.join(sent)})"
    if failed:
        detail += f"; failed: {', '.join(failed)}"
    return detail


def deliver(urls: Sequence[str], title: str, body: str, attach: Sequence[str]) -> tuple[list[str], list[str]]:
    """In the child: one apprise client per URL, so one bad service cannot hide the others' outcome."""
    import apprise  # noqa: PLC0415 - only this child process pays for apprise (~20 MB, ~1 s)

    logging.getLogger("apprise").disabled = True  # its log lines may quote a URL
    sent: list[str] = []
    failed: list[str] = []
    for url, kind in zip(urls, service_kinds(urls)):
        client = apprise.Apprise()
        try:
            if not client.add(url):
                failed.append(f"{kind} (URL not understood)")
                continue
            ok = client.notify(title=title, body=body, attach=list(attach) or None)
        except Exception as exc:  # noqa: BLE001 - one service's bug must not lose the others; the text may hold a URL
            failed.append(f"{kind} ({type(exc).__name__})")
            continue
        (sent if ok else failed).append(kind)
    return sent, failed


def main() -> int:
    request = json.loads(sys.stdin.read())
    sent, failed = deliver(request["urls"], request["title"], request["body"], request.get("attach") or [])
    sys.stdout.write(json.dumps({"sent": sent, "failed": failed}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
