"""The STOP's evidence plot, looked at as a person would: every panel on one step axis, the STOP step marked in each
(the step FINAL_SUMMARY names), NaN and infinity told apart, and no label overlapping another or cut off the
figure — for a NaN run (its learning rate logged far past the loss) and a diverging one."""

from __future__ import annotations

import math
import random
from itertools import combinations
from typing import Any

import pytest

from guarded_sbatch.actions.evidence_plot import build_figure, stagger_labels
from guarded_sbatch.judge.verdict import Anomaly, Decision, Reason, Verdict
from guarded_sbatch.sidecar.report import render_final_summary


def nan_run() -> tuple[dict, Verdict]:
    steps = list(range(0, 151, 2))
    loss = [2.0 * math.exp(-s / 60) for s in steps[:-3]] + [math.nan] * 3
    grad = [1.5] * (len(steps) - 4) + [math.inf] + [math.nan] * 3
    lr_steps = list(range(0, 751, 10))  # a schedule logged ahead of the loss: 750 against 150
    series = {"train/loss": (steps, loss), "train/grad_norm": (steps, grad),
              "train/learning_rate": (lr_steps, [1e-3] * len(lr_steps)), "eval/loss": ([0, 50, 100], [2.0, 1.0, 0.7])}
    verdict = Verdict(Decision.STOP, Reason.NON_FINITE_LOSS, "loss NaN", (Anomaly("nan", "train/loss", 146),), 150,
                      {"keys": {"train_loss": "train/loss", "lr": "train/learning_rate", "grad_norm": "train/grad_norm"}})
    return series, verdict


def diverging_run() -> tuple[dict, Verdict]:
    steps = list(range(0, 400, 4))
    loss = [math.exp(-s / 80) if s < 200 else 0.1 * 10 ** ((s - 200) / 20) for s in steps]
    verdict = Verdict(Decision.STOP, Reason.DIVERGENCE, "diverging", (Anomaly("divergence", "loss", 240),), 396,
                      {"keys": {"train_loss": "loss"}})
    return {"loss": (steps, loss), "lr": (steps, [0.05] * len(steps))}, verdict


def texts_of(ax: Any) -> list[Any]:
    return [t for t in ax.texts if t.get_text()]


@pytest.mark.parametrize("run", [nan_run, diverging_run], ids=["nan", "diverging"])
def test_one_step_axis_the_stop_marked_labels_legible(run: Any) -> None:
    series, verdict = run()
    fig = build_figure(series, verdict, "a-run")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len({ax.get_xlim() for ax in panels}) == 1  # one step range for every panel
    assert panels[0].get_xlim()[1] >= max(max(steps) for steps, _ in series.values())
    figure_box = fig.bbox
    for ax in panels:
        labels = texts_of(ax)
        assert any(t.get_text() == f"STOP at {verdict.last_step}" for t in labels), [t.get_text() for t in labels]
        boxes = [t.get_window_extent(renderer) for t in labels]
        for box in boxes:  # nothing cut off by the figure's edge
            assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1 and figure_box.y0 <= box.y0
        for (a, box_a), (b, box_b) in combinations(zip(labels, boxes), 2):
            assert not box_a.overlaps(box_b), f"{a.get_text()!r} overlaps {b.get_text()!r}"
    title = fig._suptitle.get_text()
    summary = render_final_summary(run="a-run", job_id="7", verdict=verdict, stop_detail="cancelled",
                                   evidence_path=None, note_detail="none", when=0.0)
    assert f"at step {verdict.last_step}" in title and f"- Last step: {verdict.last_step}" in summary


def test_nan_and_infinity_are_told_apart() -> None:
    series, verdict = nan_run()
    fig = build_figure(series, verdict, "a-run")
    grad_panel = next(ax for ax in fig.axes if "grad_norm" in ax.get_title())
    labels = {t.get_text() for t in texts_of(grad_panel)}
    assert {"Infinity from step 144", "NaN from step 146"} <= labels, labels  # spelled as evidence.json spells them
    loss_panel = next(ax for ax in fig.axes if "train/loss" in ax.get_title())
    assert "NaN from step 146" in {t.get_text() for t in texts_of(loss_panel)}
    assert not any("Infinity" in t.get_text() for t in texts_of(loss_panel))
    assert not any(t.get_text() == "nan" for t in texts_of(loss_panel))  # its NaN named once, by its first value


def _boxes_overlap(a: tuple[float, float, float], b: tuple[float, float, float], height: float) -> bool:
    (left_a, right_a, top_a), (left_b, right_b, top_b) = a, b
    return left_a < right_b and left_b < right_a and top_a - height < top_b and top_b - height < top_a


def test_stagger_labels_never_puts_one_label_box_on_another() -> None:
    """The layout alone, positions in and positions out: labels apart stay on the top row; close ones are stacked."""
    height = 0.05
    apart = [(0.1, 0.2), (0.3, 0.4), (0.7, 0.9)]
    assert stagger_labels(apart, height, top=0.97) == [0.97] * 3
    close = [(0.40, 0.55), (0.42, 0.60), (0.45, 0.58), (0.70, 0.80)]
    tops = stagger_labels(close, height, top=0.97)
    assert tops[0] == 0.97 and tops[3] == 0.97 and len(set(tops[:3])) == 3  # the three close ones: three rows
    generator = random.Random(7)
    for _ in range(200):
        spans = []
        for _ in range(generator.randint(1, 12)):
            right = generator.uniform(0.05, 1.0)
            spans.append((right - generator.uniform(0.05, 0.3), right))
        placed = [(left, right, top) for (left, right), top in zip(spans, stagger_labels(spans, height))]
        assert not any(_boxes_overlap(a, b, height) for a, b in combinations(placed, 2)), placed


def test_close_anomalies_are_labelled_apart_and_one_step_once() -> None:
    steps = list(range(0, 400, 4))
    loss = [math.exp(-s / 80) if s < 200 else 0.1 * 10 ** ((s - 200) / 20) for s in steps]
    anomalies = (Anomaly("loss_spike", "loss", 232), Anomaly("divergence", "loss", 240),
                 Anomaly("grad_explosion", "loss", 240), Anomaly("plateau", "loss", 248))
    verdict = Verdict(Decision.STOP, Reason.DIVERGENCE, "diverging", anomalies, 252, {"keys": {"train_loss": "loss"}})
    fig = build_figure({"loss": (steps, loss), "lr": (steps, [0.05] * len(steps))}, verdict, "close-marks")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    loss_panel = next(ax for ax in fig.axes if "loss" in ax.get_title())
    labels = texts_of(loss_panel)
    assert [t.get_text() for t in labels].count("divergence, grad_explosion") == 1, [t.get_text() for t in labels]
    assert {"loss_spike", "plateau", "STOP at 252"} <= {t.get_text() for t in labels}
    boxes = [t.get_window_extent(renderer) for t in labels]
    for (a, box_a), (b, box_b) in combinations(zip(labels, boxes), 2):
        assert not box_a.overlaps(box_b), f"{a.get_text()!r} overlaps {b.get_text()!r}"
    panel = loss_panel.get_window_extent(renderer)
    assert all(panel.y0 <= box.y0 and box.y1 <= panel.y1 for box in boxes)  # inside its panel
