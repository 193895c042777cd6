"""The sidecar's words: the cadence line, the start-up grace before a missing source is reported, "Next check"
as the next poll, one NaN spelling, no "healthy (healthy)", no eval trend while the eval is NaN."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np

from source_writers import tb_event, write_tb_events
from guarded_sbatch.core.fsutil import write_json_atomic
from guarded_sbatch.core.jsonnum import dumps, json_safe
from guarded_sbatch.judge.checks_eval import eval_trend
from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.verdict import Decision, Reason, Verdict
from guarded_sbatch.sidecar.loop import Sidecar
from guarded_sbatch.sidecar.report import CheckReport, one_line, summarise_metrics
from guarded_sbatch.sources.run_sources import specs_from_flags
from guarded_sbatch.core.config import SidecarJobSettings
from guarded_sbatch.sidecar.plan import WatchPlan

BASE = 1_796_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = BASE
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if len(self.sleeps) >= 40:
            raise StopIteration


def _sidecar(tmp_path: Path, tb: Path, clock: Clock) -> tuple[Sidecar, io.StringIO]:
    out = io.StringIO()
    settings = WatchPlan(run_name="r", job_id=None, state_file=tmp_path / "state.json",
                               evidence_dir=tmp_path / "evidence", sources=specs_from_flags({"tensorboard": [tb]}),
                               sidecar=SidecarJobSettings(fast_interval_s=60, full_interval_s=1800),
                               startup_grace_s=300, startup_poll_s=10)
    return Sidecar(settings, None, out, clock=clock, sleep=clock.sleep), out


def test_startup_grace_then_normal_cadence_and_next_check_is_the_next_poll(tmp_path: Path) -> None:
    clock = Clock()
    tb = tmp_path / "tb"
    sidecar, out = _sidecar(tmp_path, tb, clock)
    original_sleep = clock.sleep

    def sleep(seconds: float) -> None:
        original_sleep(seconds)
        if clock.now - BASE >= 45 and not tb.exists():  # the trainer writes its first points after ~45 s
            write_tb_events(tb, [tb_event(step, "train/loss", 2.0 / (1 + step)) for step in range(1, 40)])

    sidecar.sleep = sleep
    try:
        sidecar.run()
    except StopIteration:
        pass
    text = out.getvalue()
    first = text.splitlines()[0]
    assert first.startswith("sidecar: checks the metrics every 60 s, acts at once on a STOP, prints a full "
                            "report every 30 min") and "alerts: no alerts configured" in first
    assert "waiting for the run's first metrics" in text and "looking every 10 s for up to 300 s" in text
    assert "unreachable" not in text and "does not exist" not in text
    assert clock.sleeps[:4] == [10, 10, 10, 10] and set(clock.sleeps[6:]) == {60}
    report = text[text.index("## Training Check"):]
    next_check = next(line for line in report.splitlines() if line.startswith("- Next check:"))
    assert "(every 60 s); next full report by" in next_check


def test_a_missing_source_is_reported_after_the_grace(tmp_path: Path) -> None:
    clock = Clock()
    sidecar, out = _sidecar(tmp_path, tmp_path / "never", clock)
    try:
        sidecar.run()
    except StopIteration:
        pass
    text = out.getvalue()
    assert text.count("waiting for the run's first metrics") == 1
    assert "## Training Check" in text and "unreachable" in text  # after 300 s, said plainly


def test_reason_is_never_repeated_and_once_line_has_step_and_loss() -> None:
    verdict = Verdict(Decision.CONTINUE, Reason.HEALTHY, "healthy", last_step=120,
                      summary={"keys": {"train_loss": "loss"}, "train_loss": {"value": 0.25}})
    assert one_line(verdict, "tensorboard_ok") == "CONTINUE step 120 loss=0.25: healthy [tensorboard_ok]"
    report = CheckReport(when=BASE, data_source="tensorboard_ok", run="r", verdict=verdict, evidence=[],
                         next_check=BASE + 60, next_full_report=BASE + 1800, poll_interval_s=60).render()
    assert "- Reason: healthy\n" in report and "healthy (healthy)" not in report


def test_eval_trend_is_not_improving_while_the_eval_is_nan() -> None:
    steps = np.arange(30.0)
    values = np.array([1.0 / (i + 1) for i in range(9)] + [math.nan] * 21)
    trend = eval_trend(steps, values, "min", JudgePolicy())
    assert trend["trend"] == "not finite" and trend["non_finite_in_a_row"] == 21
    verdict = Verdict(Decision.WAIT, Reason.NON_FINITE_METRIC, "eval NaN", last_step=29,
                      summary={"keys": {}, "key_metric": {"key": "eval/loss", **trend}})
    assert "improving" not in summarise_metrics(verdict) and "not finite" in summarise_metrics(verdict)


def test_one_json_spelling_of_non_finite_numbers(tmp_path: Path) -> None:
    value = {"a": math.nan, "b": [math.inf, -math.inf, np.float64("nan"), np.float32(1.5)], "c": 1.0}
    assert json_safe(value) == {"a": "NaN", "b": ["Infinity", "-Infinity", "NaN", 1.5], "c": 1.0}
    assert json.loads(dumps(value))["b"][2] == "NaN"
    write_json_atomic(tmp_path / "x.json", value)
    text = (tmp_path / "x.json").read_text()
    assert "NaN" in text and json.loads(text)["a"] == "NaN"  # strict JSON: no bare NaN token
    json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(c)))
