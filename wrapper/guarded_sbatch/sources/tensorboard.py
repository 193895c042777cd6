"""Incremental reader of TensorBoard event files, decoding the few Event fields it needs by hand.

Unlike TensorBoard's own loader (files in name order, never going back) every event file under the
folder keeps its own offset, so late writes to an older file (a restarted job whose first process is
still flushing) are not lost. Files in subfolders are separate runs: their tags get the subfolder as a
prefix (``validation/epoch_loss``), as TensorBoard shows them.
"""

from __future__ import annotations

import gc
import os
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.core.points import Axis, MetricPoint, newest_per_key_step
from guarded_sbatch.sources.base import SourceError
from guarded_sbatch.sources.files import check_regular, guarded_reader, open_regular
from guarded_sbatch.sources.tb_bulk import ColumnSink, bulk_prefix
from guarded_sbatch.sources.tb_event import decode_event
from guarded_sbatch.sources.tfrecord import (
    HEADER_SIZE,
    HEADER_STRUCT,
    MASK_DELTA,
    MAX_RECORD_SIZE,
    UINT32_STRUCT,
    crc32c,
    find_next_header,
)

EVENT_FILE_MARKER = "tfevents"
DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 8  # logs/<project>/<sweep>/<run>/<version>/<split>/ is common; deeper is bounded by entries
MAX_ENTRIES = 20_000
_SKIPPED_FOLDERS = {".git", "__pycache__", "node_modules", ".venv", "venv", "site-packages", "checkpoints",
                    "wandb", "media"}

_HEADER = HEADER_STRUCT
_UINT32 = UINT32_STRUCT
_make_tuple = tuple.__new__


@dataclass
class _EventFile:
    path: Path
    key_prefix: str
    offset: int = 0
    resyncing: bool = False


def _sort_key(path: Path) -> tuple[str, int, str]:
    # events.out.tfevents.<unix time>.<host>...: order by folder, then creation time.
    parts = path.name.split(".")
    created = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else 0
    return str(path.parent), created, path.name


def find_event_files(root: Path, max_depth: int = MAX_DEPTH, max_entries: int = MAX_ENTRIES,
                     notes: list[str] | None = None) -> list[Path]:
    """Event files under root, breadth-first to max_depth folders deep and at most max_entries entries.

    Symlinked run folders are followed (experiment trees often link runs in from scratch space), each
    real folder once, so a link back up the tree cannot loop. Paths keep the link's name: that is
    the run name TensorBoard shows.
    """
    if root.is_file():
        return [root]
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()
    queue: deque[tuple[Path, int]] = deque([(root, 0)])
    entries_left = max_entries
    truncated = False
    while queue and entries_left > 0:
        folder, depth = queue.popleft()
        try:
            info = folder.stat()
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            entries = list(os.scandir(folder))
        except OSError:
            continue
        truncated = truncated or len(entries) > entries_left
        for entry in entries[:entries_left]:
            try:
                if entry.is_dir():
                    if depth < max_depth and entry.name not in _SKIPPED_FOLDERS:
                        queue.append((Path(entry.path), depth + 1))
                elif EVENT_FILE_MARKER in entry.name:
                    found.append(Path(entry.path))  # whatever it is: the reader refuses (and names) a non-file
            except OSError:
                continue
        entries_left -= len(entries)
    if notes is not None and (truncated or (queue and entries_left <= 0)):
        notes.append(f"{root} holds more than {max_entries} entries: the search for event files stopped there "
                     "(point --tb at the run's own folder)")
    return sorted(found, key=_sort_key)


@guarded_reader
class TensorBoardSource:
    """Scalars from every event file under a folder (or one event file), read incrementally."""

    kind = "tensorboard"

    def __init__(self, path: str | os.PathLike[str], *, check_crc: bool = True,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, accept: Callable[[Path], bool] | None = None) -> None:
        self.path = Path(path)
        self.accept = accept  # which event files to read (a run's own); None: all
        self.check_crc = check_crc
        self.chunk_bytes = chunk_bytes
        self.bad_records = 0  # crc failures and undecodable events
        self.skipped_bytes = 0  # bytes jumped over to find the next record after a corrupt length
        self._files: dict[Path, _EventFile] = {}
        self._last_step: dict[str, int] = {}
        self._tag_names: dict[bytes, str] = {}
        # Per key prefix: fast-path signature -> key ("" when the signature is not the fast layout).
        self._fast_keys: dict[str, dict[bytes, str]] = {}
        self._unpackers: dict[int, Callable[[bytes], tuple[Any, ...]]] = {}  # per record length
        self._known_length_crcs: dict[int, int] = {}  # record lengths repeat: check each length's crc once
        self._header_unpack = _HEADER.unpack_from

    def describe(self) -> str:
        return str(self.path)

    def files_inspected(self) -> list[str]:
        return [str(p) for p in self._files]

    def axes(self) -> dict[str, Axis]:
        """Keras writes `epoch_loss`, `epoch_accuracy`, ... with step = epoch: those series are on epochs."""
        return {key: Axis.EPOCH for key in self._last_step if key.rsplit("/", 1)[-1].startswith("epoch_")}

    def _refresh_files(self) -> list[_EventFile]:
        root = self.path if self.path.is_dir() else self.path.parent
        notes: list[str] = []
        found = find_event_files(self.path, notes=notes)
        if notes and not found and not self._files:
            raise SourceError(f"no event file found: {notes[0]}")
        for file_path in found:
            if file_path not in self._files and (self.accept is None or self.accept(file_path)):
                relative = file_path.parent.relative_to(root).as_posix() if self.path.is_dir() else "."
                prefix = "" if relative == "." else relative + "/"
                self._files[file_path] = _EventFile(file_path, prefix)
        return sorted(self._files.values(), key=lambda f: _sort_key(f.path))

    def read_new(self, max_points: int | None = None) -> list[MetricPoint]:
        """New points from all files; with max_points, stop after about that many (call again for more)."""
        points: list[MetricPoint] = []
        repeated = self._read_into(points, max_points)
        return newest_per_key_step(points) if repeated else points

    def read_columns(self, max_points: int | None = None) -> dict[str, tuple[Any, Any, Any]]:
        """read_new's points as {key: (steps, wall_times, values)} numpy columns, in arrival order per
        key (runs of plain scalar events are decoded in bulk: no object per point)."""
        sink = ColumnSink()
        repeated = self._read_into(sink, max_points)
        return sink.columns(newest_by_wall_time=repeated)

    def _read_into(self, points: Any, max_points: int | None) -> bool:
        repeated = False
        for event_file in self._refresh_files():
            try:
                size = check_regular(event_file.path).st_size  # a file swapped for a device or /proc link: named
            except SourceError:
                raise
            except OSError:
                continue
            if size < event_file.offset:  # truncated and rewritten: start over
                event_file.offset = 0
            if size == event_file.offset:
                continue
            # Millions of small acyclic objects would trigger collection after collection for nothing.
            collector_was_enabled = gc.isenabled()
            gc.disable()
            try:
                repeated |= self._read_file(event_file, points, max_points)
            finally:
                if collector_was_enabled:
                    gc.enable()
            if max_points is not None and len(points) >= max_points:
                break
        return repeated

    def _read_file(self, event_file: _EventFile, points: Any, max_points: int | None) -> bool:
        repeated = False
        prefix = event_file.key_prefix
        chunk_bytes = self.chunk_bytes
        try:
            handle = os.fdopen(open_regular(event_file.path), "rb")
        except OSError:
            return False
        with handle:
            while max_points is None or len(points) < max_points:
                handle.seek(event_file.offset)
                chunk = handle.read(chunk_bytes)
                if len(chunk) < HEADER_SIZE:
                    break
                if event_file.resyncing:
                    found = find_next_header(chunk, 0)
                    if found is None:
                        jump = len(chunk) - HEADER_SIZE + 1
                        event_file.offset += jump
                        self.skipped_bytes += jump
                        if len(chunk) < chunk_bytes:
                            break
                        continue
                    event_file.offset += found
                    self.skipped_bytes += found
                    event_file.resyncing = False
                    continue
                remaining = None if max_points is None else max_points - len(points)
                framed = self._scan_chunk(chunk, prefix, points, remaining)
                repeated |= framed.repeated
                self.bad_records += framed.bad_records
                event_file.offset += framed.consumed
                if framed.resync:
                    event_file.offset += 1
                    self.skipped_bytes += 1
                    event_file.resyncing = True
                    continue
                if framed.consumed == 0:
                    # Either a half-written tail, or one record larger than the chunk.
                    length = struct.unpack_from("<Q", chunk)[0]
                    needed = HEADER_SIZE + length + 4
                    if len(chunk) < chunk_bytes or needed <= len(chunk):
                        break
                    chunk_bytes = needed
                    continue
                if len(chunk) < chunk_bytes:
                    break
        return repeated

    def _fast_key(self, signature: bytes, prefix: str) -> str:
        """The key for a fast-layout signature (2A n-2 0A n-4 0A n-11 <tag> 15), or "" if it is not one."""
        n = len(signature) + 4
        if n < 12 or n > 129 or signature[:6] != bytes([0x2A, n - 2, 0x0A, n - 4, 0x0A, n - 11]) \
                or signature[-1] != 0x15:
            return ""
        return prefix + signature[6:-1].decode("utf-8", "replace")

    def _scan_chunk(  # noqa: C901 - one fused loop on purpose: per-record Python work is the cost
        self, buf: bytes, prefix: str, points: Any, max_records: int | None, start: int = 0
    ) -> _ChunkResult:
        """Frame, crc-check and decode the complete records of buf[start:], appending their scalars to
        points (a list, or a ColumnSink: then runs of plain scalar records are decoded in bulk).

        One fused loop with an inline fast path for the common simple_value event: the per-record
        Python work is what a reader's speed is made of.
        """
        if isinstance(points, ColumnSink):
            return self._scan_chunk_bulk(buf, prefix, points, max_records)
        result = _ChunkResult()
        append = points.append
        last_step = self._last_step
        tag_names = self._tag_names
        known_length_crcs = self._known_length_crcs
        fast_keys = self._fast_keys.setdefault(prefix, {})
        unpackers = self._unpackers
        make = _make_tuple
        check_crc = self.check_crc
        unpack_header = _HEADER.unpack_from
        unpack_u32 = _UINT32.unpack_from
        crc = crc32c
        end = len(buf)
        pos = start
        records = 0
        limit = -1 if max_records is None else max_records
        while end - pos >= HEADER_SIZE and records != limit:
            length, length_crc = unpack_header(buf, pos)
            if known_length_crcs.get(length) != length_crc:
                if check_crc:
                    raw = crc(buf[pos : pos + 8])
                    if (((raw >> 15) | (raw << 17)) + MASK_DELTA) & 0xFFFFFFFF != length_crc:
                        result.bad_records += 1
                        result.resync = True
                        break
                if length > MAX_RECORD_SIZE:
                    result.bad_records += 1
                    result.resync = True
                    break
                if len(known_length_crcs) < 4096:
                    known_length_crcs[length] = length_crc
            data_end = pos + HEADER_SIZE + length
            if data_end + 4 > end:
                break  # half-written tail: retried on the next read
            data = buf[pos + HEADER_SIZE : data_end]
            record_end = data_end + 4
            if check_crc:
                raw = crc(data)
                if (((raw >> 15) | (raw << 17)) + MASK_DELTA) & 0xFFFFFFFF != unpack_u32(buf, data_end)[0]:
                    result.bad_records += 1
                    pos = record_end
                    continue
            pos = record_end
            records += 1
            # Fast path: wall_time, step, summary { value { tag, simple_value } } and nothing else.
            # Layout: 09 <double> 10 <step varint> 2A n-2 0A n-4 0A n-11 <tag> 15 <float>, n = bytes from 2A.
            at = 0
            if length > 22 and data[0] == 0x09 and data[9] == 0x10:
                step = data[10]
                if step < 0x80:
                    at = 11
                elif data[11] < 0x80:
                    step = (step & 0x7F) | (data[11] << 7)
                    at = 12
                elif data[12] < 0x80:
                    step = (step & 0x7F) | ((data[11] & 0x7F) << 7) | (data[12] << 14)
                    at = 13
            if at:
                # Opening bytes + tag + simple_value marker: one lookup validates the layout and names the key.
                signature = data[at : length - 4]
                key = fast_keys.get(signature)
                if key is None:
                    key = self._fast_key(signature, prefix)
                    if len(fast_keys) < 65536:
                        fast_keys[signature] = key
                if key:
                    previous = last_step.get(key)
                    if previous is None or step > previous:
                        last_step[key] = step
                    else:
                        result.repeated = True
                    unpack_wall_and_value = unpackers.get(length)
                    if unpack_wall_and_value is None:
                        unpack_wall_and_value = unpackers[length] = struct.Struct(f"<xd{length - 13}xf").unpack
                    wall_time, value = unpack_wall_and_value(data)
                    # Same object MetricPoint(...) builds, without the named tuple's Python-level __new__.
                    append(make(MetricPoint, (step, wall_time, key, value)))
                    continue
            try:
                wall_time, step, scalars = decode_event(data, tag_names)
            except (ValueError, IndexError, struct.error):
                result.bad_records += 1
                continue
            for tag_name, value in scalars:
                key = prefix + tag_name if prefix else tag_name
                previous = last_step.get(key)
                if previous is None or step > previous:
                    last_step[key] = step
                else:
                    result.repeated = True
                append(MetricPoint(step, wall_time, key, value))
        result.consumed = pos - start
        return result

    def _scan_chunk_bulk(self, buf: bytes, prefix: str, sink: ColumnSink, max_records: int | None) -> _ChunkResult:
        result = _ChunkResult()
        limit = max_records if max_records is not None else len(buf)
        pos = records = 0
        singles: list[MetricPoint] = []
        while pos < len(buf) and records < limit:
            consumed, count, repeated = bulk_prefix(self, buf, pos, prefix, sink, limit - records)
            pos, records, result.repeated = pos + consumed, records + count, result.repeated or repeated
            if records >= limit:
                break
            # the record that ended the run (and a few more when runs are short) the per-record way
            singles.clear()
            step = self._scan_chunk(buf, prefix, singles, 1 if count >= 64 else 256, start=pos)
            sink.extend_points(singles)
            records += max(1, len(singles))
            result.bad_records += step.bad_records
            result.repeated |= step.repeated
            pos += step.consumed
            if step.resync:
                result.resync = True
                break
            if step.consumed == 0:
                break
        result.consumed = pos
        return result


@dataclass
class _ChunkResult:
    consumed: int = 0
    bad_records: int = 0
    resync: bool = False
    repeated: bool = False
