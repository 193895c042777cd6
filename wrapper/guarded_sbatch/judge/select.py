"""Which logged keys are the training loss, the eval metrics, the LR, the grad norm, the loss scale."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.policy import Direction, JudgePolicy

try:  # written by the sources engineer; the fallback keeps the judge usable until it lands
    from guarded_sbatch.sources.keys import MetricKind, classify_key
except ImportError:  # pragma: no cover - depends on the state of the tree
    from guarded_sbatch.judge._keys_fallback import MetricKind, classify_key  # type: ignore[assignment]

# most common training-loss names first: used to break ties between several loss keys
_PREFERRED_LOSS_NAMES = ("loss", "train/loss", "train_loss", "loss/train", "lm loss", "lm_loss", "trl")
_HIGHER_IS_BETTER = re.compile(
    r"acc|f1|bleu|rouge|auc|precision|recall|map\b|iou|exact_match|score|top1|top5|acc1|acc5|r2|dice",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RunKeys:
    train_loss: str | None
    eval_keys: tuple[str, ...]  # every eval loss / eval metric, key metric first
    directions: dict[str, Direction] = field(default_factory=dict)
    lr: str | None = None
    grad_norm: str | None = None
    loss_scale: str | None = None
    skipped: str | None = None

    @property
    def key_metric(self) -> str | None:
        return self.eval_keys[0] if self.eval_keys else None


def metric_direction(name: str) -> Direction:
    """'max' for accuracy-like names, else 'min' (losses, errors, perplexity)."""
    lowered = name.lower()
    if "loss" in lowered or "err" in lowered or "ppl" in lowered or "perplexity" in lowered:
        return "min"
    return "max" if _HIGHER_IS_BETTER.search(lowered) else "min"


def _kind_name(kind: object) -> str:
    return str(getattr(kind, "name", kind))


def select_keys(history: MetricHistory, policy: JudgePolicy) -> RunKeys:
    by_kind: dict[str, list[str]] = {}
    for key in history.keys():
        by_kind.setdefault(_kind_name(classify_key(key)), []).append(key)

    def most_points(keys: list[str]) -> str | None:
        if not keys:
            return None
        return max(keys, key=lambda k: (len(history.series(k)[0]), -_name_rank(k), k))

    train_loss = policy.train_loss_key or most_points(by_kind.get(MetricKind.TRAIN_LOSS.name, []))
    eval_losses = by_kind.get(MetricKind.EVAL_LOSS.name, [])
    eval_metrics = by_kind.get(MetricKind.EVAL_METRIC.name, [])
    eval_keys = [k for k in eval_losses + eval_metrics if k != train_loss]
    if policy.key_metric:
        eval_keys = [policy.key_metric] + [k for k in eval_keys if k != policy.key_metric]
    directions: dict[str, Direction] = {k: metric_direction(k) for k in eval_keys}
    if policy.key_metric and policy.key_metric_direction:
        directions[policy.key_metric] = policy.key_metric_direction
    return RunKeys(
        train_loss=train_loss,
        eval_keys=tuple(eval_keys),
        directions=directions,
        lr=most_points(by_kind.get(MetricKind.LR.name, [])),
        grad_norm=most_points(by_kind.get(MetricKind.GRAD_NORM.name, [])),
        loss_scale=most_points(by_kind.get(MetricKind.LOSS_SCALE.name, [])),
        skipped=most_points(by_kind.get(MetricKind.SKIPPED.name, [])),
    )


def _name_rank(key: str) -> int:
    lowered = key.lower()
    return _PREFERRED_LOSS_NAMES.index(lowered) if lowered in _PREFERRED_LOSS_NAMES else len(_PREFERRED_LOSS_NAMES)
