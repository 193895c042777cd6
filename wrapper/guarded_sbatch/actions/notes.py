"""Append a note to the project's notes file: one write under an exclusive lock, safe with
concurrent writers (several sidecars of one project)."""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.core.redact import redact


class NotesError(GuardedError):
    pass


NOTE_MODE = 0o640  # the project's notes: the project folder's group reads them (never writes), others nothing


def _open_note(path: Path) -> int:
    """The notes file opened for appending; a new one is NOTE_MODE whatever the umask (the sidecar runs with 077)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, NOTE_MODE)
    except FileExistsError:
        return os.open(path, flags)
    os.fchmod(fd, NOTE_MODE)
    return fd


def append_project_note(path: Path, text: str) -> None:

    data = (redact(text).rstrip("\n") + "\n\n").encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open_note(path)
    except OSError as exc:
        raise NotesError(f"cannot write project note to {path}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotesError(f"cannot write project note to {path}: not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX)
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
    except OSError as exc:
        raise NotesError(f"cannot write project note to {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
