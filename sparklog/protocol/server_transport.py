"""One server connection's transport side: `RequestProtocol`, which receives a connection's
bytes straight into its `ServerConnection` (and `KafkaServer._serve_connection` drives it), and
`send_file_response`, which writes a response whose record data are file ranges (Fetch's
`FileResponse`). `sparklog.protocol.server.KafkaServer` accepts the connections and serves
their requests with these.

File ranges go by `sendfile` on plaintext connections. Through TLS they cannot (the kernel
would send the bytes unencrypted): over TLS the ranges are read and written through the TLS
transport in pieces, as Kafka turns zero-copy off for SSL channels
(`SslTransportLayer.transferFrom`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping
from typing import Protocol

from sparklog.protocol import cooperative, file_response
from sparklog.protocol.api_versions import ApiKey, VersionRange
from sparklog.protocol.connection import Request, ServerConnection
from sparklog.protocol.file_response import FileResponse
from sparklog.protocol.request_queue import MemoryPool
from sparklog.protocol.sasl_authenticator import SaslServerAuthenticator
from sparklog.security.sasl.enabled import SaslServerConfig
from sparklog.security.session import ANONYMOUS, SecurityProtocol

#: Between requests a connection reads this much at a time, so a large request's first read
#: holds little of its body: the rest goes by `recv_into` straight into the request's own
#: buffer (any request of `_DIRECT_REQUEST_BYTES` or more gets one), as Kafka reads the size
#: and then the request into a buffer of that size.
_FIRST_READ_BYTES = 8 * 1024
_DIRECT_REQUEST_BYTES = 16 * 1024
#: Responses are written without awaiting `drain()` until this much waits in the transport
#: (asyncio's default high-water mark): an awaited drain per response cost a task and a timer.
DRAIN_ABOVE_BYTES = 64 * 1024
#: Over TLS, a response's file ranges are read and written in pieces of at most this size.
_TLS_FILE_CHUNK_BYTES = 1 << 20


def wall_clock_ms() -> int:
    """Wall-clock milliseconds: SASL session and token expiry times are wall-clock."""
    return int(time.time() * 1000)


class ServingListener(Protocol):
    """What a connection reads of the `server.KafkaServer` that accepted it (named here, not
    imported: the server imports this module)."""

    @property
    def apis(self) -> Mapping[ApiKey, VersionRange]: ...
    @property
    def max_request_bytes(self) -> int: ...
    @property
    def listener_name(self) -> str: ...
    @property
    def security_protocol(self) -> SecurityProtocol: ...
    @property
    def sasl(self) -> SaslServerConfig | None: ...
    @property
    def memory_pool(self) -> MemoryPool: ...

    async def _serve_connection(
        self, protocol: RequestProtocol, writer: asyncio.StreamWriter
    ) -> None: ...


class RequestProtocol(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """One connection's bytes, received straight into its `ServerConnection`: the rest of a
    large request frame lands in the frame's own buffer by `recv_into`, with no copy on the
    way (a stream reader copied each request three times). It reads only while the connection
    task waits for bytes and no whole request is waiting, as Kafka mutes a channel while a
    request is handled, and `queued.max.request.bytes` gates reads as before."""

    def __init__(self, server: ServingListener, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(
            asyncio.StreamReader(loop=loop),
            lambda _reader, writer: server._serve_connection(self, writer),
            loop=loop,
        )
        #: the connection's SASL authenticator (SASL listeners only)
        self.sasl = (
            SaslServerAuthenticator(server.sasl, wall_clock_ms())
            if server.sasl is not None
            else None
        )
        self.conn = ServerConnection(
            server.apis,
            server.max_request_bytes,
            direct_frame_bytes=_DIRECT_REQUEST_BYTES,
            listener_name=server.listener_name,
            security_protocol=server.security_protocol,
            # PLAINTEXT: ANONYMOUS at once; SSL: once the handshake gave the certificate;
            # SASL_*: once the SASL exchange succeeded
            authenticated_as=(
                ANONYMOUS if server.security_protocol is SecurityProtocol.PLAINTEXT else None
            ),
            sasl=self.sasl,
        )
        self._pool_bounded = server.memory_pool.bounded
        self._scratch = memoryview(bytearray(_FIRST_READ_BYTES))
        self._into_frame = False
        self._waiter: asyncio.Future[None] | None = None
        self._got_bytes = False
        self._ended = False
        self._reading: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.conn.client_address, self.conn.client_port = peer[0], peer[1]
        super().connection_made(transport)
        assert isinstance(transport, asyncio.Transport)
        self._reading = transport
        transport.pause_reading()  # until the connection task asks for bytes

    def on_tls_handshake(self) -> None:
        """The TLS handshake starts: it drives the socket's reads itself."""
        self._reading = None

    def on_tls(self, transport: asyncio.BaseTransport) -> None:
        """The handshake ended: reads go through the TLS transport, paused until asked for
        (application bytes that came with the handshake's end are in already)."""
        assert isinstance(transport, asyncio.Transport)
        self._reading = transport
        transport.pause_reading()  # until the connection task asks for bytes

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self.conn.receive_buffer()
        self._into_frame = frame is not None
        return frame if frame is not None else self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self._into_frame:
            self.conn.received(nbytes)
        else:
            self.conn.receive_data(self._scratch[:nbytes])
        self._got_bytes = True
        if self._pool_bounded or self.conn.has_request():
            self._pause()
        self._wake()

    def eof_received(self) -> bool | None:
        self._ended = True
        self._wake()
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = True
        self._wake()
        super().connection_lost(exc)

    async def receive(self) -> bool:
        """Read until some bytes arrive; False once the peer is gone and nothing came."""
        if self._ended:
            return False
        self._got_bytes = False
        self._waiter = asyncio.get_running_loop().create_future()
        if self._reading is not None:
            self._reading.resume_reading()
        try:
            await self._waiter
        finally:
            self._waiter = None
        return self._got_bytes or not self._ended

    def _pause(self) -> None:
        if self._reading is not None:
            self._reading.pause_reading()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


async def send_file_response(
    writer: asyncio.StreamWriter, conn: ServerConnection, request: Request, response: FileResponse
) -> None:
    """Write a response's bytes, and send its file ranges with sendfile, in order."""
    loop = asyncio.get_running_loop()
    try:
        frame = await cooperative.complete(conn.send_response_steps(request, response.body))
        flexible = bool(type(response.body).__flexible__)
        sock = writer.transport.get_extra_info("socket")
        tls = writer.transport.get_extra_info("sslcontext") is not None
        for piece in file_response.pieces(frame, response.records, flexible):
            if isinstance(piece, bytes):
                writer.write(piece)
                continue
            if tls:  # no sendfile through TLS (module doc): read the range, write it
                await _write_file_range(writer, piece.file.fileno(), piece.position, piece.size)
                continue
            sent = 0
            if sock is not None and not writer.transport.get_write_buffer_size():
                # most ranges fit the socket buffer: one call, no trip through the loop
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    sent = os.sendfile(
                        sock.fileno(), piece.file.fileno(), piece.position, piece.size
                    )
            if sent < piece.size:
                await writer.drain()
                await loop.sendfile(
                    writer.transport, piece.file, piece.position + sent, piece.size - sent
                )
    finally:
        response.close()


async def _write_file_range(
    writer: asyncio.StreamWriter, fd: int, position: int, size: int
) -> None:
    """Copy `size` bytes at `position` of `fd` through the (TLS) transport, chunk by chunk."""
    end = position + size
    while position < end:
        chunk = os.pread(fd, min(_TLS_FILE_CHUNK_BYTES, end - position), position)
        if not chunk:
            raise EOFError(f"file range ends {end - position} bytes early")
        writer.write(chunk)
        position += len(chunk)
        if writer.transport.get_write_buffer_size() > DRAIN_ABOVE_BYTES:
            await writer.drain()
