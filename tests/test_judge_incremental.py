"""A sidecar judges one growing history at every poll, reusing what it computed at the last one (trailing
baselines, closed spike episodes, an open episode's recovery search). Polled at every logged step of every run
of the corpus, that verdict equals the verdict on a fresh history of the same points, computed from scratch
(decision, reason, message, anomalies and summary), wherever it is compared (see FIRST_STEPS)."""

from __future__ import annotations

import sys
from itertools import groupby
from pathlib import Path

import pytest

from guarded_sbatch.sources.points import MetricPoint
from guarded_sbatch.judge import MetricHistory, decide

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "corpus"))
import generate as corpus


def _verdict_fields(verdict):  # type: ignore[no-untyped-def]
    return (verdict.decision, verdict.reason, verdict.message, verdict.anomalies, verdict.last_step,
            verdict.summary)


# A fresh judgment of the whole history costs what the history holds: done at every step it made this file the
# suite's slowest (O(n^2)). The incremental verdict is still taken at every step; it is compared with a fresh one at
# each of the first FIRST_STEPS steps, wherever the incremental verdict's decision, reason or anomalies change (where
# reuse could go wrong), at every EVERY-th step and at the last.
FIRST_STEPS = 60
EVERY = 7


@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_every_poll_of_a_growing_history_equals_a_fresh_judgment(name: str) -> None:
    records = sorted(corpus.records_of(name), key=lambda r: r.step)
    steps = sorted({r.step for r in records})
    growing, seen = MetricHistory(), []
    polls = compared = 0
    previous = None
    for step, group in groupby(records, key=lambda r: r.step):
        points = [MetricPoint(step, 0.0, key, float(value)) for r in group for key, value in r.values.items()]
        growing.add(points)
        seen += points
        incremental = decide(growing)
        shape = (incremental.decision, incremental.reason, incremental.anomalies)
        if polls < FIRST_STEPS or polls % EVERY == 0 or shape != previous or step == steps[-1]:
            fresh = decide(MetricHistory.from_points(seen))
            assert _verdict_fields(incremental) == _verdict_fields(fresh), f"{name}: differ at step {step}"
            compared += 1
        previous = shape
        polls += 1
    assert polls == len(steps) > 10 and compared >= min(polls, FIRST_STEPS)
