"""The source interface every metric reader implements, and its error."""

from __future__ import annotations

from typing import Protocol

from guarded_sbatch.core.errors import ExitCode, GuardedError
from guarded_sbatch.core.points import MetricPoint


class MetricSource(Protocol):
    """An incremental reader: each call to read_new() yields each point exactly once.

    A half-written tail is not an error: it is retried on the next call.
    """

    kind: str  # "tensorboard" | "wandb" | "mlflow" | "csv" | "textlog"

    def read_new(self) -> list[MetricPoint]: ...

    def files_inspected(self) -> list[str]: ...

    def describe(self) -> str:
        """A short identifier of the run (folder, run id, log path)."""
        ...


class SourceError(GuardedError):
    """A metric source could not be opened or read (not: a half-written tail, which is retried)."""

    exit_code = ExitCode.USAGE
    missing = False  # True: the source is not there (yet); False: it is there and cannot be read
