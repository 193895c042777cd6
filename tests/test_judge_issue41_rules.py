"""The readings and rules issue 41's public-log corpus asked for, each on a log written as its trainer prints it and
read by the real text reader (TextLogSource), with a healthy twin that the rule must leave alone."""

from __future__ import annotations

from pathlib import Path

from package_extras import history_read
from guarded_sbatch.judge import decide
from guarded_sbatch.judge.verdict import Verdict
from guarded_sbatch.sources.textlog import TextLogSource


def _judge(tmp_path: Path, text: str, name: str = "train.log") -> Verdict:
    log = tmp_path / name
    log.write_text(text)
    return decide(history_read(TextLogSource(log)))


def _pair(verdict: Verdict) -> tuple[str, str]:
    return verdict.decision.value, verdict.reason.value


def test_a_traceback_pasted_flat_is_still_a_crash(tmp_path: Path) -> None:
    lines = "".join(f"[ train: Epoch = 0 | iter = {i} | loss = {4.4 - 0.01 * i:.2f} ]\n" for i in range(1, 8))
    flat = ('Traceback (most recent call last):\nFile "scripts/train.py", line 542, in\nmain(args)\n'
            'File "drqa/utils.py", line 232, in metric_max\nreturn max(scores)\n'
            "ValueError: max() arg is an empty sequence\n")
    verdict = _judge(tmp_path, lines + flat)
    assert _pair(verdict) == ("STOP", "crashed") and "ValueError" in verdict.message


def test_a_lone_ctrl_c_is_an_interruption_not_a_crash(tmp_path: Path) -> None:
    lines = "".join(f"step {s} loss {2.0 - 0.01 * s:.3f}\n" for s in range(1, 8))
    assert _pair(_judge(tmp_path, lines + "^C\n")) == ("WAIT", "interrupted")
    assert _pair(_judge(tmp_path, lines, "healthy.log")) == ("CONTINUE", "healthy")


def test_a_name_indexed_by_its_step(tmp_path: Path) -> None:
    healthy = "".join(f"train_batch_loss[ {s} ]:  {2.0 - 0.001 * s:.4f}\n" for s in range(10, 90, 10))
    verdict = _judge(tmp_path, healthy)
    assert _pair(verdict) == ("CONTINUE", "healthy") and verdict.last_step == 80
    broken = healthy + "".join(f"train_batch_loss[ {s} ]:  nan\n" for s in range(90, 130, 10))
    assert _pair(_judge(tmp_path, broken, "nan.log")) == ("STOP", "non_finite_loss")


def test_a_perplexity_at_inf_stops_with_one_evaluation(tmp_path: Path) -> None:
    train = "".join(f"INFO:tensorflow:Step = {s} ; Learning rate = 0.0007 ; Loss = {3.1 - s / 1e6:.4f}\n"
                    for s in range(435100, 435900, 100))
    inf = "INFO:tensorflow:Evaluation result for step 435000: loss = 148890.718750 ; perplexity = inf\n"
    assert _pair(_judge(tmp_path, inf + train)) == ("STOP", "eval_failing")
    fine = "INFO:tensorflow:Evaluation result for step 435000: loss = 3.1 ; perplexity = 22.2\n"
    assert _pair(_judge(tmp_path, fine + train, "fine.log")) == ("CONTINUE", "healthy")


def test_a_loss_like_series_swinging_up_is_a_wait(tmp_path: Path) -> None:
    ppl = [2268.0, 2482.0, 2981.0, 2500.0, 2700.0, 16091.0]
    noisy = [2268.0, 2482.0, 2981.0, 2500.0, 2700.0, 3900.0]
    text = "".join(f"step {100 * (i + 1)}; xent: {8.0 - 0.001 * i:.3f}; ppl: {p}\n" for i, p in enumerate(ppl))
    verdict = _judge(tmp_path, text)
    assert _pair(verdict) == ("WAIT", "divergence") and "ppl" in verdict.message
    calm = "".join(f"step {100 * (i + 1)}; xent: {8.0 - 0.001 * i:.3f}; ppl: {p}\n" for i, p in enumerate(noisy))
    assert _judge(tmp_path, calm, "calm.log").decision.value == "CONTINUE"


def test_the_evaluation_rising_while_the_training_loss_falls_is_a_wait(tmp_path: Path) -> None:
    val = [1.39, 1.30, 1.287, 1.32, 1.506]
    text = "".join(f"Epoch: {e + 1} train_loss: {1.86 - 0.05 * e:.4f} val_loss: {v}\n" for e, v in enumerate(val))
    assert _pair(_judge(tmp_path, text)) == ("WAIT", "eval_regressing")
    better = [1.39, 1.30, 1.287, 1.28, 1.27]
    text = "".join(f"Epoch: {e + 1} train_loss: {1.86 - 0.05 * e:.4f} val_loss: {v}\n" for e, v in enumerate(better))
    assert _pair(_judge(tmp_path, text, "better.log")) == ("CONTINUE", "healthy")


def test_a_loss_guessed_by_behaviour_that_shows_no_learning_is_unguarded(tmp_path: Path) -> None:
    flat = [3.58, 3.52, 3.59, 3.54, 3.57, 3.48, 3.49, 3.55]
    text = "".join(f"199   {311500 + 100 * i}   {v}   0.18\n" for i, v in enumerate(flat))
    assert _pair(_judge(tmp_path, text)) == ("WAIT", "unguarded")
    falling = "".join(f"199   {311500 + 100 * i}   {3.5 - 0.1 * i:.2f}   0.18\n" for i in range(8))
    assert _pair(_judge(tmp_path, falling, "falling.log")) == ("CONTINUE", "healthy")
