"""Each check of the decision core on hand-built histories (no files)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import pytest

from guarded_sbatch.judge import Decision, JudgePolicy, MetricHistory, Reason, RunContext, decide
from guarded_sbatch.sources.points import MetricPoint

NAN = math.nan
INF = math.inf


def series(key: str, steps: Iterable[int], value: Callable[[int], float]) -> list[MetricPoint]:
    return [MetricPoint(int(s), 0.0, key, float(value(int(s)))) for s in steps]


def healthy_loss(scale: float = 1.0, noise: float = 0.03, seed: int = 0) -> Callable[[int], float]:
    def value(step: int) -> float:
        rng = np.random.default_rng(seed * 100_003 + step)
        return scale * (0.3 + 1.7 * math.exp(-step / 300)) * (1 + noise * rng.normal())

    return value


def history(*groups: list[MetricPoint]) -> MetricHistory:
    return MetricHistory.from_points(p for group in groups for p in group)


def kinds(verdict) -> set[str]:  # type: ignore[no-untyped-def]
    return {a.kind for a in verdict.anomalies}


# --- thin evidence, no data ---


def test_no_points_is_wait_no_data() -> None:
    verdict = decide(MetricHistory())
    assert (verdict.decision, verdict.reason) == (Decision.WAIT, Reason.NO_DATA)


def test_unknown_keys_only_is_wait_unguarded_naming_what_was_seen_and_the_fix() -> None:
    verdict = decide(history(series("throughput", range(0, 100, 10), lambda s: 5.0)))
    assert (verdict.decision, verdict.reason) == (Decision.WAIT, Reason.UNGUARDED)
    # a timing is never the likeliest loss: the key is left for the user to name
    assert "series seen: throughput" in verdict.message and verdict.message.endswith("--train-loss-key KEY")


def test_short_log_with_nan_is_judged_on_what_is_there() -> None:
    one = decide(history(series("loss", range(1, 4), lambda s: 2.0), series("loss", [4], lambda s: NAN)))
    assert (one.decision, one.reason) == (Decision.WAIT, Reason.NON_FINITE_LOSS)
    verdict = decide(history(series("loss", range(1, 5), lambda s: NAN)))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.NON_FINITE_LOSS)
    assert "since step 1" in verdict.message
    finite_but_few = decide(history(series("loss", range(1, 4), lambda s: 2.0 * s)))
    assert (finite_but_few.decision, finite_but_few.reason) == (Decision.WAIT, Reason.TOO_EARLY)


def test_healthy_curve_continues() -> None:
    verdict = decide(history(series("train/loss", range(0, 2000, 10), healthy_loss())))
    assert (verdict.decision, verdict.reason) == (Decision.CONTINUE, Reason.HEALTHY)
    assert verdict.last_step == 1990
    assert verdict.summary["train_loss"]["step"] == 1990


# --- non-finite ---


def test_nan_loss_waits_then_stops_after_patience() -> None:
    good = series("loss", range(0, 500, 10), healthy_loss())
    one_nan = decide(history(good, series("loss", [500], lambda s: NAN)))
    assert (one_nan.decision, one_nan.reason) == (Decision.WAIT, Reason.NON_FINITE_LOSS)
    three = decide(history(good, series("loss", [500, 510, 520], lambda s: NAN)))
    assert (three.decision, three.reason) == (Decision.STOP, Reason.NON_FINITE_LOSS)
    assert any(a.kind == "nan" and a.step == 500 for a in three.anomalies)


def test_nan_that_recovers_is_a_note() -> None:
    points = series("loss", range(0, 800, 10), healthy_loss())
    points[40] = MetricPoint(400, 0.0, "loss", NAN)
    verdict = decide(history(points))
    assert verdict.decision is Decision.CONTINUE
    assert "nan_recovered" in kinds(verdict)


def test_fp16_skipped_steps_with_inf_grad_norm_are_normal() -> None:
    steps = range(1, 1001)
    overflow = {s for s in steps if s % 97 == 0}
    scale = {}
    current = 2.0**16
    for s in steps:
        if s in overflow:
            current /= 2
        elif s % 50 == 0:
            current *= 2
        scale[s] = current
    skipped_total = np.cumsum([1 if s in overflow else 0 for s in steps])
    verdict = decide(
        history(
            series("train/loss", steps, healthy_loss()),
            series("train/grad_norm", steps, lambda s: INF if s in overflow else 1.0),
            series("train/loss_scale", steps, lambda s: scale[s]),
            series("train/skipped_steps", steps, lambda s: float(skipped_total[s - 1])),
        )
    )
    assert (verdict.decision, verdict.reason) == (Decision.CONTINUE, Reason.HEALTHY)


def test_loss_scale_stuck_at_floor_with_skips_is_stop() -> None:
    steps = range(1, 401)
    verdict = decide(
        history(
            series("train/loss", steps, lambda s: 0.5 if s < 200 else INF),
            series("train/grad_norm", steps, lambda s: 1.0 if s < 200 else NAN),
            series("train/loss_scale", steps, lambda s: 2.0**15 if s < 200 else max(1.0, 2.0**15 / 2 ** (s - 199))),
            series("train/skipped_steps", steps, lambda s: float(max(0, s - 199))),
        )
    )
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.LOSS_SCALE_COLLAPSE)


def test_hidden_nan_hf_filter() -> None:
    steps = range(10, 1010, 10)
    verdict = decide(
        history(
            series("loss", steps, lambda s: healthy_loss()(s) if s < 700 else 0.0),
            series("grad_norm", steps, lambda s: 1.0 if s < 700 else NAN),
        )
    )
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.HIDDEN_NAN)
    assert any(a.kind == "hidden_nan" and a.step == 700 for a in verdict.anomalies)


def test_nan_grad_norm_without_fp16_is_stop() -> None:
    steps = range(10, 1010, 10)
    verdict = decide(
        history(series("loss", steps, healthy_loss()), series("grad_norm", steps, lambda s: 1.0 if s < 900 else NAN))
    )
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.NON_FINITE_METRIC)


def test_megatron_nan_iteration_counter_is_loss_evidence() -> None:
    steps = range(10, 1010, 10)
    verdict = decide(
        history(
            series("lm loss", [s for s in steps if s < 800], healthy_loss()),
            series("number of nan iterations", steps, lambda s: 10.0 if s >= 800 else 0.0),
        )
    )
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.NON_FINITE_LOSS)


# --- evaluation ---


def test_eval_nan_every_time_is_stop_and_once_is_a_note() -> None:
    train = series("train/loss", range(0, 1000, 10), healthy_loss())
    always = decide(history(train, series("eval/loss", range(100, 1000, 100), lambda s: NAN)))
    assert (always.decision, always.reason) == (Decision.STOP, Reason.EVAL_FAILING)
    once = decide(history(train, series("eval/loss", range(100, 1000, 100), lambda s: NAN if s == 300 else 0.5)))
    assert once.decision is Decision.CONTINUE
    assert "eval_nan" in kinds(once)


def test_eval_regressing_is_stop_flat_is_not() -> None:
    train = series("train/loss", range(0, 2000, 10), healthy_loss())
    evals = range(100, 2000, 100)
    regressing = decide(history(train, series("eval/loss", evals, lambda s: 1.0 if s <= 500 else 1.0 + (s - 500) / 1000)))
    assert (regressing.decision, regressing.reason) == (Decision.STOP, Reason.EVAL_REGRESSING)
    assert regressing.summary["key_metric"]["trend"] == "regressing"
    flat = decide(history(train, series("eval/loss", evals, lambda s: 1.0 + 0.02 * ((s // 100) % 2))))
    assert flat.decision is Decision.CONTINUE


def test_eval_accuracy_direction_is_higher_is_better() -> None:
    train = series("train/loss", range(0, 2000, 10), healthy_loss())
    rising = decide(history(train, series("val/acc", range(100, 2000, 100), lambda s: 0.5 + s / 10_000)))
    assert rising.decision is Decision.CONTINUE
    assert rising.summary["key_metric"]["trend"] == "improving"
    falling = decide(
        history(train, series("val/acc", range(100, 2000, 100), lambda s: 0.8 if s <= 500 else 0.8 - (s - 500) / 2000))
    )
    assert (falling.decision, falling.reason) == (Decision.STOP, Reason.EVAL_REGRESSING)


def test_baseline_and_target_are_notes() -> None:
    train = series("train/loss", range(0, 1000, 10), healthy_loss())
    evals = series("eval/loss", range(100, 1000, 100), lambda s: 1.0 - s / 2000)
    verdict = decide(history(train, evals), JudgePolicy(baseline=0.4, target=0.6))
    assert verdict.decision is Decision.CONTINUE
    assert "behind_baseline" in kinds(verdict)
    assert "target" in verdict.message


# --- spikes, divergence, gradient norm ---


def test_spike_that_recovers_is_continue_with_note() -> None:
    base = healthy_loss()
    verdict = decide(history(series("loss", range(0, 1500, 5), lambda s: base(s) * (6 if 800 <= s <= 815 else 1))))
    assert verdict.decision is Decision.CONTINUE
    assert any(a.kind == "recovered_spike" and a.step == 800 for a in verdict.anomalies)


def test_spike_in_progress_is_wait_not_stop() -> None:
    base = healthy_loss()
    verdict = decide(history(series("loss", range(0, 820, 5), lambda s: base(s) * (6 if s >= 800 else 1))))
    assert (verdict.decision, verdict.reason) == (Decision.WAIT, Reason.LOSS_SPIKE)


def test_sustained_divergence_is_stop() -> None:
    base = healthy_loss()
    verdict = decide(history(series("loss", range(0, 1000, 5), lambda s: base(s) * (1 if s < 800 else 1 + (s - 790) / 10))))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.DIVERGENCE)
    assert any(a.kind == "divergence" and 800 <= a.step <= 820 for a in verdict.anomalies)


def test_level_jump_that_stays_is_loss_spike_stop() -> None:
    base = healthy_loss()
    verdict = decide(history(series("loss", range(0, 1000, 5), lambda s: base(s) * (1.6 if s >= 800 else 1))))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.LOSS_SPIKE)


def test_grad_norm_explosion_is_stop() -> None:
    steps = range(0, 1000, 5)
    verdict = decide(
        history(
            series("loss", steps, healthy_loss()),
            series("grad_norm", steps, lambda s: 1.0 + 0.05 * math.sin(s) if s < 800 else 50.0 * (s - 790)),
        )
    )
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.GRAD_EXPLOSION)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e4])
def test_verdicts_are_scale_free(scale: float) -> None:
    base = healthy_loss(scale=scale)
    healthy = decide(history(series("loss", range(0, 1500, 5), base)))
    assert healthy.decision is Decision.CONTINUE
    diverged = decide(history(series("loss", range(0, 1000, 5), lambda s: base(s) * (1 if s < 800 else 4))))
    assert (diverged.decision, diverged.reason) == (Decision.STOP, Reason.DIVERGENCE)


# --- learning rate, plateau ---


def test_lr_zero_from_start_is_stop() -> None:
    steps = range(0, 500, 10)
    verdict = decide(history(series("loss", steps, lambda s: 1.386), series("learning_rate", steps, lambda s: 0.0)))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.LR_SCHEDULE)


def test_lr_decayed_to_zero_at_the_end_is_healthy_and_restart_is_a_note() -> None:
    steps = range(0, 2000, 10)
    cosine = decide(
        history(
            series("loss", steps, healthy_loss()), series("lr", steps, lambda s: 1e-3 * 0.5 * (1 + math.cos(math.pi * s / 1990)))
        )
    )
    assert cosine.decision is Decision.CONTINUE
    restarted = decide(
        history(
            series("loss", steps, healthy_loss()),
            series("lr", steps, lambda s: 1e-3 * 0.5 * (1 + math.cos(math.pi * (s % 1000) / 1000))),
        )
    )
    assert restarted.decision is Decision.CONTINUE
    assert "lr_restart" in kinds(restarted)


def test_plateau_from_start_at_chance_is_stop() -> None:
    flat = lambda s: math.log(4) * (1 + 0.01 * math.sin(s * 1.7))  # noqa: E731
    too_early = decide(history(series("loss", range(0, 100, 5), flat)))
    assert too_early.decision is Decision.CONTINUE  # not enough steps to call it yet
    early = decide(history(series("loss", range(0, 200, 5), flat)))
    assert (early.decision, early.reason) == (Decision.WAIT, Reason.PLATEAU_FROM_START)  # WAIT before STOP
    assert "STOP at step 300" in early.message
    verdict = decide(history(series("loss", range(0, 600, 5), flat)), JudgePolicy(chance_loss=math.log(4)))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.PLATEAU_FROM_START)


def test_flattening_at_end_of_decayed_schedule_is_not_a_plateau() -> None:
    steps = range(0, 3000, 10)
    loss = lambda s: 0.2 + 2.0 * math.exp(-s / 150)  # noqa: E731  converged long ago, flat for 2000 steps
    verdict = decide(
        history(series("loss", steps, loss), series("lr", steps, lambda s: 1e-3 * 0.5 * (1 + math.cos(math.pi * s / 2990))))
    )
    assert verdict.decision is Decision.CONTINUE


def test_flat_history_of_a_resumed_run_is_not_a_plateau_from_start() -> None:
    verdict = decide(history(series("loss", range(5000, 6000, 5), lambda s: 0.7 * (1 + 0.01 * math.sin(s)))))
    assert verdict.decision is Decision.CONTINUE


# --- staleness and policy overrides ---


def test_staleness_counts_only_for_a_live_job() -> None:
    h = history(series("loss", range(0, 1000, 10), healthy_loss()))
    live = decide(h, context=RunContext(job_live=True, seconds_since_last_point=7200))
    assert (live.decision, live.reason) == (Decision.WAIT, Reason.STALE)
    after_the_fact = decide(h, context=RunContext(job_live=False, seconds_since_last_point=7200))
    assert after_the_fact.decision is Decision.CONTINUE


def test_policy_names_the_loss_key() -> None:
    h = history(series("objective", range(0, 600, 10), lambda s: NAN if s >= 500 else 1.0))
    blind = decide(h)
    assert blind.reason is Reason.UNGUARDED and blind.message.endswith("name the loss with --train-loss-key objective")
    verdict = decide(h, JudgePolicy(train_loss_key="objective"))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.NON_FINITE_LOSS)


def test_verdict_json_is_plain() -> None:
    h = history(series("loss", range(0, 600, 10), lambda s: NAN if s >= 500 else 1.0))
    payload = decide(h).to_json()
    assert payload["decision"] == "STOP" and payload["reason"] == "non_finite_loss"
    assert payload["anomalies"][0]["kind"] == "nan" and payload["anomalies"][0]["step"] == 500


def test_a_check_added_to_the_ordered_list_is_judged_like_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a judge check is one function in judge/checks_*.py and one line in decide.CHECKS (here patched
    in by the test): its finding takes part in the verdict in its place in the order."""
    import importlib

    from guarded_sbatch.judge.findings import Finding
    from guarded_sbatch.judge.verdict import Anomaly

    decide_module = importlib.import_module("guarded_sbatch.judge.ordered_checks")  # the package exports decide()

    def check_lr_too_high(c: "decide_module.CheckInput") -> Finding | None:  # type: ignore[name-defined]
        steps, values = c.history.series(c.keys.lr) if c.keys.lr else ((), ())
        if len(values) and values[-1] > 1.0:
            anomaly = Anomaly("lr_too_high", c.keys.lr or "", int(steps[-1]), float(values[-1]), "LR above 1")
            return Finding(Decision.STOP, Reason.LR_SCHEDULE, f"learning rate {values[-1]:g} above 1", (anomaly,))
        return None

    monkeypatch.setattr(decide_module, "CHECKS", [*decide_module.CHECKS, ("lr_too_high", check_lr_too_high)])
    steps = list(range(1, 301))
    healthy = history(series("train/loss", steps, lambda s: 2.0 * 0.99**s + 0.1), series("lr", steps, lambda s: 0.01))
    assert decide(healthy).decision is Decision.CONTINUE
    too_high = history(series("train/loss", steps, lambda s: 2.0 * 0.99**s + 0.1), series("lr", steps, lambda s: 5.0))
    verdict = decide(too_high)
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.LR_SCHEDULE)
    assert "learning rate 5 above 1" in verdict.message
