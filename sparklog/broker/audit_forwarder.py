"""A broker's audit sink: its events go to the driver's audit table (DESIGN D16).

A broker decides authorizations and authentications on its own listeners, but the audit table
has one writer, on the driver (`coordinator.audit_log`). So the broker's sink buffers events
(`BufferedAuditSink`: bounded by `audit.buffer.max.events`; when full, new events are dropped
and counted, never a request stalled) and a task on the broker's loop sends them in batches to
the coordinator in sparklog's AuditEvents request (`sparklog_apis`), on the same channel the
broker forwards group and transaction requests on (`CoordinatorChannel`). The request carries
how many events the broker dropped since its last accepted batch, so the gap lands in the
table too. While the coordinator cannot be reached, the batch in hand is retried every
`retry_backoff_ms` and newer events wait in the bounded buffer; a clean shutdown tries once
more to send what is left.

Thread-safety: `record` from any thread; `run` and `close` on the broker's loop.
"""

from __future__ import annotations

import asyncio
import logging

from kio.static.primitive import i32, i64

from sparklog.broker.coordinator_channel import CoordinatorChannel, CoordinatorUnreachableError
from sparklog.errors import error_for_code
from sparklog.protocol.sparklog_apis import AuditEventsRequest, audit_event_entry
from sparklog.security.audit import AuditEvent, BufferedAuditSink

logger = logging.getLogger(__name__)

#: events per AuditEvents request at most
MAX_BATCH = 1_000
#: how long to wait before sending again after the coordinator could not take a batch
RETRY_BACKOFF_MS = 1_000
#: how long a request may wait for the coordinator (a clean shutdown waits this at most)
REQUEST_TIMEOUT_S = 10.0


class ForwardingAuditSink(BufferedAuditSink):
    """Buffers a broker's audit events and sends them to the driver (see module doc)."""

    def __init__(
        self,
        node_id: int,
        channel: CoordinatorChannel,
        *,
        max_events: int,
        max_batch: int = MAX_BATCH,
        retry_backoff_ms: int = RETRY_BACKOFF_MS,
    ) -> None:
        super().__init__(max_events, wake=self._wake)
        self.node_id = node_id
        self.channel = channel
        self.max_batch = max_batch
        self.retry_backoff_ms = retry_backoff_ms
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wanted: asyncio.Event | None = None
        #: the batch being sent (kept until the coordinator took it) and its dropped count
        self._batch: list[AuditEvent] = []
        self._batch_dropped = 0
        #: events the coordinator took (statistics)
        self.sent = 0

    def _wake(self) -> None:
        loop, wanted = self._loop, self._wanted
        if loop is not None and wanted is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wanted.set)

    async def run(self) -> None:
        """Send batches as events arrive, until cancelled (a broker background task)."""
        self._loop = asyncio.get_running_loop()
        self._wanted = asyncio.Event()
        while True:
            if not self.buffered and not self._batch:
                await self._wanted.wait()
            self._wanted.clear()
            if not await self._send_batch():
                await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def close(self) -> None:
        """One last attempt to send what is buffered (a clean shutdown)."""
        while await self._send_batch():
            if not self.buffered and not self._batch:
                return

    async def _send_batch(self) -> bool:
        """Send the batch in hand (taking one from the buffer first if there is none): False
        when the coordinator could not take it (it stays in hand)."""
        if not self._batch:
            self._batch = self.drain(self.max_batch)
            self._batch_dropped += self.take_dropped()
        if not self._batch and not self._batch_dropped:
            return True
        request = AuditEventsRequest(
            node_id=i32(self.node_id),
            dropped=i64(self._batch_dropped),
            events=tuple(audit_event_entry(e) for e in self._batch),
        )
        try:
            response = await self.channel.send(request, timeout_s=REQUEST_TIMEOUT_S)
        except CoordinatorUnreachableError as e:
            logger.debug("audit events wait for the coordinator: %s", e)
            return False
        code = int(response.error_code)
        if code:
            # refused (not authorized as a broker): retrying would not help; say so, drop
            logger.error(
                "the coordinator refused %d audit events: %s",
                len(self._batch),
                error_for_code(code).__name__,
            )
            self.dropped += len(self._batch)
        else:
            self.sent += len(self._batch)
        self._batch, self._batch_dropped = [], 0
        return True
