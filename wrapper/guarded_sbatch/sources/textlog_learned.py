"""Where the known formats (textlog_formats) and the log's learned shapes (textlog_shapes) meet.

A line the known formats read keeps their names and step; its template adds what they miss: the step axis when the
line has no step-like field the formats know (`Up. 116760`, a bare `76930 2.65`), the numbers they found no name for
(`value`, `value<k>`), and it takes out what is time (an ETA, a duration, a rate: never a series, never the step).
A line they do not read at all is read from its template alone.
A line whose shape has not repeated yet (a dict, a sample, a setting printed once) is held: its values become points
only once its shape is seen MIN_REPEATS times, so a line printed once never moves the step axis nor feeds a series.
Lines whose kind carries its own sequence (progress bars, HF's dicts, table rows under their header, loss-scale
events) are not held.

A training library's own warning that it found, skipped or stopped on a non-finite value (`found inf/nan`,
`NaN or Inf found in input tensor`, `Loss is nan, stopping training`, `overflow detected`) is counted:
`nan/inf warnings` = 1, 2, 3 ... at the step it was printed. A loss-scale event (`Gradient overflow. Skipping step,
... reducing loss scale to 0.5`) is not counted twice: the known formats record it as `loss_scale` and `overflow`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from guarded_sbatch.sources.textlog_formats import ParsedLine
from guarded_sbatch.sources.textlog_shapes import Reading, Template

WARNINGS_KEY = "nan/inf warnings"
_CLOCK_KEY = re.compile(r"\d:\d")
_NONFINITE_WORD = re.compile(r"(?<![A-Za-z])(?:nan|inf|infs|nans|infinite|infinity|non-finite|nonfinite|overflow)"
                             r"(?![A-Za-z])", re.IGNORECASE)
_FOUND_WORD = re.compile(r"(?<![A-Za-z])(?:skip\w*|found|detect\w*|encounter\w*|stopp?ing|stopped)(?![A-Za-z])",
                         re.IGNORECASE)
# what every word of _NONFINITE_WORD holds, lower-cased (on ASCII text no other case folding applies)
_NONFINITE_NEEDLES = ("nan", "inf", "finite", "overflow")
# kinds that carry their own sequence: never held
NOT_HELD = frozenset({"bar", "hf_dict", "hf_summary", "hf_header", "loss_scale", "overflow", "epoch_header", "table"})


def is_nonfinite_warning(message: str, parsed: ParsedLine | None) -> bool:
    """A library's words that it met a non-finite value (nan/inf/overflow + skipped/found/detected/encountered/
    stopping), on a line that is not a training record with finite readings (`number of nan iterations: 0`)."""
    head = message[:400]
    if head.isascii() and not _has_any(head.lower(), _NONFINITE_NEEDLES):
        return False  # none of its words: the case-blind regex would scan the whole line to say so
    if _NONFINITE_WORD.search(head) is None or _FOUND_WORD.search(head) is None:
        return False
    if parsed is None:
        return True
    if parsed.kind in ("loss_scale", "overflow"):
        return False  # a loss-scale event: its own `overflow` point counts the skipped step
    return all(not math.isfinite(v) for v in parsed.values.values())


def _has_any(text: str, needles: tuple[str, ...]) -> bool:
    for needle in needles:
        if needle in text:
            return True
    return False


def merge(parsed: ParsedLine | None, reading: Reading | None) -> ParsedLine | None:
    """The line as the known formats read it, completed by its template's reading (None: neither reads it). A line the
    formats read keeps their names and values; its template gives it the step axis when it has none (and takes the
    step back when the formats took a time for it). A line they do not read is read from its template alone."""
    if reading is None:
        return parsed
    if parsed is None or (not parsed.values and parsed.step is None and not parsed.kind):
        if not reading.values:
            return None
        return ParsedLine(values=dict(reading.values), step=reading.step, is_eval=reading.template.is_eval)
    if parsed.kind:
        return parsed  # a bar, a dict, an event: read by its own rules
    countdowns = {slot.name for slot in reading.template.slots.values() if slot.name and slot.countdown}
    parsed.values = {k: v for k, v in parsed.values.items()  # `eta 00:39` = 01; `remaining 990`, 980, ...
                     if not (":" in k and _CLOCK_KEY.search(k)) and k not in countdowns}
    for key, value in reading.values.items():  # a reading the formats found no name for (`objective≈2.41`)
        if key.startswith(("value", "eval/value")):
            continue
        named = key in parsed.values or any(k.endswith("/" + key) for k in parsed.values)  # `Reward/mean`
        if not named and (
                math.isnan(value) or value not in parsed.values.values()) and _is_glued(reading, key):
            parsed.values[key] = value
    if parsed.step is not None and parsed.step in reading.time_values:
        parsed.step = None  # a duration or an ETA the formats took for the step
    if parsed.step is None and reading.step is not None:
        parsed.step = reading.step
        parsed.values = {k: v for k, v in parsed.values.items()
                         if not (_same_word(k, reading.step_name) or (v == reading.step and reading.step_name is None))}
    return parsed


def _is_glued(reading: Reading, key: str) -> bool:
    """A named reading glued to its name in one token (`objective≈2.41`) and not a whole-number count: one the
    formats could not split (names in words before a number they read themselves, or left out on purpose)."""
    return any(slot.name == key and slot.glued and not slot.integer for slot in reading.template.slots.values())


def _same_word(key: str, name: str | None) -> bool:
    return name is not None and key.lower().strip(". ") == name.lower().strip(". ")


@dataclass
class Axis:
    """What the log's repeated training lines have shown so far: their series and their step's stride."""

    keys: set[str] = field(default_factory=set)
    last: int | None = None
    stride: int = 1

    def see(self, step: int, keys: Iterable[str]) -> None:
        if self.last is not None and step > self.last:
            self.stride = step - self.last
        self.last = step
        self.keys.update(keys)

    @property
    def known(self) -> bool:
        return bool(self.keys)

    def far_ahead(self, step: int) -> bool:
        return self.last is not None and step > self.last + max(1000, 100 * self.stride)


@dataclass
class EpochCounter:
    """A training line's own step counted within its epoch (`Epoch [3/5], Step [100/600]`, `batch 1/40` after each
    epoch's header), one per line shape: it starts again where it started while the run goes on. Each time it does,
    the run's step goes on past the highest it reached, so one epoch's points never land on another's (a NaN in epoch
    3 is not "followed" by epoch 1's finite values at later steps). A step that falls less far (a resume from a
    checkpoint) is kept."""

    first: int | None = None  # where the counter started this epoch
    last: int | None = None
    top: int = 0
    stride: int = 1
    seen: int = 0  # lines this epoch: one epoch is at least MIN_EPOCH_LINES (ranks printing one step each are not)
    offset: int = 0

    MIN_EPOCH_LINES = 3

    def step(self, raw: int) -> int:
        """The run's step of a training line whose own step is `raw`."""
        if self.last is not None and self.first is not None and raw < self.last and raw <= self.first \
                and self.seen >= self.MIN_EPOCH_LINES:
            self.offset += self.top - raw + self.stride
            self.first, self.top, self.seen = raw, raw, 0
        if self.first is None:
            self.first, self.top = raw, raw
        if self.last is not None and raw > self.last:
            self.stride = raw - self.last
        self.last, self.top, self.seen = raw, max(self.top, raw), self.seen + 1
        return self.offset + raw

    def at(self, raw: int) -> int:
        """The run's step of a line of this shape read late (held until its shape repeated): never a new epoch."""
        return self.offset + raw


def held(parsed: ParsedLine | None, template: Template | None, axis: Axis) -> bool:
    """Whether a line with numbers waits for its shape to repeat: a line the known formats do not read (its template
    names its slots), and, once the log's training lines are known, a line printed once whose step is far ahead of
    theirs, or that has no step and would feed their series (a sample, a dict printed out of sequence). A line with
    its own step in sequence (an epoch's summary) and an evaluation's line with its own series are read at once."""
    if template is None or template.established or not template.slots:
        return False
    if parsed is None:
        return True
    if parsed.kind in NOT_HELD or not (parsed.values or parsed.step is not None):
        return False
    if parsed.step is not None:
        return axis.known and axis.far_ahead(parsed.step)
    if axis.known:  # no step of its own: it would land in their series at their step (a sample, a dict printed once)
        return not axis.keys.isdisjoint(parsed.values)
    return True  # the log's opening: its template may give it a step; else it is read at the step it was printed at
