"""The runs a one-shot read (`monitor --once --tb DIR`) finds in a TensorBoard folder, told apart by what wrote
them: each run folder (`tensorboard.run_folder`: a split train/ + validation/ is one) and, within it, each writer
(the `<host>.<pid>` in an event file's name: a folder that an older run wrote first holds its files beside the
new run's). A one-shot judges ONE of them — the one named (`--run`: a pid, or a part of its folder or file), else
the newest writer of the reader's own files (one writing now first, then the last written) — and names the others
it left out; `--all-runs` judges each. Nothing is merged without saying so."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sources.writers import event_file_writer, owned, owner_of, running_here

if TYPE_CHECKING:
    from guarded_sbatch.sources.base import MetricSource

MAX_LISTED = 8  # runs named in a one-line "left out" note


@dataclass(frozen=True)
class FoundRun:
    """One run's event files in a folder read by hand."""

    folder: Path
    host: str
    pid: int | None
    files: tuple[Path, ...]
    last_write: float
    live: bool  # its writer runs now on this host

    def name(self) -> str:
        who = f"pid {self.pid}" if self.pid is not None else "writer not named"
        where = f"{self.host} " if self.host else ""
        return f"{self.folder} ({where}{who}{', writing now' if self.live else ''})"

    def to_json(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "host": self.host, "pid": self.pid, "live": self.live,
                "last_write": round(self.last_write, 3), "files": [str(f) for f in self.files]}


def tensorboard_runs(path: Path) -> list[FoundRun]:
    """The runs whose event files lie under `path` (a folder or one file), yours first, then the newest."""
    from guarded_sbatch.sources.tensorboard import find_event_files, run_folder  # noqa: PLC0415  a reader's helpers

    files = find_event_files(path)
    base = path if path.is_dir() else path.parent
    folders = sorted({f.parent for f in files})
    groups: dict[tuple[Path, str, int | None], list[Path]] = {}
    for file in files:
        writer = event_file_writer(file, owner_of(file))
        groups.setdefault((run_folder(file.parent, folders, base), writer.host, writer.pid), []).append(file)
    runs = []
    for (folder, host, pid), members in groups.items():
        last = max((_mtime(f) for f in members), default=0.0)
        live = running_here(event_file_writer(members[0], None))
        runs.append(FoundRun(folder, host, pid, tuple(sorted(members)), last, live))
    # a run of another user's files is never read: it is never the one judged while one of yours is there (its pid,
    # reused by a process running now, would make it look live)
    return sorted(runs, key=lambda r: (any(owned(f) for f in r.files), r.live, r.last_write), reverse=True)


def _mtime(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def choose(runs: list[FoundRun], named: str | None) -> tuple[FoundRun, list[FoundRun]]:
    """(the run to judge, the ones left out): the one `named` (a pid, or a part of its folder or a file's path),
    else the newest. A name that matches none, or several, is a usage error listing the runs."""
    if not named:
        return runs[0], runs[1:]
    matches = [run for run in runs if named == str(run.pid) or named in str(run.folder)
               or any(named in str(f) for f in run.files)]
    if len(matches) == 1:
        return matches[0], [run for run in runs if run is not matches[0]]
    listed = "; ".join(run.name() for run in runs[:MAX_LISTED])
    what = "matches no run" if not matches else f"matches {len(matches)} runs"
    raise UsageError(f"--run {named}: {what} in the folder; its runs: {listed} (name one by its pid or folder)")


def left_out_note(left: list[FoundRun]) -> str:
    """One line naming the runs not judged, and how to judge them."""
    if not left:
        return ""
    listed = "; ".join(run.name() for run in left[:MAX_LISTED]) + (" ..." if len(left) > MAX_LISTED else "")
    return (f"left out {len(left)} other run(s) in the folder: {listed} — judge one with --run PID|FOLDER, "
            "each with --all-runs")


def one_run_source(folder: str, files: frozenset[str]) -> MetricSource:
    """A TensorBoard reader of `folder` that reads these event files alone (one run of several)."""
    from guarded_sbatch.sources.tensorboard import TensorBoardSource  # noqa: PLC0415  the reader, when read

    return TensorBoardSource(folder, accept=lambda path: str(path) in files)
