"""MLflow metrics: the SQLite store (`mlflow.db`, the default since 3.7) and the older file store.

SQLite: new rows are read by rowid in short read-only transactions (`file:...?mode=ro`, busy timeout),
because a long read would block the trainer's writes. MLflow stores NaN as value 0 with is_nan=1 and
±Inf as ±DBL_MAX. File store: `mlruns/<experiment>/<run>/metrics/<key>` (keys with `/` are
subfolders), one `timestamp_ms value step` line per point.
"""

from __future__ import annotations

import math
import os
import sqlite3
from pathlib import Path

from guarded_sbatch.sources.points import MetricPoint, newest_per_key_step
from guarded_sbatch.sources.base import SourceBase
from guarded_sbatch.sources.files import check_regular, guarded_reader, read_range

_DBL_MAX = 1.7976931348623157e308
ROWS_PER_READ = 200_000
BUSY_TIMEOUT_S = 2.0


def _decode_value(value: float, is_nan: int | None) -> float:
    if is_nan:
        return math.nan
    if value >= _DBL_MAX:
        return math.inf
    if value <= -_DBL_MAX:
        return -math.inf
    return float(value)


@guarded_reader
class MlflowSource(SourceBase):
    """Points of one MLflow run (the newest one unless run_id is given), from mlflow.db or mlruns/."""

    kind = "mlflow"

    def __init__(self, path: str | os.PathLike[str], run_id: str | None = None) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self.error = ""
        self._last_rowid = 0
        self._file_offsets: dict[Path, int] = {}
        self._pending: dict[Path, bytes] = {}

    @property
    def is_sqlite(self) -> bool:
        return self.path.is_file()

    def describe(self) -> str:
        return f"{self.path} (run {self.run_id})" if self.run_id else str(self.path)

    def files_inspected(self) -> list[str]:
        return [str(self.path)] if self.is_sqlite else [str(p) for p in self._file_offsets]

    def read_new(self) -> list[MetricPoint]:
        return self._read_sqlite() if self.is_sqlite else self._read_file_store()

    # SQLite store

    def _connect(self) -> sqlite3.Connection:
        check_regular(self.path)  # SQLite's own open() would block on a FIFO
        uri = f"file:{self.path.resolve().as_posix()}?mode=ro"
        return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)

    def _read_sqlite(self) -> list[MetricPoint]:
        try:
            connection = self._connect()
        except sqlite3.Error as exc:
            self.error = f"cannot open {self.path}: {exc}"
            return []
        try:
            if self.run_id is None:
                row = connection.execute(
                    "SELECT run_uuid FROM runs WHERE lifecycle_stage != 'deleted' ORDER BY start_time DESC LIMIT 1"
                ).fetchone()
                if row is None:
                    return []
                self.run_id = row[0]
            rows = connection.execute(
                "SELECT rowid, key, value, timestamp, step, is_nan FROM metrics "
                "WHERE rowid > ? AND run_uuid = ? ORDER BY rowid LIMIT ?",
                (self._last_rowid, self.run_id, ROWS_PER_READ),
            ).fetchall()
        except sqlite3.Error as exc:  # locked past the timeout, or not (yet) an MLflow database
            self.error = f"cannot read {self.path}: {exc}"
            return []
        finally:
            connection.close()
        self.error = ""
        if rows:
            self._last_rowid = rows[-1][0]
        points = [MetricPoint(int(step), (timestamp or 0) / 1000.0, key, _decode_value(value, is_nan))
                  for _, key, value, timestamp, step, is_nan in rows]
        return newest_per_key_step(points)

    # File store

    def _run_folder(self) -> Path | None:
        if (self.path / "metrics").is_dir():
            return self.path
        candidates: list[tuple[float, Path]] = []
        for metrics in self.path.glob("*/*/metrics"):
            run = metrics.parent
            if self.run_id is not None and run.name != self.run_id:
                continue
            try:
                candidates.append(((run / "meta.yaml").stat().st_mtime if (run / "meta.yaml").exists()
                                   else run.stat().st_mtime, run))
            except OSError:
                continue
        if not candidates:
            return None
        return max(candidates)[1]

    def _read_file_store(self) -> list[MetricPoint]:
        run = self._run_folder()
        if run is None:
            return []
        self.run_id = run.name
        points: list[MetricPoint] = []
        metrics = run / "metrics"
        for metric_file in sorted(p for p in metrics.rglob("*") if p.is_file()):
            key = metric_file.relative_to(metrics).as_posix()
            for line in self._new_lines(metric_file):
                parts = line.split()
                if len(parts) < 2:
                    continue
                try:
                    timestamp_ms = float(parts[0])
                    value = float(parts[1])
                    step = int(parts[2]) if len(parts) > 2 else 0
                except ValueError:
                    continue
                points.append(MetricPoint(step, timestamp_ms / 1000.0, key, value))
        return newest_per_key_step(points)

    def _new_lines(self, path: Path) -> list[str]:
        offset = self._file_offsets.get(path, 0)
        try:
            size = check_regular(path).st_size
            if size < offset:
                offset, self._pending[path] = 0, b""
            chunk, _ = read_range(path, offset)
        except OSError:
            return []
        self._file_offsets[path] = offset + len(chunk)
        data = self._pending.get(path, b"") + chunk
        cut = data.rfind(b"\n") + 1
        self._pending[path] = data[cut:]
        return data[:cut].decode("utf-8", "replace").splitlines()
