"""One decoder for a chunk of a TensorBoard event file: TFRecord framing, CRC checks and Event fields, into columns.

A trainer logs the same tags step after step, so its records repeat one pattern of sizes. Records are framed one by
one until the last sizes repeat; the rest of the chunk is then checked against that pattern at once, as a numpy view
of rows of one pattern whose headers must equal the first row's (records of one length have the same 12 header
bytes, so a known header needs no crc). The first row that differs ends the run, and framing goes on one by one.
Data crcs are one C call per record. Plain scalar events (wall_time, step, one simple_value: what torch and
tensorboardX write) are decoded as columns; any other record through tb_event.decode_event. A record cut short at
the end of the chunk is left for the next read; a corrupt length stops the chunk for the caller to resync.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from guarded_sbatch.core.points import MetricPoint
from guarded_sbatch.sources.tb_event import decode_event
from guarded_sbatch.sources.tfrecord import (
    FOOTER_SIZE,
    HEADER_SIZE,
    MASK_DELTA,
    MAX_RECORD_SIZE,
    crc32c,
    mask,
    masked_crc32c,
)

_NO_STEP = -(1 << 62)
_MAX_PERIOD = 8  # tags logged together at each step
_KNOWN_LENGTHS = 4096
_FAST_KEYS = 65536
_CRC_GROUP = 32  # blocks of a run whose crcs are checked together
_Columns = tuple[np.ndarray, np.ndarray, np.ndarray]


class ColumnSink:
    """Points collected per key as arrays (steps, wall times, values, arrival order); len() counts the points."""

    def __init__(self) -> None:
        self.parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, key: str, order: np.ndarray, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> None:
        self.parts.setdefault(key, []).append((order, steps, walls, values))
        self.count += len(steps)

    def _joined(self) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        out = {}
        for key, pieces in self.parts.items():
            order, steps, walls, values = (np.concatenate([p[i] for p in pieces]) for i in range(4))
            if len(pieces) > 1 and np.any(order[1:] < order[:-1]):  # a key decoded both ways in one chunk
                by_arrival = np.argsort(order, kind="stable")
                order, steps, walls, values = order[by_arrival], steps[by_arrival], walls[by_arrival], values[by_arrival]
            out[key] = (order, steps, walls, values)
        return out

    def columns(self, *, newest_by_wall_time: bool) -> dict[str, _Columns]:
        """{key: (steps, walls, values)} in arrival order; with newest_by_wall_time one point per step, the one with
        the latest wall time (the later on a tie), as core.points.newest_per_key_step chooses."""
        out = {}
        for key, (_, steps, walls, values) in self._joined().items():
            if newest_by_wall_time:
                order = np.lexsort((np.arange(len(steps)), walls, steps))
                sorted_steps = steps[order]
                chosen = np.sort(order[np.append(sorted_steps[1:] != sorted_steps[:-1], True)])
                steps, walls, values = steps[chosen], walls[chosen], values[chosen]
            out[key] = (steps, walls, values)
        return out

    def points(self) -> list[MetricPoint]:
        """Every point in arrival order."""
        joined = self._joined()
        if not joined:
            return []
        names = list(joined)
        arrival = np.argsort(np.concatenate([columns[0] for columns in joined.values()]), kind="stable")
        which = np.concatenate([np.full(len(columns[0]), i) for i, columns in enumerate(joined.values())])[arrival]
        steps, walls, values = (np.concatenate([columns[i] for columns in joined.values()])[arrival].tolist()
                                for i in (1, 2, 3))
        make = tuple.__new__  # the object MetricPoint(...) builds, without the named tuple's Python-level __new__
        return [make(MetricPoint, (s, w, names[k], v)) for s, w, k, v in zip(steps, walls, which.tolist(), values)]


@dataclass
class ChunkResult:
    consumed: int = 0
    bad_records: int = 0
    resync: bool = False  # a corrupt length: the caller looks for the next valid header
    repeated: bool = False  # a key's step did not grow: the caller keeps the newest point per step


class RecordDecoder:
    """Frames and decodes chunks of the event files of one source; its caches (headers per length, tag names, last
    step per key) live as long as the source."""

    def __init__(self, *, check_crc: bool = True) -> None:
        self.check_crc = check_crc
        self.last_step: dict[str, int] = {}
        self._headers: dict[int, bytes] = {}  # record length -> its 12 header bytes, crc checked once
        self._fast_keys: dict[tuple[str, bytes], str] = {}  # (prefix, layout signature) -> key ("": not the layout)
        self._tag_names: dict[bytes, str] = {}
        self._ordinal = 0

    def decode(self, buf: bytes, prefix: str, sink: ColumnSink, max_records: int | None = None) -> ChunkResult:
        """The complete records of buf (at most max_records), their scalars added to sink with `prefix` on the tags."""
        result = ChunkResult()
        u8 = np.frombuffer(buf, dtype=np.uint8)
        pieces = self._frame(buf, u8, max_records, result)
        starts = np.concatenate([piece.starts for piece in pieces])
        lengths = np.concatenate([piece.lengths for piece in pieces])
        if not len(starts):
            return result
        if self.check_crc:
            good = np.concatenate([self._crc_ok(buf, u8, piece) for piece in pieces])
            result.bad_records += int(len(good) - np.count_nonzero(good))
            starts, lengths = starts[good], lengths[good]
        order = np.arange(self._ordinal, self._ordinal + len(starts), dtype=np.int64)
        self._ordinal += len(starts)
        slow = self._decode_fast(u8, starts, lengths, order, prefix, sink, result)
        for index in slow.tolist():
            self._decode_slow(buf, int(starts[index]), int(lengths[index]), int(order[index]), prefix, sink, result)
        return result

    def _frame(self, buf: bytes, u8: np.ndarray, max_records: int | None, result: ChunkResult) -> list[_Framed]:
        """The complete records from the start of buf, in order; result.consumed set."""
        end = len(buf)
        limit = end if max_records is None else max_records
        pieces: list[_Framed] = []
        singles: list[int] = []
        single_lengths: list[int] = []
        sizes: list[int] = []  # record sizes framed one by one since the last run: a repeating tail starts a run
        pos = count = 0
        while count < limit and end - pos >= HEADER_SIZE:
            length = self._length_at(buf, pos, result)
            if length is None:
                break
            if pos + HEADER_SIZE + length + FOOTER_SIZE > end:
                break  # half-written tail: retried on the next read
            singles.append(pos + HEADER_SIZE)
            single_lengths.append(length)
            pos += HEADER_SIZE + length + FOOTER_SIZE
            count += 1
            sizes.append(length)
            period = _period(sizes)
            if period:
                run = self._run(u8, pos, sizes[-period:], limit - count)
                sizes.clear()
                if run is not None:
                    pieces.append(_Framed.of(singles, single_lengths))
                    pieces.append(run)
                    singles, single_lengths = [], []
                    pos += run.blocks * run.block
                    count += len(run.starts)
        pieces.append(_Framed.of(singles, single_lengths))
        result.consumed = pos
        return pieces

    def _crc_ok(self, buf: bytes, u8: np.ndarray, piece: _Framed) -> np.ndarray:
        """Whether each record's data matches its crc. A run is checked by groups of blocks: crc32c is affine in the
        data for one length, so the xor of a group's crcs is the crc of the xor of its data (the crc of zeros added
        when the group is even); only a group that fails is checked record by record."""
        if piece.blocks == 0:
            return _crc_each(buf, u8, piece.starts, piece.lengths)
        rows = u8[piece.pos : piece.pos + piece.blocks * piece.block].reshape(piece.blocks, piece.block)
        firsts = np.arange(0, piece.blocks, _CRC_GROUP)
        evens = np.diff(np.append(firsts, piece.blocks)) % 2 == 0
        xored = np.bitwise_xor.reduceat(rows, firsts, axis=0)
        good = np.ones((piece.blocks, len(piece.pattern)), dtype=bool)
        for slot, (offset, length) in enumerate(zip(piece.offsets.tolist(), piece.pattern)):
            data = offset + HEADER_SIZE
            stored = _unmask(np.ascontiguousarray(rows[:, data + length : data + length + FOOTER_SIZE]).view("<u4").ravel())
            expected = np.bitwise_xor.reduceat(stored, firsts)
            group_data = xored[:, data : data + length]
            crcs = np.fromiter((crc32c(row.tobytes()) for row in group_data), dtype=np.uint32, count=len(firsts))
            crcs ^= np.where(evens, np.uint32(crc32c(bytes(length))), np.uint32(0))
            for group in np.flatnonzero(crcs != expected).tolist():
                blocks = np.arange(firsts[group], min(firsts[group] + _CRC_GROUP, piece.blocks))
                good[blocks, slot] = _crc_each(buf, u8, piece.pos + blocks * piece.block + data,
                                               np.full(len(blocks), length, dtype=np.int64))
        return good.ravel()

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

    def _run(self, u8: np.ndarray, pos: int, pattern: list[int], records_left: int) -> _Framed | None:
        """The records from pos on that repeat `pattern` (record lengths) whole, or None."""
        period = len(pattern)
        sizes = np.array(pattern, dtype=np.int64) + HEADER_SIZE + FOOTER_SIZE
        block = int(sizes.sum())
        blocks = min((len(u8) - pos) // block, records_left // period)
        headers = [self._headers.get(length) for length in pattern]
        if blocks <= 0 or any(h is None for h in headers):
            return None
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        columns = (offsets[:, None] + np.arange(HEADER_SIZE)).ravel()
        rows = u8[pos : pos + blocks * block].reshape(blocks, block)
        template = np.frombuffer(b"".join(h for h in headers if h is not None), dtype=np.uint8)
        same = (rows[:, columns] == template).all(axis=1)
        whole = int(np.argmin(same)) if not same.all() else blocks
        if whole == 0:
            return None
        starts = (np.arange(whole, dtype=np.int64)[:, None] * block + pos + offsets + HEADER_SIZE).ravel()
        return _Framed(starts, np.tile(np.array(pattern, dtype=np.int64), whole), pos, block, whole, pattern, offsets)

    def _decode_fast(self, u8: np.ndarray, starts: np.ndarray, lengths: np.ndarray, order: np.ndarray, prefix: str,
                     sink: ColumnSink, result: ChunkResult) -> np.ndarray:
        """Decode the plain scalar events among the records into sink; the indices of the others.

        Layout: 09 <wall double> 10 <step varint, 1-3 bytes> 2A n-2 0A n-4 0A n-11 <tag> 15 <float>, n from 2A on.
        """
        last = len(u8) - 1

        def byte(offset: int) -> np.ndarray:
            return u8[np.minimum(starts + offset, last)].astype(np.int64)

        b10, b11, b12 = byte(10), byte(11), byte(12)
        at = np.where(b10 < 0x80, 11, np.where(b11 < 0x80, 12, np.where(b12 < 0x80, 13, 0)))
        candidate = (lengths > 22) & (byte(0) == 0x09) & (byte(9) == 0x10) & (at > 0)
        codes = np.full(len(starts), -1, dtype=np.int64)
        names: list[str] = []
        for rows in _groups(np.where(candidate, lengths * 16 + at, -1)):
            if not candidate[rows[0]]:
                continue
            offset = int(at[rows[0]])
            signatures = _gather(u8, starts[rows] + offset, int(lengths[rows[0]]) - 4 - offset)
            for same in _row_groups(signatures):
                key = self._fast_key(signatures[same[0]].tobytes(), prefix)
                if key:
                    if key not in names:
                        names.append(key)
                    codes[rows[same]] = names.index(key)
        fast = np.flatnonzero(codes >= 0)
        steps = np.where(at == 11, b10, np.where(at == 12, (b10 & 0x7F) | (b11 << 7),
                                                 (b10 & 0x7F) | ((b11 & 0x7F) << 7) | (b12 << 14)))
        walls = _gather(u8, starts[fast] + 1, 8).view("<f8").ravel()
        values = _gather(u8, starts[fast] + lengths[fast] - 4, 4).view("<f4").ravel().astype(np.float64)
        for code, key in enumerate(names):
            mine = np.flatnonzero(codes[fast] == code)
            key_steps = steps[fast[mine]]
            previous = self.last_step.get(key, _NO_STEP)
            running = np.maximum.accumulate(key_steps)
            before = np.concatenate(([previous], np.maximum(running[:-1], previous)))
            result.repeated |= bool(np.any(key_steps <= before))
            self.last_step[key] = int(max(previous, int(running[-1])))
            sink.add(key, order[fast[mine]], key_steps, walls[mine], values[mine])
        return np.flatnonzero(codes < 0)

    def _fast_key(self, signature: bytes, prefix: str) -> str:
        """The key of a plain scalar layout's signature (2A n-2 0A n-4 0A n-11 <tag> 15), or "" if it is not one."""
        key = self._fast_keys.get((prefix, signature))
        if key is None:
            n = len(signature) + 4
            plain = 12 <= n <= 129 and signature[:6] == bytes([0x2A, n - 2, 0x0A, n - 4, 0x0A, n - 11]) \
                and signature[-1] == 0x15
            key = prefix + signature[6:-1].decode("utf-8", "replace") if plain else ""
            if len(self._fast_keys) < _FAST_KEYS:
                self._fast_keys[(prefix, signature)] = key
        return key

    def _decode_slow(self, buf: bytes, start: int, length: int, ordinal: int, prefix: str, sink: ColumnSink,
                     result: ChunkResult) -> None:
        try:
            wall_time, step, scalars = decode_event(buf[start : start + length], self._tag_names)
        except (ValueError, IndexError, struct.error):
            result.bad_records += 1
            return
        for tag_name, value in scalars:
            key = prefix + tag_name
            previous = self.last_step.get(key)
            if previous is None or step > previous:
                self.last_step[key] = step
            else:
                result.repeated = True
            sink.add(key, np.array([ordinal]), np.array([step], dtype=np.int64), np.array([wall_time]),
                     np.array([value], dtype=np.float64))


@dataclass
class _Framed:
    """Records framed one by one (blocks == 0), or a run of `blocks` repeats of `pattern` from `pos` on."""

    starts: np.ndarray  # data offsets
    lengths: np.ndarray
    pos: int = 0
    block: int = 0  # bytes of one repeat of the pattern
    blocks: int = 0
    pattern: list[int] = field(default_factory=list)  # the record lengths of one repeat
    offsets: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # each record's offset in a repeat

    @classmethod
    def of(cls, starts: list[int], lengths: list[int]) -> _Framed:
        return cls(np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64))


def _crc_each(buf: bytes, u8: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    stored = _gather(u8, starts + lengths, FOOTER_SIZE).view("<u4").ravel()
    raw = np.fromiter(map(crc32c, map(buf.__getitem__, map(slice, starts.tolist(), (starts + lengths).tolist()))),
                      dtype=np.uint32, count=len(starts))
    return np.asarray(mask(raw) == stored)


def _unmask(stored: np.ndarray) -> np.ndarray:
    """The crc a masked crc was made from (the inverse of tfrecord.mask)."""
    crc = stored - np.uint32(MASK_DELTA)
    return (crc << np.uint32(15)) | (crc >> np.uint32(17))


def _period(sizes: list[int]) -> int:
    """The shortest p (at most _MAX_PERIOD) whose last two stretches of p sizes are equal; 0 when none is."""
    for p in range(1, min(_MAX_PERIOD, len(sizes) // 2) + 1):
        if sizes[-p:] == sizes[-2 * p : -p]:
            return p
    return 0


def _groups(labels: np.ndarray) -> list[np.ndarray]:
    """Indices of each distinct label (a file has a handful of layouts: peeled off one by one, many at once)."""
    return _peel(lambda left: labels[left] == labels[left[0]], labels, len(labels))


def _row_groups(rows: np.ndarray) -> list[np.ndarray]:
    """Indices of each distinct row of a byte matrix (one per tag of a layout)."""
    return _peel(lambda left: np.all(rows[left] == rows[left[0]], axis=1),
                 np.ascontiguousarray(rows).view(f"V{rows.shape[1]}").ravel(), len(rows))


def _peel(same_as_first: object, labels: np.ndarray, count: int) -> list[np.ndarray]:
    groups: list[np.ndarray] = []
    left = np.arange(count)
    while len(left) and len(groups) < 32:
        same = same_as_first(left)  # type: ignore[operator]
        groups.append(left[same])
        left = left[~same]
    if len(left):
        _, inverse = np.unique(labels[left], return_inverse=True)
        order = np.argsort(inverse.ravel(), kind="stable")
        bounds = np.flatnonzero(np.diff(inverse.ravel()[order])) + 1
        groups.extend(left[part] for part in np.split(order, bounds))
    return groups


def _gather(u8: np.ndarray, offsets: np.ndarray, width: int) -> np.ndarray:
    return u8[offsets[:, None] + np.arange(width)]
