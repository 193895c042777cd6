"""Hand-built metric histories for the judge tests (no files)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from guarded_sbatch.judge import MetricHistory
from guarded_sbatch.sources.base import MetricPoint


def series(key: str, steps: Iterable[int], value: Callable[[int], float]) -> list[MetricPoint]:
    return [MetricPoint(int(s), 0.0, key, float(value(int(s)))) for s in steps]


def decaying_loss(start: float = 2.0, floor: float = 0.3, tau: float = 300.0, noise: float = 0.03,
                  seed: int = 0, scale: float = 1.0) -> Callable[[int], float]:
    """A healthy loss curve with multiplicative noise (deterministic per step)."""
    def value(step: int) -> float:
        rng = np.random.default_rng(seed * 100_003 + step)
        return scale * (floor + (start - floor) * math.exp(-step / tau)) * (1 + noise * rng.normal())
    return value


def history(*groups: list[MetricPoint]) -> MetricHistory:
    return MetricHistory.from_points(p for group in groups for p in group)
