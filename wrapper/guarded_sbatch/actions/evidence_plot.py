"""Draw the evidence plot in a short-lived process: `python -m guarded_sbatch.actions.evidence_plot IN OUT`.

matplotlib costs ~40 MB of resident memory once imported; drawn here, after the cancel, the
sidecar's own peak RSS stays at what reading and judging need.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from guarded_sbatch.core import door
from guarded_sbatch.core.numpy_load import import_numpy
from guarded_sbatch.judge.keys import KeyClassifier, Role, key_words
from guarded_sbatch.judge.verdict import Anomaly, Decision, Reason, Verdict

PNG_DPI = 90  # the figure is laid out once, at the resolution it is saved at (build_figure)
MAX_PLOT_POINTS = 5000  # per key; the most recent points are always kept in full
# the panels people look at, in order: (label in the verdict's summary["keys"], title, role)
PANELS = (("train_loss", "training loss", Role.TRAIN_LOSS), ("key_metric", "eval metric", Role.EVAL_METRIC),
          ("lr", "learning rate", Role.LEARNING_RATE), ("grad_norm", "grad norm", Role.GRAD_NORM))
TITLES = {label: title for label, title, _ in PANELS}
LOG_SPAN = 100.0  # a positive series whose max/min exceeds this (two decades) is drawn on a log scale
# matplotlib's axes overflow (OverflowError in the log ticker) on values near the float limit, which a diverging
# loss reaches (1e289 before its NaN): larger magnitudes are drawn at this bound and the panel's title says so
PLOT_BOUND = 1e100
LABEL_TOP, LABEL_GAP = 0.97, 0.01  # the marks' labels: the top row's upper edge, and the space kept between labels


def plotted_keys(keys: Iterable[str], chosen: Mapping[str, Any] | None = None) -> dict[str, str]:
    """{label: key} for the panels, by role (judge/keys.py), never by substring: the judge's own choice when
    it made one (the verdict's summary["keys"]), else the key the role classifier picks. An HF run's
    eval/runtime or eval/samples_per_second is no eval metric; its train/loss, lr and grad norm are plotted."""
    names = [k for k in keys if not k.startswith("crash/")]
    classifier = KeyClassifier()
    picked: dict[str, str] = {}
    for label, _, role in PANELS:
        key = (chosen or {}).get(label)
        if not isinstance(key, str) or key not in names:
            if role is Role.TRAIN_LOSS:
                key = classifier.primary_train_loss(names)
            else:
                candidates = classifier.keys_with_role(names, role)
                # an eval loss first (what every run has), then the shortest name
                candidates.sort(key=lambda k: ("loss" not in key_words(k), len(k), k))
                key = candidates[0] if candidates else None
        if key and key not in picked.values():
            picked[label] = key
    return picked


def log_scale(values: Sequence[float]) -> bool:
    """Whether a series spans decades (a divergence next to a healthy curve): positive and max/min > LOG_SPAN."""
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > LOG_SPAN


def plot_input(series: dict[str, tuple[Sequence[int], Sequence[float]]], verdict: Verdict,
               run_name: str = "") -> dict[str, object]:
    """What the plotting process needs, thinned to MAX_PLOT_POINTS per key (non-finite as text)."""
    thinned: dict[str, dict[str, list[object]]] = {}
    for key, (steps, values) in series.items():
        indices = list(range(len(steps)))
        if len(indices) > MAX_PLOT_POINTS:
            recent = MAX_PLOT_POINTS // 5
            stride = max(1, (len(indices) - recent) // (MAX_PLOT_POINTS - recent))
            indices = indices[: len(indices) - recent : stride] + indices[len(indices) - recent:]
        thinned[key] = {
            "steps": [int(steps[i]) for i in indices],
            "values": [float(values[i]) if math.isfinite(values[i]) else repr(float(values[i])) for i in indices],
        }
    return {"series": thinned, "verdict": verdict.to_json(), "run": run_name}


def verdict_from_json(v: dict[str, Any]) -> Verdict:
    """A verdict as `Verdict.to_json` wrote it (the plot's input, evidence.json's `verdict`)."""
    anomalies = tuple(Anomaly(a["kind"], a["metric"], a["step"], a.get("value"), a.get("message", ""))
                      for a in v.get("anomalies", []))
    return Verdict(Decision(v["decision"]), Reason(v["reason"]), v.get("message", ""), anomalies, v.get("last_step"),
                   v.get("summary") or {})


def _from_input(raw: dict[str, Any]) -> tuple[dict[str, tuple[Sequence[int], Sequence[float]]], Verdict, str]:
    series: dict[str, tuple[Sequence[int], Sequence[float]]] = {
        key: (entry["steps"], [float(v) for v in entry["values"]]) for key, entry in raw["series"].items()
    }
    return series, verdict_from_json(raw["verdict"]), str(raw.get("run") or "")


# What a series first holds that is not a number, in the one spelling every view uses (JSON's, as evidence.json
# writes it): the text of `show`, its terminal panels, `show --png` and the evidence plot all name it from here.
# the judge's anomalies that a series' non-finite onsets already mark
NONFINITE_KINDS = ("nan", "hidden_nan", "eval_nan", "nan_warning")


def nonfinite_onsets(steps: Sequence[int], values: Sequence[float]) -> list[tuple[str, int]]:
    """(spelling, step) of the first NaN, the first Infinity and the first -Infinity of a series, by step."""
    onsets: dict[str, int] = {}
    for step, value in zip(steps, values):
        if not math.isfinite(value):
            onsets.setdefault("NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity"), int(step))
    return sorted(onsets.items(), key=lambda item: item[1])


def onset_label(spelling: str, step: int) -> str:
    return f"{spelling} from step {step}"


def anomaly_marked(anomaly: Anomaly, key: str, plotted: set[str],
                   series: Mapping[str, tuple[Sequence[int], Sequence[float]]]) -> bool:
    """Whether a panel of `key` marks this anomaly: its own or one of a series not drawn, except a non-finite
    one its series' onsets mark already (one bad value named once, by its first value)."""
    if anomaly.metric != key and anomaly.metric in plotted:
        return False
    return not (anomaly.kind in NONFINITE_KINDS and anomaly.metric in series
                and nonfinite_onsets(*series[anomaly.metric]))


def plot_metrics(path: Path, series: dict[str, tuple[Sequence[int], Sequence[float]]], verdict: Verdict,
                 run_name: str = "") -> None:
    """Write the evidence figure (build_figure) to path as a PNG (0600), through the door: a link planted at the
    path is refused and named, never written through or chmod'ed."""
    import io  # noqa: PLC0415

    fig = build_figure(series, verdict, run_name)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=PNG_DPI)
    door.write_atomic(path, buffer.getvalue(), 0o600)


def build_figure(series: dict[str, tuple[Sequence[int], Sequence[float]]], verdict: Verdict, run_name: str = "") -> Any:
    """The evidence figure: a panel per role on ONE step axis (every panel spans the run's steps), the step the
    decision was taken at marked in each (the step FINAL_SUMMARY names), the first NaN and the first infinity of
    a series told apart, the run's name and the verdict in the title."""
    # lazy: ~40 MB, only ever in this child process (or a test). A Figure on the Agg canvas, no pyplot: pyplot's
    # import (backend selection, figure manager) costs the child about a third of a second of CPU and draws nothing
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    panels = list(plotted_keys(series, verdict.summary.get("keys")).items()) or [(k, k) for k in list(series)[:2]]
    rows = (len(panels) + 1) // 2
    fig = Figure(figsize=(11, 3.2 * rows), dpi=PNG_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 2 if len(panels) > 1 else 1, squeeze=False, sharex=True)
    plotted_metrics = {key for _, key in panels}
    for ax, (label, key) in zip(axes.flat, panels):
        _draw_panel(ax, label, key, series, verdict, plotted_metrics)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    steps = [s for key in (k for _, k in panels) for s in series[key][0]] + \
        ([verdict.last_step] if verdict.last_step is not None else [])
    if steps:
        low, high = min(steps), max(steps)
        axes.flat[0].set_xlim(low, high + max(1, (high - low) // 50))  # shared: every panel the same range
    for ax in axes[-1]:
        ax.set_xlabel("step")
    head = f"{run_name}: " if run_name else ""
    fig.suptitle(f"{head}{verdict.decision.value} ({verdict.reason.value}) at step {verdict.last_step}", fontsize=11)
    _lay_out_labels(fig, [ax for ax in axes.flat if ax.get_visible()])
    # laid out above, suptitle included, at the PNG's resolution: saving draws that layout instead of laying the
    # figure out again (the constrained layout is most of the drawing's CPU)
    fig.set_layout_engine("none")
    return fig


def _mark(ax: Any, text: str, step: int, color: str) -> None:
    """A mark's label, right of nothing: it ends at its line (its height is set once every label is known)."""
    ax.annotate(text, (step, LABEL_TOP), xycoords=("data", "axes fraction"), color=color, fontsize=8, ha="right",
                va="top", bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})


def stagger_labels(spans: Sequence[tuple[float, float]], height: float, *, top: float = LABEL_TOP,
                   gap: float = LABEL_GAP) -> list[float]:
    """The top edge of each label given its left and right edges (one unit for all: axes fractions): the highest row
    where it overlaps no label placed before it, rows `height` + gap apart from `top` down. Labels apart keep the
    top row; close ones (a spike, a divergence and a NaN a few steps apart) are stacked, never drawn over each
    other."""
    rows: list[list[tuple[float, float]]] = []
    tops: list[float] = []
    for left, right in spans:
        row = next((index for index, taken in enumerate(rows)
                    if all(right + gap <= other_left or other_right + gap <= left
                           for other_left, other_right in taken)), len(rows))
        if row == len(rows):
            rows.append([])
        rows[row].append((left, right))
        tops.append(top - row * (height + gap))
    return tops


def _lay_out_labels(fig: Any, panels: list[Any]) -> None:
    """Each panel's mark labels staggered (stagger_labels), measured as drawn: their widths depend on the font."""
    fig.draw_without_rendering()  # the constrained layout and the labels' extents, in pixels; no pixels drawn
    renderer = fig.canvas.get_renderer()
    for ax in panels:
        labels = [text for text in ax.texts if text.get_text()]
        if not labels:
            continue
        to_axes = ax.transAxes.inverted()
        boxes = [to_axes.transform(label.get_window_extent(renderer)) for label in labels]
        height = max(box[1][1] - box[0][1] for box in boxes)
        for label, top in zip(labels, stagger_labels([(box[0][0], box[1][0]) for box in boxes], height)):
            label.xy = label.xyann = (label.xy[0], top)  # the point and the text: one place (no arrow)


def _draw_panel(ax: Any, label: str, key: str, series: Mapping[str, tuple[Sequence[int], Sequence[float]]],
                verdict: Verdict, plotted_metrics: set[str]) -> None:
    steps, values = series[key]
    finite = [(s, v) for s, v in zip(steps, values) if math.isfinite(v)]
    bounded = [max(-PLOT_BOUND, min(PLOT_BOUND, v)) for _, v in finite]
    if finite:
        ax.plot([s for s, _ in finite], bounded, lw=1)
        if log_scale(bounded):
            ax.set_yscale("log")
    for (spelling, first), color in zip(nonfinite_onsets(steps, values), ("red", "darkorange", "purple")):
        ax.axvline(first, color=color, lw=1.5)
        _mark(ax, onset_label(spelling, first), first, color)
    kinds_at: dict[int, list[str]] = {}  # anomalies at one step: one line, one label naming them all
    for anomaly in verdict.anomalies:
        if anomaly_marked(anomaly, key, plotted_metrics, series):
            kinds_at.setdefault(anomaly.step, []).append(anomaly.kind)
    for step, kinds in kinds_at.items():
        ax.axvline(step, color="red", ls="--", lw=1)
        _mark(ax, ", ".join(dict.fromkeys(kinds)), step, "red")
    if verdict.last_step is not None and verdict.decision is Decision.STOP:
        ax.axvline(verdict.last_step, color="black", lw=1.2, ls=":")
        _mark(ax, f"STOP at {verdict.last_step}", verdict.last_step, "black")
    scale = ", log scale" if ax.get_yscale() == "log" else ""
    if any(abs(v) > PLOT_BOUND for _, v in finite):
        scale += f", beyond {PLOT_BOUND:.0e} drawn at it"
    ax.set_title(f"{TITLES.get(label, label)}: {key}{scale}", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)


def main(argv: list[str]) -> int:
    """`python -m guarded_sbatch.actions.evidence_plot INPUT.json OUTPUT.png`."""
    if len(argv) != 2:
        raise SystemExit("usage: python -m guarded_sbatch.actions.evidence_plot INPUT.json OUTPUT.png")
    import_numpy()  # matplotlib's, with one OpenBLAS thread (its start-up threads spin on every core)
    series, verdict, run_name = _from_input(json.loads(door.read(argv[0], 256 << 20, own=True).text()))
    try:
        plot_metrics(Path(argv[1]), series, verdict, run_name)
    except (door.LinkRefusedError, door.NotRegularError) as exc:
        sys.stderr.write(f"{exc.filename}: {exc.strerror}\n")  # the parent's error names it (evidence.py)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
