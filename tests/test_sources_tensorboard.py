"""TensorBoard reader against files written by tensorboard's own writer."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest
from source_writers import append_tb_events, tb_event, write_tb_events

from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.sources.points import MetricPoint
from guarded_sbatch.sources.tb_event import read_event
from guarded_sbatch.sources.tensorboard import TensorBoardSource
from guarded_sbatch.sources.tfrecord import crc32c, pure_python_crc32c
from package_extras import frame_record
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader


def _values(points: list[MetricPoint]) -> dict[tuple[str, int], float]:
    return {(p.key, p.step): p.value for p in points}


@pytest.mark.parametrize("kind", ["simple", "float_val", "double_val", "tensor_content"])
def test_each_scalar_encoding_is_read(tmp_path: Path, kind: str) -> None:
    values = [0.5, math.nan, math.inf, -math.inf, 1e-8]
    write_tb_events(tmp_path, [tb_event(step, "train/loss", v, kind) for step, v in enumerate(values)])
    points = TensorBoardSource(tmp_path).read_new()
    assert [p.step for p in points] == [0, 1, 2, 3, 4]
    assert points[0].value == pytest.approx(0.5) and math.isnan(points[1].value)
    assert points[2].value == math.inf and points[3].value == -math.inf
    assert points[4].value == pytest.approx(1e-8, rel=1e-6)
    assert all(p.wall_time == 1.7e9 + p.step for p in points)


def test_matches_event_accumulator(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = [tb_event(step, tag, step * 0.25 + len(tag), "simple")
              for step in (0, 1, 127, 128, 300, 16384, 2_100_000, 300_000_000) for tag in ("a", "b/long_tag")]
    write_tb_events(tmp_path, events)
    accumulator = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    accumulator.Reload()
    expected = {(tag, e.step): e.value for tag in accumulator.Tags()["scalars"] for e in accumulator.Scalars(tag)}
    assert _values(TensorBoardSource(tmp_path).read_new()) == expected


def test_non_scalar_summaries_are_ignored(tmp_path: Path) -> None:
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    vector = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0, 2.0], tensor_shape=tensor_shape_pb2.
                                    TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=2)]))
    text = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[b"hi"])
    events = [Event(step=1, summary=Summary(value=[Summary.Value(tag="hist", tensor=vector),
                                                   Summary.Value(tag="text", tensor=text),
                                                   Summary.Value(tag="loss", simple_value=3.0)]))]
    write_tb_events(tmp_path, events)
    assert _values(TensorBoardSource(tmp_path).read_new()) == {("loss", 1): 3.0}


def test_incremental_reads_and_late_writes_to_an_older_file(tmp_path: Path) -> None:
    first = write_tb_events(tmp_path, [tb_event(s, "loss", 1.0 / (s + 1)) for s in range(3)], ".a")
    source = TensorBoardSource(tmp_path)
    assert [p.step for p in source.read_new()] == [0, 1, 2]
    assert source.read_new() == []
    # A restart writes a newer file, then the old process flushes a late event into the older one.
    write_tb_events(tmp_path, [tb_event(s, "loss", 0.1) for s in range(3, 5)], ".b")
    append_tb_events(first, [tb_event(9, "eval/acc", 0.9)])
    assert sorted((p.key, p.step) for p in source.read_new()) == [("eval/acc", 9), ("loss", 3), ("loss", 4)]
    assert len(source.files_inspected()) == 2


def test_subfolders_are_runs_and_prefix_their_keys(tmp_path: Path) -> None:
    write_tb_events(tmp_path / "train", [tb_event(1, "epoch_loss", 2.0)])
    write_tb_events(tmp_path / "validation", [tb_event(1, "epoch_loss", 3.0)])
    assert _values(TensorBoardSource(tmp_path).read_new()) == {("train/epoch_loss", 1): 2.0,
                                                              ("validation/epoch_loss", 1): 3.0}


def test_resumed_job_repeats_steps_and_the_newest_value_wins(tmp_path: Path) -> None:
    write_tb_events(tmp_path, [tb_event(s, "loss", 1.0, wall_time=100.0 + s) for s in range(5)], ".a")
    write_tb_events(tmp_path, [tb_event(s, "loss", 2.0, wall_time=200.0 + s) for s in range(3, 7)], ".b")
    points = TensorBoardSource(tmp_path).read_new()
    assert _values(points) == {("loss", 0): 1.0, ("loss", 1): 1.0, ("loss", 2): 1.0, ("loss", 3): 2.0,
                               ("loss", 4): 2.0, ("loss", 5): 2.0, ("loss", 6): 2.0}
    assert len(points) == 7


def test_repeat_in_a_later_read_replaces_the_value_in_history(tmp_path: Path) -> None:
    first = write_tb_events(tmp_path, [tb_event(s, "loss", 1.0, wall_time=100.0 + s) for s in range(3)])
    source = TensorBoardSource(tmp_path)
    history = MetricHistory()
    history.add(source.read_new())
    append_tb_events(first, [tb_event(1, "loss", 5.0, wall_time=500.0)])
    history.add(source.read_new())
    steps, values = history.series("loss")
    assert dict(zip(steps.tolist(), values.tolist())) == {0: 1.0, 1: 5.0, 2: 1.0}


def test_bad_crc_record_is_skipped_and_counted(tmp_path: Path) -> None:
    event_file = write_tb_events(tmp_path, [tb_event(s, "loss", float(s)) for s in range(4)])
    data = bytearray(event_file.read_bytes())
    records = list(RawEventFileLoader(str(event_file)).Load())  # tensorboard's own framing
    # Flip a byte inside the float of the third scalar record (file_version record comes first).
    offset = sum(len(r) + 16 for r in records[:3]) + 12 + len(records[3]) - 1
    data[offset] ^= 0x40
    event_file.write_bytes(bytes(data))
    source = TensorBoardSource(tmp_path)
    assert _values(source.read_new()) == {("loss", 0): 0.0, ("loss", 1): 0.0 + 1, ("loss", 3): 3.0}
    assert source.bad_records == 1
    unchecked = TensorBoardSource(tmp_path, check_crc=False)
    assert unchecked.read_new()[2].value != 2.0  # without the check the garbage value gets through


def test_corrupt_length_resyncs_to_the_next_record(tmp_path: Path) -> None:
    event_file = write_tb_events(tmp_path, [tb_event(s, "loss", float(s)) for s in range(4)])
    data = bytearray(event_file.read_bytes())
    first_len = struct.unpack_from("<Q", data)[0]
    data[first_len + 16 + 2] ^= 0xFF  # the length field of the first scalar record
    event_file.write_bytes(bytes(data))
    source = TensorBoardSource(tmp_path)
    assert _values(source.read_new()) == {("loss", 1): 1.0, ("loss", 2): 2.0, ("loss", 3): 3.0}
    assert source.bad_records == 1


def test_bounded_batches_cover_everything_once(tmp_path: Path) -> None:
    write_tb_events(tmp_path, [tb_event(s, "loss", float(s)) for s in range(1000)])
    source = TensorBoardSource(tmp_path, chunk_bytes=4096)
    steps: list[int] = []
    while batch := source.read_new(max_points=64):
        assert len(batch) <= 64
        steps += [p.step for p in batch]
    assert steps == list(range(1000))


def test_crc32c_implementations_agree() -> None:
    slow = pure_python_crc32c()
    for data in (b"", b"a", b"123456789", bytes(range(256)) * 3):
        assert crc32c(data) == slow(data)
    assert slow(b"123456789") == 0xE3069283  # the standard check value


def test_decoder_handles_hand_framed_records(tmp_path: Path) -> None:
    event = tb_event(7, "x", 1.25, "float_val").SerializeToString()
    framed = frame_record(event)
    (tmp_path / "events.out.tfevents.1.host").write_bytes(framed + framed[:10])  # and a half-written tail
    assert [(p.step, p.key, p.value) for p in TensorBoardSource(tmp_path).read_new()] == [(7, "x", 1.25)]
    fields = read_event(event, {})
    assert (fields.wall_time, fields.step, fields.scalars) == (1.7e9 + 7, 7, [("x", 1.25)])


_TAGS = ("train/loss", "train/lr", "train/grad_norm", "eval/loss")


def _four_tag_run(folder: Path, steps: int) -> tuple[Path, list[int]]:
    """A trainer's file: the same four tags at every step (the reader frames it as runs of one pattern); the data
    offsets of every scalar record, in order."""
    event_file = write_tb_events(folder, [tb_event(s, tag, s / 1000 + i, wall_time=1.7e9 + s)
                                          for s in range(steps) for i, tag in enumerate(_TAGS)])
    data, offsets, pos = event_file.read_bytes(), [], 0
    while pos < len(data):
        length = struct.unpack_from("<Q", data, pos)[0]
        offsets.append(pos + 12)
        pos += 16 + length
    return event_file, offsets[1:]  # the first record is the file_version event


def test_a_flipped_byte_inside_a_long_run_costs_only_its_record(tmp_path: Path) -> None:
    event_file, offsets = _four_tag_run(tmp_path, 2000)
    data = bytearray(event_file.read_bytes())
    for record in (1001, 1002, 5000 + 2):  # two in one crc group, one in another; the value's first byte
        length = struct.unpack_from("<Q", data, offsets[record] - 12)[0]
        data[offsets[record] + length - 4] ^= 0x40
    event_file.write_bytes(bytes(data))
    source = TensorBoardSource(tmp_path)
    points = _values(source.read_new())
    assert source.bad_records == 3
    assert len(points) == 8000 - 3
    lost = {(_TAGS[r % 4], r // 4) for r in (1001, 1002, 5002)}
    assert lost.isdisjoint(points)
    assert points[("eval/loss", 1999)] == pytest.approx(1.999 + 3)


def test_a_run_read_in_bounded_batches_and_torn_tails(tmp_path: Path) -> None:
    event_file, _ = _four_tag_run(tmp_path / "full", 3000)
    data = event_file.read_bytes()
    (tmp_path / "live").mkdir()
    growing = tmp_path / "live" / event_file.name
    source = TensorBoardSource(tmp_path / "live", chunk_bytes=64 * 1024)
    seen: list[tuple[str, int]] = []
    for cut in (777, 40_001, 40_002, 250_013, len(data) - 3, len(data)):  # each cut mid-record but the last
        growing.write_bytes(data[:cut])
        while batch := source.read_new(max_points=1000):
            assert len(batch) <= 1000
            seen += [(p.key, p.step) for p in batch]
    assert seen == [(tag, s) for s in range(3000) for tag in _TAGS]
    assert source.bad_records == 0
