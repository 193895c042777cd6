"""Find a run's metric sources under its work dir (bounded depth and time) and pick by priority.

Priority: W&B (local .wandb log) → TensorBoard → MLflow / Lightning CSV → text log (the job's stdout).
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.sources.base import MetricSource
from guarded_sbatch.sources.csvlog import LightningCsvSource
from guarded_sbatch.sources.mlflow import MlflowSource
from guarded_sbatch.sources.tensorboard import TensorBoardSource, run_folder
from guarded_sbatch.sources.textlog import TextLogSource, TrainerStateSource
from guarded_sbatch.sources.wandb_log import WandbLogSource

MAX_DEPTH = 4
TIME_BUDGET_S = 5.0
MAX_ENTRIES = 50_000
_SKIPPED_FOLDERS = {".git", "__pycache__", "node_modules", ".venv", "venv", "site-packages", ".cache",
                    "checkpoints", "data", "datasets"}


@dataclass
class Found:
    wandb_logs: list[Path] = field(default_factory=list)
    tensorboard_folders: list[Path] = field(default_factory=list)
    mlflow_stores: list[Path] = field(default_factory=list)
    csv_files: list[Path] = field(default_factory=list)
    trainer_states: list[Path] = field(default_factory=list)
    truncated: bool = False  # the walk hit its depth, entry or time bound somewhere


def scan(folder: Path, *, max_depth: int = MAX_DEPTH, time_budget_s: float = TIME_BUDGET_S) -> Found:
    """Walk folder breadth-first, never following symlinks, within the depth, entry and time bounds."""
    found = Found()
    deadline = time.monotonic() + time_budget_s
    queue: list[tuple[Path, int]] = [(folder, 0)]
    seen_entries = 0
    tensorboard_seen: set[Path] = set()
    while queue:
        current, depth = queue.pop(0)
        if time.monotonic() > deadline:
            found.truncated = True
            break
        for entry in _sorted_entries(current):
            seen_entries += 1
            if seen_entries > MAX_ENTRIES:
                found.truncated = True
                return found
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = not is_dir and entry.is_file()
            except OSError:
                continue
            if is_dir:
                _note_folder(found, queue, Path(entry.path), depth < max_depth, depth)
            elif is_file:
                _note_file(found, entry.name, Path(entry.path), current, tensorboard_seen)
    return found


def _sorted_entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        return sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []


def _note_folder(found: Found, queue: list[tuple[Path, int]], path: Path, may_descend: bool, depth: int) -> None:
    """An MLflow store, a folder never searched, one to walk next, or one past the depth bound."""
    if path.name == "mlruns":
        found.mlflow_stores.append(path)
    elif path.name in _SKIPPED_FOLDERS:
        return
    elif may_descend:
        queue.append((path, depth + 1))
    else:
        found.truncated = True


def _note_file(found: Found, name: str, path: Path, folder: Path, tensorboard_seen: set[Path]) -> None:
    """Record a metrics file by its name (an event file: its folder, once)."""
    if name.endswith(".wandb") and name.startswith("run-"):
        found.wandb_logs.append(path)
    elif "tfevents" in name and folder not in tensorboard_seen:
        tensorboard_seen.add(folder)
        found.tensorboard_folders.append(folder)
    elif name == "mlflow.db":
        found.mlflow_stores.append(path)
    elif name == "metrics.csv":
        found.csv_files.append(path)
    elif name == "trainer_state.json":
        found.trainer_states.append(path)


def modified_at(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def created_at(path: Path) -> float:
    """When a metrics file was started: TensorBoard puts it in the name (events.out.tfevents.<time>.<host>),
    else the last write (a file last written before a job started cannot be that job's)."""
    parts = path.name.split(".")
    if "tfevents" in parts:
        index = parts.index("tfevents") + 1
        if index < len(parts) and parts[index].isdigit():
            return float(parts[index])
    return modified_at(path)


def fresh_files(since: float | None) -> Callable[[Path], bool] | None:
    """The event-file filter of a run that started at `since` (None: every file)."""
    if since is None:
        return None
    whole_second = math.floor(since)  # TensorBoard's file names hold whole seconds
    return lambda path: created_at(path) >= whole_second


def run_roots(event_folders: list[Path], base: Path) -> dict[Path, list[Path]]:
    """Event folders grouped by the run they belong to (tensorboard.run_folder): train/ and validation/ are one
    run (their parent), a writer's add_scalars subfolders belong to its folder; sibling runs (runs/a, runs/b)
    stay apart, never merged."""
    roots: dict[Path, list[Path]] = {}
    for folder in event_folders:
        roots.setdefault(run_folder(folder, event_folders, base), []).append(folder)
    return roots


@dataclass
class Discovery:
    sources: list[MetricSource] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)  # what could not be attributed to the run, and why

    def note(self) -> str:
        return "; ".join(self.ambiguous)


def discover_owned(folder: str | os.PathLike[str], *, since: float | None = None,
                   claimed: Collection[str] = (), include_wandb: bool = True, kinds: Collection[str] | None = None,
                   max_depth: int = MAX_DEPTH, time_budget_s: float = TIME_BUDGET_S) -> Discovery:
    """The sources under `folder` that clearly belong to one run: written since `since`, not claimed by another
    guarded run, and of one run only. Several candidates of a kind: none is read, and the candidates are named.
    `kinds` (source kind names; None: all) narrows the search, e.g. to "csv" in a run's own output folder whose
    event files are read already but where a Lightning CSVLogger's version_N/metrics.csv is still to be found."""
    root = Path(folder)
    result = Discovery()
    if not root.is_dir():
        return result
    found = scan(root, max_depth=max_depth, time_budget_s=time_budget_s)
    taken = {str(Path(p).resolve()) for p in claimed}

    def own(path: Path) -> bool:
        return not _claimed(path, taken) and (since is None or modified_at(path) >= since)

    def wanted(kind: str) -> bool:
        return kinds is None or kind in kinds

    if include_wandb and wanted("wandb"):
        log = _pick_one("W&B", [p for p in found.wandb_logs if own(p)], result)
        if log is not None:
            result.sources.append(WandbLogSource(log))
    accept = fresh_files(since)
    tb_folders = found.tensorboard_folders if wanted("tensorboard") else []
    tb_root = _pick_one("TensorBoard", _fresh_run_roots(tb_folders, root, taken, accept), result)
    if tb_root is not None:
        result.sources.append(TensorBoardSource(tb_root, accept=accept))
    for store in found.mlflow_stores if wanted("mlflow") else []:
        if since is None:
            result.sources.append(MlflowSource(store))
        else:  # a store holds every job's runs: only the run tagged with this run's id is read (source_set)
            result.ambiguous.append(f"MLflow store {store}: no run tagged as this run's")
    for kind, label, paths, make in (("csv", "Lightning CSV", found.csv_files, LightningCsvSource),
                                     ("trainer_state", "trainer_state.json", found.trainer_states, TrainerStateSource)):
        chosen = _pick_one(label, [p for p in paths if own(p)], result) if wanted(kind) else None
        if chosen is not None:
            result.sources.append(make(chosen))
    return result


def _pick_one(kind: str, mine: list[Path], result: Discovery) -> Path | None:
    """The one candidate of a kind; with several, none, and the candidates are named in result.ambiguous."""
    if len(mine) > 1:
        listed = ", ".join(str(p) for p in sorted(mine)[:6]) + (" ..." if len(mine) > 6 else "")
        result.ambiguous.append(f"{len(mine)} {kind} candidates, none clearly this run's ({listed}); "
                                "name the run's own with its config's logdir/output_dir or --guard-tb/--guard-wandb")
        return None
    return mine[0] if mine else None


def _fresh_run_roots(event_folders: list[Path], base: Path, taken: set[str],
                     accept: Callable[[Path], bool] | None) -> list[Path]:
    """The TensorBoard runs no other run claimed and with an event file written since the job started."""
    roots = []
    for run_root, folders in run_roots(event_folders, base).items():
        if _claimed(run_root, taken):
            continue
        if accept is not None and not any(accept(f) for folder in folders for f in _event_files(folder)):
            continue  # nothing in it was written since the job started: an older run's
        roots.append(run_root)
    return roots


def claims_below(folder: str | os.PathLike[str], claimed: Collection[str]) -> list[str]:
    """The claims of other runs that lie strictly inside `folder`, one of this run's own folders: another run
    naming the same folder (an earlier run of one Lightning config writes its own version_N under one
    default_root_dir) takes nothing of it from this run; its files are told apart by when they were written."""
    base = Path(folder).resolve()
    return [claim for claim in claimed if base in Path(claim).resolve().parents]


def _event_files(folder: Path) -> list[Path]:
    try:
        return [Path(entry.path) for entry in os.scandir(folder) if "tfevents" in entry.name]
    except OSError:
        return []


def _claimed(path: Path, taken: set[str]) -> bool:
    resolved = path.resolve()
    return str(resolved) in taken or any(str(parent) in taken for parent in resolved.parents)


def discover_sources(folder: str | os.PathLike[str], stdout_path: str | os.PathLike[str] | None = None,
                     *, max_depth: int = MAX_DEPTH, time_budget_s: float = TIME_BUDGET_S) -> list[MetricSource]:
    """Every source found for one run in a folder, in priority order (the first one is the data source to
    use); sibling runs are never merged (see discover_owned)."""
    sources = discover_owned(folder, max_depth=max_depth, time_budget_s=time_budget_s).sources
    if stdout_path is not None and Path(stdout_path).is_file():
        sources.append(TextLogSource(stdout_path))
    return sources


def own_wandb_logs(folders: list[str], run_id: str) -> list[Path]:
    """Every local log of W&B run `run_id` (run-<date>-<id>/ or offline-run-<date>-<id>/; a requeue of an
    offline run makes a second folder), newest last."""
    logs: set[Path] = set()
    for folder in folders:
        base = Path(folder)
        for wandb_dir in (base / "wandb", base):
            try:
                logs.update(p for p in wandb_dir.glob(f"*run-*-{run_id}/run-{run_id}.wandb") if p.is_file())
            except OSError:
                continue
    return sorted(logs, key=modified_at)


def mlflow_stores(uri: str, workdir: str) -> list[Path]:
    """Where the job's MLflow runs are: its MLFLOW_TRACKING_URI when local, else MLflow's defaults in its folder."""
    base = Path(workdir)
    if uri.startswith("sqlite:///"):
        rest = uri[len("sqlite:///"):]
        return [Path("/" + rest.lstrip("/")) if rest.startswith("/") else base / rest]
    uri = uri.removeprefix("file://")
    if uri and "://" not in uri:
        return [Path(uri) if Path(uri).is_absolute() else base / uri]
    if uri:
        return []  # a tracking server: read through its API, not here
    return [base / "mlflow.db", base / "mlruns"]


def mlflow_tagged_run(store: Path, key: str, value: str) -> str | None:
    """The id of the run in `store` carrying tag key=value (as MLFLOW_RUN_CONTEXT sets it), or None."""
    if store.is_file():

        try:
            connection = sqlite3.connect(f"file:{store.resolve().as_posix()}?mode=ro", uri=True, timeout=5)
            try:
                row = connection.execute("SELECT run_uuid FROM tags WHERE key = ? AND value = ? LIMIT 1",
                                         (key, value)).fetchone()
            finally:
                connection.close()
        except sqlite3.Error:
            return None
        return str(row[0]) if row else None
    try:
        for tag in store.glob(f"*/*/tags/{key}"):
            if tag.read_text(encoding="utf-8", errors="replace").strip() == value:
                return tag.parent.parent.name
    except OSError:
        return None
    return None
