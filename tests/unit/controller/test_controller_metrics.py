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


class MeteredHarness(Harness):
    """The harness, its records counted before they are applied (as the server does)."""

    def __init__(self, **kwargs) -> None:
        self.metrics = Metrics()
        self.controller_metrics: ControllerMetrics | None = None
        super().__init__(**kwargs)
        self.controller_metrics = ControllerMetrics(self.metrics, lambda: self.image)

    def commit(self, result):
        if result.records and self.controller_metrics is not None:
            self.controller_metrics.on_records(self.image, result.records)
        return super().commit(result)


def elections(h: MeteredHarness) -> tuple[float, float]:
    assert h.controller_metrics is not None
    return h.controller_metrics.unclean_elections.count, h.controller_metrics.elr_elections.count


def expire(h: Harness, *alive: int) -> list[int]:
    h.advance(SESSION_TIMEOUT_MS + 1)
    h.heartbeat_all(*alive)
    return h.tick()


def test_an_election_outside_the_isr_counts_as_unclean_and_a_clean_one_does_not():
    h = MeteredHarness()
    h.start_brokers(2)
    h.create("t", 1, 2, configs={"unclean.leader.election.enable": "true"})
    h.create("clean", 1, 2)
    expire(h, 1)  # broker 0 fenced: its leaderships move to 1, in the ISR: clean
    assert elections(h) == (0, 0)
    h.heartbeat(0)
    expire(h, 0)  # now 1 is fenced, with 0 outside the ISR of "t"
    (p,) = h.partitions("t")
    assert p.leader == 0 and elections(h) == (1, 0)
    name = MetricName.of("kafka.controller", "ControllerStats", "UncleanLeaderElectionsPerSec")
    assert h.metrics.metric(name) is not None


def test_an_election_from_the_eligible_leader_replicas_is_counted_as_such():
    h = MeteredHarness(elr=True)
    h.start_brokers(3)
    h.create("t", 1, 3, configs={"min.insync.replicas": "2"})
    (p,) = h.partitions("t")
    expire(h, *[b for b in range(3) if b != p.leader])  # the leader goes; ISR of two
    expire(h, p.isr[-1])  # below min ISR: the next one leaves into the ELR
    (q,) = h.partitions("t")
    survivor = q.leader
    expire(h)  # the last ISR member goes too: no leader, ISR empty, the rest eligible
    (r,) = h.partitions("t")
    assert r.leader == -1 and r.elr, r
    eligible = r.elr[0]
    h.heartbeat(eligible)  # an eligible replica comes back first: it is elected
    (s,) = h.partitions("t")
    assert s.leader == eligible != survivor
    assert elections(h) == (0, 1)
