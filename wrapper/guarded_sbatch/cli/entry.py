"""`python -m guarded_sbatch`: the command line, loaded here so that a Ctrl-C while it loads exits as any Ctrl-C."""

from __future__ import annotations

from guarded_sbatch.core.errors import ExitCode


def run() -> int:
    try:
        from guarded_sbatch.cli.main import main
    except KeyboardInterrupt:  # nothing was done yet
        return int(ExitCode.INTERRUPTED)
    return main()
