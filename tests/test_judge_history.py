"""MetricHistory: de-duplication, order, bounds, truncation."""

from __future__ import annotations

import math

import numpy as np

from guarded_sbatch.judge import MetricHistory
from guarded_sbatch.sources.points import MetricPoint


def test_dedup_newest_wins_and_sorted() -> None:
    history = MetricHistory()
    history.add([MetricPoint(20, 2.0, "loss", 2.0), MetricPoint(10, 1.0, "loss", 1.0)])
    history.add([MetricPoint(10, 3.0, "loss", 9.0), MetricPoint(5, 3.0, "lr", 0.1)])  # a resumed job repeats step 10
    steps, values = history.series("loss")
    assert steps.tolist() == [10, 20]
    assert values.tolist() == [9.0, 2.0]
    assert history.keys() == ["loss", "lr"]
    assert history.last_step == 20
    assert history.value_at("loss", 10) == 9.0
    assert history.last_wall_time == 3.0


def test_unknown_key_and_empty_history() -> None:
    history = MetricHistory()
    assert history.last_step is None
    steps, values = history.series("nope")
    assert len(steps) == 0 and len(values) == 0


def test_memory_bounded_keeps_recent_full_and_every_nan() -> None:
    history = MetricHistory(max_points_per_key=1000, full_resolution_steps=200)
    points = [MetricPoint(s, 0.0, "loss", math.nan if s == 301 else 1.0 / (s + 1)) for s in range(5000)]
    for start in range(0, 5000, 250):
        history.add(points[start:start + 250])
    steps, values = history.series("loss")
    assert len(steps) <= 1000 + 250
    recent = steps[steps > 5000 - 200]
    assert recent.tolist() == list(range(4801, 5000))  # the recent window is never thinned
    assert 301 in steps.tolist() and math.isnan(values[steps.tolist().index(301)])
    assert np.all(np.diff(steps) > 0)


def test_truncated_copy() -> None:
    history = MetricHistory.from_points(MetricPoint(s, 0.0, "loss", float(s)) for s in range(100))
    cut = history.truncated(49)
    assert cut.last_step == 49
    assert len(cut.series("loss")[0]) == 50
    assert history.last_step == 99


def test_batches_add_up_to_one_add_and_repeats_across_batches_keep_the_newest_wall_time() -> None:
    points = [MetricPoint(s, 100.0 + s, "loss", float(s)) for s in range(10)]
    points += [MetricPoint(3, 50.0, "loss", -1.0), MetricPoint(5, 500.0, "loss", -5.0)]  # stale 3, fresh 5
    history = MetricHistory()
    history.add_batches([points[:4], points[4:8], points[8:]], newest_by_wall_time=True)
    steps, values = history.series("loss")
    assert steps.tolist() == list(range(10))
    assert values[3] == 3.0 and values[5] == -5.0
    columns = MetricHistory()
    columns.add_batches([{"loss": ([0, 1], [1.0, 2.0], [0.5, 0.25])}, {"loss": ([2], [3.0], [0.1])}])
    assert columns.series("loss")[1].tolist() == [0.5, 0.25, 0.1] and columns.last_wall_time == 3.0


def test_a_backlog_is_thinned_batch_by_batch_and_a_repeat_after_thinning_still_wins() -> None:
    history = MetricHistory(max_points_per_key=1_000, full_resolution_steps=200)
    batches: list[object] = [{"loss": (list(range(k, k + 500)), [float(s) for s in range(k, k + 500)],
                                       [1.0] * 500)} for k in range(0, 5_000, 500)]
    batches.append({"loss": ([4_990, 5_000], [9_000.0, 9_001.0], [-1.0, 2.0])})  # a resumed job repeats 4 990
    history.add_batches(batches, newest_by_wall_time=True)  # type: ignore[arg-type]
    steps, values = history.series("loss")
    assert len(steps) <= 1_500  # never the whole backlog at once
    assert list(steps) == sorted(set(steps.tolist()))
    assert history.value_at("loss", 4_990) == -1.0 and history.value_at("loss", 5_000) == 2.0
    assert list(steps[-200:]) == list(range(4_801, 5_001))  # the recent window is whole
