"""Who wrote a metric file, as the file itself says, and which of a folder's files are one run's own.

A file's owner (its uid) and, for TensorBoard, its name (`events.out.tfevents.<time>.<host>.<pid>.<n>`, as
torch, tensorboardX and TensorFlow name them) identify the writer; core/run_sources.attribute() compares that
with the job (its user, node, processes and start time). `WriterFilter` is the per-file decision a
TensorBoard reader asks: own files are read, foreign ones never, and files that could be this run's or a
neighbour's are read only when one writer is left to choose from; otherwise none is read and the
candidates are named (the sidecar WAITs, never STOPs on data it cannot attribute).
"""

from __future__ import annotations

import os
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path

from guarded_sbatch.core.run_sources import Attribution, FileWriter, WriterIdentity, attribute

EVENT_MARKER = "tfevents"


def reader_uid() -> int:
    """The uid whose files are read when no job user is known: the reading process's own."""
    return os.geteuid()


def event_file_writer(path: Path, uid: int | None) -> FileWriter:
    """The writer an event file's name gives: creation time, host, pid (either may be absent: tensorboardX
    without a pid, a hand-named file)."""
    parts = path.name.split(".")
    created, host, pid = 0.0, "", None
    if EVENT_MARKER in parts:
        rest = parts[parts.index(EVENT_MARKER) + 1:]
        if rest and rest[0].isdigit():
            created = float(rest[0])
            rest = rest[1:]
        if rest and rest[-1] == "v2":  # TensorFlow 2's suffix
            rest = rest[:-1]
        if len(rest) >= 3 and rest[-1].isdigit() and rest[-2].isdigit():  # <host>.<pid>.<n>; a host may hold dots
            host, pid = ".".join(rest[:-2]), int(rest[-2])
        elif rest:
            host = ".".join(rest)
    else:
        try:
            created = path.stat().st_mtime
        except OSError:
            created = 0.0
    return FileWriter(uid=uid, created=created, host=host, pid=pid)


def owner_of(path: Path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None


def owned(path: Path, uid: int | None = None) -> bool:
    """Whether the file belongs to `uid` (default: the reading process's user)."""
    found = owner_of(path)
    return found is None or found == (reader_uid() if uid is None else uid)


class WriterFilter:
    """accept(path) for one run's TensorBoard folder. `job` is asked at each decision for what is known of
    the job now (its node and processes are learned while it runs); `candidates()` lists the folder's
    event files, so that a file of unknown writer is read only when it is the only writer there."""

    def __init__(self, job: Callable[[], WriterIdentity], candidates: Callable[[], list[Path]]) -> None:
        self.job = job
        self.candidates = candidates
        self.own_writers: set[tuple[str, int | None]] = set()  # (host, pid) of files already read as this run's
        self.skipped: dict[str, str] = {}  # path -> why it is not read (another user, another process, ...)
        self.ambiguous: list[str] = []  # candidates of unknown writer when several writers are left

    def __call__(self, path: Path) -> bool:
        job = self.job()
        found = event_file_writer(path, owner_of(path))
        verdict, why = self._attribute(job, found)
        if verdict is Attribution.FOREIGN:
            self.skipped[str(path)] = why
            return False
        writer = (found.host, found.pid)
        if verdict is Attribution.OWN or writer in self.own_writers:
            return self._take(path, writer)
        if self.own_writers:
            self.skipped[str(path)] = (f"written by another process ({found.host or '?'} pid {found.pid}) than "
                                       "this run's, in the same folder")
            return False
        others = {(w.host, w.pid) for w in self._open_writers(job) if (w.host, w.pid) != writer}
        if others:
            self.ambiguous = sorted(str(p) for p in self.candidates() if self._open(job, p))[:6]
            return False
        return self._take(path, writer)

    def _take(self, path: Path, writer: tuple[str, int | None]) -> bool:
        self.own_writers.add(writer)
        self.skipped.pop(str(path), None)
        self.ambiguous = []
        return True

    def _attribute(self, job: WriterIdentity, found: FileWriter) -> tuple[Attribution, str]:
        uid = job.uid if job.uid is not None else reader_uid()
        return attribute(replace(job, uid=uid), found)

    def _open(self, job: WriterIdentity, path: Path) -> bool:
        return self._attribute(job, event_file_writer(path, owner_of(path)))[0] is not Attribution.FOREIGN

    def _open_writers(self, job: WriterIdentity) -> list[FileWriter]:
        return [w for w in (event_file_writer(p, owner_of(p)) for p in self.candidates())
                if self._attribute(job, w)[0] is not Attribution.FOREIGN]

    def note(self) -> str:
        """What was seen and not read, for the report ("" when nothing)."""
        parts = []
        if self.ambiguous:
            parts.append(f"{len(self.ambiguous)} TensorBoard event files of different writers, none known to be "
                         f"this run's ({', '.join(self.ambiguous)})")
        foreign = [f"{Path(p).name}: {why}" for p, why in sorted(self.skipped.items())][:4]
        if foreign:
            parts.append("not read: " + "; ".join(foreign))
        return "; ".join(parts)
