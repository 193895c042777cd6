"""`guarded-sbatch monitor`'s live view: the sidecar's loop, with a heartbeat line between its reports — the step,
the time and the decision, after a poll that printed nothing else, at most every HEARTBEAT_S — so a healthy run
whose decision does not change still shows that it is watched. On for a terminal, or when asked (`--heartbeat`);
never into a pipe unless asked. Each line is fitted to the terminal by the one wrapping rule (core/waiting.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TextIO

from guarded_sbatch.core.waiting import fit, terminal_width
from guarded_sbatch.sidecar.loop import Sidecar
from guarded_sbatch.sidecar.plan import WatchPlan

HEARTBEAT_S = 5.0


def wants_heartbeat(asked: bool | None, out: TextIO) -> bool:
    """--heartbeat / --no-heartbeat win; else on for a terminal only."""
    if asked is not None:
        return asked
    isatty = getattr(out, "isatty", None)
    return bool(isatty is not None and isatty())


class LiveView(Sidecar):
    def __init__(self, settings: WatchPlan, scheduler: Any, out: TextIO, *, every_s: float = HEARTBEAT_S,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(settings, scheduler, out, clock=clock)
        self._every_s = every_s
        self._said_at = clock()

    def emit(self, text: str) -> None:
        super().emit(text)
        self._said_at = self.clock()

    def poll_once(self) -> int | None:
        code = super().poll_once()
        if code is None:
            self._heartbeat()
        return code

    def _heartbeat(self) -> None:
        now = self.clock()
        if now - self._said_at < self._every_s:
            return
        state = self.state
        step = f"step {state.last_step}" if state.last_step is not None else "no step yet"
        decision = f"{state.last_decision} {state.last_reason}" if state.last_decision else "no decision yet"
        report = state.next_full_report_at
        upcoming = f"; next full report {datetime.fromtimestamp(report).strftime('%H:%M')}" if report > now else ""
        line = f"  {datetime.fromtimestamp(now).strftime('%H:%M:%S')}  {step}  {decision}{upcoming}"
        self.emit(fit(line, terminal_width(self.out)) + "\n")
