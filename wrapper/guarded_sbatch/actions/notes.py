"""Append a note to the project's notes file: one write under an exclusive lock, safe with
concurrent writers (several sidecars of one project). The note is redacted and its control characters shown as
escapes (core/sanitize.py); it is written only through the folder that holds it opened without following a link
(`notes/ -> ~victim/.config` is refused, not followed) and a file that is no link either."""

from __future__ import annotations

from pathlib import Path

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.core.redact import redact
from guarded_sbatch.core.sanitize import visible


class NotesError(GuardedError):
    pass


NOTE_MODE = 0o640  # the project's notes: the project folder's group reads them (never writes), others nothing


NOTE_LOCK_DEADLINE_S = 2.0  # a co-worker's `flock -s` on the notes file fails the note, named, never freezes us


def append_project_note(path: Path, text: str) -> None:
    data = (visible(redact(text)).rstrip("\n") + "\n\n").encode("utf-8")
    try:
        door.make_dirs(path.parent)
        door.append(path, data, NOTE_MODE, lock_deadline_s=NOTE_LOCK_DEADLINE_S)
    except door.LinkRefusedError as exc:
        raise NotesError(f"cannot write project note to {path}: {exc.filename} {exc.strerror}") from None
    except OSError as exc:
        raise NotesError(f"cannot write project note to {path}: {exc.strerror}") from None
