"""Short-window evidence on the series beside the training loss (issue 41), WAITs only: each needs no earlier level
than the few points a pasted or cut log shows, and none is strong enough to stop a run alone.

- A swing: an evaluation or a loss-like series of the training lines that is no training loss (its name says lower is
  better: loss, perplexity, error, cost; positive values) whose newest value is >= `short_jump_ratio` (3 by default) x
  both the median and the least of its up to 7 points before: a validation perplexity going from 404 to 3214 in two
  evaluations. Not the training losses (the judged one and its siblings: an epoch mean, a loss term, a sampled batch
  loss): a tiny batch's loss swings by 10x in healthy runs, and the spike and short-window checks judge those.
- Train falls, evaluation rises: the key evaluation (lower is better) rose at each of its last two evaluations, the
  newest more than `eval_regress_rel` above its best, while the training loss fell over the same evaluations: the
  classic overfitting (or an evaluation broken by a change the training loss does not see). The 3-evaluation median of
  checks_eval.py cannot see it before its fourth evaluation after the best; this reads the raw values, hence a WAIT.
"""

from __future__ import annotations

import numpy as np

from guarded_sbatch.judge.findings import Finding, fmt, median
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.keys import Direction, key_words, lower_is_better_words
from guarded_sbatch.judge.policy import JudgePolicy
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason

_SWING_POINTS = 7
_NOT_A_LOSS = frozenset({"time", "speed", "eta", "lr", "rate", "memory", "mem"})


def _loss_like(key: str) -> bool:
    words = set(key_words(key))
    return bool(words & lower_is_better_words()) and not words & _NOT_A_LOSS


def check_any_swing(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    candidates = dict.fromkeys([*keys.eval_keys, *keys.watched])
    for key in candidates:
        if key == keys.train_loss or key in keys.loss_parts or key not in history or not _loss_like(key):
            continue
        if key in keys.directions and keys.directions[key] is not Direction.LOWER_IS_BETTER:
            continue
        steps, values = history.finite_series(key)
        before = values[-1 - _SWING_POINTS:-1]
        if len(before) < 2 or np.any(values[-1 - _SWING_POINTS:] <= 0):
            continue
        newest, level, least = float(values[-1]), float(median(before)), float(np.min(before))
        ratio = policy.short_jump_ratio
        if newest < ratio * level or newest < ratio * least:
            continue
        evidence = (f"{key} {fmt(newest)} at step {int(steps[-1])} after {fmt(level)} (median of its {len(before)} "
                    f"points before, least {fmt(least)}): x{newest / level:.3g} within {len(before) + 1} logged points")
        return Finding.wait(Reason.DIVERGENCE, f"a loss-like series swung up: {evidence}; no earlier level needed to "
                            "see it, too few points to call it: watching",
                            Anomaly("jump", key, int(steps[-1]), newest, evidence))
    return None


def check_train_falls_eval_rises(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    key = keys.key_metric
    if key is None or not keys.train_loss or keys.directions.get(key, "min") != "min":
        return None
    steps, values = history.finite_series(key)
    if len(values) < 3 or float(np.min(values)) <= 0:
        return None
    a, b, c = (float(v) for v in values[-3:])
    best = float(np.min(values))
    if not (a < b < c) or c <= (1 + policy.eval_regress_rel) * best:
        return None
    loss_steps, losses = history.finite_series(keys.train_loss)
    during = losses[(loss_steps >= int(steps[-3])) & (loss_steps <= int(steps[-1]))]
    if len(during) < 2 or not float(during[-1]) < float(during[0]):
        return None
    evidence = (f"{key} {fmt(a)}, {fmt(b)}, {fmt(c)} at steps {int(steps[-3])}, {int(steps[-2])}, {int(steps[-1])} "
                f"({(c / best - 1):.0%} above its best {fmt(best)}) while {keys.train_loss} fell from "
                f"{fmt(float(during[0]))} to {fmt(float(during[-1]))}")
    return Finding.wait(Reason.EVAL_REGRESSING, f"the evaluation rises while the training loss falls: {evidence}; "
                        "overfitting or a broken evaluation: watching",
                        Anomaly("eval_regressing", key, int(steps[-2]), c, evidence))
