"""Fatal endings of a training log: Python tracebacks and the known fatal lines of trainers,
launchers and Slurm (CUDA OOM, NCCL watchdog timeouts, fp16 loss scale at its minimum, ...).

The tracker sees every line in order. Lines of a traceback (frames, source, carets, the exception)
are never metrics. The first fatal line after the last training record is the crash; a later
training record with its own step (a requeued or resumed run) clears it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from guarded_sbatch.sources.textlog_tokens import strip_rank_prefix

MAX_EVIDENCE = 400

# (label, needles, pattern): a needle (a plain substring test, fast on any line) before the regex;
# searched in lines outside tracebacks too (launchers and C++ print these bare)
_FATAL_LINES: list[tuple[str, tuple[str, ...], re.Pattern[str]]] = [
    ("NCCL timeout", ("Watchdog caught", "NCCL"),
     re.compile(r"Watchdog caught collective operation timeout|NCCL (?:communicator|watchdog)"
                r".{0,80}(?:timeout|timed out|aborted)", re.IGNORECASE)),
    ("loss scale at minimum", ("loss scale",),
     re.compile(r"Current loss scale already at minimum|Minimum loss scale reached")),
    ("CUDA out of memory", ("out of memory", "OutOfMemory", "ALLOC_FAILED"),
     re.compile(r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED")),
    ("NaN loss", ("Invalid loss", "Loss became"),
     re.compile(r"Invalid loss, terminating training|Loss became infinite or NaN at iteration")),
    ("aborted", ("terminate called", "Fatal Python", "Segmentation fault", "Bus error", "Killed"),
     re.compile(r"terminate called after throwing an instance of|^Fatal Python error:"
                r"|Segmentation fault|^Bus error|^Killed$")),
    ("launcher failure", ("ChildFailedError", "srun: error"),
     re.compile(r"ChildFailedError|^srun: error: .{0,200}Exited with exit code [1-9]")),
    # slurmstepd names itself `slurmstepd` or `slurmstepd-<node>`
    ("Slurm", ("slurmstepd",), re.compile(r"slurmstepd(?:-[\w.-]{1,100})?: error: .{0,200}(?:CANCELLED|oom[-_]kill)")),
]
_TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]{0,120}(?:Error|Exception|Interrupt|Exit|Failure|Timeout|Fault))(?::\s?(.*))?$")
_BARE_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]{0,120})(?::\s(.*))?$")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
_FRAME = re.compile(r'^\s*File "[^"\n]{0,1000}", line \d+')


@dataclass(frozen=True)
class Crash:
    exception: str  # `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...` or a label
    evidence: str  # the log line, as printed
    step: int | None  # the last training step before it


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class CrashTracker:
    def __init__(self) -> None:
        self.crash: Crash | None = None
        self._in_traceback = False
        self._ignored_traceback = False  # `Exception ignored in ...`: Python goes on
        self._saw_frame = False
        self._chained = False  # `During handling of the above exception...`: the next one is the crash

    def clear(self) -> None:
        """A training record came after the crash: the run is alive again (requeued, resumed)."""
        self.crash = None

    def feed(self, raw: str, step: int | None) -> bool:
        """Look at one cleaned line (colours removed); True when it belongs to a crash or a traceback
        and must not be read for metrics."""
        line = strip_rank_prefix(raw)
        stripped = line.strip()
        if _TRACEBACK.match(line):
            self._in_traceback, self._saw_frame = True, False
            return True
        if self._in_traceback:
            return self._traceback_line(line, stripped, step)
        if stripped.startswith(_CHAIN):
            self._chained = self.crash is not None
            return True
        if stripped.startswith("Exception ignored in"):
            self._ignored_traceback = True
            return True
        if _FRAME.match(line):
            return True  # a frame printed outside a traceback (warnings, logging): never metrics
        for label, needles, pattern in _FATAL_LINES:
            if not any(needle in stripped for needle in needles):
                continue
            match = pattern.search(stripped[:4096])
            if match is not None:
                self._record(label, stripped, step, stripped[match.start() :])
                return True
        if self.crash is not None and _EXCEPTION.match(stripped):
            return True  # a second rank's exception line
        return False

    def _traceback_line(self, line: str, stripped: str, step: int | None) -> bool:
        if not stripped or stripped.startswith(_CHAIN):
            return True
        if line[:1].isspace() or _FRAME.match(line) or set(stripped) <= set("^~ "):
            self._saw_frame = True
            return True
        self._in_traceback = False
        ignored, self._ignored_traceback = self._ignored_traceback, False
        match = _EXCEPTION.match(stripped) or (_BARE_EXCEPTION.match(stripped) if self._saw_frame else None)
        if match is None:
            return False  # the traceback was cut off; this is an ordinary line
        if not ignored:
            self._record("", stripped, step)
        return True

    def _record(self, label: str, line: str, step: int | None, cause: str = "") -> None:
        if self.crash is not None and not self._chained:
            return  # the first fatal line is the cause; what follows is its aftermath
        step = self.crash.step if self.crash is not None else step
        self._chained = False
        exception = _clip(cause or line, 160)
        if label and label.lower() not in exception.lower():
            exception = f"{label}: {exception}"
        self.crash = Crash(exception=exception, evidence=_clip(line, MAX_EVIDENCE), step=step)
