"""The point model every source yields and the judge reads.

A point's `step` is a position on its series' x-axis, and a series' axis is one of `Axis`: training
steps (iterations, optimizer updates), epochs (Keras `epoch_loss` with step = epoch), or log calls
(W&B's `_step` when nothing step-like was logged). The axis is per key, not per point: a reader that
knows it exposes `axes() -> dict[str, Axis]` (keys it does not list are on `Axis.STEP`), so a window
"of 100 steps" is only ever counted on a step axis, and epoch or log-call series count points.
`MetricPoint` keeps exactly its four fields: the TensorBoard reader builds millions of them with
`tuple.__new__`, and every other source builds them positionally.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple


class Axis(str, Enum):
    STEP = "step"  # training steps / iterations / optimizer updates
    EPOCH = "epoch"  # one point per epoch (step = epoch number)
    LOG_CALL = "log_call"  # the count of log calls (W&B `_step` with nothing step-like logged)


# Names a trainer gives its step counter when it logs it as a value.
STEP_LIKE_KEYS = ("trainer/global_step", "train/global_step", "global_step", "iter", "step")


def axis_of_counter(name: str) -> Axis:
    """The axis a logged counter (a W&B step_metric, a step-like key) stands for."""
    last = name.rsplit("/", 1)[-1].lower()
    return Axis.EPOCH if last in ("epoch", "epochs") else Axis.STEP


class MetricPoint(NamedTuple):
    """One logged value. NaN and Inf are kept as they are. A named tuple: a million of them are
    built per second by the TensorBoard reader, and a tuple is the cheapest immutable record."""

    step: int
    wall_time: float  # epoch seconds; 0.0 when the source has none
    key: str
    value: float


def newest_per_key_step(points: list[MetricPoint]) -> list[MetricPoint]:
    """De-duplicate by (key, step): the newest value wins (latest wall time; on a tie, the later one).

    A resumed job repeats steps it had already logged. Order of first appearance is kept.
    """
    chosen: dict[tuple[str, int], int] = {}
    kept: list[MetricPoint] = []
    for point in points:
        slot = chosen.get((point.key, point.step))
        if slot is None:
            chosen[(point.key, point.step)] = len(kept)
            kept.append(point)
        elif point.wall_time >= kept[slot].wall_time:
            kept[slot] = point
    return kept


# a crash that says only that the program died, not why: the log ends inside a traceback, before its exception
CUT_TRACEBACK = "a Python traceback the log ends in before its exception line"


class CrashState(Enum):
    CONFIRMED = "confirmed"  # the log's last word and nothing more will come (a one-shot read, the job ended,
    # or the run's silence confirmed it): the judge STOPs (WAIT for an interruption from outside)
    PRINTED = "printed"  # printed while the job is live, not confirmed yet: the judge WAITs
    DISMISSED = "dismissed"  # training went on after it (a caught exception, a requeued or resumed run)


@dataclass(frozen=True)
class CrashEvent:
    """A crash the job printed (a traceback, CUDA OOM, an NCCL timeout): not a metric but an event, which a text-log
    reader hands over beside its points (`MetricSource.take_crashes`) and the judged history keeps by `key`."""

    step: int  # the last training step before it
    exception: str  # the root error (`torch.OutOfMemoryError: CUDA out of memory...`) or a label
    evidence: str  # the log line, as printed
    state: CrashState = CrashState.CONFIRMED

    @property
    def key(self) -> str:
        """Its identity: the same exception on the same line is the same crash."""
        return f"{self.exception} || {self.evidence}"


# Steps the judge handles: within ±2**53, so step differences never overflow int64 and every step is
# exact as a float too. Anything beyond (a 20-digit step, int64's extremes) is dropped with a note.
STEP_MIN = -(2**53)
STEP_MAX = 2**53
MAX_KEY_CHARS = 512


def sanitize_points(points: list[MetricPoint]) -> tuple[list[MetricPoint], list[str]]:
    """The points the judge can hold, and a note per kind of point dropped or clamped.

    Steps beyond ±2**53 (a 20-digit step, int64's extremes) are dropped (clamping would pin every later
    point behind a bogus maximum);
    values beyond float range become ±inf (a huge number stays "not finite", so it still stops a run);
    a non-finite or non-numeric wall time becomes 0.0. Anything else malformed is dropped.
    """
    lo, hi, longest, metric_point = STEP_MIN, STEP_MAX, MAX_KEY_CHARS, MetricPoint
    clean = [p for p in points if type(p) is metric_point and type(p[0]) is int and lo <= p[0] <= hi
             and type(p[3]) is float and type(p[1]) is float and -1e300 < p[1] < 1e300
             and type(p[2]) is str and 0 < len(p[2]) <= longest]
    if len(clean) == len(points):
        return clean, []  # the common case: one cheap pass
    kept: list[MetricPoint] = []
    notes: dict[str, int] = {}
    for point in points:
        repaired = _repaired_point(point, notes)
        if repaired is not None:
            kept.append(repaired)
    return kept, [f"{count} point(s) dropped or clamped: {why}" for why, count in notes.items()]


def _repaired_point(point: object, notes: dict[str, int]) -> MetricPoint | None:
    """The point as the judge can hold it (itself when it is clean), or None when it is dropped; a repair or a
    drop is counted in notes by its reason."""
    if type(point) is MetricPoint:
        step, wall, key, value = point
        if (type(step) is int and STEP_MIN <= step <= STEP_MAX and type(value) is float
                and type(wall) is float and -1e300 < wall < 1e300 and type(key) is str
                and 0 < len(key) <= MAX_KEY_CHARS):
            return point
    repaired, why = _repair(point)
    if why:
        notes[why] = notes.get(why, 0) + 1
    return repaired


def _repair(point: Any) -> tuple[MetricPoint | None, str]:
    """A malformed point made whole (key cut, huge int as inf, bad wall time as 0.0) or dropped (None), and
    why ("" when nothing worth a note was done)."""
    try:
        step, wall, key, value = point
    except (TypeError, ValueError):
        return None, "malformed point"
    step = _whole_step(step)
    if step is None:
        return None, "step not a whole number"
    if not STEP_MIN <= step <= STEP_MAX:
        return None, "step beyond ±2**53"
    if not isinstance(key, str) or not key:
        return None, "key not text"
    clean_value = _as_float(value)
    if clean_value is None:
        return None, "value not a number"
    clamped = type(value) is not float and clean_value in (float("inf"), float("-inf")) and isinstance(value, int)
    clean_wall = _as_float(wall)
    if clean_wall is None or clean_wall != clean_wall or clean_wall in (float("inf"), float("-inf")):
        clean_wall = 0.0
    if len(key) > MAX_KEY_CHARS:
        key = key[:MAX_KEY_CHARS]
    return MetricPoint(step, clean_wall, key, clean_value), "value beyond float range (kept as inf)" if clamped else ""


def _whole_step(step: object) -> int | None:
    if isinstance(step, int) and not isinstance(step, bool):
        return step
    try:
        return int(step)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None


def _as_float(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return float("inf") if value > 0 else float("-inf")
    try:
        return float(value)  # type: ignore[arg-type]  # numpy scalars, Decimal
    except (TypeError, ValueError, OverflowError):
        return None
