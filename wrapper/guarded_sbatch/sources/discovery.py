"""Find a run's metric sources under its work dir (bounded depth and time) and pick by priority.

Priority: W&B (local .wandb log) → TensorBoard → MLflow / Lightning CSV → text log (the job's stdout).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.sources.base import MetricSource, SourceError
from guarded_sbatch.sources.csvlog import LightningCsvSource
from guarded_sbatch.sources.mlflow import MlflowSource
from guarded_sbatch.sources.tensorboard import TensorBoardSource
from guarded_sbatch.sources.textlog import TextLogSource, TrainerStateSource
from guarded_sbatch.sources.wandb_log import WandbLogSource, find_wandb_file

MAX_DEPTH = 4
TIME_BUDGET_S = 5.0
MAX_ENTRIES = 50_000
_SKIPPED_FOLDERS = {".git", "__pycache__", "node_modules", ".venv", "venv", "site-packages", ".cache",
                    "checkpoints", "data", "datasets"}
PRIORITY = {"wandb": 0, "tensorboard": 1, "mlflow": 2, "csv": 2, "textlog": 3}
SOURCE_KINDS = ("wandb", "tensorboard", "mlflow", "csv", "textlog", "trainer_state")


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
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            seen_entries += 1
            if seen_entries > MAX_ENTRIES:
                found.truncated = True
                return found
            name = entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = not is_dir and entry.is_file()
            except OSError:
                continue
            path = Path(entry.path)
            if is_dir:
                if name == "mlruns":
                    found.mlflow_stores.append(path)
                elif name in _SKIPPED_FOLDERS:
                    continue
                elif depth < max_depth:
                    queue.append((path, depth + 1))
                else:
                    found.truncated = True
            elif is_file:
                if name.endswith(".wandb") and name.startswith("run-"):
                    found.wandb_logs.append(path)
                elif "tfevents" in name and current not in tensorboard_seen:
                    tensorboard_seen.add(current)
                    found.tensorboard_folders.append(current)
                elif name == "mlflow.db":
                    found.mlflow_stores.append(path)
                elif name == "metrics.csv":
                    found.csv_files.append(path)
                elif name == "trainer_state.json":
                    found.trainer_states.append(path)
    return found


def _newest(paths: list[Path]) -> Path:
    def modified(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    return max(paths, key=modified)


def _tensorboard_root(folders: list[Path], base: Path) -> Path:
    """The deepest common folder of the event folders (so train/ and validation/ are read as one run)."""
    common = Path(os.path.commonpath([str(f) for f in folders]))
    return common if common != base.parent else base


def discover_sources(folder: str | os.PathLike[str], stdout_path: str | os.PathLike[str] | None = None,
                     *, max_depth: int = MAX_DEPTH, time_budget_s: float = TIME_BUDGET_S) -> list[MetricSource]:
    """Every source found for the run, in priority order (the first one is the data source to use)."""
    root = Path(folder)
    sources: list[MetricSource] = []
    if root.is_dir():
        found = scan(root, max_depth=max_depth, time_budget_s=time_budget_s)
        if found.wandb_logs:
            sources.append(WandbLogSource(_newest(found.wandb_logs)))
        if found.tensorboard_folders:
            sources.append(TensorBoardSource(_tensorboard_root(found.tensorboard_folders, root)))
        for store in found.mlflow_stores:
            sources.append(MlflowSource(store))
        if found.csv_files:
            sources.append(LightningCsvSource(_newest(found.csv_files)))
        if found.trainer_states:
            sources.append(TrainerStateSource(_newest(found.trainer_states)))
    if stdout_path is not None and Path(stdout_path).is_file():
        sources.append(TextLogSource(stdout_path))
    return sources


def open_source(kind: str, path: str | os.PathLike[str]) -> MetricSource:
    """A source of a named kind at a path given by the user (`--tb`, `--wandb`, `--log`, ...)."""
    target = Path(path)
    if kind == "wandb" and "://" not in str(path) and not target.exists():
        from guarded_sbatch.sources.wandb_api import WandbApiSource

        return WandbApiSource(str(path))  # a run path entity/project/id, read online
    if kind == "wandb" and "://" in str(path):
        from guarded_sbatch.sources.wandb_api import WandbApiSource

        return WandbApiSource(str(path))
    if not target.exists():
        raise SourceError(f"{kind} source {target} does not exist; check the path")
    if kind == "wandb":
        if find_wandb_file(target) is None:
            raise SourceError(f"no run-*.wandb log under {target}; give the run folder, wandb/ or the .wandb file")
        return WandbLogSource(target)
    if kind == "tensorboard":
        return TensorBoardSource(target)
    if kind == "mlflow":
        return MlflowSource(target)
    if kind == "csv":
        return LightningCsvSource(target)
    if kind == "trainer_state":
        return TrainerStateSource(target)
    if kind == "textlog":
        if target.name == "trainer_state.json":
            return TrainerStateSource(target)
        return TextLogSource(target)
    raise SourceError(f"unknown source kind {kind!r}: use one of {', '.join(SOURCE_KINDS)}")
