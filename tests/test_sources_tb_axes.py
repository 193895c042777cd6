"""TensorBoard: 16-bit floats in half_val (DT_HALF vs DT_BFLOAT16), odd tensors that must not cost the
loss beside them, Keras `epoch_*` series on the epoch axis, symlinked and deep run folders. Files are
written with tensorboard's own EventFileWriter / RecordWriter; values are checked against
tensorboard's own loader and tensor_util where it can decode them, and against torch's bfloat16."""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from source_writers import tb_event, write_tb_events

from guarded_sbatch.sources.points import Axis, MetricPoint
from guarded_sbatch.sources.tensorboard import TensorBoardSource, find_event_files


def _tensor_event(step: int, values: list) -> object:  # type: ignore[type-arg]
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Event(wall_time=1.7e9 + step, step=step, summary=Summary(value=values))


def _tensor_value(tag: str, dtype: int, **fields: object) -> object:
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Summary.Value(tag=tag, tensor=tensor_pb2.TensorProto(
        dtype=dtype, tensor_shape=tensor_shape_pb2.TensorShapeProto(), **fields))


def _tensorboards_own(event_file: Path) -> dict[tuple[str, int], float]:
    """(tag, step) -> value through tensorboard's own loader and make_ndarray (scalars it can decode)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    out = {}
    for event in EventFileLoader(str(event_file)).Load():
        for value in event.summary.value:
            if value.HasField("simple_value"):
                out[(value.tag, event.step)] = value.simple_value
            elif value.HasField("tensor"):
                try:
                    array = tensor_util.make_ndarray(value.tensor)
                except Exception:  # noqa: BLE001 - tensorboard without TF cannot decode every dtype
                    continue
                if array.size == 1 and array.dtype.kind in "fiu":
                    out[(value.tag, event.step)] = float(array.item())
    return out


def _bfloat16_bits(value: float) -> int:
    """The bits a real bfloat16 conversion gives (torch's when installed, else round-to-nearest-even)."""
    try:
        import torch
    except ImportError:
        raw = struct.unpack("<I", struct.pack("<f", value))[0]
        return ((raw + 0x7FFF + ((raw >> 16) & 1)) >> 16) & 0xFFFF
    return int(torch.tensor(value, dtype=torch.bfloat16).view(torch.int16).item()) & 0xFFFF


def _bfloat16_value(bits: int) -> float:
    try:
        import torch
    except ImportError:
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
    return float(torch.tensor(bits - (1 << 16) if bits >= 1 << 15 else bits, dtype=torch.int16)
                 .view(torch.bfloat16).float().item())


SAMPLES = [1.0, 2.718281828, -0.1, 3.0e38, 1e-3, 6.5e4, math.inf, math.nan]


def test_bfloat16_and_half_in_half_val_decode_by_dtype(tmp_path: Path) -> None:
    from tensorboard.compat.proto import types_pb2

    events = []
    for step, sample in enumerate(SAMPLES):
        bf16 = _bfloat16_bits(sample)
        with np.errstate(over="ignore"):
            half = int(np.array(sample, dtype=np.float16).view(np.uint16))
        events.append(_tensor_event(step, [
            _tensor_value("bf16", types_pb2.DT_BFLOAT16, half_val=[bf16]),
            _tensor_value("half", types_pb2.DT_HALF, half_val=[half]),
            _tensor_value("bf16_content", types_pb2.DT_BFLOAT16, tensor_content=struct.pack("<H", bf16)),
        ]))
    event_file = write_tb_events(tmp_path, events)
    ours = {(p.key, p.step): p.value for p in TensorBoardSource(tmp_path).read_new()}
    theirs = _tensorboards_own(event_file)
    for step, sample in enumerate(SAMPLES):
        want_bf16 = _bfloat16_value(_bfloat16_bits(sample))
        for key in ("bf16", "bf16_content"):
            got = ours[(key, step)]
            assert got == want_bf16 or (math.isnan(got) and math.isnan(want_bf16)), (key, sample, got)
        with np.errstate(over="ignore"):
            want_half = float(np.float16(sample))
        assert ours[("half", step)] == want_half or math.isnan(want_half)
        assert ("half", step) in theirs and (theirs[("half", step)] == ours[("half", step)] or math.isnan(want_half))
    assert ours[("bf16", 1)] == pytest.approx(2.71875)  # not the IEEE-half reading of the same bits


def _raw_event_with_values(step: int, loss: float, value_bytes: bytes) -> bytes:
    """An Event serialized by tensorboard's protobuf, plus one hand-made Summary.Value (a second
    `summary` field: protobuf merges repeated message fields)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    loss_value = Summary.Value(tag="loss", simple_value=loss)
    event = Event(wall_time=1.7e9 + step, step=step, summary=Summary(value=[loss_value]))
    value = b"\x0a" + bytes([len(value_bytes)]) + value_bytes
    return event.SerializeToString() + b"\x2a" + bytes([len(value)]) + value


def test_an_odd_tensor_never_costs_the_loss_beside_it(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto import types_pb2
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.record_writer import RecordWriter

    odd = {
        "tokens_u32": _tensor_value("tokens_u32", types_pb2.DT_UINT32, uint32_val=[4_000_000_000]),
        "tokens_u64": _tensor_value("tokens_u64", types_pb2.DT_UINT64, uint64_val=[2**40]),
        "count_i8": _tensor_value("count_i8", types_pb2.DT_INT8, int_val=[-5]),
        "text": _tensor_value("text", types_pb2.DT_STRING, string_val=[b"hello"]),
        "complex": _tensor_value("complex", types_pb2.DT_COMPLEX64, scomplex_val=[1.0, 2.0]),
        "flag": _tensor_value("flag", types_pb2.DT_BOOL, bool_val=[True]),
        "variant": _tensor_value("variant", types_pb2.DT_VARIANT),
        "resource": _tensor_value("resource", types_pb2.DT_RESOURCE),
    }
    events = []
    for step, value in enumerate(odd.values()):
        events.append(_tensor_event(step, [Summary.Value(tag="loss", simple_value=1.0 / (step + 1)), value]))
    event_file = write_tb_events(tmp_path, events)
    # tensorboard's own loader parses these events; its tensor_util (without TF) cannot turn a
    # DT_UINT32 into an array, so compare with the fields protobuf decoded.
    theirs = {}
    for event in EventFileLoader(str(event_file)).Load():
        for value in event.summary.value:
            field = {"tokens_u32": "uint32_val", "tokens_u64": "uint64_val", "count_i8": "int_val"}.get(value.tag)
            if field:
                theirs[(value.tag, event.step)] = float(getattr(value.tensor, field)[0])
    with open(event_file, "ab") as handle:  # and malformed tensors, appended by tensorboard's RecordWriter
        writer = RecordWriter(handle)
        writer.write(_raw_event_with_values(100, 0.25, b"\x0a\x03bad\x42\x03\xff\xff\xff"))
        writer.write(_raw_event_with_values(101, math.nan, b"\x0a\x04bad2\x42\x02\x08\x7f"))  # dtype 127
        writer.flush()
    source = TensorBoardSource(tmp_path)
    points = source.read_new()
    ours = {(p.key, p.step): p.value for p in points}
    assert sorted(s for k, s in ours if k == "loss") == [*range(len(odd)), 100, 101]
    assert math.isnan(ours[("loss", 101)]) and source.bad_records == 0
    assert ours[("tokens_u32", 0)] == 4_000_000_000 and ours[("tokens_u64", 1)] == 2**40
    assert ours[("count_i8", 2)] == -5
    assert {k for k, _ in ours} == {"loss", "tokens_u32", "tokens_u64", "count_i8"}
    assert all(ours[key] == value for key, value in theirs.items()) and len(theirs) == 3



def test_keras_epoch_summaries_are_on_the_epoch_axis(tmp_path: Path) -> None:
    # Keras' TensorBoard callback: train/ and validation/ runs, epoch_* at step = epoch (tf.summary
    # writes tensor scalars), and validation/evaluation_*_vs_iterations at step = iterations.
    for split in ("train", "validation"):
        events = []
        for epoch in range(12):
            loss = 1.0 / (epoch + 1) + (0.1 if split == "validation" else 0.0)
            events.append(tb_event(epoch, "epoch_loss", loss, kind="float_val"))
            events.append(tb_event(epoch, "epoch_accuracy", 1 - loss / 2, kind="float_val"))
            if split == "validation":
                events.append(tb_event((epoch + 1) * 250, "evaluation_loss_vs_iterations", loss, kind="float_val"))
        write_tb_events(tmp_path / split, events)
    source = TensorBoardSource(tmp_path)
    points = source.read_new()
    axes = source.axes()
    assert {k for k, a in axes.items() if a is Axis.EPOCH} == {
        "train/epoch_loss", "train/epoch_accuracy", "validation/epoch_loss", "validation/epoch_accuracy"}
    assert "validation/evaluation_loss_vs_iterations" not in axes  # Axis.STEP by default
    assert sorted(p.step for p in points if p.key == "train/epoch_loss") == list(range(12))
    for split in ("train", "validation"):
        (event_file,) = (tmp_path / split).glob("*tfevents*")
        theirs = _tensorboards_own(event_file)
        for (tag, step), value in theirs.items():
            assert next(p.value for p in points if p.key == f"{split}/{tag}" and p.step == step) == value


def test_symlinked_and_deep_run_folders_are_read_once_without_loops(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    elsewhere = tmp_path / "scratch" / "run-b"
    write_tb_events(logdir / "run-a", [tb_event(s, "loss", 1.0) for s in range(3)])
    write_tb_events(elsewhere, [tb_event(s, "loss", 2.0) for s in range(4)])
    deep = logdir.joinpath("sweep", "lr1e-3", "seed0", "version_0", "tb", "train")
    write_tb_events(deep, [tb_event(s, "loss", 3.0) for s in range(5)])
    os.symlink(elsewhere, logdir / "run-b")  # a run linked in from scratch space
    os.symlink(logdir, logdir / "run-a" / "up")  # a loop back to the top
    os.symlink(logdir / "run-a", logdir / "zz-alias")  # the same run twice
    source = TensorBoardSource(logdir)
    points = source.read_new()
    counts: dict[str, int] = {}
    for point in points:
        counts[point.key] = counts.get(point.key, 0) + 1
    assert counts == {"run-a/loss": 3, "run-b/loss": 4, "sweep/lr1e-3/seed0/version_0/tb/train/loss": 5}
    assert find_event_files(logdir, max_depth=3) and len(find_event_files(logdir, max_depth=3)) == 2
    assert len(find_event_files(logdir, max_entries=2)) < 3  # bounded by entries too


def test_a_folder_of_another_users_files_is_listed_once_while_it_is_unchanged(tmp_path: Path, monkeypatch) -> None:
    """A co-worker's 3 000 empty event files beside the run's: each read stats the folder, never lists it again,
    until a name is added (its mtime moves)."""
    import guarded_sbatch.sources.tensorboard as tensorboard

    run = tmp_path / "run"
    write_tb_events(run, [tb_event(s, "loss", 1.0) for s in range(3)])
    for i in range(3000):
        planted = run / f"events.out.tfevents.1700000000.other.{i}.0"
        planted.touch()
        os.chown(planted, 65534, 65534)
    os.utime(run, (1.0e9, 1.0e9))  # listed long after its last change
    listed: list[Path] = []
    real_listing = tensorboard.listing
    monkeypatch.setattr(tensorboard, "listing", lambda folder, limit: (listed.append(folder), real_listing(folder, limit))[1])
    source = TensorBoardSource(run)
    assert [p.value for p in source.read_new()] == [1.0, 1.0, 1.0]
    for _ in range(5):
        assert source.read_new() == []
    assert listed == [run]
    write_tb_events(run / "later", [tb_event(3, "loss", float("nan"))])  # a new folder: the run's folder changed
    assert [p.key for p in source.read_new()] == ["later/loss"]
    assert len(listed) == 3


def test_point_model_keeps_its_four_positional_fields() -> None:
    made = tuple.__new__(MetricPoint, (3, 1.5, "loss", 0.5))
    assert made == MetricPoint(3, 1.5, "loss", 0.5) and made.step == 3 and made.value == 0.5
    assert MetricPoint._fields == ("step", "wall_time", "key", "value")
