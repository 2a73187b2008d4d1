"""Kafka framing as sans-IO state machines, one per side of a connection (h11's shape).

Feed bytes in with `receive_data`, pull whole messages out with `next_request` /
`next_response` (or `NEED_DATA`), and get bytes to send from `send_response` /
`send_request`. No sockets, no clocks: the asyncio server and the blocking client move bytes.

Two error kinds: `ProtocolError` means the peer broke the protocol (oversize or malformed
frame, unknown API): the server logs it and closes that connection only. Our own bugs assert.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Final

from sparklog.protocol import codec, stepwise
from sparklog.protocol.api_versions import ApiKey, VersionRange, is_supported
from sparklog.protocol.frame_check import check_request_frame_steps, check_response_frame

_INT32 = struct.Struct(">i")


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()

DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes
DEFAULT_MAX_RESPONSE_BYTES = 1 << 31 - 1


class ProtocolError(Exception):
    """The peer sent something that is not valid Kafka protocol; close the connection."""


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request. `body` is None for an ApiVersions request at a version we do not
    know: Kafka answers it with a v0 response carrying UNSUPPORTED_VERSION and its table."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    size_bytes: int


#: The largest request a server connection receives into its reused buffer.
REUSED_REQUEST_BUFFER_BYTES = 2 << 20

#: A frame at least this large is received into its own buffer (with `recv_into` where the
#: caller can), not accumulated and then copied out.
DIRECT_FRAME_BYTES = 128 * 1024


class _FrameBuffer:
    """Accumulates bytes and cuts size-prefixed frames; a large frame gets a buffer of its own
    that `receive_buffer` exposes for `recv_into`, so its bytes are copied once, or never."""

    def __init__(
        self,
        max_frame_bytes: int,
        *,
        reuse_large: bool = False,
        direct_frame_bytes: int = DIRECT_FRAME_BYTES,
        reuse_max_bytes: int | None = None,
    ) -> None:
        self._buf = bytearray()
        self._start = 0
        self.max_frame_bytes = max_frame_bytes
        #: an incomplete frame at least this large gets its own buffer
        self.direct_frame_bytes = direct_frame_bytes
        self._frame: memoryview | None = None  # the large frame being received
        self._filled = 0
        #: with `reuse_large`, large frames share one buffer: the caller must be done with a
        #: frame before it feeds more bytes (a client decodes each response at once)
        self._spare: bytearray | None = bytearray() if reuse_large else None
        #: a larger frame gets a buffer of its own, freed with it (None: reuse any size)
        self.reuse_max_bytes = reuse_max_bytes

    def feed(self, data: bytes | memoryview) -> None:
        if self._frame is not None:
            view = memoryview(data)
            take = min(len(view), len(self._frame) - self._filled)
            self._frame[self._filled : self._filled + take] = view[:take]
            self._filled += take
            if take == len(view):
                return
            data = view[take:]  # the frames after it wait in the buffer
        if self._start and self._start > len(self._buf) // 2:
            del self._buf[: self._start]
            self._start = 0
        self._buf += data
        self._promote()

    def _promote(self) -> None:
        """Give the first buffered frame a buffer of its own if it is large and incomplete, so
        the rest of it can be received straight there (`receive_buffer`)."""
        if self._frame is not None:
            return
        available = len(self._buf) - self._start
        if available < 4:
            return
        (size,) = _INT32.unpack_from(self._buf, self._start)
        if self.direct_frame_bytes <= size <= self.max_frame_bytes and available < 4 + size:
            self._frame = self._large_buffer(size)
            with memoryview(self._buf) as view:
                self._frame[: available - 4] = view[self._start + 4 :]
            self._filled = available - 4
            del self._buf[:]
            self._start = 0

    def has_frame(self) -> bool:
        """Whether `next_frame` has something to say: a whole frame, or a bad size to refuse."""
        if self._frame is not None:
            return self._filled == len(self._frame)
        available = len(self._buf) - self._start
        if available < 4:
            return False
        (size,) = _INT32.unpack_from(self._buf, self._start)
        return size < 0 or size > self.max_frame_bytes or available >= 4 + size

    def receive_buffer(self) -> memoryview | None:
        """Where the rest of a large frame goes (for `recv_into`), or None."""
        if self._frame is None or self._filled == len(self._frame):
            return None
        return self._frame[self._filled :]

    def received(self, count: int) -> None:
        """`count` bytes were written into `receive_buffer()`."""
        self._filled += count

    def next_frame(self) -> memoryview | None:
        if self._frame is not None:
            if self._filled < len(self._frame):
                return None
            frame, self._frame = self._frame, None
            return frame.toreadonly()  # kio reads read-only buffers only
        available = len(self._buf) - self._start
        if available < 4:
            return None
        (size,) = _INT32.unpack_from(self._buf, self._start)
        if size < 0 or size > self.max_frame_bytes:
            raise ProtocolError(
                f"frame of {size} bytes is outside [0, {self.max_frame_bytes}] "
                "(socket.request.max.bytes); closing the connection"
            )
        if available < 4 + size:
            self._promote()
            return None
        with memoryview(self._buf) as view:  # one copy (a bytearray slice would make two)
            frame = bytes(view[self._start + 4 : self._start + 4 + size])
        self._start += 4 + size
        return memoryview(frame)

    def _large_buffer(self, size: int) -> memoryview:
        if self._spare is None or (
            self.reuse_max_bytes is not None and size > self.reuse_max_bytes
        ):
            return memoryview(bytearray(size))
        if len(self._spare) < size:
            self._spare = bytearray(size)  # fresh pages cost as much as a copy: keep them
        return memoryview(self._spare)[:size]

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._start + (self._filled if self._frame is not None else 0)

    @property
    def incomplete_frame_bytes(self) -> int:
        """Declared size (+4) of a frame whose header has arrived but not all of its body."""
        if self._frame is not None:
            return 4 + len(self._frame) if self._filled < len(self._frame) else 0
        available = len(self._buf) - self._start
        if available < 4:
            return 0
        (size,) = _INT32.unpack_from(self._buf, self._start)
        return 4 + size if size >= 0 and available < 4 + size else 0


class ServerConnection:
    """The server side of one connection: bytes in, `Request`s out, responses to bytes."""

    def __init__(
        self,
        apis: dict[ApiKey, VersionRange] | Any,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        *,
        direct_frame_bytes: int = DIRECT_FRAME_BYTES,
    ) -> None:
        self.apis = apis
        # Large requests share one buffer: `next_request` decodes a frame before it returns,
        # and kio's decode copies what it keeps (a test holds it to that). Only requests of
        # usual sizes (max.request.size is 1 MiB) reuse it, so a connection that once sent a
        # huge one does not keep that much memory for as long as it stays open.
        self._frames = _FrameBuffer(
            max_request_bytes,
            reuse_large=True,
            direct_frame_bytes=direct_frame_bytes,
            reuse_max_bytes=REUSED_REQUEST_BUFFER_BYTES,
        )

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
        if not is_supported(self.apis, api_key, version):
            if api_key == ApiKey.API_VERSIONS:
                correlation_id = _INT32.unpack_from(frame, 4)[0] if len(frame) >= 8 else -1
                return Request(api_key, version, correlation_id, None, None, len(frame))
            name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else api_key
            raise ProtocolError(f"unsupported API {name} version {version}; closing the connection")
        try:
            yield from check_request_frame_steps(codec.request_schema(api_key, version), frame)
            header, body = codec.decode_request(frame)
        except Exception as e:  # kio raises assorted errors for malformed bytes
            raise ProtocolError(
                f"malformed {ApiKey(api_key).name} v{version} request: {e}"
            ) from None
        return Request(api_key, version, header.correlation_id, header.client_id, body, len(frame))

    def send_response(self, request: Request, body: Any) -> bytes:
        """Bytes of the response to `request` (the caller keeps per-connection order)."""
        return codec.encode_response(body, request.correlation_id)

    def send_response_steps(self, request: Request, body: Any) -> Generator[None, None, bytes]:
        """`send_response`, yielding between the array elements of a large response."""
        if isinstance(body, codec.EncodedBody):
            return codec.encode_response(body, request.correlation_id)
        return (yield from stepwise.encode_response_steps(body, request.correlation_id))


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
        self._frames = _FrameBuffer(max_response_bytes, reuse_large=True)
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
