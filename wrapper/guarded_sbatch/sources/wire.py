"""Minimal protobuf wire-format decoding: just enough to pull a few fields out of a message.

Decoding by hand avoids building protobuf objects (TensorBoard's Event, W&B's Record), which costs
far more than the few fields we need. Every function raises ValueError (or IndexError / struct.error)
on malformed input; callers count such records as bad and move on.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

VARINT = 0
FIXED64 = 1
LENGTH_DELIMITED = 2
FIXED32 = 5

_DOUBLE = struct.Struct("<d")


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Return (value, position after it). Values are unsigned; see to_signed64."""
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def to_signed64(value: int) -> int:
    return value - (1 << 64) if value >= (1 << 63) else value


def skip_field(buf: bytes, pos: int, wire_type: int) -> int:
    """Return the position after a field's payload of the given wire type."""
    if wire_type == VARINT:
        return read_varint(buf, pos)[1]
    if wire_type == FIXED64:
        return pos + 8
    if wire_type == LENGTH_DELIMITED:
        length, pos = read_varint(buf, pos)
        return pos + length
    if wire_type == FIXED32:
        return pos + 4
    raise ValueError(f"unsupported wire type {wire_type}")


def iter_fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """Yield (field number, wire type, payload start, payload end) for each field in buf[start:end].

    For varints the payload is the varint bytes; for length-delimited fields, the content only.
    """
    pos = start
    while pos < end:
        key, pos = read_varint(buf, pos)
        field_number, wire_type = key >> 3, key & 7
        if field_number == 0:
            raise ValueError("field number 0")
        if wire_type == LENGTH_DELIMITED:
            length, pos = read_varint(buf, pos)
            payload_start, pos = pos, pos + length
        else:
            payload_start = pos
            pos = skip_field(buf, pos, wire_type)
        if pos > end:
            raise ValueError("field runs past the end of its message")
        yield field_number, wire_type, payload_start, pos


def read_double(buf: bytes, pos: int) -> float:
    return _DOUBLE.unpack_from(buf, pos)[0]
