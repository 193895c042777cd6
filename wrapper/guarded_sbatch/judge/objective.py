"""The training objective when no series is named like a loss: a name is a hint, what a series does decides.

A log written by a tool the reader was never shown names its loss as it likes (`ppl`, `xent`, one-letter columns
`B C T`, `si-snr`, `value1`). select.py takes a series named like a training loss first; else this module looks at
what each series does:

1. an objective's name that is no loss word: perplexity and cross-entropy under short names (`ppl`, `xent`, `bpc`),
   a signal-quality score (`snr`, `si-snr`, `sdr`, `psnr`, `ssim`: higher is better), an objective named as such
   (`objf`: its direction from what it does), not tagged as an evaluation; a score that falls from its start is
   lower-is-better whatever its name says (a loss logged as -SI-SNR), an `objf` that rises is higher-is-better;
2. else the series that behaves as a training objective: logged at many steps (at least half as many points as the
   densest series of the training lines), positive, and falling from its start (the median of its last quarter
   below the median of its first by a few per cent), the largest of them (a total is at least each of its terms);
   with none falling, the densest positive series (higher is better when it rose from its start: nothing says it is
   a loss rather than a score; but a series that rose a thousandfold or went non-finite is blowing up, and a score
   never does: lower is better); with no finite series at all, the densest series non-finite at every point (at least
   3: a log that starts once the run is broken).

Never an objective, whatever it does: timing, throughput, learning rate, memory, loss scale, gradient norm, counters
(whole numbers that never fall), a copy of the step. The direction (higher is better) comes from the name (reward,
accuracy, BLEU, SNR/SI-SNR, PSNR, SSIM, mAP ...) and otherwise from behaviour: a series that rose from its start.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.keys import Direction, KeyRole, Role, key_words

# the text reader's count of a training library's own inf/nan / overflow warnings (issue 41 contract, point 3)
NAN_WARNINGS_KEY = "nan/inf warnings"

_OBJECTIVE_LOWER = frozenset({"ppl", "perplexity", "xent", "bpc", "bpb", "bpd", "nll", "mse", "mae", "rmse", "l1",
                              "l2", "kld", "elbo"})
_OBJECTIVE_HIGHER = frozenset({"snr", "sisnr", "sdr", "sisdr", "psnr", "ssim", "pesq", "stoi"})
# an objective's name that says nothing of its direction (Kaldi's `objf`, a log-likelihood): what it does decides
_OBJECTIVE_EITHER = frozenset({"objf", "objective"})
_NEVER = frozenset({
    "time", "eta", "sec", "secs", "second", "seconds", "ms", "s", "it", "its", "speed", "fps", "throughput", "tps",
    "wps", "ups", "wpb", "bsz", "samples", "sample", "tokens", "tok", "toks", "lr", "learning", "rate", "mem",
    "memory", "gb", "mb", "mib", "gib", "gpu", "cpu", "epoch", "epochs", "step", "steps", "iter", "iters",
    "iteration", "iterations", "batch", "batches", "elapsed", "duration", "runtime", "wall", "clock", "flos",
    "tflops", "mfu", "scale", "scaler", "norm", "gnorm", "clip", "count", "num", "n", "idx", "index", "id", "seed",
    "date", "hour", "hours", "day", "lrm", "per", "remaining", "left", "total_time", "data", "max", "warmup",
    "progress", "percent", "pct", "size", "len", "length",
})
_DB_WORDS = frozenset({"snr", "sisnr", "sdr", "sisdr", "psnr", "db"})
_EVAL_WORDS = frozenset({"eval", "val", "valid", "validation", "test", "dev", "evaluation"})
_FALL = 0.03  # a series falling from its start: the median of its last quarter this much below its first's
# a score never grows by orders of magnitude: a series that rose this many times its start level (or went non-finite
# after finite points) is an objective blowing up, lower is better whatever else it does
_EXPLODED = 1000.0


@dataclass(frozen=True)
class Objective:
    key: str
    direction: Direction
    why: str  # one line: why this series is judged as the training loss, and which it left out
    # a guess: no name says it is a loss and it neither falls nor rises (the densest positive series): no CONTINUE rests
    # on it alone (ordered_checks.py)
    guessed: bool = False


def _words(key: str) -> set[str]:
    words = set(key_words(key))
    joined = "".join(key_words(key))
    if joined in _OBJECTIVE_HIGHER:  # `si-snr`, `SI_SDR`: one word
        words.add(joined)
    return words


def is_decibel(key: str) -> bool:
    """A signal-to-noise score in decibels (SNR, SI-SNR, SDR, PSNR): 0 dB is the output no better than its noise."""
    return bool(_words(key) & _DB_WORDS)


def never_objective(key: str, role: KeyRole) -> bool:
    """Timing, throughput, LR, memory, loss scale, gradient norm, counters by name: never the training objective."""
    if key == NAN_WARNINGS_KEY or role.role not in (Role.OTHER, Role.TRAIN_LOSS):
        return True
    words = _words(key)
    if words & (_OBJECTIVE_LOWER | _OBJECTIVE_HIGHER | _OBJECTIVE_EITHER):
        return False
    return bool(words & _NEVER)


def _counter(values: np.ndarray, steps: np.ndarray) -> bool:
    """Whole numbers that never fall (an epoch or sample counter), or a copy of the step."""
    if len(values) >= 3 and np.all(values == np.round(values)) and np.all(np.diff(values) >= 0):
        return True
    return len(values) >= 3 and float(np.mean(values == steps)) >= 0.8


def _level_change(values: np.ndarray) -> float:
    """(median of the last quarter - median of the first quarter) / |median of the first quarter|."""
    q = max(1, len(values) // 4)
    head, tail = float(np.median(values[:q])), float(np.median(values[-q:]))
    return (tail - head) / max(abs(head), 1e-12)


def _exploded(values: np.ndarray) -> bool:
    """Rose to many times its start level, or went non-finite after finite points."""
    finite = np.isfinite(values)
    if not np.any(finite):
        return False
    if not np.all(finite[int(np.argmax(finite)):]):
        return True
    q = max(1, len(values) // 4)
    head = abs(float(np.median(values[:q])))
    return head > 0 and float(np.max(np.abs(values))) >= max(_EXPLODED * head, 10.0)  # a [0, 1] score never


def choose_objective(history: MetricHistory, roles: dict[str, KeyRole]) -> Objective | None:
    """The series judged as the training loss when none is named like one (see the module doc); None when no
    series behaves as one."""
    candidates, broken = _candidates(history, roles)
    if not candidates:
        return _never_finite(broken)
    named = [k for k in candidates if _words(k) & (_OBJECTIVE_LOWER | _OBJECTIVE_HIGHER | _OBJECTIVE_EITHER)]
    if named:
        return _by_name(max(named, key=lambda k: (len(candidates[k][0]), k)), candidates)
    densest = max(len(s) for s, _ in candidates.values())
    dense = {k: sv for k, sv in candidates.items() if len(sv[0]) >= max(3, densest / 2)}
    positive = {k: sv for k, sv in dense.items() if float(np.mean(sv[1][np.isfinite(sv[1])] > 0)) >= 0.9}
    if not positive:
        return None
    change = {k: _level_change(v[np.isfinite(v)]) for k, (_, v) in positive.items()}
    falling = [k for k in positive if change[k] <= -_FALL]
    if falling:
        # a total is at least each of its terms: the largest of the densest
        key = max(falling, key=lambda k: (len(positive[k][0]), float(np.nanmedian(positive[k][1])), k))
        how = f"falling from its start ({change[key]:+.0%}), {len(positive[key][0])} points"
        return Objective(key, Direction.LOWER_IS_BETTER, _why(key, how, candidates))
    key = max(positive, key=lambda k: (len(positive[k][0]), float(np.nanmedian(positive[k][1])), k))
    how = f"the densest positive series ({len(positive[key][0])} points, {change[key]:+.0%} since its start)"
    if change[key] >= _FALL and _exploded(positive[key][1]):
        blown = ", risen a thousandfold (or gone non-finite): an objective blowing up, lower is better"
        return Objective(key, Direction.LOWER_IS_BETTER, _why(key, how + blown, candidates))
    if change[key] >= _FALL:  # rising from its start, named as nothing: a score (accuracy) as likely as a loss
        return Objective(key, Direction.HIGHER_IS_BETTER, _why(key, how + ", rising: higher is better", candidates))
    return Objective(key, Direction.LOWER_IS_BETTER, _why(key, how, candidates), guessed=True)


def _candidates(history: MetricHistory, roles: dict[str, KeyRole]
                ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, int]]:
    """({key: (steps, values)} of the series that may be the objective, {key: points} of those never finite)."""
    candidates: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    broken: dict[str, int] = {}  # series non-finite at every point: a log that starts once the run is broken
    for key, role in roles.items():
        if role.role is not Role.OTHER or never_objective(key, role) or _words(key) & _EVAL_WORDS:
            continue
        steps, values = history.series(key)
        finite = np.isfinite(values)
        if not np.any(finite) and len(values) >= 3:
            broken[key] = len(values)
        if np.count_nonzero(finite) >= 2 and not _counter(values[finite], steps[finite]):
            candidates[key] = (steps, values)
    return candidates, broken


def _never_finite(broken: dict[str, int]) -> Objective | None:
    if not broken:
        return None
    key = max(broken, key=lambda k: (broken[k], k))
    others = sorted(k for k in broken if k != key)
    left = f" (also {', '.join(others[:4])}{' ...' if len(others) > 4 else ''})" if others else ""
    return Objective(key, Direction.LOWER_IS_BETTER, f"{key}: no series named like a loss; judged by what it does: "
                     f"non-finite at every one of its {broken[key]} points, the densest such series{left}")


def _by_name(key: str, candidates: dict[str, tuple[np.ndarray, np.ndarray]]) -> Objective:
    values = candidates[key][1]
    moved = _level_change(values[np.isfinite(values)])
    higher = bool(_words(key) & _OBJECTIVE_HIGHER)
    # what it does wins over its name: a score logged as its negative (a loss of -SI-SNR) falls
    if higher and moved <= -_FALL:
        higher, what = False, "a score's name, but falling from its start: lower is better"
    elif not higher and moved >= _FALL and _words(key) & _OBJECTIVE_EITHER:
        if _exploded(values):
            what = "risen a thousandfold from its start (or gone non-finite): an objective blowing up, lower is better"
        else:
            higher, what = True, "an objective's name, rising from its start: higher is better"
    else:
        what = "a signal-quality score (higher is better)" if higher else "an objective's name (lower is better)"
    direction = Direction.HIGHER_IS_BETTER if higher else Direction.LOWER_IS_BETTER
    how = f"{what}, {len(candidates[key][0])} points, {moved:+.0%} since its start"
    return Objective(key, direction, _why(key, how, candidates))


def _why(key: str, how: str, candidates: dict[str, tuple[np.ndarray, np.ndarray]]) -> str:
    others = [k for k in candidates if k != key]
    shown = ", ".join(others[:4]) + (" ..." if len(others) > 4 else "")
    left = f" (left out: {shown})" if others else ""
    return f"{key}: no series named like a loss; judged by what it does: {how}{left}"
