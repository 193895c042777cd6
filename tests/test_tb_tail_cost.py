"""A TensorBoard file whose writer is mid-record (its buffer flushed part of a record) costs a poll one read, not
the per-poll byte budget: the sidecar reads it every few seconds beside the training run (bench/bench_guard_cost.py
found it decoding the same 20-byte tail ~800 000 times per poll, 4 s of CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from source_writers import tb_event, write_tb_events

from guarded_sbatch.sources.tensorboard import TensorBoardSource
from package_extras import frame_record


def _counted(source: TensorBoardSource) -> list[int]:
    """The number of decoder passes over read bytes, counted."""
    calls = [0]
    decode = source._decoder.decode

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return decode(*args, **kwargs)

    source._decoder.decode = counting  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize("torn", [12, 20, 40])
def test_a_half_written_tail_is_read_once_per_poll_and_completed_later(tmp_path: Path, torn: int) -> None:
    event_file = write_tb_events(tmp_path, [tb_event(step, "train/loss", 1.0 / (step + 1)) for step in range(50)])
    record = frame_record(tb_event(50, "train/loss", 0.5).SerializeToString())
    assert torn < len(record)
    with open(event_file, "ab") as handle:
        handle.write(record[:torn])  # the writer's buffer flushed the first bytes of the next record
    source = TensorBoardSource(tmp_path)
    calls = _counted(source)
    assert [p.step for p in source.read_new()] == list(range(50))
    first = calls[0]
    assert first <= 3, f"{first} decoder passes for one poll of a {event_file.stat().st_size}-byte file"
    assert source.read_new() == []  # the next poll: the tail is still torn
    assert calls[0] - first <= 2
    with open(event_file, "ab") as handle:
        handle.write(record[torn:])
    assert [(p.step, p.value) for p in source.read_new()] == [(50, 0.5)]
    assert source.bad_records == 0 and source.skipped_bytes == 0
