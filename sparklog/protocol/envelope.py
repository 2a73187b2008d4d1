"""Kafka's Envelope (API 58, KIP-590): a request forwarded by a broker on behalf of a client.

A Kafka broker forwards admin requests to the controller inside an Envelope carrying the
client's serialized request (header included: correlation id, client id), the client's
principal and its address, so the receiver acts as if the client had asked it. sparklog's
brokers forward group and transaction requests to the driver's coordinator the same way: the
coordinator sees the real client id (classic member ids are `<client id>-<uuid>`) and client
host (DescribeGroups' `client_host`), and answers with the serialized response, which the
broker hands to the client unchanged.

Sans-IO helpers, both sides: `wrap` (broker), `unwrap` and `response_data` (coordinator),
`inner_body` / `decode_inner` (broker).
"""

from __future__ import annotations

import ipaddress
import struct
from typing import Any

from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.schema.errors import ErrorCode

from sparklog.errors import InvalidRequestError, UnsupportedVersionError
from sparklog.protocol import codec
from sparklog.protocol.api_versions import ApiKey, VersionRange, is_supported
from sparklog.protocol.connection import Request
from sparklog.security.session import KafkaPrincipal, Session

_INT32 = struct.Struct(">i")

#: The principal of an unauthenticated client (Kafka's `KafkaPrincipal.ANONYMOUS`). sparklog
#: serializes principals as their `type:name` text (Kafka's `KafkaPrincipalSerde` writes a
#: versioned `DefaultPrincipalData`; only sparklog's own coordinator reads these).
ANONYMOUS_PRINCIPAL = b"User:ANONYMOUS"


def principal_bytes(session: Session) -> bytes:
    """The client's principal as an Envelope carries it."""
    return str(session.principal).encode()


def principal_of(envelope: Any) -> KafkaPrincipal:
    """The client's principal an Envelope request carries; `EnvelopeError` (INVALID_REQUEST)
    when it is not `type:name` text: the coordinator then serves nothing under a guess."""
    raw = bytes(envelope.request_principal or b"")
    try:
        kind, sep, name = raw.decode().partition(":")
    except UnicodeDecodeError:
        sep = ""
    if not sep or not kind or not name:
        raise EnvelopeError(
            InvalidRequestError.code, "Envelope: request_principal is not type:name text"
        )
    return KafkaPrincipal(kind, name)


class EnvelopeError(Exception):
    """An Envelope the coordinator cannot open; `code` goes in its response's error_code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def client_address(client_host: str) -> bytes:
    """The raw address bytes Kafka puts in `client_host_address` ("/127.0.0.1" -> 4 bytes)."""
    host = client_host.lstrip("/")
    if not host:
        return b""
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return host.encode()


def client_host_of(address: bytes) -> str:
    """The "/a.b.c.d" form DescribeGroups answers, from `client_host_address` bytes."""
    if not address:
        return ""
    if len(address) in (4, 16):
        return f"/{ipaddress.ip_address(bytes(address))}"
    return f"/{bytes(address).decode(errors='replace')}"


def wrap(
    request: Request, client_host: str, principal: bytes = ANONYMOUS_PRINCIPAL
) -> EnvelopeRequest:
    """The Envelope forwarding `request`: its bytes as the client sent them (`Request.raw`,
    KIP-590), or re-encoded with the client's own header when they were not kept."""
    data = request.raw
    if data is None:
        data = codec.encode_request(request.body, request.correlation_id, request.client_id)[4:]
    return EnvelopeRequest(
        request_data=data,
        request_principal=principal,
        client_host_address=client_address(client_host),
    )


def unwrap(envelope: Any, apis: dict[ApiKey, VersionRange] | Any) -> tuple[Request, str]:
    """(the forwarded request, its client's host) of an Envelope request body; raises
    `EnvelopeError` for a request the receiver does not serve or cannot decode."""
    frame = memoryview(bytes(envelope.request_data)).toreadonly()
    try:
        api_key, version = codec.peek_api_key_and_version(frame)
    except ValueError as e:
        raise EnvelopeError(InvalidRequestError.code, f"Envelope: {e}") from None
    if api_key in (ApiKey.ENVELOPE, ApiKey.API_VERSIONS) or not is_supported(
        apis, api_key, version
    ):
        raise EnvelopeError(
            UnsupportedVersionError.code,
            f"Envelope: api {api_key} v{version} is not forwarded here",
        )
    try:
        header, body = codec.decode_request(frame)
    except Exception as e:  # noqa: BLE001 - kio raises assorted errors for malformed bytes
        raise EnvelopeError(
            InvalidRequestError.code, f"Envelope: malformed api {api_key} v{version}: {e}"
        ) from None
    inner = Request(api_key, version, header.correlation_id, header.client_id, body, len(frame))
    return inner, client_host_of(bytes(envelope.client_host_address or b""))


def response_data(inner: Request, body: Any) -> bytes:
    """The serialized response to a forwarded request (header and body, no size prefix)."""
    return codec.encode_response(body, inner.correlation_id)[4:]


def envelope_response(data: bytes | None, error_code: int = 0) -> EnvelopeResponse:
    return EnvelopeResponse(response_data=data, error_code=ErrorCode(error_code))


def _flexible_response(inner: Request) -> bool:
    return bool(codec.response_schema(inner.api_key, inner.api_version).__flexible__)


def inner_body(inner: Request, data: bytes) -> codec.EncodedBody:
    """The forwarded response's body, ready to send to the client without decoding it: the
    response header (correlation id, and an empty tagged-field section when flexible) is
    written again by the client's connection."""
    flexible = _flexible_response(inner)
    (correlation_id,) = _INT32.unpack_from(data, 0)
    if correlation_id != inner.correlation_id or (flexible and data[4] != 0):
        return codec.EncodedBody(*_reencoded(inner, data, flexible))
    return codec.EncodedBody(bytes(data[5 if flexible else 4 :]), flexible)


def _reencoded(inner: Request, data: bytes, flexible: bool) -> tuple[bytes, bool]:
    """A response whose header holds something unexpected (tagged fields): decode and encode
    it again, so the client gets its own correlation id and a plain header."""
    body = decode_inner(inner, data)
    frame = codec.encode_response(body, inner.correlation_id)
    return frame[9 if flexible else 8 :], flexible


def decode_inner(inner: Request, data: bytes) -> Any:
    """The forwarded response as a kio body (for a broker that edits it: FindCoordinator)."""
    _correlation_id, body = codec.decode_response(
        memoryview(bytes(data)).toreadonly(), inner.api_key, inner.api_version
    )
    return body
