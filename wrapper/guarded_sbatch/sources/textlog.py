"""Incremental reader of a training run's text log (stdout) and of HF's trainer_state.json.

Only complete lines are parsed: bytes after the last newline are kept for the next read, so a line
being written is never half-read. Carriage returns (tqdm) split records too, ANSI colours are removed,
rank prefixes and duplicate lines from several ranks fold into one point per (key, step).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from guarded_sbatch.core.points import MetricPoint, newest_per_key_step
from guarded_sbatch.sources.files import check_regular, guarded_reader, read_range, read_whole
from guarded_sbatch.sources.textlog_formats import parse_line

READ_BYTES = 16 * 1024 * 1024
MAX_PENDING_BYTES = 1024 * 1024  # a "line" longer than this (a tqdm bar without newlines) is cut at its last \r


@guarded_reader
class TextLogSource:
    """Metric points parsed from a trainer's log file, read incrementally."""

    kind = "textlog"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lines_read = 0
        self.lines_with_metrics = 0
        self._offset = 0
        self._pending = b""
        self._last_step: int | None = None  # for lines without their own step (multi-line records)
        self._ordinal = 0  # HF console dicts carry no step: the n-th training log dict is step n
        self._last_step_per_key: dict[str, int] = {}

    def describe(self) -> str:
        return str(self.path)

    def files_inspected(self) -> list[str]:
        return [str(self.path)]

    def read_new(self) -> list[MetricPoint]:
        chunk = self._read_bytes()
        if not chunk:
            return []
        data = self._pending + chunk
        cut = data.rfind(b"\n") + 1
        if cut == 0 and len(data) > MAX_PENDING_BYTES:
            cut = data.rfind(b"\r") + 1 or len(data)
        self._pending = data[cut:]
        text = data[:cut].decode("utf-8", "replace")
        points: list[MetricPoint] = []
        repeated = False
        for physical_line in text.split("\n"):
            for line in physical_line.split("\r"):
                repeated |= self._parse(line, points)
        return newest_per_key_step(points) if repeated else points

    def _read_bytes(self) -> bytes:
        try:
            size = check_regular(self.path).st_size
            if size < self._offset:  # truncated or replaced: start again
                self._offset, self._pending = 0, b""
            if size == self._offset:
                return b""
            chunk, _ = read_range(self.path, self._offset, READ_BYTES)
        except OSError:
            return b""
        self._offset += len(chunk)
        return chunk

    def _parse(self, line: str, points: list[MetricPoint]) -> bool:
        if not line.strip():
            return False
        self.lines_read += 1
        parsed = parse_line(line)
        if parsed is None:
            return False
        if parsed.ordinal:
            if not parsed.is_eval and not any(k.startswith(("eval", "test")) for k in parsed.values):
                self._ordinal += 1
            else:
                # An eval dict shares the last training dict's step; its epoch would overwrite that one.
                parsed.values.pop("epoch", None)
            step = self._ordinal
        elif parsed.step is not None:
            step = parsed.step
        elif self._last_step is not None:
            step = self._last_step
        else:
            step = 0
        if not parsed.ordinal and parsed.step is not None and not parsed.is_eval:
            self._last_step = step
        if not parsed.values:
            return False
        self.lines_with_metrics += 1
        repeated = False
        for key, value in parsed.values.items():
            previous = self._last_step_per_key.get(key)
            if previous is None or step > previous:
                self._last_step_per_key[key] = step
            else:
                repeated = True
            points.append(MetricPoint(step, parsed.wall_time, key, value))
        return repeated


@guarded_reader
class TrainerStateSource:
    """HF Trainer's trainer_state.json (`log_history`): rewritten at each checkpoint, re-read when it changes."""

    kind = "textlog"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._seen = 0
        self._signature: tuple[int, int] | None = None

    def describe(self) -> str:
        return str(self.path)

    def files_inspected(self) -> list[str]:
        return [str(self.path)]

    def read_new(self) -> list[MetricPoint]:
        try:
            stat = check_regular(self.path)
            signature = (stat.st_mtime_ns, stat.st_size)
            if signature == self._signature:
                return []
            text = read_whole(self.path).decode("utf-8", errors="replace")
        except OSError:
            return []
        try:
            # HF writes NaN/Infinity as bare words, which json accepts.
            history = json.loads(text).get("log_history", [])
        except (ValueError, AttributeError):
            return []  # being rewritten: try again next time
        if not isinstance(history, list):
            return []
        self._signature = signature
        if len(history) < self._seen:  # an older checkpoint's state: replay from the start
            self._seen = 0
        points: list[MetricPoint] = []
        for entry in history[self._seen :]:
            if not isinstance(entry, dict):
                continue
            step = entry.get("step")
            if not isinstance(step, (int, float)) or isinstance(step, bool) or not math.isfinite(step):
                continue
            for key, value in entry.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    points.append(MetricPoint(int(step), 0.0, key, float(value)))
        self._seen = len(history)
        return newest_per_key_step(points)
