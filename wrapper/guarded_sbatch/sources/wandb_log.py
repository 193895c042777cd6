"""Incremental reader of W&B's local transaction log, `run-<id>.wandb` (online and offline runs).

File: 7-byte header `:W&B` + 0xBEE1 (little-endian) + version byte (0 or 1), then LevelDB-log framing
in 32 KiB blocks counted from offset 0: chunks `crc32(4) length(2) type(1) data`, types FULL=1 FIRST=2
MIDDLE=3 LAST=4, zero padding when fewer than 7 bytes remain in a block. The checksum is zlib's CRC-32
over the type byte and the data. Each record is a `wandb_internal_pb2.Record`; we decode its history
items by hand (field numbers checked against wandb/proto/wandb_internal.proto):

    Record: num=1, history=2 (HistoryRecord), metric=12 (MetricRecord), run=17 (RunRecord)
    HistoryRecord: item=1 (HistoryItem, repeated), step=2 (HistoryStep: num=1)
    HistoryItem: key=1, nested_key=2 (repeated), integer=5 (sint64), number=6 (double), value_json=16
    MetricRecord: name=1, glob_name=2, step_metric=4
    RunRecord: run_id=1, entity=2, project=3, display_name=8

Which x-axis each key is on, and which items are media, is wandb_axis's business. A resumed run
(`wandb.init(id=..., resume=...)`) writes a new run folder with the same id: every part is read,
oldest first, and a part whose `_step` count restarted (offline resumes do) continues after the last.
"""

from __future__ import annotations

import json
import math
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.sources.points import Axis, MetricPoint, newest_per_key_step
from guarded_sbatch.sources.base import SourceBase, SourceError, TrackerRun
from guarded_sbatch.sources.files import guarded_reader, open_regular
from guarded_sbatch.sources.wandb_axis import WandbAxes, WandbRow
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


def _run_id_of(log: Path) -> str:
    """The run id of a log in a `run-<time>-<id>` / `offline-run-<time>-<id>` folder, else ""."""
    folder = log.parent.name
    if "run-" not in folder or not log.name.startswith("run-"):
        return ""
    return folder.rsplit("-", 1)[-1] if folder.rsplit("-", 1)[-1] == log.stem[len("run-"):] else ""


def resumed_parts(log: Path) -> list[Path]:
    """The log files of the same run id beside `log` (earlier parts of a resumed run), oldest first."""
    run_id = _run_id_of(log)
    if not run_id:
        return [log]
    try:
        parts = [p for p in log.parent.parent.glob(f"*run-*-{run_id}/run-{run_id}.wandb") if _run_id_of(p) == run_id]
    except OSError:
        return [log]
    parts = sorted(set(parts) | {log}, key=lambda p: p.parent.name.split("run-", 1)[-1])
    return parts


@dataclass
class RunInfo:
    run_id: str = ""
    entity: str = ""
    project: str = ""
    display_name: str = ""


@dataclass
class _LogPart:
    """One `.wandb` file and where its reading stands."""

    path: Path
    offset: int = 0
    fragments: list[bytes] = field(default_factory=list)
    first_step: int | None = None
    last_step: int | None = None


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


def _decode_item(buf: bytes, start: int, end: int) -> tuple[str, float | None, bool]:
    """(dotted key, numeric value or None, whether this item is a media dict's `_type`)."""
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
    is_type = len(nested) > 1 and nested[-1] == "_type"
    return (".".join(nested) if nested else key), value, is_type


def decode_history(buf: bytes, start: int, end: int) -> WandbRow:
    row = WandbRow()
    for number, wire_type, payload_start, payload_end in iter_fields(buf, start, end):
        if number == 1 and wire_type == 2:
            key, value, is_type = _decode_item(buf, payload_start, payload_end)
            if is_type:
                row.media_paths.add(key.rsplit(".", 1)[0])
            if value is None:
                continue
            if key == "_step":
                row.step = int(value) if math.isfinite(value) else row.step
            elif key == "_timestamp":
                row.timestamp = value
            elif not key.startswith("_") and "._" not in key:
                row.values[key] = value
        elif number == 2 and wire_type == 2 and row.step is None:
            for step_number, step_wire, step_start, _ in iter_fields(buf, payload_start, payload_end):
                if step_number == 1 and step_wire == 0:
                    row.step = read_varint(buf, step_start)[0]
    return row


def _decode_metric(buf: bytes, start: int, end: int, axes: WandbAxes) -> None:
    fields = {1: "", 2: "", 4: ""}
    for number, wire_type, payload_start, payload_end in iter_fields(buf, start, end):
        if number in fields and wire_type == 2:
            fields[number] = buf[payload_start:payload_end].decode("utf-8", "replace")
    axes.define(fields[1], fields[2], fields[4])


def _decode_run(buf: bytes, start: int, end: int, info: RunInfo) -> None:
    names = {1: "run_id", 2: "entity", 3: "project", 8: "display_name"}
    for number, wire_type, payload_start, payload_end in iter_fields(buf, start, end):
        if number in names and wire_type == 2:
            setattr(info, names[number], buf[payload_start:payload_end].decode("utf-8", "replace"))


@guarded_reader
class WandbLogSource(SourceBase):
    """History points from a W&B run's local `.wandb` log (and its resumed parts), read incrementally."""

    kind = "wandb"

    def __init__(self, path: str | os.PathLike[str], *, run_id: str = "") -> None:
        self.path = Path(path)
        self.expected_run_id = run_id  # the id the job was given: a log of another run is never read
        self.run = RunInfo()
        self.bad_records = 0  # chunks with a bad checksum, broken fragment sequences, undecodable records
        self.header_error = ""
        self.version: int | None = None
        self.axis = WandbAxes()
        self._parts: list[_LogPart] = []
        self._last_step: dict[str, int] = {}
        self._identity: str | None = None
        self.log_path: Path | None = find_wandb_file(self.path)

    def describe(self) -> str:
        """The run's first log file (stable across reads and resumes, so callers can tell sources apart:
        a source opened on a resumed part is the same run)."""
        if self.log_path is None:
            return str(self.path)
        if self._identity is None:
            try:
                self._identity = str(resumed_parts(self.log_path.resolve())[0])
            except OSError:
                self._identity = str(self.log_path)
        return self._identity

    def run_label(self) -> str:
        """entity/project/run_id (display name) once the run record has been read, else the log path."""
        if self.run.run_id:
            parts = [p for p in (self.run.entity, self.run.project, self.run.run_id) if p]
            return "/".join(parts) + (f" ({self.run.display_name})" if self.run.display_name else "")
        return self.describe()

    def tracker_run(self) -> TrackerRun | None:
        if not self.run.run_id:
            return None
        run_path = "/".join(p for p in (self.run.entity, self.run.project, self.run.run_id) if p)
        return TrackerRun(run_path, str(self.log_path.resolve().parent) if self.log_path else "")

    def files_inspected(self) -> list[str]:
        return [str(part.path) for part in self._parts] or ([str(self.log_path)] if self.log_path else [])

    def axes(self) -> dict[str, Axis]:
        """Per key: the axis its steps are on (see wandb_axis)."""
        return self.axis.axes()

    def _refresh_parts(self) -> None:
        newest = find_wandb_file(self.path) if self.path.is_dir() or self.log_path is None else self.log_path
        if newest is None:
            return
        self.log_path = self.log_path or newest
        try:
            newest = newest.resolve()  # latest-run is a link: the run folder's name carries the id
        except OSError:
            pass
        run_id = _run_id_of(self._parts[0].path) if self._parts else None
        if run_id is not None and _run_id_of(newest) != run_id:
            newest = self._parts[-1].path  # another run took latest-run: stay with ours
        known = {part.path for part in self._parts}
        for path in resumed_parts(newest):
            if path not in known:
                self._parts.append(_LogPart(path))

    def read_new(self) -> list[MetricPoint]:
        self._refresh_parts()
        points: list[MetricPoint] = []
        repeated = False
        for index, part in enumerate(self._parts):
            previous = self._parts[index - 1] if index else None
            for record in self._read_records(part):
                try:
                    repeated |= self._decode_record(record, part, previous, points)
                except (ValueError, IndexError, struct.error, UnicodeDecodeError):
                    self.bad_records += 1
        self._check_run_id()
        return newest_per_key_step(points) if repeated else points

    def _check_run_id(self) -> None:
        """A log whose folder or Run record names another run than the job's is never read as this run's."""
        if not self.expected_run_id:
            return
        named = {i for i in (self.run.run_id, *(_run_id_of(p.path) for p in self._parts)) if i}
        wrong = sorted(named - {self.expected_run_id})
        if wrong:
            raise SourceError(f"{self.describe()} is W&B run {wrong[0]}, not this run's {self.expected_run_id}: "
                              "not read")

    def _decode_record(self, record: bytes, part: _LogPart, previous: _LogPart | None,
                       points: list[MetricPoint]) -> bool:
        repeated = False
        for number, wire_type, start, end in iter_fields(record, 0, len(record)):
            if number == 2 and wire_type == 2:
                row = decode_history(record, start, end)
                if row.step is not None:
                    if part.first_step is None:
                        part.first_step = row.step
                        # An offline resume counts log() calls from 0 again: continue after the last part.
                        if previous is not None and previous.last_step is not None and row.step <= previous.last_step:
                            self.axis.step_offset = previous.last_step + 1 - row.step
                    part.last_step = row.step + self.axis.step_offset
                for point in self.axis.points(row):
                    last = self._last_step.get(point.key)
                    if last is None or point.step > last:
                        self._last_step[point.key] = point.step
                    else:
                        repeated = True
                    points.append(point)
            elif number == 12 and wire_type == 2:
                _decode_metric(record, start, end, self.axis)
            elif number == 17 and wire_type == 2:
                _decode_run(record, start, end, self.run)
        return repeated

    def _read_records(self, part: _LogPart) -> list[bytes]:
        try:
            with os.fdopen(open_regular(part.path), "rb") as handle:
                if part.offset == 0:
                    header = handle.read(HEADER_SIZE)
                    if len(header) < HEADER_SIZE:
                        return []  # the writer has not written the header yet
                    if header[:6] != FILE_MAGIC or header[6] not in (0, 1):
                        if not self.header_error:
                            self.bad_records += 1
                        self.header_error = f"{part.path} does not start with a W&B log header"
                        return []
                    self.version = header[6]
                    part.offset = HEADER_SIZE
                handle.seek(part.offset)
                data = handle.read(READ_BYTES)
        except OSError:
            return []
        return self._split_chunks(part, data)

    def _split_chunks(self, part: _LogPart, data: bytes) -> list[bytes]:
        records: list[bytes] = []
        pos = 0
        base = part.offset
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
                self._corrupt(part)
                pos += block_left
                continue
            end = pos + CHUNK_HEADER_SIZE + length
            if end > len(data):
                break  # partial chunk at the end: retried on the next read
            payload = data[pos + CHUNK_HEADER_SIZE : end]
            if zlib.crc32(payload, zlib.crc32(bytes((chunk_type,)))) != checksum:
                self._corrupt(part)
                pos += block_left  # like LevelDB: drop the rest of this block
                continue
            pos = end
            self._take_chunk(part, chunk_type, payload, records)
        part.offset = base + pos
        return records

    def _take_chunk(self, part: _LogPart, chunk_type: int, payload: bytes, records: list[bytes]) -> None:
        """Reassemble records from FULL / FIRST, MIDDLE..., LAST chunks."""
        if chunk_type == FULL:
            if part.fragments:
                self._corrupt(part)
            records.append(payload)
        elif chunk_type == FIRST:
            if part.fragments:
                self._corrupt(part)
            part.fragments = [payload]
        elif chunk_type in (MIDDLE, LAST):
            if not part.fragments:
                self.bad_records += 1  # a continuation without its start: skip it
                return
            part.fragments.append(payload)
            if sum(len(f) for f in part.fragments) > MAX_RECORD_BYTES:
                self._corrupt(part)
            elif chunk_type == LAST:
                records.append(b"".join(part.fragments))
                part.fragments = []
        else:
            self._corrupt(part)

    def _corrupt(self, part: _LogPart) -> None:
        self.bad_records += 1
        part.fragments = []
