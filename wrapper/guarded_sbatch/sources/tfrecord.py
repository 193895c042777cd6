"""TFRecord framing (TensorBoard event files) with masked CRC-32C checks: the constants and the crc.

The reader frames records with these (sources/tb_records.py).

Record layout: uint64 length, uint32 masked crc32c(length bytes), data, uint32 masked crc32c(data).
No file header. A record cut short at the end of the file is not an error: the caller keeps its
offset and retries when more bytes have arrived.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import TypeVar

HEADER_SIZE = 12  # length + its crc
FOOTER_SIZE = 4
# A scalar event is ~50 bytes; anything past this is a corrupt length, not a record to wait for.
MAX_RECORD_SIZE = 256 * 1024 * 1024

HEADER_STRUCT = struct.Struct("<QI")
MASK_DELTA = 0xA282EAD8
T = TypeVar("T")


def pure_python_crc32c() -> Callable[[bytes], int]:
    """crc32c in Python, when neither C implementation is installed (a table of 256 built per call)."""
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
        import google_crc32c  # noqa: PLC0415 - optional C implementation

        if google_crc32c.implementation == "c":
            return google_crc32c.value, "google_crc32c (C)"
    except ImportError:
        pass
    try:
        import crc32c as crc32c_module  # noqa: PLC0415 - optional fallback

        return crc32c_module.crc32c, "crc32c (C)"
    except ImportError:
        pass
    return pure_python_crc32c(), "pure Python"


crc32c, CRC32C_IMPLEMENTATION = _load_crc32c()


def mask(crc: T) -> T:
    """TFRecord's masked crc: rotated right by 15 bits, plus a constant (an int or a numpy uint32 array)."""
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF  # type: ignore[operator, return-value]


def unmask(masked: T) -> T:
    """The crc a masked crc was made from (mask's inverse; an int or a numpy uint32 array)."""
    crc = (masked - MASK_DELTA) & 0xFFFFFFFF  # type: ignore[operator]
    return ((crc << 15) | (crc >> 17)) & 0xFFFFFFFF  # type: ignore[return-value]


def masked_crc32c(data: bytes) -> int:
    return mask(crc32c(data))


# where a header may start: a length under 2**29 (bytes 4-7 zero, byte 3 at most 0x10)
_CANDIDATE = re.compile(rb"(?=[\x00-\xff]{3}[\x00-\x10]\x00\x00\x00\x00)", re.DOTALL)
_NONZERO = re.compile(rb"[^\x00]")
_ZERO_HEADER = bytes(HEADER_SIZE)  # never a header: the masked crc of a zero length is not zero


def find_next_header(buf: bytes, start: int) -> int | None:
    """Scan for the next offset whose 12 bytes form a valid (length, crc) header; None if none yet.
    Runs of zero bytes (a hole read as zeros, a preallocated tail) are jumped over, not tried byte by byte."""
    pos, last = start, len(buf) - HEADER_SIZE
    while pos <= last:
        match = _CANDIDATE.search(buf, pos)
        if match is None or match.start() > last:
            return None
        found = match.start()
        if buf[found : found + HEADER_SIZE] == _ZERO_HEADER:
            nonzero = _NONZERO.search(buf, found)
            if nonzero is None:
                return None
            pos = max(found + 1, nonzero.start() - HEADER_SIZE + 1)
            continue
        length, length_crc = HEADER_STRUCT.unpack_from(buf, found)
        if length <= MAX_RECORD_SIZE and masked_crc32c(buf[found : found + 8]) == length_crc:
            return found
        pos = found + 1
    return None
