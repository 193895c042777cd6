"""Text log parsing: real trainer lines from shared/reference/log-formats.md and their pitfalls."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from guarded_sbatch.judge import Decision, MetricHistory, decide
from guarded_sbatch.judge.keys import Direction, KeyClassifier, Role, classify_key
from guarded_sbatch.sources.textlog import TextLogSource, TrainerStateSource
from guarded_sbatch.sources.textlog_formats import parse_line

NAN = float("nan")

# (line, expected step or None, expected subset of values)
TRAINER_LINES = [
    ("{'loss': 0.0152, 'grad_norm': 0.006048723589628935, 'learning_rate': 4.6324880558618154e-05, 'epoch': 0.37}",
     None, {"loss": 0.0152, "grad_norm": 0.006048723589628935, "learning_rate": 4.6324880558618154e-05}),
    ("{'eval_loss': nan, 'eval_runtime': 3468.047, 'epoch': 4.41}", None, {"eval_loss": NAN}),
    ("[2024-08-21 10:19:42] iteration        4/   25000 | consumed samples:         4096 | learning rate: "
     "7.500000E-08 | global batch size:  1024 | lm loss: 2.120380E+00 | loss scale: 1.0 | grad norm: 14.218 | "
     "number of skipped iterations:   0 | number of nan iterations:   0 |",
     4, {"lm loss": 2.12038, "learning rate": 7.5e-08, "loss scale": 1.0, "grad norm": 14.218,
         "number of skipped iterations": 0.0}),
    (" validation loss at iteration 7000 | lm loss value: 7.174200E+00 | lm loss PPL: 1.305315E+03 |",
     7000, {"eval/lm loss value": 7.1742}),
    ("[2023-11-07 01:55:23,711] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=4, lr=[4.998e-05, "
     "4.998e-05], mom=[(0.9, 0.95), (0.9, 0.95)]", 10, {"skipped": 4.0, "lr": 4.998e-05}),
    ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768", None,
     {"loss_scale": 32768.0}),
    ('2021-03-08 12:31:36 | INFO | train_inner | {"epoch": 1, "update": 0.0, "loss": "16.475", "ppl": "91120.8", '
     '"num_updates": "1", "lr": "2e-05", "gnorm": "20.751", "loss_scale": "4"}',
     1, {"loss": 16.475, "gnorm": 20.751, "loss_scale": 4.0, "lr": 2e-05}),
    ("2020-03-23 11:39:44 | INFO | train_inner | epoch 003:      5 / 356 loss=9.44, nll_loss=8.44, ppl=347.28, "
     "gnorm=156.036, loss_scale=0, num_updates=717", 717, {"loss": 9.44, "gnorm": 156.036, "loss_scale": 0.0}),
    ("iter 2960: loss 4.1535, time 1097.23ms, mfu 15.34%", 2960, {"loss": 4.1535}),
    ("iter 3010: loss nan, time 1019.95ms, mfu 14.12%", 3010, {"loss": NAN}),
    ("step 3000: train loss 4.0390, val loss 4.0427", 3000, {"train loss": 4.039, "val loss": 4.0427}),
    ("step    1/74 | loss 7.123456 (+0.00z)| norm 1.2345 (+0.00z)| lr 1.00e-04 | 12.34 ms | 1234 tok/s",
     1, {"loss": 7.123456, "norm": 1.2345, "lr": 1e-04}),
    ("s:100 trl:4.1234 lr:0.000600 norm:1.23", 100, {"trl": 4.1234, "lr": 0.0006, "norm": 1.23}),
    ("step:125/1370 val_loss:4.3926 train_time:15678ms step_avg:136.33ms", 125, {"val_loss": 4.3926}),
    ("step 00123/21400 (0.57%) | loss: 4.123456 | grad_norm: 0.12345 | lrm: 1.00 | tok/sec: 1,234,567",
     123, {"loss": 4.123456, "grad_norm": 0.12345, "tok/sec": 1234567.0}),
    ("[rank0]:[titan] 2025-06-16 22:30:50,322 - root - INFO - \x1b[31mstep: 200  \x1b[32mloss:  6.1384  "
     "\x1b[33mmemory: 49.66GiB(52.28%)  \x1b[34mtps: 5,856  \x1b[36mtflops: 339.16  \x1b[35mmfu: 34.29%\x1b[39m",
     200, {"loss": 6.1384, "tps": 5856.0, "memory": 49.66}),
    ("Train: 0 [  50/10009 (  0%)]  Loss:  6.927876 (6.9180)  Time: 1.462s,   87.53/s  (1.896s,   67.51/s)  "
     "LR: 1.000e-06  Data: 0.026 (0.199)", 50, {"Loss": 6.927876, "LR": 1e-06}),
    ("Epoch: [2][5/313]\tTime 0.239 (4.379)\tData 0.004 (1.588)\tLoss 6.9224 (6.9277)\tPrec@1 0.391 (0.229)",
     2 * 313 + 5, {"Loss": 6.9224, "Prec@1": 0.391}),
    ('{"train_lr": 0.00051, "train_loss": 3.5921, "test_loss": 1.1100, "test_acc1": 74.15, "epoch": 150}',
     150, {"train_loss": 3.5921, "test_acc1": 74.15}),
    ("INFO:maskrcnn_benchmark.trainer:eta: 1 day, 7:39:00  iter: 120  loss: nan (nan)  lr: 0.004920  max mem: 6252",
     120, {"loss": NAN, "lr": 0.00492}),
    ("iter 1152 step 144: loss 11.4630, iter time: 1260.82ms", 1152, {"loss": 11.463}),  # litgpt: iter is the axis
    ("Iter 100: Train loss 6.437, Learning Rate 7.000e-05, It/sec 0.921, Peak mem 8.626 GB", 100,
     {"Train loss": 6.437, "Learning Rate": 7e-05}),
    ("| epoch   1 |   200/ 2983 batches | lr 20.0000 | ms/batch 11.61 | loss   nan | ppl      nan",
     200, {"lr": 20.0, "loss": NAN}),  # epochs printed from 1: epoch 1 starts at step 0
    ("Epoch 0:  22%|██▏       | 4/18 [00:17<01:02,  4.47s/it, loss=9.947, v_num=193315]", 4, {"loss": 9.947}),
    ("Epoch 3, global step 400: 'val_loss' reached 0.12345 (best 0.12345), saving model to '/x' as top 1",
     400, {"val_loss": 0.12345}),
]


def _same(a: float, b: float) -> bool:
    return a == pytest.approx(b) or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize(("line", "step", "expected"), TRAINER_LINES, ids=[text[:30] for text, _, _ in TRAINER_LINES])
def test_trainer_line(line: str, step: int | None, expected: dict[str, float]) -> None:
    parsed = parse_line(line)
    assert parsed is not None
    if step is not None:
        assert parsed.step == step
    for key, value in expected.items():
        assert key in parsed.values, (key, parsed.values)
        assert _same(parsed.values[key], value)
    assert "v_num" not in parsed.values and "epoch 003" not in parsed.values


def test_a_loggers_line_written_onto_a_progress_bar_keeps_the_bars_readings() -> None:
    """A logger that writes while a tqdm bar is on screen puts its line right after the bar's bracket (no newline):
    the bar's postfix loss is a reading, at the bar's step, beside whatever the logger's line says."""
    line = ("Epoch 3/10:  40%|####      | 40/100 [00:10<00:15,  4.00batch/s, loss=0.52]2026-01-01 10:00:00.000 | INFO"
            "     | __main__:train:12 - checkpoint saved at iter 340")
    parsed = parse_line(line)
    assert parsed is not None and parsed.values.get("loss") == 0.52, parsed
    assert parsed.step == 3 * 100 + 40 and parsed.bar == (40, 100, True)


def test_prose_is_not_metrics() -> None:
    assert parse_line("saving checkpoint to out") is None
    assert parse_line("Loading dataset shards...") is None


def _write(path: Path, text: str, mode: str = "a") -> None:
    with open(path, mode, encoding="utf-8") as handle:
        handle.write(text)


def test_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "slurm-1.out"
    _write(log, "iter 1: loss 4.1535, time 1.0ms\niter 2: loss 4.0", "w")
    source = TextLogSource(log)
    assert [(p.step, p.value) for p in source.read_new() if p.key == "loss"] == [(1, 4.1535)]
    _write(log, "123, time 1.0ms\n")
    assert [(p.step, p.value) for p in source.read_new() if p.key == "loss"] == [(2, 4.0123)]


def test_carriage_returns_ansi_and_duplicate_ranks(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    bar = " 10%|█         | 10/100 [00:01<00:09, 9.5it/s]"
    line = "[rank{r}]: \x1b[32mstep: 7  loss:  2.5000  grad_norm: 0.5\x1b[39m\n"
    _write(log, bar + "\r" + bar + "\r{'loss': 1.5, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.1}\n", "w")
    _write(log, "".join(line.format(r=r) for r in range(4)))
    points = TextLogSource(log).read_new()
    # the HF dict takes the step of HF's training bar (10/100), not its position among the dicts
    assert sorted((p.key, p.step) for p in points) == [("epoch", 10), ("grad_norm", 7), ("grad_norm", 10),
                                                      ("learning_rate", 10), ("loss", 7), ("loss", 10)]
    hf_grad = next(p for p in points if p.key == "grad_norm" and p.step == 10)
    assert math.isnan(hf_grad.value)


def test_multi_line_records_take_the_header_step(tmp_path: Path) -> None:
    log = tmp_path / "composer.log"
    _write(log, "[batch=189/3200]:\n\tTrain loss/train/total: 2.345\n\tTrain lr-DecoupledAdamW/group0: 0.0001\n"
                "[2024-04-17 09:42:26] INFO     [olmo.train:816, rank=0] [step=190/739328]\n"
                "    train/CrossEntropyLoss=11.25\n    train/Perplexity=76,631\n", "w")
    values = {(p.key, p.step): p.value for p in TextLogSource(log).read_new()}
    assert values == {("Train loss/train/total", 189): 2.345, ("Train lr-DecoupledAdamW/group0", 189): 0.0001,
                      ("train/CrossEntropyLoss", 190): 11.25, ("train/Perplexity", 190): 76631.0}


def test_step_counter_reset_after_resume_newest_wins(tmp_path: Path) -> None:
    log = tmp_path / "resume.log"
    _write(log, "".join(f"iter {s}: loss {1.0 + s}, time 1ms\n" for s in range(5)), "w")
    _write(log, "".join(f"iter {s}: loss {9.0 + s}, time 1ms\n" for s in range(3, 6)))
    values = {p.step: p.value for p in TextLogSource(log).read_new() if p.key == "loss"}
    assert values == {0: 1.0, 1: 2.0, 2: 3.0, 3: 12.0, 4: 13.0, 5: 14.0}


def test_a_step_counted_within_each_epoch_goes_on_across_epochs(tmp_path: Path) -> None:
    # PyTorch's tutorial loop: the step starts again each epoch; a NaN in epoch 3 must not meet epoch 1's values
    log = tmp_path / "tutorial.log"
    losses = {(1, 100): 2.3, (1, 200): 2.1, (1, 300): 1.9, (2, 100): 1.8, (2, 200): 1.7, (2, 300): 1.6,
              (3, 100): 1.5, (3, 200): NAN, (3, 300): NAN}
    _write(log, "".join(f"Epoch [{e}/3], Step [{k}/300], Loss: {v:.4f}\n" for (e, k), v in losses.items()), "w")
    history = MetricHistory()
    history.read_from(TextLogSource(log))
    steps, values = history.series("Loss")
    assert [int(s) for s in steps] == list(range(100, 1000, 100))
    assert [math.isnan(v) for v in values] == [False] * 7 + [True] * 2
    verdict = decide(history)
    assert (verdict.decision, verdict.reason.value) == (Decision.STOP, "non_finite_loss"), verdict.message


def test_an_epoch_summary_of_its_own_shape_never_starts_the_training_steps_again(tmp_path: Path) -> None:
    log = tmp_path / "summaries.log"
    lines = []
    for epoch in range(1, 5):
        lines += [f"step {100 * (3 * epoch - 2 + k)} | loss {2.0 - 0.01 * k}\n" for k in range(3)]
        lines.append(f"Epoch {epoch} done: mean loss 1.99\n")
    _write(log, "".join(lines), "w")
    steps = [p.step for p in TextLogSource(log).read_new() if p.key == "loss"]
    assert steps == list(range(100, 1300, 100))


def test_truncated_log_restarts_from_the_top(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    _write(log, "iter 1: loss 1.0\niter 2: loss 2.0\n", "w")
    source = TextLogSource(log)
    assert len(source.read_new()) == 2
    _write(log, "iter 1: loss 5.0\n", "w")
    assert [(p.step, p.value) for p in source.read_new()] == [(1, 5.0)]


def test_trainer_state_json(tmp_path: Path) -> None:
    state = tmp_path / "trainer_state.json"
    history = [{"epoch": 0.0025, "grad_norm": 1.0528, "learning_rate": 4.8e-06, "loss": 0.1677, "step": 25}]
    state.write_text(json.dumps({"log_history": history}))
    source = TrainerStateSource(state)
    assert {(p.key, p.step): p.value for p in source.read_new()}[("loss", 25)] == 0.1677
    assert source.read_new() == []
    history.append({"eval_loss": float("nan"), "step": 50})
    state.write_text(json.dumps({"log_history": history}))
    (point,) = source.read_new()
    assert point.key == "eval_loss" and point.step == 50 and math.isnan(point.value)


@pytest.mark.parametrize(("key", "role", "direction"), [
    ("loss", Role.TRAIN_LOSS, Direction.LOWER_IS_BETTER), ("train/loss", Role.TRAIN_LOSS, None),
    ("train_loss", Role.TRAIN_LOSS, None), ("Loss/train", Role.TRAIN_LOSS, None), ("lm loss", Role.TRAIN_LOSS, None),
    ("eval/loss", Role.EVAL_METRIC, Direction.LOWER_IS_BETTER), ("val_loss", Role.EVAL_METRIC, None),
    ("eval/accuracy", Role.EVAL_METRIC, Direction.HIGHER_IS_BETTER), ("val/acc", Role.EVAL_METRIC, None),
    ("test_acc1", Role.EVAL_METRIC, Direction.HIGHER_IS_BETTER), ("eval/lm loss PPL", Role.EVAL_METRIC, None),
    ("lr", Role.LEARNING_RATE, None), ("learning_rate", Role.LEARNING_RATE, None),
    ("Train lr-DecoupledAdamW/group0", Role.LEARNING_RATE, None), ("grad_norm", Role.GRAD_NORM, None),
    ("gnorm", Role.GRAD_NORM, None), ("optim/total_grad_norm", Role.GRAD_NORM, None),
    ("loss_scale", Role.LOSS_SCALE, None), ("loss scale", Role.LOSS_SCALE, None),
    ("skipped", Role.SKIPPED_STEPS, None), ("number of skipped iterations", Role.SKIPPED_STEPS, None),
    ("eval_runtime", Role.OTHER, None), ("epoch", Role.OTHER, None), ("mfu", Role.OTHER, None),
])
def test_key_classification(key: str, role: Role, direction: Direction | None) -> None:
    found = classify_key(key)
    assert found.role is role
    if direction is not None:
        assert found.direction is direction


def test_user_overrides_win() -> None:
    classifier = KeyClassifier({"my_metric": "eval_metric:higher", "loss": "other"})
    assert classifier.classify("my_metric").direction is Direction.HIGHER_IS_BETTER
    assert classifier.classify("loss").role is Role.OTHER
    assert classifier.primary_train_loss(["train/lm_loss", "train_loss", "loss_step"]) == "train_loss"
