"""More tools' line formats for tests/data/public_runs (see public_runs_formats.py for the conventions)."""

from __future__ import annotations

from typing import Any

from public_runs_formats import COMMON, Kind, number, tqdm_bar


# --- ultralytics/engine/trainer.py (header "%11s" per column, row "%11s" * 2 + "%11.4g" * n before the tqdm bar),
# ultralytics/models/yolo/detect/val.py ("%22s" + "%11s" * 6 header; "%22s" + "%11i" * 2 + "%11.3g" * 4 row);
# yolov5 train.py / val.py (v7.0: the same widths; 2020: "%10s" columns, "%20s" + "%12s" val header); yolov7
# train.py / test.py ("%10s" columns, "%20s" + "%12s" * 6). `w`: column width, `cw`: the class column's width. ---
def yolo_header(record: dict[str, Any]) -> str:
    return (f"%{record['w']}s" * len(record["cols"])) % tuple(record["cols"])


def yolo_row(record: dict[str, Any]) -> str:
    w = record["w"]
    values = tuple(number(v) for v in record["losses"]) + (record["instances"], record["size"])
    row = (f"%{w}s" * 2 + f"%{w}.4g" * len(values)) % (f"{record['epoch']}/{record['epochs']}", record["mem"], *values)
    return tqdm_bar({**record, "desc": row, "w": record.get("bw", 10)}) if "n" in record else row


def yolo_val_header(record: dict[str, Any]) -> str:
    head = (f"%{record['cw']}s" + f"%{record['w']}s" * 6) % tuple(record["cols"])
    return tqdm_bar({**record, "desc": head, "w": record.get("bw", 10)}) if "n" in record else head


def yolo_val_row(record: dict[str, Any]) -> str:
    w = record["w"]
    return (f"%{record['cw']}s" + f"%{w}i" * 2 + f"%{w}.3g" * 4) % ("all", record["images"], record["instances"],
                                                                     *(number(v) for v in record["m"]))


YOLO: dict[str, Kind] = {**COMMON, "header": yolo_header, "row": yolo_row, "val_header": yolo_val_header,
                         "val_row": yolo_val_row}

# --- Caffe: src/caffe/solver.cpp Solver::Step (glog "I%m%d %H:%M:%S.%f thread file:line] "), src/caffe/solvers/
# sgd_solver.cpp ApplyUpdate. BigDL: optim/DistriOptimizer.scala (log4j "%d{yyyy-MM-dd HH:mm:ss} %-5p %c{1}:%L - %m%n").
CAFFE: dict[str, Kind] = {
    "iter": "{t} {thread} solver.cpp:{line}] Iteration {it} ({rate} iter/s, {lapse}s/{display} iters), loss = {loss}",
    "output": "{t} {thread} solver.cpp:{line}]     Train net output #{idx}: {name} = {v} (* {w} = {wv} loss)",
    "lr": "{t} {thread} sgd_solver.cpp:{line}] Iteration {it}, lr = {lr}",
}
BIGDL: dict[str, Kind] = {
    "train": "{t} INFO  DistriOptimizer$:{line} - [Epoch {epoch} {seen}/{total}][Iteration {it}][Wall Clock {wall}s] "
             "Train {n} in {secs}seconds. Throughput is {tput} records/second. Loss is {loss}. Current learning rate "
             "is {lr}. Current weight decay is {wd}. Current momentum is {mom}.",
}


# --- r2c models/train.py (prints the mean of the epoch's pandas DataFrame, a Series), torch/optim/lr_scheduler.py
# ReduceLROnPlateau verbose line ------------------------------------------------------------------------------------
def r2c_train(record: dict[str, Any]) -> str:
    width = max(len(m[0]) for m in record["m"])
    values = [f"{number(m[1]):.6f}" for m in record["m"]]
    vwidth = max(len(v) for v in values)
    rows = [f"{m[0]:<{width}}    {v:>{vwidth}}" for m, v in zip(record["m"], values)]
    return "TRAIN EPOCH {:2d}:\n{}\ndtype: float64\n".format(record["epoch"], "\n".join(rows))


R2C: dict[str, Kind] = {
    **COMMON, "train": r2c_train, "val": "Val epoch {epoch} has acc {acc:.3f} and loss {loss:.3f}",
    "best": "Best validation performance so far. Copying weights to '{path}'.",
    "plateau": "Epoch {epoch:5d}: reducing learning rate of group {group} to {lr:.4e}.",
}

# --- SkipNet imagenet/train_rl.py (the pytorch/examples ImageNet meters "{val:.3f} ({avg:.3f})", logging
# "%(asctime)s:%(message)s" with datefmt "%m-%d-%y %H:%M") -----------------------------------------------------------
SKIPNET: dict[str, Kind] = {
    "step": "{t}:Epoch: [{epoch}][{i}/{n}]\tTime {time}\tData {data}\tLoss {loss}\tTotal rewards {rewards}\t"
            "Prec@1 {p1}\tPrec@5 {p5}",
    "rewards": "{t}:total gate rewards = {r}",
    "computation": "{t}:*** Computation Percentage: {pct} %",
}

# --- TensorFlow scripts: the char-CNN repository's train.py (dennybritz/cnn-text-classification-tf's line "{}: step {},
# loss {:g}, acc {:g}"); EPOS scripts/train.py's step line and tf.train StepCounterHook ("%s: %g" global_step/sec);
# the issue poster's own script's step rows (tensorflow/tensorflow#12287) ------------------------------------------
TENSORFLOW: dict[str, Kind] = {
    "charcnn": "{t}: step {step}, loss {loss:g}, acc {acc:g}",
    "epos": ("step: {step} {m}", "{k}: {v}", " "),
    "steps_per_sec": "INFO:tensorflow:global_step/sec: {rate:g}",
    "user_step": "= >   step: {step} loss: {loss} accuracy:{acc}",
    "user_step_bar": "= >  = = = = = =  > > > > > >    step: {step} loss: {loss} accuracy:{acc}",
}

# --- Time-Series-Library exp/exp_long_term_forecasting.py train(), utils/tools.py EarlyStopping and
# adjust_learning_rate ------------------------------------------------------------------------------------------------
TSLIB: dict[str, Kind] = {
    "iters": "\titers: {it}, epoch: {epoch} | loss: {loss:.7f}",
    "speed": "\tspeed: {speed:.4f}s/iter; left time: {left:.4f}s",
    "cost": "Epoch: {epoch} cost time: {secs}",
    "summary": "Epoch: {epoch}, Steps: {steps} | Train Loss: {train:.7f} Vali Loss: {vali:.7f} Test Loss: {test:.7f}",
    "improved": "Validation loss decreased ({prev:.6f} --> {new:.6f}).  Saving model ...",
    "patience": "EarlyStopping counter: {count} out of {patience}",
    "lr": "Updating learning rate to {lr}",
}

# --- custom trainers, each its repository's train script: crossattention_radar_detector train.py (tqdm bar + epoch
# means), MedicalDataAugmentationTool-VerSe verse2020/training/main_*.py through MedicalDataAugmentationTool's train
# loop and summary handler ("%H:%M:%S: train iter: N name: value ..."), LION trainers/base_trainer.py
# (loguru "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} - {message}") -------------------
RADAR: dict[str, Kind] = {
    **COMMON, "epoch_time": "Training time for one epoch: {secs} seconds", "mean": "Mean Training loss : {loss}",
    "parts": "mean MSE : {mse} mean focal : {focal} mean center loss : {center} mean orent loss : {orient}",
    "total_time": "Epoch {epoch} time: {secs} seconds",
}
VERSE: dict[str, Kind] = {"train": ("{t}: train iter: {it} {m}", "{k}: {v}", " ")}
LION: dict[str, Kind] = {
    "epoch": "{t} | INFO     | trainers.base_trainer:train_epochs:{line} - [R0] | E{epoch} iter[{i:3d}/{n:3d}] | "
             "[Loss] {loss} | [exp] {exp} | [step] {step:5d} | [url] none | [time] {time} |[best] {best} ",
}

# --- OpenPCDet tools/train_utils/train_utils.py train_one_epoch (timm-style line), logger "%(asctime)s  %(levelname)5s
# %(message)s" ------------------------------------------------------------------------------------------------------
OPENPCDET: dict[str, Kind] = {
    "start": "{t}   INFO  **********************Start training {cfg}**********************",
    "train": "{t}   INFO  Train: {epoch:>4d}/{epochs} ({epct:>3.0f}%) [{i:>4d}/{n} ({ipct:>3.0f}%)]  Loss: {loss:#.4g} "
             "({avg:#.3g})  LR: {lr:.3e}  Time cost: {cost}  Acc_iter {acc:<10d}  Data time: {dt}  Forward time: {ft}  "
             "Batch time: {bt}",
}


# --- kohya-ss sd-scripts train_network.py (tqdm "steps" bar with avr_loss postfix, accelerator.print("\nepoch
# {}/{}")), library/train_util.py (rich logging handler: time, level, message, then file:line at the right) -------
def kohya_epoch_log(record: dict[str, Any]) -> str:
    message = f"epoch is incremented. current_epoch: {record['cur']}, epoch: {record['epoch']}"
    return f"{record.get('t', ''):<19} INFO     {message:<74} train_util.py:{record['line']}"


KOHYA: dict[str, Kind] = {**COMMON, "epoch_log": kohya_epoch_log, "epoch": "epoch {epoch}/{epochs}"}

