"""Exit codes and the errors that carry them. Only the CLI layer prints."""

from __future__ import annotations

import enum

from guarded_sbatch.core.waiting import hanging


class ExitCode(enum.IntEnum):
    """Every exit code guarded-sbatch gives, in one table: its number and what it means (the CLI's --help and
    docs/user-guide.md are written from it). `--wait` exits with the job's own exit code instead, as sbatch does."""

    meaning: str

    def __new__(cls, value: int, meaning: str) -> "ExitCode":
        member = int.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    OK = 0, "done"
    NOTHING_TO_STOP = 1, "nothing was running to stop (`stop`, `kill`), or the job failed with no exit code (`--wait`)"
    USAGE = 2, "bad usage or input"
    BLOCKED = 3, "blocked by the pre-flight (a failed check not waived)"
    SCHEDULER = 4, "scheduler error (sbatch rejected the job, slurmctld unreachable, ...)"
    NOT_STOPPED = 5, "`stop`: the target still runs, or could not be checked"
    WAIT = 10, "`monitor --once`: the decision is WAIT"
    STOP = 11, "`monitor --once`: the decision is STOP"
    INTERNAL = 70, "internal error (a bug: please report it)"
    SBATCH_NOT_RUN = 127, "the `sbatch` shim could not run the real sbatch (as a shell says)"
    INTERRUPTED = 130, "interrupted by Ctrl-C (128 + SIGINT, as a shell says)"

    @classmethod
    def help_text(cls) -> str:
        return "exit codes (`--wait`: the job's own, as sbatch --wait gives it):\n" + \
            "\n".join(hanging(f"  {code.value}", code.meaning, 7, 80) for code in cls)


class GuardedError(Exception):
    """An error with a one-line message for people and an exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self)


class UsageError(GuardedError):
    exit_code = ExitCode.USAGE


class BlockedError(GuardedError):
    exit_code = ExitCode.BLOCKED


class SchedulerError(GuardedError):
    exit_code = ExitCode.SCHEDULER


class NothingSubmittedError(SchedulerError):
    """The scheduler refused before any job was submitted (the message must not suggest one runs unguarded)."""


class CommandError(SchedulerError):
    """A subprocess failed: carries the command, its exit code and its stderr."""

    def __init__(self, argv: list[str], returncode: int | None, stderr: str, *, timed_out: bool = False) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        self.timed_out = timed_out
        first = _first_line(stderr)
        if timed_out:
            msg = f"`{argv[0]}` did not answer in time (command: {' '.join(argv)})"
        elif returncode is None:
            msg = f"could not run `{argv[0]}`: {first}"
        else:
            msg = f"`{argv[0]}` failed with exit code {returncode}: {first or '(no message)'}"
        super().__init__(msg)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""
