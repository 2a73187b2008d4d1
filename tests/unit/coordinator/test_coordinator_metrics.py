"""The coordinators' gauges (Kafka's GroupMetadataManager / group-coordinator-metrics names)
count what the cores hold: classic groups by state, KIP-848 groups by state and protocol,
transactions by state, and the partitions of the open ones."""

from __future__ import annotations

from types import SimpleNamespace

from sparklog.coordinator.group.classic_group import GroupState
from sparklog.coordinator.group.consumer_group import ConsumerGroupState
from sparklog.coordinator.group.offsets import CommittedOffset, OffsetCache
from sparklog.coordinator.metrics import CoordinatorMetrics
from sparklog.coordinator.transaction.metadata import TxnState
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.structs import TopicPartition


def read(metrics: Metrics, domain: str, type_: str, name: str, **tags: str) -> float:
    metric = metrics.metric(MetricName.of(domain, type_, name, tags))
    assert metric is not None, (type_, name, tags)
    return metric.value()


def manager(metrics: Metrics, name: str) -> float:
    return read(metrics, "kafka.coordinator.group", "GroupMetadataManager", name)


def server_metric(metrics: Metrics, type_: str, name: str, **tags: str) -> float:
    return read(metrics, "kafka.server", type_, name, **tags)


def test_groups_offsets_and_transactions_are_counted_by_state():
    offsets = OffsetCache()
    offsets.apply("a", {TopicPartition("t", p): CommittedOffset(1, -1, "", 0) for p in range(3)})
    offsets.apply("b", {TopicPartition("t", 0): CommittedOffset(5, -1, "", 0)})
    groups = {
        "a": SimpleNamespace(state=GroupState.STABLE),  # classic: no group_type attribute
        "b": SimpleNamespace(state=GroupState.PREPARING_REBALANCE),
        "c": SimpleNamespace(state=ConsumerGroupState.RECONCILING, group_type="consumer"),
        "d": SimpleNamespace(state=ConsumerGroupState.STABLE, group_type="consumer"),
    }
    txns = {
        "x": SimpleNamespace(state=TxnState.ONGOING, partitions={("t", 0), ("t", 1)}),
        "y": SimpleNamespace(state=TxnState.PREPARE_ABORT, partitions={("t", 2)}),
        "z": SimpleNamespace(state=TxnState.COMPLETE_COMMIT, partitions=set()),
    }
    server = SimpleNamespace(
        core=SimpleNamespace(groups=groups, offsets=offsets),
        txn=SimpleNamespace(transactions=txns),
        markers=SimpleNamespace(pending=lambda: 1),
    )
    metrics = Metrics()
    coordinator = CoordinatorMetrics(metrics, server)
    assert manager(metrics, "NumGroups") == 4
    assert manager(metrics, "NumGroupsStable") == 1  # classic only, as Kafka's gauge
    assert manager(metrics, "NumGroupsPreparingRebalance") == 1
    assert manager(metrics, "NumGroupsEmpty") == 0
    assert manager(metrics, "NumOffsets") == 4
    group_metrics = "group-coordinator-metrics"
    assert server_metric(metrics, group_metrics, "group-count", protocol="consumer") == 2
    assert server_metric(metrics, group_metrics, "group-count", protocol="classic") == 2
    assert server_metric(metrics, group_metrics, "consumer-group-count", state="Stable") == 1
    assert server_metric(metrics, group_metrics, "consumer-group-count", state="Reconciling") == 1

    txn_metrics = "transaction-coordinator-metrics"
    assert server_metric(metrics, txn_metrics, "active-transaction-count") == 2
    assert server_metric(metrics, txn_metrics, "partitions-in-transaction") == 3
    assert server_metric(metrics, txn_metrics, "transaction-count", state="Ongoing") == 1
    assert server_metric(metrics, txn_metrics, "transaction-count", state="CompleteCommit") == 1
    assert server_metric(metrics, txn_metrics, "pending-marker-jobs") == 1

    coordinator.on_offsets_committed(3)
    coordinator.on_offsets_committed(2)
    coordinator.on_transaction_completed(True)
    coordinator.on_transaction_completed(False)
    coordinator.on_transaction_completed(False)
    assert server_metric(metrics, group_metrics, "offset-commit-count") == 5
    assert server_metric(metrics, txn_metrics, "transaction-commit-count") == 1
    assert server_metric(metrics, txn_metrics, "transaction-abort-count") == 2
    assert server_metric(metrics, txn_metrics, "transaction-abort-rate") > 0


def test_before_the_cores_load_every_gauge_reads_zero():
    metrics = Metrics()
    CoordinatorMetrics(metrics, SimpleNamespace())  # an unavailable coordinator has no cores
    assert manager(metrics, "NumGroups") == 0
    assert manager(metrics, "NumOffsets") == 0
    assert (
        server_metric(metrics, "transaction-coordinator-metrics", "active-transaction-count") == 0
    )
