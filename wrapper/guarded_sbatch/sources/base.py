"""The point model every source yields, and the source interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One logged value. NaN and Inf are kept as they are."""

    step: int
    wall_time: float  # epoch seconds; 0.0 when the source has none
    key: str
    value: float


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
