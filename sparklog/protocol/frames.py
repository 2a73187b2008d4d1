"""Cutting a byte stream into Kafka's size-prefixed frames, for both sides of a connection
(`connection.ServerConnection`, `connection.ClientConnection`), without copying large frames
more than once: sans-IO, bounded by the largest frame a side accepts.
"""

from __future__ import annotations

import struct

_INT32 = struct.Struct(">i")


class ProtocolError(Exception):
    """The peer sent something that is not valid Kafka protocol; close the connection."""


#: The largest request a server connection receives into its reused buffer.
REUSED_REQUEST_BUFFER_BYTES = 2 << 20

#: A frame at least this large is received into its own buffer (with `recv_into` where the
#: caller can), not accumulated and then copied out.
DIRECT_FRAME_BYTES = 128 * 1024

#: A large frame's buffer starts this big and doubles as its bytes arrive, up to the frame's
#: declared size: memory follows the bytes received, not the size a peer claims (20
#: connections each declaring 100 MiB and sending 1 KiB took 1.5 GB when the declared size
#: was allocated at once).
FIRST_FRAME_BUFFER_BYTES = 64 * 1024


class FrameBuffer:
    """Accumulates bytes and cuts size-prefixed frames; a large frame gets a buffer of its own
    that `receive_buffer` exposes for `recv_into`, so its bytes are copied once (plus the
    doublings of a buffer that grows with them), or never."""

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
        # The large frame being received: `_frame_size` bytes declared, `_filled` of them in
        # `_frame` (whose length, its capacity, grows up to the declared size).
        self._frame: bytearray | None = None
        self._frame_size = 0
        self._filled = 0
        #: with `reuse_large`, large frames share one buffer: the caller must be done with a
        #: frame before it feeds more bytes (a client decodes each response at once)
        self._spare: bytearray | None = bytearray() if reuse_large else None
        #: a larger frame gets a buffer of its own, freed with it (None: reuse any size)
        self.reuse_max_bytes = reuse_max_bytes

    def feed(self, data: bytes | memoryview) -> None:
        if self._frame is not None:
            view = memoryview(data)
            take = min(len(view), self._frame_size - self._filled)
            self._reserve(self._filled + take)
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
            self._frame_size, self._filled = size, 0
            self._frame = self._large_buffer(size)
            self._reserve(available - 4)
            with memoryview(self._buf) as view:
                self._frame[: available - 4] = view[self._start + 4 :]
            self._filled = available - 4
            del self._buf[:]
            self._start = 0

    def _large_buffer(self, size: int) -> bytearray:
        """The buffer a frame of `size` starts in: the reused one when it may be, else a new
        one of `FIRST_FRAME_BUFFER_BYTES` (`_reserve` grows it as bytes arrive)."""
        if self._spare is not None and (
            self.reuse_max_bytes is None or size <= self.reuse_max_bytes
        ):
            return self._spare
        return bytearray(min(size, FIRST_FRAME_BUFFER_BYTES))

    def _reserve(self, needed: int) -> None:
        """Grow the frame's buffer to hold `needed` bytes: double it, at most to the frame's
        declared size, so what a connection holds stays within twice what it received."""
        frame = self._frame
        assert frame is not None and needed <= self._frame_size
        if needed <= len(frame):
            return
        capacity = min(self._frame_size, max(needed, 2 * len(frame), FIRST_FRAME_BUFFER_BYTES))
        grown = bytearray(capacity)
        with memoryview(frame) as old:
            grown[: self._filled] = old[: self._filled]
        if frame is self._spare:
            self._spare = grown  # fresh pages cost as much as a copy: keep them
        self._frame = grown

    def has_frame(self) -> bool:
        """Whether `next_frame` has something to say: a whole frame, or a bad size to refuse."""
        if self._frame is not None:
            return self._filled == self._frame_size
        available = len(self._buf) - self._start
        if available < 4:
            return False
        (size,) = _INT32.unpack_from(self._buf, self._start)
        return size < 0 or size > self.max_frame_bytes or available >= 4 + size

    def receive_buffer(self) -> memoryview | None:
        """Where the next bytes of a large frame go (for `recv_into`), or None. Its length is
        what the frame's buffer holds now; it grows (doubling) once that is filled."""
        if self._frame is None or self._filled == self._frame_size:
            return None
        if self._filled == len(self._frame):
            self._reserve(self._filled + 1)
        end = min(len(self._frame), self._frame_size)
        return memoryview(self._frame)[self._filled : end]

    def received(self, count: int) -> None:
        """`count` bytes were written into `receive_buffer()`."""
        self._filled += count

    def next_frame(self) -> memoryview | None:
        if self._frame is not None:
            if self._filled < self._frame_size:
                return None
            large, self._frame = self._frame, None
            # kio reads read-only buffers only
            return memoryview(large)[: self._frame_size].toreadonly()
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

    def close(self) -> None:
        """Drop every buffer (the connection is closed): nothing waits for a collection."""
        self._buf = bytearray()
        self._start = 0
        self._frame = None
        self._frame_size = self._filled = 0
        if self._spare is not None:
            self._spare = bytearray()

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._start + (self._filled if self._frame is not None else 0)

    @property
    def allocated_bytes(self) -> int:
        """Bytes of the buffers this holds (the reused one included), for tests and stats."""
        held = len(self._buf) + (len(self._spare) if self._spare is not None else 0)
        if self._frame is not None and self._frame is not self._spare:
            held += len(self._frame)
        return held

    @property
    def incomplete_frame_bytes(self) -> int:
        """Declared size (+4) of a frame whose header has arrived but not all of its body."""
        if self._frame is not None:
            return 4 + self._frame_size if self._filled < self._frame_size else 0
        available = len(self._buf) - self._start
        if available < 4:
            return 0
        (size,) = _INT32.unpack_from(self._buf, self._start)
        return 4 + size if 0 <= size <= self.max_frame_bytes and available < 4 + size else 0
