"""Every kind of metric source, in one table: its name, its `monitor` flag, its place in the priority order,
its report label, how a recorded source of the kind is opened, which files under a folder are of the kind,
and which of a run's files of the kind `kill` deletes.

A new source is one module in sources/ (a reader subclassing SourceBase, and what it says of its files) and
one line in KINDS below: `monitor` and `sidecar` get its flag, discovery finds its files, the sidecar opens and
ranks it, the report labels it, `show` reads it from the run's record and `kill` deletes its files.
`register()` adds a kind at run time (tests/test_source_registry.py adds a JSON-lines source that way).
Opening is where a spec's writer identity is applied: another user's files, another W&B run, another
process's event files are never read as the run's (sources/writers.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.core.run_sources import MLFLOW_TAG, SourceSpec, WriterIdentity
from guarded_sbatch.sources import discovery
from guarded_sbatch.sources.base import MetricSource, SourceError
from guarded_sbatch.sources.csvlog import LightningCsvSource
from guarded_sbatch.sources.mlflow import MlflowSource
from guarded_sbatch.sources.tensorboard import TensorBoardSource, find_event_files
from guarded_sbatch.sources.textlog import TextLogSource, TrainerStateSource
from guarded_sbatch.sources.wandb_api import WandbApiSource
from guarded_sbatch.sources.wandb_log import WandbLogSource, find_wandb_file
from guarded_sbatch.sources.writers import WriterFilter, owned

_SKIPPED_FOLDERS = {".git", "__pycache__", "node_modules", ".venv", "venv", "site-packages", ".cache", "checkpoints"}
# What is known of the job while it runs (its node and processes grow), asked at each decision.
JobWriter = Callable[[], WriterIdentity]


@dataclass(frozen=True)
class SourceKind:
    name: str  # MetricSource.kind of what `open` returns
    flag: str | None  # the monitor/sidecar flag naming a path of this kind; None: found by discovery only
    help: str
    priority: int  # lower is judged first when several sources of a run have data
    label: str  # the report's "Data source" value while this kind is judged
    open: Callable[[Path], MetricSource]  # given the path (or, without needs_existing_path, the text as given)
    needs_existing_path: bool = True
    # a recorded spec -> its sources now ([] while not written yet); default: open(locator) once it exists
    open_spec: Callable[[SourceSpec, JobWriter], list[MetricSource]] | None = None
    # file name -> whether discovery takes that file as a source of this kind (None: the built-in scan finds it)
    matches: Callable[[str], bool] | None = None
    # the run's own files of a spec, which kill/restart delete (default: none; a shared folder is left alone)
    run_files: Callable[[SourceSpec], list[str]] | None = None
    # a recorded spec of this kind names the run's own folder: nothing more is looked for in the job's folder
    names_run_folder: bool = False


def _open_wandb(spec: Path | str) -> MetricSource:
    text = str(spec)  # a URL must not pass through Path (it would fold "//")
    target = Path(text)
    if "://" in text or not target.exists():
        return WandbApiSource(text)  # a run URL or entity/project/id, read through the online API
    if find_wandb_file(target) is None:
        raise SourceError(f"no run-*.wandb log under {target}; give the run folder, wandb/ or the .wandb file")
    return WandbLogSource(target)


def _open_textlog(target: Path) -> MetricSource:
    return TrainerStateSource(target) if target.name == "trainer_state.json" else TextLogSource(target)


def _tensorboard_spec(spec: SourceSpec, job: JobWriter) -> list[MetricSource]:
    path = Path(spec.locator)
    writers = WriterFilter(job, lambda: find_event_files(path))
    return [TensorBoardSource(path, accept=writers)]


def _wandb_spec(spec: SourceSpec, job: JobWriter) -> list[MetricSource]:
    run_id = spec.writer.run_id
    if spec.search and run_id:  # known by the id the job was given: its newest log (a requeue makes a new folder)
        logs = [log for log in discovery.own_wandb_logs(list(spec.search), run_id) if owned(log, job().uid)]
        return [WandbLogSource(logs[-1], run_id=run_id)] if logs else []
    if "://" in spec.locator or not Path(spec.locator).exists():
        return [WandbApiSource(spec.locator)] if spec.locator and not spec.search else []
    if find_wandb_file(Path(spec.locator)) is None:
        return []
    return [WandbLogSource(Path(spec.locator), run_id=run_id)]


def _wandb_files(spec: SourceSpec) -> list[str]:
    """The local folders of the W&B run the job was given (never another run's, never another user's)."""
    if not (spec.search and spec.writer.run_id):
        return []
    return [str(log.parent) for log in discovery.own_wandb_logs(list(spec.search), spec.writer.run_id)
            if owned(log, spec.writer.uid)]


def _mlflow_spec(spec: SourceSpec, job: JobWriter) -> list[MetricSource]:
    writer = spec.writer
    workdir = spec.search[0] if spec.search else ""
    if not (writer.tag or writer.run_id):
        return [MlflowSource(Path(spec.locator))] if spec.locator and Path(spec.locator).exists() else []
    for store in discovery.mlflow_stores(spec.locator, workdir):
        if store.exists():
            run_id = writer.run_id or discovery.mlflow_tagged_run(store, MLFLOW_TAG, writer.tag)
            if run_id:
                return [MlflowSource(store, run_id)]
    return []


def _textlog_spec(spec: SourceSpec, job: JobWriter) -> list[MetricSource]:
    """A job's stdout/stderr: a %N (the node, known once the job runs) matches the one such file written since."""
    if "%N" not in spec.locator:
        path = Path(spec.locator)
        return [_open_textlog(path)] if path.is_file() else []
    pattern = Path(spec.locator)
    since = job().since
    try:
        matches = [p for p in pattern.parent.glob(pattern.name.replace("%N", "*"))
                   if p.is_file() and p.stat().st_mtime >= since]
    except OSError:
        return []
    return [TextLogSource(matches[0])] if len(matches) == 1 else []


KINDS: dict[str, SourceKind] = {}


def register(kind: SourceKind) -> SourceKind:
    KINDS[kind.name] = kind
    return kind


for _kind in (
    SourceKind("wandb", "--wandb", "W&B run folder, .wandb file, or run path/URL", 0, "wandb_ok", _open_wandb,
               needs_existing_path=False, open_spec=_wandb_spec, run_files=_wandb_files),
    SourceKind("tensorboard", "--tb", "TensorBoard event folder or file", 1, "tensorboard_ok", TensorBoardSource,
               open_spec=_tensorboard_spec, names_run_folder=True),
    SourceKind("mlflow", "--mlflow", "MLflow store (mlflow.db or mlruns/)", 2, "log_fallback", MlflowSource,
               needs_existing_path=False, open_spec=_mlflow_spec),
    SourceKind("csv", "--csv", "Lightning CSVLogger metrics.csv", 2, "log_fallback", LightningCsvSource),
    SourceKind("trainer_state", None, "HF trainer_state.json", 2, "log_fallback", TrainerStateSource),
    SourceKind("textlog", "--log", "a text log of the run", 3, "log_fallback", _open_textlog,
               open_spec=_textlog_spec),
):
    register(_kind)


def open_source(kind: str, path: str | Path) -> MetricSource:
    """A source of a named kind at a path the user gave (`--tb`, `--wandb`, `--log`, ...)."""
    found = _kind_named(kind)
    target = Path(path)
    if found.needs_existing_path and not target.exists():
        raise SourceError(f"{kind} source {target} does not exist; check the path")
    return found.open(target if found.needs_existing_path else path)  # type: ignore[arg-type]


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
    return [found.open(path if found.needs_existing_path else spec.locator)]  # type: ignore[arg-type]


def run_files(specs: list[SourceSpec]) -> list[str]:
    """The run's own files of every kind that has any, for kill/restart's cleanup."""
    files: list[str] = []
    for spec in specs:
        kind = KINDS.get(spec.kind)
        if kind is not None and kind.run_files is not None:
            files.extend(f for f in kind.run_files(spec) if f not in files)
    return files


def discover_unnamed(root: Path, recorded: list[SourceSpec], *, since: float,
                     claimed: Collection[str] = ()) -> tuple[list[SourceSpec], str]:
    """For a guarded run: what its record leaves open, found in the job's folder (nothing when a recorded spec
    names the run's folder; never a kind the record names already, such as the W&B run of its id or the MLflow
    run of its tag)."""
    named = {spec.kind for spec in recorded}
    if any(KINDS[kind].names_run_folder for kind in named if kind in KINDS):
        return [], ""
    specs, note = discover(root, since=since, claimed=claimed, include_wandb="wandb" not in named)
    return [spec for spec in specs if spec.kind not in named], note


def discover(root: Path, *, since: float | None, claimed: Collection[str] = (),
             include_wandb: bool = True, kinds: Collection[str] | None = None) -> tuple[list[SourceSpec], str]:
    """Specs of the sources under `root` that clearly belong to one run (discovery.py for the built-in kinds,
    each added kind by its `matches`), and a note naming what was seen but not attributable. A store of many
    runs (MLflow) is taken only when reading a folder by hand (no `since`)."""
    found = discovery.discover_owned(root, since=since, claimed=claimed, include_wandb=include_wandb,
                                     kinds=kinds)
    origin = f"found under {root}"
    specs = [SourceSpec(_kind_of(source), source.describe() if source.path is None else str(source.path), origin)
             for source in found.sources if not (source.kind == "mlflow" and since is not None)]
    notes = [found.note()] if found.note() else []
    added = [(kind, kind.matches) for kind in KINDS.values() if kind.matches is not None]
    if added:
        walked = _walk(root)
        for kind, matches in added:
            files = [p for p in walked if matches(p.name) and (since is None or _mtime(p) >= since) and owned(p)]
            if len(files) == 1:
                specs.append(SourceSpec(kind.name, str(files[0]), origin))
            elif files:
                notes.append(f"{len(files)} {kind.name} candidates, none clearly this run's "
                             f"({', '.join(str(p) for p in sorted(files)[:6])})")
    return specs, "; ".join(notes)


def _kind_of(source: MetricSource) -> str:
    return "trainer_state" if isinstance(source, TrainerStateSource) else source.kind


def _walk(root: Path, max_depth: int = discovery.MAX_DEPTH, budget_s: float = 2.0) -> list[Path]:
    files: list[Path] = []
    deadline = time.monotonic() + budget_s
    queue = [(root, 0)]
    while queue and time.monotonic() < deadline and len(files) < discovery.MAX_ENTRIES:
        folder, depth = queue.pop(0)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < max_depth and entry.name not in _SKIPPED_FOLDERS:
                        queue.append((Path(entry.path), depth + 1))
                elif entry.is_file(follow_symlinks=False):
                    files.append(Path(entry.path))
            except OSError:
                continue
    return files


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _kind_named(kind: str) -> SourceKind:
    found = KINDS.get(kind)
    if found is None:
        raise SourceError(f"unknown source kind {kind!r}: use one of {', '.join(KINDS)}")
    return found


def priority(kind: str) -> int:
    found = KINDS.get(kind)
    return found.priority if found is not None else 9


def label(kind: str | None) -> str:
    found = KINDS.get(kind) if kind is not None else None
    return found.label if found is not None else "unreachable"


def flagged_kinds() -> list[SourceKind]:
    """The kinds a user can name on the command line, with their flags."""
    return [kind for kind in KINDS.values() if kind.flag]
