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
call reuses the rows already computed (a small cache keyed by the values themselves): judging at
every poll costs the new points only, and the answer is the same as computed from scratch.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from guarded_sbatch.judge.findings import MAD_TO_SIGMA

MIN_BASELINE_POINTS = 8
_Q_HI = 0.9
_Q_HI_TO_SIGMA = 1.2816  # q90 - median of a normal distribution, in sigmas
_BLOCK_VALUES = 1 << 18  # values per block of windows: 2 MB of float64 per temporary copy
_CACHE_ENTRIES = 8

_cache: OrderedDict[tuple[int, float, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()


def trailing_baselines(values: np.ndarray, window_points: int, relative_floor: float) -> tuple[np.ndarray, np.ndarray]:
    """Median and robust scale of the `window_points` values before each index (NaN where too few)."""
    n = len(values)
    cached = _lookup(values, window_points, relative_floor)
    if cached is not None and len(cached[1]) == n:
        return cached[1], cached[2]
    start = 0 if cached is None else len(cached[1])
    medians = np.full(n, np.nan)
    scales = np.full(n, np.nan)
    if cached is not None:
        medians[:start], scales[:start] = cached[1], cached[2]
    _fill(values, window_points, relative_floor, max(start, MIN_BASELINE_POINTS), medians, scales)
    key = (window_points, relative_floor, id(values))
    _cache.pop(key, None)
    _cache[key] = (values.copy(), medians, scales)
    while len(_cache) > _CACHE_ENTRIES:
        _cache.popitem(last=False)
    return medians, scales


def _lookup(values: np.ndarray, window_points: int, relative_floor: float) -> tuple[np.ndarray, ...] | None:
    """The longest cached computation whose values are a prefix of these values."""
    best = None
    for key, entry in reversed(_cache.items()):
        if key[0] != window_points or key[1] != relative_floor:
            continue
        old = entry[0]
        m = len(old)
        if m > len(values) or (best is not None and m <= len(best[0])):
            continue
        if m and np.array_equal(old, values[:m], equal_nan=True):
            best = entry
    return best


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
    for at in range(first, n, block):
        idx = np.arange(at, min(n, at + block))
        rows = windows[idx]  # a copy, NaN where the window reaches before the first point
        counts = np.minimum(idx, w)
        center_counts = np.minimum(idx, center)
        medians[idx] = _quantile_sorted(np.sort(rows[:, w - center:], axis=1), center_counts, 0.5)
        ordered = np.sort(np.diff(rows, axis=1), axis=1)  # NaN (missing) sorts last
        diff_counts = counts - 1
        d_med = _quantile_sorted(ordered, diff_counts, 0.5)
        d_hi = _quantile_sorted(ordered, diff_counts, _Q_HI)
        d_mad = _quantile_sorted(np.sort(np.abs(ordered - d_med[:, None]), axis=1), diff_counts, 0.5)
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
