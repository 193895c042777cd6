"""Generators, part 1: HF Trainer, Lightning, mmcv/mmengine, Keras, fairseq (old, simple, json)."""

from __future__ import annotations

import json

from make_corpus import NAN, TRACEBACK_KBD, TRACEBACK_OOM, TORCHRUN_TAIL, Log, generator, loss_at, nccl_timeout


def _bar(n: int, total: int, postfix: str = "") -> str:
    filled = n * 10 // total
    pct = n * 100 // total
    return (f"{pct:3d}%|{'█' * filled}{' ' * (10 - filled)}| {n}/{total} [00:{n % 60:02d}<01:{(total - n) % 60:02d},"
            f"  2.08it/s{postfix}]")


def _nan_tail(case: str, index: int, count: int, tail: int = 4) -> bool:
    return case == "nan" and index >= count - tail


def _hf(case: str, bars: bool) -> Log:
    log = Log()
    total, epochs, per_epoch, interval = 375, 3, 125, 10
    log.put("***** Running training *****")
    for text in ("  Num examples = 1,000", f"  Num Epochs = {epochs}", "  Instantaneous batch size per device = 8",
                 "  Total train batch size (w. parallel, distributed & accumulation) = 8",
                 "  Gradient Accumulation steps = 1", f"  Total optimization steps = {total}",
                 "  Number of trainable parameters = 124,439,808"):
        log.put(text)
    last = 0
    end = 230 if case == "crash" else (180 if case == "nan" else total)
    scale = 65536
    for step in range(1, end + 1):
        if bars:
            log.put("\r" + _bar(step, total) + ("" if case == "scale" and step in (41, 42, 97) else "\r"))
        if case == "scale" and step in (41, 42, 97):
            scale //= 2
            text = (f"[2023-06-07 22:16:{step % 60:02d},018] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
                    f"OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {scale * 2}, reducing to {scale}")
            completed = step if bars else last
            log.put(text + "\n", completed + 1, [("loss_scale", str(scale))])
        if step % interval == 0:
            nan = case == "nan" and step > end - 4 * interval
            loss = NAN if nan else round(loss_at(step, total, 3.0, 1.2), 4)
            entry = {"loss": loss, "grad_norm": NAN if nan else 0.5 + step / 1000.0,
                     "learning_rate": 5e-05 * (1 - step / total), "epoch": round(step / per_epoch, 2)}
            log.put("\n" + str(entry) + "\n", step, [(k, repr(v)) for k, v in entry.items()])
            last = step
        if step % per_epoch == 0:
            if bars:
                log.put("\n\r" + _bar(13, 13).replace("2.08", "9.50") + "\r")
            entry = {"eval_loss": round(loss_at(step, total, 3.1, 1.3), 4), "eval_runtime": 1.3702,
                     "eval_samples_per_second": 72.98, "eval_steps_per_second": 9.487, "epoch": step / per_epoch}
            log.put(str(entry) + "\n", step, [(k, repr(v)) for k, v in entry.items() if k != "epoch"])
    if case == "crash":
        log.put("\n" + "\n".join(TRACEBACK_OOM))
        log.crash = "CUDA out of memory"
    elif case != "nan":
        log.put("\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n")
        log.put("{'train_runtime': 180.5123, 'train_samples_per_second': 16.62, 'train_steps_per_second': 2.078, "
                "'train_loss': 1.6021, 'epoch': 3.0}")
    return log


@generator("hf_trainer")
def hf_trainer(case: str) -> Log:
    return _hf(case, bars=True)


@generator("hf_printer")
def hf_printer(case: str) -> Log | None:
    return None if case == "scale" else _hf(case, bars=False)


@generator("lightning")
def lightning(case: str) -> Log | None:
    if case == "scale":
        return None
    log = Log()
    batches, epochs = 50, 4
    log.put("GPU available: True (cuda), used: True")
    log.put("  | Name  | Type             | Params | Mode ")
    log.put("0 | model | GPT              | 85.2 M | train")
    last = "nan"  # the best value so far (set after each finite validation)
    for epoch in range(epochs):
        for n in range(1, batches + 1):
            step = epoch * batches + n
            nan = _nan_tail(case, step, epochs * batches, 6)
            loss = "nan" if nan else f"{loss_at(step, 200, 4.0, 1.5):.3f}"
            if case == "crash" and epoch == 2 and n == 20:
                log.put("\n" + "\n".join(nccl_timeout()))
                log.put("\n".join(TORCHRUN_TAIL))
                log.crash = "Watchdog caught collective operation timeout"
                return log
            log.put(f"Epoch {epoch}: " + _bar(n, batches, f", v_num=3, train_loss={loss}") + "\r", step,
                    [("train_loss", loss)])
        val = f"{loss_at(step, 200, 4.2, 1.6):.3f}"
        if case == "nan" and epoch == epochs - 1:
            val = "nan"
        log.put("\nValidation DataLoader 0: " + _bar(5, 5) + "\r")
        log.put(f"Epoch {epoch}: " + _bar(batches, batches, f", v_num=3, train_loss={loss}, val_loss={val}") + "\n",
                step, [("train_loss", loss), ("val_loss", val)])
        if val == "nan":
            log.put(f"Monitored metric val_loss = nan is not finite. Previous best value was {float(last):.3f}. "
                    "Signaling Trainer to stop.", step, [("val_loss", "nan")])
            break
        last = val
        log.put(f"Epoch {epoch}, global step {step}: 'val_loss' reached {float(val):.5f} (best {float(val):.5f}), "
                f"saving model to '/runs/ckpt/epoch={epoch}-step={step}.ckpt' as top 1", step, [("val_loss", val)])
    return log


@generator("mmcv")
def mmcv(case: str) -> Log | None:
    if case == "scale":
        return None
    log = Log()
    per_epoch, epochs = 2500, 2
    count = per_epoch * epochs // 50
    for index in range(count):
        epoch, batch = index * 50 // per_epoch + 1, index * 50 % per_epoch + 50
        step = (epoch - 1) * per_epoch + batch
        if case == "crash" and index == 60:
            log.put("Traceback (most recent call last):\n  File \"tools/train.py\", line 187, in <module>\n    main()"
                    "\n  File \"/mmdet/apis/train.py\", line 170, in train_detector\n    runner.run(data_loaders, "
                    "cfg.workflow)\nRuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB "
                    "total capacity; 9.48 GiB already allocated; 12.44 MiB free; 9.71 GiB reserved in total by PyTorch)")
            log.crash = "CUDA out of memory"
            return log
        nan = _nan_tail(case, index, count)
        values = [("lr", f"{0.02 * min(1.0, step / 500):.3e}"), ("time", f"{1.87 + index % 3 * 0.01:.3f}"),
                  ("data_time", "1.108"), ("memory", "6226"),
                  ("loss_rpn_cls", "nan" if nan else f"{0.26 - index * 0.001:.4f}"),
                  ("loss_rpn_bbox", f"{0.25 - index * 0.001:.4f}"),
                  ("loss_cls", "nan" if nan else f"{0.33 - index * 0.001:.4f}"), ("acc", f"{86.3 + index * 0.05:.4f}"),
                  ("loss_bbox", "nan" if nan else f"{0.35 - index * 0.001:.4f}"),
                  ("loss", "nan" if nan else f"{loss_at(index, count, 1.8, 0.9):.4f}")]
        body = ", ".join(f"{k}: {v}" if k != "time" else f"eta: 1 day, 15:06:01, {k}: {v}" for k, v in values)
        log.put(f"2020-05-15 14:{index % 60:02d}:49,633 - mmdet - INFO - Epoch [{epoch}][{batch}/{per_epoch}]\t{body}",
                step, values)
        if batch == per_epoch:
            log.put(f"2020-05-15 15:{index % 60:02d}:00,100 - mmdet - INFO - Epoch(val) [{epoch}][{per_epoch}]\t"
                    f"bbox_mAP: 0.{300 + epoch * 20}0, bbox_mAP_50: 0.5830, bbox_mAP_75: 0.4040", step,
                    [("eval/bbox_mAP", f"0.{300 + epoch * 20}0"), ("eval/bbox_mAP_50", "0.5830"),
                     ("eval/bbox_mAP_75", "0.4040")])
    return log


@generator("mmengine")
def mmengine(case: str) -> Log | None:
    if case == "scale":
        return None
    log = Log()
    total, count = 40000, 60
    for index in range(1, count + 1):
        step = index * 50
        if case == "crash" and index == 45:
            log.put("\n".join(TRACEBACK_KBD).replace("train.py", "tools/train.py"))
            log.crash = "KeyboardInterrupt"
            return log
        nan = _nan_tail(case, index, count + 1)
        loss = "nan" if nan else f"{loss_at(index, count, 2.0, 0.8):.4f}"
        values = [("base_lr", "1.0000e-04"), ("lr", "1.0000e-04"), ("time", f"{0.45 + index % 4 * 0.001:.4f}"),
                  ("data_time", "0.0100"), ("memory", "8000"), ("loss", loss),
                  ("decode.loss_ce", "nan" if nan else f"{float(loss) * 0.8:.4f}"),
                  ("decode.acc_seg", f"{50 + index * 0.1:.4f}"), ("aux.loss_ce", "0.2345"), ("aux.acc_seg", "45.0000")]
        body = "  ".join(f"{k}: {v}" for k, v in values[:2]) + "  eta: 1 day, 0:12:34  " + \
            "  ".join(f"{k}: {v}" for k, v in values[2:])
        log.put(f"03/08 22:{index % 60:02d}:24 - mmengine - INFO - Iter(train) [{step:5d}/{total}]  {body}", step,
                values)
        if index % 20 == 0:
            log.put(f"03/08 22:{index % 60:02d}:40 - mmengine - INFO - Iter(val) [500/500]    aAcc: 80.1200  "
                    f"mIoU: {30 + index / 10:.4f}  mAcc: 50.0000  data_time: 0.0050  time: 0.1000", step,
                    [("eval/aAcc", "80.1200"), ("eval/mIoU", f"{30 + index / 10:.4f}"), ("eval/mAcc", "50.0000"),
                     ("eval/data_time", "0.0050"), ("eval/time", "0.1000")])
    return log


@generator("keras")
def keras(case: str) -> Log | None:
    if case == "scale":
        return None
    log = Log()
    epochs = 12
    for epoch in range(1, epochs + 1):
        log.put(f"Epoch {epoch}/{epochs}")
        if case == "crash" and epoch == 9:
            log.put(" 12/100 [==>...........................] - ETA: 2s - loss: 0.3100 - accuracy: 0.8800\r", epoch,
                    [("loss", "0.3100"), ("accuracy", "0.8800")])
            log.put("Traceback (most recent call last):\n  File \"fit.py\", line 48, in <module>\n"
                    "    model.fit(x, y, epochs=12, validation_split=0.1)\n"
                    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:\n\n"
                    "OOM when allocating tensor with shape[256,1024,1024] and type float on "
                    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")
            log.crash = "ResourceExhaustedError"
            return log
        nan = _nan_tail(case, epoch, epochs + 1, 3)
        for n in (10, 50):
            log.put(f"{n:3d}/100 [{'=' * (n * 30 // 100 - 1)}>{'.' * (30 - n * 30 // 100)}] - ETA: 2s - "
                    f"loss: {0.9 - epoch * 0.04:.4f} - accuracy: 0.7000\r", epoch,
                    [("loss", f"{0.9 - epoch * 0.04:.4f}"), ("accuracy", "0.7000")])
        loss = "nan" if nan else f"{loss_at(epoch, epochs, 0.7, 0.2):.4f}"
        values = [("loss", loss), ("accuracy", f"{0.6 + epoch * 0.02:.4f}"),
                  ("val_loss", "nan" if nan else f"{float(loss) + 0.05:.4f}"), ("val_accuracy", f"{0.58 + epoch * 0.02:.4f}")]
        log.put("100/100 [==============================] - 3s 25ms/step - " +
                " - ".join(f"{k}: {v}" for k, v in values), epoch, values)
    return log


def _fairseq_inner(index: int, case: str, count: int) -> list[tuple[str, str]]:
    nan = _nan_tail(case, index, count)
    loss = "nan" if nan else f"{loss_at(index, count, 14.0, 4.0):.3f}"
    return [("loss", loss), ("ppl", "nan" if nan else f"{2 ** float(loss):.2f}"), ("wps", "49604"), ("ups", "0"),
            ("wpb", "277035.016"), ("bsz", "8563.074"), ("lr", f"{4.84525e-06 * index:.6g}"),
            ("gnorm", "nan" if nan else f"{3.901 - index * 0.01:.3f}"), ("clip", "0.000"), ("oom", "0.000")]


@generator("fairseq_old")
def fairseq_old(case: str) -> Log:
    log = Log()
    per_epoch, count = 1374, 26
    scale = 0.5
    for index in range(1, count + 1):
        epoch, batch = (index * 100 - 1) // 1300 + 1, (index * 100 - 1) % 1300 + 1
        step = index * 100 - 10
        if case in ("scale", "crash") and index in (4, 5, 9):
            for _ in range(1 if case == "scale" else (2 if index < 9 else 13)):
                scale /= 2
                log.put(f"| WARNING: overflow detected, setting loss scale to: {scale}", step - 100 + 1,
                        [("loss_scale", repr(scale))])
            if case == "crash" and index == 9:
                log.put("Traceback (most recent call last):\n  File \"train.py\", line 315, in <module>\n"
                        "    cli_main()\n  File \"/fairseq/fairseq/trainer.py\", line 286, in train_step\n"
                        "    raise FloatingPointError((\nFloatingPointError: Minimum loss scale reached (0.0001). "
                        "Your loss is probably exploding. Try lowering the learning rate, using gradient clipping or "
                        "increasing the batch size.")
                log.crash = "Minimum loss scale reached"
                return log
        values = _fairseq_inner(index, case, count) + [("loss_scale", f"{scale:.3f}"), ("wall", str(index * 5)),
                                                         ("train_wall", str(index * 4))]
        body = ", ".join(f"{k}={v}" for k, v in values[:8]) + f", num_updates={step}, " + \
            ", ".join(f"{k}={v}" for k, v in values[8:])
        log.put(f"| epoch {epoch:03d}:    {batch:3d} / {per_epoch} {body}", step, values)
        if index % 13 == 0:
            summary = values[:6] + [("clip", "0%")] + [("loss_scale", f"{scale:.3f}")]
            log.put(f"| epoch {epoch:03d} | " + " | ".join(f"{k} {v}" for k, v in summary[:6]) +
                    f" | num_updates {step + 5} | " + " | ".join(f"{k} {v}" for k, v in summary[6:]), step + 5, summary)
            valid = [("eval/loss", f"{loss_at(index, count, 13.0, 5.0):.3f}"), ("eval/nll_loss", "8.088"),
                     ("eval/ppl", "272.04")]
            log.put(f"| epoch {epoch:03d} | valid on 'valid' subset | " +
                    " | ".join(f"{k[5:]} {v}" for k, v in valid) + f" | num_updates {step + 5} | best_loss 9.11817",
                    step + 5, valid + [("eval/best_loss", "9.11817")])
            log.put(f"| saved checkpoint checkpoints/checkpoint{epoch}.pt (epoch {epoch} @ {step + 5} updates) "
                    "(writing took 7.2686069011688 seconds)")
    return log


@generator("fairseq_simple")
def fairseq_simple(case: str) -> Log:
    log = Log()
    per_epoch, count = 356, 30
    scale = 16.0
    for index in range(1, count + 1):
        step = index * 35
        epoch, batch = step // per_epoch + 1, step % per_epoch
        if case == "scale" and index in (6, 7, 15):
            scale /= 2
            log.put(f"2020-03-23 11:39:{index:02d} | INFO | fairseq.trainer | NOTE: gradient overflow detected, "
                    f"ignoring gradient, setting loss scale to: {scale}", step - 35 + 1, [("loss_scale", repr(scale))])
        if case == "crash" and index == 20:
            log.put("2020-03-23 11:50:00 | ERROR | fairseq.trainer | Traceback (most recent call last):")
            log.put("Traceback (most recent call last):\n  File \"fairseq_cli/train.py\", line 557, in <module>\n"
                    "    cli_main()\nRuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/"
                    "ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.14.3")
            log.crash = "RuntimeError: NCCL error"
            return log
        values = _fairseq_inner(index, case, count) + [("loss_scale", f"{scale:g}"), ("train_wall", "12"),
                                                         ("gb_free", "9.3"), ("wall", str(index * 60))]
        body = ", ".join(f"{k}={v}" for k, v in values[:7]) + f", num_updates={step}, " + \
            ", ".join(f"{k}={v}" for k, v in values[7:])
        log.put(f"2020-03-23 11:{index % 60:02d}:44 | INFO | train_inner | epoch {epoch:03d}:    {batch:3d} / "
                f"{per_epoch} {body}", step, values)
        if index % 10 == 0:
            summary = values[:3]
            log.put(f"2020-03-23 12:{index:02d}:44 | INFO | train | epoch {epoch:03d} | " +
                    " | ".join(f"{k} {v}" for k, v in summary) + f" | num_updates {step + 7} | wall {index * 61}",
                    step + 7, summary + [("wall", str(index * 61))])
            log.put(f"2020-03-23 12:{index:02d}:50 | INFO | valid | epoch {epoch:03d} | valid on 'valid' subset | "
                    f"loss 9.5 | nll_loss 8.6 | ppl 388.0 | num_updates {step + 7} | best_loss 9.5", step + 7,
                    [("eval/loss", "9.5"), ("eval/nll_loss", "8.6"), ("eval/ppl", "388.0"), ("eval/best_loss", "9.5")])
    return log


@generator("fairseq_json")
def fairseq_json(case: str) -> Log:
    log = Log()
    count = 30
    scale = 4.0
    for index in range(1, count + 1):
        step = index * 20
        if case == "scale" and index in (5, 11):
            scale /= 2
            log.put(f"2021-03-08 12:{index:02d}:10 | INFO | fairseq.trainer | NOTE: gradient overflow detected, "
                    f"ignoring gradient, setting loss scale to: {scale}", step - 20 + 1, [("loss_scale", repr(scale))])
        if case == "crash" and index == 21:
            log.put("\n".join(TRACEBACK_KBD).replace("train.py", "fairseq_cli/hydra_train.py"))
            log.crash = "KeyboardInterrupt"
            return log
        inner = dict(_fairseq_inner(index, case, count)[:8])
        entry = {"epoch": 1, "update": round(index / count, 3), **inner, "num_updates": str(step),
                 "loss_scale": f"{scale:g}", "train_wall": "99", "gb_free": "9.3", "wall": str(index * 5)}
        log.put(f"2021-03-08 12:{index:02d}:36 | INFO | train_inner | {json.dumps(entry)}", step,
                [(k, str(v)) for k, v in entry.items() if k != "num_updates"])
        if index % 15 == 0:
            valid = {"epoch": 1, "valid_loss": "9.5", "valid_nll_loss": "8.6", "valid_ppl": "388.0",
                     "valid_num_updates": str(step), "valid_best_loss": "9.5"}
            log.put(f"2021-03-08 12:{index:02d}:50 | INFO | valid | {json.dumps(valid)}", step,
                    [("eval/epoch" if k == "epoch" else k, str(v)) for k, v in valid.items() if "num_updates" not in k])
    return log
