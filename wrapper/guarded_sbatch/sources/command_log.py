"""A run's log read through a command whose stdout is the recent log (`ssh gpu07 tail -c 2000000 log`).

Each poll runs the command once (with a timeout, no shell). The output is a window onto the end of the
log, so successive windows overlap: the lines after the last lines seen before are the new ones. When
those lines are not in the window any more (the log was rotated, truncated or restarted, or more than a
window was written between two polls) the whole window is new. New complete lines are appended to a
local spool file that the ordinary text-log reader parses incrementally, so the parsing is exactly that
of a local log, and the spool is the log snippet of the evidence.

A command that fails or times out is a SourceError ("unreachable"): the judge answers WAIT for it,
never STOP. Only the last MAX_WINDOW_BYTES of what the command prints are kept (a `tail -n 100` of a log with a
3 GB hole and no newline prints 3 GB): a window cut so starts with a fragment, dropped, and the cut is noted.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from guarded_sbatch.core import door, file_trust
from guarded_sbatch.core.errors import CommandError
from guarded_sbatch.sources.points import CrashEvent, MetricPoint
from guarded_sbatch.core.runner import run_command_tail
from guarded_sbatch.sources.base import SourceError
from guarded_sbatch.sources.base import SourceBase
from guarded_sbatch.sources.textlog import TextLogSource

ANCHOR_LINES = 32  # how many of the last lines seen must match to find the overlap
DEFAULT_TIMEOUT_S = 30.0
MAX_SPOOL_BYTES = 64 * 1024 * 1024
_ZEROS = "\0" * 4096
MAX_WINDOW_BYTES = 16 * 1024 * 1024  # of one command's output: its last bytes
_BYTE_LIMIT = re.compile(r"^(?:-c|--bytes=?)(\+?)(\d+)([kKmMgG]?)$")


class CommandLogSource(SourceBase):
    """Metric points from the recent log printed by a command, read at every poll."""

    kind = "textlog"
    path: Path | None = None  # read through a command

    def __init__(self, command: str, spool_path: Path, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        try:
            self.argv = shlex.split(command)
        except ValueError as exc:
            raise SourceError(f"cannot split the log command {command!r}: {exc}") from None
        if not self.argv:
            raise SourceError("the log command is empty")
        self.command = command
        self.timeout_s = timeout_s
        self.spool_path = spool_path
        self._byte_limit = byte_limit_of(self.argv)
        self._seen_tail: list[str] = []
        door.make_private_dirs(spool_path.parent)
        door.write_atomic(spool_path, b"", 0o600)  # a fresh watch: the spool holds what this watch saw
        self._parser = TextLogSource(spool_path)

    def describe(self) -> str:
        return f"`{self.command}`"

    def log_file(self) -> Path | None:
        return self.spool_path

    def files_inspected(self) -> list[str]:
        return [f"command: {self.command}", str(self.spool_path)]

    def read_new(self) -> list[MetricPoint]:
        try:
            result, dropped = run_command_tail(self.argv, timeout=self.timeout_s, max_bytes=MAX_WINDOW_BYTES)
        except CommandError as exc:
            raise SourceError(f"unreachable: {exc}") from None
        if dropped:
            self.sanitize_notes = [*self.sanitize_notes, f"{self.describe()} printed {dropped + MAX_WINDOW_BYTES} "
                                   f"bytes; only its last {MAX_WINDOW_BYTES} were read"][-20:]
        if _ZEROS in result.stdout:  # a hole in the log, printed as zeros: damage, never healthy
            file_trust.note_damage(self.spool_path, f"{self.describe()} printed a run of zero bytes (a hole in the log?)")
        lines = complete_lines(result.stdout, byte_limit=0 if dropped else self._byte_limit)
        new, _ = new_lines(self._seen_tail, lines)
        if lines:
            self._seen_tail = lines[-ANCHOR_LINES:]
        if new:
            if _size(self.spool_path) > MAX_SPOOL_BYTES:
                # start the spool again: the reader sees it shrink and reads it from the start, i.e. only what follows
                door.write_atomic(self.spool_path, b"", 0o600)
            door.append(self.spool_path, ("\n".join(new) + "\n").encode("utf-8"), 0o600, own=True)
        return self._parser.read_new()

    def take_crashes(self) -> list[CrashEvent]:
        return self._parser.take_crashes()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def complete_lines(text: str, *, byte_limit: int | None) -> list[str]:
    """The window's complete lines: a last line without its newline is still being written (it comes
    whole at the next poll), and when the window is cut by a byte limit its first line is a fragment."""
    lines = text.split("\n")
    lines.pop()  # "" after a final newline, or the unfinished last line
    if byte_limit is not None and len(text.encode("utf-8", "replace")) >= byte_limit and lines:
        lines.pop(0)
    return lines


def new_lines(seen_tail: list[str], window: list[str]) -> tuple[list[str], bool]:
    """The lines of window after the last occurrence of the longest run of seen_tail's last lines
    found in it, and whether such an overlap was found (no overlap: every line is new)."""
    if not seen_tail:
        return window, False
    for size in range(min(len(seen_tail), ANCHOR_LINES), 0, -1):
        anchor = seen_tail[-size:]
        end = _last_occurrence(window, anchor)
        if end is not None:
            return window[end:], True
        if size <= 2:
            break  # one or two common lines (a blank, a banner) do not prove an overlap
    return window, False


def _last_occurrence(window: list[str], anchor: list[str]) -> int | None:
    """The index just after the last place anchor occurs in window, or None."""
    size = len(anchor)
    last = anchor[-1]
    for end in range(len(window), size - 1, -1):
        if window[end - 1] == last and window[end - size:end] == anchor:
            return end
    return None


def byte_limit_of(argv: list[str]) -> int | None:
    """N of a `tail -c N` in the command (the window is then cut mid-line at its start); also inside
    a remote command given to ssh as one word."""
    words: list[str] = []
    for word in argv:
        try:
            words.extend(shlex.split(word) if " " in word else [word])
        except ValueError:
            words.append(word)
    for index, word in enumerate(words):
        candidate = word
        if word in ("-c", "--bytes") and index + 1 < len(words):
            candidate = f"-c{words[index + 1]}"
        match = _BYTE_LIMIT.match(candidate)
        if match and not match.group(1):
            scale = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match.group(3).lower()]
            return int(match.group(2)) * scale
    return None
