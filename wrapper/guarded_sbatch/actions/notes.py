"""Append a note to the project's notes file: one write under an exclusive lock, safe with
concurrent writers (several sidecars of one project)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from guarded_sbatch.core.errors import GuardedError


class NotesError(GuardedError):
    pass


def append_project_note(path: Path, text: str) -> None:
    data = (text.rstrip("\n") + "\n\n").encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise NotesError(f"cannot write project note to {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
    except OSError as exc:
        raise NotesError(f"cannot write project note to {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
