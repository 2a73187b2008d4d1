"""The controller's gauges (Kafka's `ControllerMetadataMetrics` names) follow its image."""

from __future__ import annotations

from sparklog.controller.metrics import ControllerMetrics
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics

from .harness import SESSION_TIMEOUT_MS, Harness


def gauge(metrics: Metrics, name: str) -> float:
    metric = metrics.metric(MetricName.of("kafka.controller", "KafkaController", name))
    assert metric is not None, name
    return metric.value()


def test_counts_follow_topics_brokers_fencing_and_offline_partitions():
    harness = Harness()
    metrics = Metrics()
    ControllerMetrics(metrics, lambda: harness.image)
    assert gauge(metrics, "GlobalTopicCount") == 0
    harness.start_brokers(3)
    harness.create("a", partitions=4, rf=2)
    harness.create("b", partitions=2, rf=1)
    assert gauge(metrics, "GlobalTopicCount") == 2
    assert gauge(metrics, "GlobalPartitionCount") == 6
    assert gauge(metrics, "ActiveBrokerCount") == 3
    assert gauge(metrics, "FencedBrokerCount") == 0
    assert gauge(metrics, "OfflinePartitionsCount") == 0
    assert gauge(metrics, "PreferredReplicaImbalanceCount") == 0
    assert gauge(metrics, "LastAppliedRecordOffset") == harness.image.offset - 1

    # broker 0 stops heartbeating: fenced; its single-replica partitions go offline, the
    # replicated ones it led move to a non-preferred leader
    led_by_0 = [p for p in harness.partitions("a") if p.leader == 0]
    alone_on_0 = [p for p in harness.partitions("b") if p.replicas == (0,)]
    harness.advance(SESSION_TIMEOUT_MS + 1)
    harness.heartbeat_all(1, 2)
    assert harness.tick() == [0]
    assert gauge(metrics, "FencedBrokerCount") == 1
    assert gauge(metrics, "ActiveBrokerCount") == 2
    assert gauge(metrics, "OfflinePartitionsCount") == len(alone_on_0)
    assert gauge(metrics, "PreferredReplicaImbalanceCount") == len(led_by_0) + len(alone_on_0)
    assert led_by_0 or alone_on_0  # the placement put something on broker 0


def test_active_controller_count_is_the_servers_flag_and_no_image_reads_zero():
    metrics = Metrics()
    controller = ControllerMetrics(metrics, lambda: None)
    assert gauge(metrics, "ActiveControllerCount") == 0
    assert gauge(metrics, "GlobalPartitionCount") == 0
    controller.active = True
    assert gauge(metrics, "ActiveControllerCount") == 1
