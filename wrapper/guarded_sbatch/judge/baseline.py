"""Trailing robust baselines of a series: for each point, a centre and a robust scale of the points
logged before it. The centre is the median of the last quarter of the window (a loss still falling
must not leave it behind); the scale looks at the whole window.

Scale (scale-free, robust to calm stretches), from the successive differences inside the window, so a
loss still falling inside it is not taken for noise: the larger of 1.4826 x MAD and the upper quantile
spread (q90 - median) / 1.2816 of the differences, over sqrt(2), never below `relative_floor` x |median|.
For Gaussian noise both are its sigma; for the skewed, heavy-tailed losses of tiny batches the quantile
spread sees the tail the MAD misses, and a long window keeps a calm stretch from shrinking it, so
ordinary noise is not mistaken for a spike.

The baselines of point i depend only on the points before i, so a history that grew since the last
call reuses the rows already computed (a cache the caller keeps with the series, checked against the
values themselves): judging at every poll costs the new points only, and the answer is the same as
computed from scratch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from guarded_sbatch.judge.findings import MAD_TO_SIGMA

MIN_BASELINE_POINTS = 8
_Q_HI = 0.9
_Q_HI_TO_SIGMA = 1.2816  # q90 - median of a normal distribution, in sigmas
_BLOCK_VALUES = 1 << 18  # values per block of windows: 2 MB of float64 per temporary copy
_WINDOWS_KEPT = 2  # the spike scan's window and the plateau check's, when they differ


def trailing_baselines(
    values: np.ndarray, window_points: int, relative_floor: float, cache: dict[Any, Any] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Median and robust scale of the `window_points` values before each index (NaN where too few).
    `cache` (the series' `stats_cache`, shared by the checks that look at that series) keeps the last
    answer per window: when its values are a prefix of these, only the new rows are computed."""
    n = len(values)
    start = 0
    medians = np.full(n, np.nan)
    scales = np.full(n, np.nan)
    params = (window_points, relative_floor)
    entry = cache.get(params) if cache else None
    if entry is not None:
        seen, seen_medians, seen_scales = entry
        m = len(seen)
        if m <= n and np.array_equal(seen, values[:m], equal_nan=True):
            if m == n:
                return seen_medians, seen_scales
            start = m
            medians[:m], scales[:m] = seen_medians, seen_scales
    _fill(values, window_points, relative_floor, max(start, MIN_BASELINE_POINTS), medians, scales)
    if cache is not None:
        cache.pop(params, None)
        cache[params] = (values.copy(), medians, scales)
        while len(cache) > _WINDOWS_KEPT:
            cache.pop(next(iter(cache)))
    return medians, scales


def center_points(window_points: int) -> int:
    """How many of the last points the centre (median) of a window of `window_points` looks at."""
    return max(MIN_BASELINE_POINTS, window_points // 4)


def _fill(values: np.ndarray, w: int, relative_floor: float, first: int, medians: np.ndarray,
          scales: np.ndarray) -> None:
    n = len(values)
    if first >= n:
        return
    center = min(center_points(w), w)  # a window narrower than the centre's minimum is its own centre
    padded = np.concatenate([np.full(w, np.nan), values])  # row i of its windows: values[i - w : i]
    windows = sliding_window_view(padded, w)
    block = max(1, _BLOCK_VALUES // w)
    # one buffer per temporary, reused by every block (a fresh 2 MB array per step costs its page faults, more
    # than the sort itself)
    size = min(block, n - first)
    buffers = np.empty((size, center)), np.empty((size, w - 1)), np.empty((size, w - 1))
    for at in range(first, n, block):
        idx = np.arange(at, min(n, at + block))
        rows = windows[at : at + len(idx)]  # NaN where the window reaches before the first point
        nearest, ordered, deviations = (buffer[: len(idx)] for buffer in buffers)
        counts = np.minimum(idx, w)
        center_counts = np.minimum(idx, center)
        np.copyto(nearest, rows[:, w - center:])
        nearest.sort(axis=1)
        medians[idx] = _quantile_sorted(nearest, center_counts, 0.5)
        np.subtract(rows[:, 1:], rows[:, :-1], out=ordered)  # np.diff
        ordered.sort(axis=1)  # NaN (missing) sorts last
        diff_counts = counts - 1
        d_med = _quantile_sorted(ordered, diff_counts, 0.5)
        d_hi = _quantile_sorted(ordered, diff_counts, _Q_HI)
        np.abs(np.subtract(ordered, d_med[:, None], out=deviations), out=deviations)
        deviations.sort(axis=1)
        d_mad = _quantile_sorted(deviations, diff_counts, 0.5)
        scale = np.maximum(MAD_TO_SIGMA * d_mad, (d_hi - d_med) / _Q_HI_TO_SIGMA) / np.sqrt(2)
        scales[idx] = np.maximum(np.maximum(scale, relative_floor * np.abs(medians[idx])), 1e-12)


def _quantile_sorted(ordered: np.ndarray, counts: np.ndarray, q: float) -> np.ndarray:
    """Linear-interpolated quantile of each row's first `counts` values (rows sorted, NaN last)."""
    position = (counts - 1) * q
    low = np.floor(position).astype(np.int64)
    high = np.minimum(low + 1, counts - 1)
    frac = position - low
    r = np.arange(len(ordered))
    return ordered[r, low] * (1 - frac) + ordered[r, high] * frac
