"""Who wrote a metric file, as the file itself says, and which of a folder's files are one run's own.

A file's owner (its uid) and, for TensorBoard, its name (`events.out.tfevents.<time>.<host>.<pid>.<n>`, as
torch, tensorboardX and TensorFlow name them) identify the writer; sources/run_sources.attribute() compares that
with the job (its user, node, processes and start time). `WriterFilter` is the per-file decision a
TensorBoard reader asks: own files are read, foreign ones never, and files that could be this run's or a
neighbour's are read only when one writer is left to choose from; otherwise none is read and the
candidates are named (the sidecar WAITs, never STOPs on data it cannot attribute).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path

from guarded_sbatch.sources.run_sources import Attribution, FileWriter, WriterIdentity, attribute

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


def this_host() -> str:
    return socket.gethostname().split(".")[0].lower()


def _short(host: str) -> str:
    return host.split(".")[0].lower()


def running_here(found: FileWriter, table_hosts: tuple[str, ...] = ()) -> bool:
    """Whether the file's writer is a process running now in this host's process table: written on this host,
    or on a node whose processes the table holds (`table_hosts`: the dev cluster's nodes share one)."""
    hosts = {this_host(), *(_short(h) for h in table_hosts)}
    return found.pid is not None and _short(found.host) in hosts and os.path.exists(f"/proc/{found.pid}")


Writer = tuple[str, "int | None"]  # (host, pid) as an event file names them


class WriterFilter:
    """accept(path) for one run's TensorBoard folder. `job` is asked at each decision for what is known of
    the job now (its node and processes are learned while it runs); `candidates()` lists the folder's event
    files. Files of the job's processes are read, those of another job's processes never. Of the others:
    - once one of the job's processes is known to write here, another writer is the run's only if all of its
      files were written before the run's first (an earlier attempt: a restart's first job, never seen here);
    - with no writer known, files of different writers are read together only when they were written one after
      another (a run restarted in place); writers active at the same time are two runs: none is read and the
      candidates are named (or, once one was read as the run's, the one beside it is not)."""

    def __init__(self, job: Callable[[], WriterIdentity], candidates: Callable[[], list[Path]]) -> None:
        self.job = job
        self.candidates = candidates
        self.own_writers: set[Writer] = set()  # (host, pid) of files already read as this run's
        self.known_writers: set[Writer] = set()  # of those, the ones known to be the job's processes
        self.skipped: dict[str, str] = {}  # path -> why it is not read (another user, another process, ...)
        self.ambiguous: list[str] = []  # candidates of unknown writer when several writers are left

    def __call__(self, path: Path) -> bool:
        job = self.job()
        found = event_file_writer(path, owner_of(path))
        verdict, why = self._attribute(job, found)
        writer = (found.host, found.pid)
        if verdict is Attribution.FOREIGN:
            return self._skip(path, why)
        if verdict is Attribution.OWN:
            self.known_writers.add(writer)
            return self._take(path, writer)
        if writer in self.own_writers:
            return self._take(path, writer)
        spans = self._spans(job)
        mine = spans.get(writer, (found.created, found.created))
        if self.known_writers:
            first_own = min((spans[w][0] for w in self.known_writers if w in spans), default=mine[0])
            if mine[1] < first_own:
                return self._take(path, writer)  # an earlier attempt of this run
            return self._skip(path, f"written by another process ({found.host or '?'} pid {found.pid}) while this "
                                    "run wrote the same folder")
        concurrent = [w for w, span in spans.items() if w != writer and _overlap(span, mine)]
        if concurrent and any(w in self.own_writers for w in concurrent):
            return self._skip(path, f"written by another process ({found.host or '?'} pid {found.pid}) at the same "
                                    "time as the one read as this run's")
        if concurrent:
            self.ambiguous = sorted(str(p) for p in self.candidates() if self._open(job, p))[:6]
            return False
        return self._take(path, writer)

    def _take(self, path: Path, writer: Writer) -> bool:
        self.own_writers.add(writer)
        self.skipped.pop(str(path), None)
        self.ambiguous = []
        return True

    def _skip(self, path: Path, why: str) -> bool:
        self.skipped[str(path)] = why
        return False

    def _attribute(self, job: WriterIdentity, found: FileWriter) -> tuple[Attribution, str]:
        uid = job.uid if job.uid is not None else reader_uid()
        return attribute(replace(job, uid=uid), found)

    def _open(self, job: WriterIdentity, path: Path) -> bool:
        return self._attribute(job, event_file_writer(path, owner_of(path)))[0] is not Attribution.FOREIGN

    def _spans(self, job: WriterIdentity) -> dict[Writer, tuple[float, float]]:
        """Per writer of the folder's open candidates: when its first file was created and when it last wrote
        (now, while it runs here)."""
        spans: dict[Writer, tuple[float, float]] = {}
        now = time.time()
        for path in self.candidates():
            found = event_file_writer(path, owner_of(path))
            if self._attribute(job, found)[0] is Attribution.FOREIGN:
                continue
            try:
                last = max(path.stat().st_mtime, found.created)
            except OSError:
                continue
            if running_here(found, job.pid_hosts):
                last = now
            writer = (found.host, found.pid)
            start, end = spans.get(writer, (found.created, last))
            spans[writer] = (min(start, found.created), max(end, last))
        return spans

    def note(self) -> str:
        """What was seen and not read, for the report ("" when nothing)."""
        parts = []
        if self.ambiguous:
            parts.append(f"{len(self.ambiguous)} TensorBoard event files of writers active at the same time, none "
                         f"known to be this run's ({', '.join(self.ambiguous)})")
        foreign = [f"{Path(p).name}: {why}" for p, why in sorted(self.skipped.items())][:4]
        if foreign:
            parts.append("not read: " + "; ".join(foreign))
        return "; ".join(parts)


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Two writers' active spans overlap (TensorBoard file names hold whole seconds: a second's slack)."""
    return a[0] <= b[1] + 1.0 and b[0] <= a[1] + 1.0
