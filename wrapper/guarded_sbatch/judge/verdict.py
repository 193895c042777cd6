"""Decisions, reasons and anomalies: what the decision core returns."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Decision(enum.Enum):
    """CONTINUE: healthy enough; WAIT: inconclusive or unreadable, never stop; STOP: clearly broken."""

    CONTINUE = "CONTINUE"
    WAIT = "WAIT"
    STOP = "STOP"


class Reason(enum.Enum):
    """Why a verdict was reached (its value is what JSON output and the reports carry)."""

    HEALTHY = "healthy"
    NO_DATA = "no_data"
    TOO_EARLY = "too_early"
    NON_FINITE_LOSS = "non_finite_loss"
    NON_FINITE_METRIC = "non_finite_metric"
    HIDDEN_NAN = "hidden_nan"
    LOSS_SCALE_COLLAPSE = "loss_scale_collapse"
    LOSS_SPIKE = "loss_spike"
    DIVERGENCE = "divergence"
    LOSS_CLIMBING = "loss_climbing"
    GRAD_EXPLOSION = "grad_explosion"
    EVAL_REGRESSING = "eval_regressing"
    EVAL_FAILING = "eval_failing"
    LR_SCHEDULE = "lr_schedule"
    PLATEAU_FROM_START = "plateau_from_start"
    STAGNATION = "stagnation"  # stalled mid-run after progress (judge/checks_stall.py)
    FROZEN_LOSS = "frozen_loss"  # the loss repeats itself exactly, or sits at ln(k) (judge/checks_dead.py)
    ZERO_LOSS = "zero_loss"  # loss and grad norm exactly 0 from the start (judge/checks_dead.py)
    NEGATIVE_LOSS = "negative_loss"  # a loss below 0 where its kind cannot be (judge/checks_sign.py)
    STALE = "stale"
    SOURCE_UNREADABLE = "source_unreadable"
    SERIES_CAPPED = "series_capped"  # more distinct series than the history keeps (judge/history.py)
    SOURCE_WRITABLE_BY_OTHERS = "source_writable_by_others"  # a STOP whose files a co-worker can write (core/file_trust.py)
    SOURCE_DAMAGED = "source_damaged"  # holes skipped in the judged files: not called healthy
    CRASHED = "crashed"
    INTERRUPTED = "interrupted"
    # a WAIT: training lines with no loss the judge can read, or (the watcher, after a few minutes of a running job)
    # no judged loss at all; its message names what was seen and the one option that fixes it (judge/unguarded.py)
    UNGUARDED = "unguarded"


@dataclass(frozen=True)
class Anomaly:
    """One finding in the history: its kind, the metric and the step where it was seen."""

    kind: str  # e.g. "nan", "spike", "divergence", "plateau", "grad_explosion", "recovered_spike"
    metric: str
    step: int
    value: float | None = None
    message: str = ""


@dataclass(frozen=True)
class Verdict:
    """The judge's answer: decision, reason, a message for people, anomalies, the last step judged."""

    decision: Decision
    reason: Reason
    message: str
    anomalies: tuple[Anomaly, ...] = ()
    last_step: int | None = None
    summary: dict[str, Any] = field(default_factory=dict)  # recent metric values for the report

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision.value,
            "reason": self.reason.value,
            "message": self.message,
            "last_step": self.last_step,
            "anomalies": [asdict(a) for a in self.anomalies],
            "summary": self.summary,
        }
