"""The verdict follows from the history alone: judged once or incrementally, in any chunking and
with repeated points, the same history gives the same verdict, and no STOP comes earlier."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from guarded_sbatch.judge import Decision, MetricHistory, decide
from guarded_sbatch.sources.points import MetricPoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "corpus"))
import generate as corpus


def corpus_points(name: str) -> list[MetricPoint]:
    return [
        MetricPoint(r.step, 0.0, key, float(value))
        for r in corpus.records_of(name)
        for key, value in r.values.items()
    ]


def same(a, b) -> bool:  # type: ignore[no-untyped-def]
    return (a.decision, a.reason, a.message, a.anomalies, a.last_step) == (
        b.decision, b.reason, b.message, b.anomalies, b.last_step)


def replay_first_stop(points: list[MetricPoint], every: int) -> tuple[int | None, object]:
    ordered = sorted(points, key=lambda p: p.step)
    history = MetricHistory()
    index = 0
    last = ordered[-1].step
    verdict = None
    for cut in range(every, last + every, every):
        chunk = []
        while index < len(ordered) and ordered[index].step <= cut:
            chunk.append(ordered[index])
            index += 1
        history.add(chunk)
        verdict = decide(history)
        once = decide(MetricHistory.from_points(p for p in ordered if p.step <= cut))
        assert same(verdict, once), f"incremental and once differ at step {cut}"
        if verdict.decision is Decision.STOP:
            return cut, verdict
    return None, verdict


def test_incremental_equals_once_and_no_earlier_stop_on_faulty_runs() -> None:
    for name in ("nan_lr", "diverge", "fp16_scale_collapse", "overfit"):
        points = corpus_points(name)
        stop_step, verdict = replay_first_stop(points, every=25)
        assert stop_step is not None, name
        # judged once on a finer grid: nothing stops before stop_step - 25, the same STOP at stop_step
        ordered = sorted(points, key=lambda p: p.step)
        for cut in range(5, stop_step - 24, 5):
            prefix = MetricHistory.from_points(p for p in ordered if p.step <= cut)
            assert decide(prefix).decision is not Decision.STOP, f"{name}: earlier STOP at {cut}"
        full = decide(MetricHistory.from_points(ordered))
        assert full.decision is Decision.STOP and full.reason is verdict.reason, name  # type: ignore[attr-defined]


def test_healthy_run_never_stops_at_any_prefix() -> None:
    stop_step, verdict = replay_first_stop(corpus_points("healthy"), every=50)
    assert stop_step is None
    assert verdict.decision is Decision.CONTINUE  # type: ignore[attr-defined]


def _loss_points() -> list[MetricPoint]:
    rng = np.random.default_rng(3)
    points = []
    for step in range(0, 900, 5):
        value = (0.3 + 2 * math.exp(-step / 200)) * (1 + 0.05 * rng.normal())
        if step >= 700:
            value *= 1 + (step - 690) / 20
        points.append(MetricPoint(step, float(step), "train/loss", value))
        if step % 100 == 0:
            points.append(MetricPoint(step, float(step), "eval/loss", 1.0 - step / 2000))
    return points


POINTS = _loss_points()


@settings(max_examples=25, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=len(POINTS) - 1), max_size=12, unique=True),
    repeats=st.lists(st.integers(min_value=0, max_value=len(POINTS) - 1), max_size=20),
    seed=st.integers(min_value=0, max_value=10_000),
)
def test_any_chunking_and_repeats_give_the_same_verdict(cuts: list[int], repeats: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    bounds = [0, *sorted(cuts), len(POINTS)]
    history = MetricHistory()
    for start, end in zip(bounds, bounds[1:]):
        shuffled = [POINTS[i] for i in rng.permutation(np.arange(start, end))]
        # a resumed job or a re-read repeats points already seen: same (key, step), same value
        history.add(shuffled + [POINTS[i] for i in repeats if POINTS[i].step <= max(p.step for p in shuffled)])
    assert same(decide(history), decide(MetricHistory.from_points(POINTS)))
