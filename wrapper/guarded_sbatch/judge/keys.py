"""Classify metric keys by role (training loss, eval metric, learning rate, ...) from common names.

Names vary by trainer (`loss`, `train/loss`, `train_loss`, `Loss/train`, `lm loss`, `eval/accuracy`,
`val/acc`, `gnorm`, ...). Classification normalises a key into words and matches them against a small
vocabulary; the user can override any key's role (and an eval metric's direction).
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from guarded_sbatch.core.errors import UsageError


class Role(enum.Enum):
    TRAIN_LOSS = "train_loss"
    EVAL_METRIC = "eval_metric"
    LEARNING_RATE = "learning_rate"
    GRAD_NORM = "grad_norm"
    LOSS_SCALE = "loss_scale"
    SKIPPED_STEPS = "skipped_steps"
    OTHER = "other"


class Direction(str, enum.Enum):
    """Which way a metric improves. A str enum: "min" / "max" compare equal to the members."""

    LOWER_IS_BETTER = "min"
    HIGHER_IS_BETTER = "max"


_DIRECTION_WORDS = {"higher": Direction.HIGHER_IS_BETTER, "max": Direction.HIGHER_IS_BETTER,
                    "lower": Direction.LOWER_IS_BETTER, "min": Direction.LOWER_IS_BETTER}


@dataclass(frozen=True)
class KeyRole:
    role: Role
    direction: Direction | None = None  # set for EVAL_METRIC (and TRAIN_LOSS: lower)


_EVAL_WORDS = {"eval", "val", "valid", "validation", "test", "dev", "tel", "evaluation"}
_TRAIN_WORDS = {"train", "training", "trl"}
_LOSS_WORDS = {"loss", "nll", "crossentropyloss", "crossentropy", "languagecrossentropy", "ce", "trl", "tel"}
_HIGHER_WORDS = {"acc", "accuracy", "acc1", "acc5", "top1", "top5", "f1", "bleu", "rouge", "rougel", "map",
                 "auc", "auroc", "precision", "recall", "prec", "em", "exact", "score", "iou", "miou",
                 "dice", "r2", "correlation", "hellaswag", "mauve", "ap", "ndcg", "mrr", "reward"}
_LOWER_WORDS = _LOSS_WORDS | {"ppl", "perplexity", "error", "err", "wer", "cer", "mse", "mae", "rmse", "bpc",
                              "bpb", "fid"}
_NOT_METRIC_WORDS = {"runtime", "samples", "second", "seconds", "steps", "per", "time", "epoch", "step",
                     "flos", "mem", "memory", "tps", "tflops", "mfu", "throughput", "tokens", "wall", "wps",
                     "ups", "wpb", "bsz", "it", "s", "ms", "lrm"}

def lower_is_better_words() -> frozenset[str]:
    """The words that name a metric that improves downwards (loss, perplexity, error...)."""
    return frozenset(_LOWER_WORDS | {"cost"})


_SPLIT = re.compile(r"[^0-9a-z]+")
_LR_GROUP = re.compile(r"lr\d{1,2}")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def key_words(key: str) -> list[str]:
    """`Loss/train` -> ['loss', 'train']; `eval_loss` -> ['eval', 'loss']; `gradNorm` -> ['grad', 'norm']."""
    return list(_words(key))


@functools.lru_cache(maxsize=1 << 14)
def _words(key: str) -> tuple[str, ...]:  # the judge asks again at every poll for the same few names
    return tuple(w for w in _SPLIT.split(_CAMEL.sub("_", key).lower()) if w)


@functools.lru_cache(maxsize=1 << 14)
def classify_key(key: str) -> KeyRole:
    """The role of a metric key from its name alone (a function of the name: kept for the next poll)."""
    words = key_words(key)
    if not words:
        return KeyRole(Role.OTHER)
    word_set = set(words)
    state = _training_state_role(word_set, "_".join(words))
    return state if state is not None else _metric_role(word_set)


def _training_state_role(word_set: set[str], joined: str) -> KeyRole | None:
    """Keys of the optimiser's state (skipped steps, loss scale, learning rate, gradient norm); None for others."""
    if word_set & {"skipped", "skip", "overflow", "overflows"} or "nan_iterations" in joined:
        return KeyRole(Role.SKIPPED_STEPS)
    if "loss_scale" in joined or "loss_scaler" in joined or joined in {"scale", "grad_scale", "scaler"}:
        return KeyRole(Role.LOSS_SCALE)
    if word_set & {"lr", "learning"} and not word_set & {"lrm"}:
        return KeyRole(Role.LEARNING_RATE)
    if joined.startswith("lr_") or joined.endswith("_lr") or any(_LR_GROUP.fullmatch(w) for w in word_set):
        return KeyRole(Role.LEARNING_RATE)  # `x/lr0` (YOLO's results.csv: the LR of parameter group 0)
    if word_set & {"gnorm", "gradnorm"} or "grad_norm" in joined or "gradient_norm" in joined \
            or joined in {"norm", "total_grad_norm"} or ("grad" in word_set and "norm" in word_set):
        return KeyRole(Role.GRAD_NORM)
    return None


_AP_AT = re.compile(r"m?ap\d{1,3}")  # YOLO's mAP50, mAP50-95 (`map50`), COCO's AP50 / AP75
_LOSS_SUFFIX = re.compile(r"[a-z]{1,6}loss")  # `closs`, `dloss`, `gloss`: a loss glued to its short name


def _metric_role(word_set: set[str]) -> KeyRole:
    """Losses and evaluation metrics (with their direction); OTHER for counters, timings and the rest."""
    if any(_AP_AT.fullmatch(w) for w in word_set):
        word_set = word_set | {"map"}
    glued = {w for w in word_set if _LOSS_SUFFIX.fullmatch(w)}
    if glued:
        word_set = word_set | {"loss"} | ({"val"} if any(w.startswith(("v", "val", "test")) for w in glued) else set())
    if word_set & _NOT_METRIC_WORDS and not word_set & (_LOWER_WORDS | _HIGHER_WORDS):
        return KeyRole(Role.OTHER)
    if "cost" in word_set:  # `train_cost`, `Cost`: a loss by another name (`time cost` is OTHER above)
        word_set = word_set | {"loss"}
    is_eval = bool(word_set & _EVAL_WORDS)
    if "ppl" in word_set or "perplexity" in word_set:
        return KeyRole(Role.EVAL_METRIC, Direction.LOWER_IS_BETTER) if is_eval else KeyRole(Role.OTHER)
    if word_set & _HIGHER_WORDS:
        return KeyRole(Role.EVAL_METRIC, Direction.HIGHER_IS_BETTER)
    if word_set & _LOSS_WORDS:
        if is_eval:
            return KeyRole(Role.EVAL_METRIC, Direction.LOWER_IS_BETTER)
        if word_set & {"aux", "balancing", "z", "router", "kl"}:
            return KeyRole(Role.OTHER)
        return KeyRole(Role.TRAIN_LOSS, Direction.LOWER_IS_BETTER)
    if is_eval and word_set & _LOWER_WORDS:
        return KeyRole(Role.EVAL_METRIC, Direction.LOWER_IS_BETTER)
    return KeyRole(Role.OTHER)


class KeyClassifier:
    """classify_key with user overrides: {key: Role or 'eval_metric:higher'-style strings}."""

    def __init__(self, overrides: Mapping[str, KeyRole | str] | None = None) -> None:
        self._overrides: dict[str, KeyRole] = {}
        for key, role in (overrides or {}).items():
            self._overrides[key] = role if isinstance(role, KeyRole) else parse_role(role)
        self._cache: dict[str, KeyRole] = {}

    def classify(self, key: str) -> KeyRole:
        found = self._overrides.get(key) or self._cache.get(key)
        if found is None:
            found = self._cache[key] = classify_key(key)
        return found

    def keys_with_role(self, keys: Iterable[str], role: Role) -> list[str]:
        return sorted(k for k in set(keys) if self.classify(k).role is role)

    def primary_train_loss(self, keys: Iterable[str]) -> str | None:
        """The training loss to judge: an override first, then the plainest name (`loss` over `train/lm_loss`)."""
        candidates = self.keys_with_role(keys, Role.TRAIN_LOSS)
        overridden = [k for k in candidates if k in self._overrides]
        pool = overridden or candidates
        if not pool:
            return None
        return min(pool, key=lambda k: (len(key_words(k)), "step" in key_words(k), "epoch" in key_words(k), k))


def parse_role(text: str) -> KeyRole:
    """'train_loss', 'eval_metric:higher', 'eval_metric:lower', 'learning_rate', ... -> KeyRole."""
    name, _, direction = text.strip().lower().partition(":")
    try:
        role = Role(name)
    except ValueError:
        choices = ", ".join(r.value for r in Role)
        raise UsageError(f"unknown metric role {text!r}: use one of {choices} (eval_metric:higher|lower)") from None
    if direction:
        if direction not in _DIRECTION_WORDS:
            raise UsageError(f"unknown direction in {text!r}: use higher or lower")
        return KeyRole(role, _DIRECTION_WORDS[direction])
    if role is Role.TRAIN_LOSS:
        return KeyRole(role, Direction.LOWER_IS_BETTER)
    if role is Role.EVAL_METRIC:
        return KeyRole(role, Direction.LOWER_IS_BETTER)
    return KeyRole(role)
