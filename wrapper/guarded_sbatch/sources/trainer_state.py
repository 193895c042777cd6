"""HF Trainer's trainer_state.json (`log_history`) as a source (re-exported by sources/textlog.py)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from guarded_sbatch.sources.base import OneFileSource
from guarded_sbatch.sources.files import check_regular, guarded_reader, read_whole
from guarded_sbatch.sources.points import MetricPoint, newest_per_key_step


@guarded_reader
class TrainerStateSource(OneFileSource):
    """HF Trainer's trainer_state.json (`log_history`): rewritten at each checkpoint, re-read when it changes."""

    kind = "textlog"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._seen = 0
        self._signature: tuple[int, int] | None = None

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
