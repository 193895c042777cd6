"""Files written by the real writers, for the source tests (TensorBoard, W&B offline, MLflow)."""

from __future__ import annotations

import os
import struct
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tb_event(step: int, tag: str, value: float, kind: str = "simple", wall_time: float | None = None):  # type: ignore[no-untyped-def]
    """An Event proto with one scalar as simple_value, float_val, double_val or tensor_content."""
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    shape = tensor_shape_pb2.TensorShapeProto()
    if kind == "simple":
        summary_value = Summary.Value(tag=tag, simple_value=value)
    elif kind == "float_val":
        summary_value = Summary.Value(tag=tag, tensor=tensor_pb2.TensorProto(
            dtype=types_pb2.DT_FLOAT, tensor_shape=shape, float_val=[value]))
    elif kind == "double_val":
        summary_value = Summary.Value(tag=tag, tensor=tensor_pb2.TensorProto(
            dtype=types_pb2.DT_DOUBLE, tensor_shape=shape, double_val=[value]))
    elif kind == "tensor_content":
        summary_value = Summary.Value(tag=tag, tensor=tensor_pb2.TensorProto(
            dtype=types_pb2.DT_DOUBLE, tensor_shape=shape, tensor_content=struct.pack("<d", value)))
    else:
        raise ValueError(kind)
    return Event(wall_time=1.7e9 + step if wall_time is None else wall_time, step=step,
                 summary=Summary(value=[summary_value]))


def write_tb_events(folder: Path, events: list, filename_suffix: str = "") -> Path:  # type: ignore[type-arg]
    """Write events with tensorboard's EventFileWriter; returns the event file."""
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folder.mkdir(parents=True, exist_ok=True)
    before = set(folder.glob("*tfevents*"))
    writer = EventFileWriter(str(folder), filename_suffix=filename_suffix)
    for event in events:
        writer.add_event(event)
    writer.close()
    (created,) = set(folder.glob("*tfevents*")) - before
    return created


def append_tb_events(event_file: Path, events: list) -> None:  # type: ignore[type-arg]
    """Append to an existing event file with tensorboard's RecordWriter (a still-running writer)."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    with open(event_file, "ab") as handle:
        writer = RecordWriter(handle)
        for event in events:
            writer.write(event.SerializeToString())
        writer.flush()


WANDB_SCRIPT = textwrap.dedent(
    """
    import math, sys, wandb
    run = wandb.init(project="sources-test", name="cifar10-resnet18-bs128-lr0.1")
    for step in range(40):
        row = {"train/loss": 2.0 / (step + 1), "lr": 0.1, "grad_norm": 1.5}
        if step == 20:
            row["train/loss"] = math.nan
        if step == 21:
            row["grad_norm"] = math.inf
        if step % 10 == 9:
            row["eval/accuracy"] = step / 100
        row["text"] = "hello"
        row["flag"] = True
        row["nested"] = {"inner": float(step)}
        run.log(row, step=step)
    run.finish()
    print(run.id)
    """
)


def write_wandb_offline_run(work: Path) -> Path:
    """Run a real offline wandb run (in a subprocess, a few seconds); returns its wandb/ folder."""
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=str(work),
               WANDB_DISABLE_GIT="true", WANDB_CONSOLE="off")
    script = work / "train.py"
    script.write_text(WANDB_SCRIPT)
    from guarded_sbatch.core.runner import run_command

    run_command([sys.executable, str(script)], env=env, cwd=work, timeout=120)
    return work / "wandb"


def wandb_history_with_pb2(log: Path) -> list[tuple[int, str, str]]:
    """(step, key, value_json) of every history item, decoded with wandb's own protobuf classes."""
    import zlib

    from wandb.proto import wandb_internal_pb2

    data = log.read_bytes()
    pos, pending, records = 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        checksum, length, kind = struct.unpack_from("<IHB", data, pos)
        payload = data[pos + 7 : pos + 7 + length]
        assert zlib.crc32(bytes([kind]) + payload) == checksum
        pos += 7 + length
        if kind == 1:
            records.append(payload)
        elif kind == 2:
            pending = payload
        elif kind == 3:
            pending += payload
        elif kind == 4:
            records.append(pending + payload)
    rows = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") != "history":
            continue
        items = {".".join(i.nested_key) or i.key: i.value_json for i in record.history.item}
        step = int(items["_step"])
        rows += [(step, k, v) for k, v in items.items() if not k.startswith("_")]
    return rows




# Real wandb runs for the axis tests, all in one process (wandb's start-up is the slow part).
# nanogpt_*: nanoGPT's train.py loop (log once per eval with `iter`; stdout lines in its own format).
WANDB_AXES_SCRIPT = textwrap.dedent(
    """
    import math, random, sys, time
    from pathlib import Path
    import numpy as np
    import wandb

    base = Path(sys.argv[1])
    settings = wandb.Settings(console="off", x_disable_stats=True, x_disable_meta=True, silent=True)

    def init(name, **kw):
        folder = base / name
        folder.mkdir(parents=True, exist_ok=True)
        return wandb.init(dir=str(folder), project="axes", name=name, settings=settings, **kw), folder

    def nanogpt(name, nan_from=None, max_iters=2000, eval_interval=100, log_interval=10):
        run, folder = init(name, config={"max_iters": max_iters})
        rng = random.Random(0)
        with open(folder / "train.log", "w") as log:
            iter_num, running_mfu = 0, -1.0
            while True:
                lr = 6e-4 * min(1.0, (iter_num + 1) / 100)
                base_loss = 2.0 + 8.0 * math.exp(-iter_num / 300)
                broken = nan_from is not None and iter_num >= nan_from
                if iter_num % eval_interval == 0:
                    train_l = math.nan if broken else base_loss + 0.01 * rng.random()
                    val_l = math.nan if broken else base_loss + 0.05 + 0.01 * rng.random()
                    print(f"step {iter_num}: train loss {train_l:.4f}, val loss {val_l:.4f}", file=log)
                    run.log({"iter": iter_num, "train/loss": train_l, "val/loss": val_l, "lr": lr,
                             "mfu": running_mfu * 100})
                lossf = math.nan if broken else base_loss + 0.2 * (rng.random() - 0.5)
                if iter_num % log_interval == 0:
                    print(f"iter {iter_num}: loss {lossf:.4f}, time {12.3 + rng.random():.2f}ms, "
                          f"mfu {running_mfu * 100:.2f}%", file=log)
                running_mfu = 0.15
                iter_num += 1
                if iter_num > max_iters:
                    break
        run.finish()

    def image_nan():
        run, _ = init("image_nan")
        for step in range(40):
            img = wandb.Image(np.full((16, 16, 3), step, dtype=np.uint8), caption=f"step {step}")
            loss = math.nan if step >= 30 else 2.0 / (step + 1) + 0.3
            run.log({"loss": loss, "loss_vis": img, "lr": 1e-3, "samples": {"grid": img, "count": step}})
        run.finish()

    def hf_define():
        # transformers' WandbCallback: everything on train/global_step; here also one metric per epoch.
        run, _ = init("hf_define")
        run.define_metric("train/global_step")
        run.define_metric("*", step_metric="train/global_step", step_sync=True)
        run.define_metric("val/acc", step_metric="epoch")
        for k in range(1, 31):
            gs = 10 * k
            run.log({"train/loss": 3.0 / k, "train/learning_rate": 1e-4, "train/epoch": gs / 100,
                     "train/global_step": gs})
            if gs % 100 == 0:
                run.log({"eval/loss": 2.5 / k, "train/global_step": gs})
                run.log({"val/acc": 0.1 * k, "epoch": gs // 100})
        run.finish()

    def resumed(name, key):
        for part in range(2):
            if part:
                time.sleep(1.2)  # offline run folders are named to the second
            run, _ = init(name, id=f"{name.replace('_', '')}42", resume="allow")
            for i in range(10):
                row = {"loss": 1.0 + part + i / 100}
                if key:
                    row[key] = (part * 10 + i) * 50
                run.log(row)
            run.finish()

    nanogpt("nanogpt_healthy")
    nanogpt("nanogpt_nan", nan_from=1400)
    image_nan()
    hf_define()
    resumed("resumed_calls", None)
    resumed("resumed_iter", "iter")
    print("done")
    """
)


def write_wandb_axes_runs(work: Path) -> Path:
    """Run WANDB_AXES_SCRIPT with the installed wandb (offline); returns the folder holding one folder per run."""
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true",
               WANDB_CONSOLE="off")
    script = work / "write_runs.py"
    script.write_text(WANDB_AXES_SCRIPT)
    from guarded_sbatch.core.runner import run_command

    run_command([sys.executable, str(script), str(work)], env=env, cwd=work, timeout=300)
    return work


def wandb_rows_with_pb2(log: Path) -> list[dict[str, str]]:
    """Every history row of a .wandb log as {dotted key: value_json}, decoded with wandb's own protobuf."""
    import zlib

    from wandb.proto import wandb_internal_pb2

    data = log.read_bytes()
    pos, pending, records = 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        checksum, length, kind = struct.unpack_from("<IHB", data, pos)
        payload = data[pos + 7 : pos + 7 + length]
        assert zlib.crc32(bytes([kind]) + payload) == checksum
        pos += 7 + length
        if kind == 1:
            records.append(payload)
        elif kind == 2:
            pending = payload
        elif kind == 3:
            pending += payload
        elif kind == 4:
            records.append(pending + payload)
    rows = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append({".".join(i.nested_key) or i.key: i.value_json for i in record.history.item})
    return rows
