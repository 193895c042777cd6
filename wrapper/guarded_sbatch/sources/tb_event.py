"""Decoding one serialized TensorBoard `Event` by hand: wall_time, step and its scalar values.

Field numbers (tensorboard/compat/proto): Event wall_time=1 (double), step=2 (int64), summary=5;
Summary value=1; Value tag=1, simple_value=2 (float), tensor=8; TensorProto dtype=1, tensor_shape=2,
tensor_content=4, float_val=5, double_val=6, int_val=7, int64_val=10, half_val=13.
"""

from __future__ import annotations

import struct

from guarded_sbatch.sources.wire import read_varint, skip_field, to_signed64

_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")
_HALF = struct.Struct("<e")
_UINT16 = struct.Struct("<H")

# TensorFlow DataType enum values for the numeric scalars we accept.
_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64, _DT_BFLOAT16, _DT_HALF = 1, 2, 3, 9, 14, 19
_CONTENT_FORMATS = {
    _DT_FLOAT: struct.Struct("<f"),
    _DT_DOUBLE: struct.Struct("<d"),
    _DT_INT32: struct.Struct("<i"),
    _DT_INT64: struct.Struct("<q"),
    _DT_HALF: struct.Struct("<e"),
}


def _decode_tensor_scalar(buf: bytes, pos: int, end: int) -> float | None:
    """The value of a one-element numeric TensorProto, or None for anything else."""
    dtype = 0
    elements = 1
    content: bytes | None = None
    values: list[float] = []
    while pos < end:
        key = buf[pos]
        pos += 1
        if key == 0x08:  # dtype
            dtype, pos = read_varint(buf, pos)
        elif key == 0x12:  # tensor_shape
            length, pos = read_varint(buf, pos)
            shape_end = pos + length
            while pos < shape_end:
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
        elif key == 0x22:  # tensor_content
            length, pos = read_varint(buf, pos)
            content = buf[pos : pos + length]
            pos += length
        elif key == 0x2A:  # float_val, packed
            length, pos = read_varint(buf, pos)
            values.extend(v for (v,) in _FLOAT.iter_unpack(buf[pos : pos + length]))
            pos += length
        elif key == 0x2D:  # float_val, unpacked
            values.append(_FLOAT.unpack_from(buf, pos)[0])
            pos += 4
        elif key == 0x32:  # double_val, packed
            length, pos = read_varint(buf, pos)
            values.extend(v for (v,) in _DOUBLE.iter_unpack(buf[pos : pos + length]))
            pos += length
        elif key == 0x31:  # double_val, unpacked
            values.append(_DOUBLE.unpack_from(buf, pos)[0])
            pos += 8
        elif key in (0x3A, 0x52, 0x6A):  # int_val, int64_val, half_val (packed varints)
            length, pos = read_varint(buf, pos)
            packed_end = pos + length
            while pos < packed_end:
                raw, pos = read_varint(buf, pos)
                if key == 0x6A:
                    values.append(_HALF.unpack(_UINT16.pack(raw & 0xFFFF))[0])
                else:
                    values.append(float(to_signed64(raw)))
        else:
            pos = skip_field(buf, pos, key & 7)
    if pos != end or elements != 1:
        return None
    if values:
        return float(values[0]) if len(values) == 1 else None
    if content is not None:
        if dtype == _DT_BFLOAT16 and len(content) == 2:
            return _FLOAT.unpack(b"\x00\x00" + content)[0]
        fmt = _CONTENT_FORMATS.get(dtype)
        if fmt is not None and len(content) == fmt.size:
            return float(fmt.unpack(content)[0])
    return None


def decode_event(data: bytes, tag_names: dict[bytes, str]) -> tuple[float, int, list[tuple[str, float]]]:
    """(wall_time, step, [(tag, value)]) of the scalars in one serialized Event.

    tag_names caches decoded tag strings. Raises on malformed data.
    """
    wall_time = 0.0
    step = 0
    scalars: list[tuple[str, float]] = []
    pos = 0
    end = len(data)
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x09:
            wall_time = _DOUBLE.unpack_from(data, pos)[0]
            pos += 8
        elif key == 0x10:
            step, pos = read_varint(data, pos)
            step = to_signed64(step)
        elif key == 0x2A:  # summary
            length, pos = read_varint(data, pos)
            summary_end = pos + length
            if summary_end > end:
                raise ValueError("summary past end of event")
            while pos < summary_end:
                if data[pos] != 0x0A:
                    pos = skip_field(data, pos + 1, data[pos] & 7)
                    continue
                length, pos = read_varint(data, pos + 1)
                value_end = pos + length
                tag = b""
                value: float | None = None
                while pos < value_end:
                    value_key = data[pos]
                    pos += 1
                    if value_key == 0x0A:
                        length, pos = read_varint(data, pos)
                        tag = data[pos : pos + length]
                        pos += length
                    elif value_key == 0x15:
                        value = _FLOAT.unpack_from(data, pos)[0]
                        pos += 4
                    elif value_key == 0x42:
                        length, pos = read_varint(data, pos)
                        value = _decode_tensor_scalar(data, pos, pos + length)
                        pos += length
                    else:
                        pos = skip_field(data, pos, value_key & 7) if value_key < 0x80 else _skip_long_key(
                            data, pos - 1)
                if pos != value_end:
                    raise ValueError("summary value overruns")
                if value is not None and tag:
                    name = tag_names.get(tag)
                    if name is None:
                        name = tag_names[tag] = tag.decode("utf-8", "replace")
                    scalars.append((name, value))
            if pos != summary_end:
                raise ValueError("summary overruns")
        elif key < 0x80:
            pos = skip_field(data, pos, key & 7)
        else:
            pos = _skip_long_key(data, pos - 1)
    if pos != end:
        raise ValueError("event overruns its record")
    return wall_time, step, scalars


def _skip_long_key(data: bytes, pos: int) -> int:
    key, pos = read_varint(data, pos)
    return skip_field(data, pos, key & 7)
