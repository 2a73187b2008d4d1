"""Bounds checks of a request (or response) frame before kio decodes it.

kio's native reader reserves memory for an array as long as the array says it is, before it
reads an element: a 23-byte Produce frame declaring 2^32 partitions made it ask for 92 GB and
abort the whole process (found by `tests/fuzz`). This walk follows the request's schema over
the frame and refuses any array, string or bytes field, or tagged field, that claims more than
the bytes left - every element takes at least one byte - so a lie costs a ProtocolError, not
the broker. It also refuses a null (-1) where the schema allows none, as Kafka's generated
readers do (handlers crashed iterating a None array; found by `test_wire_fuzz`). It reads
lengths only, no values, and skips record bytes whole.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from collections.abc import Iterator
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
)
from kio.static.protocol import Payload

from sparklog.protocol.codec import header_schema

_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,  # its size in bytes, not an error code
    "int32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_LENGTH_PREFIXED = frozenset({"string", "bytes", "records"})
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class FrameBoundsError(ValueError):
    """A length in the frame claims more bytes than the frame has."""


class _Reader:
    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def left(self) -> int:
        return self.end - self.pos

    def skip(self, n: int, what: str) -> None:
        if n < 0 or n > self.left():
            raise FrameBoundsError(f"{what} claims {n} bytes, {self.left()} left")
        self.pos += n

    def int8(self) -> int:
        if self.left() < 1:
            raise FrameBoundsError("frame ends inside an int8")
        value = self.buf[self.pos]
        self.pos += 1
        return value - 256 if value > 127 else value

    def int16(self) -> int:
        if self.left() < 2:
            raise FrameBoundsError("frame ends inside an int16")
        (value,) = _INT16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return value

    def int32(self) -> int:
        if self.left() < 4:
            raise FrameBoundsError("frame ends inside an int32")
        (value,) = _INT32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return value

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            if self.pos >= self.end or shift > 28:
                raise FrameBoundsError("bad unsigned varint")
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def length(self, flexible: bool, wide: bool) -> int:
        """A string/bytes/array length; -1 for null."""
        if flexible:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()


_Field = tuple[str, str, Any, bool]  # name, kafka type, field class, nullable


@cache
def _plan(schema: type) -> tuple[tuple[_Field, ...], dict[int, _Field]]:
    """The untagged fields in wire order, and the tagged ones by tag."""
    hints = typing.get_type_hints(schema)
    untagged: list[_Field] = []
    tagged: dict[int, _Field] = {}
    for f in dataclasses.fields(schema):
        nullable = type(None) in typing.get_args(hints[f.name])
        entry = (f.name, f.metadata.get("kafka_type", ""), classify_field(f), nullable)
        tag = get_field_tag(f)
        if tag is None:
            untagged.append(entry)
        else:
            tagged[tag] = entry
    return tuple(untagged), tagged


def _null(name: str, nullable: bool) -> None:
    """Kafka's readers refuse a null where the schema has no null ("non-nullable field ...
    was serialized as null"); handlers never see one."""
    if not nullable:
        raise FrameBoundsError(f"non-nullable field {name} was sent as null")


def _walk(schema: type, r: _Reader, flexible: bool) -> Iterator[None]:
    """Walk one entity; yields once per array element walked, so a caller can pause between
    the elements of a huge request (`sparklog.protocol.cooperative`)."""
    untagged, tagged = _plan(schema)
    for field in untagged:
        if isinstance(field[2], _ENTITY_FIELDS):
            yield from _walk_entities(field, r, flexible)
        else:
            _walk_value(field, r, flexible)
    if flexible:
        yield from _walk_tagged(r, tagged)


def _walk_entities(field: _Field, r: _Reader, flexible: bool) -> Iterator[None]:
    name, _kafka_type, field_class, nullable = field
    if isinstance(field_class, EntityField):
        if nullable and r.int8() < 0:  # KIP-893: a nullable struct leads with -1 or 1
            return
        yield from _walk(field_class.type_, r, flexible)
        return
    count = r.length(flexible, wide=True)
    if count < 0:
        _null(name, nullable)
        return
    if count > r.left():  # every element takes at least one byte
        raise FrameBoundsError(f"array {name} claims {count} items, {r.left()} bytes left")
    for _ in range(count):
        yield from _walk(field_class.type_, r, flexible)
        yield


def _walk_value(field: _Field, r: _Reader, flexible: bool) -> None:
    """A field holding no entities: a primitive, or an array of primitives."""
    name, kafka_type, field_class, nullable = field
    if isinstance(field_class, PrimitiveTupleField):
        count = r.length(flexible, wide=True)
        if count < 0:
            _null(name, nullable)
            return
        size = _FIXED.get(kafka_type, 1)
        if count * size > r.left():
            raise FrameBoundsError(f"array {name} claims {count} items, {r.left()} bytes left")
        if kafka_type in _LENGTH_PREFIXED:
            for _ in range(count):
                _skip_value(r, kafka_type, flexible, name, nullable=False)
        else:
            r.skip(count * size, name)
    elif kafka_type in _FIXED:
        r.skip(_FIXED[kafka_type], name)
    elif kafka_type in _LENGTH_PREFIXED:
        _skip_value(r, kafka_type, flexible, name, nullable)
    else:  # a type this walk does not know: leave the frame to kio
        raise _Unknown(kafka_type)


def _walk_tagged(r: _Reader, tagged: dict[int, _Field]) -> Iterator[None]:
    """The tagged-fields section; a tag the schema knows is walked inside its own size, since
    kio decodes it (an array length there reached kio's reader unchecked: found by the
    response fuzzer, a 264 GB allocation from a 59-byte ApiVersions response)."""
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        if size > r.left():
            raise FrameBoundsError(f"tagged field claims {size} bytes, {r.left()} left")
        field = tagged.get(tag)
        if field is not None:
            inner = _Reader(r.buf, r.pos, r.pos + size)
            if isinstance(field[2], _ENTITY_FIELDS):
                yield from _walk_entities(field, inner, flexible=True)
            else:
                _walk_value(field, inner, flexible=True)
        r.skip(size, "tagged field")


def _skip_value(r: _Reader, kafka_type: str, flexible: bool, name: str, nullable: bool) -> None:
    n = r.length(flexible, wide=kafka_type != "string")
    if n >= 0:
        r.skip(n, name)
    else:
        _null(name, nullable)


def _skip_tagged(r: _Reader) -> None:
    """A header's tagged fields: nothing in them reaches a handler."""
    for _ in range(r.uvarint()):
        r.uvarint()
        r.skip(r.uvarint(), "tagged field")


class _Unknown(Exception):
    pass


_ENTITY_FIELDS = (EntityField, EntityTupleField)


def check_request_frame(schema: type[Payload], frame: bytes | memoryview) -> None:
    """Raise FrameBoundsError when a length in `frame` (a request of `schema`, without its
    size prefix) claims more bytes than are left."""
    for _ in check_request_frame_steps(schema, frame):
        pass


def check_request_frame_steps(schema: type[Payload], frame: bytes | memoryview) -> Iterator[None]:
    """`check_request_frame` one array element at a time: a server walking a huge request
    lets other connections run between its steps."""
    flexible = bool(schema.__flexible__)
    r = _Reader(frame, 8)  # api key, version, correlation id
    client_id = r.int16()
    if client_id > 0:
        r.skip(client_id, "client id")
    if flexible:
        _skip_tagged(r)
    try:
        yield from _walk(schema, r, flexible)
    except _Unknown:
        return


def check_response_frame(schema: type[Payload], frame: bytes | memoryview) -> None:
    """The same bounds and null checks over a response frame (without its size prefix), for
    clients reading what a broker sent: a broken or hostile server costs a ProtocolError."""
    r = _Reader(frame, 4)  # correlation id
    if header_schema(schema).__flexible__:
        _skip_tagged(r)
    try:
        for _ in _walk(schema, r, bool(schema.__flexible__)):
            pass
    except _Unknown:
        return
