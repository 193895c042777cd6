"""What a person reads while the tool works. `tell` writes a message wrapped to the terminal (as is into a pipe or a
file); `Waiting` makes every wait a person sits through say so: a first line within FIRST_S (unless the caller said
it already), then a progress line once it lasts PROGRESS_S and again at growing gaps (5, 10, 20, 40 s ..., at most
MAX_GAP_S apart), each with the time so far and what is known now (a job's state, the step a cleanup is at).

    with Waiting("job 12 to end (--wait)", said=True) as wait:
        while not ended():
            wait.detail = "RUNNING"
            time.sleep(poll)

A daemon thread writes the lines, so a wait inside one blocking call (a slow squeue, a cancel being confirmed) is
told as well as a polling loop. `python -m guarded_sbatch.core.waiting` is `fit` as a filter (scripts/demo)."""

from __future__ import annotations

import re
import shutil
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

FIRST_S = 1.5  # the first line, when the caller has not said it: within 2 s of the start
PROGRESS_S = 5.0  # the first progress line
MAX_GAP_S = 60.0  # progress lines never further apart


def terminal_width(stream: TextIO) -> int | None:
    """The terminal's width when `stream` is one (COLUMNS wins, as for every program), else None."""
    isatty = getattr(stream, "isatty", None)
    return shutil.get_terminal_size((80, 24)).columns if isatty is not None and isatty() else None


def _fill(out: list[str], current: str, word: str, width: int, rest: str) -> str:
    """Add a word too long for any line, filling lines at its slashes (a path: each folder name stays whole, and so
    does a run's name in it) and only where no slash helps at the width; returns the unfinished last line."""
    for index, segment in enumerate(re.findall(r"[^/]*/|[^/]+$", word)):
        glue = " " if index == 0 and current.strip() else ""
        if current.strip() and len(current) + len(glue) + len(segment) > width:
            out.append(current)
            current, glue = rest, ""
        while len(current) + len(glue) + len(segment) > width:
            take = max(width - len(current) - len(glue), 1)
            out.append(current + glue + segment[:take])
            current, glue, segment = rest, "", segment[take:]
        current += glue + segment
    return current


# a word, or a command quoted in backticks with what is glued to it (`(follow it: `tail -f x.out`);`): one unit
_UNITS = re.compile(r"\S*`[^`]*`\S*|\S+")


def fit(text: str, width: int | None, *, indent: str | None = None) -> str:
    """Each line of `text` wrapped at spaces to `width` (the rest of a line indented two more spaces than it, or by
    `indent`); None: as is. Hyphens never break a line (run names hold them); a word goes whole to the next line when
    it fits there. A command in backticks is never split: too long for any line, it has a line of its own, wider
    than `width`, so that it can be copied whole."""
    if width is None:
        return text
    out: list[str] = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]
        rest = lead + "  " if indent is None else indent
        current = lead
        for word in _UNITS.findall(line):
            glue = " " if current.strip() else ""
            if len(current) + len(glue) + len(word) <= width:
                current += glue + word
            elif len(rest) + len(word) <= width or "`" in word:
                if current.strip():
                    out.append(current)
                    current = rest + word
                else:
                    current += word
            else:
                current = _fill(out, current, word, width, rest)
        out.append(current)
    return "\n".join(out)


def help_width() -> int:
    """The width a help text is fitted to: the terminal's, at most 80."""
    return min(shutil.get_terminal_size((80, 24)).columns, 80)


def fit_prose(text: str, width: int | None) -> str:
    """`fit` for a help text written with hard line breaks: the lines of a paragraph (unindented, up to a blank or
    an indented line: an example, a table row) are joined first, so they wrap as one."""
    def prose(line: str) -> bool:
        return bool(line.strip()) and not line.startswith(" ") and not line.endswith(":")

    lines: list[str] = []
    for line in text.splitlines():
        if lines and prose(line) and prose(lines[-1]):
            lines[-1] = f"{lines[-1]} {line}"
        else:
            lines.append(line)
    return fit("\n".join(lines), width)


def hanging(head: str, text: str, column: int, width: int) -> str:
    """A two-column line (`  --flag VALUE   what it does`, `  2    bad usage`): `text` wrapped by `fit` under
    `column`, after `head` padded to it (a head as wide as the column: the text starts on the next line)."""
    body = fit(text, max(width - column, 20), indent="").splitlines() or [""]
    first = [f"{head:<{column}}{body[0]}"] if len(head) < column else [head, " " * column + body[0]]
    return "\n".join([*first, *(" " * column + line for line in body[1:])])


class FittedStream:
    """A text stream that writes each whole line `fit` to `width` (a watch's reports on a terminal); a partial line
    waits for its end, or for `finish()`."""

    def __init__(self, inner: TextIO, width: int) -> None:
        self.inner, self.width, self._rest = inner, width, ""

    def write(self, text: str) -> int:
        lines = (self._rest + text).split("\n")
        self._rest = lines.pop()
        if lines:
            self.inner.write("".join(fit(line, self.width) + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def finish(self) -> None:
        if self._rest:
            self.inner.write(fit(self._rest, self.width))
            self._rest = ""
        self.inner.flush()

    def isatty(self) -> bool:
        return True


def tell(text: str, stream: TextIO | None = None) -> None:
    """One message for a person on stderr (or `stream`), wrapped to the terminal when it is one."""
    out = stream or sys.stderr
    out.write(fit(text, terminal_width(out)) + "\n")
    out.flush()


def elapsed_text(seconds: float) -> str:
    """7 s, 2 min 05 s, 1 h 03 min."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole // 60 % 60:02d} min"


class Waiting:
    """Tells a wait on `stream` (stderr by default) as it goes; `detail` (set by the waiting code) ends each line."""

    def __init__(self, what: str, *, said: bool = False, stream: TextIO | None = None, quiet: bool = False,
                 first_s: float | None = None, progress_s: float | None = None, max_gap_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """The times default to the module's FIRST_S, PROGRESS_S and MAX_GAP_S as they are when the wait starts."""
        self.what = what
        self.detail = ""
        self.lines = 0  # progress lines written
        self._said = said or quiet
        self._quiet = quiet
        self._stream = stream
        self._first_s = FIRST_S if first_s is None else first_s
        self._max_gap_s = MAX_GAP_S if max_gap_s is None else max_gap_s
        self._clock = clock
        self._started = clock()
        self._next = PROGRESS_S if progress_s is None else progress_s
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self, line: str) -> None:
        tell(line, self._stream)

    def tick(self) -> None:
        """Write what is due now (a polling loop may call it; the context manager's thread does)."""
        if self._quiet:
            return
        waited = self._clock() - self._started
        if not self._said and waited >= self._first_s:
            self._said = True
            self._write(f"guarded-sbatch: waiting for {self.what}")
        if waited >= self._next:
            detail = f": {self.detail}" if self.detail else ""
            self._write(f"guarded-sbatch: still waiting for {self.what} ({elapsed_text(waited)} so far){detail}")
            self.lines += 1
            self._next = waited + min(max(waited, 1.0), self._max_gap_s)

    def _run(self) -> None:
        while not self._done.wait(0.25):
            self.tick()

    def __enter__(self) -> Waiting:
        self._started = self._clock()
        if not self._quiet:
            self._thread = threading.Thread(target=self._run, name="guarded-sbatch-waiting", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)


if __name__ == "__main__":  # a filter: standard input, each line fitted to the terminal standard output is
    for text in sys.stdin:
        sys.stdout.write(fit(text.rstrip("\n"), terminal_width(sys.stdout)) + "\n")
        sys.stdout.flush()
