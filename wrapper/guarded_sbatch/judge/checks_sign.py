"""A loss below zero where its kind cannot be: a sign bug, a bad label, a broken loss term.

Some losses are sums of non-negative terms and cannot go below 0: a box / IoU / DFL loss, a classification or
objectness term, cross-entropy, MSE / L1, perplexity. A value below 0 in such a series means the loss itself is
broken (a box loss of -0.23 beside the run's mAP: ultralytics/ultralytics#21765), however normal the rest looks.
Other losses go below 0 by design, and are never judged here: the NLL of a continuous density (a Gaussian, a flow:
WaveGlow), an ELBO/KL reported as negative, a negative SI-SNR / SDR, a GAN's generator / discriminator / critic
losses, a contrastive or cosine loss with an offset (SimSiam's -0.96), an RL policy or entropy term, nnU-Net's
CE + (-Dice).

The kind is known two ways:
- by name (a hint, for any loss-like series: the training loss, its terms, an evaluation loss, a watched series):
  a word of the key in NON_NEGATIVE_WORDS (box_loss, loss_ce, xent, mse, ppl ...), and none in NEVER_WORDS (g / d /
  gen / disc / critic / adv, nll, elbo, kl, snr, contrastive, policy, entropy without cross ...); or
- by behaviour (only for the training loss and its terms, named like a loss with no hint either way): at least
  `min_loss_points` points all above 0 and steady (none below a quarter of their median), then a jump below 0 by
  at least half that level and by 4 x the series' typical change between points. A loss sliding smoothly through
  0 (a Gaussian NLL as the model grows confident) and a loss still swinging by orders of magnitude (a flow's first
  iterations) cross no such line.

Decision: a loss named as such and of a non-negative kind (`box_loss`, `loss_ce`), below 0 at every point read (at
least 2), is a STOP however few points there are: no loss of its kind ever reads so. Else a WAIT (reason
negative_loss) that names the series, its value and step; STOP once the series has been
below 0 at each of its last `negative_loss_points` logged points (it persists: not one odd batch), or when a series
with a positive level before is now as far below 0 as that level sat above it (a mirrored loss). A STOP here is not
a hard fact: with fewer than `min_loss_points` training-loss points it stays a WAIT (ordered_checks.py).
"""

from __future__ import annotations

import numpy as np

from guarded_sbatch.judge.findings import Finding, fmt, median
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.keys import Direction, key_words
from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Decision, Reason

# words that name a loss which is a sum of non-negative terms
NON_NEGATIVE_WORDS = frozenset({
    "box", "bbox", "giou", "ciou", "diou", "iou", "dfl", "cls", "obj", "rpn", "kpt", "kobj", "ce", "xent", "bce",
    "crossentropy", "crossentropyloss", "focal", "mse", "mae", "rmse", "l1", "l2", "smoothl1", "huber", "ppl",
    "perplexity", "bpc", "bpb", "ctc", "lm", "mlm",
})
# ... which also name a metric that may be negative (a mean GIoU lies in [-1, 1]): a hint only beside `loss`
_METRIC_TOO = frozenset({"giou", "ciou", "diou", "iou"})
# words that name a loss which may be negative by design: these win over any hint above
NEVER_WORDS = frozenset({
    "g", "d", "gen", "generator", "disc", "discriminator", "critic", "adv", "adversarial", "gan", "wgan", "gp",
    "nll", "elbo", "kl", "kld", "logp", "logprob", "likelihood", "ll", "snr", "sisnr", "sdr", "sisdr", "psnr", "db",
    "contrastive", "nce", "infonce", "cosine", "cos", "sim", "simsiam", "byol", "policy", "pg", "actor", "entropy",
    "reward", "return", "advantage", "surrogate", "objf", "objective", "dice", "score", "flow", "logdet",
})
_TOLERANCE = 1e-6  # below 0 by more than this (relative to the series' size): a printed -0.0 or a rounding is no sign
_STEADY = 0.25  # the positive points before a flip: none below this fraction of their median
_JUMP_DIFFS = 4.0  # a flip: a drop of at least this many typical changes between points


def _words(key: str) -> set[str]:
    words = set(key_words(key))
    joined = "".join(key_words(key))
    if joined in {"sisnr", "sisdr", "crossentropy", "smoothl1"}:
        words.add(joined)
    if {"cross", "entropy"} <= words:  # cross-entropy is a hint; entropy alone (a policy's bonus) is not
        words = (words - {"entropy"}) | {"crossentropy"}
    return words


def kind_by_name(key: str) -> bool | None:
    """True: the name says the loss cannot be negative; False: it may be by design; None: the name does not say."""
    words = _words(key)
    if words & NEVER_WORDS:
        return False
    if words & (NON_NEGATIVE_WORDS - _METRIC_TOO) or (words & _METRIC_TOO and "loss" in words):
        return True
    return None


def _below(values: np.ndarray) -> np.ndarray:
    size = float(np.max(np.abs(values))) if len(values) else 0.0
    return values < -_TOLERANCE * max(size, 1.0)


def _flip(values: np.ndarray, negative: np.ndarray, policy: JudgePolicy) -> tuple[int, float] | None:
    """(index, level before) of a positive, steady series' jump below 0; None when it crossed no such line."""
    first = int(np.argmax(negative))
    before = values[:first]
    if len(before) < policy.min_loss_points or float(np.min(before)) <= 0:
        return None
    level = float(median(before))
    if float(np.min(before)) < _STEADY * level or -float(values[first]) < 0.5 * level:
        return None
    typical = float(median(np.abs(np.diff(before))))
    if float(before[-1] - values[first]) < _JUMP_DIFFS * typical:
        return None
    return first, level


def _judge_series(history: MetricHistory, key: str, by_behaviour: bool, policy: JudgePolicy) -> Finding | None:
    named = kind_by_name(key)
    if named is False or (named is None and not by_behaviour):
        return None
    raw = history.series(key)[1]
    if not len(raw) or (np.isfinite(raw[-1]) and raw[-1] >= 0):
        return None  # the usual case, at every poll: the newest reading is not below 0 (no pass over the series)
    steps, values = history.finite_series(key)
    negative = _below(values)
    if not negative.any() or not negative[-1]:
        return None  # only the newest reading decides: a past dip that is over is no sign now
    first = int(np.argmax(negative))
    level: float | None = None
    if first and float(np.min(values[:first])) > 0:
        level = float(median(values[:first]))
    if named is None:
        flipped = _flip(values, negative, policy)
        if flipped is None:
            return None
        first, level = flipped
        why = f"{key} was above 0 at each of its {first} points before (about {fmt(level)}) and jumped below it"
    else:
        why = f"{key} is named as a loss that cannot be negative"
    held = len(values) - int(np.nonzero(~negative)[0][-1]) - 1 if (~negative).any() else len(values)
    newest, step = float(values[-1]), int(steps[-1])
    evidence = (f"{key} {fmt(newest)} at step {step}, below 0 at each of its last {held} logged point(s) since step "
                f"{int(steps[len(values) - held])} (first at step {int(steps[first])}: {fmt(float(values[first]))})")
    anomaly = Anomaly("negative_loss", key, int(steps[first]), float(values[first]), evidence)
    if named and "loss" in _words(key) and held == len(values) >= 2:
        return Finding.hard_stop(Reason.NEGATIVE_LOSS, f"loss negative where its kind cannot be: {evidence}; {why}, "
                                 "and it has been below 0 at every point read: never a loss of its kind", anomaly)
    if held >= policy.negative_loss_points:
        return Finding.stop(Reason.NEGATIVE_LOSS, f"loss negative where its kind cannot be: {evidence}; {why}; it "
                            f"persists ({policy.negative_loss_points} points decide)", anomaly)
    if level is not None and newest <= -level:
        return Finding.stop(Reason.NEGATIVE_LOSS, f"loss negative where its kind cannot be: {evidence}; {why}; as "
                            f"far below 0 as it sat above it ({fmt(level)}): a sign bug?", anomaly)
    return Finding.wait(Reason.NEGATIVE_LOSS, f"loss negative where its kind cannot be: {evidence}; {why} (a bad "
                        f"label, a sign bug, a broken loss term?); STOP if it stays below 0 for "
                        f"{policy.negative_loss_points} points", anomaly)


def check_negative_loss(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    """The first loss-like series below 0 where its kind cannot be (the training loss first, then its terms, the
    evaluation losses, the watched series); a STOP among them wins over a WAIT."""
    behaviour = [k for k in (keys.train_loss, *keys.loss_parts) if k]
    named_only = [k for k in (*keys.eval_keys, *keys.watched)
                  if k not in behaviour and keys.directions.get(k, Direction.LOWER_IS_BETTER) is Direction.LOWER_IS_BETTER]
    found = [f for f in (_judge_series(history, k, True, policy) for k in behaviour) if f is not None]
    found += [f for f in (_judge_series(history, k, False, policy) for k in named_only) if f is not None]
    if not found:
        return None
    return next((f for f in found if f.decision is Decision.STOP), found[0])
