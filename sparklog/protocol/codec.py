"""Kafka message (de)serialization through `kio`'s generated schemas.

A request frame is `int32 size | header | body`; the header version (v1 or v2 with tagged
fields) and the response header version (v0 or v1; ApiVersions always v0) follow the message's
flexible-version flag, which kio's schemas carry.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from functools import cache
from typing import Any, NamedTuple, cast

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import Entity, Payload

_INT32 = struct.Struct(">i")
_API_KEY_VERSION = struct.Struct(">hh")
_HEADER = struct.Struct(">ii")  # frame size, correlation id


@cache
def request_schema(api_key: int, version: int) -> type[Payload]:
    """kio's request class for (api_key, version); raises KeyError when kio lacks it."""
    from sparklog.protocol import sparklog_apis

    if (api_key, version) in sparklog_apis.REQUESTS:
        return sparklog_apis.REQUESTS[(api_key, version)]
    try:
        return load_request_schema(api_key, version)
    except Exception as e:
        raise KeyError(f"no request schema for api {api_key} v{version}") from e


@cache
def response_schema(api_key: int, version: int) -> type[Payload]:
    from sparklog.protocol import schema_fixes, sparklog_apis

    if (api_key, version) in sparklog_apis.RESPONSES:
        return sparklog_apis.RESPONSES[(api_key, version)]
    if (api_key, version) in schema_fixes.RESPONSES:
        return schema_fixes.RESPONSES[(api_key, version)]
    try:
        return load_response_schema(api_key, version)
    except Exception as e:
        raise KeyError(f"no response schema for api {api_key} v{version}") from e


def header_schema(schema: type[Payload]) -> Any:
    """The header class of a kio message class (a request header v1/v2 or a response header
    v0/v1, each with its own constructor). kio declares `__header_schema__` as an instance
    property (so that its subclasses may narrow it); on the class it is a class attribute."""
    return cast(Any, schema.__header_schema__)


@cache
def _reader(schema: type[Entity]):  # kio's Reader of that entity
    return entity_reader(schema)


@cache
def _writer(schema: type[Entity]):  # kio's Writer of that entity
    return entity_writer(schema)


def peek_api_key_and_version(frame: bytes | memoryview) -> tuple[int, int]:
    """The api key and version at the start of a request frame body."""
    if len(frame) < 4:
        raise ValueError("request shorter than its api key and version")
    return _API_KEY_VERSION.unpack_from(frame, 0)


def decode_request(frame: bytes | memoryview) -> tuple[Any, Any]:
    """(header, body) of a request frame (without its size prefix)."""
    api_key, version = peek_api_key_and_version(frame)
    schema = request_schema(api_key, version)
    header, offset = _reader(header_schema(schema))(frame, 0)
    # Bytes after the body are ignored, as Kafka's RequestContext does (librdkafka sends some).
    body, _size = _reader(schema)(frame, offset)
    return header, body


def decode_response(frame: bytes | memoryview, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, body) of a response frame (without its size prefix)."""
    schema = response_schema(api_key, version)
    header, offset = _reader(header_schema(schema))(frame, 0)
    body, _end = _reader(schema)(frame, offset)
    return header.correlation_id, body


def encode_request(body: Payload, correlation_id: int, client_id: str | None) -> bytes:
    """A size-prefixed request frame for a kio request entity."""
    schema = type(body)
    header_class = header_schema(schema)
    header = header_class(
        request_api_key=schema.__api_key__,
        request_api_version=schema.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _writer(header_class)(buf, header)
    _writer(schema)(buf, body)
    data = buf.getbuffer()
    _INT32.pack_into(data, 0, len(data) - 4)
    return bytes(data)


class EncodedBody(NamedTuple):
    """A response body a hot handler wrote itself, byte for byte what kio would write; the
    frame adds the response header (v1, with its empty tagged fields, when `flexible`)."""

    data: bytes
    flexible: bool
    #: the response's error codes counted (Kafka's `errorCounts`, for `ErrorsPerSec`), as
    #: the writer saw them; None: not counted
    error_counts: Mapping[int, int] | None = None


def encode_response(body: Payload | EncodedBody, correlation_id: int) -> bytes:
    """A size-prefixed response frame for a kio response entity (or an `EncodedBody`)."""
    if isinstance(body, EncodedBody):
        tagged = b"\0" if body.flexible else b""
        size = 4 + len(tagged) + len(body.data)
        return b"".join((_HEADER.pack(size, correlation_id), tagged, body.data))
    schema = type(body)
    header_class = header_schema(schema)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _writer(header_class)(buf, header_class(correlation_id=correlation_id))
    _writer(schema)(buf, body)
    data = buf.getbuffer()
    _INT32.pack_into(data, 0, len(data) - 4)
    return bytes(data)
