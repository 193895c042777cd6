"""Evidence by strength, not by count (issue 37): each kind of strong evidence decides however few points there are;
soft evidence still waits; memory of spikes over the run; stagnation mid-run; time as evidence through RunContext."""

from __future__ import annotations

import math

import numpy as np

from guarded_sbatch.sources.points import MetricPoint
from guarded_sbatch.judge import Decision, JudgePolicy, MetricHistory, Reason, RunContext, decide

NAN = float("nan")


def _history(series: dict[str, list[tuple[int, float]]]) -> MetricHistory:
    return MetricHistory.from_points(MetricPoint(step, 0.0, key, value)
                                     for key, points in series.items() for step, value in points)


def _loss(values: list[float], every: int = 10, key: str = "loss") -> MetricHistory:
    return _history({key: [(every * (i + 1), v) for i, v in enumerate(values)]})


def test_a_jump_by_orders_of_magnitude_decides_with_three_points() -> None:
    verdict = decide(_loss([2.31, 2.25, 3.1e4]))
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.DIVERGENCE
    assert "4.1 orders of magnitude" in verdict.message and "strong evidence" in verdict.message
    assert verdict.anomalies[0].kind == "explosion"


def test_a_jump_reached_within_a_few_points_and_held_stops_later_too() -> None:
    values = [2.3, 2.1, 2.0, 1.9, 40.0, 9e3, 3e9, 1e13, 2e13, 5e12]
    verdict = decide(_loss(values))
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.DIVERGENCE, verdict.message


def test_a_moderate_jump_with_few_points_still_waits_for_more() -> None:
    verdict = decide(_loss([2.3, 2.2, 9.0]))
    assert verdict.decision is Decision.WAIT, verdict.message


def test_a_loss_near_zero_that_jumps_by_orders_back_to_its_start_level_is_not_an_explosion() -> None:
    values = [2.3, 1.0, 0.1, 1e-3, 1e-5, 2e-5, 1e-5, 1e-5, 0.4, 0.3, 0.2]  # still below where it started
    verdict = decide(_loss(values))
    assert verdict.reason is not Reason.DIVERGENCE or verdict.decision is not Decision.STOP, verdict.message


def test_a_loss_beyond_any_real_loss_decides_from_its_first_points() -> None:
    """A run seen only once it had blown up (a log that starts there, a bar's postfix at 1e37): no earlier level to
    compare with, but no loss a model is trained to is that large."""
    verdict = decide(_loss([1.7e37, 1.6e37]))
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.DIVERGENCE, verdict.message
    assert "beyond any real loss" in verdict.message and "strong evidence" in verdict.message
    # a large-scale loss that is real (a sum over unnormalised targets) is left to the other checks
    assert "beyond any real loss" not in decide(_loss([3e15, 2.9e15, 2.7e15])).message
    assert decide(_loss([1.7e37, 1.6e37]), JudgePolicy(absurd_loss_orders=38)).reason is not Reason.DIVERGENCE


def test_a_language_model_diverged_from_its_first_point_is_stopped_at_its_chance_level() -> None:
    """Vocabulary 1024: ln 1024 = 6.93; a loss of 34-57 from the first logged point, falling to 20, is 3-8x the
    loss of guessing uniformly. Without the chance level nothing flags it; with it (from the config) it is a STOP
    at the third logged point."""
    losses = [57.0, 44.2, 34.8, 38.1, 29.5, 25.0, 22.3, 20.1]
    chance = JudgePolicy(chance_loss=math.log(1024))
    assert decide(_loss(losses[:2]), chance).decision is Decision.WAIT
    verdict = decide(_loss(losses[:3]), chance)
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.DIVERGENCE
    assert "far above chance" in verdict.message and "6.931" in verdict.message
    assert decide(_loss(losses[:7]), chance).decision is Decision.STOP  # 22.3 still 3.2x: the sidecar stopped it
    healthy = [7.1, 6.8, 6.2, 5.5, 5.0, 4.6, 4.3, 4.1]  # starts at its chance level and learns
    assert decide(_loss(healthy), chance).decision is Decision.CONTINUE


def test_without_a_chance_level_a_loss_ten_times_its_first_value_held_is_stopped() -> None:
    verdict = decide(_loss([1.2, 1.0, 0.9, 14.0, 18.0, 25.0]))
    assert verdict.decision is Decision.STOP and "first logged loss" in verdict.message, verdict.message
    assert decide(_loss([1.2, 1.0, 0.9, 4.0, 5.0, 6.0])).decision is not Decision.STOP  # 5x: soft, not strong


def test_spikes_by_orders_of_magnitude_that_keep_coming_are_stopped_though_each_dropped_back() -> None:
    rng = np.random.default_rng(0)
    values = list(0.05 + 0.04 * rng.random(200))
    for at in (40, 90, 150):
        values[at] = 1e15
    history = _loss(values)
    verdict = decide(history)
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.LOSS_SPIKE, verdict.message
    assert "3 spikes" in verdict.message
    # the same decision after a restart: it is in the history, not in the watcher's memory
    assert decide(_loss(values)).message == verdict.message
    # two of them so far: a note, the run goes on
    early = decide(history.truncated(10 * 120))
    assert early.decision is Decision.CONTINUE and any(a.kind == "big_spike" for a in early.anomalies)


def test_one_recovered_warmup_spike_stays_a_note() -> None:
    values = [2.3, 2.2, 2.1, 2.0, 1.9, 350.0, 1.8, 1.7] + [1.6 - 0.01 * i for i in range(40)]
    verdict = decide(_loss(values))
    assert verdict.decision is Decision.CONTINUE, verdict.message
    assert any(a.kind == "big_spike" for a in verdict.anomalies)


def test_the_heavy_tail_of_a_tiny_batch_is_not_a_spike_to_count() -> None:
    """Per-sample losses near 0 whose bad batches reach back to about the untrained level: healthy."""
    rng = np.random.default_rng(1)
    values = list(np.concatenate([np.linspace(2.3, 0.05, 30), 0.02 + 0.02 * rng.random(300)]))
    for at in range(40, 330, 25):
        values[at] = 3.0 + rng.random()
    verdict = decide(_loss(values))
    assert verdict.decision is not Decision.STOP, verdict.message


def test_train_and_eval_non_finite_together_decide_at_once() -> None:
    history = _history({"train/loss": [(10, 1.0), (20, 0.9), (30, NAN)], "val/loss": [(30, NAN)]})
    verdict = decide(history)
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.NON_FINITE_LOSS
    assert "two independent non-finite signals" in verdict.message
    alone = _history({"train/loss": [(10, 1.0), (20, 0.9), (30, NAN)], "val/loss": [(20, 1.1)]})
    assert decide(alone).decision is Decision.WAIT


def test_a_non_finite_loss_that_stays_the_newest_point_while_the_job_runs_decides_by_time() -> None:
    history = _history({"train_loss": [(10, 1.0), (20, 0.9), (30, NAN)]})
    assert decide(history).decision is Decision.WAIT  # files read after the fact: time never counts
    soon = RunContext(job_live=True, seconds_since_last_point=5.0)
    assert decide(history, context=soon).decision is Decision.WAIT
    later = RunContext(job_live=True, seconds_since_last_point=16.0)
    verdict = decide(history, context=later)
    assert verdict.decision is Decision.STOP and "still the newest point 16 s later" in verdict.message
    # a run that logs every 60 s: the hold is one and a half of its own intervals
    slow = RunContext(job_live=True, seconds_since_last_point=60.0, point_interval_s=60.0)
    assert decide(history, context=slow).decision is Decision.WAIT
    ended = RunContext(job_live=False, seconds_since_last_point=600.0)
    assert decide(history, context=ended).decision is Decision.WAIT


def test_a_run_that_stalls_mid_run_with_a_noisy_grad_norm_is_stopped_after_its_own_pace() -> None:
    rng = np.random.default_rng(2)
    steps = np.arange(10, 3010, 10)
    loss = np.where(steps < 600, 3.0 - 2.0 * steps / 600, 1.0) + 0.08 * rng.standard_normal(len(steps))
    # 10-70 once it stalls, as in the real log; it grew there from 2 while the loss fell (no explosion on the way)
    grad = np.where(steps < 600, 2 + 10 * steps / 600, 10 + 60 * rng.random(len(steps)))
    series = {"loss": list(zip(steps.tolist(), loss.tolist())), "grad_norm": list(zip(steps.tolist(), grad.tolist())),
              "lr": [(int(s), 3e-4) for s in steps]}
    history = _history(series)
    verdict = decide(history)
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.STAGNATION, verdict.message
    early = decide(history.truncated(1000))
    assert early.decision is not Decision.STOP, early.message
    # the same shape with a calm grad norm and a decayed learning rate is convergence
    calm = dict(series, grad_norm=[(int(s), 1.0 + 0.05 * rng.random()) for s in steps])
    assert decide(_history(calm)).decision is Decision.CONTINUE
    decayed = dict(series, lr=[(int(s), 3e-4 * max(0.01, 1 - s / 2000)) for s in steps])
    assert decide(_history(decayed)).decision is Decision.CONTINUE


def test_soft_evidence_still_waits_for_enough_points() -> None:
    verdict = decide(_loss([1.0, 0.9, 2.5, 2.6]))
    assert verdict.decision is Decision.WAIT


def test_the_chance_level_comes_from_the_runs_config() -> None:
    from guarded_sbatch.judge.table import chance_from_config, policy_from_table, with_chance

    assert chance_from_config({"model.vocab_size": 1024, "lr": 3e-4}) == (math.log(1024), "ln(model.vocab_size = 1024)")
    assert chance_from_config({"num_labels": 2})[0] == math.log(2)  # type: ignore[index]
    assert chance_from_config({"data.nc": 80, "num_classes": 10})[1] == "ln(num_classes = 10)"  # type: ignore[index]
    assert chance_from_config({"nc": 1}) is None and chance_from_config({"vocab_size": "big"}) is None
    assert chance_from_config({"use_vocab_size": True}) is None and chance_from_config(None) is None
    recorded = with_chance({}, {"vocab_size": 1024})
    assert policy_from_table(recorded).chance_loss == round(math.log(1024), 6)  # the record reads back
    assert with_chance({"chance_loss": 2.0}, {"vocab_size": 1024}) == {"chance_loss": 2.0}  # [judge] wins


def test_a_detectors_loss_is_not_compared_with_the_chance_level_of_its_classes() -> None:
    parts = {"loss": [(10 * i, 6.0 - 0.1 * i) for i in range(1, 8)],
             "box_loss": [(10 * i, 2.0) for i in range(1, 8)], "cls_loss": [(10 * i, 3.0) for i in range(1, 8)]}
    assert decide(_history(parts), JudgePolicy(chance_loss=math.log(2))).decision is not Decision.STOP


def test_a_best_value_printed_again_until_it_is_next_computed_is_not_a_frozen_loss() -> None:
    stale = [2.3145, 1.9876, 1.5432, 1.2345, 1.2345, 1.2345]  # a smoothed loss updated every few log lines
    assert decide(_loss(stale)).decision is not Decision.STOP
    frozen = [2.3145, 1.9876, 1.5432, 1.6021, 1.6021, 1.6021]  # the same value above where the run had been
    verdict = decide(_loss(frozen))
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.FROZEN_LOSS, verdict.message


def test_an_infinite_loss_scale_in_a_drop_streak_is_judged_not_raised() -> None:
    # found by the fuzz campaign: a scale of inf before the last drop made the halving count overflow
    scales = [(8, 2.33), (10, 0.141), (11, 2.79), (40, 3.55), (45, math.inf), (50, 1.66)]
    history = _history({"loss_scale": scales, "loss": [(s, 0.5) for s, _ in scales]})
    verdict = decide(history, JudgePolicy(), RunContext())
    assert verdict.decision in (Decision.CONTINUE, Decision.WAIT, Decision.STOP)
