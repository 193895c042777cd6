"""Fatal endings of a training log: Python tracebacks and the known fatal lines of trainers,
launchers and Slurm (CUDA OOM, CUDA errors and device-side asserts, C/CUDA assertion failures, NCCL watchdog timeouts,
fp16 loss scale at its minimum, ...).

The tracker sees every line in order. Lines of a traceback (frames, source, carets, the exception)
are never metrics. The first fatal line after the last training record is the crash, named by its root
error: in a chained traceback the first fatal exception, the later ones (a launcher's `CalledProcessError`)
added as context (an ordinary exception being handled, `StopIteration`, is context of the one raised then).
A later training record with its own step (a requeued or resumed run) clears it. A traceback the log ends in
before its exception line (the process killed while printing it, a node lost with the output unflushed) is a
crash too, while nothing follows it; an ordinary line after it takes that back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from guarded_sbatch.sources.points import CUT_TRACEBACK
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
    ("NaN loss", ("Invalid loss", "Loss became", "erminat", "uspend", "alt", "bort"),
     re.compile(r"Invalid loss, terminating training|Loss became infinite or NaN at iteration"
                # the trainer's own word that it stops on a non-finite loss (`Loss got n a n, training suspends..`)
                r"|\bloss\b[^\n]{0,40}?\b(?:nan|n a n|inf|infinite)\b[^\n]{0,60}?"
                r"\b(?:terminat|suspend|halt|abort)", re.IGNORECASE)),
    ("CUDA error", ("CUDA error", "device-side assert", "cuda runtime error", "CUDA_ERROR_"),
     re.compile(r"CUDA error: |device-side assert(?:ion)? triggered|cuda runtime error \(\d{1,4}\)|CUDA_ERROR_\w{1,60}")),
    ("assertion failed", ("Assertion",), re.compile(r"Assertion [`'\"].{0,400}[`'\"] failed")),
    ("aborted", ("terminate called", "Fatal Python", "Segmentation fault", "Bus error", "Killed"),
     re.compile(r"terminate called after throwing an instance of|^Fatal Python error:"
                r"|Segmentation fault|^Bus error|^Killed$")),
    # the terminal's echo of SIGINT on a line of its own: the run was interrupted (crash_check reads it as such)
    ("KeyboardInterrupt", ("^C",), re.compile(r"^\^C$")),
    ("launcher failure", ("ChildFailedError", "srun: error"),
     re.compile(r"ChildFailedError|^srun: error: .{0,200}Exited with exit code [1-9]")),
    # slurmstepd names itself `slurmstepd` or `slurmstepd-<node>`
    ("Slurm", ("slurmstepd",), re.compile(r"slurmstepd(?:-[\w.-]{1,100})?: error: .{0,200}(?:CANCELLED|oom[-_]kill)")),
]
# every needle of _FATAL_LINES, in one flat tuple: most lines hold none, and one loop over them says so at once
_ALL_NEEDLES = tuple(needle for _, needles, _ in _FATAL_LINES for needle in needles)
_TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]{0,120}(?:Error|Exception|Interrupt|Exit|Failure|Timeout|Fault))(?::\s?(.*))?$")
_BARE_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]{0,120})(?::\s(.*))?$")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
_FRAME = re.compile(r'^\s*File "[^"\n]{0,1000}", line \d+')
# a command-line parser's refusal: argparse prints `usage: PROG ...` (continued on indented lines) then
# `PROG: error: MESSAGE` and exits 2; click prints `Usage: ...`, a hint, then `Error: MESSAGE`
_USAGE = re.compile(r"^usage: \S", re.IGNORECASE)
_USAGE_ERROR = re.compile(r"^(?:[\w./-]{1,200}: )?error: \S", re.IGNORECASE)
USAGE_LINES = 4  # lines after a usage block that may still carry its error


@dataclass(frozen=True)
class Crash:
    exception: str  # `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...` or a label
    evidence: str  # the log line, as printed
    step: int | None  # the last training step before it


def _known_fatal(exception: str) -> bool:
    """Whether a crash label is one of the known fatal errors (OOM, NCCL timeout, ...), not an ordinary exception."""
    return any(pattern.search(exception) for _, _, pattern in _FATAL_LINES)


def _has_needle(text: str) -> bool:
    for needle in _ALL_NEEDLES:
        if needle in text:
            return True
    return False


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class CrashTracker:
    def __init__(self) -> None:
        self._crash: Crash | None = None
        self._cut: Crash | None = None  # the traceback being read, while no exception line has ended it
        self._in_traceback = False
        self._ignored_traceback = False  # `Exception ignored in ...`: Python goes on
        self._saw_frame = False
        self._source_next = False  # the line after a frame is its source line (indented, unless pasted flat)
        self._chained = ""  # "cause" (`... was the direct cause of ...`) or "handling" (`During handling ...`)
        self._usage_left = 0  # lines left in which a usage block's error line may come

    @property
    def crash(self) -> Crash | None:
        """The crash the log shows so far: its first fatal line or finished traceback."""
        return self._crash

    def cut_off(self) -> Crash | None:
        """The traceback being read, as a crash: what the log shows if it ends here."""
        return self._cut if self._crash is None and self._in_traceback else None

    def clear(self) -> None:
        """A training record came after the crash: the run is alive again (requeued, resumed)."""
        self._crash = None

    def feed(self, raw: str, step: int | None) -> bool:
        """Look at one cleaned line (colours removed); True when it belongs to a crash or a traceback
        and must not be read for metrics."""
        line = strip_rank_prefix(raw) if "[" in raw else raw  # a rank prefix opens with `[`
        stripped = line.strip()
        if "Traceback" in line and _TRACEBACK.match(line):
            self._in_traceback, self._saw_frame, self._source_next = True, False, False
            self._cut = None if self._ignored_traceback else Crash(CUT_TRACEBACK, _clip(stripped, MAX_EVIDENCE), step)
            return True
        if self._in_traceback:
            return self._traceback_line(line, stripped, step)
        if stripped.startswith(_CHAIN):
            self._chained = ("handling" if stripped.startswith(_CHAIN[0]) else "cause") if self._crash else ""
            return True
        if stripped.startswith("Exception ignored in"):
            self._ignored_traceback = True
            return True
        if 'File "' in line and _FRAME.match(line):
            return True  # a frame printed outside a traceback (warnings, logging): never metrics
        if (self._usage_left > 0 or stripped[:6].lower() == "usage:") and self._usage_line(stripped, line, step):
            return True
        if self._crash is None and not _has_needle(stripped):
            return False
        for label, needles, pattern in _FATAL_LINES:
            if not any(needle in stripped for needle in needles):
                continue
            match = pattern.search(stripped[:4096])
            if match is not None:
                self._record(label, stripped, step, stripped[match.start() :])
                return True
        if self._crash is not None and _EXCEPTION.match(stripped):
            return True  # a second rank's exception line
        return False

    def _usage_line(self, stripped: str, line: str, step: int | None) -> bool:
        """A parser's usage block and its error line: the program refused its command line (a crash)."""
        if _USAGE.match(stripped):
            self._usage_left = USAGE_LINES
            return False
        if self._usage_left <= 0:
            return False
        if _USAGE_ERROR.match(stripped):
            self._usage_left = 0
            self._record("", stripped, step)
            return True
        if not line[:1].isspace():  # the usage's own continuation lines are indented
            self._usage_left -= 1
        return False

    def _traceback_line(self, line: str, stripped: str, step: int | None) -> bool:
        if not stripped or stripped.startswith(_CHAIN):
            return True
        if line[:1].isspace() or _FRAME.match(line) or set(stripped) <= set("^~ "):
            self._saw_frame = True
            self._source_next = _FRAME.match(line) is not None
            return True
        source_next, self._source_next = self._source_next, False
        if source_next and not _EXCEPTION.match(stripped) and not _BARE_EXCEPTION.match(stripped):
            return True  # a frame's source line whose indentation a paste took away (`main(args)`)
        self._in_traceback = False
        ignored, self._ignored_traceback = self._ignored_traceback, False
        match = _EXCEPTION.match(stripped) or (_BARE_EXCEPTION.match(stripped) if self._saw_frame else None)
        if match is None:
            return False  # the traceback was cut off; this is an ordinary line
        if not ignored:
            self._record("", stripped, step)
        return True

    def _record(self, label: str, line: str, step: int | None, cause: str = "") -> None:
        exception = _clip(cause or line, 160)
        if label and label.lower() not in exception.lower():
            exception = f"{label}: {exception}"
        root, chain = self._crash, self._chained
        if root is not None and not chain:
            return  # the first fatal line is the cause; what follows is its aftermath
        self._chained = ""
        if root is not None and (chain == "cause" or _known_fatal(root.exception)):
            # `raise Wrapper from error` (a launcher's CalledProcessError over the trainer's error), or a fatal error
            # (OOM, NCCL) whose handling failed too: the first is the root error, the later one its context
            wrapper = exception.split(":", 1)[0]
            if wrapper.lower() not in root.exception.lower():
                exception = _clip(f"{root.exception} (raised as {wrapper})", 200)
            else:
                exception = root.exception
            self._crash = Crash(exception=exception, evidence=root.evidence, step=root.step)
            return
        if root is not None:  # `During handling of StopIteration ...`: the exception raised while handling is the crash
            step = root.step
            exception = _clip(f"{exception} (while handling {root.exception.split(':', 1)[0]})", 200)
        self._crash = Crash(exception=exception, evidence=_clip(line, MAX_EVIDENCE), step=step)
