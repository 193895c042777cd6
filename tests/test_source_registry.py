"""Adding a metric source is one module (here: a class in this test) plus one registry line: the new kind
gets its own `monitor` flag, is opened, ranked and judged like the built-in ones, with no other file touched.

The diff this test stands for (docs/architecture.md, "Where a new piece goes"):

    + sources/jsonl.py                 class JsonLinesSource: read_new() -> new MetricPoints, files_inspected, describe
    + sources/registry.py (one line)   SourceKind("jsonl", "--jsonl", "JSON-lines metrics", 2, "log_fallback", JsonLinesSource)
"""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from guarded_sbatch.core.points import MetricPoint
from guarded_sbatch.sources import registry


class JsonLinesSource:
    """One JSON object per line, e.g. {"step": 10, "loss": 2.3}; a half-written last line waits for the next read."""

    kind = "jsonl"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read_new(self) -> list[MetricPoint]:
        data = self.path.read_bytes()[self.offset:]
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


@pytest.fixture()
def jsonl_kind() -> object:
    kind = registry.register(registry.SourceKind("jsonl", "--jsonl", "JSON-lines metrics", 2, "log_fallback",
                                                 JsonLinesSource))
    yield kind
    registry.KINDS.pop("jsonl")


def _monitor_once(*args: str) -> dict[str, object]:
    from guarded_sbatch.cli.monitor import run_monitor

    out = io.StringIO()
    with redirect_stdout(out):
        code = run_monitor(["--once", "--json", *args])
    payload = json.loads(out.getvalue())
    assert code == {"CONTINUE": 0, "WAIT": 10, "STOP": 11}[payload["decision"]]  # the decision is the exit code
    return payload


def test_a_source_added_through_the_registry_is_read_and_judged(tmp_path: Path, jsonl_kind: object) -> None:
    log = tmp_path / "metrics.jsonl"
    healthy = [{"step": s, "loss": 2.0 * math.exp(-s / 300) + 0.1} for s in range(0, 400, 10)]
    log.write_text("".join(json.dumps(r) + "\n" for r in healthy))
    verdict = _monitor_once("--jsonl", str(log))
    assert verdict["decision"] == "CONTINUE" and verdict["last_step"] == 390
    assert verdict["data_source"] == "log_fallback"
    with log.open("a") as handle:
        for step in range(400, 460, 10):
            handle.write(json.dumps({"step": step, "loss": "NaN"}).replace('"NaN"', "NaN") + "\n")
    verdict = _monitor_once("--jsonl", str(log))
    assert verdict["decision"] == "STOP" and verdict["reason"] == "non_finite_loss"


def test_the_registry_names_every_kind_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    assert {"wandb", "tensorboard", "mlflow", "csv", "textlog"} <= set(registry.KINDS)
    assert [k.flag for k in registry.flagged_kinds()][:2] == ["--wandb", "--tb"]
    with pytest.raises(registry.SourceError, match="unknown source kind 'parquet'"):
        registry.open_source("parquet", tmp_path)
