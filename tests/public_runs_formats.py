"""The line formats of the tools whose real runs are in tests/data/public_runs, one table per family.

A kind is a format string (fields are the record's; `{m}` is its metrics joined by the pair and separator given
with it) or a function of the record. Each string is the tool's own, taken from the file cited above its table
(paths in the tool's repository); numbers keep the precision the run printed them with (see public_runs_render).
Layout the run's terminal added (a tqdm bar's width, trailing blanks) is a record field, never fixed text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Union

Kind = Union[str, tuple[str, str, str], Callable[[dict[str, Any]], str]]

UTF_BLOCKS = " " + "".join(map(chr, range(0x258F, 0x2587, -1)))  # tqdm/std.py Bar.UTF: " ▏▎▍▌▋▊▉█"


NONFINITE = {"nan": math.nan, "-nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def number(value: Any) -> Any:
    """A JSON value as Python holds it: 'nan' -> float nan."""
    if isinstance(value, str) and value in NONFINITE:
        return NONFINITE[value]
    return value


def java_double(value: float) -> str:
    """Java's Double.toString (BigDL logs through log4j)."""
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    mantissa, exponent = f"{value:e}".split("e")
    return f"{float(mantissa)!r}E{int(exponent)}"


def fmt_value(value: Any, spec: str | None = None) -> str:
    """A number as the tool printed it: `spec` is the precision it used where the shortest form differs;
    a pair [value, average] is printed "value (average)"; a non-finite token without a spec as the tool wrote it."""
    if isinstance(value, list):
        return f"{fmt_value(value[0], spec)} ({fmt_value(value[1], spec)})"
    if spec == "java":
        return java_double(float(number(value)))
    if spec == "%":
        return f"{fmt_value(value)}%"
    if spec == "tqdm":  # tqdm/std.py tqdm.format_num, where it chose the short form (set_postfix's numbers)
        return "{0:.3g}".format(number(value)).replace("+0", "+").replace("-0", "-")
    if spec:
        return format(number(value), spec)
    if isinstance(value, str):
        return value
    return repr(value) if isinstance(value, float) else str(value)


_num = fmt_value


def _metric_spec(metric: list[Any]) -> str | None:
    return metric[2] if len(metric) > 2 else None


# --- tqdm: tqdm/std.py tqdm.format_meter, format_interval, format_num, Bar.__format__ -------------------------------
def _interval(seconds: int | None) -> str:
    if seconds is None:
        return "?"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{sec:02d}" if hours else f"{minutes:02d}:{sec:02d}"


def _bar(fraction: float, width: int) -> str:
    full, partial = divmod(int(fraction * width * 8), 8)
    text = UTF_BLOCKS[-1] * full
    if full < width:
        text += UTF_BLOCKS[partial] + UTF_BLOCKS[0] * (width - full - 1)
    return text


def tqdm_bar(record: dict[str, Any]) -> str:
    """`{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]`."""
    desc = record.get("desc")
    rate, unit = record.get("rate", [None, "it/s"])
    rate_fmt = f"?{unit}" if rate is None else f"{rate:5.2f}{unit}"
    postfix = ", " + ", ".join(f"{m[0]}={_num(m[1], _metric_spec(m))}" for m in record["m"]) if record.get("m") else ""
    total = record.get("total")
    if total is None:
        return f"{desc + ': ' if desc else ''}{record['n']}it [{_interval(record['el'])}, {rate_fmt}{postfix}]"
    fraction = record["n"] / total
    l_bar = f"{desc + ': ' if desc else ''}{fraction * 100:3.0f}%|"
    r_bar = f"| {record['n']}/{total} [{_interval(record['el'])}<{_interval(record.get('rem'))}, {rate_fmt}{postfix}]"
    width = record.get("w", 10)
    if width == 0:  # ncols too small for a bar: tqdm prints l_bar[:-1] + r_bar[1:]
        return l_bar[:-1] + r_bar[1:]
    return l_bar + _bar(fraction, width) + r_bar


# --- transformers: src/transformers/trainer_callback.py ProgressCallback.on_log / PrinterCallback (`str(logs)`),
# src/transformers/trainer.py and trainer_tf.py "***** Running training *****" block (logger.info lines) -------------
TRAINER_INFO = {
    "examples": "Num examples = {}", "epochs": "Num Epochs = {}",
    "per_device": "Instantaneous batch size per device = {}",
    "total_batch": "Total train batch size (w. parallel, distributed & accumulation) = {}",
    "accumulation": "Gradient Accumulation steps = {}", "steps_per_epoch": "Steps per epoch = {}",
    "total_steps": "Total optimization steps = {}", "trainable": "Number of trainable parameters = {}",
}


def hf_logs(record: dict[str, Any]) -> str:
    return str({m[0]: number(m[1]) for m in record["m"]})


def trainer_info(record: dict[str, Any]) -> str:
    line = "  " + TRAINER_INFO[record["key"]].format(_num(record["v"], record.get("f")))
    # LLaMA-Factory sets transformers' log format: "[%(levelname)s|%(filename)s:%(lineno)s] %(asctime)s >> %(message)s"
    return f"[INFO|trainer.py:{record['line']}] {record['t']} >> {line}" if "t" in record else line


# --- DeepSpeed: deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler.update_scale, deepspeed/runtime/zero/stage2.py
# (0.5: "[deepscale] OVERFLOW!"), deepspeed/runtime/activation_checkpointing/checkpointing.py, deepspeed/utils/logging.py
# ("[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s"); DeepSpeed-Chat
# (DeepSpeedExamples applications/DeepSpeed-Chat/training/step1_supervised_finetuning/main.py, step3_rlhf_finetuning/
# main.py, utils/perf.py print_throughput_step3) -------------------------------------------------------------------
DS_PREFIX = "[{t}] [INFO] [{src}] "
DEEPSPEED: dict[str, Kind] = {
    "overflow": DS_PREFIX + "[deepspeed] OVERFLOW! Rank {rank} Skipping step. Attempted loss scale: {prev}, "
                            "reducing to {new}",
    "hysteresis": DS_PREFIX + "[deepspeed] OVERFLOW! Rank {rank} Skipping step. Attempted loss scale: {prev}, "
                              "but hysteresis is {h}. Reducing hysteresis to {h1}",
    "overflow_z2": DS_PREFIX + "[deepscale] OVERFLOW! Rank {rank} Skipping step. Attempted loss scale: {prev}, "
                               "reducing to {new}",
    "ckpt_profile": DS_PREFIX + "----Profiling time in checkpointing {flag}",
    "epoch_begin": "Beginning of Epoch {epoch}/{epochs}, Total Micro Batches {batches}",
}
DS_CHAT: dict[str, Kind] = {
    "throughput": "|E2E latency={e2e:.2f}s |Gather latency={gather:.2f}s ({gather_pct:.2f}%) |Generate time={gen:.2f}s "
                  "({gen_pct:.2f}%) |Training time={train:.2f}s ({train_pct:.2f}%) |Others={others:.2f} "
                  "({others_pct:.2f}%)|CurSamplesPerSec={cur:.2f} |AvgSamplesPerSec={avg:.2f}",
    "ppo": "epoch: {epoch}|step: {step}|ppo_ep: {ppo_ep}|act_loss: {act_loss}|cri_loss: {cri_loss}|"
           "unsuper_loss: {unsuper_loss}",
    "reward": "average reward score: {reward}",
    "rule": lambda record: "-" * 85,
}

# "ellipsis": a poster's "..." standing for lines left out of the paste.
COMMON: dict[str, Kind] = {"blank": lambda record: "", "bar": tqdm_bar, "ellipsis": lambda record: "..."}

HF: dict[str, Kind] = {
    **COMMON, **DEEPSPEED, "logs": hf_logs, "info": trainer_info, "running": "***** Running training *****",
    # LLaMA-Factory 0.5 src/llmtuner/extras/callbacks.py LogCallback.on_log, logger "%(asctime)s - %(levelname)s -
    # %(name)s - %(message)s" with datefmt "%m/%d/%Y %H:%M:%S" (src/llmtuner/extras/logging.py)
    "lf_log": "{t} - INFO - llmtuner.extras.callbacks - {{'loss': {loss:.4f}, 'learning_rate': {lr:2.4e}, "
              "'epoch': {epoch:.2f}}}",
}


# --- Keras: keras/utils/generic_utils.py Progbar.update (2.0-2.3), keras/callbacks.py ModelCheckpoint ("\nEpoch %05d:
# saving model to %s"), TerminateOnNaN, ReduceLROnPlateau's `epsilon` warning; keras/engine/training_arrays.py
# ("Epoch %d/%d") -------------------------------------------------------------------------------------------------
def keras_progbar(record: dict[str, Any]) -> str:
    current, target = record["n"], record["total"]
    width = 30
    bar = f"%{len(str(target))}d/%d [" % (current, target)
    prog_width = int(width * current / target)
    if prog_width > 0:
        bar += "=" * (prog_width - 1) + (">" if current < target else "=")
    bar += "." * (width - prog_width) + "]"
    if "eta" in record:
        eta = record["eta"]
        info = " - ETA: " + ("%d:%02d:%02d" % (eta // 3600, (eta % 3600) // 60, eta % 60) if eta > 3600 else f"{eta}s")
    else:
        info = f" - {record['el']}s" + (f" {record['ms']}ms/step" if "ms" in record else "")
    for metric in record["m"]:
        value = number(metric[1])
        info += f" - {metric[0]}:" + (" %.4f" % value if abs(value) > 1e-3 else " %.4e" % value)
    return bar + info


KERAS: dict[str, Kind] = {
    **COMMON, "epoch": "Epoch {epoch}/{epochs}", "progbar": keras_progbar,
    "checkpoint": "Epoch {epoch:05d}: saving model to {path}",
    "epoch_bare": "Epoch {epoch}",  # the script's own epoch line (its loop calls fit once per epoch)
    "terminate": "Batch {batch}: Invalid loss, terminating training",
    "epsilon_warning": "WARNING:tensorflow:`epsilon` argument is deprecated and will be removed, use `min_delta` "
                      "instead.",
}


# --- JSON lines: DeiT main.py (`json.dumps(log_stats)`), fairseq/logging/progress_bar.py JsonProgressBar (meters as
# strings: a metric with a precision is printed as a string) -------------------------------------------------------
def json_line(record: dict[str, Any]) -> str:
    return json.dumps({m[0]: (_num(m[1], m[2]) if len(m) > 2 else number(m[1])) for m in record["m"]})


JSONL: dict[str, Kind] = {"json": json_line}


# --- detectron2: detectron2/utils/events.py CommonMetricPrinter.write; detectron2/utils/logger.py
# ("[%(asctime)s %(name)s]: ", datefmt "%m/%d %H:%M:%S") ------------------------------------------------------------
DETECTRON2: dict[str, Kind] = {
    "events": ("[{t} d2.utils.events]:  eta: {eta}  iter: {iter}  {m}  time: {time}  data_time: {data_time}  "
               "lr: {lr}  max_mem: {mem}M", "{k}: {v}", "  "),
    "events_v0": ("[{t} d2.utils.events]: eta: {eta}  iter: {iter}  {m}  time: {time}  data_time: {data_time}  "
                  "lr: {lr}  max_mem: {mem}M", "{k}: {v}", "  "),
}

# --- fairseq: fairseq/progress_bar.py (<= 0.8: simple_progress_bar "{}:  {:5d} / {:d} {}", print "{} | {}"),
# fairseq/logging/progress_bar.py (>= 0.9 SimpleProgressBar, logger "%(asctime)s | %(levelname)s | %(name)s |"),
# fairseq/trainer.py (overflow NOTE/WARNING), fairseq/checkpoint_utils.py (saved checkpoint); fairseq-py 0.1-0.3
# train.py ("| epoch {:03d} | train loss {:2.2f} | ..."); FloatingPointError traceback start ----------------------
FS_EQ, FS_SP = ("{k}={v}", ", "), ("{k} {v}", " | ")
FAIRSEQ: dict[str, Kind] = {
    "inner": ("{t} | INFO | train_inner | epoch {epoch:03d}:  {i:5d} / {n} {m}", *FS_EQ),
    "train": ("{t} | INFO | train | epoch {epoch:03d} | {m}", *FS_SP),
    "valid": ("{t} | INFO | valid | epoch {epoch:03d} | valid on '{subset}' subset | {m}", *FS_SP),
    "note_overflow": "{t} | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: {scale}",
    "saved": "{t} | INFO | fairseq.checkpoint_utils | saved checkpoint {path} (epoch {epoch} @ {updates} updates, "
             "score {score}) (writing took {secs} seconds)",
    "inner_old": ("| epoch {epoch:03d}:  {i:5d} / {n} {m}", *FS_EQ),
    "valid_old": ("| epoch {epoch:03d} | valid on '{subset}' subset | {m}", *FS_SP),
    "valid_bar_v0": ("| epoch {epoch:03d} | valid on '{subset}' subset  {i:5d} / {n} {m}", *FS_EQ),
    "train_old": ("| epoch {epoch:03d} | {m}", *FS_SP),
    "warn_overflow": "| WARNING: overflow detected, setting loss scale to: {scale}",
    "inner_v0": ("| epoch {epoch:03d}  {i:5d} / {n} {m}", *FS_EQ),
    "traceback": "Traceback (most recent call last):",
    **JSONL,
}

# --- mmcv 1.x: mmcv/runner/hooks/logger/text.py TextLoggerHook._log_info; mmcv/utils/logging.py
# ("%(asctime)s - %(name)s - %(levelname)s - %(message)s"). mmengine: mmengine/runner/log_processor.py
# LogProcessor.get_log_after_iter; mmengine/logging/logger.py; mmengine/runner/runner.py / hooks/logger_hook.py
# ("Checkpoints will be saved to {}.", "Exp name: {}") ---------------------------------------------------------------
MMCV_BODY = "Epoch [{epoch}][{i}/{n}]\tlr: {lr}, eta: {eta}, time: {time}, data_time: {data_time}, memory: {memory}, {m}"
MM: dict[str, Kind] = {
    "mmcv": ("{t} - {name} - INFO - " + MMCV_BODY, "{k}: {v}", ", "),
    "mmcv_bare": (" " + MMCV_BODY, "{k}: {v}", ", "),
    "mmengine": ("{t} - mmengine - INFO - Epoch(train){gap}[{epoch}][{i}/{n}]  {m}", "{k}: {v}", "  "),
    "checkpoints_dir": "{t} - mmengine - INFO - Checkpoints will be saved to {path}.",
    "exp_name": "{t} - mmengine - INFO - Exp name: {name}",
}

# --- Megatron-LM: megatron/training.py training_log(). NeMo 2: nemo/lightning/pytorch/callbacks/progress_printer.py.
MEGATRON: dict[str, Kind] = {"iteration": (" iteration {it:8d}/{total:8d} | {m} |", "{k}: {v}", " | ")}
NEMO: dict[str, Kind] = {"progress": ("Training epoch {epoch}, iteration {i}/{n} | {m}", "{k}: {v}", " | ")}

# --- nanoGPT train.py (`pre`: a timestamp the poster's shell put before each line); llama2.c train.py (tiny-universe's
# TinyLLM); tt-metal tt-train's nano_gpt example main.cpp (step, loss and timing lines) --------------------------------
NANOGPT: dict[str, Kind] = {
    "iter": "{pre}iter {it}: loss {loss}, time {time}ms, mfu {mfu}%",
    "iter_nomfu": "{pre}iter {it}: loss {loss}, time {time}ms",
    "eval": "{pre}step {it}: train loss {train}, val loss {val}",
    "save": "saving checkpoint to {dir}",
    "l2c_iter": "{it} | loss {loss} | lr {lr} | {ms}ms | mfu {mfu}%",
    "tt_step": "Step: {step}, Loss: {loss}",
    "tt_time": "Full step time {ms} ms, cache entries: {entries}",
    "tt_host": "dataloader host only step time {ms} ms",
    "tt_loader": "dataloader step time {ms} ms",
}


# --- PaddleOCR: tools/program.py train() ("{}: {:x<6f}" per metric; 2.1: "epoch: [{}/{}], iter: {}, {}, reader_cost:
# ..."; 1.x: "epoch: {}, iter: {}, lr: {:.6f}, {}, time: {:.3f}"), eval "cur metric, ..." / "best metric, ...";
# ppocr/utils/logging.py ("[%(asctime)s] %(name)s %(levelname)s: %(message)s") -------------------------------------
def _paddle_metrics(record: dict[str, Any]) -> str:
    return ", ".join("{}: {:x<6f}".format(m[0], number(m[1])) for m in record["m"])


def paddle_step(record: dict[str, Any]) -> str:
    return ("[{t}] ppocr INFO: epoch: [{epoch}/{epochs}], global_step: {step}, {m}, avg_reader_cost: {rc:.5f} s, "
            "avg_batch_cost: {bc:.5f} s, avg_samples: {samples}, ips: {ips:.5f} samples/s, eta: {eta}").format(
        **{**record, "m": _paddle_metrics(record)})


def paddle21_step(record: dict[str, Any]) -> str:
    return ("[{t}] root INFO: epoch: [{epoch}/{epochs}], iter: {it}, {m}, reader_cost: {rc:.5f} s, batch_cost: "
            "{bc:.5f} s, samples: {samples}, ips: {ips:.5f}").format(**{**record, "m": _paddle_metrics(record)})


PADDLE: dict[str, Kind] = {
    "step": paddle_step, "step21": paddle21_step,
    "metric": ("[{t}] ppocr INFO: {which} metric, {m}", "{k}: {v}", ", "),
    "scratch21": "[{t}] root INFO: train from scratch",
    "loader21": "[{t}] root INFO: {which} dataloader has {n} iters",
    "eval_every21": "[{t}] root INFO: During the training process, after the {start}th iteration, an evaluation is "
                    "run every {every} iterations",
    "datasets21": "[{t}] root INFO: Initialize indexs of datasets:{files}",
    "step1x": ("{t}-INFO: epoch: {epoch}, iter: {it}, lr: {lr:.6f}, {m}, time: {time:.3f}", "'{k}': {v}", ", "),
}
