"""Every wait a person sits through says so: a first line within FIRST_S (unless the caller said it already), then a
progress line once it lasts PROGRESS_S and again at growing gaps (5, 10, 20, 40 s ..., at most MAX_GAP_S apart),
each with the time so far and what is known now (a job's state, the step a cleanup is at).

    with Waiting("job 12 to end (--wait)", said=True) as wait:
        while not ended():
            wait.detail = "RUNNING"
            time.sleep(poll)

A daemon thread writes the lines, so a wait inside one blocking call (a slow squeue, a cancel being confirmed) is
told as well as a polling loop."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

FIRST_S = 1.0  # the first line, when the caller has not said it: within 2 s of the start
PROGRESS_S = 5.0  # the first progress line
MAX_GAP_S = 60.0  # progress lines never further apart


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
                 first_s: float = FIRST_S, progress_s: float = PROGRESS_S, max_gap_s: float = MAX_GAP_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.detail = ""
        self.lines = 0  # progress lines written
        self._said = said or quiet
        self._quiet = quiet
        self._stream = stream
        self._first_s, self._max_gap_s = first_s, max_gap_s
        self._clock = clock
        self._started = clock()
        self._next = progress_s
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self, line: str) -> None:
        stream = self._stream or sys.stderr
        stream.write(line + "\n")
        stream.flush()

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
