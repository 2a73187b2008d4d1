"""Build kio messages of any version from plain Python values.

kio generates one class per (message, version); a handler serving Fetch v4..v12 would otherwise
need nine code paths. `build(cls, data)` fills a kio dataclass from a dict, converting plain
values to kio's field types (error codes, millisecond durations, timestamps, nested entities)
and dropping keys the version lacks, so a handler describes its answer once.

`response(request, data)` is the response builder of every handler that answers with it: it
writes the response's `throttle_time_ms` from the request pipeline (`throttle_time_ms(request)`:
the quotas' decision, 0 today), so no handler writes one.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from collections.abc import Generator, Mapping
from functools import cache
from typing import Any, cast

from kio.schema.errors import ErrorCode
from kio.static.primitive import TZAware, i32Timedelta, i64Timedelta
from kio.static.protocol import Entity

from sparklog.protocol import codec, cooperative
from sparklog.protocol.pipeline import throttle_time_ms

_MISSING = dataclasses.MISSING


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    convert: Any  # callable(value) -> kio value
    required: bool
    element: type[Entity] | None  # the entity type of an array of entities


def build(cls: type[Entity], data: Mapping[str, Any]) -> Any:
    """An instance of kio class `cls` from `data` (missing keys take the schema defaults)."""
    kwargs: dict[str, Any] = {}
    for plan in _plan(cls):
        if plan.name in data:
            kwargs[plan.name] = plan.convert(data[plan.name])
        else:
            assert not plan.required, f"{cls.__qualname__} v{cls.__version__} needs {plan.name}"
    return cls(**kwargs)


def response(request: Any, data: Mapping[str, Any]) -> Any:
    """The response to a decoded `Request` (its api key and version), built from `data`, with
    the pipeline's throttle time."""
    cls = codec.response_schema(request.api_key, request.api_version)
    return build(cls, _with_throttle_time(cls, request, data))


async def response_cooperatively(request: Any, data: Mapping[str, Any]) -> Any:
    """`response(request, data)`, pausing between entities when `data` is large, so building
    the answer to a huge request lets other connections run (`protocol.cooperative`)."""
    cls = codec.response_schema(request.api_key, request.api_version)
    data = _with_throttle_time(cls, request, data)
    if _entries(data) < LARGE_ENTRIES:
        return build(cls, data)
    return await cooperative.complete(_build_steps(cls, data))


def _with_throttle_time(cls: type, request: Any, data: Mapping[str, Any]) -> Mapping[str, Any]:
    """`data` with the response's throttle time, when this version has the field."""
    if not _has_throttle_time(cls):
        return data
    return {**data, "throttle_time": throttle_time_ms(request)}


@cache
def _has_throttle_time(cls: type) -> bool:
    return has_field(cls, "throttle_time")


#: Answers with at least this many entries are built step by step.
LARGE_ENTRIES = 1_000


def _entries(data: Mapping[str, Any], limit: int = LARGE_ENTRIES) -> int:
    """List items anywhere in `data`, counted until `limit`."""
    total = 0
    pending = [data]
    while pending and total < limit:
        for value in pending.pop().values():
            if isinstance(value, list | tuple) and value and isinstance(value[0], Mapping):
                total += len(value)
                pending.extend(value)
    return total


def _build_steps(cls: type[Entity], data: Mapping[str, Any]) -> Generator[None, None, Any]:
    """`build(cls, data)`, yielding once per element of its arrays of entities."""
    kwargs: dict[str, Any] = {}
    for plan in _plan(cls):
        if plan.name not in data:
            assert not plan.required, f"{cls.__qualname__} v{cls.__version__} needs {plan.name}"
            continue
        value = data[plan.name]
        if plan.element is None or value is None or _entries({"": value}) < LARGE_ENTRIES:
            kwargs[plan.name] = plan.convert(value)
            continue
        items = []
        for item in value:
            if not isinstance(item, plan.element):
                item = yield from _build_steps(plan.element, item)
            items.append(item)
            yield
        kwargs[plan.name] = tuple(items)
    return cls(**kwargs)


def has_field(cls: type, name: str) -> bool:
    return any(f.name == name for f in dataclasses.fields(cls))


@cache
def _plan(cls: type[Entity]) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls)
    plans = []
    for f in dataclasses.fields(cls):
        required = f.default is _MISSING and f.default_factory is _MISSING
        plans.append(
            _FieldPlan(f.name, _converter(hints[f.name]), required, _element(hints[f.name]))
        )
    return tuple(plans)


def _element(hint: Any) -> type[Entity] | None:
    """The entity type of a (possibly optional) tuple-of-entities hint, else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else Any
    if typing.get_origin(hint) is tuple:
        params = typing.get_args(hint)
        return _entity_class(params[0]) if params else None
    return None


def _entity_class(hint: Any) -> type[Entity] | None:
    """`hint` when it is a kio entity class (kio's entities are its dataclasses), else None."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return cast("type[Entity]", hint)
    return None


def _converter(hint: Any) -> Any:
    optional = False
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        hint = args[0] if len(args) == 1 else Any
        origin = typing.get_origin(hint)
    inner = _base_converter(hint, origin)
    if optional:
        return lambda v: None if v is None else inner(v)
    return inner


def _base_converter(hint: Any, origin: Any) -> Any:
    if origin is tuple:
        args = typing.get_args(hint)
        item = _converter(args[0]) if args else (lambda v: v)
        return lambda v: tuple(item(x) for x in v)
    if hint is ErrorCode:
        return lambda v: v if isinstance(v, ErrorCode) else ErrorCode(int(v))
    if hint is i32Timedelta or hint is i64Timedelta:
        return lambda v: v if isinstance(v, datetime.timedelta) else hint.parse(_ms(v))
    if hint is TZAware:
        return _to_datetime
    entity = _entity_class(hint)
    if entity is not None:
        return lambda v: v if isinstance(v, entity) else build(entity, v)
    return lambda v: v


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=int(value))


def _to_datetime(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return value
    if int(value) < 0:  # Kafka's -1 = no timestamp; kio writes None as -1
        return None
    return datetime.datetime.fromtimestamp(int(value) / 1000, tz=datetime.UTC)


def millis(value: datetime.timedelta | int) -> int:
    """A kio duration field (or a plain int) in milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)
