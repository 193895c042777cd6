"""Stand-in for guarded_sbatch.sources.keys, used only while that module is absent.

Same names as the planned module (MetricKind, classify_key); the judge imports the real one first.
"""

from __future__ import annotations

import enum
import re


class MetricKind(enum.Enum):
    TRAIN_LOSS = "train_loss"
    EVAL_LOSS = "eval_loss"
    EVAL_METRIC = "eval_metric"
    LR = "lr"
    GRAD_NORM = "grad_norm"
    LOSS_SCALE = "loss_scale"
    SKIPPED = "skipped"
    OTHER = "other"


_EVAL_PREFIX = re.compile(r"(^|[/_ .-])(eval|val|valid|validation|test)([/_ .-]|$)", re.IGNORECASE)


def classify_key(name: str) -> MetricKind:
    lowered = name.lower().replace(" ", "_")
    if "loss_scale" in lowered or "lossscale" in lowered or lowered.endswith("scaler/scale"):
        return MetricKind.LOSS_SCALE
    if "skipped" in lowered:
        return MetricKind.SKIPPED
    if re.search(r"(^|[/_])(lr|learning_rate|lr-[\w/]+)($|[/_])", lowered) or "learning_rate" in lowered:
        return MetricKind.LR
    if "grad_norm" in lowered or "gnorm" in lowered or lowered.endswith("/norm") or lowered == "norm":
        return MetricKind.GRAD_NORM
    is_eval = bool(_EVAL_PREFIX.search(lowered)) or lowered.startswith(("tel", "eval"))
    if "loss" in lowered or "crossentropy" in lowered:
        return MetricKind.EVAL_LOSS if is_eval else MetricKind.TRAIN_LOSS
    if is_eval and "runtime" not in lowered and "per_second" not in lowered and "epoch" not in lowered:
        return MetricKind.EVAL_METRIC
    return MetricKind.OTHER
