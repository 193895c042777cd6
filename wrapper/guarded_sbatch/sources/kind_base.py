"""What one kind of metric source declares, in its one module (`sources/kind_*.py`, listed once in
`sources/kinds.py`): its launch side (`LaunchKind`: how the pre-flight detects it, which keys and variables name
its place at launch), which names under a folder are of the kind and how one is picked (`Finds`), how a path or a
recorded spec is opened (its reader, imported only when opened: the login node never loads a reader), its report
label, and which of a run's files of the kind `kill` deletes.

Light by rule: this module and every declaration import only core and each other at module level
(tests/test_architecture.py), since the pre-flight and the launch read them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from guarded_sbatch.sources.run_sources import SourceSpec, WriterIdentity
from guarded_sbatch.sources.kind_launch import LaunchKind

if TYPE_CHECKING:
    from guarded_sbatch.sources.base import MetricSource

# What is known of the job while it runs (its node and processes grow), asked at each decision.
JobWriter = Callable[[], WriterIdentity]


def modified_at(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def claimed(path: Path, taken: Collection[str]) -> bool:
    """Whether `path` is, or lies under, one of the resolved places another guarded run calls its own."""
    resolved = path.resolve()
    return str(resolved) in taken or any(str(parent) in taken for parent in resolved.parents)


@dataclass
class Picking:
    """One kind's candidates under one folder, being picked: what counts as the run's, and what was seen but left."""

    root: Path
    since: float | None  # the run's start (None: a folder read by hand, every file counts)
    taken: frozenset[str]  # resolved places other guarded runs call their own
    label: str  # the kind as notes name it ("TensorBoard")
    notes: list[str] = field(default_factory=list)
    # what is known of the job now (its user, processes, node): a kind whose files name their writer (TensorBoard's
    # <host>.<pid>) picks the job's own among several runs' candidates; None: a folder read by hand
    job: WriterIdentity | None = None

    def own(self, path: Path) -> bool:
        """Not another run's place, and written since the run started."""
        return not claimed(path, self.taken) and (self.since is None or modified_at(path) >= self.since)

    def one(self, mine: list[Path]) -> list[Path]:
        """The one candidate; with several, none, and the candidates are named in the notes."""
        if len(mine) > 1:
            listed = ", ".join(str(p) for p in sorted(mine)[:6]) + (" ..." if len(mine) > 6 else "")
            self.notes.append(f"{len(mine)} {self.label} candidates, none clearly this run's ({listed}); "
                              "name the run's own with its config's logdir/output_dir or --guard-tb/--guard-wandb")
            return []
        return mine[:1]


def pick_own_one(found: list[Path], picking: Picking) -> list[Path]:
    """The usual rule: of the candidates written since the run started that no other run claims, the one."""
    return picking.one([path for path in found if picking.own(path)])


@dataclass(frozen=True)
class Finds:
    """Which entries under a folder are of the kind, and which of them are one run's."""

    label: str  # the kind as the notes name it
    file: Callable[[str], bool] | None = None  # a file of this name is a candidate (or, `holder`, lies in one)
    folder: Callable[[str], bool] | None = None  # a folder of this name is a candidate (and is not walked into)
    holder: bool = False  # the candidate is the folder holding a matching file (each folder once)
    pick: Callable[[list[Path], Picking], list[Path]] = pick_own_one
    # a picked candidate -> its reader (default: the kind's `open`); `since` is the run's start
    open_found: Callable[[Path, float | None], MetricSource] | None = None


@dataclass(frozen=True)
class SourceKind:
    name: str  # MetricSource.kind of what `open` returns
    flag: str | None  # the monitor/sidecar flag naming a path of this kind; None: found by discovery only
    help: str
    priority: int  # lower is judged first when several sources of a run have data
    label: str  # the report's "Data source" value while this kind is judged
    # given the path (or, without needs_existing_path, the text as given); None: detected at launch, never read
    open: Callable[[Path], MetricSource] | None
    needs_existing_path: bool = True
    # a recorded spec -> its sources now ([] while not written yet); default: open(locator) once it exists
    open_spec: Callable[[SourceSpec, JobWriter], list[MetricSource]] | None = None
    # which names under a folder are of the kind and how one run's is picked; None: never found by discovery
    finds: Finds | None = None
    # the run's own files of a spec, which kill/restart delete (default: none; a shared folder is left alone)
    run_files: Callable[[SourceSpec], list[str]] | None = None
    # a recorded spec of this kind names the run's own folder: nothing more is looked for in the job's folder
    names_run_folder: bool = False
    # found in the run's own folders (those a `names_run_folder` spec and the output keys name) even then
    in_run_folders: bool = False
    # its launch side: the pre-flight's signs of it, the config keys / arguments / variables naming its place
    launch: LaunchKind | None = None

    def __post_init__(self) -> None:
        if self.launch is not None and self.launch.name != self.name:
            raise ValueError(f"source kind {self.name!r} carries the launch side of {self.launch.name!r}")


def is_file_named(*names: str) -> Callable[[str], bool]:
    return lambda name: name in names

