"""Text-log shapes from real public logs (issue 37), each judged the way `monitor --once --log` does: the reader on
the lines as the tools printed them (quoted from the threads listed in tests/data/public_runs/MANIFEST.toml), then
the judge. Each kind of evidence decides by its strength, with the key it judged and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from package_extras import history_read
from guarded_sbatch.judge.keys import Role, classify_key
from guarded_sbatch.judge import Decision, MetricHistory, Reason, decide
from guarded_sbatch.sources.textlog import TextLogSource


def _judge(tmp_path: Path, text: str) -> tuple[MetricHistory, object]:
    log = tmp_path / "train.log"
    log.write_text(text, encoding="utf-8")
    history = MetricHistory()
    source = TextLogSource(log)
    while history.read_from(source):
        pass
    return history, decide(history)


DEEPSPEED_AT_FLOOR = "".join(
    f"  0%|▋          | {n}/24128 [00:40<2:40:10,  2.50it/s][2021-11-27 00:36:54,800] [INFO] [stage2.py:1628:step] "
    "[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1\n" for n in range(97, 101))
DEEPSPEED_HALVING = "".join(
    f" 14%|█▍        | {n}/2724 [13:58:09<86:18:35, 132.44s/it][2023-06-07 22:16:00,018] [INFO] "
    f"[loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {s}, "
    f"reducing to {s // 2}\n\n" for n, s in zip(range(378, 383), (64, 32, 16, 8, 4)))
FAIRSEQ_BELOW_FLOOR = (
    "2020-03-23 11:39:44 | INFO | train_inner | epoch 003:      5 / 356 loss=9.44, nll_loss=8.44, ppl=347.28, "
    "wps=30690.8, ups=0.07, wpb=427295, bsz=14390.4, num_updates=700, lr=0.000175, gnorm=156.036, loss_scale=0, "
    "train_wall=1281, wall=9877\n"
    "2020-03-23 11:41:18 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: 0.00048828125\n"
    "2020-03-23 11:48:04 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: 0.000244140625\n")


@pytest.mark.parametrize(("text", "words"), [
    (DEEPSPEED_AT_FLOOR, "overflow at the loss scale's floor (1) at each of the last 4 logged steps"),
    (DEEPSPEED_HALVING, "overflow at each of 5 consecutive steps"),
    (FAIRSEQ_BELOW_FLOOR, "over a thousand times below its floor"),
], ids=["deepspeed-attempted-1-reducing-to-1", "deepspeed-64-to-2-step-after-step", "fairseq-0.0002"])
def test_an_fp16_loss_scale_at_its_floor_with_overflow_every_step_is_broken(tmp_path: Path, text: str,
                                                                            words: str) -> None:
    _, verdict = _judge(tmp_path, text)
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.LOSS_SCALE_COLLAPSE, verdict.message
    assert words in verdict.message


def test_an_early_loss_scale_search_far_above_the_floor_is_not_a_collapse(tmp_path: Path) -> None:
    text = "".join(f"[2023-01-01 00:00:0{i},000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
                   f"Skipping step. Attempted loss scale: {2 ** (16 - i)}, reducing to {2 ** (15 - i)}\n" for i in range(6))
    _, verdict = _judge(tmp_path, text)
    assert verdict.decision is not Decision.STOP, verdict.message


def test_paddleocr_nanxxx_is_a_nan(tmp_path: Path) -> None:
    line = ("[2023/05/26 21:49:05] ppocr INFO: epoch: [1/2000], global_step: {step}, lr: 0.000013, acc: 0.000000, "
            "norm_edit_dis: 0.000000, loss: nanxxx, avg_reader_cost: 0.01411 s, avg_batch_cost: 0.91575 s, "
            "avg_samples: 1560.0, ips: 1703.52077 samples/s, eta: 23 days, 9:29:56\n")
    history, verdict = _judge(tmp_path, line.format(step=174) + line.format(step=177))
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.NON_FINITE_LOSS, verdict.message
    assert history.series("loss")[0].tolist() == [174, 177]


def test_a_key_in_brackets_is_read(tmp_path: Path) -> None:
    lines = ("2023-01-25 00:21:09.074 | INFO     | trainers.base_trainer:train_epochs:256 - [R0] | E5 iter[ 14/ 15] | "
             "[Loss] 51566519.44 | [exp] ./exp/0125/car/3dbf3ah_hvae_lion_B40 | [step]    89 | [url] none | [time] "
             "0.4m (~5h) |[best] 0 -100.000x1e-2 \n")
    history, _ = _judge(tmp_path, lines)
    assert history.series("Loss")[0].tolist() == [89] and history.series("Loss")[1].tolist() == [51566519.44]


def test_yolo_tables_loss_is_the_sum_of_its_parts_and_a_row_before_its_header_is_skipped(tmp_path: Path) -> None:
    text = ("                   all         48         28          0          0          0          0\n\n"
            + "".join(f"      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size\n"
                      f"      {e}/30      13.1G      {b}      {c}     {d}          9        576\n"
                      "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95)\n"
                      "                   all         48         28          0          0          0          0\n\n"
                      for e, b, c, d in ((13, 1.822, 21.96, 0.5235), (14, 4.284, 10.96, 1.131),
                                         (15, 6.077, 7.64, 1.456))))
    history, verdict = _judge(tmp_path, text)
    assert "all" not in history.keys()  # the first row came before any header: not `all = 48`
    steps, losses = history.series("loss")
    assert steps.tolist() == [13, 14, 15] and losses[0] == pytest.approx(1.822 + 21.96 + 0.5235)
    assert history.series("val/mAP50")[1].tolist() == [0.0, 0.0, 0.0]  # the `all` rows are the evaluation's
    assert verdict.summary["loss_key"].startswith("loss: a training-loss name")
    assert verdict.decision is Decision.WAIT and "val/mAP50 exactly 0 at each of its 3" in verdict.message


def test_yolov5_first_tables_box_obj_cls_nan_is_stopped(tmp_path: Path) -> None:
    text = (" Epoch   gpu_mem       box       obj       cls    labels  img_size\n"
            "      1/99     2.64G         nan       nan       nan         4       416: 100%|██████████| 7/7 "
            "[00:15<00:00,  2.27s/it]\n"
            "               Class     Images     Labels          P          R     mAP@.5 mAP@.5:.95: 100%|██████████| "
            "1/1 [00:01<00:00,  1.30s/it]\n"
            "                 all               14          0             0          0            0              0\n")
    history, verdict = _judge(tmp_path, text)
    assert {"box_loss", "obj_loss", "cls_loss", "loss"} <= set(history.keys())
    assert verdict.decision is Decision.STOP and "every other loss term" in verdict.message, verdict.message


def test_every_loss_term_nan_at_once_needs_no_second_line(tmp_path: Path) -> None:
    line = ("08/03 22:09:24 - mmengine - INFO - Epoch(train)  [1][ 500/2931]  lr: 2.0000e-02  eta: 0:39:15  time: "
            "0.0578  data_time: 0.0017  memory: 2389  loss: nan  loss_rpn_cls: nan  loss_rpn_bbox: nan  loss_cls: nan  "
            "acc: 0.0000  loss_bbox: nan\n")
    _, verdict = _judge(tmp_path, line)
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.NON_FINITE_LOSS, verdict.message


def test_loss_and_grad_norm_exactly_zero_from_the_start_is_nothing_to_learn(tmp_path: Path) -> None:
    text = "".join(f"{{'loss': 0.0, 'grad_norm': 0.0, 'learning_rate': {i}e-07, 'epoch': {i * 0.025:.2f}}}\n"
                   for i in range(2, 13))
    _, verdict = _judge(tmp_path, text)
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.ZERO_LOSS, verdict.message


@pytest.mark.parametrize(("text", "words"), [
    ("Epoch 1/100\n89595/89595 [==============================] - 9s - loss: 5.7178 - acc: 0.6446  \n"
     + "".join(f"Epoch {e}/100\n89595/89595 [==============================] - 8s - loss: 5.7257 - acc: 0.6448  \n"
               for e in (2, 3, 4)), "at exactly 5.7257 each time"),
    ("= >   step: 7 loss: 0.6869 accuracy:0.64\n" + "".join(f"= >   step: {s} loss: 0.6931 accuracy:0.6{s % 10}\n"
                                                            for s in range(8, 11)), "= ln 2"),
    ("".join(f"TRAIN EPOCH  {e}:\nloss             {v}\ncrl              0.0{9 - e}\naccuracy         0.249471\n\n"
             for e, v in ((1, 1.386393), (2, 1.386381), (3, 1.386379))), "= ln 4"),
], ids=["keras-same-loss-three-epochs", "tensorflow-ln2", "r2c-ln4"])
def test_a_frozen_loss_decides_with_few_points(tmp_path: Path, text: str, words: str) -> None:
    _, verdict = _judge(tmp_path, text)
    assert verdict.decision is Decision.STOP and verdict.reason is Reason.FROZEN_LOSS, verdict.message
    assert words in verdict.message


def test_a_progress_bar_redraw_is_read_as_drawn_and_an_unchanged_display_is_not_a_new_reading(tmp_path: Path) -> None:
    log = tmp_path / "bar.log"
    bars = [f"\rEpoch 0:  {n * 2}%|█         | {n}/50 [00:0{n % 10}<00:10, 4.47it/s, train_loss={v}]"
            for n, v in ((9, "0.368"), (10, "0.290"), (11, "0.290"), (12, "nan"))]
    log.write_text("".join(bars[:2]), encoding="utf-8")  # no newline: the bar stays on one line
    source = TextLogSource(log)
    assert [(p.step, p.value) for p in source.read_new()] == [(9, 0.368), (10, 0.29)]
    with log.open("a", encoding="utf-8") as handle:
        handle.write("".join(bars[2:]))
    points = source.read_new()
    assert [p.step for p in points] == [12] and points[0].value != points[0].value  # 0.290 again is no new reading


@pytest.mark.parametrize(("key", "role"), [
    ("closs", Role.TRAIN_LOSS), ("train/closs", Role.TRAIN_LOSS), ("vloss", Role.EVAL_METRIC),
    ("val/mAP50", Role.EVAL_METRIC), ("metrics/mAP50-95(B)", Role.EVAL_METRIC), ("total_loss", Role.TRAIN_LOSS),
    ("glossary", Role.OTHER),
])
def test_loss_and_metric_names_as_tools_write_them(key: str, role: Role) -> None:
    assert classify_key(key).role is role


def test_the_verdict_says_which_key_was_taken_as_the_loss_and_why(tmp_path: Path) -> None:
    text = "".join(f"iter: {i * 20}  total_loss: {2.0 - i / 10:.3f}  loss_cls: {1.0 - i / 20:.3f}  loss_box_reg: "
                   f"{0.5:.3f}  lr: 0.0002\n" for i in range(6))
    _, verdict = _judge(tmp_path, text)
    assert verdict.summary["keys"]["train_loss"] == "total_loss"
    assert "the plainest / total name among 3" in verdict.summary["loss_key"], verdict.summary["loss_key"]


def test_yolo_results_csv_is_read_per_epoch_with_its_loss_as_the_sum_of_its_parts(tmp_path: Path) -> None:
    from guarded_sbatch.sources.csvlog import LightningCsvSource

    header = ("               epoch,      train/box_loss,      train/obj_loss,      train/cls_loss,   metrics/precision,"
              "      metrics/recall,     metrics/mAP_0.5,metrics/mAP_0.5:0.95,        val/box_loss,        val/obj_loss,"
              "        val/cls_loss,               x/lr0,               x/lr1,               x/lr2\n")
    rows = ["0,0.094566,0.036931,0.032046,0.00199,0.012195,0.00046836,0.00010537,0.077889,0.025781,0.030018,0.07011,"
            "0.0033099,0.0033099\n"] + [f"{e},nan,nan,nan,0,0,0,0,nan,nan,nan,0.040037,0.0066111,0.0066111\n"
                                        for e in (1, 2)]
    path = tmp_path / "results.csv"
    path.write_text(header + "".join(f"{' ' * 19}{row}" for row in rows), encoding="utf-8")
    history = history_read(LightningCsvSource(path))
    assert history.series("train/loss")[0].tolist() == [0, 1, 2]
    assert history.series("train/loss")[1][0] == pytest.approx(0.094566 + 0.036931 + 0.032046)
    verdict = decide(history)
    assert verdict.decision is Decision.STOP and verdict.summary["keys"]["lr"].startswith("x/lr"), verdict.message
