"""A crash is a typed event of the history (CrashEvent with its CrashState), never a metric key with float values:
read from a real text log, moved between states by the watcher, judged by its state."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from package_extras import history_read
from guarded_sbatch.sources.points import MetricPoint
from guarded_sbatch.judge import Decision, MetricHistory, decide
from guarded_sbatch.sources.points import CrashEvent, CrashState
from guarded_sbatch.sources.textlog import TextLogSource

OOM = ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    loss.backward()\n"
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")


def _steps(first: int, last: int) -> str:
    return "".join(f"step {s} loss {2.0 / (1 + s / 100):.4f} lr 1e-03\n" for s in range(first, last + 1, 10))


def test_a_crash_in_a_log_is_an_event_not_a_key(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(_steps(10, 200) + OOM)
    source = TextLogSource(log)
    history = history_read(source)
    assert history.keys() == ["loss", "lr"]  # no crash key among the metrics
    (event,) = history.crashes()
    assert event == CrashEvent(200, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                               event.evidence, CrashState.CONFIRMED)
    assert history.open_crash() == event and history.last_step == 200
    verdict = decide(history)
    assert (verdict.decision, verdict.reason.value) == (Decision.STOP, "crashed")
    assert verdict.summary["keys"]["train_loss"] == "loss"
    with open(log, "a") as handle:  # a requeued run trains again in the same log: the crash is dismissed
        handle.write(_steps(210, 400))
    history.read_from(source)
    assert [e.state for e in history.crashes()] == [CrashState.DISMISSED] and history.open_crash() is None
    assert history.crashes()[0].step == 200  # where it happened, not where training went on
    assert decide(history).decision is Decision.CONTINUE


def test_the_judge_follows_the_events_state() -> None:
    history = MetricHistory.from_points([MetricPoint(s, 0.0, "loss", 1.0 / s) for s in range(1, 50)])
    crash = CrashEvent(49, "RuntimeError: CUDA error: an illegal memory access", "RuntimeError: CUDA error: ...")
    for state, expected in ((CrashState.PRINTED, (Decision.WAIT, "crashed")),
                            (CrashState.CONFIRMED, (Decision.STOP, "crashed")),
                            (CrashState.DISMISSED, (Decision.CONTINUE, "healthy"))):
        history.put_crash(dataclasses.replace(crash, state=state))
        verdict = decide(history)
        assert (verdict.decision, verdict.reason.value) == expected, verdict.message
    assert len(history.crashes()) == 1  # one crash, three states: the same event
    interrupted = CrashEvent(49, "KeyboardInterrupt", "KeyboardInterrupt")
    history.put_crash(interrupted)
    assert decide(history).reason.value == "interrupted"
    assert history.truncated(48).crashes() == [] and history.truncated(49).open_crash() == interrupted


def test_a_log_whose_only_content_is_a_crash_is_judged(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("[rank0]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) "
                   "ran for 600000 milliseconds before timing out.\n")
    history = history_read(TextLogSource(log))
    assert len(history) == 1 and history.keys() == []
    verdict = decide(history)
    assert verdict.decision is Decision.STOP and "NCCL timeout" in verdict.message


CUT = "Traceback (most recent call last):\n"
FRAMES = '  File "train.py", line 9, in <module>\n    loss.backward()\n'


def test_a_log_cut_off_inside_a_traceback_is_a_crash(tmp_path: Path) -> None:
    """The process died while printing its traceback (killed, its node lost, the output unflushed): the log ends
    in the traceback's first line, or in its frames, with no exception line. That is a crash, not healthy."""
    from guarded_sbatch.sources.textlog_crash import CUT_TRACEBACK

    for ending in (CUT, CUT + FRAMES):
        log = tmp_path / "train.log"
        log.write_text(_steps(10, 200) + ending)
        history = history_read(TextLogSource(log))
        (event,) = history.crashes()
        assert event.exception == CUT_TRACEBACK and event.step == 200 and "Traceback" in event.evidence
        verdict = decide(history)
        assert (verdict.decision, verdict.reason.value) == (Decision.STOP, "crashed"), verdict.message


def test_a_traceback_read_in_two_pieces_is_the_exception_it_ends_in(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(_steps(10, 200) + CUT + FRAMES)
    source = TextLogSource(log)
    history = history_read(source)
    with open(log, "a") as handle:
        handle.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    history.read_from(source)
    (open_crash,) = [e for e in history.crashes() if e.state is not CrashState.DISMISSED]
    assert open_crash.exception.startswith("torch.OutOfMemoryError") and history.open_crash() == open_crash


def test_a_traceback_cut_off_by_training_output_is_no_crash(tmp_path: Path) -> None:
    """A traceback whose exception line never came, followed by ordinary lines and more training (a logger
    that printed part of a caught exception): no crash is left open."""
    log = tmp_path / "train.log"
    log.write_text(_steps(10, 200) + CUT + FRAMES + "resuming the epoch\n" + _steps(210, 400))
    history = history_read(TextLogSource(log))
    assert history.open_crash() is None and history.last_step == 400
    assert decide(history).decision is Decision.CONTINUE
