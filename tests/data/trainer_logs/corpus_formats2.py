"""Generators, part 2: litgpt, DeepSpeed, Megatron, torchtitan, timm, nanoGPT, JSON lines, the
README's own format, detectron2, ultralytics."""

from __future__ import annotations

import json

from make_corpus import NAN, TRACEBACK_KBD, TRACEBACK_OOM, TORCHRUN_TAIL, Log, generator, loss_at, nccl_timeout


def _nan(case: str, index: int, count: int, tail: int = 4) -> bool:
    return case == "nan" and index > count - tail


@generator("litgpt")
def litgpt(case: str) -> Log | None:
    if case == "scale":
        return None
    log = Log()
    count = 40
    for index in range(1, count + 1):
        iteration = index * 8
        if case == "crash" and index == 30:
            log.put("\n".join(TRACEBACK_OOM))
            log.crash = "CUDA out of memory"
            return log
        loss = "nan" if _nan(case, index, count) else f"{loss_at(index, count, 11.5, 1.7):.4f}"
        log.put(f"iter {iteration} step {iteration // 4}: loss {loss}, iter time: {1260.82 + index:.2f}ms", iteration,
                [("loss", loss), ("iter time", f"{1260.82 + index:.2f}")])
        if index % 10 == 0:
            log.put(f"iter {iteration}: val loss {loss_at(index, count, 11.0, 1.9):.4f}, val time: 5234.56 ms",
                    iteration, [("val loss", f"{loss_at(index, count, 11.0, 1.9):.4f}"), ("val time", "5234.56")])
    return log


@generator("deepspeed")
def deepspeed(case: str) -> Log:
    log = Log()
    count = 40
    scale = 65536
    for step in range(1, count + 1):
        if case in ("scale", "crash") and step in (7, 8, 19, 27) or (case == "crash" and step > 27):
            previous, scale = scale, max(1, scale // 2)
            if step == 19:
                log.put(f"[2023-11-07 01:55:{step:02d},100] [INFO] [loss_scaler.py:183:update_scale] "
                        f"Grad overflow on iteration {step}")
                log.put(f"[2023-11-07 01:55:{step:02d},101] [INFO] [loss_scaler.py:184:update_scale] "
                        f"Reducing dynamic loss scale from {float(previous)} to {float(scale)}", step,
                        [("loss_scale", str(float(scale)))])
            else:
                log.put(f"[2023-11-07 01:55:{step:02d},300] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] "
                        f"OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {previous}, reducing to {scale}",
                        step, [("loss_scale", str(scale))])
            if case == "crash" and scale == 1 and previous == 1:
                log.put("Traceback (most recent call last):\n  File \"main.py\", line 398, in <module>\n    main()\n"
                        "  File \"/deepspeed/runtime/fp16/loss_scaler.py\", line 175, in update_scale\n"
                        "    raise Exception(\nException: Current loss scale already at minimum - cannot decrease "
                        "scale anymore. Exiting run.")
                log.crash = "Current loss scale already at minimum"
                return log
        loss = "nan" if _nan(case, step, count) else f"{loss_at(step, count, 2.8, 1.9):.4f}"
        log.put(f"Epoch: 0, Step: {step}, Rank: 0, loss = {loss}", step, [("loss", loss)])
        if step % 10 == 0:
            log.put(f"[2023-11-07 01:56:{step:02d},711] [INFO] [logging.py:96:log_dist] [Rank 0] step={step}, "
                    f"skipped={4 if case == 'scale' and step > 27 else 0}, lr=[4.998e-05, 4.998e-05], "
                    "mom=[(0.9, 0.95), (0.9, 0.95)]", step,
                    [("skipped", str(4 if case == "scale" and step > 27 else 0)), ("lr", "4.998e-05")])
            log.put(f"[2023-11-07 01:56:{step:02d},712] [INFO] [timer.py:260:stop] epoch=0/micro_step={step}/"
                    f"global_step={step}, RunningAvgSamplesPerSec=25.02, CurrSamplesPerSec=25.70, "
                    "MemAllocated=4.32GB, MaxMemAllocated=38.49GB", step,
                    [("RunningAvgSamplesPerSec", "25.02"), ("CurrSamplesPerSec", "25.70"), ("MemAllocated", "4.32"),
                     ("MaxMemAllocated", "38.49")])
    return log


@generator("megatron")
def megatron(case: str) -> Log:
    log = Log()
    count, interval = 30, 10
    prefix = "[default0]:" if case == "scale" else ""
    scale = 65536.0 if case == "scale" else 1.0
    for index in range(1, count + 1):
        iteration = index * interval
        if case == "crash" and index == 22:
            log.put("\n".join(nccl_timeout()))
            log.put("\n".join(TORCHRUN_TAIL))
            log.crash = "Watchdog caught collective operation timeout"
            return log
        nan = _nan(case, index, count)
        skipped = 1 if case == "scale" and index in (5, 9, 17) else 0
        scale = scale / 2 if skipped else scale
        cells = [("consumed samples", str(iteration * 1024)), ("elapsed time per iteration (ms)", "270125.4"),
                 ("throughput per GPU (TFLOP/s/GPU)", "449.6"), ("learning rate", f"{7.5e-08 * index:.6E}"),
                 ("global batch size", "1024")]
        if not nan:
            cells += [("lm loss", f"{loss_at(index, count, 9.0, 2.1):.6E}")]
        cells += [("loss scale", f"{scale:.1f}")]
        if not nan:
            cells += [("grad norm", f"{14.218 - index * 0.1:.3f}")]
        cells += [("number of skipped iterations", f"{skipped:3d}"),
                  ("number of nan iterations", f"{interval if nan else 0:3d}")]
        text = f"{prefix}[2024-08-21 10:{index:02d}:42] iteration {iteration:8d}/{25000:8d} | " + \
            " | ".join(f"{k}: {v}" for k, v in cells) + " |"
        log.put(text, iteration, cells)
        if index % 10 == 0:
            log.put(prefix + "-" * 100)
            log.put(f"{prefix} validation loss at iteration {iteration} | lm loss value: {3.17 + 1 / index:.6E} | "
                    f"lm loss PPL: {1.305315E+03:.6E} | ", iteration,
                    [("eval/lm loss value", f"{3.17 + 1 / index:.6E}"), ("eval/lm loss PPL", f"{1.305315E+03:.6E}")])
            log.put(prefix + "-" * 100)
    return log


@generator("torchtitan")
def torchtitan(case: str) -> Log | None:
    if case == "scale":
        return None
    log = Log()
    count = 40
    for step in range(1, count + 1):
        if case == "crash" and step == 31:
            log.put("\n".join("[rank0]: " + line for line in TRACEBACK_OOM))
            log.crash = "CUDA out of memory"
            return log
        nan = _nan(case, step, count)
        loss = "nan" if nan else f"{loss_at(step, count, 12.2, 6.1):7.4f}"
        grad = "nan" if nan else f"{4.5678 - step * 0.01:7.4f}"
        values = [("loss", loss), ("grad_norm", grad), ("memory", "49.66"), ("tps", "5,856"), ("tflops", "339.16"),
                  ("mfu", "34.29")]
        for rank in (0, 1) if step % 10 == 0 else (0,):
            log.put(f"[rank{rank}]:[titan] 2025-06-16 22:30:{step:02d},322 - root - INFO - \x1b[31mstep: {step:2}  "
                    f"\x1b[32mloss: {loss}  \x1b[38;2;180;60;0mgrad_norm: {grad}  \x1b[38;2;54;234;195mmemory: "
                    "49.66GiB(52.28%)  \x1b[34mtps: 5,856  \x1b[36mtflops: 339.16  \x1b[35mmfu: 34.29%\x1b[39m", step,
                    values)
        if step % 20 == 0:
            log.put(f"[rank0]:[titan] 2025-06-16 22:31:{step:02d},100 - root - INFO - \x1b[33mvalidate step: {step:2}  "
                    f"\x1b[32mloss: {6.9 - step * 0.01:7.4f}\x1b[39m", step, [("eval/loss", f"{6.9 - step * 0.01:7.4f}")])
    return log


@generator("timm")
def timm(case: str) -> Log | None:
    if case == "scale":
        return None
    log = Log()
    per_epoch, epochs = 1251, 3
    count = 0
    for epoch in range(epochs):
        for batch in (0, 200, 400, 600, 800, 1000, 1200, 1250):
            count += 1
            step = epoch * per_epoch + batch
            if case == "crash" and epoch == 2 and batch == 600:
                log.put("\n".join(TRACEBACK_KBD).replace("train.py", "timm/train.py"))
                log.crash = "KeyboardInterrupt"
                return log
            nan = _nan(case, count, 24)
            loss = "nan" if nan else f"{loss_at(count, 24, 6.95, 3.1):#.3g}"
            values = [("Loss", loss), ("Time", f"{5.404 - count * 0.01:.3f}"), ("LR", f"{1e-05 * (1 + epoch):.3e}"),
                      ("Data", f"{3.872 - count * 0.01:.3f}")]
            log.put(f"Train: {epoch} [{batch:>4d}/{per_epoch} ({100 * batch / per_epoch:>3.0f}%)]  Loss: {loss} "
                    f"({loss})  Time: {values[1][1]}s,  189.48/s  (5.404s,  189.48/s)  LR: {values[2][1]}  "
                    f"Data: {values[3][1]} (3.872)", step, values)
        for batch in (0, 29):
            values = [("eval/Time", f"{6.593 - batch * 0.1:.3f}"), ("eval/Loss", f"{6.723 - epoch:.3f}"),
                      ("eval/Acc@1", f"{10.0 * epoch:.3f}"), ("eval/Acc@5", f"{20.0 * epoch:.3f}")]
            log.put(f"Test: [{batch:>4d}/30]  Time: {values[0][1]} (6.593)  Loss:  {values[1][1]} ( 6.723)  "
                    f"Acc@1: {values[2][1]} (  0.000)  Acc@5: {values[3][1]} (  0.000)", step, values)
    return log


@generator("nanogpt")
def nanogpt(case: str) -> Log | None:
    if case == "scale":
        return None
    log = Log()
    count = 60
    log.put("tokens per iteration will be: 491,520")
    for iteration in range(0, count * 10, 10):
        index = iteration // 10
        if iteration % 250 == 0:
            train, val = loss_at(index, count, 10.9, 3.3), loss_at(index, count, 10.95, 3.4)
            log.put(f"step {iteration}: train loss {train:.4f}, val loss {val:.4f}", iteration,
                    [("train loss", f"{train:.4f}"), ("val loss", f"{val:.4f}")])
            if iteration:
                log.put("saving checkpoint to out")
        if case == "crash" and index == 50:
            log.put("\n".join(TRACEBACK_OOM))
            log.crash = "CUDA out of memory"
            return log
        loss = "nan" if _nan(case, index + 1, count) else f"{loss_at(index, count, 10.9, 3.2):.4f}"
        mfu = -100.0 if index < 5 else 15.34 + index * 0.01
        log.put(f"iter {iteration}: loss {loss}, time {1097.23 + index:.2f}ms, mfu {mfu:.2f}%", iteration,
                [("loss", loss), ("time", f"{1097.23 + index:.2f}"), ("mfu", f"{mfu:.2f}")])
    return log


@generator("jsonl")
def jsonl(case: str) -> Log:
    log = Log()
    epochs = 14
    for epoch in range(epochs):
        if case == "crash" and epoch == 10:
            log.put("Traceback (most recent call last):\n  File \"main.py\", line 489, in <module>\n    main(args)\n"
                    "RuntimeError: DataLoader worker (pid 31337) is killed by signal: Killed.")
            log.put("slurmstepd: error: Detected 1 oom_kill event in StepId=123456.0. Some of your processes may have "
                    "been killed by the cgroup out-of-memory handler.")
            log.crash = "DataLoader worker"
            return log
        nan = _nan(case, epoch + 1, epochs)
        entry = {"train_lr": 0.00051 * (epoch + 1), "train_loss": NAN if nan else round(loss_at(epoch, epochs, 6.9, 3.5), 4),
                 "test_loss": NAN if nan else round(loss_at(epoch, epochs, 5.0, 1.1), 4),
                 "test_acc1": 5.0 * epoch, "test_acc5": 9.0 * epoch, "epoch": epoch, "n_parameters": 11590840}
        if case == "scale":
            entry["train_loss_scale"] = 65536.0 / (2 ** (epoch // 5))
        log.put(json.dumps(entry), epoch, [(k, str(v)) for k, v in entry.items() if k != "epoch"])
    return log


@generator("readme")
def readme(case: str) -> Log | None:
    if case == "scale":
        return None
    log = Log()
    count = 30
    for step in range(0, count * 10, 10):
        if case == "crash" and step == 250:
            log.put("Traceback (most recent call last):\n  File \"train.py\", line 88, in fetch\n    batch = next(it)\n"
                    "StopIteration\n\nDuring handling of the above exception, another exception occurred:\n\n"
                    "Traceback (most recent call last):\n  File \"train.py\", line 140, in <module>\n    run()\n"
                    "RuntimeError: shard /data/shard_0007.bin is truncated")
            log.crash = "shard /data/shard_0007.bin is truncated"
            return log
        loss = "nan" if _nan(case, step // 10 + 1, count) else f"{loss_at(step // 10, count, 4.0, 1.0):.4f}"
        log.put(f"step {step} loss {loss} lr {1e-3:.0e}", step, [("loss", loss), ("lr", "1e-03")])
    return log


@generator("detectron2")
def detectron2(case: str) -> Log | None:
    if case == "scale":
        return None
    log = Log()
    count = 30
    for index in range(count):
        iteration = 19 + index * 20
        if case == "nan" and index == 25:
            log.put(f"ERROR [02/10 22:55:41 d2.engine.train_loop]: Exception during training:\n"
                    "Traceback (most recent call last):\n  File \"/detectron2/engine/train_loop.py\", line 132, in train"
                    "\n    self.run_step()\n  File \"/detectron2/engine/train_loop.py\", line 239, in _detect_anomaly\n"
                    f"    self.iter, loss_dict\nFloatingPointError: Loss became infinite or NaN at iteration={iteration}!\n"
                    "loss_dict = {'loss_cls': tensor(nan, device='cuda:0', grad_fn=<NllLossBackward>), 'loss_box_reg': "
                    "tensor(nan, device='cuda:0', grad_fn=<DivBackward0>)}")
            log.crash = "Loss became infinite or NaN"
            return log
        if case == "crash" and index == 25:
            log.put("ERROR [02/10 22:55:41 d2.engine.train_loop]: Exception during training:")
            log.put("\n".join(TRACEBACK_OOM).replace("torch.OutOfMemoryError", "RuntimeError"))
            log.crash = "CUDA out of memory"
            return log
        values = [("total_loss", f"{loss_at(index, count, 1.7, 0.6):.3f}"), ("loss_cls", f"{1.184 - index * 0.01:.3f}"),
                  ("loss_box_reg", f"{0.475 - index * 0.005:.3f}"), ("time", f"{0.2293 + index * 0.0001:.4f}"),
                  ("data_time", "0.0033"), ("lr", f"{0.0002 * iteration:.6f}"), ("max_mem", "3782")]
        eta = "2 days, 10:38:57" if index % 2 else "5:41:49"
        log.put(f"[11/01 20:{index:02d}:15 d2.utils.events]:  eta: {eta}  iter: {iteration}  " +
                "  ".join(f"{k}: {v}" + ("M" if k == "max_mem" else "") for k, v in values), iteration, values)
    return log


@generator("ultralytics")
def ultralytics(case: str) -> Log | None:
    if case == "scale":
        return None
    log = Log()
    epochs = 10
    header = "      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size"
    for epoch in range(1, epochs + 1):
        log.put("")
        log.put(header)
        if case == "crash" and epoch == 8:
            log.put("\n".join(TRACEBACK_OOM))
            log.crash = "CUDA out of memory"
            return log
        nan = _nan(case, epoch, epochs, 3)
        for n in (100, 954):
            losses = ["nan"] * 3 if nan else [f"{loss_at(epoch, epochs, 1.4, 0.9) + n / 1e5:.4f}", "0.4706", "1.084"]
            row = f"{epoch:>11}/{epochs}      6.73G{losses[0]:>11}{losses[1]:>11}{losses[2]:>11}         10        640: "
            bar = f"{n * 100 // 954:3d}%|{'█' * (n * 10 // 954)}{' ' * (10 - n * 10 // 954)}| {n}/954 [00:05<00:00,  2.78it/s]"
            log.put(row + bar + ("\r" if n < 954 else ""), epoch,
                    [("GPU_mem", "6.73"), ("box_loss", losses[0]), ("cls_loss", losses[1]), ("dfl_loss", losses[2]),
                     ("Instances", "10"), ("Size", "640")])
        log.put("                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100%|"
                "██████████| 8/8 [00:03<00:00,  2.17it/s]")
        map50 = f"{0.5 + epoch * 0.01:.3f}"
        log.put(f"                   all        722       1444      0.989       0.99      {map50}      0.681", epoch,
                [("val/Images", "722"), ("val/Instances", "1444"), ("val/BoxP", "0.989"), ("val/R", "0.99"),
                 ("val/mAP50", map50), ("val/mAP50-95", "0.681")])
    return log
