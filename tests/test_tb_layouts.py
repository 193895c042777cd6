"""The TensorBoard decoder's columns (records of one layout read at fixed places) against a record-by-record
decode of the same bytes: every kind of scalar, tags of one length sharing a slot, steps whose varint grows,
an integer tensor of float size, and flipped bytes in a tag, a step and a value inside long runs."""

from __future__ import annotations

import math
import random
import struct
from pathlib import Path

import numpy as np
from source_writers import tb_event

from guarded_sbatch.judge.findings import median
from guarded_sbatch.sources.tb_event import read_event
from guarded_sbatch.sources.tensorboard import TensorBoardSource
from package_extras import frame_record
from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.compat.proto.summary_pb2 import Summary


def _int_tensor_event(step: int, value: int):  # type: ignore[no-untyped-def]
    """An int32 rank-0 tensor in 4 content bytes: the size of a float, never read as one."""
    event = tb_event(step, "int_as_content", 0.0)
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32, tensor_shape=tensor_shape_pb2.TensorShapeProto(),
                                    tensor_content=struct.pack("<i", value))
    event.summary.CopyFrom(Summary(value=[Summary.Value(tag="int_as_content", tensor=tensor)]))
    return event


def _records(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    kinds = ["simple", "float_val", "double_val", "tensor_content"]
    records = []
    for step in range(100, 1300):  # the step's varint grows from 1 to 2 bytes at 128
        for tag in ("loss1", "loss2", "train/lr"):  # loss1 and loss2: one length, one slot
            value = rng.choice([rng.random(), math.nan, -math.inf, 0.0])
            records.append(tb_event(step, tag, value, kinds[step // 100 % 4] if tag == "train/lr" else "simple",
                                    wall_time=1.7e9 + step * 0.37).SerializeToString())
        if step % 200 == 0:
            records.append(_int_tensor_event(step, step).SerializeToString())
    return records


def _expected(records: list[bytes], skipped: set[int]) -> list[tuple[int, float, str, str]]:
    out = []
    for index, record in enumerate(records):
        if index not in skipped:
            event = read_event(record, {})
            out += [(event.step, event.wall_time, tag, repr(value)) for tag, value in event.scalars]
    return out


def _read(folder: Path, data: bytes) -> tuple[list[tuple[int, float, str, str]], int]:
    (folder / "events.out.tfevents.1.host").write_bytes(data)
    source = TensorBoardSource(folder)
    points = [(p.step, p.wall_time, p.key, repr(p.value)) for p in source.read_new()]
    return points, source.bad_records


def test_columns_equal_a_record_by_record_decode(tmp_path: Path) -> None:
    records = _records(0)
    points, bad = _read(tmp_path, b"".join(map(frame_record, records)))
    assert bad == 0
    assert points == _expected(records, set())
    assert ("int_as_content", 200.0) in {(key, float(value)) for _, _, key, value in points}


def test_flipped_bytes_in_long_runs_cost_only_their_records(tmp_path: Path) -> None:
    records = _records(1)
    framed = [bytearray(frame_record(r)) for r in records]
    flips = {700: 12 + 20, 901: 12 + 10, 2333: len(framed[2333]) - 6}  # a tag byte, the step, the value
    for index, at in flips.items():
        framed[index][at] ^= 0x04
    points, bad = _read(tmp_path, b"".join(framed))
    assert bad == len(flips)
    assert points == _expected(records, set(flips))


def test_median_is_numpys() -> None:
    rng = np.random.default_rng(0)
    for values in (rng.standard_normal(7), rng.standard_normal(8), np.array([1.0, np.nan, 2.0]), np.arange(6)):
        assert np.array_equal(median(values), np.median(values), equal_nan=True)
    windows = rng.standard_normal((50, 20))
    assert np.array_equal(median(windows, axis=1), np.median(windows, axis=1))
