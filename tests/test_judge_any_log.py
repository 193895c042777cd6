"""The judge on a log written by a tool it was never shown (issue 41): the loss by what it does (a name is a hint),
evidence in any slot of the training lines, and strength without history (a log that starts mid-run)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from cli_runner import run_cli
from guarded_sbatch.judge import Decision, JudgePolicy, MetricHistory, Reason, RunContext, decide
from guarded_sbatch.judge.select import select_keys
from guarded_sbatch.sources.points import MetricPoint

NAN = float("nan")


def _history(series: dict[str, list[float]], every: int = 10, first: int = 10) -> MetricHistory:
    return MetricHistory.from_points(MetricPoint(first + every * i, 0.0, key, value)
                                     for key, values in series.items() for i, value in enumerate(values))


def _falling(n: int, start: float = 3.0, end: float = 1.0, wobble: float = 0.03) -> list[float]:
    return [start + (end - start) * i / (n - 1) + wobble * math.sin(1.7 * i) for i in range(n)]


# --- the loss by what it does ---


def test_a_loss_named_like_a_loss_wins_over_any_behaviour() -> None:
    keys = select_keys(_history({"loss": _falling(20), "B": _falling(20, 9.0, 2.0)}), JudgePolicy())
    assert keys.train_loss == "loss" and "a training-loss name" in keys.loss_why


def test_perplexity_and_cross_entropy_under_short_names_are_the_objective() -> None:
    keys = select_keys(_history({"xent": _falling(20), "ppl": [math.exp(v) for v in _falling(20)],
                                 "tok/s": [3000.0] * 20}), JudgePolicy())
    assert keys.train_loss in {"xent", "ppl"} and "objective's name" in keys.loss_why
    assert "tok/s" not in keys.train_loss


def test_unnamed_columns_the_falling_total_is_judged_and_the_others_are_named_as_left_out() -> None:
    history = _history({"B": _falling(20, 1.5, 0.5), "C": _falling(20, 2.0, 1.0), "T": _falling(20, 3.5, 1.5),
                        "time": [0.31] * 20, "epoch": [1.0] * 10 + [2.0] * 10})
    keys = select_keys(history, JudgePolicy())
    assert keys.train_loss == "T", keys.loss_why
    assert "falling from its start" in keys.loss_why and "left out: B, C" in keys.loss_why
    assert "time" not in keys.loss_why and "epoch" not in keys.loss_why  # timing and counters are never candidates


def test_a_score_logged_as_its_negative_falls_and_is_judged_lower_is_better() -> None:
    """A speech separator's `si-snr` logged as the loss it minimises (-SI-SNR): the name says higher, what it does
    says lower; what it does wins."""
    keys = select_keys(_history({"train si-snr": _falling(14, 2.0, -12.0)}), JudgePolicy())
    assert keys.train_loss == "train si-snr" and keys.loss_direction == "min", keys.loss_why
    rising = select_keys(_history({"psnr": _falling(14, 20.0, 31.0)}), JudgePolicy())
    assert rising.loss_direction == "max"


def test_a_rising_score_chosen_as_objective_is_never_stopped_for_rising() -> None:
    verdict = decide(_history({"value": [0.1 + 0.8 * (1 - math.exp(-i / 8)) for i in range(60)]}))
    assert verdict.decision is Decision.CONTINUE, verdict.message


# --- evidence in any slot ---


def test_a_nan_that_stays_in_an_unnamed_slot_is_stopped_a_transient_one_is_a_note() -> None:
    held = decide(_history({"loss": _falling(20), "value2": [0.5] * 17 + [NAN] * 3}))
    assert (held.decision, held.reason) == (Decision.STOP, Reason.NON_FINITE_METRIC), held.message
    assert "value2 is nan" in held.message and "since step 180" in held.message
    transient = decide(_history({"loss": _falling(20), "value2": [0.5] * 10 + [NAN] + [0.5] * 9}))
    assert transient.decision is Decision.CONTINUE and "non-finite" in transient.message
    newest = decide(_history({"loss": _falling(20), "value2": [0.5] * 19 + [NAN]}))
    assert (newest.decision, newest.reason) == (Decision.WAIT, Reason.NON_FINITE_METRIC)
    live = RunContext(job_live=True, seconds_since_last_point=60.0)
    assert decide(_history({"loss": _falling(20), "value2": [0.5] * 19 + [NAN]}), context=live).decision \
        is Decision.STOP


def test_fp16_skipped_steps_excuse_an_inf_grad_norm_and_timing_slots_are_never_evidence() -> None:
    n = 30
    series = {"loss": _falling(n), "grad_norm": [1.0] * n, "loss_scale": [2.0 ** 16] * n, "eta": [5.0] * n}
    series["grad_norm"][-1] = math.inf
    series["loss_scale"][-1] = 2.0 ** 15  # the step was skipped: its inf grad norm is no evidence
    series["eta"][-2:] = [NAN, NAN]
    verdict = decide(_history(series))
    assert verdict.decision is Decision.CONTINUE, verdict.message


def test_an_explosion_by_orders_of_magnitude_in_any_slot_is_stopped() -> None:
    verdict = decide(_history({"loss": _falling(20), "value3": [2.0] * 17 + [3e21, 1e22, 8e21]}))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.DIVERGENCE), verdict.message
    assert "value3 exploded" in verdict.message and "orders of magnitude" in verdict.message


def test_a_small_quantity_growing_from_near_zero_is_no_explosion() -> None:
    """A KL term from 1e-7 to 0.05 grows by orders of magnitude, but to nothing large: not numbers blowing up."""
    kl = [1e-7] * 10 + [1e-4, 0.01, 0.03, 0.05, 0.05, 0.04, 0.05, 0.05, 0.05, 0.05]
    assert decide(_history({"loss": _falling(20), "kl": kl})).decision is Decision.CONTINUE


def test_the_librarys_own_nan_warnings_once_are_a_note_at_every_step_a_stop() -> None:
    def with_warnings(warned_steps: list[int]) -> MetricHistory:
        history = _history({"loss": _falling(60, 3.0, 2.0)}, every=1)
        history.add(MetricPoint(step, 0.0, "nan/inf warnings", float(count + 1)) for count, step in enumerate(warned_steps))
        return history

    once = decide(with_warnings([30]))
    assert once.decision is Decision.CONTINUE and "warned of an inf/nan" in once.message
    policy = JudgePolicy()
    every = decide(with_warnings(list(range(69 - policy.nan_warning_streak + 1, 70))))
    assert (every.decision, every.reason) == (Decision.STOP, Reason.NON_FINITE_METRIC), every.message
    start_up = decide(with_warnings(list(range(10, 26))))  # an fp16 scale search at the start, then training
    assert start_up.decision is Decision.CONTINUE


# --- strength without history ---


def test_every_loss_repeating_its_value_exactly_is_a_frozen_model() -> None:
    verdict = decide(_history({"Dis_loss": [13.82] * 5, "Gen_loss": [-0.0] * 5}, every=100))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.FROZEN_LOSS), verdict.message
    moving_term = decide(_history({"Dis_loss": [13.82] * 5, "Gen_loss": [0.71, 0.65, 0.69, 0.62, 0.6]}, every=100))
    assert moving_term.reason is not Reason.FROZEN_LOSS  # one term reprinted while another moves: no sign


def test_a_loss_that_moves_in_its_seventh_digit_is_frozen_but_not_at_a_schedules_end() -> None:
    verdict = decide(_history({"mse": [2976.4433, 2507.2115, 2507.2108]}, every=6000))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.FROZEN_LOSS), verdict.message
    assert decide(_history({"mse": [2976.44, 2507.21, 2507.22]}, every=6000)).reason is not Reason.FROZEN_LOSS
    decayed = _history({"mse": [2976.4433, 2507.2115, 2507.2108], "lr": [1e-3, 1e-4, 1e-5]}, every=6000)
    assert decide(decayed).reason is not Reason.FROZEN_LOSS


def test_a_never_finite_series_of_the_training_lines_is_stopped_even_when_the_log_starts_there() -> None:
    verdict = decide(_history({"value": [NAN] * 7}))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.NON_FINITE_LOSS), verdict.message
    assert "non-finite at every one" in verdict.summary["loss_key"]
    # a sparse column printed as nan (a metric not computed yet) beside a finite loss says nothing
    history = _history({"loss": _falling(20)})
    history.add(MetricPoint(step, 0.0, "value2", NAN) for step in (50, 100, 150, 200))
    assert decide(history).decision is Decision.CONTINUE


def test_an_lr_at_zero_with_the_loss_not_falling_is_stopped_mid_run() -> None:
    history = _history({"train_loss": [16.03, 15.38, 17.14, 16.35, 12.68, 15.48, 16.02], "lr": [0.0] * 7},
                       every=1, first=5310)
    verdict = decide(history)
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.LR_SCHEDULE), verdict.message
    falling = _history({"train_loss": _falling(7, 16.0, 9.0), "lr": [0.0] * 7}, every=1, first=5310)
    assert decide(falling).reason is not Reason.LR_SCHEDULE


def test_a_decibel_objective_stuck_at_0_db_is_stopped() -> None:
    stuck = [1.96, 0.04, -0.16, -0.2, -0.22, -0.23, -0.24, -0.25, -0.25, -0.25, -0.24, -0.24, -0.25, -0.25]
    verdict = decide(_history({"train si-snr": stuck, "lr": [1.5e-4] * 14}, every=1, first=1))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.PLATEAU_FROM_START), verdict.message
    assert "0 dB" in verdict.message
    learning = [1.9, -2.0, -4.5, -6.0, -7.2, -8.1, -8.9, -9.5, -10.0, -10.4, -10.8, -11.0, -11.3, -11.5]
    assert decide(_history({"train si-snr": learning}, every=1, first=1)).decision is Decision.CONTINUE


def test_a_classifier_held_at_ln_k_long_after_its_start_is_stopped_even_mid_run() -> None:
    stuck = [math.log(10) * (1 + 0.001 * math.sin(1.3 * i)) for i in range(40)]
    verdict = decide(_history({"loss": stuck}, every=100, first=20_000))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.PLATEAU_FROM_START), verdict.message
    assert "ln 10" in verdict.message
    start = decide(_history({"loss": stuck[:8]}, every=5, first=0))  # an untrained classifier starts there
    assert start.reason is not Reason.PLATEAU_FROM_START
    noisy_gan = [math.log(4) * (1 + 0.2 * math.sin(1.3 * i)) for i in range(40)]  # a GAN's D loss near ln 4
    assert decide(_history({"loss": noisy_gan}, every=100, first=20_000)).decision is not Decision.STOP


def test_an_lr_held_tiny_with_a_flat_loss_is_stopped_a_decaying_tail_is_not() -> None:
    flat = [1.2 * (1 + 0.01 * math.sin(1.7 * i)) for i in range(40)]
    verdict = decide(_history({"loss": flat, "lr": [1e-9] * 40}, first=30_000))
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.LR_SCHEDULE), verdict.message
    tail = [1e-7 * 0.5 ** i for i in range(40)]  # the end of a decayed schedule: falls by orders of magnitude
    assert decide(_history({"loss": flat, "lr": tail}, first=30_000)).reason is not Reason.LR_SCHEDULE
    summed = _falling(40, 9e4, 3e4, wobble=100.0)  # a tiny LR on a summed loss that falls: it trains
    assert decide(_history({"loss": summed, "lr": [1e-10] * 40}, first=30_000)).reason is not Reason.LR_SCHEDULE


def test_a_running_average_of_the_loss_turning_nan_with_it_confirms_the_first_nan() -> None:
    history = _history({"loss": [0.087, 0.088, 0.088, 0.089, 0.088, 0.097, NAN],
                        "avg_loss": [0.0859, 0.0860, 0.0860, 0.0860, 0.0860, 0.0861, NAN]}, every=1, first=113_790)
    verdict = decide(history)
    assert (verdict.decision, verdict.reason) == (Decision.STOP, Reason.NON_FINITE_LOSS), verdict.message
    assert "running average" in verdict.message
    alone = _history({"loss": [0.087, 0.088, 0.088, 0.089, 0.088, 0.097, NAN]}, every=1, first=113_790)
    assert decide(alone).decision is Decision.WAIT  # one NaN, read after the fact: it may be a transient one


def test_a_loss_that_does_not_vary_with_the_batch_waits() -> None:
    values = [6.661, 6.660, 6.662, 6.661, 6.660, 6.661, 6.662, 6.661]
    verdict = decide(_history({"loss_x": values}, every=20, first=20))
    assert (verdict.decision, verdict.reason) == (Decision.WAIT, Reason.STAGNATION), verdict.message
    reprinted = decide(_history({"loss": [_falling(12)[i] for i in range(4)] + [2.0] * 8}, every=20))
    assert reprinted.reason is not Reason.STAGNATION  # one value printed again is no reading of the batches


def test_a_log_in_a_format_invented_here_is_read_its_loss_chosen_and_its_nan_stopped(tmp_path: Path) -> None:
    """No tool prints this: a template with numeric slots, the step in a `round` slot, an objective named `quux`
    that falls, a score `zorp`, a duration; the objective turns NaN and stays there."""
    lines = []
    for i in range(1, 25):
        quux = 3.2 * math.exp(-i / 10) + 0.5 if i < 21 else NAN
        lines.append(f"<<blip>> round {i * 7} :: quux {quux:.4f} :: zorp {0.9 - 0.01 * i:.3f} :: took 0.31s")
    log = tmp_path / "invented.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state")}
    result = run_cli(["monitor", "--once", "--json", "--log", str(log)], env=env, cwd=tmp_path)
    payload = json.loads(result.stdout)
    assert (payload["decision"], payload["reason"]) == ("STOP", "non_finite_loss"), payload
    assert payload["summary"]["loss_key"].startswith("quux: no series named like a loss"), payload["summary"]
    assert "falling from its start" in payload["summary"]["loss_key"] and "zorp" in payload["summary"]["loss_key"]
    assert "since step 147" in payload["message"]


def test_a_never_finite_reading_that_is_the_logs_last_waits() -> None:
    """CNTK prints `The training criterion is not a number (NAN)` and ends: one reading, after every other series."""
    history = _history({"TrainLossPerSample": [5.87, 3.1]}, every=1, first=1)
    history.add([MetricPoint(3, 0.0, "criterion", NAN)])
    verdict = decide(history)
    assert (verdict.decision, verdict.reason) == (Decision.WAIT, Reason.NON_FINITE_METRIC), verdict.message


def test_a_series_that_rose_by_orders_of_magnitude_is_an_objective_blowing_up_never_a_score() -> None:
    """A log first read after its objective began to explode (a tmux run watched late): rising from its start is no
    score's improvement when it rose a thousandfold or went non-finite; a score rising from near zero still is one."""
    blown = [0.7, 0.6, 0.5, 0.45, 3.2, 1.1e8, 4.3e18, 4.2e28, math.inf, NAN, NAN, NAN]
    for name in ("objective", "value"):
        keys = select_keys(_history({name: blown, "acc": [0.9] * 4 + [0.5] * 8}), JudgePolicy())
        assert keys.train_loss == name and keys.loss_direction == "min", keys.loss_why
        assert "blowing up" in keys.loss_why
        verdict = decide(_history({name: blown, "acc": [0.9] * 4 + [0.5] * 8}))
        assert verdict.decision is Decision.STOP, verdict.message
    # an unnamed score from near zero to 0.6, and an objective that rises gently: higher is better, as before
    score = select_keys(_history({"value": [0.0005 * 1.9 ** i for i in range(10)] + [0.6] * 4}), JudgePolicy())
    assert score.loss_direction == "max", score.loss_why
    gentle = select_keys(_history({"objective": [-2.0 + 0.1 * i for i in range(14)]}), JudgePolicy())
    assert gentle.loss_direction == "max" and "blowing up" not in gentle.loss_why


def test_a_gradient_norm_exactly_zero_beside_a_loss_that_stays_is_no_gradient_reaching_the_weights() -> None:
    """YOLO-World#276's mmengine lines: grad_norm 0.0000 (once nan) at every line, the loss at about 208: WAIT at 4
    points, STOP from min_loss_points. Left alone: a 0 printed as a placeholder while the loss falls, and an RL
    objective at about 0 with equal rewards (nothing to push)."""
    def run(n: int, loss: list[float], grads: list[float]) -> tuple[str, str]:
        verdict = decide(_history({"loss": loss[:n], "grad_norm": grads[:n]}))
        return verdict.decision.value, verdict.reason.value

    flat = [208.42, 208.53, 209.18, 208.85, 208.61, 208.77, 208.49, 208.90]
    dead = [0.0, 0.0, NAN, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert run(4, flat, dead) == ("WAIT", "frozen_loss")
    assert run(8, flat, dead) == ("STOP", "frozen_loss")
    assert run(8, _falling(8, 3.0, 1.0), [0.0] * 8)[0] == "CONTINUE"
    assert run(8, [1e-8, 4e-8, 0.0, 2e-8, 1e-8, 0.0, 3e-8, 1e-8], [0.0] * 8)[0] != "STOP"
    assert run(8, flat, [0.0] * 7 + [0.3])[0] != "STOP"  # a gradient again: it moves


def test_a_running_best_is_a_record_of_the_past_never_the_evaluation_judged() -> None:
    """distance-encoding#6: `best test acc` flat by design beside accuracies stuck at 0.5: the flat record is no
    evidence, the stuck accuracy is; a healthy run's running best leaves it CONTINUE."""
    n = 8
    stuck = {"train loss": [1.3, 1.0, 0.72, 0.78, 1.11, 1.35, 1.36, 1.14], "best test acc": [0.912] * n,
             "test acc": [0.5] * n}
    keys = select_keys(_history(stuck), JudgePolicy())
    assert keys.key_metric == "test acc" and "best test acc" not in keys.eval_keys
    assert "best test acc" in decide(_history(stuck)).message or "test acc" in decide(_history(stuck)).message
    healthy = {"train loss": _falling(n), "val acc": [0.5 + 0.05 * i for i in range(n)],
               "best val acc": [0.5 + 0.05 * i for i in range(n)]}
    healthy["best val acc"][-3:] = [healthy["best val acc"][-4]] * 3
    healthy["val acc"][-3:] = [0.84, 0.83, 0.845]
    assert decide(_history(healthy)).decision is Decision.CONTINUE
    falling_best = select_keys(_history({"loss": _falling(n), "best": [0.9, 0.5, 0.8, 0.4, 0.7, 0.3, 0.6, 0.2]}),
                               JudgePolicy())
    assert "best" in falling_best.eval_keys or falling_best.key_metric is None  # not monotone: not a record
