"""The sidecar loop under faults, without Slurm: a fake clock and sleep drive Sidecar; the job is a
real local job (LocalScheduler), the metrics come from tensorboard's own record writer, and the
faults are real (a folder moved away, a notes path under a file, the scheduler's folder gone)."""

from __future__ import annotations

import io
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from source_writers import tb_event, write_tb_events
from guarded_sbatch.scheduler.interface import JobState, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.sidecar.loop import Sidecar
from guarded_sbatch.sources.run_sources import specs_from_flags
from guarded_sbatch.core.config import SidecarJobSettings
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.state import SidecarState

FAST_S, FULL_S = 60.0, 1800.0
BASE = 1_796_000_000.0  # the fake clock starts here (a date in 2026)


class Killed(Exception):
    """Raised from the fake sleep to end a sidecar process the way a requeue does (no clean exit)."""


class Run:
    """A real local job, a TensorBoard folder written by the real writer, and a fake clock."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.jobs_root = tmp_path / "jobs"
        self.scheduler = LocalScheduler(self.jobs_root)
        script = tmp_path / "job.sh"
        script.write_text("#!/bin/bash\nexec sleep 600\n", encoding="utf-8")
        self.job_id = self.scheduler.submit(SubmitRequest(script=script, workdir=tmp_path))
        deadline = time.monotonic() + 30
        while self.scheduler.state(self.job_id) is not JobState.RUNNING:
            assert time.monotonic() < deadline, "the local job did not start"
            time.sleep(0.1)
        self.tb = tmp_path / "tb"
        self.step = 0
        self.event_file = write_tb_events(self.tb, self._events(20, 1.0))
        # a running trainer keeps its event file open: writes follow the file if its folder is moved
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._handle = open(self.event_file, "ab")
        self._writer = RecordWriter(self._handle)
        self.now = BASE
        self.hooks: dict[float, Callable[[], None]] = {}  # fake time -> what happens then
        self.nan_written_at: float | None = None
        self.kill_at: float | None = None

    def _events(self, count: int, value: float | None) -> list:  # type: ignore[type-arg]
        events = []
        for _ in range(count):
            self.step += 1
            loss = math.nan if value is None else value / math.sqrt(self.step)
            events.append(tb_event(self.step, "train/loss", loss, wall_time=1.7e9 + self.step))
        return events

    def train(self, count: int = 10) -> None:
        """Healthy points, or non-finite ones once the run has diverged (it stays broken)."""
        self._write(self._events(count, None if self.nan_written_at else 1.0))

    def write_nan(self) -> None:
        self._write(self._events(4, None))
        self.nan_written_at = self.now

    def _write(self, events: list) -> None:  # type: ignore[type-arg]
        for event in events:
            self._writer.write(event.SerializeToString())
        self._writer.flush()

    def settings(self, **overrides: object) -> WatchPlan:
        values: dict[str, object] = dict(
            run_name="synthetic-tanh-mlp-bs64-lr5e-2", job_id=self.job_id, state_file=self.tmp / "state.json",
            evidence_dir=self.tmp / "evidence", sources=specs_from_flags({"tensorboard": [self.tb]}),
            sidecar=SidecarJobSettings(fast_interval_s=FAST_S, full_interval_s=FULL_S, job_poll_s=300.0),
        )
        values.update(overrides)
        return WatchPlan(**values)  # type: ignore[arg-type]

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        start, self.now = self.now, self.now + seconds
        self.train()
        for at in sorted(self.hooks):
            if start < at <= self.now:
                self.hooks[at]()
        if self.kill_at is not None and self.now >= self.kill_at:
            self.kill_at = None
            raise Killed()
        assert self.now - BASE < 4 * 3600, "the sidecar never ended"

    def sidecar(self, out: io.StringIO, **overrides: object) -> Sidecar:
        return Sidecar(self.settings(**overrides), self.scheduler, out, clock=self.clock, sleep=self.sleep)

    def at(self, offset_s: float, action: Callable[[], None]) -> None:
        self.hooks[BASE + offset_s] = action

    def cleanup(self) -> None:
        self._handle.close()
        LocalScheduler(self.jobs_root).cancel(self.job_id)


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    # a short folder: the local supervisor's paths stay readable in failure messages
    handle = Run(tmp_path)
    yield handle
    handle.cleanup()


def reports(output: str) -> list[str]:
    return [block for block in output.split("## Training Check")[1:]]


def decision_of(report: str) -> str:
    return next(line.split(": ", 1)[1] for line in report.splitlines() if line.startswith("- Decision:"))


def test_nan_between_full_reports_stops_at_the_next_fast_poll(run: Run) -> None:
    run.at(150, run.write_nan)  # between the polls at +120 s and +180 s; the next full report is due at +1800 s
    out = io.StringIO()
    matplotlib_before = "matplotlib" in sys.modules
    assert run.sidecar(out).run() == 0
    output = out.getvalue()
    assert run.nan_written_at is not None
    assert run.now - run.nan_written_at <= FAST_S  # the fast poll, not the full report, caught it
    assert run.scheduler.state(run.job_id) is JobState.CANCELLED
    blocks = reports(output)
    assert [decision_of(b) for b in blocks] == ["CONTINUE", "STOP"]
    assert output.count("FINAL_SUMMARY") == 1 and "non_finite_loss" in output
    state = SidecarState.load(run.tmp / "state.json")
    assert state.finished and state.checks == 4 and state.last_decision == "STOP"
    assert (run.tmp / "evidence" / "metrics.png").stat().st_size > 1000
    assert matplotlib_before or "matplotlib" not in sys.modules  # the plot was drawn in a child process
    assert state.peak_rss_mb > 0 and state.cpu_seconds > 0 and "sidecar: resources: peak RSS" in output


def test_a_stop_without_the_evidence_plot_keeps_the_data_and_draws_nothing(run: Run) -> None:
    """`sidecar.evidence_plot = false`: the same bundle less metrics.png, and no plotting process."""
    run.at(150, run.write_nan)
    out = io.StringIO()
    settings = SidecarJobSettings(fast_interval_s=FAST_S, full_interval_s=FULL_S, job_poll_s=300.0, evidence_plot=False)
    assert run.sidecar(out, sidecar=settings).run() == 0
    assert run.scheduler.state(run.job_id) is JobState.CANCELLED
    evidence = json.loads((run.tmp / "evidence" / "evidence.json").read_text())
    assert evidence["verdict"]["decision"] == "STOP" and evidence["plot"] is None and evidence["plot_error"] is None
    assert "train/loss" in evidence["recent_metrics"]  # what `show --png` draws from later
    assert sorted(p.name for p in (run.tmp / "evidence").iterdir()) == ["evidence.json"]


def test_source_moved_away_waits_with_the_reason_then_carries_on(run: Run) -> None:
    away = run.tmp / "tb-away"
    run.at(130, lambda: run.tb.rename(away))
    run.at(250, lambda: away.rename(run.tb))
    run.at(400, run.write_nan)
    out = io.StringIO()
    assert run.sidecar(out).run() == 0
    blocks = reports(out.getvalue())
    assert [decision_of(b) for b in blocks] == ["CONTINUE", "WAIT", "CONTINUE", "STOP"]
    waiting = blocks[1]
    assert "source_unreadable" in waiting and "path not found" in waiting and str(run.tb) in waiting
    assert "non_finite_loss" in blocks[3]
    assert run.now - BASE == 420  # stopped at the first poll after the NaN, not before
    assert run.scheduler.state(run.job_id) is JobState.CANCELLED


def test_unwritable_notes_still_cancel_and_the_failure_is_in_the_final_summary(run: Run) -> None:
    blocker = run.tmp / "not-a-folder"
    blocker.write_text("a file where the notes folder should be\n", encoding="utf-8")
    run.at(90, run.write_nan)
    out = io.StringIO()
    assert run.sidecar(out, notes_path=blocker / "NOTES.md").run() == 0
    output = out.getvalue()
    assert run.scheduler.state(run.job_id) is JobState.CANCELLED
    summary = output[output.index("FINAL_SUMMARY"):]
    # the alert and FINAL_SUMMARY go out first (a note is a file others may lock); the note's fate follows it
    note_line = next(line for line in summary.splitlines() if line.startswith("- Project note:"))
    assert "written after this summary" in note_line
    after = next(line for line in summary.splitlines() if line.startswith("sidecar: project note:"))
    assert "FAILED" in after and "cannot write project note" in after and str(blocker) in after
    assert f"job {run.job_id} cancelled" in summary


def test_a_killed_sidecar_resumes_from_its_state_file(run: Run) -> None:
    run.kill_at = BASE + 200
    first = io.StringIO()
    with pytest.raises(Killed):
        run.sidecar(first).run()
    before = SidecarState.load(run.tmp / "state.json")
    assert before.checks == 4 and not before.finished and before.restarts == 0

    run.at(330, run.write_nan)
    second = io.StringIO()
    assert run.sidecar(second).run() == 0
    output = second.getvalue()
    assert output.startswith(f"sidecar: resuming (restart 1) after {before.checks} checks")
    # the healthy verdict was reported by the first process: the second one reports only the STOP
    assert [decision_of(b) for b in reports(output)] == ["STOP"]
    assert output.count("FINAL_SUMMARY") == 1
    after = SidecarState.load(run.tmp / "state.json")
    assert after.restarts == 1 and after.checks > before.checks and after.finished
    assert after.started_at == before.started_at  # the same run, not a new one

    third = io.StringIO()  # requeued once more after the end: nothing to do, no second FINAL_SUMMARY
    assert run.sidecar(third).run() == 0
    assert "already finished" in third.getvalue() and "FINAL_SUMMARY" not in third.getvalue()


def test_scheduler_unreachable_is_never_a_reason_to_stop_or_end(run: Run) -> None:
    # the sidecar asks through a link to the jobs folder; removing the link makes every question
    # fail (as a down controller does) while the job itself keeps running
    link = run.tmp / "jobs-link"
    link.symlink_to(run.jobs_root)
    run.scheduler = LocalScheduler(link)
    run.at(100, link.unlink)
    run.at(300, lambda: link.symlink_to(run.jobs_root))

    def end_job() -> None:
        LocalScheduler(run.jobs_root).cancel(run.job_id)
        deadline = time.monotonic() + 30
        while not LocalScheduler(run.jobs_root).state(run.job_id).is_terminal:
            assert time.monotonic() < deadline
            time.sleep(0.1)

    run.at(400, end_job)
    out = io.StringIO()
    assert run.sidecar(out).run() == 0
    output = out.getvalue()
    assert "could not tell the state of job" in output and "answers again" in output
    assert "Decision: STOP" not in output and "FINAL_SUMMARY" not in output
    assert run.now - BASE == 420  # it carried on through the outage and ended with the job
    assert f"training job {run.job_id} ended CANCELLED" in output

