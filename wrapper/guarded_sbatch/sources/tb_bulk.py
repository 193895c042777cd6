"""The TensorBoard reader's bulk path: runs of plain scalar events decoded with numpy, into columns.

A trainer's event file is mostly one layout, record after record: wall_time, step, one simple_value
(see TensorBoardSource._scan_chunk's fast path). Here such a run of records is framed in one tight
loop, crc-checked with one C call per record, and decoded all at once: no Python object per point.
The first record that is anything else (an unknown length crc, a bad crc, another layout, a half-
written tail) ends the run and goes through the per-record loop, so every result (points, bad
records, repeats) is the one that loop gives.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from guarded_sbatch.core.points import MetricPoint
from guarded_sbatch.sources.tfrecord import crc32c

_MASK_DELTA = 0xA282EAD8
_NO_STEP = -(1 << 62)
_MAX_RUN = 16384


class ColumnSink:
    """Points collected per key as arrays, in arrival order; len() counts the points."""

    def __init__(self) -> None:
        self.parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, key: str, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> None:
        self.parts.setdefault(key, []).append((steps, walls, values))
        self.count += len(steps)

    def extend_points(self, points: list[MetricPoint]) -> None:
        grouped: dict[str, list[MetricPoint]] = {}
        for point in points:
            grouped.setdefault(point.key, []).append(point)
        for key, group in grouped.items():
            steps, walls, _, values = zip(*group)
            self.add(key, np.array(steps, dtype=np.int64), np.array(walls, dtype=np.float64),
                     np.array(values, dtype=np.float64))

    def columns(self, *, newest_by_wall_time: bool) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """{key: (steps, walls, values)}; with newest_by_wall_time one point per step, the one with the
        latest wall time (the later on a tie), as core.points.newest_per_key_step chooses."""
        out = {}
        for key, pieces in self.parts.items():
            steps, walls, values = (np.concatenate([p[i] for p in pieces]) for i in range(3))
            if newest_by_wall_time:
                order = np.lexsort((np.arange(len(steps)), walls, steps))
                sorted_steps = steps[order]
                chosen = np.sort(order[np.append(sorted_steps[1:] != sorted_steps[:-1], True)])
                steps, walls, values = steps[chosen], walls[chosen], values[chosen]
            out[key] = (steps, walls, values)
        return out


def bulk_prefix(source: Any, buf: bytes, pos: int, prefix: str, sink: ColumnSink, limit: int) -> tuple[int, int, bool]:
    """Decode the longest run of plain scalar records from buf[pos:] into sink (at most `limit`);
    returns (bytes consumed, records, repeated)."""
    end = len(buf)
    known = source._known_length_crcs
    unpack = source._header_unpack
    starts: list[int] = []
    lengths: list[int] = []
    p = pos
    limit = min(limit, _MAX_RUN)  # bounded temporaries (index matrices are 8 bytes per byte gathered)
    while end - p >= 12 and len(starts) < limit:
        length, length_crc = unpack(buf, p)
        if known.get(length) != length_crc:
            break  # unknown (or bad) length crc: the per-record loop checks and learns it
        following = p + 16 + length
        if following > end:
            break
        starts.append(p)
        lengths.append(length)
        p = following
    if not starts:
        return 0, 0, False
    data_starts = np.array(starts, dtype=np.int64) + 12
    lens = np.array(lengths, dtype=np.int64)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    n = len(starts)
    if source.check_crc:
        firsts = (data_starts).tolist()
        raw = np.fromiter(map(crc32c, map(buf.__getitem__, map(slice, firsts, (data_starts + lens).tolist()))),
                          dtype=np.uint64, count=n)
        masked = (((raw >> np.uint64(15)) | (raw << np.uint64(17))) + np.uint64(_MASK_DELTA)) & np.uint64(0xFFFFFFFF)
        stored = _gather(u8, data_starts + lens, 4).view("<u4").ravel().astype(np.uint64)
        n = _good_prefix(masked == stored)
    last = end - 1

    def byte(offset: int) -> np.ndarray:
        return u8[np.minimum(data_starts[:n] + offset, last)].astype(np.int64)

    lens = lens[:n]
    b10, b11, b12 = byte(10), byte(11), byte(12)
    at = np.where(b10 < 0x80, 11, np.where(b11 < 0x80, 12, np.where(b12 < 0x80, 13, 0)))
    n = _good_prefix((lens > 22) & (byte(0) == 0x09) & (byte(9) == 0x10) & (at > 0))
    if n == 0:
        return 0, 0, False
    lens, at, b10, b11, b12, data = lens[:n], at[:n], b10[:n], b11[:n], b12[:n], data_starts[:n]
    codes = np.full(n, -1, dtype=np.int64)
    names: list[str] = []
    fast_keys = source._fast_keys.setdefault(prefix, {})
    layout = lens * 16 + at  # records of one layout have their signature at the same place
    for layout_rows in _groups(layout):
        length, offset = int(lens[layout_rows[0]]), int(at[layout_rows[0]])
        width = length - 4 - offset
        signatures = _gather(u8, data[layout_rows] + offset, width)
        for same in _row_groups(signatures):
            rows = layout_rows[same]
            signature_bytes = signatures[same[0]].tobytes()
            key = fast_keys.get(signature_bytes)
            if key is None:
                key = source._fast_key(signature_bytes, prefix)
                if len(fast_keys) < 65536:
                    fast_keys[signature_bytes] = key
            if key:
                if key not in names:
                    names.append(key)
                codes[rows] = names.index(key)
    n = _good_prefix(codes >= 0)
    if n == 0:
        return 0, 0, False
    codes, at, b10, b11, b12, lens, data = codes[:n], at[:n], b10[:n], b11[:n], b12[:n], lens[:n], data[:n]
    steps = np.where(at == 11, b10, np.where(at == 12, (b10 & 0x7F) | (b11 << 7),
                                             (b10 & 0x7F) | ((b11 & 0x7F) << 7) | (b12 << 14)))
    walls = _gather(u8, data + 1, 8).view("<f8").ravel()
    values = _gather(u8, data + lens - 4, 4).view("<f4").ravel().astype(np.float64)
    repeated = False
    last_step = source._last_step
    for code, key in enumerate(names):
        mine = np.flatnonzero(codes == code)
        key_steps = steps[mine]
        previous = last_step.get(key, _NO_STEP)
        running = np.maximum.accumulate(key_steps)
        before = np.concatenate(([previous], np.maximum(running[:-1], previous)))
        repeated |= bool(np.any(key_steps <= before))
        last_step[key] = int(max(previous, int(running[-1])))
        sink.add(key, key_steps, walls[mine], values[mine])
    consumed = int(data[-1] + lens[-1] + 4) - pos
    return consumed, n, repeated


def _groups(labels: np.ndarray) -> list[np.ndarray]:
    """Indices of each distinct label (a file has a handful of layouts: peeled off one by one; many
    of them are sorted out at once)."""
    return _peel(lambda left: labels[left] == labels[left[0]], labels, len(labels))


def _row_groups(rows: np.ndarray) -> list[np.ndarray]:
    """Indices of each distinct row of a byte matrix (one per tag of a layout)."""
    return _peel(lambda left: np.all(rows[left] == rows[left[0]], axis=1),
                 np.ascontiguousarray(rows).view(f"V{rows.shape[1]}").ravel(), len(rows))


def _peel(same_as_first: Any, labels: np.ndarray, count: int) -> list[np.ndarray]:
    groups: list[np.ndarray] = []
    left = np.arange(count)
    while len(left) and len(groups) < 32:
        same = same_as_first(left)
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


def _good_prefix(good: np.ndarray) -> int:
    bad = np.flatnonzero(~good)
    return int(bad[0]) if len(bad) else len(good)
