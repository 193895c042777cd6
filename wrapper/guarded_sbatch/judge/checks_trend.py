"""Spikes, sustained divergence, gradient-norm explosions and the plateau from the start.

Detector (documented choice): each finite value is compared with the median and robust scale of the
logged values in the trailing `baseline_window_steps` before it (see baseline.py: quantile-based,
scale-free). A value is *elevated* when it is more than `spike_z` scales above that median (OLMo's
6 sigma, but robust) and at least `spike_min_ratio` x the median (when the median is positive).
While elevated, the baseline is frozen at the value it had when the episode began, so a lasting jump
cannot become its own baseline. An episode ends (recovered) once the median of the values of the last
20 steps (at least 2 points) is within half that threshold. An open episode is WAIT (a note while it is one point
and the newest value is back under the threshold: single-batch noise); it is *sustained* once it
has lasted `spike_patience_steps` steps or `spike_patience_points_any_axis` logged points, whichever
comes first (so a run logged per epoch gets there too), with at least `spike_patience_points` elevated
points making up 60 % of it. A sustained episode is a STOP (DIVERGENCE when its recent median is
>= `divergence_ratio` x the baseline median, else LOSS_SPIKE) unless the key eval metric, evaluated
since the episode began, is at or near its best: then it stays WAIT. Everything is a function of the
history alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from guarded_sbatch.judge.baseline import trailing_baselines
from guarded_sbatch.judge.eval_gate import eval_near_best_since
from guarded_sbatch.judge.findings import Finding, fmt, median, points_in, typical_spacing
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.policy import JudgePolicy, RunContext
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason

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
    peak_step: int = 0
    last_elevated: bool = True  # the newest point of the episode is elevated


def window_points(steps: np.ndarray, policy: JudgePolicy) -> int:
    return points_in(policy.baseline_window_steps, steps, minimum=16, maximum=policy.baseline_max_points)


def scan_episodes(
    steps: np.ndarray,
    values: np.ndarray,
    policy: JudgePolicy,
    z: float,
    min_ratio: float,
    baseline_cache: dict[Any, Any] | None = None,
    episode_cache: dict[str, Any] | None = None,
) -> list[Episode]:
    """The episodes of a series. With an `episode_cache` (a `stats_cache` of the series) the scan resumes after the
    episodes that had ended at the last call, and an open episode's recovery search after the windows
    already searched, as long as the finite points seen then are an unchanged prefix of these: a closed
    episode depends only on the points up to its end, so the answer is the same as from scratch."""
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    window = window_points(steps, policy)
    medians, sigmas = trailing_baselines(values, window, policy.relative_noise_floor, baseline_cache)
    with np.errstate(invalid="ignore"):
        candidate = (values > medians + z * sigmas) & ((medians <= 0) | (values >= min_ratio * medians))
    starts = np.nonzero(candidate)[0]
    spacing = typical_spacing(steps)
    k = int(max(_RECOVERY_POINTS, min(_RECOVERY_STEPS + 1, np.ceil(_RECOVERY_STEPS / spacing) + 1)))
    params = (window, k, z, min_ratio, policy.relative_noise_floor)
    closed, position, open_start, searched = _resume(episode_cache, params, steps, values)
    episodes = list(closed)
    while True:
        later = starts[np.searchsorted(starts, position):]
        if len(later) == 0:
            break
        i = int(later[0])
        base, sigma = float(medians[i]), float(sigmas[i])
        threshold, calm_level = base + z * sigma, base + 0.5 * z * sigma
        rest_v, rest_s = values[i + 1 :], steps[i + 1 :]
        # recovered at the first point where the median of the last ~20 steps of points is back under the
        # calm level: single heavy-tailed batches (tiny-batch noise) neither keep it open nor close it
        end = _first_calm(rest_v, rest_s, k, calm_level, searched if i == open_start else 0)
        segment = values[i : i + 2 + end] if end is not None else values[i:]
        with np.errstate(invalid="ignore"):
            elevated = (segment > threshold) & ((base <= 0) | (segment >= min_ratio * base))
        elevated[0] = True
        peak_at = int(np.argmax(np.where(elevated, segment, -np.inf)))
        episodes.append(Episode(
            int(steps[i]), base, sigma, float(segment[peak_at]),
            elevated_points=int(np.count_nonzero(elevated)), total_points=len(segment),
            end_step=int(rest_s[end]) if end is not None else None,
            recent=[float(v) for v in segment[-8:]], peak_step=int(steps[i + peak_at]),
            last_elevated=bool(elevated[-1]),
        ))
        if end is None:
            open_start, searched = i, max(0, len(rest_v) - k + 1)
            break
        position, open_start, searched = i + 2 + end, -1, 0
    if episode_cache is not None:
        episode_cache.clear()
        episode_cache.update(params=params, steps=steps.copy(), values=values.copy(), position=position,
                     closed=[e for e in episodes if e.end_step is not None], open_start=open_start,
                     searched=searched)
    return episodes


def _resume(cache: dict[str, Any] | None, params: tuple[Any, ...], steps: np.ndarray,
            values: np.ndarray) -> tuple[list[Episode], int, int, int]:
    """(closed episodes, where to look for the next one, the open episode's start, its windows searched)."""
    if not cache or cache.get("params") != params:
        return [], 0, -1, 0
    seen_steps, seen_values = cache["steps"], cache["values"]
    m = len(seen_values)
    if m > len(values) or not (np.array_equal(seen_steps, steps[:m]) and np.array_equal(seen_values, values[:m])):
        return [], 0, -1, 0
    return cache["closed"], cache["position"], cache["open_start"], cache["searched"]


def _first_calm(rest_v: np.ndarray, rest_s: np.ndarray, k: int, calm_level: float, begin: int) -> int | None:
    """Index into `rest_v` of the point that closes the episode: the end of the first window of `k` points
    (spanning the recovery steps) whose median is back under `calm_level`; windows before `begin` are known
    not to. Searched in growing chunks, so an episode that recovers soon costs what its points cost."""
    windows = len(rest_v) - k + 1
    if windows <= begin:
        return None
    all_windows = sliding_window_view(rest_v, k)
    at, chunk = begin, 64
    while at < windows:
        stop = min(windows, at + chunk)
        ordered = np.sort(all_windows[at:stop], axis=1)  # rest_v is finite: the median without NaN checks
        window_medians = ordered[:, k // 2] if k % 2 else (ordered[:, k // 2 - 1] + ordered[:, k // 2]) / 2
        spans = rest_s[at + k - 1 : stop + k - 1] - rest_s[0] >= _RECOVERY_STEPS
        calm = np.nonzero((window_medians <= calm_level) & spans)[0]
        if len(calm):
            return at + int(calm[0]) + k - 1
        at, chunk = stop, chunk * 4
    return None


def _sustained(episode: Episode, last_step: int, patience_steps: int, patience_points: int,
               any_axis_points: int) -> bool:
    long_enough = last_step - episode.start_step >= patience_steps or episode.total_points >= any_axis_points
    return (
        episode.end_step is None
        and long_enough
        and episode.elevated_points >= patience_points
        and episode.elevated_points >= 0.6 * episode.total_points
    )


def check_loss_trend(history: MetricHistory, keys: RunKeys, policy: JudgePolicy) -> Finding | None:
    if not keys.train_loss:
        return None
    steps, values = history.series(keys.train_loss)
    if np.count_nonzero(np.isfinite(values)) < policy.min_loss_points:
        return None
    episodes = scan_episodes(steps, values, policy, policy.spike_z, policy.spike_min_ratio,
                             history.stats_cache(keys.train_loss, "baselines"),
                             history.stats_cache(keys.train_loss, "loss_episodes"))
    last_step = int(steps[-1])
    notes = [
        Anomaly(
            "recovered_spike", keys.train_loss, e.start_step, e.peak,
            f"spike to {fmt(e.peak)} at step {e.peak_step} (baseline {fmt(e.base_median)}) recovered by step {e.end_step}",
        )
        for e in [x for x in episodes if x.end_step is not None][-5:]  # format only the ones kept
    ]
    open_episode = episodes[-1] if episodes and episodes[-1].end_step is None else None
    if open_episode is None:
        if notes:
            return Finding.note(Reason.LOSS_SPIKE, f"{len(notes)} loss spike(s) recovered", *notes)
        return None
    e = open_episode
    recent_median = float(median(e.recent or [e.peak]))
    diverging = e.base_median > 0 and recent_median >= policy.divergence_ratio * e.base_median
    kind = "divergence" if diverging else "spike"
    evidence = (
        f"{keys.train_loss} {fmt(recent_median)} (median of the last {len(e.recent or [])} points, peak "
        f"{fmt(e.peak)} at step {e.peak_step}) vs baseline {fmt(e.base_median)} before step {e.start_step}"
    )
    anomaly = Anomaly(kind, keys.train_loss, e.start_step, recent_median, evidence)
    sustained = _sustained(e, last_step, policy.spike_patience_steps, policy.spike_patience_points,
                           policy.spike_patience_points_any_axis)
    if sustained:
        reason = Reason.DIVERGENCE if diverging else Reason.LOSS_SPIKE
        what = "diverged" if diverging else "jumped and has not recovered"
        held = f"elevated for {last_step - e.start_step} steps ({e.elevated_points} of {e.total_points} logged points)"
        good_eval = eval_near_best_since(history, keys, policy, e.start_step)
        if good_eval is not None:
            return Finding.wait(
                reason, f"training loss {what}: {evidence}, {held}; but {good_eval}: waiting", anomaly, *notes
            )
        return Finding.stop(reason, f"training loss {what}: {evidence}, {held}", anomaly, *notes)
    if e.elevated_points == 1 and not e.last_elevated:
        # one noisy point, the values since back under the threshold: a note, not a reason to wait
        return Finding.note(Reason.LOSS_SPIKE, f"one-point loss spike at step {e.start_step}, recovering",
                            anomaly, *notes)
    return Finding.wait(
        Reason.LOSS_SPIKE,
        f"training loss spiked at step {e.start_step}: {evidence}; watching whether it recovers within "
        f"{policy.spike_patience_steps} steps or {policy.spike_patience_points_any_axis} logged points",
        anomaly, *notes,
    )


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
    episodes = scan_episodes(steps, values, policy, policy.grad_spike_z, policy.grad_explosion_ratio,
                             history.stats_cache(keys.grad_norm, "baselines"),
                             history.stats_cache(keys.grad_norm, "grad_episodes"))
    if not episodes:
        return None
    e = episodes[-1]
    last_step = int(steps[-1])
    if e.end_step is None:
        evidence = (
            f"{keys.grad_norm} {fmt(float(median(e.recent or [e.peak])))} (peak {fmt(e.peak)} at step "
            f"{e.peak_step}) vs {fmt(e.base_median)} before step {e.start_step}"
        )
        anomaly = Anomaly("grad_explosion", keys.grad_norm, e.start_step, e.peak, evidence)
        if _sustained(e, last_step, policy.grad_patience_steps, policy.grad_patience_points,
                      policy.spike_patience_points_any_axis):
            good_eval = eval_near_best_since(history, keys, policy, e.start_step)
            message = f"gradient norm exploded: {evidence}, for {last_step - e.start_step} steps"
            if good_eval is not None:
                return Finding.wait(Reason.GRAD_EXPLOSION, f"{message}; but {good_eval}: waiting", anomaly)
            return Finding.stop(Reason.GRAD_EXPLOSION, message, anomaly)
        if e.elevated_points == 1 and not e.last_elevated:
            return Finding.note(Reason.GRAD_EXPLOSION, f"one-point gradient-norm spike at step {e.start_step}, "
                                "recovering", anomaly)
        return Finding.wait(
            Reason.GRAD_EXPLOSION,
            f"gradient norm exploding: {evidence}; watching whether it recovers within "
            f"{policy.grad_patience_steps} steps",
            anomaly,
        )
    return Finding.note(
        Reason.GRAD_EXPLOSION,
        "gradient-norm spike(s) recovered",
        *[Anomaly("grad_spike", keys.grad_norm, x.start_step, x.peak, f"recovered by step {x.end_step}")
          for x in episodes[-3:]],
    )


def check_plateau_from_start(
    history: MetricHistory, keys: RunKeys, policy: JudgePolicy, context: RunContext | None
) -> Finding | None:
    """Flat from step 0 (at chance level when known): WAIT from half of `plateau_min_steps`, STOP after
    all of it. A history that starts late is a resume and a run that improved first and flattened
    later (end of a decayed schedule) is not a plateau."""
    if not keys.train_loss:
        return None
    steps, values = history.finite_series(keys.train_loss)
    if len(steps) < policy.plateau_min_points or steps[0] > policy.plateau_max_first_step:
        return None
    min_steps = policy.plateau_min_steps
    if context is not None and context.total_steps:
        min_steps = max(min_steps, context.total_steps // 10)
    span = int(steps[-1] - steps[0])
    if span < min_steps // 2:
        return None
    head_points = max(5, points_in(50, steps, minimum=5, maximum=50))
    head = float(median(values[:head_points]))
    window = points_in(policy.baseline_window_steps, steps, minimum=5, maximum=policy.baseline_max_points)
    medians, _ = trailing_baselines(values, window, policy.relative_noise_floor,
                                    history.stats_cache(keys.train_loss, "baselines"))
    tail = float(median(values[-window:]))
    best = float(np.nanmin(np.append(medians, tail)))
    scale = max(abs(head), 1e-12)
    improvement = (head - best) / scale
    if improvement >= policy.plateau_min_improvement:
        return None
    if policy.chance_loss is not None:
        near = abs(tail - policy.chance_loss) <= policy.plateau_chance_tolerance * abs(policy.chance_loss)
        if not near:
            return None
    evidence = (
        f"training loss flat since the start: {fmt(head)} at step {int(steps[0])}, {fmt(tail)} at step "
        f"{int(steps[-1])} (best {improvement:.1%} better)"
    )
    anomaly = Anomaly("plateau", keys.train_loss, int(steps[0]), tail, evidence)
    if span < min_steps:  # half the patience: say so before stopping
        return Finding.wait(
            Reason.PLATEAU_FROM_START,
            f"{evidence}; STOP at step {int(steps[0]) + min_steps} if it stays flat",
            anomaly,
        )
    return Finding.stop(Reason.PLATEAU_FROM_START, f"{evidence}: the run is not learning", anomaly)
