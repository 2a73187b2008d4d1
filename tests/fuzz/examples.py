"""A plausible request of every API and version a server accepts, built from kio's schema by
introspection: one element in every array, names pointing at one topic, small numbers, a real
record batch where records go. Mutating these reaches each handler's decoding and checks, not
just the frame parser (`tests/integration/test_wire_fuzz.py`, `tests/fuzz/seeds.py`)."""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import TZAware, i32Timedelta, i64Timedelta

from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.records import SimpleRecord, build_batch

_NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def example_request(api: ApiKey, version: int, topic: str) -> Any:
    """A kio request body of `api` at `version` whose names point at `topic`."""
    cls = codec.request_schema(api, version)
    return kio_build.build(cls, _example(cls, topic))


def example_response_frames(
    apis: Mapping[ApiKey, tuple[int, int]], topic: str
) -> list[tuple[ApiKey, int, bytes]]:
    """(api, version, size-prefixed response frame, correlation id 1) for every version."""
    out = []
    for api, (low, high) in sorted(apis.items()):
        for version in range(low, high + 1):
            cls = codec.response_schema(api, version)
            body = kio_build.build(cls, _example(cls, topic))
            out.append((api, version, codec.encode_response(body, 1)))
    return out


def example_frames(
    apis: Mapping[ApiKey, tuple[int, int]], topic: str
) -> list[tuple[ApiKey, int, bytes]]:
    """(api, version, size-prefixed frame) for every version of every API in `apis`."""
    out = []
    for api, (low, high) in sorted(apis.items()):
        for version in range(low, high + 1):
            body = example_request(api, version, topic)
            out.append((api, version, codec.encode_request(body, 1, "fuzz")))
    return out


#: The enum fields of the ACL APIs, as a topic READ ALLOW ACL: 0 is UNKNOWN, which Kafka's
#: request parsing refuses by closing the connection, so a plausible request never has it.
_ACL_CODES = {
    "resource_type": 2,
    "resource_type_filter": 2,
    "resource_pattern_type": 3,
    "pattern_type_filter": 3,
    "operation": 3,
    "permission_type": 3,
}


def _example(cls: type, topic: str) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    values = {f.name: _value(f.name, hints[f.name], topic) for f in dataclasses.fields(cls)}
    if "_acls." in cls.__module__ and "response" not in cls.__module__:
        values.update({k: v for k, v in _ACL_CODES.items() if k in values})
    return values


def _value(name: str, hint: Any, topic: str) -> Any:
    supertype = getattr(hint, "__supertype__", None)  # typing.NewType: TopicName, GroupId...
    if supertype is not None:
        return _value(name, supertype, topic) if hint.__name__ != "TopicName" else topic
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _value(name, args[0], topic) if len(args) == 1 else None
    if origin is tuple:
        (item,) = typing.get_args(hint)[:1]
        return [_value(name, item, topic)]
    if dataclasses.is_dataclass(hint):
        return _example(hint, topic)
    if hint is ErrorCode:
        return 0
    if hint in (i32Timedelta, i64Timedelta):
        return 100
    if hint is TZAware:
        return _NOW
    if hint is bool:
        return False
    if hint is uuid.UUID:
        return uuid.UUID(int=0)
    if hint is bytes:
        if name == "records":
            return build_batch([SimpleRecord(b"fuzz", b"k", 1_700_000_000_000)])
        return b""
    if isinstance(hint, type) and issubclass(hint, str):
        topical = hint.__name__ == "TopicName" or name in ("topic", "topic_name", "resource_name")
        return topic if topical else "fuzz"
    if isinstance(hint, type) and issubclass(hint, int):
        return 1 if name in ("count", "partitions", "replication_factor", "acks") else 0
    if isinstance(hint, type) and issubclass(hint, float):  # a quota value (client quota APIs)
        return 1024.0
    return None
