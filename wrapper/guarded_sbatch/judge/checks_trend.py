"""Spikes, sustained divergence, gradient-norm explosions and the plateau from the start.

Detector (documented choice): each finite value is compared with the median and a robust sigma
(1.4826 x MAD, never below 1% of |median|) of the logged values in the trailing
`baseline_window_steps` before it. A value is *elevated* when it is more than `spike_z` sigmas
above that median (OLMo's 6 sigma, but robust) and at least `spike_min_ratio` x the median (when the
median is positive). While elevated, the baseline is frozen at the value it had when the episode
began, so a lasting jump cannot become its own baseline. An episode ends (recovered) once the values
have stayed within half that threshold (median + z/2 sigma) for 20 steps and at least 2 points. An episode that has lasted `spike_patience_steps` steps and
`spike_patience_points` elevated points (llm-foundry: > 4 consecutive logged steps) and is still
open is a STOP: DIVERGENCE when its recent median is >= `divergence_ratio` x the baseline median,
else LOSS_SPIKE. Everything is a function of the history alone, counted in steps.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from guarded_sbatch.judge.findings import MAD_TO_SIGMA, Finding, fmt, points_in
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.policy import JudgePolicy, RunContext
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason

_MIN_BASELINE_POINTS = 8
_RECOVERY_POINTS = 2
_RECOVERY_STEPS = 20


@dataclass
class Episode:
    start_step: int
    base_median: float
    base_sigma: float
    peak: float
    elevated_points: int = 1
    total_points: int = 1
    end_step: int | None = None  # None: still open at the end of the history
    recent: list[float] | None = None


_BLOCK_VALUES = 1 << 18  # values per block of windows: 2 MB of float64 per temporary copy


def trailing_baselines(
    values: np.ndarray, window_points: int, relative_floor: float, cache: dict[str, Any] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Median and robust sigma of the `window_points` values before each index (NaN where too few).

    Sigma is the smaller of 1.4826 x MAD of the values and 1.4826 x MAD of their successive
    differences / sqrt(2): the second ignores a slow trend inside the window (a loss still falling),
    which would otherwise pass for noise and hide a real jump.

    With a `cache` (MetricHistory.stats_cache) the figures of a prefix of `values` seen at the last
    call are reused: each index depends only on the values before it, so only the new ones are computed.
    """
    n = len(values)
    medians = np.full(n, np.nan)
    sigmas = np.full(n, np.nan)
    start = 0
    if cache is not None:
        seen = cache.get("values")
        if (seen is not None and cache.get("window") == (window_points, relative_floor) and len(seen) <= n
                and np.array_equal(seen, values[: len(seen)], equal_nan=True)):
            start = len(seen)
            medians[:start] = cache["medians"]
            sigmas[:start] = cache["sigmas"]
    diffs = np.diff(values, prepend=values[0] if n else 0.0)
    first_window = np.arange(max(start, _MIN_BASELINE_POINTS), min(n, window_points + 1))
    for block in range(0, len(first_window), 128):  # the first window, still filling: values[:i] per i, at once
        growing = first_window[block : block + 128]
        med, mad = _prefix_median_mad(values, growing)
        sigma = np.maximum(np.maximum(MAD_TO_SIGMA * mad, relative_floor * np.abs(med)), 1e-12)
        diff_med, diff_mad = _prefix_median_mad(diffs[1:], growing - 1)
        diff_sigma = np.where(growing - 1 >= 2, MAD_TO_SIGMA * diff_mad / float(np.sqrt(2)), np.inf)
        medians[growing] = med
        sigmas[growing] = np.maximum(np.maximum(np.minimum(sigma, diff_sigma), relative_floor * np.abs(med)), 1e-12)
    if n > window_points:
        windows = sliding_window_view(values, window_points)[:-1]  # windows[j] = values[j : j + w] (a view)
        diff_windows = sliding_window_view(diffs, window_points - 1)[2:]  # diffs inside values[j : j + w]
        # np.median copies what it sorts: rows in blocks keep the copies small whatever the history's length
        block = max(1, _BLOCK_VALUES // window_points)
        for start_row in range(max(0, start - window_points), len(windows), block):
            rows = windows[start_row : start_row + block]
            med = np.median(rows, axis=1)
            mad = np.median(np.abs(rows - med[:, None]), axis=1)
            diff_rows = diff_windows[start_row : start_row + len(rows)]
            diff_med = np.median(diff_rows, axis=1)
            diff_mad = np.median(np.abs(diff_rows - diff_med[:, None]), axis=1)
            sigma = np.minimum(MAD_TO_SIGMA * mad, MAD_TO_SIGMA * diff_mad / np.sqrt(2))
            at = window_points + start_row
            medians[at : at + len(rows)] = med
            sigmas[at : at + len(rows)] = np.maximum(np.maximum(sigma, relative_floor * np.abs(med)), 1e-12)
    if cache is not None:
        cache.update(values=values.copy(), window=(window_points, relative_floor), medians=medians,
                     sigmas=sigmas, reused=start)
    return medians, sigmas


def _prefix_median_mad(values: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.median and MAD of values[:k] for each k in lengths, exactly: each prefix is one row, padded
    with as many -inf as +inf (the middle of a row is the middle of its prefix)."""
    med = np.full(len(lengths), np.nan)
    mad = np.full(len(lengths), np.nan)
    longest = int(lengths.max()) if len(lengths) else 0
    for parity in (0, 1):
        rows = np.flatnonzero((lengths % 2 == parity) & (lengths > 0))
        if not len(rows):
            continue
        width = longest + ((longest - parity) % 2)  # same parity as the prefixes: pads come in pairs
        ks = lengths[rows]
        column = np.arange(width)
        inside = column[None, :] < ks[:, None]
        pad_low = (column[None, :] >= ks[:, None]) & (column[None, :] < (ks + (width - ks) // 2)[:, None])
        matrix = np.where(inside, values[np.minimum(column, len(values) - 1)][None, :], np.inf)
        matrix[pad_low] = -np.inf
        center = np.median(matrix, axis=1)
        deviations = np.where(inside, np.abs(matrix - center[:, None]), np.inf)
        deviations[pad_low] = -np.inf
        med[rows], mad[rows] = center, np.median(deviations, axis=1)
    return med, mad


def scan_episodes(
    steps: np.ndarray,
    values: np.ndarray,
    window_steps: int,
    z: float,
    min_ratio: float,
    relative_floor: float,
    cache: dict[str, Any] | None = None,
) -> list[Episode]:
    """The episodes of a series. With a `cache` the scan resumes where the last call on an unchanged
    prefix of the same series ended (see trailing_baselines)."""
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    window_points = points_in(window_steps, steps)
    medians, sigmas = trailing_baselines(values, window_points, relative_floor, cache)

    def is_elevated(value: float, median: float, sigma: float) -> bool:
        if value <= median + z * sigma:
            return False
        return median <= 0 or value >= min_ratio * median

    episodes: list[Episode] = []
    current: Episode | None = None
    calm_points = 0
    calm_since = 0
    first = 0
    params = (window_points, z, min_ratio, relative_floor)
    saved = cache.get("scan") if cache is not None else None
    if (saved is not None and cache is not None and saved["params"] == params and saved["count"] <= cache["reused"]
            and np.array_equal(saved["steps"], steps[: saved["count"]])):
        episodes, current, calm_points, calm_since = list(saved["episodes"]), saved["current"], *saved["calm"]
        first = saved["count"]
    # where no episode is open only the elevated points matter: find them at once, not point by point
    tail_values, tail_medians = values[first:], medians[first:]
    with np.errstate(invalid="ignore"):
        starts = first + np.flatnonzero(~np.isnan(tail_medians) & (tail_values > tail_medians + z * sigmas[first:])
                                        & ((tail_medians <= 0) | (tail_values >= min_ratio * tail_medians)))
    i = first
    while i < len(values):
        if current is None:
            at = int(np.searchsorted(starts, i))
            if at == len(starts):
                break
            i = int(starts[at])
            value = float(values[i])
            current = Episode(int(steps[i]), float(medians[i]), float(sigmas[i]), value, recent=[value])
            calm_points = 0
            i += 1
            continue
        value = float(values[i])
        current.total_points += 1
        current.recent = (current.recent or [])[-7:] + [value]
        if is_elevated(value, current.base_median, current.base_sigma):
            current.elevated_points += 1
            current.peak = max(current.peak, value)
        if value > current.base_median + 0.5 * z * current.base_sigma:
            calm_points = 0
        else:
            if calm_points == 0:
                calm_since = int(steps[i])
            calm_points += 1
            if calm_points >= _RECOVERY_POINTS and int(steps[i]) - calm_since >= _RECOVERY_STEPS:
                current.end_step = int(steps[i])
                episodes.append(current)
                current = None
        i += 1
    if cache is not None:
        cache["scan"] = {"params": params, "count": len(values), "steps": steps.copy(), "episodes": list(episodes),
                         "current": copy.deepcopy(current), "calm": (calm_points, calm_since)}
    if current is not None:
        episodes.append(current)
    return episodes


def _sustained(episode: Episode, last_step: int, patience_steps: int, patience_points: int) -> bool:
    return (
        episode.end_step is None
        and last_step - episode.start_step >= patience_steps
        and episode.elevated_points >= patience_points
        and episode.elevated_points >= 0.6 * episode.total_points
    )


def check_loss_trend(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    if not keys.train_loss:
        return None
    steps, values = history.series(keys.train_loss)
    if np.count_nonzero(np.isfinite(values)) < policy.min_loss_points:
        return None
    episodes = scan_episodes(
        steps, values, policy.baseline_window_steps, policy.spike_z, policy.spike_min_ratio, policy.relative_noise_floor,
        history.stats_cache(keys.train_loss, "loss_trend"),
    )
    last_step = int(steps[-1])
    notes = [
        Anomaly(
            "recovered_spike", keys.train_loss, e.start_step, e.peak,
            f"spike to {fmt(e.peak)} (baseline {fmt(e.base_median)}) recovered by step {e.end_step}",
        )
        for e in [x for x in episodes if x.end_step is not None][-5:]  # format only the ones kept
    ]
    open_episode = episodes[-1] if episodes and episodes[-1].end_step is None else None
    if open_episode is not None:
        e = open_episode
        recent_median = float(np.median(e.recent or [e.peak]))
        diverging = e.base_median > 0 and recent_median >= policy.divergence_ratio * e.base_median
        kind = "divergence" if diverging else "spike"
        anomaly = Anomaly(
            kind, keys.train_loss, e.start_step, recent_median,
            f"loss {fmt(recent_median)} vs baseline {fmt(e.base_median)} since step {e.start_step}",
        )
        if _sustained(e, last_step, policy.spike_patience_steps, policy.spike_patience_points):
            reason = Reason.DIVERGENCE if diverging else Reason.LOSS_SPIKE
            what = "diverged" if diverging else "jumped and has not recovered"
            return Finding.stop(
                reason,
                f"training loss {what}: {fmt(recent_median)} vs {fmt(e.base_median)} before step {e.start_step}, "
                f"elevated for {last_step - e.start_step} steps ({e.elevated_points} logged points)",
                anomaly, *notes,
            )
        return Finding.wait(
            Reason.LOSS_SPIKE,
            f"training loss spiked at step {e.start_step} ({fmt(e.peak)} vs baseline {fmt(e.base_median)}); "
            f"watching whether it recovers within {policy.spike_patience_steps} steps",
            anomaly, *notes,
        )
    if notes:
        return Finding.note(Reason.LOSS_SPIKE, f"{len(notes)} loss spike(s) recovered", *notes)
    return None


def check_grad_explosion(
    history: MetricHistory, keys: RunKeys, policy: JudgePolicy, excused: set[int]
) -> Finding | None:
    if not keys.grad_norm:
        return None
    steps, values = history.series(keys.grad_norm)
    if excused:
        keep = ~np.isin(steps, list(excused))
        steps, values = steps[keep], values[keep]
    if np.count_nonzero(np.isfinite(values)) < policy.min_loss_points:
        return None
    episodes = scan_episodes(
        steps, values, policy.baseline_window_steps, policy.grad_spike_z, policy.grad_explosion_ratio,
        policy.relative_noise_floor, history.stats_cache(keys.grad_norm, "grad_trend"),
    )
    if not episodes:
        return None
    e = episodes[-1]
    if e.end_step is None and _sustained(e, int(steps[-1]), policy.grad_patience_steps, policy.grad_patience_points):
        return Finding.stop(
            Reason.GRAD_EXPLOSION,
            f"gradient norm exploded: {fmt(float(np.median(e.recent or [e.peak])))} vs {fmt(e.base_median)} "
            f"before step {e.start_step}, for {int(steps[-1]) - e.start_step} steps",
            Anomaly("grad_explosion", keys.grad_norm, e.start_step, e.peak),
        )
    return Finding.note(
        Reason.GRAD_EXPLOSION,
        "gradient-norm spike(s)",
        *[Anomaly("grad_spike", keys.grad_norm, x.start_step, x.peak,
                  "recovered" if x.end_step is not None else "ongoing") for x in episodes[-3:]],
    )


def check_plateau_from_start(
    history: MetricHistory, keys: RunKeys, policy: JudgePolicy, context: RunContext | None
) -> Finding | None:
    """Flat from step 0 (at chance level when known). A history that starts late is a resume and a
    run that improved first and flattened later (end of a decayed schedule) is not a plateau."""
    if not keys.train_loss:
        return None
    steps, values = history.series(keys.train_loss)
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    if len(steps) < policy.plateau_min_points or steps[0] > policy.plateau_max_first_step:
        return None
    min_steps = policy.plateau_min_steps
    if context is not None and context.total_steps:
        min_steps = max(min_steps, context.total_steps // 10)
    if steps[-1] - steps[0] < min_steps:
        return None
    head_points = max(5, points_in(50, steps, minimum=5, maximum=50))
    head = float(np.median(values[:head_points]))
    window = points_in(policy.baseline_window_steps, steps, minimum=5, maximum=512)
    medians, _ = trailing_baselines(values, window, policy.relative_noise_floor,
                                    history.stats_cache(keys.train_loss, "plateau"))
    tail = float(np.median(values[-window:]))
    best = float(np.nanmin(np.append(medians, tail)))
    scale = max(abs(head), 1e-12)
    improvement = (head - best) / scale
    if improvement >= policy.plateau_min_improvement:
        return None
    if policy.chance_loss is not None:
        near = abs(tail - policy.chance_loss) <= policy.plateau_chance_tolerance * abs(policy.chance_loss)
        if not near:
            return None
    return Finding.stop(
        Reason.PLATEAU_FROM_START,
        f"training loss flat since the start: {fmt(head)} at step {int(steps[0])}, {fmt(tail)} at step "
        f"{int(steps[-1])} (best {improvement:.1%} better): the run is not learning",
        Anomaly("plateau", keys.train_loss, int(steps[0]), tail),
    )
