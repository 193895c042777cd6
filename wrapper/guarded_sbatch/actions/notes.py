"""Append a note to the project's notes file: one write under an exclusive lock, safe with
concurrent writers (several sidecars of one project). The note is redacted and its control characters shown as
escapes (core/sanitize.py); it is written only through the folder that holds it opened without following a link
(`notes/ -> ~victim/.config` is refused, not followed) and a file that is no link either."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.core.redact import redact
from guarded_sbatch.core.sanitize import visible


class NotesError(GuardedError):
    pass


NOTE_MODE = 0o640  # the project's notes: the project folder's group reads them (never writes), others nothing


def _open_folder(folder: Path) -> int:
    """The note's folder, opened without following a link; refused when a folder on the way is a link another
    user made (a co-worker's `notes -> ~you/.config`)."""
    for ancestor in [folder, *folder.parents]:
        try:
            info = os.lstat(ancestor)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode) and info.st_uid not in (0, os.geteuid()):
            raise NotesError(f"cannot write project note: {ancestor} is a link made by uid {info.st_uid}: refused")
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        why = "is a link: refused (a note never follows one)" if exc.errno == errno.ELOOP else exc.strerror
        raise NotesError(f"cannot write project note to {folder}: {why}") from None


def _open_note(folder_fd: int, name: str) -> int:
    """The notes file opened for appending; a new one is NOTE_MODE whatever the umask (the sidecar runs with 077)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, NOTE_MODE, dir_fd=folder_fd)
    except FileExistsError:
        return os.open(name, flags, dir_fd=folder_fd)
    os.fchmod(fd, NOTE_MODE)
    return fd


def append_project_note(path: Path, text: str) -> None:
    data = (visible(redact(text)).rstrip("\n") + "\n\n").encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder_fd = _open_folder(path.parent)
    except OSError as exc:
        raise NotesError(f"cannot write project note to {path}: {exc.strerror}") from None
    try:
        fd = _open_note(folder_fd, path.name)
    except OSError as exc:
        why = "a link: refused" if exc.errno == errno.ELOOP else exc.strerror
        raise NotesError(f"cannot write project note to {path}: {why}") from None
    finally:
        os.close(folder_fd)
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
