"""Incremental reader of W&B's local transaction log, `run-<id>.wandb` (online and offline runs).

File: 7-byte header `:W&B` + 0xBEE1 (little-endian) + version byte (0 or 1), then LevelDB-log framing
in 32 KiB blocks counted from offset 0: chunks `crc32(4) length(2) type(1) data`, types FULL=1 FIRST=2
MIDDLE=3 LAST=4, zero padding when fewer than 7 bytes remain in a block. The checksum is zlib's CRC-32
over the type byte and the data. Each record is a `wandb_internal_pb2.Record`; we decode its history
items by hand (field numbers checked against wandb/proto/wandb_internal.proto):

    Record: num=1, history=2 (HistoryRecord), run=17 (RunRecord)
    HistoryRecord: item=1 (HistoryItem, repeated), step=2 (HistoryStep: num=1)
    HistoryItem: key=1, nested_key=2 (repeated), integer=5 (sint64), number=6 (double), value_json=16
    RunRecord: run_id=1, entity=2, project=3, display_name=8
"""

from __future__ import annotations

import json
import math
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.core.points import MetricPoint, newest_per_key_step
from guarded_sbatch.sources.files import guarded_reader, open_regular
from guarded_sbatch.sources.wire import iter_fields, read_double, read_varint

FILE_MAGIC = b":W&B\xe1\xbe"
HEADER_SIZE = 7
BLOCK_SIZE = 32 * 1024
CHUNK_HEADER_SIZE = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
MAX_RECORD_BYTES = 64 * 1024 * 1024
READ_BYTES = 8 * 1024 * 1024

_CHUNK_HEADER = struct.Struct("<IHB")


def find_wandb_file(path: Path) -> Path | None:
    """The .wandb log for a .wandb file, a run folder, a wandb/ folder (via latest-run) or its parent."""
    if path.is_file():
        return path
    candidates = [path, path / "latest-run", path / "wandb" / "latest-run"]
    for folder in candidates:
        try:
            logs = sorted(folder.glob("*.wandb"))
        except OSError:
            continue
        if logs:
            return logs[-1]
    # A wandb/ folder without latest-run: the newest run folder.
    for wandb_dir in (path, path / "wandb"):
        try:
            runs = sorted(wandb_dir.glob("*run-*/run-*.wandb"), key=lambda p: p.parent.name.split("-", 2)[-1])
        except OSError:
            continue
        if runs:
            return runs[-1]
    return None


@dataclass
class RunInfo:
    run_id: str = ""
    entity: str = ""
    project: str = ""
    display_name: str = ""


@dataclass
class _HistoryRow:
    step: int | None = None
    values: dict[str, float] = field(default_factory=dict)
    timestamp: float = 0.0


def _parse_value_json(text: bytes) -> float | None:
    """A number (NaN and Infinity included); None for bools, strings, objects (media, histograms)."""
    try:
        return float(text)
    except ValueError:
        pass
    if text[:1] in (b"{", b"[", b'"', b"t", b"f", b"n"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _decode_item(buf: bytes, start: int, end: int) -> tuple[str, float | None]:
    key = ""
    nested: list[str] = []
    value: float | None = None
    for number, wire_type, payload_start, payload_end in iter_fields(buf, start, end):
        if number == 1 and wire_type == 2:
            key = buf[payload_start:payload_end].decode("utf-8", "replace")
        elif number == 2 and wire_type == 2:
            nested.append(buf[payload_start:payload_end].decode("utf-8", "replace"))
        elif number == 16 and wire_type == 2:
            value = _parse_value_json(buf[payload_start:payload_end])
        elif number == 6 and wire_type == 1:
            value = read_double(buf, payload_start)
        elif number == 5 and wire_type == 0:
            raw = read_varint(buf, payload_start)[0]
            value = float((raw >> 1) ^ -(raw & 1))
    return (".".join(nested) if nested else key), value


def decode_history(buf: bytes, start: int, end: int) -> _HistoryRow:
    row = _HistoryRow()
    for number, wire_type, payload_start, payload_end in iter_fields(buf, start, end):
        if number == 1 and wire_type == 2:
            key, value = _decode_item(buf, payload_start, payload_end)
            if value is None:
                continue
            if key == "_step":
                row.step = int(value) if math.isfinite(value) else row.step
            elif key == "_timestamp":
                row.timestamp = value
            elif not key.startswith("_"):
                row.values[key] = value
        elif number == 2 and wire_type == 2 and row.step is None:
            for step_number, step_wire, step_start, _ in iter_fields(buf, payload_start, payload_end):
                if step_number == 1 and step_wire == 0:
                    row.step = read_varint(buf, step_start)[0]
    return row


def _decode_run(buf: bytes, start: int, end: int, info: RunInfo) -> None:
    names = {1: "run_id", 2: "entity", 3: "project", 8: "display_name"}
    for number, wire_type, payload_start, payload_end in iter_fields(buf, start, end):
        if number in names and wire_type == 2:
            setattr(info, names[number], buf[payload_start:payload_end].decode("utf-8", "replace"))


@guarded_reader
class WandbLogSource:
    """History points from a W&B run's local `.wandb` log, read incrementally."""

    kind = "wandb"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.run = RunInfo()
        self.bad_records = 0  # chunks with a bad checksum, broken fragment sequences, undecodable records
        self.header_error = ""
        self.version: int | None = None
        self._offset = 0
        self._fragments: list[bytes] = []
        self._last_step: dict[str, int] = {}
        self.log_path: Path | None = find_wandb_file(self.path)

    def describe(self) -> str:
        """The log file (stable across reads, so callers can use it to tell sources apart)."""
        return str(self.log_path or self.path)

    def run_label(self) -> str:
        """entity/project/run_id (display name) once the run record has been read, else the log path."""
        if self.run.run_id:
            parts = [p for p in (self.run.entity, self.run.project, self.run.run_id) if p]
            return "/".join(parts) + (f" ({self.run.display_name})" if self.run.display_name else "")
        return self.describe()

    def files_inspected(self) -> list[str]:
        return [str(self.log_path)] if self.log_path else []

    def read_new(self) -> list[MetricPoint]:
        if self.log_path is None:
            self.log_path = find_wandb_file(self.path)
            if self.log_path is None:
                return []
        records = self._read_records()
        points: list[MetricPoint] = []
        repeated = False
        for record in records:
            try:
                repeated |= self._decode_record(record, points)
            except (ValueError, IndexError, struct.error, UnicodeDecodeError):
                self.bad_records += 1
        return newest_per_key_step(points) if repeated else points

    def _decode_record(self, record: bytes, points: list[MetricPoint]) -> bool:
        repeated = False
        for number, wire_type, start, end in iter_fields(record, 0, len(record)):
            if number == 2 and wire_type == 2:
                row = decode_history(record, start, end)
                if row.step is None:
                    continue
                for key, value in row.values.items():
                    previous = self._last_step.get(key)
                    if previous is None or row.step > previous:
                        self._last_step[key] = row.step
                    else:
                        repeated = True
                    points.append(MetricPoint(row.step, row.timestamp, key, value))
            elif number == 17 and wire_type == 2:
                _decode_run(record, start, end, self.run)
        return repeated

    def _read_records(self) -> list[bytes]:
        assert self.log_path is not None
        try:
            with os.fdopen(open_regular(self.log_path), "rb") as handle:
                if self._offset == 0:
                    header = handle.read(HEADER_SIZE)
                    if len(header) < HEADER_SIZE:
                        return []  # the writer has not written the header yet
                    if header[:6] != FILE_MAGIC or header[6] not in (0, 1):
                        if not self.header_error:
                            self.bad_records += 1
                        self.header_error = f"{self.log_path} does not start with a W&B log header"
                        return []
                    self.version = header[6]
                    self._offset = HEADER_SIZE
                handle.seek(self._offset)
                data = handle.read(READ_BYTES)
        except OSError:
            return []
        return self._split_chunks(data)

    def _split_chunks(self, data: bytes) -> list[bytes]:
        records: list[bytes] = []
        pos = 0
        base = self._offset
        while True:
            block_left = BLOCK_SIZE - (base + pos) % BLOCK_SIZE
            if block_left < CHUNK_HEADER_SIZE:
                if len(data) - pos < block_left:
                    break
                pos += block_left  # zero padding at the end of a block
                continue
            if len(data) - pos < CHUNK_HEADER_SIZE:
                break
            checksum, length, chunk_type = _CHUNK_HEADER.unpack_from(data, pos)
            if checksum == 0 and length == 0 and chunk_type == 0:
                # Zeros: pre-allocated space or padding; the rest of this block carries nothing.
                if len(data) - pos < block_left:
                    break
                pos += block_left
                continue
            if length > block_left - CHUNK_HEADER_SIZE:
                self._corrupt()
                pos += block_left
                continue
            end = pos + CHUNK_HEADER_SIZE + length
            if end > len(data):
                break  # partial chunk at the end: retried on the next read
            payload = data[pos + CHUNK_HEADER_SIZE : end]
            if zlib.crc32(payload, zlib.crc32(bytes((chunk_type,)))) != checksum:
                self._corrupt()
                pos += block_left  # like LevelDB: drop the rest of this block
                continue
            pos = end
            if chunk_type == FULL:
                if self._fragments:
                    self._corrupt()
                records.append(payload)
            elif chunk_type == FIRST:
                if self._fragments:
                    self._corrupt()
                self._fragments = [payload]
            elif chunk_type in (MIDDLE, LAST):
                if not self._fragments:
                    self.bad_records += 1  # a continuation without its start: skip it
                    continue
                self._fragments.append(payload)
                if sum(len(f) for f in self._fragments) > MAX_RECORD_BYTES:
                    self._corrupt()
                elif chunk_type == LAST:
                    records.append(b"".join(self._fragments))
                    self._fragments = []
            else:
                self._corrupt()
        self._offset = base + pos
        return records

    def _corrupt(self) -> None:
        self.bad_records += 1
        self._fragments = []
