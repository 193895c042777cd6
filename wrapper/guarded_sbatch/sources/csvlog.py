"""Lightning CSVLogger `metrics.csv`: one row per logging step, columns the sorted union of keys.

When a new key appears Lightning rewrites the whole file with the wider header, so the header is
re-checked on every poll: if it changed (or the file shrank), the file is read again from the top and
the already-seen (key, step) pairs are not reported twice. Other CSV logs read the same way: YOLO's `results.csv`
(names padded with spaces, one row per `epoch`, its loss printed in parts `train/box_loss`, `train/obj_loss`, ...:
their sum is `train/loss`).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from pathlib import Path

from guarded_sbatch.sources.points import MetricPoint, newest_per_key_step
from guarded_sbatch.sources.base import OneFileSource
from guarded_sbatch.sources.files import guarded_reader, read_whole
from guarded_sbatch.sources.textlog_tables import yolo_loss_sum

_STEP_COLUMNS = ("step", "global_step", "trainer/global_step", "iteration", "iter", "it", "update", "updates", "batch")
_EPOCH_COLUMN = "epoch"  # the axis of a file without a step column (YOLO's results.csv: one row per epoch)


def _row_values(header: list[str], row: list[str], axis: str | None) -> dict[str, float]:
    """A row's numbers by column (not the step axis), with YOLO's `train/loss` = the sum of its parts."""
    values: dict[str, float] = {}
    for column, cell in zip(header, row):
        if column in _STEP_COLUMNS or column == axis or not cell.strip():
            continue
        try:
            values[column] = float(cell)
        except ValueError:
            continue
    total = yolo_loss_sum(values, prefix="train/")
    if total is not None:
        values["train/loss"] = total
    return values


_CSV_NAME = re.compile(r"\s*[A-Za-z_][\w./@()%\- ]{0,80}\s*")
_CSV_CELL = re.compile(r"\s*(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|infinity)|)\s*", re.IGNORECASE)


def is_csv_text(head: bytes) -> bool:
    """Whether a file's first bytes are a CSV log: a header row of two or more names, then rows of as many
    comma-separated numbers (a CSV handed as a text log is read as CSV)."""
    lines = head.decode("utf-8", "replace").splitlines()[:3]
    if len(lines) < 2:
        return False
    header = lines[0].split(",")
    if len(header) < 2 or not all(_CSV_NAME.fullmatch(name) for name in header):
        return False
    rows = [line.split(",") for line in lines[1:] if line.strip()]
    # every row as wide as the header, most of its cells numbers (a `created_at` column is text)
    return bool(rows) and all(len(row) == len(header) and 2 * sum(bool(_CSV_CELL.fullmatch(c)) for c in row) > len(row)
                              for row in rows)


@guarded_reader
class LightningCsvSource(OneFileSource):
    kind = "csv"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._header_bytes = b""
        self._offset = 0  # bytes consumed, at a line boundary
        self._seen: dict[tuple[str, int], float] = {}
        self._rows_before = 0  # data rows consumed, for files without a step column

    def read_new(self) -> list[MetricPoint]:
        try:
            data = read_whole(self.path)
        except OSError:
            return []
        header_end = data.find(b"\n")
        if header_end < 0:
            return []
        header_bytes = data[: header_end + 1]
        if header_bytes != self._header_bytes or len(data) < self._offset:
            self._header_bytes = header_bytes  # rewritten with new columns: read again from the top
            self._offset = len(header_bytes)
            self._rows_before = 0
        body_end = data.rfind(b"\n") + 1
        if body_end <= self._offset:
            return []
        header = [name.strip() for name in next(csv.reader([header_bytes.decode("utf-8", "replace")]))]
        body = data[self._offset : body_end].decode("utf-8", "replace")
        self._offset = body_end
        try:
            step_column = next(header.index(c) for c in (*_STEP_COLUMNS, _EPOCH_COLUMN) if c in header)
        except StopIteration:
            step_column = None
        axis = header[step_column] if step_column is not None else None
        points: list[MetricPoint] = []
        rows = list(csv.reader(io.StringIO(body)))
        first_row = self._rows_before
        self._rows_before += len(rows)
        for row_number, row in enumerate(rows, start=first_row):
            step = self._step(row, step_column, row_number)
            if step is None:
                continue
            for column, value in _row_values(header, row, axis).items():
                previous = self._seen.get((column, step))
                if previous is not None and (previous == value or (math.isnan(previous) and math.isnan(value))):
                    continue  # already reported before the file was rewritten
                self._seen[(column, step)] = value
                points.append(MetricPoint(step, 0.0, column, value))
        return newest_per_key_step(points)

    @staticmethod
    def _step(row: list[str], step_column: int | None, row_number: int) -> int | None:
        if step_column is None:
            return row_number
        if step_column >= len(row):
            return None
        try:
            return int(float(row[step_column]))
        except ValueError:
            return None
