"""The sidecar survives anything a source or the judge throws: that poll is a WAIT naming the error,
the failures are counted, the loop goes on; a FIFO or a device never blocks a read."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from guarded_sbatch.sources.base import SourceBase
from guarded_sbatch.sources.points import MetricPoint, sanitize_points
from guarded_sbatch.judge.verdict import Decision
from guarded_sbatch.sidecar import loop as loop_module
from guarded_sbatch.sidecar.loop import Sidecar
from guarded_sbatch.sidecar.one_shot import judge_once
from guarded_sbatch.sources.run_sources import specs_from_flags
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sources.base import SourceError
from guarded_sbatch.sources.files import read_range, read_whole
from guarded_sbatch.sources.textlog import TextLogSource, TrainerStateSource


def _settings(tmp_path: Path, log: Path) -> WatchPlan:
    return WatchPlan(job_id=None, run_name="t", sources=specs_from_flags({"textlog": [log]}),
                           state_file=tmp_path / "state.json", evidence_dir=tmp_path / "evidence")


class Exploding(SourceBase):
    kind = "textlog"

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def read_new(self) -> list[MetricPoint]:
        raise self.exc

    def files_inspected(self) -> list[str]:
        return []

    def describe(self) -> str:
        return "exploding"


@pytest.mark.parametrize("exc", [OverflowError("int too large"), RecursionError(), KeyError("x"), ValueError("bad"),
                                 MemoryError(), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")])
def test_a_source_throwing_anything_is_a_named_wait(exc: BaseException, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    sidecar = Sidecar(_settings(tmp_path, log), None, io.StringIO(), sleep=lambda s: None)
    sidecar.sources.sources.append(Exploding(exc))  # type: ignore[arg-type]
    sidecar.sources._opened.add(("textlog", str(log)))
    for _ in range(3):
        assert sidecar.poll_once() is None
    assert sidecar.state.last_decision == "WAIT"
    assert type(exc).__name__ in sidecar.state.last_message


def test_the_judge_throwing_is_a_counted_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "train.log"
    log.write_text("step 1 loss=1.0\nstep 2 loss=0.9\n")
    out = io.StringIO()
    sidecar = Sidecar(_settings(tmp_path, log), None, out, sleep=lambda s: None)

    def broken(*args: object, **kwargs: object) -> None:
        raise OverflowError("Python int too large to convert to C long")

    monkeypatch.setattr(loop_module, "judge_sources", broken)
    for _ in range(12):
        assert sidecar.poll_once() is None
    assert sidecar.state.poll_errors == 12 and sidecar.state.last_decision == "WAIT"
    assert "judging the metrics failed" in out.getvalue() and "OverflowError" in out.getvalue()


def test_sanitising_drops_steps_beyond_range_and_keeps_huge_values_non_finite() -> None:
    points = [MetricPoint(10**20, 0.0, "loss", 1.0), MetricPoint(5, float("nan"), "loss", 10**400),  # type: ignore[arg-type]
              MetricPoint(6, 0.0, "loss", float("nan")), MetricPoint(-(2**63), 0.0, "loss", 1.0)]
    kept, notes = sanitize_points(points)
    assert [p.step for p in kept] == [5, 6] and kept[0].value == float("inf") and kept[0].wall_time == 0.0
    assert any("step beyond" in note for note in notes)


def test_twenty_digit_step_then_nan_is_a_stop_in_monitor_once(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    lines = ["global_step=99999999999999999999 loss=1.0"]
    lines += [f"global_step={i} loss={1.0 - i / 100 if i < 40 else 'nan'}" for i in range(1, 80)]
    log.write_text("\n".join(lines) + "\n")
    verdict = judge_once(_settings(tmp_path, log)).verdict
    assert verdict.decision is Decision.STOP


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_fifos_and_devices_are_refused_without_blocking(kind: str, tmp_path: Path) -> None:
    if kind == "fifo":
        path = tmp_path / "run-x.wandb"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    for read in (lambda: read_range(path, 0), lambda: read_whole(path)):
        with pytest.raises(SourceError, match="not a regular file"):
            read()
    with pytest.raises(SourceError):
        TextLogSource(path).read_new()
    with pytest.raises(SourceError):
        TrainerStateSource(path).read_new()
    verdict = judge_once(_settings(tmp_path, path)).verdict
    assert verdict.decision is Decision.WAIT and "regular file" in verdict.message


def test_whole_file_reads_are_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from guarded_sbatch.sources import files

    monkeypatch.setattr(files.LIMITS, "max_whole_file_bytes", 1024)
    path = tmp_path / "trainer_state.json"
    path.write_text('{"log_history": [' + ",".join(['{"step": 1, "loss": 1.0}'] * 200) + "]}")
    with pytest.raises(SourceError, match="cap"):
        TrainerStateSource(path).read_new()
