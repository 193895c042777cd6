"""Find a run's metric sources under a folder: one bounded walk (depth, entries, time; symlinked folders never
followed) that asks every registered kind (sources/kinds.py) which names are its own (`Finds.file` /
`Finds.folder`), then each kind picks, from its candidates, the one that is clearly this run's (`Finds.pick`).
Kinds are taken in priority order: W&B (local .wandb log) → TensorBoard → MLflow / Lightning CSV / trainer_state
→ an added kind by its priority; a text log is never looked for here (the job's stdout is recorded).
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.sources.files import listing
from guarded_sbatch.sources.run_sources import SourceSpec, WriterIdentity
from guarded_sbatch.sources.kind_base import Picking, SourceKind
from guarded_sbatch.sources.kinds import KINDS, names_run_folder

MAX_DEPTH = 4
HELD_ORIGIN = "held open by the job's process"  # a spec's origin when the job's processes were seen writing it
TIME_BUDGET_S = 5.0
MAX_ENTRIES = 50_000
_SKIPPED_FOLDERS = {".git", "__pycache__", "node_modules", ".venv", "venv", "site-packages", ".cache",
                    "checkpoints", "data", "datasets"}


@dataclass
class Found:
    by_kind: dict[str, list[Path]] = field(default_factory=dict)  # kind -> its candidates, in walk order
    truncated: bool = False  # the walk hit its depth, entry or time bound somewhere

    def add(self, kind: str, path: Path) -> None:
        self.by_kind.setdefault(kind, []).append(path)


def _finders() -> list[SourceKind]:
    return [kind for kind in KINDS.values() if kind.finds is not None]


def scan(folder: Path, *, max_depth: int = MAX_DEPTH, time_budget_s: float = TIME_BUDGET_S) -> Found:
    """Walk folder breadth-first, never following symlinks, within the depth, entry and time bounds; each entry
    is a candidate of the first registered kind that claims its name."""
    found = Found()
    finders = _finders()
    deadline = time.monotonic() + time_budget_s
    queue: list[tuple[Path, int]] = [(folder, 0)]
    seen_entries = 0
    holders: set[tuple[str, Path]] = set()
    while queue:
        current, depth = queue.pop(0)
        if time.monotonic() > deadline:
            found.truncated = True
            break
        entries, more = listing(current, MAX_ENTRIES - seen_entries)
        for entry in sorted(entries, key=lambda e: e.name):
            seen_entries += 1
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = not is_dir and entry.is_file()
            except OSError:
                continue
            if is_dir:
                _note_folder(found, finders, queue, Path(entry.path), depth < max_depth, depth)
            elif is_file:
                _note_file(found, finders, entry.name, Path(entry.path), current, holders)
        if more:
            found.truncated = True
            return found
    return found


def _note_folder(found: Found, finders: list[SourceKind], queue: list[tuple[Path, int]], path: Path,
                 may_descend: bool, depth: int) -> None:
    """A folder that is a source (an MLflow store), a folder never searched, one to walk next, or one past the
    depth bound."""
    for kind in finders:
        if kind.finds is not None and kind.finds.folder is not None and kind.finds.folder(path.name):
            found.add(kind.name, path)
            return
    if path.name in _SKIPPED_FOLDERS:
        return
    if may_descend:
        queue.append((path, depth + 1))
    else:
        found.truncated = True


def _note_file(found: Found, finders: list[SourceKind], name: str, path: Path, folder: Path,
               holders: set[tuple[str, Path]]) -> None:
    """A metrics file by its name, for the first kind that claims it (a holder kind: its folder, once)."""
    for kind in finders:
        finds = kind.finds
        if finds is None or finds.file is None or not finds.file(name):
            continue
        if not finds.holder:
            found.add(kind.name, path)
        elif (kind.name, folder) not in holders:
            holders.add((kind.name, folder))
            found.add(kind.name, folder)
        return


def picked(folder: str | os.PathLike[str], *, since: float | None = None, claimed: Collection[str] = (),
           skip: Collection[str] = (), kinds: Collection[str] | None = None, max_depth: int = MAX_DEPTH,
           time_budget_s: float = TIME_BUDGET_S, job: WriterIdentity | None = None,
           ) -> tuple[list[tuple[SourceKind, Path]], list[str]]:
    """Each kind's pick under `folder`, in priority order, and the notes naming what was seen but not taken; the
    kinds in `skip` (those a run's record names already) are not looked for; `job`: what is known of the job's
    processes, so a kind whose files name their writer picks the job's own among several runs'."""
    root = Path(folder)
    if not root.is_dir():
        return [], []
    found = scan(root, max_depth=max_depth, time_budget_s=time_budget_s)
    taken = frozenset(str(Path(p).resolve()) for p in claimed)
    chosen: list[tuple[SourceKind, Path]] = []
    notes: list[str] = []
    for kind in sorted(_finders(), key=lambda k: k.priority):
        if kind.finds is None or kind.name in skip or (kinds is not None and kind.name not in kinds):
            continue
        picking = Picking(root, since, taken, kind.finds.label, job=job)
        chosen.extend((kind, path) for path in kind.finds.pick(found.by_kind.get(kind.name, []), picking))
        notes.extend(picking.notes)
    return chosen, notes


def discover(root: Path, *, since: float | None, claimed: Collection[str] = (),
             skip: Collection[str] = (), kinds: Collection[str] | None = None,
             job: WriterIdentity | None = None) -> tuple[list[SourceSpec], str]:
    """Specs of the sources under `root` that clearly belong to one run, and a note naming what was seen but not
    attributable. A store of many runs (MLflow) is taken only when reading a folder by hand (no `since`)."""
    chosen, notes = picked(root, since=since, claimed=claimed, skip=skip, kinds=kinds, job=job)
    origin = f"found under {root}"
    return [SourceSpec(kind.name, str(path), origin) for kind, path in chosen], "; ".join(notes)


def discover_unnamed(root: Path, recorded: list[SourceSpec], *, since: float, claimed: Collection[str] = (),
                     job: WriterIdentity | None = None) -> tuple[list[SourceSpec], str]:
    """For a guarded run: what its record leaves open, found in the job's folder (nothing when a recorded spec
    names the run's folder; never a kind the record names already, such as the W&B run of its id or the MLflow
    run of its tag)."""
    named = {spec.kind for spec in recorded}
    if any(names_run_folder(kind) for kind in named):
        return [], ""
    return discover(root, since=since, claimed=claimed, skip=named, job=job)


def held_specs(held: dict[str, int], known: list[SourceSpec]) -> list[SourceSpec]:
    """Specs of the metric files the job's processes hold open for writing (path -> pid): what the run really
    writes, wherever it lies and whatever key named it. A file is taken for the first kind that claims its name
    (a holder kind: its folder), unless a known spec of that kind covers it already or the kind's files are stores
    of many runs."""
    specs: list[SourceSpec] = []
    for path_text, pid in sorted(held.items()):
        path = Path(path_text)
        for kind in _finders():
            finds = kind.finds
            if finds is None or finds.file is None or not finds.file(path.name):
                continue
            if finds.folder is not None:
                break  # a store of many runs (MLflow's mlflow.db): the job's run in it is its tag's, never the store
            place = path.parent if finds.holder else path
            if not any(spec.kind == kind.name and (_covers(spec.locator, place) or _names_run(spec, path.name))
                       for spec in [*known, *specs]):
                specs.append(SourceSpec(kind.name, str(place), f"{HELD_ORIGIN} {pid}"))
            break
    return specs


def _names_run(spec: SourceSpec, name: str) -> bool:
    """A known spec of a tracker run id whose file this is (W&B's run-<id>.wandb)."""
    return bool(spec.writer.run_id) and spec.writer.run_id in name


def _covers(locator: str, place: Path) -> bool:
    if not locator.startswith("/"):
        return False
    base = Path(os.path.realpath(locator))  # open files are named by their real path; a spec may go through a link
    return place == base or base in place.parents


def claims_below(folder: str | os.PathLike[str], claimed: Collection[str]) -> list[str]:
    """The claims of other runs that lie strictly inside `folder`, one of this run's own folders: another run
    naming the same folder (an earlier run of one Lightning config writes its own version_N under one
    default_root_dir) takes nothing of it from this run; its files are told apart by when they were written."""
    base = Path(folder).resolve()
    return [claim for claim in claimed if base in Path(claim).resolve().parents]
