"""A minimal decoder of TensorBoard's ``Event`` protocol buffer, for scalars only.

This is the general (slow) path: it parses one record with plain Python and also reports *where*
the varying fields sit, so that :mod:`lossguard.io.tfevents.batch` can decode every other record with
the same byte layout using array operations.

Field numbers (``tensorboard/compat/proto/event.proto``, ``summary.proto``, ``tensor.proto``)::

    Event:        1 wall_time (double)  2 step (int64)  3 file_version (string)  5 summary
                  7 session_log
    Summary:      1 value (repeated)
    Value:        1 tag  7 node_name  2 simple_value (float)  8 tensor  9 metadata
    SummaryMetadata: 1 plugin_data { 1 plugin_name }
    TensorProto:  1 dtype  2 tensor_shape { 2 dim { 1 size } }  4 tensor_content
                  5 float_val (packed)  6 double_val (packed)  13 half_val (packed int32)

proto3 leaves out fields that hold their default, so an absent ``step`` is step 0 and an absent
``simple_value`` is 0.0.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

DT_FLOAT, DT_DOUBLE, DT_BFLOAT16, DT_HALF = 1, 2, 14, 19
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_F16 = struct.Struct("<e")


class ProtoError(Exception):
    """The bytes are not a well-formed ``Event`` message; the message says what is wrong."""


@dataclass
class ScalarValue:
    """One scalar of an event.

    Attributes:
        tag: the summary tag.
        value: the value as a Python float.
        pos: byte offset of the value's bytes in the record data, or -1 when the value is not at a
            fixed place (a varint half_val, or a value the writer left out because it was 0.0).
        kind: numpy dtype code of the bytes at ``pos``: ``"<f4"``, ``"<f8"``, ``"<f2"`` or ``"bf16"``;
            ``"zero"`` for a value proto3 left out because it was 0.0 (no bytes at all).
    """

    tag: str
    value: float
    pos: int = -1
    kind: str = "<f4"


@dataclass
class ParsedEvent:
    """What a record holds, and where its varying bytes are.

    Attributes:
        wall_time: seconds since the epoch (0.0 when absent).
        step: the step (0 when absent: proto3 omits defaults).
        values: the scalars of the event, in order.
        wall_pos: offset of the 8 wall-time bytes, or -1 when absent.
        step_pos: offset of the step varint, or -1 when absent.
        step_len: number of bytes of that varint.
        file_version: the ``file_version`` string of the first event of a file, if present.
        session_status: ``SessionLog.status`` (1 START, 2 STOP, 3 CHECKPOINT) or 0.
        fixed: False when some scalar has no fixed byte position (then the layout can't be reused).
    """

    wall_time: float = 0.0
    step: int = 0
    values: list[ScalarValue] = field(default_factory=list)
    wall_pos: int = -1
    step_pos: int = -1
    step_len: int = 0
    file_version: str | None = None
    session_status: int = 0
    fixed: bool = True


def _varint(data, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ProtoError("a varint runs past the end of its message")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
        if shift >= 70:
            raise ProtoError("a varint is longer than 10 bytes")


def _fields(data, pos: int, end: int):
    """Yield ``(field_number, wire_type, payload_start, payload_end_or_value)`` of one message."""
    while pos < end:
        key, pos = _varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtoError("field number 0 is not allowed")
        if wire == 0:
            value, new = _varint(data, pos, end)
            yield number, wire, pos, value
            pos = new
        elif wire == 1:
            if pos + 8 > end:
                raise ProtoError("a 64-bit field runs past the end of its message")
            yield number, wire, pos, pos + 8
            pos += 8
        elif wire == 2:
            length, pos = _varint(data, pos, end)
            if pos + length > end:
                raise ProtoError("a length-delimited field runs past the end of its message")
            yield number, wire, pos, pos + length
            pos += length
        elif wire == 5:
            if pos + 4 > end:
                raise ProtoError("a 32-bit field runs past the end of its message")
            yield number, wire, pos, pos + 4
            pos += 4
        else:
            raise ProtoError(f"wire type {wire} (field {number}) is not valid in an Event")


def _text(data, start: int, end: int) -> str:
    return bytes(data[start:end]).decode("utf-8", errors="replace")


def parse_event(data) -> ParsedEvent:
    """Parse one record's data as an ``Event`` and collect its scalars.

    Raises:
        ProtoError: malformed protocol buffer.
    """
    ev = ParsedEvent()
    for number, wire, start, end in _fields(data, 0, len(data)):
        if number == 1 and wire == 1:
            ev.wall_time = _F64.unpack_from(data, start)[0]
            ev.wall_pos = start
        elif number == 2 and wire == 0:
            step = end  # the varint's value
            ev.step = step - (1 << 64) if step >= 1 << 63 else step
            ev.step_pos = start
            ev.step_len = _varint_len(data, start)
        elif number == 3 and wire == 2:
            ev.file_version = _text(data, start, end)
        elif number == 5 and wire == 2:
            _parse_summary(data, start, end, ev)
        elif number == 7 and wire == 2:
            for n2, w2, _s2, v2 in _fields(data, start, end):
                if n2 == 1 and w2 == 0:
                    ev.session_status = int(v2)
    return ev


def _varint_len(data, pos: int) -> int:
    n = 1
    while data[pos] & 0x80:
        pos += 1
        n += 1
    return n


def _parse_summary(data, start: int, end: int, ev: ParsedEvent) -> None:
    for number, wire, s, e in _fields(data, start, end):
        if number == 1 and wire == 2:
            _parse_value(data, s, e, ev)


def _parse_value(data, start: int, end: int, ev: ParsedEvent) -> None:
    tag = node_name = ""
    simple: tuple[float, int] | None = None
    tensor: tuple[int, int] | None = None
    plugin = ""
    for number, wire, s, e in _fields(data, start, end):
        if number == 1 and wire == 2:
            tag = _text(data, s, e)
        elif number == 7 and wire == 2:
            node_name = _text(data, s, e)
        elif number == 2 and wire == 5:
            simple = (_F32.unpack_from(data, s)[0], s)
        elif number == 8 and wire == 2:
            tensor = (s, e)
        elif number == 9 and wire == 2:
            plugin = _plugin_name(data, s, e)
        elif number in (3, 4, 5, 6):  # histogram, image, audio: not scalars
            return
    tag = tag or node_name
    if tensor is not None:
        if plugin not in ("", "scalars"):
            return
        scalar = _parse_tensor(data, *tensor)
        if scalar is None:
            return
        value, pos, kind = scalar
        ev.values.append(ScalarValue(tag, value, pos, kind))
        ev.fixed &= pos >= 0 or kind == "zero"
    elif simple is not None:
        ev.values.append(ScalarValue(tag, simple[0], simple[1], "<f4"))
    elif plugin in ("", "scalars") and tag:
        # A Value with only a tag: simple_value was 0.0, which proto3 does not write.
        ev.values.append(ScalarValue(tag, 0.0, -1, "zero"))


def _plugin_name(data, start: int, end: int) -> str:
    for number, wire, s, e in _fields(data, start, end):
        if number == 1 and wire == 2:
            for n2, w2, s2, e2 in _fields(data, s, e):
                if n2 == 1 and w2 == 2:
                    return _text(data, s2, e2)
    return ""


def _parse_tensor(data, start: int, end: int) -> tuple[float, int, str] | None:
    """The value of a one-element float tensor, its byte position and kind; None for anything else."""
    dtype = 0
    elements = 1
    content = floats = doubles = halves = None
    for number, wire, s, e in _fields(data, start, end):
        if number == 1 and wire == 0:
            dtype = int(e)
        elif number == 2 and wire == 2:
            for n2, w2, s2, e2 in _fields(data, s, e):
                if n2 == 2 and w2 == 2:
                    for n3, w3, _s3, v3 in _fields(data, s2, e2):
                        if n3 == 1 and w3 == 0:
                            elements *= int(v3)
        elif number == 4 and wire == 2:
            content = (s, e)
        elif number == 5:
            floats = (s, e)
        elif number == 6:
            doubles = (s, e)
        elif number == 13:
            halves = (s, e, wire)
    if elements != 1 or dtype not in (DT_FLOAT, DT_DOUBLE, DT_HALF, DT_BFLOAT16):
        return None
    width = {DT_FLOAT: 4, DT_DOUBLE: 8, DT_HALF: 2, DT_BFLOAT16: 2}[dtype]
    kind = {DT_FLOAT: "<f4", DT_DOUBLE: "<f8", DT_HALF: "<f2", DT_BFLOAT16: "bf16"}[dtype]
    if content is not None and content[1] - content[0] == width:
        return _decode(data, content[0], kind), content[0], kind
    if dtype == DT_FLOAT and floats is not None and floats[1] - floats[0] == 4:
        return _decode(data, floats[0], kind), floats[0], kind
    if dtype == DT_DOUBLE and doubles is not None and doubles[1] - doubles[0] == 8:
        return _decode(data, doubles[0], kind), doubles[0], kind
    if dtype in (DT_HALF, DT_BFLOAT16) and halves is not None:
        s, e, wire = halves
        if wire == 0:
            bits = e
        else:
            bits, _ = _varint(data, s, e)
        raw = int(bits & 0xFFFF).to_bytes(2, "little")
        return _decode(raw, 0, kind), -1, kind
    if content is None and floats is None and doubles is None and halves is None:
        return 0.0, -1, "zero"  # every element at its default (0.0), which proto3 does not write
    return None


def _decode(data, pos: int, kind: str) -> float:
    if kind == "<f4":
        return _F32.unpack_from(data, pos)[0]
    if kind == "<f8":
        return _F64.unpack_from(data, pos)[0]
    if kind == "<f2":
        return _F16.unpack_from(data, pos)[0]
    bits = int.from_bytes(bytes(data[pos:pos + 2]), "little") << 16  # bfloat16: the top half of a float32
    return _F32.unpack(bits.to_bytes(4, "little"))[0]

