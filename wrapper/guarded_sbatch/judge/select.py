"""Which logged keys are the training loss, the eval metrics, the LR, the grad norm, the loss scale."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.keys import Direction, KeyRole, Role, classify_key, key_words
from guarded_sbatch.judge.objective import NAN_WARNINGS_KEY, choose_objective, never_objective
from guarded_sbatch.judge.policy import JudgePolicy


# most common training-loss names first: used to break ties between several loss keys
_PREFERRED_LOSS_NAMES = ("loss", "train/loss", "train_loss", "loss/train", "lm loss", "lm_loss", "trl")
_TRAIN_WORDS = frozenset({"train", "training", "trn"})
_EVAL_WORDS = frozenset({"eval", "val", "valid", "validation", "test", "dev", "evaluation"})
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
    nan_counter: str | None = None  # Megatron's `number of nan iterations`: it prints no loss then
    overflow: str | None = None  # the text log's mark of an fp16 overflow event (sources/textlog_formats.py)
    loss_parts: tuple[str, ...] = ()  # the other training-loss series (a detector's loss terms, an epoch mean)
    loss_why: str = ""  # one line: which key was taken as the training loss, and why
    # which way the judged training loss improves: a series chosen by what it does may be a score (SI-SNR, PSNR)
    loss_direction: Direction = Direction.LOWER_IS_BETTER
    nan_warnings: str | None = None  # the text reader's count of a library's own inf/nan / overflow warnings
    # every other series of the training lines judged for NaN and explosions (checks_anyslot.py): not the optimizer's,
    # timing, throughput, memory or counters by name, nor the judged loss or an evaluation
    watched: tuple[str, ...] = ()
    loss_guessed: bool = False  # the judged loss is a guess that shows no learning (objective.Objective.guessed)

    @property
    def key_metric(self) -> str | None:
        return self.eval_keys[0] if self.eval_keys else None


def metric_direction(name: str) -> Direction:
    """'max' for accuracy-like names, else 'min' (losses, errors, perplexity)."""
    found = classify_key(name).direction
    if found is not None:
        return found
    lowered = name.lower()
    if "loss" in lowered or "err" in lowered or "ppl" in lowered or "perplexity" in lowered:
        return Direction.LOWER_IS_BETTER
    return Direction.HIGHER_IS_BETTER if _HIGHER_IS_BETTER.search(lowered) else Direction.LOWER_IS_BETTER


def _running_best(history: MetricHistory, key: str) -> bool:
    """A record of the past, not a reading (`best test acc`, `best_val_loss`): named so, and never worse than its
    own previous value. Flat by design, it is no evaluation to judge; it stays watched for NaN and explosions."""
    if "best" not in key_words(key):
        return False
    values = history.finite_series(key)[1]
    steps = np.diff(values)
    return len(values) < 2 or bool(np.all(steps >= 0) or np.all(steps <= 0))


def select_keys(history: MetricHistory, policy: JudgePolicy) -> RunKeys:
    roles: dict[str, KeyRole] = {key: classify_key(key) for key in history.keys()}

    def with_role(role: Role) -> list[str]:
        return [k for k, r in roles.items() if r.role is role]

    def most_points(keys: list[str]) -> str | None:
        if not keys:
            return None
        return max(keys, key=lambda k: (len(history.series(k)[0]), -_name_rank(k), _keeps_sign(k), -len(k), k))

    def _keeps_sign(key: str) -> bool:
        """A loss that is negative at some points and positive at others is a surrogate (a policy-gradient term): no
        direction to judge it by; one of one sign is preferred among equals."""
        values = history.finite_series(key)[1]
        return not (len(values) and float(values.min()) < 0 < float(values.max()))

    losses = with_role(Role.TRAIN_LOSS)
    train_loss = policy.train_loss_key or most_points(losses)
    objective = None if train_loss else choose_objective(history, roles)
    if objective is not None:
        train_loss = objective.key
    # a `train`-tagged accuracy (a run without validation) is not an evaluation
    evals = [k for k in with_role(Role.EVAL_METRIC)
             if k != train_loss and not _train_tagged(k) and not _running_best(history, k)]
    # eval losses before other eval metrics: the loss is what every run has and the judge knows best;
    # a loss before its perplexity (Megatron's text log prints both, TB/W&B often only the loss)
    evals.sort(key=lambda k: (not set(key_words(k)) & {"loss", "nll", "ce", "tel"},
                              bool(set(key_words(k)) & {"ppl", "perplexity"}), k))
    if policy.key_metric:
        evals = [policy.key_metric] + [k for k in evals if k != policy.key_metric]
    directions: dict[str, Direction] = {}
    for key in evals:
        found = roles[key].direction if key in roles else None
        if found is None:
            directions[key] = metric_direction(key)
        else:
            directions[key] = found
    if policy.key_metric and policy.key_metric_direction:
        directions[policy.key_metric] = policy.key_metric_direction
    skipped = with_role(Role.SKIPPED_STEPS)
    nan_counters = [k for k in skipped if "nan" in key_words(k)]
    preferred_skipped = [k for k in skipped if k not in nan_counters]
    overflows = [k for k in preferred_skipped if "overflow" in key_words(k)]
    loss_parts = tuple(k for k in losses if k != train_loss)
    judged = {train_loss, *evals, *with_role(Role.LEARNING_RATE), *with_role(Role.GRAD_NORM),
              *with_role(Role.LOSS_SCALE), *skipped}
    watched = tuple(k for k, role in roles.items()
                    if k not in judged and (k in loss_parts or not never_objective(k, role)))
    return RunKeys(
        watched=watched,
        train_loss=train_loss,
        eval_keys=tuple(evals),
        directions=directions,
        lr=most_points(with_role(Role.LEARNING_RATE)),
        grad_norm=most_points(with_role(Role.GRAD_NORM)),
        loss_scale=most_points(with_role(Role.LOSS_SCALE)),
        skipped=most_points(preferred_skipped),
        nan_counter=most_points(nan_counters),
        overflow=most_points(overflows),
        loss_parts=loss_parts,
        loss_why=objective.why if objective is not None else _loss_why(history, train_loss, losses, policy),
        loss_direction=objective.direction if objective is not None else Direction.LOWER_IS_BETTER,
        nan_warnings=NAN_WARNINGS_KEY if NAN_WARNINGS_KEY in history else None,
        loss_guessed=objective is not None and objective.guessed,
    )


def _loss_why(history: MetricHistory, chosen: str | None, losses: list[str], policy: JudgePolicy) -> str:
    """One line: which key is judged as the training loss, and why."""
    if chosen is None:
        return "no training-loss key among the logged keys (name one with --train-loss-key)"
    if policy.train_loss_key:
        return f"{chosen}: named by --train-loss-key / [judge] train_loss_key"
    others = [k for k in losses if k != chosen]
    why = f"{chosen}: a training-loss name ({len(history.series(chosen)[0])} points)"
    if not others:
        return why
    if _name_rank(chosen) < len(_PREFERRED_LOSS_NAMES) or "total" in key_words(chosen):
        reason = "the plainest / total name"
    else:
        reason = "the most points"
    shown = ", ".join(others[:4]) + (" ..." if len(others) > 4 else "")
    return f"{why}, {reason} among {len(losses)} (also {shown}: judged for NaN only)"


def _train_tagged(key: str) -> bool:
    words = set(key_words(key))
    return bool(words & _TRAIN_WORDS) and not words & _EVAL_WORDS


def _name_rank(key: str) -> int:
    """0.. for the most common names, then a total of several terms (`total_loss`, detectron2), then the rest."""
    lowered = key.lower()
    if lowered in _PREFERRED_LOSS_NAMES:
        return _PREFERRED_LOSS_NAMES.index(lowered)
    return len(_PREFERRED_LOSS_NAMES) + (0 if "total" in key_words(key) else 1)
