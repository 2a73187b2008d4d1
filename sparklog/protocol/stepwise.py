"""Encode a large kio message one array element at a time.

kio's writer encodes a message in one call: a Metadata response for 100,000 topics held a
server's loop for 300-750 ms. `encode_response_steps` writes the same bytes (a test holds it to
kio's) but yields once per element of its arrays, so a server can let other connections run
between steps (`sparklog.protocol.cooperative`). Only entities holding large arrays are taken
apart: everything below `LARGE_ENTITIES` entities goes to kio's writer whole.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Generator, Iterator
from functools import cache
from typing import Any

from kio.serial._introspect import EntityTupleField, classify_field, get_field_tag
from kio.serial._serialize import entity_writer, get_field_writer
from kio.serial.writers import write_compact_array_length, write_legacy_array_length
from kio.static.primitive import i32
from kio.static.protocol import Entity

#: A message with at least this many entities in its arrays is encoded step by step.
LARGE_ENTITIES = 1_000

_INT32 = struct.Struct(">i")


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    write: Any  # kio's writer of the whole field
    element: type | None  # the entity type of an array of entities


@cache
def _plan(schema: type[Entity]) -> tuple[tuple[_FieldPlan, ...], tuple[str, ...]]:
    """The untagged fields in wire order; the names of the entity arrays among them."""
    flexible = bool(schema.__flexible__)
    plans = []
    for f in dataclasses.fields(schema):
        if get_field_tag(f) is not None:
            continue
        field_class = classify_field(f)
        element = field_class.type_ if isinstance(field_class, EntityTupleField) else None
        plans.append(_FieldPlan(f.name, get_field_writer(f, flexible, False, False), element))
    return tuple(plans), tuple(p.name for p in plans if p.element is not None)


def entity_count(entity: Entity, limit: int = LARGE_ENTITIES) -> int:
    """Entities in `entity`'s arrays, counted until `limit` (cheap: stops there)."""
    total = 0
    pending = [entity]
    while pending and total < limit:
        current = pending.pop()
        for name in _plan(type(current))[1]:
            items = getattr(current, name)
            if items:
                total += len(items)
                if total >= limit:
                    return total
                pending.extend(items)
    return total


def _write_steps(buf: io.BytesIO, entity: Entity) -> Iterator[None]:
    schema = type(entity)
    plans, arrays = _plan(schema)
    if not arrays or entity_count(entity) < LARGE_ENTITIES:
        entity_writer(schema)(buf, entity)
        yield
        return
    flexible = bool(schema.__flexible__)
    for plan in plans:
        items = getattr(entity, plan.name)
        if plan.element is None or items is None:
            plan.write(buf, items)
            continue
        if flexible:
            write_compact_array_length(buf, len(items))
        else:
            write_legacy_array_length(buf, i32(len(items)))
        for item in items:
            yield from _write_steps(buf, item)
    if flexible:  # the tagged fields: what kio writes after the untagged ones of a copy
        light = dataclasses.replace(entity, **dict.fromkeys(arrays, ()))
        untagged = io.BytesIO()
        for plan in plans:
            plan.write(untagged, getattr(light, plan.name))
        whole = io.BytesIO()
        entity_writer(schema)(whole, light)
        buf.write(whole.getbuffer()[len(untagged.getbuffer()) :])


def encode_response_steps(body: Any, correlation_id: int) -> Generator[None, None, bytes]:
    """`codec.encode_response(body, correlation_id)`, yielding between array elements."""
    schema = type(body)
    header_schema = schema.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_schema)(buf, header_schema(correlation_id=correlation_id))
    yield from _write_steps(buf, body)
    data = buf.getbuffer()
    _INT32.pack_into(data, 0, len(data) - 4)
    return bytes(data)
