"""The registry of metric source kinds: the one list of them, one line per kind in KIND_MODULES, each line the module
that declares the kind (`KIND`, a `sources/kind_base.py` `SourceKind`: how it is detected and resolved at launch,
found under a folder, opened and read, labelled in the report, cleaned up by `kill`).

Every process reads this list — the pre-flight and the launch (`launch/checks/monitoring.py`,
`launch/checks/own_folder.py`, `launch/source_plan.py`), the sidecar and the shared monitor
(`sidecar/source_set.py`, `sources/discovery.py`), `monitor`'s flags, `show`, `kill`/`restart` (`status` shows the
label a sidecar recorded) — so a kind added by one module and one line here is known to all of them, the sidecar
job included. The declarations are light (core only at module level; each imports its reader when a source is
opened), so the login node loads no reader: tests/test_architecture.py lets `launch/` import this module and the
declarations, nothing else of `sources/`. A line may name a module outside guarded_sbatch (any importable
`package.module` defining `KIND`). Opening is where a spec's writer identity is applied: another user's files,
another W&B run, another process's event files are never read as the run's (sources/writers.py).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from guarded_sbatch.sources.place_keys import CHECKPOINT_DIR_KEYS, OUTPUT_KEYS
from guarded_sbatch.sources.run_sources import SourceSpec
from guarded_sbatch.sources.kind_launch import LaunchKind
from guarded_sbatch.sources.base import MetricSource, SourceError
from guarded_sbatch.sources.kind_base import JobWriter, SourceKind

__all__ = ["KINDS", "KIND_MODULES", "JobWriter", "SourceError", "SourceKind"]

# One line per kind, in the order the pre-flight ranks trackers (the first found is the run's main one).
KIND_MODULES = (
    "guarded_sbatch.sources.kind_wandb",
    "guarded_sbatch.sources.kind_neptune",
    "guarded_sbatch.sources.kind_mlflow",
    "guarded_sbatch.sources.kind_tensorboard",
    "guarded_sbatch.sources.kind_csv",
    "guarded_sbatch.sources.kind_trainer_state",
    "guarded_sbatch.sources.kind_textlog",
)


def _declared(module: str) -> SourceKind:
    kind = importlib.import_module(module).KIND
    if not isinstance(kind, SourceKind):
        raise TypeError(f"{module}.KIND is not a SourceKind")
    return kind


KINDS: dict[str, SourceKind] = {kind.name: kind for kind in map(_declared, KIND_MODULES)}


def launch_kinds() -> list[LaunchKind]:
    """Every kind's launch side, in the registry's order."""
    return [kind.launch for kind in KINDS.values() if kind.launch is not None]


def place_of(kind: str) -> str:
    """What a kind's keys name, "file" or "folder" (a kind without a launch side: "folder")."""
    found = KINDS.get(kind)
    return found.launch.place if found is not None and found.launch is not None else "folder"


def written_folder_keys() -> tuple[str, ...]:
    """Config keys / launcher arguments naming a folder the run writes: its output and checkpoint folders and
    every kind's folder (the run-name check calls a name taken when one holds it; the path check wants its parent)."""
    kinds = [kind.launch.path_keys for kind in KINDS.values() if kind.launch is not None and kind.launch.place == "folder"]
    return (*OUTPUT_KEYS, *CHECKPOINT_DIR_KEYS, *(key for keys in kinds for key in keys))


def readable_kinds() -> list[str]:
    """The kinds a reader reads (Neptune is detected at launch only)."""
    return [name for name, kind in KINDS.items() if kind.open is not None]


def flagged_kinds() -> list[SourceKind]:
    """The kinds a user can name on the command line, with their flags, in priority order."""
    return sorted((kind for kind in KINDS.values() if kind.flag and kind.open is not None), key=lambda k: k.priority)


def _kind_named(kind: str) -> SourceKind:
    found = KINDS.get(kind)
    if found is None or found.open is None:
        raise SourceError(f"unknown source kind {kind!r}: use one of {', '.join(readable_kinds())}")
    return found


def _opened(found: SourceKind, target: Path | str) -> MetricSource:
    assert found.open is not None  # _kind_named refuses a kind without a reader
    return found.open(target)  # type: ignore[arg-type]  # a path, or the text as given (needs_existing_path=False)


def open_source(kind: str, path: str | Path) -> MetricSource:
    """A source of a named kind at a path the user gave (`--tb`, `--wandb`, `--log`, ...)."""
    found = _kind_named(kind)
    target = Path(path)
    if found.needs_existing_path and not target.exists():
        raise SourceError(f"{kind} source {target} does not exist; check the path")
    return _opened(found, target if found.needs_existing_path else path)


def open_given(spec: SourceSpec, job: JobWriter) -> list[MetricSource]:
    """A source a person named (a flag): it must be there, and be of its kind."""
    found = _kind_named(spec.kind)
    target = Path(spec.locator)
    if found.needs_existing_path and not target.exists():
        raise SourceError(f"{spec.kind} source {target} does not exist; check the path")
    opened = found.open_spec(spec, job) if found.open_spec is not None else []
    if not opened:
        return [open_source(spec.kind, spec.locator)]  # names what is wrong with it
    return opened


def open_spec(spec: SourceSpec, job: JobWriter) -> list[MetricSource]:
    """The sources a spec names now ([] while its files are not written yet; they are looked for again)."""
    found = _kind_named(spec.kind)
    if found.open_spec is not None:
        return found.open_spec(spec, job)
    path = Path(spec.locator)
    if found.needs_existing_path and not path.exists():
        return []
    return [_opened(found, path if found.needs_existing_path else spec.locator)]


def run_files(specs: list[SourceSpec]) -> list[str]:
    """The run's own files of every kind that has any, for kill/restart's cleanup."""
    files: list[str] = []
    for spec in specs:
        kind = KINDS.get(spec.kind)
        if kind is not None and kind.run_files is not None:
            files.extend(f for f in kind.run_files(spec) if f not in files)
    return files


def names_run_folder(kind: str) -> bool:
    """Whether a recorded spec of the kind names the run's own folder (nothing else is looked for in the job's)."""
    found = KINDS.get(kind)
    return found is not None and found.names_run_folder


def found_in_run_folders() -> list[str]:
    """The kinds still looked for in the run's own folders once a spec names them (Lightning's CSV)."""
    return [name for name, kind in KINDS.items() if kind.in_run_folders and kind.finds is not None]


def priority(kind: str) -> int:
    found = KINDS.get(kind)
    return found.priority if found is not None else 9


def label(kind: str | None) -> str:
    found = KINDS.get(kind) if kind is not None else None
    return found.label if found is not None else "unreachable"
