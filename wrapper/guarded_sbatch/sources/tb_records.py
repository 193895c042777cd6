"""The one decoder of a chunk of a TensorBoard event file: TFRecord framing, CRC checks and Event fields, into columns.

Framing. A trainer logs the same tags step after step, so its records repeat one pattern of lengths. Records are
framed one by one until the last lengths repeat (each repeating period tried, shortest first); the rest of the
chunk is then checked against that pattern in growing steps (each record's 12 header bytes equal to the first
ones of its length, whose crc was checked), and the first block that differs ends the run (fewer than _MIN_RUN
blocks make none). A record cut short at the end of the chunk is left for the next read (a torn tail); a corrupt
length stops the chunk for the caller to resync.

Decoding. Records of one length (a slot of a run, or the loose ones of that length) are rows at a fixed stride.
The first row is decoded by tb_event.read_event, which also says where its wall time, step and one scalar lie;
every row whose other bytes are equal to the first one's (and whose step varint has the same shape) decodes the
same way, so those fields are read as numpy columns of the rows, no object per record. Rows that differ (another
tag of the same length, a flipped byte) are taken in turn the same way, and records of no fixed layout
(histograms, several values, integer tensors) one by one.

CRC. crc32c is affine in the data for one length: the xor of a group's crcs is the crc of the xor of its data (with
the crc of zeros added for an even group). Rows matched to one layout differ only in their varying fields, so a
group's xor is the first row with those fields xored: one C crc call per group of _CRC_GROUP rows; a group that
fails is checked row by row, and a bad row is skipped and counted.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from guarded_sbatch.sources.tb_columns import ColumnSink
from guarded_sbatch.sources.tb_event import EventFields, read_event
from guarded_sbatch.sources.tfrecord import FOOTER_SIZE, HEADER_SIZE, MAX_RECORD_SIZE, crc32c, masked_crc32c, unmask

_NO_STEP = -(1 << 62)
_MAX_PERIOD = 8  # tags logged together at each step
_KNOWN_LENGTHS = 4096
_MAX_LAYOUTS = 16  # layouts matched as columns per set of rows; past them, rows are decoded one by one
_MIN_ROWS = 8  # fewer rows than this are decoded one by one
_MIN_RUN = 8  # blocks of a pattern that make a run
_CRC_GROUP = 128  # rows whose crcs are checked together
_Field = tuple[str, str, int]  # name, numpy format, offset in the record


@dataclass
class ChunkResult:
    consumed: int = 0
    bad_records: int = 0
    resync: bool = False  # a corrupt length: the caller looks for the next valid header
    repeated: bool = False  # a key's step did not grow: the caller keeps the newest point per step


@dataclass
class _Rows:
    """Records of `length` data bytes, each followed by its crc, `stride` bytes apart from `offset` in buf; the
    arrival ordinal of each."""

    buf: bytes
    offset: int
    stride: int
    length: int
    ordinals: np.ndarray

    def record(self, row: int) -> bytes:
        start = self.offset + row * self.stride
        return self.buf[start : start + self.length]

    def crc_ok(self, row: int) -> bool:
        end = self.offset + row * self.stride + self.length
        return masked_crc32c(self.record(row)) == int.from_bytes(self.buf[end : end + FOOTER_SIZE], "little")

    def view(self, fields: list[_Field]) -> np.ndarray:
        """A structured numpy view of the rows with these fields (no copy)."""
        dtype = np.dtype({"names": [f[0] for f in fields], "formats": [f[1] for f in fields],
                          "offsets": [f[2] for f in fields], "itemsize": self.length + FOOTER_SIZE})
        return np.ndarray((len(self.ordinals),), dtype=dtype, buffer=self.buf, offset=self.offset,
                          strides=(self.stride,))


class _Found:
    """The points of one stretch of records (a run, or records framed one by one) per key: columns of layouts and
    records decoded one by one, given back per key in arrival order."""

    def __init__(self) -> None:
        self.parts: dict[str, list[tuple[np.ndarray, ...]]] = {}
        self.keys: dict[str, int] = {}  # key -> its number in self.points
        # the points of records decoded one by one, flat (one list per column, not per key: a run may log
        # 100 000 distinct tags once each): key number, arrival ordinal, step, wall time, value
        self.points: tuple[list[int], list[int], list[int], list[float], list[float]] = ([], [], [], [], [])

    def add(self, key: str, *columns: np.ndarray) -> None:
        self.parts.setdefault(key, []).append(columns)

    def add_event(self, event: EventFields, ordinal: int, prefix: str) -> None:
        which, order, steps, walls, values = self.points
        for tag, value in event.scalars:
            which.append(self.keys.setdefault(prefix + tag, len(self.keys)))
            order.append(ordinal)
            steps.append(event.step)
            walls.append(event.wall_time)
            values.append(value)

    def columns(self) -> list[tuple[str, tuple[np.ndarray, ...]]]:
        """[(key, (order, steps, walls, values))], each key's points in arrival order."""
        self._points_to_parts()
        out = []
        for key, parts in self.parts.items():
            columns = parts[0] if len(parts) == 1 else tuple(np.concatenate(c) for c in zip(*parts))
            if len(columns[0]) > 1 and np.any(columns[0][1:] < columns[0][:-1]):  # one length after another
                by_arrival = np.argsort(columns[0], kind="stable")
                columns = tuple(column[by_arrival] for column in columns)
            out.append((key, columns))
        return out

    def _points_to_parts(self) -> None:
        """The points decoded one by one as one part per key (the lists freed before the parts are made)."""
        if not self.keys:
            return
        which = np.array(self.points[0], dtype=np.int64)
        by_key = np.argsort(which, kind="stable")
        columns = [np.array(column, dtype=dtype)[by_key]
                   for column, dtype in zip(self.points[1:], (np.int64, np.int64, np.float64, np.float64))]
        self.points = ([], [], [], [], [])
        which = which[by_key]
        starts = np.flatnonzero(np.diff(which, prepend=-1)).tolist()
        names = list(self.keys)
        for start, end in zip(starts, [*starts[1:], len(which)]):
            self.add(names[int(which[start])], *(column[start:end] for column in columns))


class RecordDecoder:
    """Frames and decodes chunks of the event files of one source; its caches (headers per length, tag names, last
    step per key) live as long as the source."""

    def __init__(self, *, check_crc: bool = True) -> None:
        self.check_crc = check_crc
        self.last_step: dict[str, int] = {}
        self._headers: dict[int, bytes] = {}  # record length -> its 12 header bytes, crc checked once
        self._tag_names: dict[bytes, str] = {}
        self._ordinal = 0

    def decode(self, buf: bytes, prefix: str, sink: ColumnSink, max_records: int | None = None) -> ChunkResult:
        """The complete records of buf (at most max_records), their scalars added to sink with `prefix` on the tags."""
        result = ChunkResult()
        for stretch in self._frame(buf, max_records, result):
            found = _Found()
            for rows in stretch:
                self._decode_rows(rows, prefix, found, result)
            for key, columns in found.columns():
                self._add(sink, key, columns, result)
        return result

    # Framing

    def _frame(self, buf: bytes, max_records: int | None, result: ChunkResult) -> list[list[_Rows]]:
        """The complete records from the start of buf as stretches (a run, or records framed one by one) of sets of
        rows, in arrival order; result.consumed set."""
        end = len(buf)
        limit = end if max_records is None else max_records
        out: list[list[_Rows]] = []
        loose: list[tuple[int, int]] = []  # (data offset, length) of records framed one by one
        sizes: list[int] = []  # lengths framed one by one since the last run: a repeating tail starts a run
        pos = count = 0
        while count < limit and end - pos >= HEADER_SIZE:
            length = self._length_at(buf, pos, result)
            if length is None:
                break
            if pos + HEADER_SIZE + length + FOOTER_SIZE > end:
                break  # a torn tail: retried on the next read
            loose.append((pos + HEADER_SIZE, length))
            pos += HEADER_SIZE + length + FOOTER_SIZE
            count += 1
            sizes.append(length)
            del sizes[: -2 * _MAX_PERIOD]
            blocks, period = next(((blocks, p) for p in _periods(sizes)
                                   if (blocks := self._run(buf, pos, sizes[-p:], (limit - count) // p))), (0, 0))
            if blocks:
                pattern = sizes[-period:]
                sizes.clear()
                out.append(_loose_rows(buf, loose, self._ordinal + count - len(loose)))
                loose = []
                block = sum(pattern) + period * (HEADER_SIZE + FOOTER_SIZE)
                offset = pos + HEADER_SIZE
                run = []
                for slot, slot_length in enumerate(pattern):
                    ordinals = np.arange(blocks, dtype=np.int64) * period + (self._ordinal + count + slot)
                    run.append(_Rows(buf, offset, block, slot_length, ordinals))
                    offset += slot_length + HEADER_SIZE + FOOTER_SIZE
                out.append(run)
                pos += blocks * block
                count += blocks * period
        out.append(_loose_rows(buf, loose, self._ordinal + count - len(loose)))
        self._ordinal += count
        result.consumed = pos
        return out

    def _length_at(self, buf: bytes, pos: int, result: ChunkResult) -> int | None:
        header = buf[pos : pos + HEADER_SIZE]
        length = int.from_bytes(header[:8], "little")
        if self._headers.get(length) == header:
            return length
        if (self.check_crc and masked_crc32c(header[:8]) != int.from_bytes(header[8:], "little")) \
                or length > MAX_RECORD_SIZE:
            result.bad_records += 1
            result.resync = True
            return None
        if len(self._headers) < _KNOWN_LENGTHS:
            self._headers[length] = header
        return length

    def _run(self, buf: bytes, pos: int, pattern: list[int], most: int) -> int:
        """How many blocks from pos on (at most `most`) repeat `pattern` (record lengths) whole, known headers; 0
        for fewer than _MIN_RUN blocks (those records are framed one by one, and decoded with their length's)."""
        block = sum(pattern) + len(pattern) * (HEADER_SIZE + FOOTER_SIZE)
        blocks = min((len(buf) - pos) // block, most)
        headers = [self._headers.get(length) for length in pattern]
        if blocks < _MIN_RUN or None in headers or buf[pos : pos + HEADER_SIZE] != headers[0]:
            return 0
        fields: list[_Field] = []
        offset = 0
        for slot, length in enumerate(pattern):
            fields += [(f"n{slot}", "<u8", offset), (f"c{slot}", "<u4", offset + 8)]
            offset += length + HEADER_SIZE + FOOTER_SIZE
        view = _Rows(buf, pos, block, block - FOOTER_SIZE, np.empty(blocks)).view(fields)
        done, step = 0, _MIN_RUN
        while done < blocks:  # in growing steps: a pattern that soon stops costs no pass over the chunk
            part = view[done : done + step]
            same = np.ones(len(part), dtype=bool)
            for slot, header in enumerate(headers):
                assert header is not None
                same &= part[f"n{slot}"] == int.from_bytes(header[:8], "little")
                same &= part[f"c{slot}"] == int.from_bytes(header[8:], "little")
            if not same.all():
                done += int(np.argmin(same))
                break
            done, step = done + len(part), step * 8
        return done if done >= _MIN_RUN else 0

    # Decoding

    def _decode_rows(self, rows: _Rows, prefix: str, found: _Found, result: ChunkResult) -> None:
        """Decode every row: by layouts as columns, the rest one by one (see the module's doc)."""
        count = len(rows.ordinals)
        unassigned = np.ones(count, dtype=bool)
        todo: Sequence[int] = range(count)
        at = layouts = 0
        while at < len(todo):
            row = todo[at]
            at += 1
            event = self._read_one(rows, row, result)
            if event is not None and event.fixed and layouts < _MAX_LAYOUTS and len(todo) - at + 1 >= _MIN_ROWS:
                layouts += 1
                self._decode_layout(rows, row, event, unassigned, prefix, found, result)  # the row's own too
                todo, at = (np.flatnonzero(unassigned[row + 1 :]) + row + 1).tolist(), 0
                continue
            unassigned[row] = False
            if event is not None:
                found.add_event(event, int(rows.ordinals[row]), prefix)

    def _read_one(self, rows: _Rows, row: int, result: ChunkResult) -> EventFields | None:
        if self.check_crc and not rows.crc_ok(row):
            result.bad_records += 1
            return None
        try:
            return read_event(rows.record(row), self._tag_names)
        except (ValueError, IndexError, struct.error):
            result.bad_records += 1
            return None

    def _decode_layout(self, rows: _Rows, row: int, event: EventFields, unassigned: np.ndarray, prefix: str,
                       found: _Found, result: ChunkResult) -> None:
        """Decode as columns the unassigned rows laid out as `row` (decoded as event): equal bytes but for the
        wall time, the step's varint digits and the value."""
        first = rows.record(row)
        varying = _varying_fields(event)
        fixed = _fixed_fields(varying, rows.length)
        view = rows.view([*varying, ("crc", "<u4", rows.length), *fixed])
        match = unassigned.copy()
        for name, fmt, offset in fixed:
            match &= view[name] == int.from_bytes(first[offset : offset + np.dtype(fmt).itemsize], "little")
        for name, _, offset in varying:
            if name[0] == "s":  # a step digit: the same varint shape (continuation bits) as the first row's
                match &= (view[name] & 0x80) == (first[offset] & 0x80)
        chosen = np.flatnonzero(match)
        unassigned[chosen] = False
        whole = len(chosen) == len(match)
        columns = {name: view[name].copy() if whole else view[name][chosen] for name, _, _ in [*varying, ("crc", "", 0)]}
        if self.check_crc:
            good = self._crcs_ok(rows, chosen, columns, first, varying)
            if not good.all():
                result.bad_records += int(len(good) - np.count_nonzero(good))
                chosen = chosen[good]
                columns = {name: column[good] for name, column in columns.items()}
        if not len(chosen):
            return
        steps = np.full(len(chosen), event.step, dtype=np.int64)
        if event.step_width:
            steps[:] = 0
            for digit in range(event.step_width):
                steps |= (columns[f"s{digit}"].astype(np.int64) & 0x7F) << (7 * digit)
        walls = columns["wall"].view("<f8") if event.wall_at >= 0 else np.full(len(chosen), event.wall_time)
        values = columns["value"].view("<f4" if event.value_width == 4 else "<f8").astype(np.float64)
        found.add(prefix + event.scalars[0][0], rows.ordinals[chosen], steps, walls, values)

    def _crcs_ok(self, rows: _Rows, chosen: np.ndarray, columns: dict[str, np.ndarray], first: bytes,
                 varying: list[_Field]) -> np.ndarray:
        """Whether each chosen row's data matches its crc, by groups (see the module's doc)."""
        count, length = len(chosen), rows.length
        if count < _CRC_GROUP:
            return np.fromiter(map(rows.crc_ok, chosen.tolist()), dtype=bool, count=count)
        firsts = np.arange(0, count, _CRC_GROUP)
        sizes = np.diff(firsts, append=count)
        grid = np.zeros((len(firsts), length), dtype=np.uint8)
        grid[sizes % 2 == 1] = np.frombuffer(first, dtype=np.uint8)
        for name, fmt, offset in varying:
            width = np.dtype(fmt).itemsize
            grid[:, offset : offset + width] = np.bitwise_xor.reduceat(columns[name], firsts).view(np.uint8) \
                .reshape(len(firsts), width)
        blob = grid.tobytes()
        crcs = np.fromiter(map(crc32c, map(blob.__getitem__, map(slice, range(0, len(blob), length),
                                                                 range(length, len(blob) + 1, length)))),
                           dtype=np.uint32, count=len(firsts))
        crcs ^= np.where(sizes % 2 == 0, np.uint32(crc32c(bytes(length))), np.uint32(0))
        good = np.ones(count, dtype=bool)
        for group in np.flatnonzero(crcs != np.bitwise_xor.reduceat(unmask(columns["crc"]), firsts)).tolist():
            part = slice(int(firsts[group]), int(firsts[group] + sizes[group]))
            good[part] = list(map(rows.crc_ok, chosen[part].tolist()))
        return good

    def _add(self, sink: ColumnSink, key: str, columns: tuple[np.ndarray, ...], result: ChunkResult) -> None:
        """Points of one key (order, steps, walls, values) in arrival order; result.repeated when a step did not
        grow."""
        order, steps, walls, values = columns
        previous = self.last_step.get(key, _NO_STEP)
        newest = int(steps[0]) if len(steps) == 1 else int(steps.max())
        if steps[0] <= previous or (len(steps) > 1 and np.any(steps[1:] <= steps[:-1])):
            result.repeated = True
        self.last_step[key] = max(previous, newest)
        sink.add(key, order, steps, walls, values)


def _varying_fields(event: EventFields) -> list[_Field]:
    """The fields of a fixed layout that differ from record to record: wall time, the step's digits, the value."""
    fields: list[_Field] = [("value", "<u4" if event.value_width == 4 else "<u8", event.value_at)]
    if event.wall_at >= 0:
        fields.append(("wall", "<u8", event.wall_at))
    fields += [(f"s{digit}", "u1", event.step_at + digit) for digit in range(event.step_width)]
    return fields


def _fixed_fields(varying: list[_Field], length: int) -> list[_Field]:
    """Integer windows covering every other byte of the record (overlapping within a stretch, never outside it)."""
    spans = sorted((offset, offset + np.dtype(fmt).itemsize) for _, fmt, offset in varying)
    fields: list[_Field] = []
    start = 0
    for begin, end in [*spans, (length, length)]:
        width = begin - start
        size = next((size for size in (8, 4, 2, 1) if size <= width), 0)
        if size:
            offsets = sorted({*range(start, begin - size + 1, size), begin - size})
            fields += [(f"f{offset}", f"<u{size}", offset) for offset in offsets]
        start = end
    return fields


def _loose_rows(buf: bytes, loose: list[tuple[int, int]], first_ordinal: int) -> list[_Rows]:
    """Records framed one by one as sets of rows: those of one length gathered into one buffer."""
    by_length: dict[int, list[int]] = {}
    for index, (_, length) in enumerate(loose):
        by_length.setdefault(length, []).append(index)
    out = []
    for length, indices in by_length.items():
        ordinals = np.array(indices, dtype=np.int64) + first_ordinal
        stride = length + FOOTER_SIZE
        if len(indices) == 1:
            out.append(_Rows(buf, loose[indices[0]][0], stride, length, ordinals))
            continue
        gathered = b"".join(buf[start : start + stride] for start, _ in map(loose.__getitem__, indices))
        out.append(_Rows(gathered, 0, stride, length, ordinals))
    return out


def _periods(sizes: list[int]) -> list[int]:
    """Each p (at most _MAX_PERIOD), shortest first, whose last two stretches of p sizes are equal (tags of one
    length side by side repeat with p = 1 as well as with the whole step's pattern)."""
    last = sizes[-1]
    return [p for p in range(1, min(_MAX_PERIOD, len(sizes) // 2) + 1)
            if sizes[-1 - p] == last and sizes[-p:] == sizes[-2 * p : -p]]
