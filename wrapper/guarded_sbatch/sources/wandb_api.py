"""W&B online path: history rows of a run known only by its path or URL, via the public API.

Kept thin over `wandb.Api().run(path).scan_history(...)`; the conversion of the client's rows (dicts
with `_step`, `_timestamp` and metric keys) into points is the part that is ours, and tested.
"""

from __future__ import annotations

import math
import re
import threading
from pathlib import Path
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from guarded_sbatch.core.extras import installed, missing_line
from guarded_sbatch.sources.points import Axis, MetricPoint
from guarded_sbatch.sources.base import SourceError
from guarded_sbatch.sources.base import SourceBase
from guarded_sbatch.sources.files import guarded_reader
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


def rows_to_points(rows: Iterable[Mapping[str, Any]], axes: WandbAxes | None = None,
                   ) -> tuple[list[MetricPoint], int | None]:
    """Turn scan_history rows into points on the run's x-axis (see wandb_axis: a step-like key such as
    `iter`, else `_step`); rows without a usable _step are skipped, as are media, histograms, strings
    and bools; NaN/Infinity (as floats or as the strings the API sends) are kept. With the points, the largest
    `_step` seen: where the next page starts."""
    axes = axes or WandbAxes()
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


@guarded_reader
class WandbApiSource(SourceBase):
    """History of an online W&B run, fetched incrementally by step (needs network and an API key).

    Each request runs in a background thread and is waited for at most timeout_s: the client retries on
    its own for minutes, and a watcher must not hang on it. A request still out at the next poll is waited
    for again (never two at once); until it answers, the source is unreachable, which the judge reads as WAIT.
    """

    kind = "wandb"
    path: Path | None = None  # read through the online API

    def __init__(self, run_path: str, *, keys: list[str] | None = None, page_size: int = 1000,
                 timeout_s: float = 30.0) -> None:
        self.run_path = parse_run_path(run_path)
        self.keys = keys
        self.page_size = page_size
        self.timeout_s = timeout_s
        self._next_step = 0
        self._run: Any = None
        self._pending: _Request | None = None
        self.axis = WandbAxes()

    def describe(self) -> str:
        return self.run_path

    def axes(self) -> dict[str, Axis]:
        return self.axis.axes()

    def files_inspected(self) -> list[str]:
        entity_project, run_id = self.run_path.rsplit("/", 1)
        return [f"https://wandb.ai/{entity_project}/runs/{run_id}"]

    def read_new(self) -> list[MetricPoint]:
        if self._run is None and not installed("wandb"):
            raise SourceError(missing_line("wandb", f"reading the online W&B run {self.run_path}"))
        if self._pending is None:
            self._pending = _Request(self._fetch, self._next_step)
        request = self._pending
        if not request.done.wait(self.timeout_s):
            raise SourceError(f"W&B run {self.run_path} unreachable: no answer in {self.timeout_s:g} s "
                              "(the request is still out; waiting for it)")
        self._pending = None
        if request.error is not None:
            exc = request.error
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SourceError(f"W&B run {self.run_path} could not be read ({first_line}); "
                              "check the network and WANDB_API_KEY, or read the local .wandb log")
        points, last_log_step = rows_to_points(request.rows, self.axis)
        if last_log_step is not None:  # pages go by _step, whatever axis the points are on
            self._next_step = max(self._next_step, last_log_step + 1)
        return points

    def _fetch(self, min_step: int) -> list[Mapping[str, Any]]:
        if self._run is None:
            import wandb  # noqa: PLC0415 - heavy: only in the watcher, and only for an online run

            api = wandb.Api(timeout=int(self.timeout_s))
            self._run = api.run(self.run_path)
        rows = self._run.scan_history(keys=self.keys, page_size=self.page_size, min_step=min_step)
        return list(rows)  # the pages are fetched while iterating: here, in the background thread


class _Request:
    def __init__(self, fetch: Callable[[int], list[Mapping[str, Any]]], min_step: int) -> None:
        self.done = threading.Event()
        self.rows: list[Mapping[str, Any]] = []
        self.error: BaseException | None = None
        threading.Thread(target=self._run, args=(fetch, min_step), daemon=True, name="wandb-api-read").start()

    def _run(self, fetch: Callable[[int], list[Mapping[str, Any]]], min_step: int) -> None:
        try:
            self.rows = fetch(min_step)
        except Exception as exc:  # noqa: BLE001 - the client raises many types (network, auth, not found)
            self.error = exc
        finally:
            self.done.set()
