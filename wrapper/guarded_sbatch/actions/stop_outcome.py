"""What a stop did: the method, whether it took (checked), and the steps, for the evidence."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StopOutcome:
    method: str  # "stop_command" | "cancel" | "none" | "tmux" | "pid" | "ssh" | "target"
    ok: bool
    detail: str
    final_state: str | None = None
    ended_at: float | None = None  # epoch seconds when the job's processes were seen gone (a cancel that ended its steps)
    found: bool = True  # False: the target had already ended, so nothing was stopped (ok stays True: it is gone)
