"""Consumer lag gauges (kafka-lag-exporter's names) from committed and latest offsets."""

from __future__ import annotations

from sparklog.coordinator.lag import ConsumerLagPoller
from sparklog.metrics.registry import Metrics
from sparklog.structs import TopicPartition


def values(metrics: Metrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        m.name.tags: m.value() for m in metrics if m.name.domain == "kafka" and m.name.name == name
    }


def poller(metrics: Metrics) -> ConsumerLagPoller:
    return ConsumerLagPoller(metrics, dict, lambda t, p: None, interval_ms=1000, max_partitions=10)


def test_lag_is_latest_minus_committed_with_max_and_sums_per_group():
    metrics = Metrics()
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    committed = {("g", a0): 10, ("g", a1): 5, ("g", b0): 7, ("h", a0): 12}
    poller(metrics).publish(committed, {a0: 12, a1: 9, b0: 7})
    lag = values(metrics, "group_lag")
    assert lag[(("group", "g"), ("topic", "a"), ("partition", "0"))] == 2
    assert lag[(("group", "g"), ("topic", "a"), ("partition", "1"))] == 4
    assert lag[(("group", "g"), ("topic", "b"), ("partition", "0"))] == 0
    assert lag[(("group", "h"), ("topic", "a"), ("partition", "0"))] == 0
    assert (
        values(metrics, "group_offset")[(("group", "g"), ("topic", "a"), ("partition", "1"))] == 5
    )
    assert values(metrics, "group_max_lag") == {(("group", "g"),): 4, (("group", "h"),): 0}
    assert values(metrics, "group_sum_lag") == {(("group", "g"),): 6, (("group", "h"),): 0}
    assert values(metrics, "group_topic_sum_lag")[(("group", "g"), ("topic", "a"))] == 6
    assert values(metrics, "latest_offset")[(("topic", "b"), ("partition", "0"))] == 7


def test_a_poll_replaces_the_last_and_a_partition_without_an_answer_has_no_series():
    metrics = Metrics()
    a0, a1 = TopicPartition("a", 0), TopicPartition("a", 1)
    lag_poller = poller(metrics)
    lag_poller.publish({("g", a0): 1, ("g", a1): 1, ("gone", a0): 0}, {a0: 5, a1: 5})
    assert len(values(metrics, "group_lag")) == 3
    # the group "gone" was deleted, a1's leader did not answer, g caught up on a0
    lag_poller.publish({("g", a0): 5, ("g", a1): 1}, {a0: 5})
    assert values(metrics, "group_lag") == {(("group", "g"), ("topic", "a"), ("partition", "0")): 0}
    assert values(metrics, "group_max_lag") == {(("group", "g"),): 0}


def test_lag_never_reads_negative():
    metrics = Metrics()
    a0 = TopicPartition("a", 0)
    # a committed offset past the latest one (a truncated log, a racing commit)
    poller(metrics).publish({("g", a0): 9}, {a0: 5})
    assert values(metrics, "group_lag") == {(("group", "g"), ("topic", "a"), ("partition", "0")): 0}
