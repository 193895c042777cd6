"""Dense replay: judge a run at every logged step, as a sidecar polling after each new point would,
through the same `decide` the sidecar uses, until the first STOP (where a sidecar ends)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from guarded_sbatch.sources.points import CrashEvent, MetricPoint
from guarded_sbatch.judge import Decision, MetricHistory, Verdict, decide


@dataclass
class DenseReplay:
    polls: int = 0
    first_stop: int | None = None
    stop_verdict: Verdict | None = None
    waits: list[tuple[int, str]] = field(default_factory=list)  # (step, reason) of every WAIT poll
    last: Verdict | None = None

    def first_wait_from(self, step: int) -> int | None:
        return next((s for s, reason in self.waits if s >= step and reason != "too_early"), None)

    def waits_between(self, first: int, last: int) -> list[tuple[int, str]]:
        return [(s, r) for s, r in self.waits if first <= s <= last]


def dense_replay(points: Iterable[MetricPoint], crashes: Iterable[CrashEvent] = ()) -> DenseReplay:
    """`crashes`: the reader's crash events, in the order it handed them over; each joins the history at the poll of
    its step, as it came beside the points of that step."""
    ordered = sorted(points, key=lambda p: p.step)
    events = list(crashes)
    result = DenseReplay()
    history = MetricHistory()
    index = 0
    for step in sorted({p.step for p in ordered} | {e.step for e in events}):
        chunk = []
        while index < len(ordered) and ordered[index].step == step:
            chunk.append(ordered[index])
            index += 1
        history.add(chunk)
        for event in [e for e in events if e.step <= step]:
            history.note_crash(event)
            events.remove(event)
        verdict = decide(history)
        result.polls += 1
        result.last = verdict
        if verdict.decision is Decision.WAIT:
            result.waits.append((step, verdict.reason.value))
        elif verdict.decision is Decision.STOP:
            result.first_stop, result.stop_verdict = step, verdict
            break
    return result
