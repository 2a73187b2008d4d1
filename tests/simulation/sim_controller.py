"""The controller on the simulated network: sparklog's sans-IO `QuorumController`, driven.

Every operation's `ControllerResult` is persisted before it is announced: its records are
appended to `metadata_log` (the simulated `__cluster_metadata` partition, which survives a
controller restart) and replayed into the controller's image, and only then is the reply
sent. Brokers learn the log by long-polling `MetadataFetch`, so they see changes late, or not
at all while cut off. A restart rebuilds the controller from the log (leases are in memory
only and start empty, as in sparklog's design). The first start bootstraps the cluster as the
controller server does: Eligible Leader Replicas on (KIP-966), unless the run models a cluster
from before them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sparklog.controller.cluster_control import BrokerHeartbeat, BrokerRegistrationRequest
from sparklog.controller.partition_change import registration_after
from sparklog.controller.quorum_controller import QuorumController
from sparklog.controller.results import ControllerResult
from sparklog.errors import KafkaError
from sparklog.metadata.configs import ControllerConfig
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import PARTITION, PARTITION_CHANGE, PartitionRegistration

from .checks import History
from .messages import (
    AlterPartition,
    AlterPartitionReply,
    Heartbeat,
    MetadataFetch,
    MetadataFetchReply,
    RegisterBroker,
    RegisterReply,
    TopicPartition,
)
from .sim_network import CONTROLLER_ID, Network, Node, Scheduler

CLUSTER_ID = "sparklog-simulation-0001"
RecordListener = Callable[
    [Mapping[str, Any], "TopicPartition | None", "PartitionRegistration | None"], None
]


class ControllerNode(Node):
    """QuorumController + its metadata log + long-polled metadata fetches."""

    def __init__(
        self,
        scheduler: Scheduler,
        network: Network,
        history: History,
        config: ControllerConfig,
        *,
        tick_interval_ms: int,
        metadata_max_wait_ms: int,
        eligible_leader_replicas: bool = True,
    ) -> None:
        super().__init__(CONTROLLER_ID, scheduler, network)
        self.history = history
        self.config = config
        self.tick_interval_ms = tick_interval_ms
        self.metadata_max_wait_ms = metadata_max_wait_ms
        self.eligible_leader_replicas = eligible_leader_replicas
        self.metadata_log: list[dict[str, Any]] = []
        self._topic_ids = (uuid.UUID(int=i) for i in range(1, 1 << 30))
        self.controller = self._new_controller()
        self._waiters: list[tuple[int, int, int]] = []  # (src, correlation id, offset)
        # told of every record about to be persisted, with (tp, registration before) for
        # partition records (else None, None): reactive faults listen
        self.record_listeners: list[RecordListener] = []

    def _new_controller(self) -> QuorumController:
        image = MetadataImage()
        for record in self.metadata_log:
            image.apply(record)
        return QuorumController(
            self.config, CLUSTER_ID, image, topic_id_factory=lambda: next(self._topic_ids)
        )

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def on_start(self) -> None:
        if self.incarnation > 1:
            self.controller = self._new_controller()
        self._waiters = []
        elr = self.eligible_leader_replicas
        self.commit(self.controller.bootstrap(eligible_leader_replicas=elr))
        self.set_timer(self.tick_interval_ms, self._tick)

    def commit(self, result: ControllerResult) -> Any:
        """Persist, apply, then hand back the response for announcing."""
        if result.records:
            changed = self._observe(result.records)
            self.metadata_log.extend(result.records)
            self.controller.replay(result.records)
            for tp, registration in changed.items():
                old_isr = () if registration[0] is None else registration[0].isr
                new_isr = registration[1].isr
                self.history.on_isr_persisted(tp, new_isr, [b for b in new_isr if b not in old_isr])
                # KIP-966: an eligible leader replica holds every committed record too
                old_elr = () if registration[0] is None else registration[0].elr
                new_elr = registration[1].elr
                self.history.on_elr_persisted(tp, new_elr, [b for b in new_elr if b not in old_elr])
            self._wake_waiters()
        return result.response

    def _observe(
        self, records: Iterable[Mapping[str, Any]]
    ) -> dict[TopicPartition, tuple[PartitionRegistration | None, PartitionRegistration]]:
        """Check and trace records before they are persisted; (old, new) per partition."""
        image = self.controller.image
        changed: dict[
            TopicPartition, tuple[PartitionRegistration | None, PartitionRegistration]
        ] = {}
        names: dict[str, str] = {}
        in_batch: dict[tuple[str, int], PartitionRegistration] = {}
        for record in records:
            kind = record["type"]
            if kind == "Topic":
                names[record["topic_id"]] = record["name"]
            if kind not in (PARTITION, PARTITION_CHANGE):
                self.scheduler.note("controller: %s", _short(record))
                for listener in self.record_listeners:
                    listener(record, None, None)
                continue
            topic_id = uuid.UUID(record["topic_id"])
            topic = image.topic_by_id(topic_id)
            name = topic.name if topic is not None else names[record["topic_id"]]
            tp = (name, int(record["partition"]))
            old = in_batch.get(tp) or image.partition(topic_id, tp[1])
            self.scheduler.note(
                "controller: %s leader=%s isr=%s elr=%s last_known=%s epochs=(%s,%s)",
                tp,
                record["leader"],
                record["isr"],
                record.get("eligible_leader_replicas", "-"),
                record.get("last_known_elr", "-"),
                record["leader_epoch"],
                record["partition_epoch"],
            )
            self.history.on_partition_record(tp, old, record)
            for listener in self.record_listeners:
                listener(record, tp, old)
            if old is None:
                new = PartitionRegistration(
                    topic_id,
                    tp[1],
                    tuple(record["replicas"]),
                    tuple(record["isr"]),
                    int(record["leader"]),
                    int(record["leader_epoch"]),
                    int(record["partition_epoch"]),
                )
            else:
                new = registration_after(old, dict(record))
            in_batch[tp] = new
            changed[tp] = (changed[tp][0] if tp in changed else old, new)
        return changed

    def _tick(self) -> None:
        while (fenced := self.commit(self.controller.tick(self.now_ms))) is not None:
            self.scheduler.note("controller: lease of broker %s expired: fenced", fenced)
        self.set_timer(self.tick_interval_ms, self._tick)

    # -- requests ---------------------------------------------------------------------------

    def handle(self, src: int, correlation_id: int, body: Any) -> None:
        if isinstance(body, MetadataFetch):
            self._on_metadata_fetch(src, correlation_id, body)
        elif isinstance(body, Heartbeat):
            request = BrokerHeartbeat(
                body.broker_id,
                body.broker_epoch,
                body.current_metadata_offset,
                want_shut_down=body.want_shut_down,
            )
            reply = self.commit(self.controller.heartbeat(self.now_ms, request))
            self.reply(src, correlation_id, reply)
        elif isinstance(body, RegisterBroker):
            self.reply(src, correlation_id, self._register(body))
        elif isinstance(body, AlterPartition):
            self.reply(src, correlation_id, self._alter_partition(body))
        else:
            raise AssertionError(f"controller got {body!r}")

    def _register(self, body: RegisterBroker) -> RegisterReply:
        request = BrokerRegistrationRequest(
            body.broker_id,
            CLUSTER_ID,
            body.incarnation_id,
            "sim",
            9092 + body.broker_id,
            previous_broker_epoch=body.previous_broker_epoch,
        )
        try:
            epoch = self.commit(self.controller.register_broker(self.now_ms, request))
        except KafkaError as e:
            self.scheduler.note("controller: registration of %s refused: %s", body.broker_id, e)
            return RegisterReply(e.code)
        self.scheduler.note("controller: broker %s registered, epoch %s", body.broker_id, epoch)
        return RegisterReply(0, epoch)

    def _alter_partition(self, body: AlterPartition) -> AlterPartitionReply:
        try:
            outcomes = self.commit(
                self.controller.alter_partition(
                    self.now_ms, body.broker_id, body.broker_epoch, body.changes
                )
            )
        except KafkaError as e:
            return AlterPartitionReply(e.code)
        for change, outcome in zip(body.changes, outcomes, strict=True):
            self.scheduler.note(
                "controller: AlterPartition from %s isr=%s epochs=(%s,%s) -> error %s",
                body.broker_id,
                change.new_isr,
                change.leader_epoch,
                change.partition_epoch,
                outcome.error_code,
            )
        return AlterPartitionReply(0, tuple(outcomes))

    def _on_metadata_fetch(self, src: int, correlation_id: int, body: MetadataFetch) -> None:
        if body.offset < len(self.metadata_log):
            self.reply(src, correlation_id, self._metadata_from(body.offset))
            return
        self._waiters.append((src, correlation_id, body.offset))
        self.set_timer(self.metadata_max_wait_ms, self._expire_waiter, src, correlation_id)

    def _metadata_from(self, offset: int) -> MetadataFetchReply:
        return MetadataFetchReply(offset, tuple(self.metadata_log[offset:]))

    def _wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for src, correlation_id, offset in waiters:
            self.reply(src, correlation_id, self._metadata_from(offset))

    def _expire_waiter(self, src: int, correlation_id: int) -> None:
        for i, (s, c, offset) in enumerate(self._waiters):
            if (s, c) == (src, correlation_id):
                del self._waiters[i]
                self.reply(src, correlation_id, self._metadata_from(offset))
                return


def _short(record: Mapping[str, Any]) -> str:
    keys = ("broker_id", "broker_epoch", "name")
    return f"{record['type']}(" + ", ".join(f"{k}={record[k]}" for k in keys if k in record) + ")"
