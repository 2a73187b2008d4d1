"""Clients on the simulated network: idempotent acks=all producers and a consumer.

A producer has one record in flight (max.in.flight.requests.per.connection=1) and retries it
with the same (producer id, sequence) until it is acknowledged, so a retry after a lost reply
is deduplicated by whichever leader holds the first copy. OUT_OF_ORDER_SEQUENCE (its previous
records are missing on the broker it reached: a zombie leader, or an unclean election) makes
it abandon that record and start over under a new producer id, as Kafka's producer bumps its
epoch. Leaders come from any broker's metadata, which may be stale.

The consumer reads every partition from offset 0 up to the HW, following leader changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from sparklog.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
)

from .checks import Ack, History
from .messages import (
    Fetch,
    FetchReply,
    MetadataReply,
    MetadataRequest,
    Produce,
    ProduceReply,
    TopicPartition,
)
from .settings import SimSettings
from .sim_network import Network, Node, Scheduler

#: Errors after which the leader is still the right one: retry without new metadata.
_SAME_LEADER = frozenset(
    {
        NotEnoughReplicasError.code,
        NotEnoughReplicasAfterAppendError.code,
        RequestTimedOutError.code,
    }
)


class ClientNode(Node):
    """Shared leader lookup: ask a random broker for its metadata."""

    def __init__(
        self,
        node_id: int,
        scheduler: Scheduler,
        network: Network,
        history: History,
        settings: SimSettings,
        brokers: Sequence[int],
    ) -> None:
        super().__init__(node_id, scheduler, network)
        self.history = history
        self.settings = settings
        self.brokers = tuple(brokers)
        self.leaders: dict[TopicPartition, int] = {}

    def refresh_leader(self, tp: TopicPartition, then: Callable[[], None]) -> None:
        broker = self.scheduler.rng.choice(self.brokers)
        on_reply = partial(self._on_metadata, tp, then)
        self.call(broker, MetadataRequest(), self.settings.request_timeout_ms, on_reply)

    def _on_metadata(
        self, tp: TopicPartition, then: Callable[[], None], reply: MetadataReply | None
    ) -> None:
        if reply is not None:
            for known, leader, _epoch in reply.leaders:
                self.leaders[known] = leader
        if self.leaders.get(tp, -1) < 0:
            self.set_timer(self.settings.retry_backoff_ms, self.refresh_leader, tp, then)
        else:
            then()


class ProducerNode(ClientNode):
    """An idempotent acks=all producer writing `name-<n>` values to one partition."""

    def __init__(
        self,
        node_id: int,
        scheduler: Scheduler,
        network: Network,
        history: History,
        settings: SimSettings,
        brokers: Sequence[int],
        tp: TopicPartition,
        next_producer_id: Callable[[], int],
    ) -> None:
        super().__init__(node_id, scheduler, network, history, settings, brokers)
        self.tp = tp
        self.next_producer_id = next_producer_id
        self.name = f"v{node_id}"

    def on_start(self) -> None:
        self.producing = True
        self.producer_id = self.next_producer_id()
        self.sequence = 0
        self.count = 0
        self.in_flight: tuple[int, int, str] | None = None
        self._next()

    def stop_producing(self) -> None:
        self.producing = False

    def _next(self) -> None:
        if not self.producing:
            return
        self.in_flight = (self.producer_id, self.sequence, f"{self.name}-{self.count}")
        self.count += 1
        self._send()

    def _send(self) -> None:
        leader = self.leaders.get(self.tp, -1)
        if leader < 0:
            self.refresh_leader(self.tp, self._send)
            return
        assert self.in_flight is not None
        request = Produce(self.tp, *self.in_flight)
        self.call(leader, request, self.settings.request_timeout_ms, self._on_reply)

    def _think(self) -> None:
        low, high = self.settings.producer_think_ms
        self.set_timer(self.scheduler.rng.randint(low, high), self._next)

    def _on_reply(self, reply: ProduceReply | None) -> None:
        assert self.in_flight is not None
        producer_id, sequence, value = self.in_flight
        if reply is not None and reply.error_code == 0:
            now = self.now_ms
            self.history.on_ack(Ack(self.tp, reply.offset, producer_id, sequence, value, now))
            self.sequence += 1
            self.in_flight = None
            self._think()
        elif reply is not None and reply.error_code == OutOfOrderSequenceNumberError.code:
            self.scheduler.note("producer %s: out of order at %s; new id", self.node_id, sequence)
            self.history.stats["producer_resets"] += 1
            self.producer_id = self.next_producer_id()
            self.sequence = 0
            self.in_flight = None
            self._think()
        else:
            if reply is None or reply.error_code not in _SAME_LEADER:
                self.leaders[self.tp] = -1
            self.set_timer(self.settings.retry_backoff_ms, self._send)


class ConsumerNode(ClientNode):
    """Reads each partition from 0 up to its leader's HW, forever."""

    def __init__(
        self,
        node_id: int,
        scheduler: Scheduler,
        network: Network,
        history: History,
        settings: SimSettings,
        brokers: Sequence[int],
        tps: Sequence[TopicPartition],
    ) -> None:
        super().__init__(node_id, scheduler, network, history, settings, brokers)
        self.tps = tuple(tps)

    def on_start(self) -> None:
        self.positions = dict.fromkeys(self.tps, 0)
        for tp in self.tps:
            self._poll(tp)

    def _poll(self, tp: TopicPartition) -> None:
        leader = self.leaders.get(tp, -1)
        if leader < 0:
            self.refresh_leader(tp, partial(self._poll, tp))
            return
        request = Fetch(tp, -1, -1, self.positions[tp])
        on_reply = partial(self._on_fetched, tp)
        self.call(leader, request, self.settings.request_timeout_ms, on_reply)

    def _on_fetched(self, tp: TopicPartition, reply: FetchReply | None) -> None:
        delay_ms = self.settings.consumer_poll_interval_ms
        if reply is None or reply.error_code:
            self.leaders[tp] = -1
            if reply is not None and reply.error_code == OffsetOutOfRangeError.code:
                self.history.stats["consumer_out_of_range"] += 1
                self.positions[tp] = 0  # auto.offset.reset=earliest
        elif reply.records:
            self.positions[tp] = reply.records[-1].offset + 1
            delay_ms = 0
        self.set_timer(delay_ms, self._poll, tp)
