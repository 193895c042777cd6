"""What the decision core may be told: thresholds and windows (in steps), and the run's context.

Every field of JudgePolicy can be set by name in the `[judge]` table of the site or user config (docs/judge.md;
judge/table.py checks the names and ranges)."""

from __future__ import annotations

from dataclasses import dataclass
from guarded_sbatch.judge.keys import Direction

__all__ = ["Direction", "JudgePolicy"]


@dataclass(frozen=True)
class JudgePolicy:
    """Thresholds of the checks. Every window is counted in training steps, never in checks."""

    # which keys to judge (None: found automatically from the key names)
    train_loss_key: str | None = None
    key_metric: str | None = None  # the eval metric the run is judged on
    key_metric_direction: Direction | None = None  # None: from the name (loss/error: min, acc/f1: max)
    target: float | None = None  # value of key_metric that would count as success
    baseline: float | None = None  # value of key_metric of a reference run
    # the loss of guessing uniformly, e.g. ln(num_classes) (a guarded launch sets it from the run's config:
    # vocab_size, num_labels, num_classes, nc); sharpens the plateau-from-start check and the chance-level check
    chance_loss: float | None = None

    # thin evidence: below these, soft findings WAIT (hard faults never do)
    min_loss_points: int = 5
    # no loss key among fewer logged steps than this is start-up (too_early), not a key to name
    startup_steps_without_loss: int = 10

    # non-finite training loss: STOP when the last N logged losses are all non-finite (not excused by fp16), or
    # at the first one when the finite loss just before it had exploded (>= this x the median before it)
    nonfinite_loss_points: int = 2
    nonfinite_after_explosion_ratio: float = 1000.0
    # time is evidence: a non-finite training loss that stays the newest point while the job runs on is a STOP after
    # this long and this many of the run's own intervals between new points (a progress bar redraws one line)
    nonfinite_hold_seconds: float = 10.0
    nonfinite_hold_intervals: float = 1.5
    # evidence by strength (decides with any number of points): a training loss at >= 10**jump_orders x its level
    # before, reached within jump_within_points logged points and still there
    jump_orders: float = 3.0
    jump_within_points: int = 3
    # a finite training loss at >= 10**absurd_loss_orders is numbers about to overflow (float32 ends at 3.4e38)
    absurd_loss_orders: float = 30.0
    # any other series of the training lines (a loss term, an unnamed column; not the optimizer's, timing or counters):
    # a held jump by jump_orders orders of magnitude to at least this value is an explosion (checks_anyslot.py)
    explosion_min_value: float = 1e6
    # the training library's own inf/nan or overflow warnings at each of the last N logged steps: every step skipped
    nan_warning_streak: int = 30
    # a training loss at >= chance_multiple x the chance level (chance_loss), or >= first_loss_multiple x the
    # first logged loss when the chance level is not known, at chance_points logged points in a row
    chance_multiple: float = 3.0
    first_loss_multiple: float = 10.0
    chance_points: int = 3
    # memory: a point >= spike_memory_ratio x the median of the points before it (and 10 x where the run
    # started) is a big spike; spike_memory_count of them over the run, recovered or not, is a STOP (one: a note)
    spike_memory_ratio: float = 100.0
    spike_memory_count: int = 3
    # a frozen training loss: the last N logged losses identical (>= 4 significant digits), or within 1e-4 of each
    # other at ln(k) for k = 2..20 (a uniform guess): STOP with any number of points
    frozen_points: int = 3
    # a loss below 0 where its kind cannot be (checks_sign.py): WAIT; STOP once below 0 at its last N logged points
    negative_loss_points: int = 5
    # strength without history (checks_nohistory.py): every training-loss series repeating its value exactly at its last
    # N logged points; or the loss moving by less than frozen_rel of itself between its last two (different) values
    frozen_all_points: int = 5
    frozen_rel: float = 1e-6
    # the learning rate exactly 0, or held at most tiny_lr, at its last N logged points while the loss does not fall
    lr_zero_points: int = 5
    tiny_lr: float = 1e-7
    # a classifier's loss within chance_stuck_tolerance of ln k at its last chance_stuck_points points, spanning at
    # least chance_stuck_steps steps after the run's first ones
    chance_stuck_steps: int = 1000
    chance_stuck_tolerance: float = 0.005
    # the loss within batch_spread_max (relative) of its median at its last batch_spread_points points: WAIT
    batch_spread_points: int = 8
    batch_spread_max: float = 0.002
    # a decibel objective (SNR, SI-SNR, SDR) within db_chance_band dB of 0 dB at its last chance_stuck_points points
    chance_stuck_points: int = 8
    db_chance_band: float = 1.0
    # non-finite grad norm / LR (outside fp16 skipped steps): STOP when the last N logged values are all non-finite
    nonfinite_patience_points: int = 3
    # fp16: STOP when the loss scale sits at its floor for this many steps with steps skipped
    loss_scale_floor: float = 1.0
    loss_scale_window_steps: int = 100
    loss_scale_min_skip_rate: float = 0.8
    # fp16: STOP when the scale dropped at each of the last N changes, with no growth between, and is now at or
    # below the floor (an initial search from 2**32 halves many times too, but stays far above it)
    loss_scale_drop_streak: int = 8
    # fp16: STOP at an overflow at the floor at this many logged steps in a row (DeepSpeed's `Attempted loss scale: 1,
    # reducing to 1`), or at drops at loss_scale_step_drops consecutive steps down to within 8x of the floor
    loss_scale_floor_overflows: int = 3
    loss_scale_step_drops: int = 5

    # spikes (robust z-score against the median / quantile scale of the trailing window, OLMo-like 6 sigma)
    baseline_window_steps: int = 400
    baseline_max_points: int = 400
    spike_z: float = 6.0
    spike_min_ratio: float = 1.25  # and at least this much above the baseline median (when positive)
    relative_noise_floor: float = 0.01  # scale never below 1% of |median|: scale-free, no zero MAD
    # a spike still elevated after this many steps, or this many logged points on any axis (epochs),
    # with this many elevated points, is a STOP (a WAIT while the key eval is at or near its best)
    spike_patience_steps: int = 60
    spike_patience_points: int = 5
    spike_patience_points_any_axis: int = 30
    divergence_ratio: float = 2.0  # sustained and >= this x baseline median: divergence
    # a history too short for a baseline (started mid-run, a cut log): a jump to >= this x every earlier
    # value, held for short_jump_points logged points, is a WAIT naming it
    short_jump_ratio: float = 3.0
    short_jump_points: int = 3

    # gradient norm explosions (same detector, own thresholds); an open explosion is WAIT
    grad_spike_z: float = 8.0
    grad_explosion_ratio: float = 10.0
    grad_patience_steps: int = 60
    grad_patience_points: int = 5

    # slow climb of the training loss: median of the trailing window above its best by this much is
    # WAIT; STOP after the patience (steps or window medians, whichever first) unless the eval is good
    climb_rel: float = 0.15
    climb_window_steps: int = 200
    climb_patience_steps: int = 400
    climb_patience_points: int = 60

    # evaluation: WAIT when the 3-eval median is worse than its best by more than eval_regress_rel;
    # STOP after eval_regress_patience_points evals in a row, or eval_regress_patience_steps steps
    # (and at least 2 evals), whichever comes first
    eval_fail_patience: int = 3  # last N evals all non-finite: STOP (the first one: WAIT)
    eval_regress_rel: float = 0.10
    eval_regress_patience_steps: int = 300
    eval_regress_patience_points: int = 4
    eval_flat_rel: float = 0.005
    # a higher-is-better key metric exactly 0 at each of its last N evaluations (never above): WAIT; STOP at 2 N
    eval_zero_points: int = 3
    # a key metric logged at every training step (an RL reward) within 0.5 % over its last N values while the loss
    # moves by 30 % or more: WAIT
    flat_score_points: int = 6

    # learning rate
    lr_zero_patience_steps: int = 100
    lr_restart_ratio: float = 2.0

    # plateau from the start
    plateau_min_steps: int = 300
    plateau_min_points: int = 20
    plateau_max_first_step: int = 50  # a history starting later is a resume: no plateau-from-start
    plateau_min_improvement: float = 0.03  # relative drop of the median loss since the start
    plateau_chance_tolerance: float = 0.05  # near chance_loss, relative

    # stagnation mid-run: after the loss improved by stall_min_progress, no new best for
    # max(stall_min_steps, stall_pace_factor x the steps the run took to reach its best), with a noisy grad norm
    # ((q90 - q10) / median >= stall_grad_spread) and the learning rate not decayed: WAIT, then STOP after as long
    stall_min_progress: float = 0.1
    stall_min_steps: int = 300
    stall_pace_factor: float = 1.0
    stall_grad_spread: float = 1.0

    # staleness (only while a live job is watched)
    stale_after_seconds: float = 3600.0


@dataclass(frozen=True)
class RunContext:
    """What the watcher knows beyond the metrics. All optional."""

    total_steps: int | None = None
    job_live: bool | None = None  # None/False: files read after the fact, staleness (and time) never counts
    seconds_since_last_point: float | None = None  # the watcher's clock: since a poll last brought new points
    # the run's own pace when it logs slower than the watcher polls: typical seconds between polls that brought points
    point_interval_s: float | None = None
