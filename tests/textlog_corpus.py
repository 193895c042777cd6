"""Score the text-log reader on tests/data/trainer_logs: the (step, key, value) triples each log
printed against what the reader parsed, and the crash it ends with."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.sources.points import CrashEvent, CrashState, MetricPoint
from guarded_sbatch.judge.history import MetricHistory
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


def read_with_crashes(log: Path) -> tuple[list[MetricPoint], list[CrashEvent]]:
    """Every point of the log, and the crash events the reader handed over beside them, in order."""
    source = TextLogSource(log)
    points: list[MetricPoint] = []
    crashes: list[CrashEvent] = []
    while batch := source.read_new():
        points.extend(batch)
        crashes.extend(source.take_crashes())
    crashes.extend(source.take_crashes())
    return points, crashes


def read_all(log: Path) -> list[MetricPoint]:
    return read_with_crashes(log)[0]


def read_history(log: Path) -> MetricHistory:
    """The judged history of the whole log: its points and its crash events."""
    source = TextLogSource(log)
    history = MetricHistory()
    while history.read_from(source):
        pass
    return history


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
    points, crashes = read_with_crashes(log)
    for point in points:
        got[(point.step, point.key)] = point.value
    last = crashes[-1] if crashes else None
    crash_found = last.exception if last is not None and last.state is not CrashState.DISMISSED else None
    matched = sum(1 for slot, value in wanted.items() if slot in got and _same(got[slot], value))
    wrong = [f"{slot}: want {value} got {got.get(slot)}" for slot, value in wanted.items()
             if slot not in got or not _same(got[slot], value)]
    return Score(log.stem, len(wanted), matched, len(got), expected["crash"], crash_found, wrong)
