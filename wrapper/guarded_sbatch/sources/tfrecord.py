"""TFRecord framing (TensorBoard event files) with masked CRC-32C checks.

Record layout: uint64 length, uint32 masked crc32c(length bytes), data, uint32 masked crc32c(data).
No file header. A record cut short at the end of the file is not an error: the caller keeps its
offset and retries when more bytes have arrived.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

HEADER_SIZE = 12  # length + its crc
FOOTER_SIZE = 4
# A scalar event is ~50 bytes; anything past this is a corrupt length, not a record to wait for.
MAX_RECORD_SIZE = 256 * 1024 * 1024

_HEADER = struct.Struct("<QI")
_UINT32 = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


def _pure_python_crc32c() -> Callable[[bytes], int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)

    def crc32c(data: bytes) -> int:
        crc = 0xFFFFFFFF
        for byte in data:
            crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        return crc ^ 0xFFFFFFFF

    return crc32c


def _load_crc32c() -> tuple[Callable[[bytes], int], str]:
    try:
        import google_crc32c  # type: ignore[import-untyped]

        if google_crc32c.implementation == "c":
            return google_crc32c.value, "google_crc32c (C)"
    except ImportError:
        pass
    try:
        import crc32c as crc32c_module  # type: ignore[import-not-found]

        return crc32c_module.crc32c, "crc32c (C)"
    except ImportError:
        pass
    return _pure_python_crc32c(), "pure Python"


crc32c, CRC32C_IMPLEMENTATION = _load_crc32c()
pure_python_crc32c = _pure_python_crc32c()


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """Encode one record (used by tests to build files by hand)."""
    length = struct.pack("<Q", len(data))
    return length + _UINT32.pack(masked_crc32c(length)) + data + _UINT32.pack(masked_crc32c(data))


@dataclass
class FramingResult:
    records: list[bytes]
    consumed: int  # bytes of buf fully handled (records and skipped bad ones)
    bad_records: int
    resync: bool  # a corrupt length was met: the rest of buf could not be framed


def split_records(buf: bytes, *, check_crc: bool = True, max_records: int | None = None) -> FramingResult:
    """Split buf (starting at a record boundary) into complete records.

    A record with a bad data crc is skipped and counted. A bad length crc means the framing itself is
    lost: we count it and stop (consumed stays at that record), setting resync so the caller can scan
    forward for the next valid header.
    """
    records: list[bytes] = []
    append = records.append
    pos = 0
    end = len(buf)
    bad = 0
    unpack_header = _HEADER.unpack_from
    unpack_u32 = _UINT32.unpack_from
    crc = crc32c
    limit = max_records if max_records is not None else -1
    while end - pos >= HEADER_SIZE:
        if limit == len(records):
            break
        length, length_crc = unpack_header(buf, pos)
        if check_crc:
            raw = crc(buf[pos : pos + 8])
            if ((((raw >> 15) | (raw << 17)) + _MASK_DELTA) & 0xFFFFFFFF) != length_crc:
                return FramingResult(records, pos, bad + 1, True)
        elif length > MAX_RECORD_SIZE:
            return FramingResult(records, pos, bad + 1, True)
        data_end = pos + HEADER_SIZE + length
        if data_end + FOOTER_SIZE > end:
            break  # half-written tail: wait for the rest
        data = buf[pos + HEADER_SIZE : data_end]
        if check_crc:
            raw = crc(data)
            if ((((raw >> 15) | (raw << 17)) + _MASK_DELTA) & 0xFFFFFFFF) != unpack_u32(buf, data_end)[0]:
                bad += 1
                pos = data_end + FOOTER_SIZE
                continue
        append(data)
        pos = data_end + FOOTER_SIZE
    return FramingResult(records, pos, bad, False)


def find_next_header(buf: bytes, start: int) -> int | None:
    """Scan for the next offset whose 12 bytes form a valid (length, crc) header; None if none yet."""
    for pos in range(start, len(buf) - HEADER_SIZE + 1):
        length, length_crc = _HEADER.unpack_from(buf, pos)
        if length <= MAX_RECORD_SIZE and masked_crc32c(buf[pos : pos + 8]) == length_crc:
            return pos
    return None
