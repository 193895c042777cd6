"""The evidence bundle saved on STOP: evidence.json, a log snippet, and a PNG plot with the
anomaly marked. Everything passes through redact() before it is written."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.actions.evidence_plot import plot_input
from guarded_sbatch.core import door
from guarded_sbatch.core.errors import CommandError
from guarded_sbatch.core.extras import require
from guarded_sbatch.core.fsutil import private_dir, read_tail, write_json_atomic, write_private
from guarded_sbatch.core.jsonnum import dumps as json_dumps, json_number
from guarded_sbatch.judge.verdict import Verdict
from guarded_sbatch.core.sanitize import visible
from guarded_sbatch.core.redact import redact, redact_tree
from guarded_sbatch.core.runner import run_command
from guarded_sbatch.core.pychild import CHILD_CWD, python_argv

SNIPPET_BYTES = 16 * 1024
PLOT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class EvidenceBundle:
    folder: Path
    json_path: Path
    plot_path: Path | None
    snippet_path: Path | None


def _finite_or_text(value: float) -> float | str:
    return json_number(value)


_ZERO_RUN = re.compile("\0{16,}")


def tail_snippet(path: Path, max_bytes: int = SNIPPET_BYTES) -> str:
    data, size = read_tail(path, max_bytes, own=True)  # the job's own log: never a link, never another's file
    if not data:
        return ""
    text = _ZERO_RUN.sub(lambda m: f"[{len(m.group(0))} zero bytes: a hole?]", data.decode("utf-8", errors="replace"))
    if size > max_bytes:
        text = text.split("\n", 1)[-1]
    return visible(redact(text))  # a log line that carried ESC]0;... reaches nobody's terminal


def write_evidence(
    folder: Path,
    verdict: Verdict,
    series: dict[str, tuple[Sequence[int], Sequence[float]]],
    *,
    run: dict[str, Any],
    files_inspected: Sequence[str],
    log_path: Path | None,
    stop_detail: str,
    recent_points: int = 200,
    plot: bool = True,
) -> EvidenceBundle:
    """Write the bundle into folder; the plot (unless `plot` is false) is best effort (its failure is recorded, not
    raised)."""
    private_dir(folder)
    snippet_path: Path | None = None
    if log_path is not None:
        snippet = tail_snippet(log_path)
        if snippet:
            snippet_path = folder / "log-snippet.txt"
            write_private(snippet_path, snippet)
    recent = {
        key: {
            "steps": [int(step) for step in steps[-recent_points:]],
            "values": [_finite_or_text(v) for v in values[-recent_points:]],
        }
        for key, (steps, values) in series.items()
    }
    plot_path: Path | None = folder / "metrics.png" if plot else None
    plot_error = ""
    try:
        if plot_path is not None:
            plot_in_subprocess(folder, plot_path, series, verdict, run_name=str(run.get("name") or ""))
    except Exception as exc:  # noqa: BLE001 - a broken plot must never lose the rest of the evidence
        plot_path, plot_error = None, f"{type(exc).__name__}: {exc}"
    payload = {
        "verdict": verdict.to_json(),
        "run": run,
        "stop": stop_detail,
        "files_inspected": list(files_inspected),
        "log_snippet": str(snippet_path) if snippet_path else None,
        "plot": str(plot_path) if plot_path else None,
        "plot_error": plot_error or None,
        "recent_metrics": recent,
    }
    json_path = folder / "evidence.json"
    write_json_atomic(json_path, redact_tree(json.loads(json_dumps(payload))))
    return EvidenceBundle(folder, json_path, plot_path, snippet_path)


def plot_in_subprocess(
    folder: Path, path: Path, series: dict[str, tuple[Sequence[int], Sequence[float]]], verdict: Verdict,
    *, run_name: str = "",
) -> None:
    """Draw the plot in a child process (matplotlib's memory never enters the sidecar); raise on failure (without
    matplotlib: MissingExtraError, naming the extra that installs it)."""
    require("matplotlib", "the plot of the metrics")
    input_path = folder / ".plot-input.json"
    write_private(input_path, json.dumps(plot_input(series, verdict, run_name)))
    try:
        run_command(
            python_argv("-m", "guarded_sbatch.actions.evidence_plot", os.path.abspath(input_path), os.path.abspath(path)),
            timeout=PLOT_TIMEOUT_S, cwd=CHILD_CWD,
        )
    except CommandError as exc:
        raise RuntimeError(f"plotting failed: {(exc.stderr.strip().splitlines() or [str(exc)])[-1]}") from None
    finally:
        door.remove(input_path)
    if not path.is_file():
        raise RuntimeError("plotting process wrote no file")
