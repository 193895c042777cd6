"""Draw the evidence plot in a short-lived process: `python -m guarded_sbatch.actions.evidence_plot IN OUT`.

matplotlib costs ~40 MB of resident memory once imported; drawn here, after the cancel, the
sidecar's own peak RSS stays at what reading and judging need.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from guarded_sbatch.judge.verdict import Anomaly, Decision, Reason, Verdict

MAX_PLOT_POINTS = 5000  # per key; the most recent points are always kept in full


def plot_input(series: dict[str, tuple[Sequence[int], Sequence[float]]], verdict: Verdict) -> dict[str, object]:
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
    return {"series": thinned, "verdict": verdict.to_json()}


def _from_input(raw: dict[str, Any]) -> tuple[dict[str, tuple[Sequence[int], Sequence[float]]], Verdict]:
    series: dict[str, tuple[Sequence[int], Sequence[float]]] = {
        key: (entry["steps"], [float(v) for v in entry["values"]]) for key, entry in raw["series"].items()
    }
    v = raw["verdict"]
    anomalies = tuple(Anomaly(a["kind"], a["metric"], a["step"], a.get("value"), a.get("message", ""))
                      for a in v.get("anomalies", []))
    verdict = Verdict(Decision(v["decision"]), Reason(v["reason"]), v.get("message", ""), anomalies, v.get("last_step"))
    return series, verdict


def plot_metrics(path: Path, series: dict[str, tuple[Sequence[int], Sequence[float]]], verdict: Verdict) -> None:
    import matplotlib  # noqa: PLC0415 - lazy: ~40 MB, only ever in this child process

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - after matplotlib.use("Agg")

    keys = [k for k in series if "loss" in k.lower() or "eval" in k.lower() or "val" in k.lower()][:4] or list(series)[:2]
    fig, axes = plt.subplots(len(keys) or 1, 1, figsize=(8, 2.6 * max(1, len(keys))), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        steps, values = series[key]
        finite = [(s, v) for s, v in zip(steps, values) if math.isfinite(v)]
        if finite:
            ax.plot([s for s, _ in finite], [v for _, v in finite], lw=1, label=key)
            positive = all(v > 0 for _, v in finite)
            spread = max(v for _, v in finite) / max(min(v for _, v in finite), 1e-300) if positive else 0
            if positive and spread > 100:
                ax.set_yscale("log")
        for anomaly in verdict.anomalies:
            if anomaly.metric == key or len(keys) == 1:
                ax.axvline(anomaly.step, color="red", ls="--", lw=1)
                ax.annotate(anomaly.kind, (anomaly.step, 0.95), xycoords=("data", "axes fraction"),
                            color="red", fontsize=8, ha="right")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
    fig.suptitle(f"{verdict.decision.value}: {verdict.reason.value}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        raise SystemExit("usage: python -m guarded_sbatch.actions.evidence_plot INPUT.json OUTPUT.png")
    series, verdict = _from_input(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    plot_metrics(Path(argv[1]), series, verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
