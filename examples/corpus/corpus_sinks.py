"""Where a corpus run writes its metrics: a TensorBoard event file (tensorboard's own writer), a text
log in a real trainer's format, and optionally a W&B offline run. All get the same points."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Literal, TextIO

from corpus_train import LogRecord

TextFormat = Literal["megatron", "nanogpt", "hf", "llmc", "deit"]
WALL_START = 1_767_000_000.0  # fixed epoch so wall times do not depend on when the corpus was made


class TensorBoardSink:
    def __init__(self, logdir: Path) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = Event, Summary
        self._writer = EventFileWriter(str(logdir), max_queue_size=1000, flush_secs=3600)

    def write(self, record: LogRecord) -> None:
        values = [self._summary.Value(tag=k, simple_value=v) for k, v in record.values.items()]
        self._writer.add_event(
            self._event(wall_time=WALL_START + record.step, step=record.step, summary=self._summary(value=values))
        )

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """A real offline W&B run (wandb/offline-run-*/run-*.wandb under `root`)."""

    def __init__(self, root: Path, name: str) -> None:
        import wandb

        self._run = wandb.init(
            mode="offline", dir=str(root), project="guarded-sbatch-corpus", name=name,
            settings=wandb.Settings(console="off", x_disable_stats=True, x_disable_meta=True, silent=True,
                                    x_save_requirements=False),  # its scan of every installed package: 0.3 s CPU a run
        )

    def write(self, record: LogRecord) -> None:
        self._run.log(dict(record.values), step=record.step)

    def close(self) -> None:
        self._run.finish()


class TextLogSink:
    def __init__(self, path: Path, text_format: TextFormat, total_steps: int) -> None:
        self._file: TextIO = path.open("w", encoding="utf-8")
        self._format = text_format
        self._total = total_steps
        self._last_skipped = 0.0
        self._epoch_steps = 125
        self._last_train_loss = math.nan
        self._last_train_step = 0

    def write(self, record: LogRecord) -> None:
        line = getattr(self, f"_{self._format}")(record)
        if line is not None:
            self._file.write(line + "\n")

    def close(self) -> None:
        self._file.close()

    # --- formats (see /work/shared/reference/log-formats.md) ---
    def _megatron(self, r: LogRecord) -> str:
        v = r.values
        if r.is_eval:
            loss = v["eval/loss"]
            return (
                f" validation loss at iteration {r.step} | lm loss value: {loss:.6E} | "
                f"lm loss PPL: {_ppl(loss):.6E} |"
            )
        skipped_now = v.get("train/skipped_steps", 0.0) - self._last_skipped
        self._last_skipped = v.get("train/skipped_steps", 0.0)
        # Megatron averages the loss over the interval and prints it only when > 0 (never NaN), but
        # counts NaN iterations; the weights are NaN by then, so every step of the interval counts
        interval = r.step - self._last_train_step
        self._last_train_step = r.step
        nan_now = interval if not math.isfinite(v["train/loss"]) and skipped_now == 0 else 0
        parts = [
            f"[2026-01-01 00:00:00] iteration {r.step:8d}/{self._total:8d}",
            f"consumed samples: {r.step * 32:12d}",
            "elapsed time per iteration (ms): 12.5",
            f"learning rate: {v['train/lr']:.6E}",
            "global batch size:    32",
        ]
        if math.isfinite(v["train/loss"]):  # Megatron prints no lm loss when the iteration was skipped
            parts.append(f"lm loss: {v['train/loss']:.6E}")
        parts.append(f"loss scale: {v.get('train/loss_scale', 1.0):.1f}")
        if math.isfinite(v["train/grad_norm"]):
            parts.append(f"grad norm: {v['train/grad_norm']:.6f}")
        parts.append(f"number of skipped iterations: {int(skipped_now):3d}")
        parts.append(f"number of nan iterations: {nan_now:3d}")
        return " | ".join(parts) + " |"

    def _deit(self, r: LogRecord) -> str | None:
        """DeiT / timm-style JSON lines, one per epoch (step = epoch), written after the epoch's eval."""
        v = r.values
        if not r.is_eval:
            self._epoch_train = {"train_lr": v["train/lr"], "train_loss": v["train/loss"]}
            return None
        shown = dict(getattr(self, "_epoch_train", {}))
        shown["test_loss"] = v["eval/loss"]
        if "eval/accuracy" in v:
            shown["test_acc1"] = 100.0 * v["eval/accuracy"]
        shown |= {"epoch": r.step, "n_parameters": 1284}
        return json.dumps(shown)

    def _nanogpt(self, r: LogRecord) -> str:
        v = r.values
        if r.is_eval:  # nanoGPT's estimate_loss: here the last logged train loss stands in for the train split
            return f"step {r.step}: train loss {_num(self._last_train_loss, '.4f')}, val loss {_num(v['eval/loss'], '.4f')}"
        self._last_train_loss = v["train/loss"]
        return f"iter {r.step}: loss {_num(v['train/loss'], '.4f')}, time 12.50ms, mfu 15.34%"

    def _llmc(self, r: LogRecord) -> str:
        v = r.values
        if r.is_eval:
            return f"step {r.step:4d}/{self._total} | val loss {_num(v['eval/loss'], '.6f')}"
        return (
            f"step {r.step:4d}/{self._total} | loss {_num(v['train/loss'], '7.6f')} (+0.00z)| "
            f"norm {_num(v['train/grad_norm'], '6.4f')} (+0.00z)| lr {v['train/lr']:.2e} | 12.50 ms | 2621 tok/s"
        )

    def _hf(self, r: LogRecord) -> str:
        v = r.values
        epoch = round(r.step / self._epoch_steps, 2)
        shown: dict[str, Any]
        if r.is_eval:
            shown = {"eval_loss": v["eval/loss"]}
            if "eval/accuracy" in v:
                shown["eval_accuracy"] = v["eval/accuracy"]
            shown |= {"eval_runtime": 0.4, "eval_samples_per_second": 1250.0, "eval_steps_per_second": 40.0}
        else:
            shown = {"loss": round(v["train/loss"], 6), "grad_norm": v["train/grad_norm"],
                     "learning_rate": v["train/lr"]}
        shown["epoch"] = epoch
        # The Trainer's tqdm bar shares the job's output file (stderr): `\r`-updated, the dict written below it.
        done = r.step * 100 // self._total
        bar = "█" * (done // 10)
        elapsed = f"00:{r.step % 60:02d}"
        return f"{done:3d}%|{bar:<10}| {r.step}/{self._total} [{elapsed}<00:30, 31.25it/s]\r{shown}"


def _ppl(loss: float) -> float:
    return math.exp(min(loss, 700.0)) if math.isfinite(loss) else loss


def _num(value: float, spec: str) -> str:
    return format(value, spec) if math.isfinite(value) else str(value)


def now() -> float:
    return time.perf_counter()
