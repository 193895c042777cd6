"""The training-check report (one block per full check) and the FINAL_SUMMARY block."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from guarded_sbatch.judge.verdict import Verdict
from guarded_sbatch.core.redact import redact
from guarded_sbatch.core.timefmt import local_timestamp

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
            f"- Reason: {_reason(self.verdict)}",
            f"- Next check: {local_timestamp(self.next_check) if self.next_check else 'none (ending)'}",
        ]
        return redact("\n".join(lines)) + "\n"


def _reason(verdict: Verdict) -> str:
    if not verdict.message or verdict.message.startswith(verdict.reason.value):
        return verdict.message or verdict.reason.value  # "healthy (...)", not "healthy: healthy (...)"
    return f"{verdict.reason.value}: {verdict.message}"


def summarise_metrics(verdict: Verdict) -> str:
    summary = verdict.summary or {}
    keys = summary.get("keys") or {}
    parts = [f"step {verdict.last_step}"] if verdict.last_step is not None else []
    for label in ("train_loss", "lr", "grad_norm", "loss_scale"):
        entry = summary.get(label)
        if isinstance(entry, dict) and "value" in entry:
            parts.append(f"{keys.get(label) or label}={_fmt(entry['value'])}")
    metric = summary.get("key_metric")
    if isinstance(metric, dict):
        details = ", ".join(f"{k} {_fmt(v)}" for k, v in metric.items() if k != "key")
        parts.append(f"{metric.get('key')}: {details}" if details else str(metric.get("key")))
    return "; ".join(parts) or "no metrics yet"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else repr(value)
    return str(value)


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
