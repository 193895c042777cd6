"""The sidecar's view of a run's metric sources: explicit paths or discovery, one history per
source, and the highest-priority source that has data is the one judged."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guarded_sbatch.core.errors import GuardedError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from guarded_sbatch.judge.history import MetricHistory
    from guarded_sbatch.scheduler.base import Scheduler
    from guarded_sbatch.sidecar.settings import SidecarSettings
    from guarded_sbatch.sources.base import MetricSource

PRIORITY = {"wandb": 0, "tensorboard": 1, "mlflow": 2, "csv": 2, "textlog": 3}


class SourceSet:
    def __init__(self, settings: "SidecarSettings", scheduler: "Scheduler | None") -> None:
        self.settings = settings
        self.scheduler = scheduler
        self.sources: list[MetricSource] = []
        self.histories: dict[int, MetricHistory] = {}  # by id(source): the list is re-sorted
        self.read_error = ""
        self.errors: dict[int, str] = {}  # by id(source): why it could not be read at the last poll
        self._stdout: Path | None = None
        self._work_dir: Path | None = None
        self._stdout_size = -1
        self._job_info_loaded = False
        self._opened: set[tuple[str, str]] = set()

    def _load_job_info(self) -> None:
        if self._job_info_loaded or self.scheduler is None or self.settings.job_id is None:
            return
        try:
            info = self.scheduler.info(self.settings.job_id)
        except GuardedError:
            return  # try again next poll
        self._job_info_loaded = True
        self._stdout = Path(info.stdout_path) if info.stdout_path else None
        self._work_dir = Path(info.work_dir) if info.work_dir else None

    def _ensure_sources(self) -> None:
        from guarded_sbatch.sources.discovery import discover_sources, open_source

        # explicit paths may not exist yet (the trainer creates them): retried at every poll
        for kind, paths in (("wandb", self.settings.wandb_paths), ("tensorboard", self.settings.tb_paths),
                            ("textlog", self.settings.log_paths)):
            for path in paths:
                if (kind, str(path)) not in self._opened:
                    self.sources.append(open_source(kind, path))
                    self._opened.add((kind, str(path)))
        if self.settings.wandb_run and ("wandb_api", self.settings.wandb_run) not in self._opened:
            from guarded_sbatch.sources.wandb_api import WandbApiSource

            self.sources.append(WandbApiSource(self.settings.wandb_run))
            self._opened.add(("wandb_api", self.settings.wandb_run))
        explicit = bool(self.settings.tb_paths or self.settings.wandb_paths or self.settings.log_paths
                        or self.settings.wandb_run)
        if explicit and not self.settings.search_dirs:
            return
        self._load_job_info()
        roots = list(self.settings.search_dirs) or ([self._work_dir] if self._work_dir else [])
        known = {(s.kind, s.describe()) for s in self.sources}
        for root in roots:
            for source in discover_sources(root, stdout_path=self._stdout):
                if (source.kind, source.describe()) not in known:
                    self.sources.append(source)
                    known.add((source.kind, source.describe()))
        self.sources.sort(key=lambda s: PRIORITY.get(s.kind, 9))

    def read(self) -> int:
        """Read every source; return the number of new points of the active one."""
        from guarded_sbatch.judge.history import MetricHistory

        self.read_error = ""
        self.errors = {}
        try:
            self._ensure_sources()
        except (GuardedError, OSError) as exc:
            self.read_error = str(exc)
        before = self._active()
        added: dict[int, int] = {}
        for source in self.sources:
            history = self.histories.setdefault(id(source), MetricHistory())
            had_data = bool(len(history))
            failures: list[Exception] = []
            # a backlog (a restarted watcher, a long run) is read in bounded batches and kept as arrays
            added[id(source)] = history.add_batches(_batches(source, failures),
                                                    newest_by_wall_time=source.kind == "tensorboard")
            if failures:
                self.read_error = self.errors[id(source)] = f"{source.describe()}: {failures[0]}"
                continue
            missing = _unreachable_path(source, had_data=had_data)
            if missing:  # readers skip a vanished folder silently; the judge must know it is blind
                self.read_error = self.errors[id(source)] = f"{source.describe()}: {missing}"
        active = self._active()
        if active is None:
            return 0
        return added.get(id(active), 0) if active is before else len(self.histories[id(active)])

    def _active(self) -> "MetricSource | None":
        """The highest-priority source that has produced points."""
        for source in self.sources:
            history = self.histories.get(id(source))
            if history is not None and len(history):
                return source
        return None

    @property
    def active_error(self) -> str:
        """Why the judged source could not be read at the last poll ("" when it could)."""
        active = self._active()
        return self.errors.get(id(active), "") if active is not None else ""

    @property
    def active_kind(self) -> str | None:
        active = self._active()
        return active.kind if active is not None else None

    def history(self) -> "MetricHistory":
        from guarded_sbatch.judge.history import MetricHistory

        active = self._active()
        return self.histories[id(active)] if active is not None else MetricHistory()

    def describe(self) -> str:
        source = self._active()
        if source is None:
            return "no metrics found yet"
        run_label = getattr(source, "run_label", None)  # W&B: entity/project/run id
        return run_label() if callable(run_label) else source.describe()

    def files_inspected(self) -> list[str]:
        files: list[str] = []
        for source in self.sources:
            try:
                files.extend(source.files_inspected())
            except (GuardedError, OSError):
                continue
        return files

    def stdout_path(self) -> Path | None:
        if self._stdout is not None:
            return self._stdout
        return self.settings.log_paths[0] if self.settings.log_paths else None

    def stdout_grew(self) -> bool:
        path = self.stdout_path()
        if path is None:
            return False
        try:
            size = os.stat(path).st_size
        except OSError:
            return False
        grew = size != self._stdout_size
        self._stdout_size = size
        return grew

    def wandb_run_info(self) -> dict[str, str] | None:
        """run_path (entity/project/id) and run_dir of the W&B run being judged, once its log says."""
        source = self._active()
        run = getattr(source, "run", None)
        if source is None or source.kind != "wandb" or not getattr(run, "run_id", ""):
            return None
        path_parts = [p for p in (run.entity, run.project, run.run_id) if p]
        log_path = getattr(source, "log_path", None)
        return {"run_path": "/".join(path_parts), "run_dir": str(Path(log_path).resolve().parent) if log_path else ""}


_BATCH_POINTS = 100_000


def _batches(source: "MetricSource", failures: list[Exception]) -> "Iterator[Any]":
    """The source's new points, in batches where the reader can stop early (TensorBoard); a read
    error ends the batches and is put in failures (what was read before it is kept)."""
    batched = source.kind == "tensorboard"
    while True:
        try:
            # TensorBoard: numpy columns, no object per point
            points = source.read_columns(max_points=_BATCH_POINTS) if batched else source.read_new()  # type: ignore[attr-defined]
        except (GuardedError, OSError) as exc:
            failures.append(exc)
            return
        if not points:
            return
        yield points
        if not batched:
            return


def _unreachable_path(source: "MetricSource", *, had_data: bool) -> str:
    """Why a file-based source's path cannot be read now ("" when it can, or it has no path).
    A path not there yet is normal before the trainer's first write; gone after data came, it is not."""
    path = getattr(source, "path", None)
    if not isinstance(path, Path):
        return ""
    if not os.path.lexists(path):
        return "path not found (moved or deleted?)" if had_data else ""
    mode = os.R_OK | (os.X_OK if path.is_dir() else 0)
    if not os.access(path, mode):
        return "permission denied"
    return ""
