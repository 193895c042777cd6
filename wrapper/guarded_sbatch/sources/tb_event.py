"""Decoding one serialized TensorBoard `Event` by hand: wall_time, step and its scalar values.

Field numbers (tensorboard/compat/proto): Event wall_time=1 (double), step=2 (int64), summary=5;
Summary value=1; Value tag=1, simple_value=2 (float), tensor=8; TensorProto dtype=1, tensor_shape=2,
tensor_content=4, float_val=5, double_val=6, int_val=7, int64_val=10, half_val=13, uint32_val=16,
uint64_val=17. half_val carries DT_HALF and DT_BFLOAT16 alike: the dtype says how to read its 16 bits.

read_event also says where the fields it used lie in the record (EventFields' *_at offsets): records whose other
bytes are equal to one already decoded decode the same way, with these fields read at these offsets
(sources/tb_records.py decodes runs of them as columns).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from guarded_sbatch.sources.wire import read_varint, skip_field, to_signed64

_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")
_HALF = struct.Struct("<e")
_UINT16 = struct.Struct("<H")

# TensorFlow DataType enum values (tensorflow/core/framework/types.proto).
_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_UINT8, _DT_INT16, _DT_INT8 = 1, 2, 3, 4, 5, 6
_DT_INT64, _DT_BOOL, _DT_BFLOAT16, _DT_UINT16, _DT_HALF, _DT_UINT32, _DT_UINT64 = 9, 10, 14, 17, 19, 22, 23
_CONTENT_FORMATS = {
    _DT_FLOAT: struct.Struct("<f"),
    _DT_DOUBLE: struct.Struct("<d"),
    _DT_INT32: struct.Struct("<i"),
    _DT_UINT8: struct.Struct("<B"),
    _DT_INT16: struct.Struct("<h"),
    _DT_INT8: struct.Struct("<b"),
    _DT_INT64: struct.Struct("<q"),
    _DT_UINT16: struct.Struct("<H"),
    _DT_HALF: struct.Struct("<e"),
    _DT_UINT32: struct.Struct("<I"),
    _DT_UINT64: struct.Struct("<Q"),
}
# Repeated numeric fields of TensorProto, by field number: (wire type when packed, how one decodes).
_FLOAT_VAL, _DOUBLE_VAL, _INT_VAL, _INT64_VAL, _HALF_VAL, _UINT32_VAL, _UINT64_VAL = 5, 6, 7, 10, 13, 16, 17


def _bits16(raw: int, dtype: int) -> float:
    """half_val holds the 16 bits of a DT_HALF (IEEE binary16) or of a DT_BFLOAT16 (a float32's top half)."""
    if dtype == _DT_BFLOAT16:
        return _FLOAT.unpack(struct.pack("<I", (raw & 0xFFFF) << 16))[0]
    return _HALF.unpack(_UINT16.pack(raw & 0xFFFF))[0]


def _decode_tensor_scalar(buf: bytes, pos: int, end: int) -> tuple[float | None, int, int]:
    """(value, offset, width) of a one-element numeric TensorProto: offset and width (4 or 8) say where the value
    lies when it is one float32/float64 read as is (width 0 when not). A value None for anything else (strings,
    bools, complex numbers, several elements, malformed bytes): one odd tensor never costs its event."""
    try:
        return _tensor_scalar(buf, pos, end)
    except (ValueError, IndexError, struct.error):
        return None, -1, 0


@dataclass
class _Tensor:
    dtype: int = 0
    elements: int = 1
    content: bytes | None = None
    content_at: int = -1
    values: list[float] = field(default_factory=list)
    half_bits: list[int] = field(default_factory=list)
    value_at: int = -1  # where the one float/double value read as is lies; -1 once any other value came
    value_width: int = 0


def _tensor_scalar(buf: bytes, pos: int, end: int) -> tuple[float | None, int, int]:
    tensor = _Tensor()
    while pos < end:
        pos = _tensor_field(buf, pos, tensor)
    if pos != end or tensor.elements != 1 or tensor.dtype == _DT_BOOL:
        return None, -1, 0
    values = [*tensor.values, *(_bits16(raw, tensor.dtype) for raw in tensor.half_bits)]
    if values:
        if len(values) != 1:
            return None, -1, 0
        return float(values[0]), tensor.value_at, tensor.value_width if tensor.value_at >= 0 else 0
    content, dtype = tensor.content, tensor.dtype
    if content is not None:
        if dtype == _DT_BFLOAT16 and len(content) == 2:
            return _bits16(_UINT16.unpack(content)[0], dtype), -1, 0
        fmt = _CONTENT_FORMATS.get(dtype)
        if fmt is not None and len(content) == fmt.size:
            as_is = dtype in (_DT_FLOAT, _DT_DOUBLE)
            return float(fmt.unpack(content)[0]), tensor.content_at, fmt.size if as_is else 0
    return None, -1, 0


def _tensor_field(buf: bytes, pos: int, tensor: _Tensor) -> int:
    """Read one TensorProto field at pos into tensor; returns the position after it."""
    key, pos = read_varint(buf, pos)
    number, wire = key >> 3, key & 7
    if number == 1 and wire == 0:  # dtype
        tensor.dtype, pos = read_varint(buf, pos)
    elif number in (2, 4) and wire == 2:  # tensor_shape, tensor_content
        length, pos = read_varint(buf, pos)
        if number == 2:
            tensor.elements *= _shape_elements(buf, pos, pos + length)
        else:
            tensor.content, tensor.content_at = buf[pos : pos + length], pos
        pos += length
    elif (number == _FLOAT_VAL and wire in (2, 5)) or (number == _DOUBLE_VAL and wire in (1, 2)):
        fmt = _FLOAT if number == _FLOAT_VAL else _DOUBLE
        count = len(tensor.values)
        tensor.value_at, pos = _read_fixed(buf, pos, wire, fmt, tensor.values)
        tensor.value_width = fmt.size if len(tensor.values) == count + 1 else 0
    elif number in (_INT_VAL, _INT64_VAL, _HALF_VAL, _UINT32_VAL, _UINT64_VAL) and wire in (0, 2):
        raws: list[int] = []
        pos = _read_varints(buf, pos, wire, raws)
        tensor.value_at = -1
        if number == _HALF_VAL:
            tensor.half_bits.extend(raws)
        else:
            signed = number in (_INT_VAL, _INT64_VAL)
            tensor.values.extend(float(to_signed64(raw) if signed else raw) for raw in raws)
    else:
        pos = skip_field(buf, pos, wire)
    return pos


def _shape_elements(buf: bytes, pos: int, end: int) -> int:
    """The number of elements of a TensorShapeProto (dim=2 { size=1 })."""
    elements = 1
    while pos < end:
        shape_key, pos = read_varint(buf, pos)
        if shape_key == 0x12:  # dim
            dim_length, pos = read_varint(buf, pos)
            dim_end = pos + dim_length
            while pos < dim_end:
                dim_key, pos = read_varint(buf, pos)
                if dim_key == 0x08:
                    size, pos = read_varint(buf, pos)
                    elements *= to_signed64(size)
                else:
                    pos = skip_field(buf, pos, dim_key & 7)
        else:
            pos = skip_field(buf, pos, shape_key & 7)
    if pos != end:
        raise ValueError("tensor shape overruns")
    return elements


def _read_varints(buf: bytes, pos: int, wire: int, out: list[int]) -> int:
    if wire == 0:
        raw, pos = read_varint(buf, pos)
        out.append(raw)
        return pos
    length, pos = read_varint(buf, pos)
    packed_end = pos + length
    while pos < packed_end:
        raw, pos = read_varint(buf, pos)
        out.append(raw)
    return pos


def _read_fixed(buf: bytes, pos: int, wire: int, fmt: struct.Struct, values: list[float]) -> tuple[int, int]:
    """(where the values begin, the position after them)."""
    if wire == 2:  # packed
        length, pos = read_varint(buf, pos)
        values.extend(v for (v,) in fmt.iter_unpack(buf[pos : pos + length]))
        return pos, pos + length
    values.append(fmt.unpack_from(buf, pos)[0])
    return pos, pos + fmt.size


@dataclass
class EventFields:
    """An Event's wall_time, step and scalars; with where the fields lie in the record (-1: absent) when its one
    scalar is a float32/float64 read as is (value_width 4 or 8; 0 otherwise) and its step a varint of at most
    9 bytes (a record whose other bytes are equal to these decodes the same way)."""

    wall_time: float = 0.0
    step: int = 0
    scalars: list[tuple[str, float]] = field(default_factory=list)
    wall_at: int = -1
    step_at: int = -1
    step_width: int = 0
    value_at: int = -1
    value_width: int = 0

    @property
    def fixed(self) -> bool:
        """Whether the record is one scalar at fixed places (see the class)."""
        return len(self.scalars) == 1 and self.value_width > 0 and self.step_width <= 9


def read_event(data: bytes, tag_names: dict[bytes, str]) -> EventFields:
    """The fields of one serialized Event (see EventFields); raises on malformed data."""
    event = EventFields()
    pos = 0
    end = len(data)
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x09:
            event.wall_time = _DOUBLE.unpack_from(data, pos)[0]
            event.wall_at = pos
            pos += 8
        elif key == 0x10:
            event.step_at = pos
            step, pos = read_varint(data, pos)
            event.step, event.step_width = to_signed64(step), pos - event.step_at
        elif key == 0x2A:  # summary
            length, pos = read_varint(data, pos)
            if pos + length > end:
                raise ValueError("summary past end of event")
            pos = _decode_summary(data, pos, pos + length, tag_names, event)
        elif key < 0x80:
            pos = skip_field(data, pos, key & 7)
        else:
            pos = _skip_long_key(data, pos - 1)
    if pos != end:
        raise ValueError("event overruns its record")
    return event


def _decode_summary(data: bytes, pos: int, end: int, tag_names: dict[bytes, str], event: EventFields) -> int:
    """Append the scalars of the Summary in data[pos:end] to event; returns end."""
    while pos < end:
        if data[pos] != 0x0A:
            pos = skip_field(data, pos + 1, data[pos] & 7)
            continue
        length, pos = read_varint(data, pos + 1)
        value_end = pos + length
        if value_end > end:
            raise ValueError("summary value overruns")
        tag, value, value_at, value_width = _decode_value(data, pos, value_end)
        pos = value_end
        if value is not None and tag:
            name = tag_names.get(tag)
            if name is None:
                name = tag_names[tag] = tag.decode("utf-8", "replace")
            event.scalars.append((name, value))
            event.value_at, event.value_width = value_at, value_width
    if pos != end:
        raise ValueError("summary overruns")
    return pos


def _decode_value(data: bytes, pos: int, end: int) -> tuple[bytes, float | None, int, int]:
    """(tag, scalar or None, where the scalar lies, its width or 0) of one Summary.Value; a value that does not
    decode is skipped, not its event."""
    tag = b""
    value: float | None = None
    value_at, value_width = -1, 0
    try:
        while pos < end:
            value_key, pos = read_varint(data, pos)
            if value_key == 0x0A:
                length, pos = read_varint(data, pos)
                tag = data[pos : pos + length]
                pos += length
            elif value_key == 0x15:
                value, value_at, value_width = _FLOAT.unpack_from(data, pos)[0], pos, 4
                pos += 4
            elif value_key == 0x42:
                length, pos = read_varint(data, pos)
                value, value_at, value_width = _decode_tensor_scalar(data, pos, pos + length)
                pos += length
            else:
                pos = skip_field(data, pos, value_key & 7)
    except (ValueError, IndexError, struct.error):
        return tag, None, -1, 0
    return (tag, value, value_at, value_width) if pos == end else (tag, None, -1, 0)


def _skip_long_key(data: bytes, pos: int) -> int:
    key, pos = read_varint(data, pos)
    return skip_field(data, pos, key & 7)
