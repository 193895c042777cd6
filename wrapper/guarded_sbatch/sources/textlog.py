"""Incremental reader of a training run's text log (stdout) (and, from trainer_state.py, HF's trainer_state.json).

Only complete records are parsed: bytes after the last newline are kept for the next read, so a line
being written is never half-read. Carriage returns (tqdm) split records too, and a progress bar's redraw is read as
soon as it is complete (the next `\r`, or its closing bracket), not when the line ends, and so does a traceback that
starts on a progress bar's line (the bar's final redraw after it never counts as training); ANSI colours are removed,
rank prefixes and duplicate lines from several ranks fold into one point per (key, step).

Steps: a line's own step-like field (counted on across epochs when it starts again each epoch:
textlog_learned.EpochCounter), else the step of the nearest earlier line that had one; a log
that never printed a step numbers its records 1, 2, 3... HF Trainer dicts take the step of HF's
training bar, else `epoch` x steps per epoch (from HF's `Num Epochs` / `Total optimization steps`
header) snapped to the logging interval, else their count. A loss-scale drop is recorded, with its
new value, at the step being computed when it was printed (the last completed step + 1; drops in a row with
no step completed between are one attempt each: + 2, + 3, ...).
A crash at the end of the log is a typed event (sources/points.CrashEvent), handed over by `take_crashes()` beside the
points: found (CONFIRMED, the reader's word), then DISMISSED if training goes on after it.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import replace
from pathlib import Path

from guarded_sbatch.sources.points import CrashEvent, CrashState, MetricPoint, newest_per_key_step
from guarded_sbatch.sources.base import OneFileSource
from guarded_sbatch.sources.textlog_crash import Crash, CrashTracker
from guarded_sbatch.sources.textlog_formats import ParsedLine, parse_line
from guarded_sbatch.sources.textlog_tables import table_header, table_row
from guarded_sbatch.sources.textlog_learned import WARNINGS_KEY, Axis, EpochCounter, held, is_nonfinite_warning, merge
from guarded_sbatch.sources.textlog_shapes import ShapeLearner, Template
from guarded_sbatch.sources.textlog_tokens import clean_line, find_bar, strip_headers
from guarded_sbatch.sources.files import check_regular, guarded_reader, read_data
from guarded_sbatch.sources.trainer_state import TrainerStateSource  # noqa: F401  re-exported

READ_BYTES = 16 * 1024 * 1024
MAX_RECORD_CHARS = 64 * 1024
# lines Slurm's own tools write into the job's output (srun, slurmstepd or slurmstepd-<node>, ...)
_SCHEDULER_LINE = re.compile(r"\s*(?:srun|slurmstepd|slurmd|sbatch|salloc|scontrol|scancel)(?:-[\w.-]{1,100})?(?:\[\d+\])?: ")
MAX_PENDING_BYTES = 1024 * 1024  # a "line" longer than this (no newline, no \r) is read as it is
MAX_BAR_BYTES = 4096
# a traceback printed right after a progress bar's last redraw starts on the bar's line (no newline before it)
_TRACEBACK_TEXT = "Traceback (most recent call last):"
_AT_TRACEBACK = re.compile(r"(?<=\S)(?=Traceback \(most recent call last\):)")


def _complete_up_to(data: bytes) -> int:
    """Where the complete records of `data` end. A line ends at its newline; a progress bar that redraws one line
    (tqdm writes `\r` + the bar) ends a redraw at the next `\r`, and its newest redraw is complete once it closes
    its bracket: a bar that stays on one line for a whole epoch (or a run that hangs after a NaN) is read as it is
    drawn, not when the line ends."""
    cut = data.rfind(b"\n") + 1
    last_cr = data.rfind(b"\r", cut)
    if last_cr >= 0:
        cut = last_cr + 1
        tail = data[cut:]
        if len(tail) < MAX_BAR_BYTES and tail.rstrip(b" ").endswith(b"]"):
            if find_bar(clean_line(tail.decode("utf-8", "replace"))) is not None:
                return len(data)
    return len(data) if len(data) - cut > MAX_PENDING_BYTES else cut


@guarded_reader
class TextLogSource(OneFileSource):
    """Metric points parsed from a trainer's log file, read incrementally."""

    kind = "textlog"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._offset = 0
        self._pending = b""
        self._last_step: int | None = None  # carried to lines without their own step
        self._ordinal = 0  # a log that never printed a step: its n-th record is step n
        self._last_step_per_key: dict[str, int] = {}
        self._table: list[str] | None = None  # column names of a whitespace table (ultralytics)
        self._hf = _HFSteps()
        self._crashes = CrashTracker()
        self._crash: CrashEvent | None = None  # the crash that is the log's last word so far
        self._crash_events: list[CrashEvent] = []  # changes not taken yet (take_crashes)
        self._overflow_step: int | None = None
        self._last_bar: tuple[int | None, int] | None = None  # (step, count) of the newest progress-bar redraw
        self._scale_drops: tuple[int | None, int] = (None, 0)  # (last completed step, loss-scale drops since it)
        self._bar_shows: dict[str, float] = {}  # what the progress bar's postfix shows now, per key
        self._shapes = ShapeLearner()  # the log's own line templates (textlog_shapes)
        self._warnings = 0  # a library's nan/inf/overflow warnings so far
        self._held: list[tuple[Template, str, int | None]] = []  # lines whose shape has not repeated yet (and the
        # step they would have carried then), in order
        self._unread: set[str] = set()  # held lines the known formats did not read when they were printed
        self._axis = Axis()  # the series and steps of the log's repeated lines (its training lines)
        self._epochs: dict[int, EpochCounter] = {}  # per line shape: its own step counted within its epoch
        self._releasing = False  # lines read late (their shape repeated) are not the counter's sequence

    def log_file(self) -> Path | None:
        return self.path

    def read_new(self) -> list[MetricPoint]:
        chunk = self._read_bytes()
        if not chunk:
            return []
        data = self._pending + chunk
        cut = _complete_up_to(data)
        self._pending = data[cut:]
        text = data[:cut].decode("utf-8", "replace")
        points: list[MetricPoint] = []
        repeated = False
        for physical_line in text.split("\n"):
            for line in physical_line.split("\r"):
                if _TRACEBACK_TEXT in line:  # `...10.81it/s]Traceback (most recent call last):`: two records
                    for piece in _AT_TRACEBACK.split(line):
                        repeated |= self._parse(piece, points)
                else:
                    repeated |= self._parse(line, points)
        if not self._axis.known and self._held:
            repeated |= self._release(points)  # no shape has repeated yet: every line is read as it is
        self._sync_crash(end_of_read=True)  # a log that ends inside a traceback
        return newest_per_key_step(points) if repeated else points

    def _read_bytes(self) -> bytes:
        try:
            size = check_regular(self.path).st_size
            if size < self._offset:  # truncated or replaced: start again
                self.__init__(self.path)  # type: ignore[misc]
            if size == self._offset:
                return b""
            read = read_data(self.path, self._offset, READ_BYTES)  # a hole is skipped (and named), never read
        except OSError:
            return b""
        if read.start > self._offset:
            self._pending = b""  # the bytes before a hole end there: no line runs across it
        self._offset = read.end
        return read.data

    def _parse(self, line: str, points: list[MetricPoint]) -> bool:
        # no trainer prints a record this long; a longer one is a dump, read over its first part
        cleaned = clean_line(line[:MAX_RECORD_CHARS])
        if not cleaned.strip():
            return False
        if self._crashes.feed(cleaned, self._last_step):
            self._sync_crash()
            return False
        if self._crash is not None and self._crashes.crash is None:
            self._sync_crash()  # a traceback cut off by an ordinary line was no crash after all: it is taken back
        return self._parse_record_line(cleaned, points)

    def _parse_record_line(self, cleaned: str, points: list[MetricPoint], released: Template | None = None) -> bool:
        if ": " in cleaned and cleaned.lstrip()[:1] == "s" and _SCHEDULER_LINE.match(cleaned):
            return False  # `srun: error: n1: task 0: Terminated`, `... StepId=8256.0`: Slurm's words, not metrics
        message = strip_headers(cleaned)
        template = released or self._shapes.observe(message)
        repeated = False
        if released is None and template is not None and template.held and template.established:
            repeated |= self._release(points, template)  # its first lines, read now that the shape repeats
        parsed = self._parse_record(cleaned, message)
        if released is not None and parsed is not None and parsed.kind == "table" and cleaned in self._unread:
            return repeated  # a row printed before its table's header: no column names then, none now
        reading = self._shapes.read(template, message) if template is not None and template.established else None
        parsed = merge(parsed, reading)
        if is_nonfinite_warning(message, parsed):
            self._count_warning(parsed, points)
        if released is None and template is not None and held(parsed, template, self._axis):
            template.held += 1  # printed once so far: no series, no step until its shape repeats
            self._held.append((template, cleaned, self._last_step))
            if parsed is None:
                self._unread.add(cleaned)
            return repeated
        if released is None and template is not None and template.held:
            repeated |= self._release(points, template)  # read now: its shape's earlier lines are read first
        return self._record(parsed, template, points) or repeated

    def _record(self, parsed: ParsedLine | None, template: Template | None, points: list[MetricPoint]) -> bool:
        """A line's readings as points (events and headers kept as state); True when a key did not move past its
        last step."""
        if parsed is None or self._is_exit_redraw(parsed):
            return False
        if parsed.kind in ("hf_header", "hf_summary", "overflow"):
            self._hf.header.update(parsed.header)
            self._overflow_step = parsed.step  # `Grad overflow on iteration N`: the scale line follows
            return False
        own_step = parsed.step is not None or (parsed.kind == "hf_dict" and not parsed.is_eval)
        if self._crashes.crash is not None:
            if not own_step:
                return False  # written after the crash (launcher summaries...): not training metrics
            self._crashes.clear()
        self._sync_crash()
        step = self._step_of(parsed, template)
        if parsed.kind == "epoch_header" or not parsed.values:
            return False
        if template is not None and template.established:
            self._axis.see(step, parsed.values)
        return self._add_values(parsed, step, points)

    def _release(self, points: list[MetricPoint], template: Template | None = None) -> bool:
        """Read the held lines of `template` (None: all of them), in the order they were printed; a line with no step
        of its own takes the step it would have carried when it was printed."""
        repeated = False
        kept: list[tuple[Template, str, int | None]] = []
        now = self._last_step
        self._releasing = True
        for shape, line, carried in self._held:
            if template is None or shape is template:
                shape.held -= 1
                self._last_step = carried
                repeated |= self._parse_record_line(line, points, released=shape)
            else:
                kept.append((shape, line, carried))
        self._releasing = False
        if now is not None:
            self._last_step = now
        self._held = kept
        self._unread &= {line for _, line, _ in kept}
        return repeated

    @property
    def lines_held_out(self) -> int:
        """Lines with numbers whose shape has not repeated: printed once (a sample, a setting), never a series."""
        return len(self._held)

    def _count_warning(self, parsed: ParsedLine | None, points: list[MetricPoint]) -> None:
        """A library said it met a nan/inf (or skipped a step for it): one more, at the step being computed."""
        self._warnings += 1
        step = parsed.step if parsed is not None and parsed.step is not None else self._last_step
        if step is None:
            step = self._hf.bar_step if self._hf.bar_step is not None else self._ordinal + 1
        points.append(MetricPoint(step, parsed.wall_time if parsed else 0.0, WARNINGS_KEY, float(self._warnings)))

    def _is_exit_redraw(self, parsed: ParsedLine) -> bool:
        """Follow the progress bar; True for its last redraw as the program exits, after the traceback (not
        training)."""
        if parsed.bar is None:
            return False
        bar, self._last_bar = self._last_bar, (parsed.step, parsed.bar[0])
        if self._crashes.crash is not None and bar == self._last_bar:
            return True
        self._hf.see_bar(*parsed.bar)
        return False

    def _add_values(self, parsed: ParsedLine, step: int, points: list[MetricPoint]) -> bool:
        """The line's values as points at step; True when a key did not move past its last step."""
        repeated = False
        for key, value in parsed.values.items():
            if parsed.kind == "bar":
                shown = self._bar_shows.get(key)
                self._bar_shows[key] = value
                if shown is not None and shown == value and math.isfinite(value):
                    # the bar redrawn with the finite value it showed: a display of the last reading, not a new one (a
                    # NaN shown again is kept: the run went on and its loss is still not a number)
                    continue
            previous = self._last_step_per_key.get(key)
            if previous is None or step > previous:
                self._last_step_per_key[key] = step
            else:
                repeated = True
            points.append(MetricPoint(step, parsed.wall_time, key, value))
        return repeated

    def _parse_record(self, cleaned: str, message: str) -> ParsedLine | None:
        bar = find_bar(message)
        before_bar = message[: bar.start()] if bar is not None else message
        columns = table_header(before_bar)
        if columns is not None:
            self._table = columns
            return None
        if self._table is not None:
            row = table_row(before_bar, self._table)
            if row is not None:
                row.kind = "table"
                return row
        return parse_line(cleaned, message)

    def _step_of(self, parsed: ParsedLine, template: Template | None = None) -> int:
        if parsed.kind == "hf_dict":
            step = self._hf.step_of(parsed, self._last_step)
            if not parsed.is_eval:
                self._last_step = step
            return step
        if parsed.kind == "loss_scale" and parsed.step is None and self._overflow_step is not None:
            step, self._overflow_step = self._overflow_step, None
            return step
        if parsed.kind == "loss_scale" and parsed.step is None:
            completed = self._hf.bar_step if self._hf.bar_step is not None else self._last_step
            if completed is None:
                return self._next_ordinal()
            # drops in a row with no step completed between (fairseq retries after each overflow): one attempt each
            last_completed, drops = self._scale_drops
            drops = drops + 1 if last_completed == completed else 0
            self._scale_drops = (completed, drops)
            return completed + 1 + drops
        if parsed.step is not None:
            if parsed.kind == "loss_scale":
                return parsed.step
            if parsed.kind:  # a bar, a dict, a table row: counted by its own rules (Lightning's epoch x batches)
                step = parsed.step
            elif parsed.is_eval:
                step = parsed.step
            else:  # a shape's counter starts again each epoch; another shape's (an epoch's summary) is no wrap of it
                counter = self._epochs.setdefault(id(template), EpochCounter())
                step = counter.at(parsed.step) if self._releasing else counter.step(parsed.step)
            self._last_step = step
            return step
        if self._last_step is not None:
            return self._last_step
        return self._next_ordinal()

    def _next_ordinal(self) -> int:
        self._ordinal += 1
        return self._ordinal

    def take_crashes(self) -> list[CrashEvent]:
        events, self._crash_events = self._crash_events, []
        return events

    def _sync_crash(self, *, end_of_read: bool = False) -> None:
        """Hand over the crash when one is found, and dismiss it when training went on after it. A traceback cut off
        is a crash only where the text read so far ends in it (`end_of_read`), and stays one while more of that
        traceback is read."""
        current = self._crash
        if current is None and self._crashes.crash is None and self._crashes.cut_off() is None:
            return  # no crash shown, none to take back (the common case: a training line)
        crash = self._crashes.crash or self._cut_off_crash(current, end_of_read)
        found = None
        if crash is not None:
            step = crash.step if crash.step is not None else (self._last_step or 0)
            found = CrashEvent(step, crash.exception, crash.evidence)
        if current is not None and found is not None and current.key == found.key:
            return
        if current is not None:  # gone (training went on) or replaced (a chained exception)
            self._crash_events.append(replace(current, state=CrashState.DISMISSED))
            self._crash = None
        if found is not None:
            self._crash = found
            self._crash_events.append(found)

    def _cut_off_crash(self, current: CrashEvent | None, end_of_read: bool) -> Crash | None:
        cut = self._crashes.cut_off()
        if cut is None or end_of_read or (current is not None and current.key == CrashEvent(0, cut.exception, cut.evidence).key):
            return cut
        return None


class _HFSteps:
    """HF Trainer console dicts carry no step: find it from the training bar, or from the epoch."""

    def __init__(self) -> None:
        self.header: dict[str, int] = {}
        self.bar_step: int | None = None
        self._bar_total: int | None = None
        self._count = 0
        self._first_raw: float | None = None
        self._interval: int | None = None
        self._last: int | None = None

    def see_bar(self, n: int, total: int, described: bool) -> None:
        if described:
            return  # `Map: 40%|...`, `Loading checkpoint shards: ...`: not the training bar
        planned = self.header.get("Total optimization steps")
        if self._bar_total is None and (planned is None or planned == total):
            self._bar_total = total
        if total == self._bar_total:
            self.bar_step = n

    def step_of(self, parsed: ParsedLine, carried: int | None) -> int:
        if parsed.is_eval:
            # at the training bar's step, else at its epoch's, else at the last training dict's
            epoch_step = self._from_epoch(parsed.values.pop("epoch", None), snap=False)
            for found in (self.bar_step, epoch_step, self._last, carried):
                if found is not None:
                    return found
            return self._count
        self._count += 1
        step = self._from_epoch(parsed.values.get("epoch"))
        if self.bar_step:
            step = self.bar_step
        self._last = step if step is not None else self._count
        return self._last

    def _from_epoch(self, epoch: float | None, snap: bool = True) -> int | None:
        epochs, total = self.header.get("Num Epochs"), self.header.get("Total optimization steps")
        if epoch is None or not math.isfinite(epoch) or not epochs or not total:
            return None
        raw = epoch * total / epochs
        if not snap:
            return round(raw)
        if self._first_raw is None:
            self._first_raw = raw
        elif self._interval is None and raw > self._first_raw:
            self._interval = max(1, round(raw - self._first_raw))
        if self._interval:
            return max(self._interval, round(raw / self._interval) * self._interval)
        return max(1, round(raw))
