"""The admins' audit trail: one JSON line per launch, waiver, STOP, kill, restart and shim bypass.

The site config names it (`[audit] log = ...`, `syslog = true`). Each record is appended under an exclusive
flock, as one write() on an O_APPEND descriptor, so concurrent launches never interleave or lose a line.

- `log = "/var/log/guarded-sbatch/audit"` naming an existing folder: one file per user,
  `<user>.jsonl`, created 0600 by its user in a folder the admin makes `root:root 1733` (sticky, writable,
  not listable): no user reads, renames or edits another's lines; a file of that name owned by someone else is
  never written (the record is refused and the reason returned).
- `log = "/var/log/guarded-sbatch/audit.jsonl"` (one file): created 0622 (everyone appends, nobody but its
  owner reads), so no user's lines are dropped; users could still overwrite it, so pair it with `chattr +a`.

`syslog = true` also sends each record to `logger -t guarded-sbatch` (root's system log, which users cannot
edit). The user is the one of the process's uid, never $LOGNAME/$USER. Writing never stops the user's work: a
failure is returned as text.
"""

from __future__ import annotations

import json
import os
import pwd
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.core import door
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
            except AuditRefusedError as exc:
                problems.append(str(exc))
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
        "host": os.uname().nodename, "pid": os.getpid(),
    }
    record.update({key: value for key, value in fields.items() if value is not None})
    text = json.dumps(json_safe(record), sort_keys=False, default=str, allow_nan=False, ensure_ascii=True)
    return redact(text)


class AuditRefusedError(OSError):
    """The per-user audit file is not the user's own: nothing is written there."""


SHARED_FILE_MODE = 0o622  # one file for everyone: all append, only its owner (the first writer) reads


def is_per_user(path: Path) -> bool:
    return path.is_dir()


def user_file(path: Path) -> Path:
    """Where this user's records go: <folder>/<user>.jsonl in per-user mode, else the one file."""
    return path / f"{_user()}.jsonl" if is_per_user(path) else path


AUDIT_LOCK_DEADLINE_S = 2.0  # a lock held longer (a co-worker's `flock` on the shared file) fails the record, named


def append_line(path: Path, line: str) -> None:
    """One whole line, appended under an exclusive lock taken with a deadline (O_APPEND: no process ever
    overwrites another); a FIFO, a link or a lock held past the deadline is a named failure, never a hang."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    per_user = is_per_user(path)
    target = user_file(path)
    if not per_user:
        door.make_dirs(path.parent)
    try:
        door.append(target, data, 0o600 if per_user else SHARED_FILE_MODE, own=per_user,
                    lock_deadline_s=AUDIT_LOCK_DEADLINE_S)
    except door.NotOwnError as exc:
        raise AuditRefusedError(f"audit log {target} {(exc.strerror or '').split(':')[0]}: this record was not written there "
                                "(tell your site admin)") from None
    except (door.NotRegularError, door.LinkRefusedError, door.LockTimeoutError) as exc:
        raise AuditRefusedError(f"audit log {target}: {exc.strerror}: this record was not written (tell your site "
                                "admin)") from None


def _to_syslog(line: str) -> str | None:
    try:
        run_command(["logger", "-t", SYSLOG_TAG, "-p", "user.notice", "--", line], timeout=LOGGER_TIMEOUT_S)
    except CommandError as exc:
        return f"syslog (logger): {exc}"
    return None


def _user() -> str:
    """The user of this process's uid (never $LOGNAME or $USER, which anyone can set)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())
