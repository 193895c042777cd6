"""A crash the job printed, while a live job is watched (sidecar/crash_confirm.py): a caught exception's
traceback in a healthy run that goes on logging never stops it; a real crash (the run falls silent) stops it
once that silence has lasted CRASH_CONFIRM_S, with a WAIT before, or at once when the job has ended. Whether
TensorBoard, Lightning's CSV or the text log itself is the judged source. Real files, a clock moved by hand."""

from __future__ import annotations

import os
from pathlib import Path

from guarded_sbatch.judge import Decision
from guarded_sbatch.sidecar.one_shot import judge_sources
from guarded_sbatch.sources.run_sources import specs_from_flags
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.crash_confirm import ALIVE_MARGIN_S, CRASH_CONFIRM_S
from guarded_sbatch.sidecar.source_set import SourceSet
from guarded_sbatch.judge.policy import RunContext
from source_writers import append_tb_events, tb_event, write_tb_events

T0 = 1_800_000_000.0
CAUGHT = ("Traceback (most recent call last):\n  File \"upload.py\", line 41, in push\n    conn.send(blob)\n"
          "ConnectionResetError: [Errno 104] Connection reset by peer\n")
OOM = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n    loss.backward()\n"
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _loss_events(first: int, last: int, wall: float) -> list:  # type: ignore[type-arg]
    return [tb_event(s, "train/loss", 2.0 / (1 + s / 50), wall_time=wall + (s - first) * 0.1) for s in range(first, last)]


def _sources(tmp_path: Path, log_text: str, **paths: object) -> tuple[SourceSet, Clock]:
    """A live watch of the job's log (written at T0) beside the given sources, on a clock moved by hand."""
    tmp_path.mkdir(exist_ok=True)
    log = tmp_path / "slurm-9.out"
    log.write_text(log_text)
    os.utime(log, (T0, T0))  # printed at T0
    clock = Clock()
    settings = WatchPlan(run_name="r", job_id=None, state_file=tmp_path / "state.json",
                               evidence_dir=tmp_path / "evidence",
                               sources=specs_from_flags({"textlog": [log], **paths}))
    return SourceSet(settings, None, clock=clock), clock


def _watch(tmp_path: Path, log_text: str) -> tuple[SourceSet, Clock, Path, Path]:
    tb = tmp_path / "runs" / "a"
    event_file = write_tb_events(tb, _loss_events(0, 300, T0 - 60))
    sources, clock = _sources(tmp_path, "starting training\n" + log_text, tensorboard=[tb])
    return sources, clock, event_file, tmp_path / "slurm-9.out"


def _decide(sources: SourceSet) -> tuple[Decision, str]:
    sources.read()
    verdict = judge_sources(sources, None, RunContext(job_live=True))
    return verdict.decision, verdict.reason.value


def test_a_caught_traceback_in_a_run_that_goes_on_logging_never_stops_it(tmp_path: Path) -> None:
    sources, clock, event_file, _ = _watch(tmp_path, CAUGHT)
    assert _decide(sources) == (Decision.WAIT, "crashed")  # printed, not confirmed: WAIT, never STOP at once
    step = 300
    while clock.now < T0 + 2 * CRASH_CONFIRM_S:  # the run goes on: points logged after the traceback
        clock.now += 30
        append_tb_events(event_file, _loss_events(step, step + 50, clock.now - 5))
        step += 50
        decision, reason = _decide(sources)
        assert decision is not Decision.STOP, reason
        if clock.now - 5 > T0 + ALIVE_MARGIN_S:
            assert (decision, reason) == (Decision.CONTINUE, "healthy")


def test_a_real_crash_waits_then_stops_when_the_judged_source_stays_silent(tmp_path: Path) -> None:
    sources, clock, event_file, _ = _watch(tmp_path, OOM)
    append_tb_events(event_file, _loss_events(300, 320, T0 - 2))  # the writer's last flush, logged before the crash
    seen: list[tuple[Decision, str]] = []
    while clock.now < T0 + CRASH_CONFIRM_S + 60:
        seen.append(_decide(sources))
        clock.now += 30
    assert seen[0] == (Decision.WAIT, "crashed")
    assert seen[-1] == (Decision.STOP, "crashed")
    assert all(d is not Decision.STOP for d, _ in seen[: int(CRASH_CONFIRM_S // 30)])


def _csv_rows(first: int, last: int) -> str:
    return "".join(f"0,{s},{2.0 / (1 + s / 50):.6f}\n" for s in range(first, last, 10))


def _watch_csv(tmp_path: Path, log_text: str) -> tuple[SourceSet, Clock, Path]:
    """Lightning's CSVLogger: rows without wall times, so life shows only as new rows arriving."""
    csv = tmp_path / "lightning_logs" / "version_0" / "metrics.csv"
    csv.parent.mkdir(parents=True)
    csv.write_text("epoch,step,train_loss\n" + _csv_rows(0, 300))
    sources, clock = _sources(tmp_path, "starting training\n" + log_text, csv=[csv])
    return sources, clock, csv


def test_a_source_without_wall_times_shows_life_by_new_rows(tmp_path: Path) -> None:
    sources, clock, csv = _watch_csv(tmp_path, CAUGHT)
    step = 300
    decisions = []
    while clock.now < T0 + 2 * CRASH_CONFIRM_S:
        decisions.append(_decide(sources))
        clock.now += 30
        with open(csv, "a") as handle:
            handle.write(_csv_rows(step, step + 50))
        step += 50
    assert decisions[0] == (Decision.WAIT, "crashed")
    assert all(d is not Decision.STOP for d, _ in decisions), decisions
    assert decisions[-1] == (Decision.CONTINUE, "healthy")


def test_a_silent_source_without_wall_times_stops_after_the_crash(tmp_path: Path) -> None:
    sources, clock, csv = _watch_csv(tmp_path, OOM)
    with open(csv, "a") as handle:  # one last flush at exit
        handle.write(_csv_rows(300, 320))
    decisions = []
    while clock.now < T0 + CRASH_CONFIRM_S + 60:
        decisions.append(_decide(sources))
        clock.now += 30
    assert decisions[0] == (Decision.WAIT, "crashed") and decisions[-1] == (Decision.STOP, "crashed"), decisions


def _watch_log(tmp_path: Path, text: str) -> tuple[SourceSet, Clock, Path]:
    sources, clock = _sources(tmp_path, text)
    return sources, clock, tmp_path / "slurm-9.out"


def _lines(first: int, last: int) -> str:
    return "".join(f"step {s} loss {2.0 / (1 + s / 50):.5f} lr 1e-3\n" for s in range(first, last, 10))


def test_a_caught_traceback_in_a_text_log_waits_and_the_next_training_line_clears_it(tmp_path: Path) -> None:
    sources, clock, log = _watch_log(tmp_path, _lines(0, 300) + CAUGHT)
    assert _decide(sources) == (Decision.WAIT, "crashed")  # a poll between the traceback and the next line
    clock.now += 30
    with open(log, "a") as handle:
        handle.write(_lines(300, 400))
    assert _decide(sources) == (Decision.CONTINUE, "healthy")
    clock.now += CRASH_CONFIRM_S
    assert _decide(sources) == (Decision.CONTINUE, "healthy")


def test_a_real_crash_in_a_text_log_stops_after_the_silence_or_at_once_when_the_job_ended(tmp_path: Path) -> None:
    sources, clock, _ = _watch_log(tmp_path, _lines(0, 300) + OOM)
    assert _decide(sources) == (Decision.WAIT, "crashed")
    clock.now += CRASH_CONFIRM_S / 2
    assert _decide(sources) == (Decision.WAIT, "crashed")
    clock.now += CRASH_CONFIRM_S / 2
    assert _decide(sources) == (Decision.STOP, "crashed")
    ended, _, _ = _watch_log(tmp_path / "ended", _lines(0, 300) + OOM)
    ended.crashes.job_over = True
    assert _decide(ended) == (Decision.STOP, "crashed")


def test_a_run_that_logs_every_five_minutes_gets_three_of_its_intervals(tmp_path: Path) -> None:
    """A large run logs a point every 300 s: 4 minutes of silence after a caught traceback is its normal rhythm."""
    tb = tmp_path / "runs" / "big"
    events = [tb_event(s, "train/loss", 2.0 / (1 + s / 50), wall_time=T0 - 3000 + 300 * i) for i, s in
              enumerate(range(0, 100, 10))]
    event_file = write_tb_events(tb, events)
    sources, clock = _sources(tmp_path, "starting training\n" + CAUGHT, tensorboard=[tb])
    for _ in range(16):  # 8 minutes of polls, no new point: beyond CRASH_CONFIRM_S, within 3 intervals
        assert _decide(sources) == (Decision.WAIT, "crashed")
        clock.now += 30
    append_tb_events(event_file, [tb_event(100, "train/loss", 0.6, wall_time=T0 + 470)])
    assert _decide(sources) == (Decision.CONTINUE, "healthy")
