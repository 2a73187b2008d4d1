"""Kafka requests built by name for the clients: `build_request(api_key, version, fields)`
turns a dict tree into the kio entity of that version, dropping fields the version lacks, so one
builder serves every negotiated version; `duration_ms` / `timestamp_ms` read kio's duration and
timestamp fields back as Kafka's plain milliseconds. (Split from `network`, which moves the
bytes: building a request needs no socket.)
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from kio.static.primitive import TZAware, i32Timedelta, i64Timedelta

from sparklog.protocol import codec


def build_request(api_key: int, version: int, fields: Mapping[str, Any]) -> Any:
    """The kio request entity of `api_key` at `version` from a dict tree of field values.

    Nested entities are dicts (or lists of dicts); `*_ms` durations are plain ints; fields the
    version does not have are dropped.
    """
    return _build(codec.request_schema(api_key, version), fields)


def build_response(api_key: int, version: int, fields: Mapping[str, Any]) -> Any:
    """The kio response entity of `api_key` at `version` (for tests and fake brokers)."""
    return _build(codec.response_schema(api_key, version), fields)


@cache
def _field_converters(cls: type) -> dict[str, Callable[[Any], Any]]:
    """Per field of a kio entity, the function that turns a plain value into the field's type
    (worked out once per entity: introspecting type hints per value cost a Fetch request
    half a millisecond to build)."""
    hints = typing.get_type_hints(cls)
    return {f.name: _converter(hints[f.name]) for f in dataclasses.fields(cls)}


def _build(cls: type, fields: Mapping[str, Any]) -> Any:
    converters = _field_converters(cls)
    kwargs = {
        name: None if value is None else converters[name](value)
        for name, value in fields.items()
        if name in converters
    }
    return cls(**kwargs)


def _identity(value: Any) -> Any:
    return value


@cache
def _converter(hint: Any) -> Callable[[Any], Any]:
    """A plain value (dict, list, int ms) -> the kio type `hint` names; None stays None."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in args if a is not type(None))
        args = typing.get_args(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        entity = hint
        return lambda v: _build(entity, v) if isinstance(v, Mapping) else v
    if typing.get_origin(hint) is tuple:
        item = args[0]
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            return lambda v: tuple(_build(item, x) for x in v)
        return tuple
    if hint is i32Timedelta or hint is i64Timedelta:
        duration = hint
        return lambda v: duration.parse(datetime.timedelta(milliseconds=v))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint  # kio's ErrorCode
    if hint is TZAware:
        return lambda v: (
            (None if v < 0 else datetime.datetime.fromtimestamp(v / 1000, datetime.UTC))
            if isinstance(v, int)
            else v
        )
    return _identity


def duration_ms(value: Any) -> int:
    """A kio duration (timedelta) or int as milliseconds."""
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def timestamp_ms(value: Any) -> int:
    """A kio timestamp (datetime or None) or int as epoch milliseconds; -1 when absent."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)
