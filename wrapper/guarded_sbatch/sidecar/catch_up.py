"""A one-shot judgment (`monitor --once`, `show`) reads the whole run, not the first poll's worth.

Each reader takes at most GUARDED_SBATCH_MAX_READ_MB per file per read (so a live poll stays short); a run read
once, after the fact, is read again and again until nothing new comes, so a run that ended in NaN after its
first 16 MB is not called healthy. The history keeps its own memory bounds (series cap, thinning) meanwhile.
Past MAX_ROUNDS reads the rest is left unread and the verdict says so.
"""

from __future__ import annotations

from typing import Any

from guarded_sbatch.judge.verdict import Verdict

MAX_ROUNDS = 256  # x 16 MB per file and read: 4 GB of one file
QUIET_ROUNDS = 2  # reads with nothing new in a row that mean "caught up" (one may be a chunk with no points)


def read_whole_run(sources: Any, max_rounds: int = MAX_ROUNDS) -> str:
    """Read `sources` (a SourceSet) until caught up; "" when it was, else a note saying what was left unread."""
    quiet = 0
    for _ in range(max_rounds):
        if sources.read():
            quiet = 0
        else:
            quiet += 1
            if quiet >= QUIET_ROUNDS:
                return ""
    return f"judged the first {max_rounds} reads of each file only; the rest of the run was not read"


def with_note(verdict: Verdict, note: str) -> Verdict:
    if not note:
        return verdict
    return Verdict(verdict.decision, verdict.reason, f"{verdict.message} ({note})", verdict.anomalies,
                   verdict.last_step, verdict.summary)
