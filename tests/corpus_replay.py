"""Replay a run's points as the sidecar sees them: the history grows, and a check runs every N steps."""

from __future__ import annotations

from guarded_sbatch.judge import Decision, MetricHistory, Verdict, decide
from guarded_sbatch.sources.points import MetricPoint


def replay(points: list[MetricPoint], every: int = 20) -> tuple[int | None, Verdict]:
    """First step at which a check every `every` steps says STOP (None: never), and the last verdict."""
    ordered = sorted(points, key=lambda p: p.step)
    history = MetricHistory()
    index = 0
    verdict = decide(history)
    for cut in range(every, ordered[-1].step + every, every):
        chunk = []
        while index < len(ordered) and ordered[index].step <= cut:
            chunk.append(ordered[index])
            index += 1
        history.add(chunk)
        verdict = decide(history)
        if verdict.decision is Decision.STOP:
            return cut, verdict
    return None, verdict
