"""Score the text-log reader on tests/data/trainer_logs: the (step, key, value) triples each log
printed against what the reader parsed, and the crash it ends with."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.core.points import MetricPoint, split_crash_key
from guarded_sbatch.sources.textlog import TextLogSource

CORPUS = Path(__file__).parent / "data" / "trainer_logs"


@dataclass
class Score:
    name: str
    expected: int
    matched: int
    parsed: int
    crash_expected: str | None
    crash_found: str | None
    wrong: list[str]

    @property
    def recall(self) -> float:
        return self.matched / self.expected if self.expected else 1.0

    @property
    def precision(self) -> float:
        return self.matched / self.parsed if self.parsed else 1.0


def corpus_logs() -> list[Path]:
    return sorted(CORPUS.glob("*.log"))


def expected_of(log: Path) -> dict:
    return json.loads(log.with_suffix(".expected.json").read_text())


def read_all(log: Path) -> list[MetricPoint]:
    source = TextLogSource(log)
    points: list[MetricPoint] = []
    while batch := source.read_new():
        points.extend(batch)
    return points


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def score(log: Path) -> Score:
    expected = expected_of(log)
    wanted: dict[tuple[int, str], float] = {}
    for step, key, value in expected["triples"]:  # a (step, key) printed twice: the newest counts
        wanted[(step, key)] = float(value)
    got: dict[tuple[int, str], float] = {}
    crash_found = None
    for point in read_all(log):
        crash = split_crash_key(point.key)
        if crash is not None:
            crash_found = crash[0] if point.value == 1.0 else None
            continue
        got[(point.step, point.key)] = point.value
    matched = sum(1 for slot, value in wanted.items() if slot in got and _same(got[slot], value))
    wrong = [f"{slot}: want {value} got {got.get(slot)}" for slot, value in wanted.items()
             if slot not in got or not _same(got[slot], value)]
    return Score(log.stem, len(wanted), matched, len(got), expected["crash"], crash_found, wrong)
