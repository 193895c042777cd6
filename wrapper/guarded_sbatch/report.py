"""The training-check report of DESIGN §5 and the FINAL_SUMMARY block."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from guarded_sbatch.judge.verdict import Verdict
from guarded_sbatch.redact import redact
from guarded_sbatch.timefmt import local_timestamp

DATA_SOURCE_LABELS = {
    "wandb": "wandb_ok",
    "tensorboard": "tensorboard_ok",
    "mlflow": "log_fallback",
    "csv": "log_fallback",
    "textlog": "log_fallback",
    None: "unreachable",
}


@dataclass(frozen=True)
class CheckReport:
    when: float
    data_source: str
    run: str
    verdict: Verdict
    evidence: Sequence[str]
    next_check: float | None  # None: the loop is ending

    def render(self) -> str:
        anomalies = "; ".join(
            f"{a.kind} in {a.metric} at step {a.step}" + (f" ({a.message})" if a.message else "")
            for a in self.verdict.anomalies
        ) or "none"
        lines = [
            f"## Training Check - {local_timestamp(self.when)}",
            "",
            f"- Data source: {self.data_source}",
            f"- Run: {self.run}",
            f"- Recent metrics: {summarise_metrics(self.verdict)}",
            f"- Anomalies: {anomalies}",
            f"- Evidence: {', '.join(self.evidence) or 'none'}",
            f"- Decision: {self.verdict.decision.value}",
            f"- Reason: {self.verdict.reason.value}: {self.verdict.message}",
            f"- Next check: {local_timestamp(self.next_check) if self.next_check else 'none (ending)'}",
        ]
        return redact("\n".join(lines)) + "\n"


def summarise_metrics(verdict: Verdict) -> str:
    summary = verdict.summary or {}
    parts = []
    if verdict.last_step is not None:
        parts.append(f"step {verdict.last_step}")
    for key, value in summary.items():
        if isinstance(value, float):
            parts.append(f"{key}={_fmt(value)}")
        elif isinstance(value, (int, str)):
            parts.append(f"{key}={value}")
    return ", ".join(parts) or "no metrics yet"


def _fmt(value: float) -> str:
    if not math.isfinite(value):
        return repr(value)
    return f"{value:.4g}"


def render_final_summary(
    *, run: str, job_id: str | None, verdict: Verdict, stop_detail: str, evidence_path: str | None,
    note_detail: str, when: float,
) -> str:
    lines = [
        "FINAL_SUMMARY",
        f"- Time: {local_timestamp(when)}",
        f"- Run: {run}" + (f" (job {job_id})" if job_id else ""),
        f"- Decision: {verdict.decision.value} ({verdict.reason.value})",
        f"- Reason: {verdict.message}",
        f"- Last step: {verdict.last_step}",
        f"- Action: {stop_detail}",
        f"- Evidence: {evidence_path or 'none'}",
        f"- Project note: {note_detail}",
    ]
    return redact("\n".join(lines)) + "\n"
