"""Exit codes and the errors that carry them. Only the CLI layer prints."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Every exit code guarded-sbatch gives, in one table (the CLI's --help prints it)."""

    OK = 0
    NOTHING_TO_STOP = 1  # `stop`: no such process or session (it had ended, or never ran)
    USAGE = 2  # bad usage or bad input
    BLOCKED = 3  # the pre-flight failed and the failure was not waived
    SCHEDULER = 4  # sbatch rejected the job, slurmctld unreachable, ...
    NOT_STOPPED = 5  # `stop`: the target still runs, or could not be checked
    WAIT = 10  # `monitor --once`: the decision is WAIT
    STOP = 11  # `monitor --once`: the decision is STOP
    INTERNAL = 70  # a bug: please report it
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it)

    @classmethod
    def help_text(cls) -> str:
        return (
            "exit codes: 0 done; 2 bad usage or input; 3 blocked by the pre-flight; "
            "4 scheduler error (sbatch rejected, slurmctld unreachable); 70 internal error; 130 interrupted "
            "(monitor --once: 10 WAIT, 11 STOP; stop: 1 nothing to stop, 5 not stopped)"
        )


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
