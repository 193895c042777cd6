"""A log that ends in a fatal error (traceback, CUDA OOM, NCCL timeout, fp16 scale at its minimum...):
the run is dead or dying, so there is nothing to keep alive. The crash is a typed event of the history
(history.CrashEvent): CONFIRMED is a STOP; PRINTED (a live job, not yet confirmed by its silence;
sidecar/crash_confirm.py) is a WAIT; DISMISSED (training went on after it) is nothing.

A run ended by a signal from outside is not broken: Ctrl-C (`KeyboardInterrupt`), torchrun's
`SignalException` when the launcher template's checkpoint signal arrives before the time limit, a
preemption, a scancel or the time limit itself (slurmstepd's `CANCELLED`). Such a job may be requeued or
resumed, and the scheduler ends it without us; cancelling it would only take its requeue away. That ending
is a WAIT (`interrupted`), and any other STOP finding still wins."""

from __future__ import annotations

import re

from guarded_sbatch.sources.points import CUT_TRACEBACK, CrashState
from guarded_sbatch.judge.findings import Finding
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.verdict import Anomaly, Reason

_INTERRUPTION = re.compile(
    r"^(?:[\w.]*\.)?(?:KeyboardInterrupt|SignalException)\b"
    r"|^slurmstepd(?:-[\w.-]+)?: error: (?!.*oom[-_ ]?kill)(?=.*\bCANCELLED\b)",
    re.IGNORECASE,
)


def is_interruption(exception: str) -> bool:
    """Whether a crash label is a signal from outside (see the module doc), not a failure of the run."""
    return _INTERRUPTION.search(exception) is not None


def cause_unknown(history: MetricHistory) -> bool:
    """The open crash says only that the program died (its traceback cut off): a metric fault found beside it
    says why, and goes first."""
    event = history.open_crash()
    return event is not None and event.exception == CUT_TRACEBACK


def check_crashed(history: MetricHistory) -> Finding | None:
    """STOP for a crash, WAIT for an interruption or an unconfirmed crash, None when the log ends in neither."""
    event = history.open_crash()
    if event is None:
        return None
    step, exception, evidence = event.step, event.exception, event.evidence
    # an interruption is one at once, confirmed or not (a requeued job waiting for its restart: slurmstepd's
    # `CANCELLED ... DUE TO JOB REQUEUE`)
    if is_interruption(exception):
        return Finding.wait(
            Reason.INTERRUPTED,
            f"interrupted: {exception} (a signal from outside: Ctrl-C, the checkpoint signal before the time limit, "
            "a preemption or a scancel); not cancelling a run that may be requeued or resumed",
            Anomaly("interrupted", "log", step, None, evidence),
        )
    if event.state is CrashState.PRINTED:
        return Finding.wait(
            Reason.CRASHED,
            f"the job's log ends in {exception}; not stopping yet: a caught exception's traceback is followed by "
            "more training, a crash by silence",
            Anomaly("crash_unconfirmed", "log", step, None, evidence),
        )
    return Finding.stop(Reason.CRASHED, f"crashed: {exception}", Anomaly("crashed", "log", step, None, evidence))
