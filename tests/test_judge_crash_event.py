"""A crash is a typed event of the history (CrashEvent with its CrashState), never a metric key with float values:
read from a real text log, moved between states by the watcher, judged by its state."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from guarded_sbatch.core.points import MetricPoint
from guarded_sbatch.judge import Decision, MetricHistory, decide
from guarded_sbatch.judge.history import CrashEvent, CrashState
from guarded_sbatch.sources.textlog import TextLogSource

OOM = ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    loss.backward()\n"
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")


def _steps(first: int, last: int) -> str:
    return "".join(f"step {s} loss {2.0 / (1 + s / 100):.4f} lr 1e-03\n" for s in range(first, last + 1, 10))


def test_a_crash_in_a_log_is_an_event_not_a_key(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(_steps(10, 200) + OOM)
    source = TextLogSource(log)
    history = MetricHistory.from_points(source.read_new())
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
    history.add(source.read_new())
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
    history = MetricHistory.from_points(TextLogSource(log).read_new())
    assert len(history) == 1 and history.keys() == []
    verdict = decide(history)
    assert verdict.decision is Decision.STOP and "NCCL timeout" in verdict.message
