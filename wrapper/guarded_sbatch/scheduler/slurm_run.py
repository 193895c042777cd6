"""How the Slurm backend runs one of Slurm's commands: through runner.run_command with a timeout, a controller that
does not answer turned into SlurmUnreachableError, a missing Slurm into a SchedulerError saying so."""

from __future__ import annotations

import os
from pathlib import Path

from guarded_sbatch.core.errors import CommandError, SchedulerError
from guarded_sbatch.core.runner import CommandResult, run_command
from guarded_sbatch.scheduler.interface import SchedulerUnreachableError
from guarded_sbatch.scheduler.slurm_parse import error_lines, is_unreachable


class SlurmUnreachableError(SchedulerUnreachableError):
    """slurmctld (or slurmdbd) did not answer."""


def run_slurm(argv: list[str], *, timeout: float, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> CommandResult:
    """The command's result whatever its exit code; SlurmUnreachableError when it got no reply within `timeout`."""
    try:
        return run_command(argv, timeout=timeout, env=env, cwd=cwd, check=False)
    except CommandError as error:
        if error.timed_out:
            raise SlurmUnreachableError(
                f"slurmctld is not answering: `{argv[0]}` got no reply within {timeout:.0f} s; "
                "check `sinfo` or ask your admin"
            ) from None
        raise SchedulerError(
            f"cannot run `{argv[0]}` ({error.stderr.strip()}): is Slurm installed on this machine? "
            "Without Slurm, use the local scheduler"
        ) from None


def raise_if_unreachable(result: CommandResult) -> None:
    """SlurmUnreachableError when a failed command says the controller did not answer."""
    if result.returncode != 0 and is_unreachable(result.stderr):
        raise SlurmUnreachableError(
            f"slurmctld is not answering: {error_lines(result.stderr, result.argv[0])}; "
            "check `sinfo` or ask your admin"
        )


def query_env() -> dict[str, str]:
    """The environment of a query whose times are read back: epoch seconds (SLURM_TIME_FORMAT)."""
    return {**os.environ, "SLURM_TIME_FORMAT": "%s"}
