"""`show`'s curves on a terminal (plotext): one panel per role (training loss, eval metric, lr, grad norm),
fitted to the terminal's width and height, a log scale when a series spans decades, short tick labels,
non-finite values and the judged anomalies marked with a line at their step."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from guarded_sbatch.actions.evidence_plot import TITLES, anomaly_marked, log_scale, nonfinite_onsets, onset_label

MAX_WIDTH = 120
TICKS = 5


def draw_panels(plotted: Mapping[str, str], series: Mapping[str, tuple[Sequence[int], Sequence[float]]],
                anomalies: Iterable[Any] = (), *, color: bool, size: tuple[int, int] | None = None) -> str:
    """One plotext panel per role, fitted to the terminal (or to size=(columns, lines))."""
    import plotext as plt  # only `show` on a terminal draws

    panels = [(label, key) for label, key in plotted.items() if key in series]
    if not panels:
        return "(no metrics to plot yet)"
    columns, lines = size or tuple(shutil.get_terminal_size((100, 40)))
    width = max(40, min(columns - 1, MAX_WIDTH))
    # the header and the summary take ~22 lines; the panels share the rest, 7 to 12 lines each
    height = max(7, min(12, (lines - 22) // len(panels) - 1))
    anomalies = list(anomalies)
    shown = {key for _, key in panels}
    drawn = []
    for label, key in panels:
        steps, values = series[key]
        finite = [(s, v) for s, v in zip(steps, values) if math.isfinite(v)]
        logged = log_scale(values)
        plt.clear_figure()
        plt.plotsize(width, height)
        plt.theme("pro" if color else "clear")
        if finite:
            plt.plot([s for s, _ in finite], [v for _, v in finite], marker="braille")
            if logged:
                plt.yscale("log")
            ys = [v for _, v in finite]
            ticks = _ticks(min(ys), max(ys), log=logged)
            plt.yticks(ticks, [f"{t:.3g}" for t in ticks])
        xs = list(steps)
        if xs:
            xt = sorted({int(round(t)) for t in _ticks(min(xs), max(xs), log=False)})
            plt.xticks(xt, [str(t) for t in xt])
        marks = []
        for spelling, first in nonfinite_onsets(steps, values):
            plt.vline(first, "red" if color else None)
            marks.append(onset_label(spelling, first))
        for anomaly in anomalies:
            if anomaly_marked(anomaly, key, shown, series):
                plt.vline(anomaly.step, "red" if color else None)
                marks.append(f"{anomaly.kind} at {anomaly.step}")
        # plotext drops a title wider than its canvas (the width less the tick labels)
        plt.title(_fit(f"{key} ({TITLES.get(label, label)})" + (", log scale" if logged else ""), width - 14))
        marked = "\n" + _fit("  marked: " + "; ".join(dict.fromkeys(marks)), width) if marks else ""
        drawn.append(plt.build().rstrip("\n") + marked)
    return "\n".join(drawn)


def _ticks(low: float, high: float, *, log: bool) -> list[float]:
    if high <= low:
        return [low]
    if log:
        a, b = math.log10(low), math.log10(high)
        return [10 ** (a + (b - a) * i / (TICKS - 1)) for i in range(TICKS)]
    return [low + (high - low) * i / (TICKS - 1) for i in range(TICKS)]


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
