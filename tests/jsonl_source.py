"""A metric source kind added the documented way: this one module (a reader, what it says of its files) plus
one registry line, `kinds.register(jsonl_source.KIND)` (tests/test_source_registry.py). Nothing else of
guarded-sbatch changes for it to be read by `monitor`, found under a folder, read by a guarded run's sidecar
from the run's record, shown by `show`, and deleted by `kill`."""

from __future__ import annotations

import json
from pathlib import Path

from guarded_sbatch.core.points import MetricPoint
from guarded_sbatch.core.run_sources import SourceSpec
from guarded_sbatch.sources.base import SourceBase
from guarded_sbatch.sources.files import read_range, guarded_reader
from guarded_sbatch.sources.kinds import SourceKind


@guarded_reader
class JsonLinesSource(SourceBase):
    """One JSON object per line, e.g. {"step": 10, "loss": 2.3}; a half-written last line waits for the next read."""

    kind = "jsonl"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0

    def read_new(self) -> list[MetricPoint]:
        data, _ = read_range(self.path, self.offset)  # bounded, regular files of the job's user only
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        points = []
        for line in complete.decode().splitlines():
            record = json.loads(line)
            step = int(record.pop("step"))
            points += [MetricPoint(step, 0.0, key, float(value)) for key, value in record.items()]
        return points

    def files_inspected(self) -> list[str]:
        return [str(self.path)]

    def describe(self) -> str:
        return str(self.path)


def is_metrics_file(name: str) -> bool:
    return name.endswith(".jsonl")


def own_files(spec: SourceSpec) -> list[str]:
    return [spec.locator] if Path(spec.locator).is_file() else []


KIND = SourceKind("jsonl", "--jsonl", "JSON-lines metrics", 2, "log_fallback", JsonLinesSource,
                  matches=is_metrics_file, run_files=own_files)
