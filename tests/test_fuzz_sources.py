"""Random bytes and bit flips in event files, .wandb logs and text logs: no reader ever raises."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from source_writers import tb_event, write_tb_events

from guarded_sbatch.sources.points import MetricPoint
from guarded_sbatch.sources.tensorboard import TensorBoardSource
from guarded_sbatch.sources.textlog import TextLogSource
from package_extras import frame_record
from guarded_sbatch.sources.wandb_log import FILE_MAGIC, WandbLogSource

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _read_twice(source, path: Path, data: bytes) -> list[MetricPoint]:  # type: ignore[no-untyped-def]
    path.write_bytes(data)
    points = source.read_new()
    points += source.read_new()
    assert all(isinstance(p, MetricPoint) and isinstance(p.value, float) for p in points)
    return points


@pytest.fixture(scope="module")
def event_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        events = [
            tb_event(s, "loss", s / 3, kind) for s, kind in enumerate(["simple", "float_val", "double_val", "tensor_content"] * 3)
        ]
        return write_tb_events(Path(folder), events).read_bytes()


def _wandb_like(payload: bytes) -> bytes:
    """A header and LevelDB chunks with valid CRCs around arbitrary payloads (reaches the decoder)."""
    import struct
    import zlib

    out = bytearray(FILE_MAGIC + b"\x00")
    for piece in (payload[i : i + 300] for i in range(0, len(payload), 300)):
        out += struct.pack("<IHB", zlib.crc32(bytes([1]) + piece), len(piece), 1) + piece
    return bytes(out)


@FUZZ
@given(data=st.binary(max_size=3000))
def test_random_bytes_as_event_file(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "events.out.tfevents.1.fuzz"
    _read_twice(TensorBoardSource(tmp_path), path, data)
    _read_twice(TensorBoardSource(tmp_path, check_crc=False), path, data)


@FUZZ
@given(records=st.lists(st.binary(max_size=200), max_size=20))
def test_random_protobufs_behind_valid_framing(tmp_path: Path, records: list[bytes]) -> None:
    _read_twice(TensorBoardSource(tmp_path), tmp_path / "events.out.tfevents.1.fuzz", b"".join(frame_record(r) for r in records))


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=7)), min_size=1, max_size=5))
def test_bit_flips_in_a_real_event_file(tmp_path: Path, event_bytes: bytes, flips: list[tuple[int, int]]) -> None:
    data = bytearray(event_bytes)
    for position, bit in flips:
        data[position % len(data)] ^= 1 << bit
    source = TensorBoardSource(tmp_path)
    points = _read_twice(source, tmp_path / "events.out.tfevents.1.fuzz", bytes(data))
    # With crc checks a flipped record is dropped, never read as a wrong value.
    assert all(p.value == pytest.approx(p.step / 3) for p in points)


@FUZZ
@given(data=st.binary(max_size=3000), with_header=st.booleans())
def test_random_bytes_as_wandb_log(tmp_path: Path, data: bytes, with_header: bool) -> None:
    content = (FILE_MAGIC + b"\x00" + data) if with_header else data
    _read_twice(WandbLogSource(tmp_path / "run-x.wandb"), tmp_path / "run-x.wandb", content)


@FUZZ
@given(payload=st.binary(max_size=2000))
def test_random_records_behind_valid_wandb_chunks(tmp_path: Path, payload: bytes) -> None:
    _read_twice(WandbLogSource(tmp_path / "run-y.wandb"), tmp_path / "run-y.wandb", _wandb_like(payload))


@FUZZ
@given(text=st.text(max_size=2000))
def test_random_text_logs(tmp_path: Path, text: str) -> None:
    points = _read_twice(TextLogSource(tmp_path / "out.log"), tmp_path / "out.log", text.encode("utf-8", "replace"))
    assert all(isinstance(p.step, int) for p in points)


LOG_ALPHABET = st.sampled_from(
    [
        "loss",
        "lr",
        "step",
        "iter",
        ":",
        "=",
        " ",
        "|",
        "\n",
        "\r",
        "{",
        "}",
        "'",
        ",",
        "nan",
        "inf",
        "-",
        "1",
        "2.5",
        "E+03",
        "(",
        ")",
        "[",
        "]",
        "\x1b[32m",
        "val",
        "/",
    ]
)


@FUZZ
@given(pieces=st.lists(LOG_ALPHABET, max_size=300))
def test_log_like_noise(tmp_path: Path, pieces: list[str]) -> None:
    points = _read_twice(TextLogSource(tmp_path / "noise.log"), tmp_path / "noise.log", "".join(pieces).encode())
    assert all(isinstance(p.value, float) and (math.isnan(p.value) or p.value == p.value) for p in points)
