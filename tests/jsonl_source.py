"""A metric source kind added the documented way: this one module, copied into the package as
`sources/kind_jsonl.py`, plus one line in the registry, `"guarded_sbatch.sources.kind_jsonl",` in
`sources/kinds.py` KIND_MODULES (tests/test_source_registry.py does exactly that on a copy of the package).
Nothing else of guarded-sbatch changes for it to be detected by the pre-flight, resolved at launch from the
run's config into its record, read by `monitor`, found under a folder, read by a guarded run's sidecar from the
run's record, shown by `show`, and deleted by `kill`.

Like every declaration it is light: at module level it imports core and the light modules of sources/ only."""

from __future__ import annotations

import json
from pathlib import Path

from guarded_sbatch.sources.points import MetricPoint
from guarded_sbatch.sources.run_sources import SourceSpec
from guarded_sbatch.sources.kind_launch import LaunchKind, Uses
from guarded_sbatch.sources.base import SourceBase
from guarded_sbatch.sources.files import guarded_reader, read_range
from guarded_sbatch.sources.kind_base import Finds, SourceKind


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


def own_files(spec: SourceSpec) -> list[str]:
    return [spec.locator] if Path(spec.locator).is_file() else []


# the launch side: a program importing jsonl_logger or naming a ".jsonl" file uses it; the config key or
# launcher argument metrics_jsonl names the run's file
LAUNCH = LaunchKind("jsonl", uses=(Uses("{where} writes JSON-lines metrics", imports=("jsonl_logger",), code=(".jsonl",)),),
                    path_keys=("metrics_jsonl",), place="file")

KIND = SourceKind("jsonl", "--jsonl", "JSON-lines metrics", 2, "jsonl_ok", JsonLinesSource,
                  finds=Finds("JSON-lines", file=lambda name: name.endswith(".jsonl")), run_files=own_files,
                  launch=LAUNCH)
