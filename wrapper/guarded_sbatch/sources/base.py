"""The source interface every metric reader implements, and its error.

`MetricSource` is everything the sidecar asks of a reader; `SourceBase` gives the defaults, so a reader
states only what differs (a file it reads, a batched read, the tracker run it names).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from guarded_sbatch.core.errors import ExitCode, GuardedError
from guarded_sbatch.sources.points import CrashEvent, MetricPoint

# What one read yields: points, or (TensorBoard) {key: (steps, wall_times, values)} numpy columns.
Batch = Any


@dataclass(frozen=True)
class TrackerRun:
    """The tracker's own name of the run being read (W&B: entity/project/id) and its local folder."""

    run_path: str
    run_dir: str = ""


class MetricSource(Protocol):
    """An incremental reader: each call to read_new() yields each point exactly once.

    A half-written tail is not an error: it is retried on the next call.
    """

    kind: str  # a name in sources/kinds.py
    batched: bool  # read_batch() stops after about max_points: call it until it returns nothing
    points_sanitized: bool  # steps outside int64 dropped, values beyond float range made ±inf already

    @property
    def path(self) -> Path | None:
        """The local file or folder read (None: read through a command or an API)."""
        ...

    def read_new(self) -> list[MetricPoint]: ...

    def read_batch(self, max_points: int) -> Batch:
        """New points, at most about max_points when `batched` (else all of them, as read_new)."""
        ...

    def take_crashes(self) -> list[CrashEvent]:
        """The crashes the job printed that this reader found, or saw training go on after (DISMISSED), since the
        last call; each change once, in order. Only readers of what the job printed have any."""
        ...

    def files_inspected(self) -> list[str]: ...

    def describe(self) -> str:
        """A short identifier of the source (folder, run id, log path)."""
        ...

    def run_label(self) -> str:
        """The run as the report's "Run:" line names it."""
        ...

    def take_notes(self) -> list[str]:
        """What the reader dropped or clamped since the last call (then forgotten)."""
        ...

    def log_file(self) -> Path | None:
        """The file holding what the job printed, when this source reads one (the evidence's log snippet)."""
        ...

    def tracker_run(self) -> TrackerRun | None:
        """The tracker run this source reads, once known (recorded for kill/restart)."""
        ...

    def ownership_note(self) -> str:
        """Files seen and not read as this run's (another user's, another writer's), for the report."""
        ...


class SourceBase:
    """Defaults for MetricSource's optional parts (a reader sets `path`, or `path = None` when it reads no file)."""

    kind: str = ""
    batched: bool = False
    points_sanitized: bool = False
    sanitize_notes: list[str] = []  # replaced, never mutated, by guarded_reader

    def read_new(self) -> list[MetricPoint]:
        raise NotImplementedError

    def read_batch(self, max_points: int) -> Batch:
        return self.read_new()

    def take_crashes(self) -> list[CrashEvent]:
        return []

    def describe(self) -> str:
        raise NotImplementedError

    def run_label(self) -> str:
        return self.describe()

    def take_notes(self) -> list[str]:
        notes, self.sanitize_notes = self.sanitize_notes, []
        return notes

    def log_file(self) -> Path | None:
        return None

    def tracker_run(self) -> TrackerRun | None:
        return None

    def ownership_note(self) -> str:
        return ""


class OneFileSource(SourceBase):
    """A reader of one file, named by its path (a text log, a CSV, a trainer state)."""

    path: Path

    def describe(self) -> str:
        return str(self.path)

    def files_inspected(self) -> list[str]:
        return [str(self.path)]


class SourceError(GuardedError):
    """A metric source could not be opened or read (not: a half-written tail, which is retried)."""

    exit_code = ExitCode.USAGE
    missing = False  # True: the source is not there (yet); False: it is there and cannot be read
