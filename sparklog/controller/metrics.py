"""The controller's metrics under Kafka's names (`ControllerMetadataMetrics`,
`QuorumControllerMetrics`, the KRaft `raft-metrics`), registered into
`ControllerServer.metrics`.

Theory of operation. The cluster-wide gauges (`kafka.controller:type=KafkaController,name=
GlobalTopicCount`, `OfflinePartitionsCount`, ...) are read from the controller's metadata image
at scrape time, in one pass over the partitions shared by every gauge of a scrape: the pass is
cached under the image's offset, which every change to the image moves. Kafka keeps these
counts incrementally (`ControllerMetricsChanges`); one pass per metadata change is simpler and
costs a scrape O(partitions), not a write. A scrape may run on another thread than the
controller's loop, so a pass that meets a dict the loop is changing is retried.

The event-queue histograms are timed by the server around its write lock: `EventQueueTimeMs`
is how long a write waited for the lock (Kafka: in the controller's event queue),
`EventQueueProcessingTimeMs` how long it then took (the core call, the durable write, the
replay). `raft-metrics` `commit-latency-avg|max` time the durable write of a batch alone (an
fsynced file or an object-store PUT: the metadata log's append).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import PARTITION_CHANGE
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Histogram, Metrics
from sparklog.metrics.sensor import Sensor
from sparklog.metrics.stats import Avg, Max
from sparklog.structs import NO_LEADER

logger = logging.getLogger(__name__)

CONTROLLER = "kafka.controller"
#: Kafka's `ControllerMetadataMetrics` and `QuorumControllerMetrics` type
KAFKA_CONTROLLER = "KafkaController"
EVENT_MANAGER = "ControllerEventManager"
CONTROLLER_STATS = "ControllerStats"


@dataclass(frozen=True, slots=True)
class ClusterCounts:
    """What one pass over the image counts (Kafka's `ControllerMetadataMetrics` gauges)."""

    topics: int = 0
    partitions: int = 0
    offline_partitions: int = 0
    #: partitions whose leader is not their first replica (offline ones included, as Kafka's
    #: `PartitionRegistration.hasPreferredLeader` counts them)
    imbalanced_partitions: int = 0
    fenced_brokers: int = 0
    active_brokers: int = 0


def count_cluster(image: MetadataImage) -> ClusterCounts:
    """One pass over `image`'s brokers and partitions."""
    partitions = offline = imbalanced = 0
    for partition in image.partitions():
        partitions += 1
        if not partition.is_online:
            offline += 1
        if not partition.replicas or partition.leader != partition.replicas[0]:
            imbalanced += 1
    brokers = list(image.brokers.values())
    fenced = sum(1 for b in brokers if b.fenced)
    return ClusterCounts(
        topics=len(image.topics_by_id),
        partitions=partitions,
        offline_partitions=offline,
        imbalanced_partitions=imbalanced,
        fenced_brokers=fenced,
        active_brokers=len(brokers) - fenced,
    )


class ControllerMetrics:
    """The controller's gauges, event-queue histograms and metadata-log commit latency."""

    def __init__(self, metrics: Metrics, image: Callable[[], MetadataImage | None]) -> None:
        self.metrics = metrics
        self._image = image
        self._cached: tuple[int, ClusterCounts] | None = None
        #: whether this controller serves (1), or was fenced by a newer one / stopped (0)
        self.active = False
        gauges: dict[str, Callable[[ClusterCounts], int]] = {
            "GlobalTopicCount": lambda c: c.topics,
            "GlobalPartitionCount": lambda c: c.partitions,
            "OfflinePartitionsCount": lambda c: c.offline_partitions,
            "PreferredReplicaImbalanceCount": lambda c: c.imbalanced_partitions,
            "FencedBrokerCount": lambda c: c.fenced_brokers,
            "ActiveBrokerCount": lambda c: c.active_brokers,
        }
        for name, read in gauges.items():
            metrics.gauge(_controller(name), self._reader(read))
        metrics.gauge(_controller("ActiveControllerCount"), lambda: 1 if self.active else 0)
        metrics.gauge(_controller("LastAppliedRecordOffset"), self._last_applied_offset)
        # one log, durable before it is applied: committed = applied
        metrics.gauge(_controller("LastCommittedRecordOffset"), self._last_applied_offset)
        self.event_queue_time_ms: Histogram = metrics.histogram(
            MetricName.of(CONTROLLER, EVENT_MANAGER, "EventQueueTimeMs")
        )
        self.event_processing_time_ms: Histogram = metrics.histogram(
            MetricName.of(CONTROLLER, EVENT_MANAGER, "EventQueueProcessingTimeMs")
        )
        self.unclean_elections = metrics.meter(
            MetricName.of(CONTROLLER, CONTROLLER_STATS, "UncleanLeaderElectionsPerSec")
        )
        self.elr_elections = metrics.meter(
            MetricName.of(CONTROLLER, CONTROLLER_STATS, "ElectionFromEligibleLeaderReplicasPerSec")
        )
        self.commit_latency: Sensor = metrics.sensor("raft-commit-latency")
        for attribute, stat in (("commit-latency-avg", Avg()), ("commit-latency-max", Max())):
            self.commit_latency.add(MetricName.of("kafka.server", "raft-metrics", attribute), stat)

    def on_records(self, image: MetadataImage, records: Iterable[Mapping[str, Any]]) -> None:
        """Count the elections `records` make, before they are applied to `image` (Kafka's
        `ControllerMetricsChanges`): a new leader from the eligible leader replicas (KIP-966)
        is an ELR election; one from neither the ISR nor the ELR (a live replica under
        `unclean.leader.election.enable`, or the last known leader) is unclean."""
        for record in records:
            if record.get("type") != PARTITION_CHANGE:
                continue
            old = image.partition(uuid.UUID(record["topic_id"]), int(record["partition"]))
            leader = int(record["leader"])
            if old is None or leader in (NO_LEADER, old.leader) or leader in old.isr:
                continue
            if leader in old.elr:
                self.elr_elections.mark()
            else:
                self.unclean_elections.mark()

    def counts(self) -> ClusterCounts:
        """The image's counts, computed once per image offset."""
        image = self._image()
        if image is None:
            return ClusterCounts()
        cached = self._cached
        if cached is not None and cached[0] == image.offset:
            return cached[1]
        for _ in range(3):
            offset = image.offset
            try:
                counts = count_cluster(image)
            except RuntimeError:  # the loop changed a dict under the scrape's thread
                continue
            self._cached = (offset, counts)
            return counts
        return cached[1] if cached is not None else ClusterCounts()

    def _reader(self, read: Callable[[ClusterCounts], int]) -> Callable[[], float]:
        return lambda: float(read(self.counts()))

    def _last_applied_offset(self) -> float:
        image = self._image()
        return float(image.offset - 1) if image is not None else -1.0


def _controller(name: str) -> MetricName:
    return MetricName.of(CONTROLLER, KAFKA_CONTROLLER, name)
