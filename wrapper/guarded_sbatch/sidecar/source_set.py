"""The sidecar's view of a run's metric sources: explicit paths or discovery, one history per
source, and the highest-priority source that has data is the one judged."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.core.points import sanitize_points
from guarded_sbatch.sources.tensorboard import TensorBoardSource
from guarded_sbatch.sources.discovery import discover_owned, fresh_files
from guarded_sbatch.sources.registry import open_source, priority
from guarded_sbatch.core.run_sources import MLFLOW_TAG
from guarded_sbatch.sources import discovery
from guarded_sbatch.sources.mlflow import MlflowSource
from guarded_sbatch.sources.textlog import TextLogSource
from guarded_sbatch.sources.wandb_log import WandbLogSource
from guarded_sbatch.core.registry import list_runs
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.sidecar.crash_confirm import CrashConfirmation
from guarded_sbatch.sources.wandb_api import WandbApiSource
from guarded_sbatch.sources.command_log import CommandLogSource

if TYPE_CHECKING:
    from guarded_sbatch.core.run_sources import RunSources
    from collections.abc import Iterator
    from guarded_sbatch.judge.history import MetricHistory
    from guarded_sbatch.scheduler.base import Scheduler
    from guarded_sbatch.sidecar.settings import SidecarSettings
    from guarded_sbatch.sources.base import MetricSource


class SourceSet:
    def __init__(self, settings: SidecarSettings, scheduler: Scheduler | None, *, live: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        """`live`: a running job is being watched, so a printed crash is confirmed by silence
        (sidecar/crash_confirm.py); a one-shot read judges the files as they stand."""
        self.settings = settings
        self.crashes = CrashConfirmation(live=live, clock=clock)
        self.scheduler = scheduler
        self.sources: list[MetricSource] = []
        self.histories: dict[int, MetricHistory] = {}  # by id(source): the list is re-sorted
        self.read_error = ""
        self.hard_error = ""
        self.errors: dict[int, str] = {}  # by id(source): why it could not be read at the last poll
        self._stdout: Path | None = None
        self._work_dir: Path | None = None
        self._stdout_size = -1
        self._job_info_loaded = False
        self._opened: set[tuple[str, str]] = set()
        self.notes: list[str] = []  # points dropped or clamped on the way in (steps outside int64, ...)
        self._job_start: float | None = None
        self.ownership_note = ""  # candidates seen but not attributable to this run

    def _load_job_info(self) -> None:
        if self._job_info_loaded or self.scheduler is None or self.settings.job_id is None:
            return
        try:
            info = self.scheduler.info(self.settings.job_id)
        except GuardedError:
            return  # try again next poll
        self._job_info_loaded = True
        self._stdout = Path(info.stdout_path) if info.stdout_path and "%" not in info.stdout_path else None
        self._work_dir = Path(info.work_dir) if info.work_dir else None
        self._job_start = info.start_time

    def _add(self, source: MetricSource) -> None:
        key = (source.kind, source.describe())
        if key not in self._opened:
            self.sources.append(source)
            self._opened.add(key)

    def _ensure_sources(self) -> None:

        identity = self.settings.identity
        accept = fresh_files(identity.since) if identity is not None else None
        # explicit paths may not exist yet (the trainer creates them): retried at every poll
        for kind, paths in (("wandb", self.settings.wandb_paths), ("tensorboard", self.settings.tb_paths),
                            ("textlog", self.settings.log_paths), *self.settings.other_sources.items()):
            for path in paths:
                if (kind, str(path)) not in self._opened:
                    self.sources.append(_open_tensorboard(path, accept) if kind == "tensorboard" else open_source(kind, path))
                    self._opened.add((kind, str(path)))
        if self.settings.wandb_run and ("wandb_api", self.settings.wandb_run) not in self._opened:

            self.sources.append(WandbApiSource(self.settings.wandb_run))
            self._opened.add(("wandb_api", self.settings.wandb_run))
        for index, command in enumerate(self.settings.log_commands):
            if ("command", command) not in self._opened:

                spool = self.settings.state_file.parent / f"command-log-{index}.log"
                self.sources.append(CommandLogSource(command, spool, timeout_s=self.settings.log_command_timeout_s))
                self._opened.add(("command", command))
        self.ownership_note = ""
        if identity is not None:
            self._ensure_own_sources(identity)
            self.sources.sort(key=lambda s: priority(s.kind))
            return
        explicit = bool(self.settings.tb_paths or self.settings.wandb_paths or self.settings.log_paths
                        or any(self.settings.other_sources.values())
                        or self.settings.wandb_run or self.settings.log_commands)
        if explicit and not self.settings.search_dirs:
            self.sources.sort(key=lambda s: priority(s.kind))  # `--log` and `--csv` given: the CSV outranks the log
            return
        self._load_job_info()
        roots = list(self.settings.search_dirs) or ([self._work_dir] if self._work_dir else [])
        # a job's own files are those written since it started; a folder given by hand is read as it is
        since = self._job_start if self.settings.job_id is not None and not self.settings.search_dirs else None
        for root in roots:
            found = discover_owned(root, since=since, claimed=self._claimed_by_others() if since else ())
            for source in found.sources:
                self._add(source)
            self.ownership_note = found.note()
        if self._stdout is not None and self._stdout.is_file():

            self._add(TextLogSource(self._stdout))
        self.sources.sort(key=lambda s: priority(s.kind))

    def _ensure_own_sources(self, identity: RunSources) -> None:
        """A guarded run: exactly the sources its record names; discovery only where the record is silent,
        and then only files written since the run started that no other guarded run claims."""

        accept = discovery.fresh_files(identity.since)
        for path in identity.tb_paths:
            self._add(_open_tensorboard(Path(path), accept))
        if identity.wandb_run_id:
            logs = discovery.own_wandb_logs(identity.wandb_dirs, identity.wandb_run_id)
            if logs:  # the newest first: after a requeue the run goes on in a new folder
                self._add(WandbLogSource(logs[-1]))
                self.sources.sort(key=lambda s: -discovery.modified_at(Path(s.describe())) if s.kind == "wandb" else 0)
        if (identity.mlflow_tag or identity.mlflow_run_id) and not any(s.kind == "mlflow" for s in self.sources):
            for store in discovery.mlflow_stores(identity.mlflow_uri, identity.workdir):
                if store.exists():
                    run_id = identity.mlflow_run_id or discovery.mlflow_tagged_run(store, MLFLOW_TAG, identity.mlflow_tag)
                    if run_id:
                        self._add(MlflowSource(store, run_id))
        for log in self._own_logs(identity):
            self._add(TextLogSource(log))
        if not identity.tb_paths and not self.settings.tb_paths:
            found = discovery.discover_owned(identity.workdir, since=identity.since, claimed=self._claimed_by_others(),
                                             include_wandb=not identity.wandb_run_id)
            for source in found.sources:
                if source.kind != "mlflow":
                    self._add(source)
            self.ownership_note = found.note()
            return
        # the run's own folders are known: what else it writes there (a Lightning CSVLogger's metrics.csv), looked
        # for until a source that outranks the log has data
        judged = self._active()
        if judged is not None and priority(judged.kind) <= priority("csv"):
            return
        notes = []
        others = self._claimed_by_others()
        for folder in dict.fromkeys([*identity.tb_paths, *identity.output_dirs]):
            found = discovery.discover_owned(folder, since=identity.since, claimed=discovery.claims_below(folder, others),
                                             kinds=("csv",))
            for source in found.sources:
                self._add(source)
            notes.append(found.note())
        self.ownership_note = "; ".join(note for note in notes if note)

    def _own_logs(self, identity: RunSources) -> list[Path]:
        """The job's stdout and stderr files: as the scheduler names them, else as recorded; a %N (the node,
        known once the job runs) matches the one such file written since the run started."""
        self._load_job_info()
        logs: list[Path] = [self._stdout] if self._stdout is not None else []
        for pattern in (identity.stdout, identity.stderr):
            if not pattern:
                continue
            if "%N" not in pattern:
                path = Path(pattern)
            else:
                matches = [p for p in Path(pattern).parent.glob(Path(pattern).name.replace("%N", "*"))
                           if p.is_file() and p.stat().st_mtime >= identity.since]
                if len(matches) != 1:
                    continue
                path = matches[0]
            if path not in logs and path.is_file():
                logs.append(path)
        return logs

    def _claimed_by_others(self) -> list[str]:
        """Folders other guarded runs call their own (theirs even when written since this run started)."""

        claimed: list[str] = []
        for record in list_runs():
            if record.job_id == self.settings.job_id:
                continue
            claimed.extend(record.tb_paths)
            claimed.extend(record.wandb_paths)
            sources = record.sources or {}
            claimed.extend(sources.get("tb_paths") or [])
            claimed.extend(sources.get("output_dirs") or [])
        return claimed

    def read(self) -> int:
        """Read every source; return the number of new points of the active one."""

        self.read_error = ""
        self.hard_error = ""  # a source that is there but cannot be read (a FIFO, garbage): no start-up grace
        self.errors = {}
        try:
            self._ensure_sources()
        except Exception as exc:  # noqa: BLE001 - discovery failing must leave the sidecar running
            self.read_error = _one_line(exc)
        before = self._active()
        added: dict[int, int] = {}
        for source in self.sources:
            history = self.histories.setdefault(id(source), MetricHistory())
            had_data = bool(len(history))
            failures: list[Exception] = []
            try:
                # a backlog (a restarted watcher, a long run) is read in bounded batches and kept as arrays
                added[id(source)] = history.add_batches(_batches(source, failures, self),
                                                        newest_by_wall_time=source.kind == "tensorboard")
            except Exception as exc:  # noqa: BLE001 - a value the history cannot hold: name it, go on
                failures.append(exc)
                added[id(source)] = 0
            if failures:
                self.read_error = self.errors[id(source)] = _one_line(failures[0], getattr(source, "describe", None))
                if not getattr(failures[0], "missing", False):
                    self.hard_error = self.read_error
                continue
            missing = _unreachable_path(source, had_data=had_data)
            if missing:  # readers skip a vanished folder silently; the judge must know it is blind
                self.read_error = self.errors[id(source)] = f"{source.describe()}: {missing}"
        active = self._active()
        if active is not None:
            self.crashes.note_poll(self._log_histories(), added.get(id(active), 0) if active is before else 0)
        if active is None:
            if self.ownership_note and not self.read_error:  # WAIT, naming what was seen but not read
                self.read_error = f"found metrics that may not be this run's: {self.ownership_note}"
            return 0
        return added.get(id(active), 0) if active is before else len(self.histories[id(active)])

    def _log_histories(self) -> list[tuple[MetricSource, MetricHistory]]:
        """The sources that read what the job printed, with their histories."""
        return [(source, self.histories[id(source)]) for source in self.sources
                if source.kind in _LOG_KINDS and id(source) in self.histories]

    def _active(self) -> MetricSource | None:
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

    def history(self) -> MetricHistory:
        """The judged source's history, with the crashes the job printed in it (whichever source is judged)."""
        active = self._active()
        if active is None:
            return MetricHistory()
        judged = self.histories[id(active)]
        self.crashes.settle(self._log_histories(), judged)
        return judged

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
        if self.settings.log_paths:
            return self.settings.log_paths[0]
        spools = [getattr(s, "spool_path") for s in self.sources if hasattr(s, "spool_path")]
        return spools[0] if spools else None  # a log read through a command: our copy of what it printed

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
        if source is None or run is None or source.kind != "wandb" or not getattr(run, "run_id", ""):
            return None
        path_parts = [p for p in (run.entity, run.project, run.run_id) if p]
        log_path = getattr(source, "log_path", None)
        return {"run_path": "/".join(path_parts), "run_dir": str(Path(log_path).resolve().parent) if log_path else ""}


def _one_line(exc: BaseException, describe: object = None) -> str:
    """`source: error` in one line, whatever the error (a message with newlines is folded)."""
    where = ""
    if callable(describe):
        try:
            where = f"{describe()}: "
        except Exception:  # noqa: BLE001
            where = ""
    text = " ".join((str(exc) if isinstance(exc, GuardedError) else f"{type(exc).__name__}: {exc}").split())
    if where and text.startswith(where):
        where = ""  # the reader named itself already
    return (where + text)[:500]


def _open_tensorboard(path: Path, accept: Callable[[Path], bool] | None) -> MetricSource:

    return TensorBoardSource(path, accept=accept)


_BATCH_POINTS = 100_000
_LOG_KINDS = ("textlog",)  # sources that read what the job printed (a file or a log command)


def _batches(source: "MetricSource", failures: list[Exception], owner: "SourceSet") -> "Iterator[Any]":
    """The source's new points, in batches where the reader can stop early (TensorBoard); a read
    error ends the batches and is put in failures (what was read before it is kept). Point lists are
    sanitised on the way in (steps outside ±2**53 dropped, values beyond float range made ±inf)."""
    batched = source.kind == "tensorboard" and hasattr(source, "read_columns")
    while True:
        try:
            # TensorBoard: numpy columns, no object per point
            points = source.read_columns(max_points=_BATCH_POINTS) if batched else source.read_new()  # type: ignore[attr-defined]
            notes: list[str] = []
            if not batched and not getattr(source, "points_sanitized", False):
                points, notes = sanitize_points(points)
        except Exception as exc:  # noqa: BLE001 - one source's failure is a WAIT, never a crash
            failures.append(exc)
            return
        notes = [*getattr(source, "sanitize_notes", []), *notes]  # the reader's own sanitising, then ours
        if notes:
            owner.notes = [*owner.notes, *notes][-20:]
            if getattr(source, "sanitize_notes", None):
                source.sanitize_notes = []  # type: ignore[attr-defined]
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
