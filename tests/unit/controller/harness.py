"""A sans-IO controller with a fake clock: commits apply records and keep them as "the log"."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from sparklog.controller.cluster_control import (
    BrokerHeartbeat,
    BrokerHeartbeatReply,
    BrokerLaunchFacts,
    BrokerRegistrationRequest,
)
from sparklog.controller.quorum_controller import QuorumController
from sparklog.controller.replication_control import CreateTopicResult, NewTopic
from sparklog.controller.results import ControllerResult
from sparklog.metadata.configs import ControllerConfig
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import PartitionRegistration

CLUSTER_ID = "test-cluster-id-000001"
SESSION_TIMEOUT_MS = 9000


class Harness:
    """`elr=True`: a new cluster as the controller server bootstraps it (Eligible Leader
    Replicas on, KIP-966); without it, a cluster from before the feature."""

    def __init__(
        self, config: ControllerConfig | None = None, *, now_ms: int = 1_000, elr: bool = False
    ) -> None:
        self.now_ms = now_ms
        self._topic_ids = (uuid.UUID(int=i) for i in itertools.count(1))
        self.controller = QuorumController(
            config or ControllerConfig(),
            CLUSTER_ID,
            topic_id_factory=lambda: next(self._topic_ids),
        )
        self.log: list[dict[str, Any]] = []
        self.incarnations: dict[int, str] = {}
        if elr:
            self.commit(self.controller.bootstrap())

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def commit(self, result: ControllerResult) -> Any:
        if result.records:
            self.controller.replay(result.records)
            self.log.extend(result.records)
        return result.response

    def advance(self, ms: int) -> None:
        self.now_ms += ms

    def register(
        self,
        broker_id: int,
        *,
        incarnation: str | None = None,
        rack: str | None = None,
        attempt: int = -1,
        previous_epoch: int = -1,
    ) -> int:
        incarnation = incarnation or self.incarnations.get(broker_id) or str(uuid.uuid4())
        self.incarnations[broker_id] = incarnation
        request = BrokerRegistrationRequest(
            broker_id,
            CLUSTER_ID,
            incarnation,
            "127.0.0.1",
            9092 + broker_id,
            rack,
            BrokerLaunchFacts(executor_id=str(broker_id), task_attempt=attempt),
            previous_epoch,
        )
        return self.commit(self.controller.register_broker(self.now_ms, request))

    def heartbeat(
        self, broker_id: int, *, offset: int | None = None, epoch: int | None = None, **flags: bool
    ) -> BrokerHeartbeatReply:
        if epoch is None:
            broker = self.image.broker(broker_id)
            assert broker is not None
            epoch = broker.broker_epoch
        request = BrokerHeartbeat(
            broker_id, epoch, self.image.offset if offset is None else offset, **flags
        )
        return self.commit(self.controller.heartbeat(self.now_ms, request))

    def start_brokers(self, count: int, racks: list[str] | None = None) -> None:
        for broker_id in range(count):
            self.register(broker_id, rack=racks[broker_id] if racks else None)
        for broker_id in range(count):
            assert not self.heartbeat(broker_id).is_fenced

    def heartbeat_all(self, *broker_ids: int) -> None:
        for broker_id in broker_ids:
            self.heartbeat(broker_id)

    def tick(self) -> list[int]:
        fenced = []
        while (broker_id := self.commit(self.controller.tick(self.now_ms))) is not None:
            fenced.append(broker_id)
        return fenced

    def create(
        self, name: str, partitions: int = -1, rf: int = -1, **kwargs: Any
    ) -> CreateTopicResult:
        (result,) = self.commit(
            self.controller.create_topics([NewTopic(name, partitions, rf, **kwargs)])
        )
        return result

    def partitions(self, name: str) -> list[PartitionRegistration]:
        topic = self.image.topic(name)
        assert topic is not None, name
        return [topic.partitions[i] for i in sorted(topic.partitions)]

    def replayed(self) -> MetadataImage:
        image = MetadataImage()
        for record in self.log:
            image.apply(record)
        return image
