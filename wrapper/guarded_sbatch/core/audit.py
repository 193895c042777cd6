"""The admins' audit trail: one JSON line per launch, waiver, STOP, kill, restart and shim bypass.

The site config names it (`[audit] log = "/var/log/guarded-sbatch/audit.jsonl"`, `syslog = true`). Each
record is appended under an exclusive flock, as one write() on an O_APPEND descriptor, so concurrent
launches on a login node never interleave or lose a line. The file is append-only by convention for the
tool; to make it tamper-proof against users the site puts it in a root-owned folder the users cannot
write to and turns on `syslog` (each record also goes to `logger -t guarded-sbatch`, i.e. the system log,
which users cannot edit). Writing it never stops the user's work: a failure is returned as text.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import CommandError
from guarded_sbatch.core.jsonnum import json_safe
from guarded_sbatch.core.redact import redact
from guarded_sbatch.core.runner import run_command

EVENTS = ("launch", "waiver", "stop", "kill", "restart", "shim_bypass")
SYSLOG_TAG = "guarded-sbatch"
LOGGER_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class AuditLog:
    path: Path | None = None
    syslog: bool = False

    @property
    def enabled(self) -> bool:
        return self.path is not None or self.syslog

    @classmethod
    def from_config(cls, config: object) -> "AuditLog":
        return cls(getattr(config, "audit_log", None), bool(getattr(config, "audit_syslog", False)))

    def record(self, event: str, *, job: str | None = None, run: str | None = None, check: str | None = None,
               reason: str | None = None, **extra: Any) -> str | None:
        """Append one record; None when written (or not configured), else why it could not be."""
        if not self.enabled:
            return None
        if event not in EVENTS:
            raise ValueError(f"unknown audit event {event!r}")
        line = audit_line(event, job=job, run=run, check=check, reason=reason, **extra)
        problems = []
        if self.path is not None:
            try:
                append_line(self.path, line)
            except OSError as exc:
                problems.append(f"audit log {self.path}: {exc.strerror or exc}")
        if self.syslog:
            problem = _to_syslog(line)
            if problem:
                problems.append(problem)
        return "; ".join(problems) or None


def audit_line(event: str, **fields: Any) -> str:
    record: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "event": event, "user": _user(),
        "host": socket.gethostname(), "pid": os.getpid(),
    }
    record.update({key: value for key, value in fields.items() if value is not None})
    text = json.dumps(json_safe(record), sort_keys=False, default=str, allow_nan=False, ensure_ascii=True)
    return redact(text)


def append_line(path: Path, line: str) -> None:
    """One whole line, appended under an exclusive lock (O_APPEND: no process ever overwrites another)."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            written = os.write(fd, data)
            while written < len(data):  # a short write (full disk, signal): finish the line
                written += os.write(fd, data[written:])
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _to_syslog(line: str) -> str | None:
    try:
        run_command(["logger", "-t", SYSLOG_TAG, "-p", "user.notice", "--", line], timeout=LOGGER_TIMEOUT_S)
    except CommandError as exc:
        return f"syslog (logger): {exc}"
    return None


def _user(env: Mapping[str, str] | None = None) -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def read_audit(path: Path) -> list[dict[str, Any]]:
    """The records of an audit log (for tests and admins' scripts)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
