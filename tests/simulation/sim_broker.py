"""A broker on the simulated network: sparklog's sans-IO `Partition` and epoch cache, glued
the way `replica_manager.py` and `isr_manager.py` glue them, over simulated RPCs instead of
asyncio (the follower side, with `truncation_for`, is in sim_fetcher.py).

Theory of operation. A broker process registers with the controller, heartbeats, and
long-polls the metadata log into its own `MetadataImage`; after each batch it hands every
partition it hosts to `Partition.apply_registration` and acts on the events: BecameLeader
(stamp the epoch start in the epoch cache, stop fetching), BecameFollower (restart the fetch
state machine), HighWatermarkAdvanced (complete acks=all produces), IsrChangeProposed (queue
an AlterPartition; one request in flight, retried as `apply_isr_outcome` asks). As a leader
it appends idempotent produces, answers follower and consumer fetches (followers long-polled
up to replica.fetch.wait.max.ms), OffsetForLeaderEpoch and ListOffsets, and proposes ISR
shrinks on a timer.

The disk (`self.disk`: one `SimLog` per partition, and `clean_shutdown_epoch`, Kafka's
`.kafka_cleanshutdown`) survives a kill; everything else is rebuilt on start. The HW survives
through its checkpoint, flushed on a timer as Kafka does. An orderly stop (`_halt`) flushes every
log and writes the clean-shutdown epoch; a start takes it and sends it with the registration, so
the controller tells a clean restart from a crash or power loss (KIP-966).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from sparklog.broker.partition import (
    BecameFollower,
    BecameLeader,
    Event,
    HighWatermarkAdvanced,
    IsrChangeProposed,
    Partition,
    PartitionRegistration,
)
from sparklog.errors import (
    KafkaError,
    NetworkExceptionError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
)
from sparklog.metadata.alter_partition import IsrChange, IsrChangeOutcome
from sparklog.metadata.image import MetadataImage

from .checks import History
from .messages import (
    AlterPartition,
    AlterPartitionReply,
    Fetch,
    FetchReply,
    Heartbeat,
    ListOffsets,
    ListOffsetsReply,
    MetadataFetch,
    MetadataFetchReply,
    MetadataReply,
    MetadataRequest,
    OffsetForLeaderEpoch,
    OffsetForLeaderEpochReply,
    Produce,
    ProduceReply,
    RegisterBroker,
    RegisterReply,
    TopicPartition,
)
from .settings import Mutations, SimSettings
from .sim_fetcher import SimReplicaFetcher
from .sim_log import SimLog, SimRecord
from .sim_network import CONTROLLER_ID, Network, Node, Scheduler


@dataclass(slots=True, eq=False)
class PendingProduce:
    src: int
    correlation_id: int
    offset: int


class MaxHighWatermarkPartition(Partition):
    """Mutation: the HW is the largest LEO over the ISR (acks=all without replication)."""

    def _maybe_increment_high_watermark(self, leader_log_end_offset: int) -> list[Event]:
        if self.is_under_min_isr:
            return []
        offsets = [leader_log_end_offset]
        for b in self.maximal_isr:
            replica = self.remote_replicas.get(b)
            if replica is not None:
                offsets.append(min(replica.log_end_offset, leader_log_end_offset))
        new_hw = max(offsets)
        if new_hw <= self.high_watermark:
            return []
        self.high_watermark = new_hw
        return [HighWatermarkAdvanced(new_hw)]


class CommittedIsrPartition(Partition):
    """Mutation: the HW ignores a pending ISR expansion (no Kafka `maximalIsr`)."""

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.isr


class BrokerNode(Node):
    """One simulated broker process and its disk."""

    def __init__(
        self,
        broker_id: int,
        scheduler: Scheduler,
        network: Network,
        history: History,
        settings: SimSettings,
        mutations: Mutations,
        on_halt: Callable[[int], None],
    ) -> None:
        super().__init__(broker_id, scheduler, network)
        self.history = history
        self.settings = settings
        self.mutations = mutations
        self.on_halt = on_halt
        self.disk: dict[TopicPartition, SimLog] = {}
        self.clean_shutdown_epoch: int | None = None  # on the disk: survives a kill
        self._partition_class: type[Partition] = Partition
        if mutations.high_watermark_is_max:
            self._partition_class = MaxHighWatermarkPartition
        elif mutations.no_maximal_isr:
            self._partition_class = CommittedIsrPartition

    def __repr__(self) -> str:
        return f"BrokerNode({self.node_id}, up={self.up})"

    # -- life cycle -------------------------------------------------------------------------

    def on_start(self) -> None:
        self.scheduler.note("b%s starts (incarnation %s)", self.node_id, self.incarnation)
        self.broker_epoch = -1
        # Kafka's LogManager takes the marker away at start: a crash from now on is unclean
        self.previous_broker_epoch = self.clean_shutdown_epoch
        self.clean_shutdown_epoch = None
        self._session = 0
        self.shutting_down = False
        self.image = MetadataImage()
        self.partitions: dict[TopicPartition, Partition] = {}
        self.topic_ids: dict[TopicPartition, uuid.UUID] = {}
        self.fetcher = SimReplicaFetcher(self)
        self.pending_produce: dict[TopicPartition, list[PendingProduce]] = {}
        self.parked_fetches: dict[TopicPartition, list[tuple[int, int, Fetch]]] = {}
        self.alter_unsent: dict[TopicPartition, IsrChangeProposed] = {}
        self.alter_in_flight: dict[TopicPartition, IsrChangeProposed] | None = None
        self._alter_retry_scheduled = False
        self._register()
        self._fetch_metadata()
        s = self.settings
        self.set_timer(s.replica_lag_time_max_ms // 2, self._isr_expiration)
        self.set_timer(s.replica_high_watermark_checkpoint_interval_ms, self._checkpoint)
        self.set_timer(self._writeback_delay_ms(), self._writeback)

    def on_stop(self) -> None:
        self.scheduler.note("b%s stops", self.node_id)

    def begin_controlled_shutdown(self) -> None:
        """Ask the controller (next heartbeat) to move leaderships away; stop when it agrees."""
        self.scheduler.note("b%s begins a controlled shutdown", self.node_id)
        self.shutting_down = True

    def _halt(self, why: str) -> None:
        """An orderly stop (Kafka's BrokerServer.shutdown): logs flushed, marker written."""
        self.scheduler.note("b%s halts: %s", self.node_id, why)
        for log in self.disk.values():
            log.flush()
        if self.broker_epoch >= 0:
            self.clean_shutdown_epoch = self.broker_epoch
        self.stop()
        self.on_halt(self.node_id)

    # -- controller: registration, heartbeats, metadata ---------------------------------------

    def _register(self) -> None:
        incarnation_id = f"broker-{self.node_id}-incarnation-{self.incarnation}"
        previous = self.previous_broker_epoch
        self.call(
            CONTROLLER_ID,
            RegisterBroker(self.node_id, incarnation_id, -1 if previous is None else previous),
            self.settings.rpc_timeout_ms,
            self._on_registered,
        )

    def _on_registered(self, reply: RegisterReply | None) -> None:
        if reply is None or reply.error_code:
            self.set_timer(self.settings.registration_backoff_ms, self._register)
            return
        self.broker_epoch = reply.broker_epoch
        self._session += 1
        self._heartbeat(self._session)
        self._maybe_send_alter()

    def _heartbeat(self, session: int) -> None:
        if session != self._session:
            return
        request = Heartbeat(self.node_id, self.broker_epoch, self.image.offset, self.shutting_down)
        s = self.settings
        self.call(CONTROLLER_ID, request, s.rpc_timeout_ms, partial(self._on_heartbeat, session))
        self.set_timer(s.broker_heartbeat_interval_ms, self._heartbeat, session)

    def _on_heartbeat(self, session: int, reply: Any) -> None:
        if reply is None or session != self._session:
            return
        if reply.should_shut_down:
            self._halt(f"controller says shut down ({reply.error_message})")
        elif reply.error_code:
            self._session += 1  # registration gone: register again
            self.broker_epoch = -1
            self._register()

    def _fetch_metadata(self) -> None:
        timeout_ms = self.settings.metadata_max_wait_ms + self.settings.rpc_timeout_ms
        self.call(CONTROLLER_ID, MetadataFetch(self.image.offset), timeout_ms, self._on_metadata)

    def _on_metadata(self, reply: MetadataFetchReply | None) -> None:
        if reply is None:
            self.set_timer(self.settings.retry_backoff_ms, self._fetch_metadata)
            return
        if reply.base_offset == self.image.offset and reply.records:
            for record in reply.records:
                self.image.apply(record)
            self._publish()
        self._fetch_metadata()

    def _publish(self) -> None:
        """Kafka's BrokerMetadataPublisher -> ReplicaManager.applyDelta."""
        for name in self.image.topic_names():
            topic = self.image.topic(name)
            assert topic is not None
            for index in sorted(topic.partitions):
                r = topic.partitions[index]
                if self.node_id not in r.replicas:
                    continue
                tp = (name, index)
                partition = self.partitions.get(tp) or self._host(tp, topic.topic_id)
                registration = PartitionRegistration(
                    r.replicas, r.isr, r.leader, r.leader_epoch, r.partition_epoch
                )
                log = self.disk[tp]
                events = partition.apply_registration(
                    registration, self.wall_ms, log.log_end_offset
                )
                self._observe_epochs(tp, partition)
                self._apply_events(tp, events)

    def _host(self, tp: TopicPartition, topic_id: uuid.UUID) -> Partition:
        log = self.disk.setdefault(tp, SimLog())
        partition = self._partition_class(tp[0], tp[1], self.node_id)
        partition.min_insync_replicas = self.settings.min_insync_replicas
        log.high_watermark = min(log.checkpoint_high_watermark, log.log_end_offset)
        partition.reset_high_watermark(log.high_watermark)
        self.history.on_high_watermark(self.node_id, tp, log, 0, log.high_watermark, False)
        self.partitions[tp] = partition
        self.topic_ids[tp] = topic_id
        return partition

    def _observe_epochs(self, tp: TopicPartition, partition: Partition) -> None:
        epochs = (partition.leader_epoch, partition.partition_epoch)
        self.history.on_broker_partition(self.node_id, self.incarnation, tp, epochs)

    # -- partition events ---------------------------------------------------------------------

    def _apply_events(self, tp: TopicPartition, events: list[Event]) -> None:
        log = self.disk[tp]
        for event in events:
            if isinstance(event, HighWatermarkAdvanced):
                old, log.high_watermark = log.high_watermark, event.high_watermark
                self.history.on_high_watermark(self.node_id, tp, log, old, log.high_watermark, True)
            elif isinstance(event, BecameLeader):
                self.fetcher.stop(tp)
                latest = log.latest_epoch
                if latest is None or event.leader_epoch > latest:
                    log.epochs.assign(event.leader_epoch, log.log_end_offset)
                self.history.on_became_leader(self.node_id, tp, event.leader_epoch)
                self.scheduler.note(
                    "b%s leads %s in epoch %s", self.node_id, tp, event.leader_epoch
                )
            elif isinstance(event, BecameFollower):
                self.fetcher.start(tp, event.leader, event.leader_epoch)
            elif isinstance(event, IsrChangeProposed):
                self.scheduler.note("b%s proposes ISR %s for %s", self.node_id, event.isr, tp)
                self.alter_unsent[tp] = event
                self._maybe_send_alter()
        if events:
            self._check_pending_produce(tp)
            self._complete_parked_fetches(tp)

    def _isr_expiration(self) -> None:
        """Kafka's `isr-expiration` task, every replica.lag.time.max.ms / 2."""
        for tp, partition in list(self.partitions.items()):
            if partition.is_leader:
                lag_ms = self.settings.replica_lag_time_max_ms
                log_end = self.disk[tp].log_end_offset
                self._apply_events(tp, partition.maybe_shrink_isr(self.wall_ms, lag_ms, log_end))
        self.set_timer(self.settings.replica_lag_time_max_ms // 2, self._isr_expiration)

    def _checkpoint(self) -> None:
        for tp in self.partitions:
            log = self.disk[tp]
            log.checkpoint_high_watermark = log.high_watermark
        self.set_timer(
            self.settings.replica_high_watermark_checkpoint_interval_ms, self._checkpoint
        )

    def _writeback_delay_ms(self) -> int:
        low, high = self.settings.log_writeback_ms
        return self.scheduler.rng.randint(low, high)

    def _writeback(self) -> None:
        """The OS flushes dirty pages (Kafka leaves fsync to it by default)."""
        for log in self.disk.values():
            log.flush()
        self.set_timer(self._writeback_delay_ms(), self._writeback)

    # -- AlterPartition (isr_manager's AlterPartitionManager) ---------------------------------

    def _maybe_send_alter(self) -> None:
        if self.alter_in_flight is not None or not self.alter_unsent or self.broker_epoch < 0:
            return
        batch, self.alter_unsent = self.alter_unsent, {}
        self.alter_in_flight = batch
        changes = tuple(
            IsrChange(self.topic_ids[tp], tp[1], p.leader_epoch, p.partition_epoch, p.isr)
            for tp, p in batch.items()
        )
        request = AlterPartition(self.node_id, self.broker_epoch, changes)
        on_reply = partial(self._on_alter_reply, batch)
        self.call(CONTROLLER_ID, request, self.settings.rpc_timeout_ms, on_reply)

    def _on_alter_reply(
        self, batch: dict[TopicPartition, IsrChangeProposed], reply: AlterPartitionReply | None
    ) -> None:
        self.alter_in_flight = None
        failed = NetworkExceptionError.code if reply is None else reply.error_code
        by_key = {(o.topic_id, o.partition): o for o in (reply.outcomes if reply else ())}
        retry: dict[TopicPartition, IsrChangeProposed] = {}
        for tp, proposal in batch.items():
            key = (self.topic_ids[tp], tp[1])
            outcome = by_key.get(key) or IsrChangeOutcome(
                *key, failed or NetworkExceptionError.code
            )
            partition = self.partitions[tp]
            events, again = partition.apply_isr_outcome(
                proposal,
                outcome.error_code,
                leader_epoch=outcome.leader_epoch,
                isr=tuple(outcome.isr),
                partition_epoch=outcome.partition_epoch,
                leader_log_end_offset=self.disk[tp].log_end_offset,
            )
            self._observe_epochs(tp, partition)
            self._apply_events(tp, events)
            if again:
                retry[tp] = proposal
        if retry:
            self.set_timer(self.settings.alter_partition_backoff_ms, self._requeue_alter, retry)
        self._maybe_send_alter()

    def _requeue_alter(self, retry: dict[TopicPartition, IsrChangeProposed]) -> None:
        for tp, proposal in retry.items():
            self.alter_unsent.setdefault(tp, proposal)  # a newer proposal supersedes it
        self._maybe_send_alter()

    # -- leader: requests ---------------------------------------------------------------------

    def handle(self, src: int, correlation_id: int, body: Any) -> None:
        if isinstance(body, Fetch):
            self._on_fetch(src, correlation_id, body)
        elif isinstance(body, Produce):
            self._on_produce(src, correlation_id, body)
        elif isinstance(body, OffsetForLeaderEpoch):
            self.reply(src, correlation_id, self._end_offset_for(body))
        elif isinstance(body, ListOffsets):
            self.reply(src, correlation_id, self._list_offsets(body))
        elif isinstance(body, MetadataRequest):
            self.reply(src, correlation_id, self._metadata())
        else:
            raise AssertionError(f"broker got {body!r}")

    def _leader(self, tp: TopicPartition, current_leader_epoch: int = -1) -> Partition:
        partition = self.partitions.get(tp)
        if partition is None:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} does not host {tp}")
        partition.check_leader(current_leader_epoch)
        return partition

    def _end_offset_for(self, body: OffsetForLeaderEpoch) -> OffsetForLeaderEpochReply:
        try:
            self._leader(body.tp, body.current_leader_epoch)
        except KafkaError as e:
            return OffsetForLeaderEpochReply(e.code)
        epoch, end_offset = self.disk[body.tp].end_offset_for(body.leader_epoch)
        return OffsetForLeaderEpochReply(0, epoch, end_offset)

    def _list_offsets(self, body: ListOffsets) -> ListOffsetsReply:
        try:
            self._leader(body.tp, body.current_leader_epoch)
        except KafkaError as e:
            return ListOffsetsReply(e.code)
        return ListOffsetsReply(0, 0, self.disk[body.tp].log_end_offset)

    def _metadata(self) -> MetadataReply:
        leaders = []
        for name in self.image.topic_names():
            topic = self.image.topic(name)
            assert topic is not None
            for index in sorted(topic.partitions):
                p = topic.partitions[index]
                leaders.append(((name, index), p.leader, p.leader_epoch))
        return MetadataReply(tuple(leaders))

    def _on_fetch(self, src: int, correlation_id: int, body: Fetch) -> None:
        reply = self._read(body)
        if reply.error_code or reply.records or body.replica_id < 0:
            self.reply(src, correlation_id, reply)
            return
        # Long poll (Kafka's DelayedFetch): answer when data arrives or the wait ends.
        self.parked_fetches.setdefault(body.tp, []).append((src, correlation_id, body))
        wait_ms = self.settings.replica_fetch_wait_max_ms
        self.set_timer(wait_ms, self._expire_parked_fetch, body.tp, correlation_id, src)

    def _read(self, body: Fetch, *, register: bool = True) -> FetchReply:
        tp = body.tp
        try:
            partition = self._leader(tp, body.current_leader_epoch)
            log = self.disk[tp]
            if body.fetch_offset > log.log_end_offset:
                raise OffsetOutOfRangeError(f"{body.fetch_offset} > {log.log_end_offset}")
            # batches of every size, so catching-up followers stop at every offset
            max_records = self.scheduler.rng.randint(1, self.settings.replica_fetch_max_records)
            if body.replica_id < 0:
                upper, max_records = partition.high_watermark, self.settings.consumer_max_records
            else:
                upper = None
            records = log.read(body.fetch_offset, max_records, upper)
            if body.replica_id >= 0 and register:
                events = partition.on_follower_fetch(
                    self.wall_ms,
                    body.replica_id,
                    body.fetch_offset,
                    log.log_end_offset,
                    replica_eligible=self.image.is_unfenced(body.replica_id),
                )
                self._apply_events(tp, events)
        except KafkaError as e:
            return FetchReply(e.code)
        if body.replica_id < 0:
            self.history.on_consumer_read(self.node_id, tp, records, partition.high_watermark)
        return FetchReply(0, records, partition.high_watermark)

    def _complete_parked_fetches(self, tp: TopicPartition) -> None:
        parked = self.parked_fetches.get(tp)
        if not parked:
            return
        keep = []
        for src, correlation_id, body in parked:
            reply = self._read(body, register=False)
            if reply.error_code or reply.records:
                self.reply(src, correlation_id, reply)
            else:
                keep.append((src, correlation_id, body))
        self.parked_fetches[tp] = keep

    def _expire_parked_fetch(self, tp: TopicPartition, correlation_id: int, src: int) -> None:
        parked = self.parked_fetches.get(tp, [])
        for i, (s, c, body) in enumerate(parked):
            if (s, c) == (src, correlation_id):
                del parked[i]
                self.reply(src, correlation_id, self._read(body, register=False))
                return

    def _on_produce(self, src: int, correlation_id: int, body: Produce) -> None:
        tp = body.tp
        try:
            partition = self._leader(tp)
            partition.check_enough_replicas(self.settings.min_insync_replicas)
        except KafkaError as e:
            self.reply(src, correlation_id, ProduceReply(e.code))
            return
        log = self.disk[tp]
        offset = log.offset_of(body.producer_id, body.sequence)
        if offset is None:
            # ProducerAppendInfo._check_sequence: a producer unknown here (its records are
            # gone) may continue at any sequence; a known one must be next in order.
            last = log.last_sequence(body.producer_id)
            if last is not None and body.sequence != last + 1:
                self.history.stats["out_of_order_sequence"] += 1
                self.reply(src, correlation_id, ProduceReply(OutOfOrderSequenceNumberError.code))
                return
            offset = log.log_end_offset
            record = SimRecord(
                offset,
                partition.leader_epoch,
                body.producer_id,
                body.sequence,
                body.value,
                self.node_id,
            )
            self.history.on_leader_append(self.node_id, tp, record)
            log.append(record)
            self._apply_events(tp, partition.on_leader_append(log.log_end_offset))
            self._complete_parked_fetches(tp)
        else:
            self.history.stats["duplicates_deduped"] += 1
        pending = PendingProduce(src, correlation_id, offset)
        if not self._try_complete(tp, partition, pending):
            self.pending_produce.setdefault(tp, []).append(pending)
            self.set_timer(self.settings.produce_timeout_ms, self._expire_produce, tp, pending)

    def _try_complete(self, tp: TopicPartition, partition: Partition, p: PendingProduce) -> bool:
        try:
            done = partition.acks_all_satisfied(p.offset + 1, self.settings.min_insync_replicas)
        except KafkaError as e:
            self.reply(p.src, p.correlation_id, ProduceReply(e.code))
            return True
        if done:
            self.reply(p.src, p.correlation_id, ProduceReply(0, p.offset))
        return done

    def _check_pending_produce(self, tp: TopicPartition) -> None:
        pending = self.pending_produce.get(tp)
        if pending:
            partition = self.partitions[tp]
            self.pending_produce[tp] = [
                p for p in pending if not self._try_complete(tp, partition, p)
            ]

    def _expire_produce(self, tp: TopicPartition, pending: PendingProduce) -> None:
        waiting = self.pending_produce.get(tp, [])
        if pending in waiting:
            waiting.remove(pending)
            self.reply(pending.src, pending.correlation_id, ProduceReply(RequestTimedOutError.code))
