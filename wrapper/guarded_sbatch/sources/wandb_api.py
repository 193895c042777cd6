"""W&B online path: history rows of a run known only by its path or URL, via the public API.

Kept thin over `wandb.Api().run(path).scan_history(...)`; the conversion of the client's rows (dicts
with `_step`, `_timestamp` and metric keys) into points is the part that is ours, and tested.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from guarded_sbatch.core.points import Axis, MetricPoint
from guarded_sbatch.sources.base import SourceError
from guarded_sbatch.sources.wandb_axis import WandbAxes, WandbRow

_URL = re.compile(r"^(?:https?://[^/]+/)?(?P<entity>[^/\s]+)/(?P<project>[^/\s]+)/(?:runs/)?(?P<run>[^/?#\s]+)")
_NON_FINITE = {"nan": math.nan, "infinity": math.inf, "inf": math.inf, "-infinity": -math.inf, "-inf": -math.inf}


def parse_run_path(text: str) -> str:
    """'https://wandb.ai/ent/proj/runs/abc123?x' or 'ent/proj/runs/abc123' or 'ent/proj/abc123' -> 'ent/proj/abc123'."""
    match = _URL.match(text.strip())
    if match is None:
        raise SourceError(f"not a W&B run path or URL: {text!r}; use entity/project/run_id or the run's URL")
    return f"{match['entity']}/{match['project']}/{match['run']}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return _NON_FINITE.get(value.strip().lower())
    return None


def rows_to_points(rows: Iterable[Mapping[str, Any]], axes: WandbAxes | None = None) -> list[MetricPoint]:
    """Turn scan_history rows into points on the run's x-axis (see wandb_axis: a step-like key such as
    `iter`, else `_step`); rows without a usable _step are skipped, as are media, histograms, strings
    and bools; NaN/Infinity (as floats or as the strings the API sends) are kept."""
    return _convert(rows, axes or WandbAxes())[0]


def _convert(rows: Iterable[Mapping[str, Any]], axes: WandbAxes) -> tuple[list[MetricPoint], int | None]:
    """(points, the largest `_step` seen: where the next page starts)."""
    points: list[MetricPoint] = []
    last_log_step: int | None = None
    for row in rows:
        step = _number(row.get("_step"))
        if step is None or not math.isfinite(step):
            continue
        last_log_step = int(step) if last_log_step is None else max(last_log_step, int(step))
        decoded = WandbRow(step=int(step), timestamp=_number(row.get("_timestamp")) or 0.0)
        for key, raw in row.items():
            if key.startswith("_"):
                continue
            if isinstance(raw, Mapping) and "_type" in raw:
                decoded.media_paths.add(key)
                continue
            value = _number(raw)
            if value is not None:
                decoded.values[key] = value
        points.extend(axes.points(decoded))
    return points, last_log_step


class WandbApiSource:
    """History of an online W&B run, fetched incrementally by step (needs network and an API key)."""

    kind = "wandb"

    def __init__(self, run_path: str, *, keys: list[str] | None = None, page_size: int = 1000,
                 timeout_s: float = 30.0) -> None:
        self.run_path = parse_run_path(run_path)
        self.keys = keys
        self.page_size = page_size
        self.timeout_s = timeout_s
        self._next_step = 0
        self.axis = WandbAxes()

    def describe(self) -> str:
        return self.run_path

    def axes(self) -> dict[str, Axis]:
        return self.axis.axes()

    def files_inspected(self) -> list[str]:
        entity_project, run_id = self.run_path.rsplit("/", 1)
        return [f"https://wandb.ai/{entity_project}/runs/{run_id}"]

    def read_new(self) -> list[MetricPoint]:
        try:
            import wandb  # noqa: PLC0415 - heavy, and only this online path needs it

            api = wandb.Api(timeout=int(self.timeout_s))
            run = api.run(self.run_path)
            rows = run.scan_history(keys=self.keys, page_size=self.page_size, min_step=self._next_step)
            points, last_log_step = _convert(rows, self.axis)
        except Exception as exc:  # the client raises many types (network, auth, not found)
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SourceError(f"W&B run {self.run_path} could not be read ({first_line}); "
                              "check the network and WANDB_API_KEY, or read the local .wandb log") from None
        if last_log_step is not None:
            self._next_step = last_log_step + 1  # pages go by _step, whatever axis the points are on
        return points
