"""A run the guard cannot judge, said loudly: what it saw, and the one option that would let it judge.

Two kinds of blind, each with its own fix:
  - the log has training lines, but none of their series is a loss the judge can read: name the loss (the likeliest
    series of those seen, else KEY);
  - no source at all (nothing read, or nothing with numbers in it): name the source.
The judge calls a one-shot read of training lines without a loss UNGUARDED (`unread_message`); the watcher adds the
time condition (a running job with no judged loss after a few minutes: sidecar/unguarded_time.py) and its own flags.
Pure: words from what was seen, nothing read here.
"""

from __future__ import annotations

import numpy as np

from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.keys import Role, classify_key, key_words

SHOWN_SERIES = 8  # series named in a message; the rest counted
# words of a series that is never a loss: timings, counters, speeds, memory, schedules (a duration is not a loss)
_NEVER_LOSS_WORDS = frozenset({
    "time", "times", "data", "eta", "elapsed", "duration", "sec", "secs", "second", "seconds", "s", "ms", "it", "its",
    "iter", "iters", "iteration", "step", "steps", "epoch", "epochs", "batch", "batches", "bsz", "wpb", "wps", "ups",
    "tps", "tokens", "token", "samples", "sample", "throughput", "speed", "mfu", "flops", "tflops", "mem", "memory",
    "gpu", "gb", "mb", "runtime", "wall", "clock", "timestamp", "lr", "rate", "momentum", "beta", "clip", "norm",
    "scale", "count", "num", "n", "id", "rank", "worker", "workers", "percent", "progress",
})
# words that say "a number to bring down" without a loss name the judge knows
_LOSS_LIKE_WORDS = frozenset({"ppl", "perplexity", "xent", "nll", "ce", "err", "error", "cost", "objective", "obj",
                              "bpc", "bpb", "mse", "mae", "rmse", "l1", "l2", "energy", "kl", "elbo"})
KEY_PLACEHOLDER = "KEY"
KEY_FLAG = "--train-loss-key"  # a one-shot read's (monitor) option naming the loss; a guarded launch's is its own


def seen_series(keys: list[str]) -> str:
    """`ppl, wps, lr` (at most SHOWN_SERIES, then how many more)."""
    shown = ", ".join(keys[:SHOWN_SERIES])
    more = len(keys) - SHOWN_SERIES
    return shown + (f" and {more} more" if more > 0 else "")


def likeliest_loss(history: MetricHistory) -> str | None:
    """The series most likely to be the run's loss when none has a loss name: one whose name says "lower is better"
    first, then one that is positive and fell from its first value, then the one with the most points; never a
    timing, counter, schedule or optimizer series. None when every series is one of those."""
    candidates = [key for key in history.keys() if _may_be_loss(key)]
    if not candidates:
        return None

    def rank(key: str) -> tuple[bool, bool, int, str]:
        values = history.series(key)[1]
        finite = values[np.isfinite(values)]
        fell = len(finite) >= 2 and bool(np.all(finite > 0)) and float(finite[-1]) < float(finite[0])
        return (not set(key_words(key)) & _LOSS_LIKE_WORDS, not fell, -len(values), key)

    return min(candidates, key=rank)


def _may_be_loss(key: str) -> bool:
    if classify_key(key).role in (Role.LEARNING_RATE, Role.GRAD_NORM, Role.LOSS_SCALE, Role.SKIPPED_STEPS):
        return False
    words = set(key_words(key))
    return bool(words) and not words & _NEVER_LOSS_WORDS


def key_fix(history: MetricHistory, flag: str) -> str:
    """`--train-loss-key ppl`: the option naming the loss, with the likeliest series (else KEY)."""
    return f"{flag} {likeliest_loss(history) or KEY_PLACEHOLDER}"


def unread_message(history: MetricHistory, flag: str, *, where: str = "the log") -> str:
    """Training lines read, no loss among their series: what was seen, and the option that names the loss."""
    keys = history.keys()
    steps = max((len(history.series(key)[0]) for key in keys), default=0)  # the longest series' logged steps
    return (f"{where} has training lines at {steps} steps but no loss the guard can read (series seen: "
            f"{seen_series(keys)}); name the loss with {key_fix(history, flag)}")


def no_source_message(found: str, flag: str) -> str:
    """Nothing read at all: what was looked at (`found`), and the option that names the source."""
    return f"no source: {found}; name where the run logs with {flag}"
