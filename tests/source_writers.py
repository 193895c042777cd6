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


