"""Kafka framing as sans-IO state machines, one per side of a connection (h11's shape).

Feed bytes in with `receive_data`, pull whole messages out with `next_request` /
`next_response` (or `NEED_DATA`), and get bytes to send from `send_response` /
`send_request`. No sockets, no clocks: the asyncio server and the blocking client move bytes.

Two error kinds: `ProtocolError` means the peer broke the protocol (oversize or malformed
frame, unknown API): the server logs it and closes that connection only. Our own bugs assert.

A server connection has a state (Kafka's `ChannelState`): PRE_AUTHENTICATION until its peer
is authenticated, then AUTHENTICATED. Before authentication only ApiVersions and the SASL
handshake APIs are accepted (KIP-43: Kafka's `SaslServerAuthenticator` closes a connection
that sends anything else). A PLAINTEXT listener authenticates every connection as
`User:ANONYMOUS` when it opens (Kafka's plaintext transport), so it is AUTHENTICATED from its
first byte; an SSL listener's connection is authenticated when its TLS handshake ends, as
its certificate's mapped subject or `User:ANONYMOUS` (`security.principal`). Each
request carries a `RequestContext`: the connection's `Session` (listener, security protocol,
principal, client id and address) and what the request pipeline decides for it.
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from sparklog.protocol import codec, stepwise
from sparklog.protocol.api_versions import (
    FORWARDED_TO_COORDINATOR_APIS,
    SASL_APIS_VERSIONS,
    ApiKey,
    VersionRange,
    is_supported,
)
from sparklog.protocol.frame_check import check_request_frame_steps, check_response_frame
from sparklog.protocol.frames import (
    DIRECT_FRAME_BYTES,
    REUSED_REQUEST_BUFFER_BYTES,
    FrameBuffer,
    ProtocolError,
)
from sparklog.security.session import (
    ANONYMOUS,
    LOCAL_SESSION,
    KafkaPrincipal,
    SecurityProtocol,
    Session,
)

if TYPE_CHECKING:
    from sparklog.security.audit import AuditSink
    from sparklog.security.authorizer import Authorizer

_INT32 = struct.Struct(">i")


class _NeedData(enum.Enum):
    """A one-member enum, so that `x is not NEED_DATA` narrows `x` for the type checker."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData.NEED_DATA

DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes


@dataclass(slots=True)
class RequestContext:
    """Per request: who sent it (`session`) and what the request pipeline decided for it
    (`sparklog.protocol.pipeline`: the authorizer to answer through, the throttle time every
    response carries). The pipeline's stages write the decisions; response builders read them."""

    session: Session = LOCAL_SESSION
    #: set by the pipeline's authorize stage; None: no authorizer (everything allowed)
    authorizer: Authorizer | None = None
    #: set by the pipeline's throttle stage (quotas); the response's `throttle_time_ms`
    throttle_time_ms: int = 0
    #: set by the pipeline's authorize stage: where denials (and, with `audit.log.allowed`,
    #: grants) are reported; None: the log only (`sparklog.security.audit.LOG_ONLY`)
    audit: AuditSink | None = None
    #: whether allowed decisions are reported too (`audit.log.allowed`)
    audit_allowed: bool = False
    #: the node deciding (broker id, controller or coordinator node id), for audit events
    node_id: int = -1
    #: `time.monotonic_ns()` when the server had the whole request (0: built in-process);
    #: the measure stage's RequestQueueTimeMs / TotalTimeMs start here
    received_ns: int = 0
    #: the measure stage's stamps: the handler started, the handler (and the stages after
    #: it) finished; `remote_ns` is the part of the handler's time spent waiting on others
    #: (purgatory, the controller, replicas), which such waits add to (Kafka's RemoteTimeMs)
    dequeued_ns: int = 0
    handled_ns: int = 0
    remote_ns: int = 0
    #: set by a stage before the handler (the throttle stage, for a client with a request
    #: quota, KIP-124): count the event-loop time the handler holds the loop for this
    #: request into `handler_ns` (loop time, not wall time: waiting in a purgatory is free)
    time_handler: bool = False
    handler_ns: int = 0
    #: set by the throttle stage: a Fetch's `max_bytes` is capped to what fits in the
    #: client's quota window (Kafka's `getMaxValueInQuotaWindow`); None: no cap
    fetch_max_bytes_cap: int | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request. `body` is None for an ApiVersions request at a version we do not
    know: Kafka answers it with a v0 response carrying UNSUPPORTED_VERSION and its table.

    `raw` is the frame as received (header and body, no size prefix) for the APIs a broker
    forwards to the coordinator (`FORWARDED_TO_COORDINATOR_APIS`), so its Envelope carries the
    client's bytes as Kafka's `ForwardingManager` does, not a re-encoding; None for others."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    size_bytes: int
    context: RequestContext = field(default_factory=RequestContext)
    raw: bytes | None = None

    @property
    def session(self) -> Session:
        """Who sent this request (principal, listener, client id and address)."""
        return self.context.session


class ConnectionState(enum.Enum):
    """A server connection's authentication state (Kafka's `ChannelState`, the states a
    request can arrive in)."""

    PRE_AUTHENTICATION = "pre-authentication"
    AUTHENTICATED = "authenticated"


#: The legal transitions; a missing entry is a bug (re-authentication, KIP-368, stays
#: AUTHENTICATED while the new handshake runs).
_TRANSITIONS: Final = {
    ConnectionState.PRE_AUTHENTICATION: frozenset({ConnectionState.AUTHENTICATED}),
    ConnectionState.AUTHENTICATED: frozenset(),
}

#: The APIs a connection may send before it is authenticated (KIP-43).
PRE_AUTHENTICATION_APIS: Final = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)


#: The api key a raw SASL token (after SaslHandshake v0, no request header) is carried under
#: in a `Request` whose body is the token's bytes: outside int16, so no request's api key
#: (the fuzzer sent api key -1 before authentication) can pass for a token.
RAW_TOKEN_API_KEY: Final = 1 << 16


class SaslExchange(Protocol):
    """What a connection needs of its SASL authenticator
    (`protocol.sasl_authenticator.SaslServerAuthenticator`)."""

    #: after SaslHandshake v0 the next frames are raw tokens, not requests
    raw_tokens: bool

    @property
    def max_receive_size(self) -> int:
        """`sasl.server.max.receive.size`: the largest frame before authentication."""
        ...


class ServerConnection:
    """The server side of one connection: bytes in, `Request`s out, responses to bytes."""

    def __init__(
        self,
        apis: Mapping[ApiKey, VersionRange],
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        *,
        direct_frame_bytes: int = DIRECT_FRAME_BYTES,
        listener_name: str = "PLAINTEXT",
        security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT,
        client_address: str = "",
        client_port: int = -1,
        authenticated_as: KafkaPrincipal | None = ANONYMOUS,
        sasl: SaslExchange | None = None,
    ) -> None:
        """`authenticated_as`: the principal of a transport with no handshake (PLAINTEXT:
        `User:ANONYMOUS`, authenticated as the connection opens); None keeps the connection
        PRE_AUTHENTICATION until `authenticated()` (SSL: once the TLS handshake gave the
        peer's certificate; SASL: once the SASL exchange succeeded). `sasl`: a SASL_PLAINTEXT /
        SASL_SSL connection's authenticator (it then starts PRE_AUTHENTICATION whatever
        `authenticated_as` says; `protocol.sasl_authenticator.sasl_reply` routes requests to
        it)."""
        if security_protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL):
            if sasl is None:
                raise ValueError(
                    f"listener {listener_name} uses {security_protocol.name} but has no SASL "
                    "server side (sasl.enabled.mechanisms and the listener's JAAS configs)"
                )
            authenticated_as = None
        elif sasl is not None:
            raise ValueError(
                f"listener {listener_name} is {security_protocol.name}: it has no SASL handshake"
            )
        self.sasl = sasl
        self.apis = apis
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.client_address = client_address
        self.client_port = client_port
        self.state = ConnectionState.PRE_AUTHENTICATION
        self.principal: KafkaPrincipal | None = None
        self._session: Session | None = None  # of the last client id seen
        if authenticated_as is not None:
            self.authenticated(authenticated_as)
        # Large requests share one buffer: `next_request` decodes a frame before it returns,
        # and kio's decode copies what it keeps (a test holds it to that). Only requests of
        # usual sizes (max.request.size is 1 MiB) reuse it, so a connection that once sent a
        # huge one does not keep that much memory for as long as it stays open.
        self._frames = FrameBuffer(
            max_request_bytes,
            reuse_large=True,
            direct_frame_bytes=direct_frame_bytes,
            reuse_max_bytes=REUSED_REQUEST_BUFFER_BYTES,
        )
        self._max_request_bytes = max_request_bytes
        if sasl is not None:  # sasl.server.max.receive.size until authenticated (Kafka)
            self._frames.max_frame_bytes = min(max_request_bytes, sasl.max_receive_size)

    def authenticated(self, principal: KafkaPrincipal) -> None:
        """The peer proved it is `principal`: requests of every API are accepted from now."""
        self._transition(ConnectionState.AUTHENTICATED)
        self.principal = principal
        self._session = None
        if hasattr(self, "_frames"):
            self._frames.max_frame_bytes = self._max_request_bytes

    def _transition(self, state: ConnectionState) -> None:
        assert state in _TRANSITIONS[self.state], f"connection {self.state} -> {state}"
        self.state = state

    def session(self, client_id: str | None) -> Session:
        """The session of a request with `client_id` (one object while the id repeats)."""
        session = self._session
        if session is None or session.client_id != client_id:
            session = self._session = Session(
                principal=self.principal or ANONYMOUS,
                listener_name=self.listener_name,
                security_protocol=self.security_protocol,
                client_address=self.client_address,
                client_port=self.client_port,
                client_id=client_id,
            )
        return session

    def receive_data(self, data: bytes | memoryview) -> None:
        self._frames.feed(data)

    def receive_buffer(self) -> memoryview | None:
        """Where the rest of a large request goes (read it with `recv_into`), or None."""
        return self._frames.receive_buffer()

    def received(self, count: int) -> None:
        """`count` bytes were written into `receive_buffer()`."""
        self._frames.received(count)

    def has_request(self) -> bool:
        """Whether `next_request` has a whole request (or a bad frame size) to hand out."""
        return self._frames.has_frame()

    @property
    def incomplete_request_bytes(self) -> int:
        """Bytes the request being received will need in all (0 when none is part-way)."""
        return self._frames.incomplete_frame_bytes

    @property
    def allocated_bytes(self) -> int:
        """Bytes of receive buffers this connection holds now."""
        return self._frames.allocated_bytes

    def close(self) -> None:
        """Free the receive buffers at once (the connection is gone)."""
        self._frames.close()

    def next_request(self) -> Request | _NeedData:
        """The next whole request, or NEED_DATA. Raises ProtocolError on bad input."""
        steps = self.next_request_steps()
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                return stop.value

    def next_request_steps(self) -> Generator[None, None, Request | _NeedData]:
        """`next_request`, yielding once per array element its check walks: a server lets
        other connections run between the steps of a huge request. The frame may sit in the
        reused buffer: feed no bytes until this returned."""
        frame = self._frames.next_frame()
        if frame is None:
            return NEED_DATA
        try:
            api_key, version = codec.peek_api_key_and_version(frame)
        except ValueError as e:
            raise ProtocolError(str(e)) from None
        sasl = self.sasl
        if sasl is not None and sasl.raw_tokens:  # after SaslHandshake v0: a bare token
            return Request(
                RAW_TOKEN_API_KEY,
                0,
                -1,
                None,
                bytes(frame),
                len(frame),
                RequestContext(self.session(None)),
            )
        if self.state is not ConnectionState.AUTHENTICATED and (
            api_key not in PRE_AUTHENTICATION_APIS
        ):
            if sasl is not None:  # answered ILLEGAL_SASL_STATE, body never decoded
                correlation_id = _INT32.unpack_from(frame, 4)[0] if len(frame) >= 8 else -1
                context = RequestContext(self.session(None))
                return Request(api_key, version, correlation_id, None, None, len(frame), context)
            name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else api_key
            raise ProtocolError(
                f"unexpected {name} request before authentication (only ApiVersions and the "
                "SASL handshake come first); closing the connection"
            )
        if not is_supported(self.apis, api_key, version) and not is_supported(
            SASL_APIS_VERSIONS, api_key, version
        ):
            if api_key == ApiKey.API_VERSIONS:
                correlation_id = _INT32.unpack_from(frame, 4)[0] if len(frame) >= 8 else -1
                context = RequestContext(self.session(None))
                return Request(api_key, version, correlation_id, None, None, len(frame), context)
            name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else api_key
            raise ProtocolError(f"unsupported API {name} version {version}; closing the connection")
        try:
            yield from check_request_frame_steps(codec.request_schema(api_key, version), frame)
            header, body = codec.decode_request(frame)
        except Exception as e:  # kio raises assorted errors for malformed bytes
            raise ProtocolError(
                f"malformed {ApiKey(api_key).name} v{version} request: {e}"
            ) from None
        context = RequestContext(self.session(header.client_id))
        raw = _raw_frame(frame) if api_key in FORWARDED_TO_COORDINATOR_APIS else None
        return Request(
            api_key,
            version,
            header.correlation_id,
            header.client_id,
            body,
            len(frame),
            context,
            raw,
        )

    def send_response(self, request: Request, body: Any) -> bytes:
        """Bytes of the response to `request` (the caller keeps per-connection order)."""
        return codec.encode_response(body, request.correlation_id)

    def send_response_steps(self, request: Request, body: Any) -> Generator[None, None, bytes]:
        """`send_response`, yielding between the array elements of a large response."""
        if isinstance(body, codec.EncodedBody):
            return codec.encode_response(body, request.correlation_id)
        return (yield from stepwise.encode_response_steps(body, request.correlation_id))


def _raw_frame(frame: memoryview) -> bytes:
    """The bytes of `frame`: a usual-size frame already is a `bytes` of its own (kept, not
    copied); a large one sits in the reused buffer and is copied out."""
    whole = frame.obj
    if type(whole) is bytes and len(whole) == len(frame):
        return whole
    return bytes(frame)


@dataclass(frozen=True, slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    api_version: int
    expects_response: bool


class ClientConnection:
    """The client side: requests to bytes, bytes in, (correlation id, response) out.

    Kafka answers requests on a connection in order; `next_response` checks that. A Produce
    with acks=0 gets no response (`expects_response=False`).
    """

    def __init__(
        self, client_id: str | None = "sparklog", max_response_bytes: int = 1 << 30
    ) -> None:
        self.client_id = client_id
        self._frames = FrameBuffer(max_response_bytes, reuse_large=True)
        self._in_flight: deque[_InFlight] = deque()
        self._next_correlation_id = 0

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def send_request(self, body: Any, *, expects_response: bool = True) -> tuple[int, bytes]:
        """(correlation id, bytes to send) for a kio request entity."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (self._next_correlation_id + 1) & 0x7FFFFFFF
        schema = type(body)
        data = codec.encode_request(body, correlation_id, self.client_id)
        if expects_response:
            self._in_flight.append(
                _InFlight(correlation_id, schema.__api_key__, schema.__version__, True)
            )
        return correlation_id, data

    def receive_data(self, data: bytes) -> None:
        self._frames.feed(data)

    def receive_buffer(self) -> memoryview | None:
        """Where the rest of a large response goes (read it with `recv_into`), or None."""
        return self._frames.receive_buffer()

    def received(self, count: int) -> None:
        self._frames.received(count)

    def next_response(self) -> tuple[int, Any] | _NeedData:
        frame = self._frames.next_frame()
        if frame is None:
            return NEED_DATA
        if not self._in_flight:
            raise ProtocolError("response received with no request in flight")
        expected = self._in_flight.popleft()
        try:
            schema = codec.response_schema(expected.api_key, expected.api_version)
            check_response_frame(schema, frame)
            correlation_id, body = codec.decode_response(
                frame, expected.api_key, expected.api_version
            )
        except Exception as e:
            raise ProtocolError(f"malformed response to api {expected.api_key}: {e}") from None
        if correlation_id != expected.correlation_id:
            raise ProtocolError(
                f"response correlation id {correlation_id} but {expected.correlation_id} was next"
            )
        return correlation_id, body
