"""The replica manager's metrics on real logs, no sockets: what an append, a read, a delayed
fetch and a departing partition record into the registry, and `sparklog.metrics.enabled=false`
recording nothing on the data path."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from sparklog.broker.broker_metrics import (
    BROKER_TOPIC_METRICS,
    broker_topic_metric,
    log_metric,
    partition_metric,
    replica_manager_metric,
)
from sparklog.broker.config import BrokerConfig
from sparklog.broker.fetch_params import FetchParams, FetchPartition
from sparklog.broker.log_manager import LogManager
from sparklog.broker.partition import PartitionRegistration
from sparklog.broker.partition_fetch_state import PartitionFetchState
from sparklog.broker.replica_fetcher_manager import MAX_LAG, ReplicaFetcherManager
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.storage.producer_append_info import AppendOrigin

from .test_replica_manager import NODE, NOW, Clock, batch, produce, topic_meta


def make(tmp_path, enabled=True):
    metrics = Metrics()
    log_manager = LogManager(tmp_path, BrokerConfig.from_properties({}), clock_ms=Clock())
    rm = ReplicaManager(
        NODE, log_manager, clock_ms=Clock(), metrics=metrics, data_path_metrics=enabled
    )
    return rm, metrics, log_manager


@pytest.fixture
def rm(tmp_path):
    rm, metrics, log_manager = make(tmp_path)
    rm.metrics = metrics
    yield rm
    log_manager.shutdown()


def value(metrics, name):
    metric = metrics.metric(name)
    return None if metric is None else metric.value()


def purgatory(operation, name="PurgatorySize"):
    tags = {"delayedOperation": operation}
    return MetricName.of("kafka.server", "DelayedOperationPurgatory", name, tags)


def meter(rm, name, topic=None):
    return value(rm.metrics, broker_topic_metric(name, topic))


def test_an_append_counts_its_batch_bytes_and_records_per_topic_and_in_total(rm):
    rm.apply_metadata({"t": topic_meta("t"), "u": topic_meta("u")})
    first, second = batch(b"a", b"b"), batch(b"c")
    assert produce(rm, first).error_code == 0
    assert produce(rm, second, tp=("u", 0)).error_code == 0
    assert meter(rm, "BytesInPerSec", "t") == len(first)
    assert meter(rm, "MessagesInPerSec", "t") == 2
    assert meter(rm, "BytesInPerSec", "u") == len(second)
    assert meter(rm, "BytesInPerSec") == len(first) + len(second)
    assert meter(rm, "MessagesInPerSec") == 3
    assert meter(rm, "TotalProduceRequestsPerSec") == 2
    assert value(rm.metrics, log_metric("LogEndOffset", "t", 0)) == 2
    assert value(rm.metrics, log_metric("Size", "t", 0)) == len(first)
    assert value(rm.metrics, replica_manager_metric("LeaderCount")) == 2
    assert value(rm.metrics, replica_manager_metric("PartitionCount")) == 2
    assert value(rm.metrics, replica_manager_metric("UnderReplicatedPartitions")) == 0


def test_transaction_markers_count_as_bytes_in_and_the_lso_lag_shows_the_open_transaction(rm):
    """Kafka's appendToLocalLog counts every leader append, WriteTxnMarkers' too: BytesIn is
    what the log grew by. LastStableOffsetLag is the leader's HW minus its LSO."""
    rm.apply_metadata({"t": topic_meta("t")})
    txn = batch(b"t1", b"t2", producer_id=7, producer_epoch=0, is_transactional=True)
    produce(rm, txn)
    lag = partition_metric("LastStableOffsetLag", "t", 0)
    assert value(rm.metrics, lag) == 2
    marker = build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.COMMIT, 0),
        producer_id=7,
        producer_epoch=0,
        timestamp_ms=NOW,
    )
    asyncio.run(rm.append_records(1, 1000, {("t", 0): marker}, origin=AppendOrigin.COORDINATOR))
    assert meter(rm, "BytesInPerSec", "t") == len(txn) + len(marker)
    assert meter(rm, "BytesInPerSec", "t") == value(rm.metrics, log_metric("Size", "t", 0))
    assert meter(rm, "MessagesInPerSec", "t") == 3
    assert value(rm.metrics, lag) == 0
    assert value(rm.metrics, partition_metric("InSyncReplicasCount", "t", 0)) == 1
    assert value(rm.metrics, partition_metric("UnderReplicated", "t", 0)) == 0


def test_a_produce_to_an_unknown_topic_counts_in_total_only(rm):
    rm.apply_metadata({"t": topic_meta("t")})
    assert produce(rm, batch(b"a"), tp=("nope", 0)).error_code == 3
    assert meter(rm, "TotalProduceRequestsPerSec") == 1
    assert meter(rm, "FailedProduceRequestsPerSec") == 0  # a client's mistake
    assert rm.metrics.metric(broker_topic_metric("BytesInPerSec", "nope")) is None


def test_a_delayed_fetch_counts_once_and_its_bytes_out_are_the_callers(rm):
    """The read path counts a partition of a fetch as it arrives, not on every re-read while
    it long-polls (bytes out are counted by KafkaApis as the response is built)."""
    rm.apply_metadata({"t": topic_meta("t")})

    async def go():
        params = FetchParams(-1, 5_000, 1, 1 << 20, 0)
        waiting = asyncio.ensure_future(
            rm.fetch_messages(params, [FetchPartition("t", 0, 0, 1 << 20)])
        )
        await asyncio.sleep(0)
        assert value(rm.metrics, purgatory("Fetch")) == 1  # the long-poll waits
        assert value(rm.metrics, purgatory("Produce", "NumDelayedOperations")) == 0
        await rm.append_records(1, 1000, {("t", 0): batch(b"a")})
        return await waiting

    (result,) = asyncio.run(go())
    assert result.records
    assert value(rm.metrics, purgatory("Fetch")) == 0
    assert meter(rm, "TotalFetchRequestsPerSec", "t") == 1
    assert meter(rm, "TotalFetchRequestsPerSec") == 1
    assert meter(rm, "BytesOutPerSec", "t") == 0


def test_a_departing_topic_takes_its_series_with_it(rm):
    two = {0: PartitionRegistration((NODE,), (NODE,), NODE, 0, 0)}
    two[1] = two[0]
    rm.apply_metadata({"t": topic_meta("t", partitions=two), "u": topic_meta("u")})
    produce(rm, batch(b"a"))
    rm.apply_metadata({"u": topic_meta("u", topic_id=rm.hosted("u", 0).topic_id)})
    names = list(rm.metrics.metrics())
    assert not [n for n in names if n.tag("topic") == "t"], names
    assert [n for n in names if n.type == BROKER_TOPIC_METRICS and n.tag("topic") == "u"]
    assert value(rm.metrics, log_metric("Size", "u", 0)) == 0
    assert meter(rm, "BytesInPerSec") == len(batch(b"a")), "the totals stay"


def test_disabled_data_path_metrics_record_nothing_but_the_gauges_stay(tmp_path):
    rm, metrics, log_manager = make(tmp_path, enabled=False)
    try:
        rm.apply_metadata({"t": topic_meta("t")})
        assert produce(rm, batch(b"a")).error_code == 0
        assert not [n for n in metrics.metrics() if n.type == BROKER_TOPIC_METRICS]
        assert value(metrics, replica_manager_metric("PartitionCount")) == 1
        assert value(metrics, log_metric("LogEndOffset", "t", 0)) == 1
    finally:
        log_manager.shutdown()


def test_max_lag_is_the_largest_lag_of_any_followed_partition():
    metrics = Metrics()
    fetchers = ReplicaFetcherManager(
        2,
        object(),  # type: ignore[arg-type]
        BrokerConfig.from_properties({}),
        lambda _id: None,
        clock_ms=Clock(),
        metrics=metrics,
    )
    assert value(metrics, MAX_LAG) == 0
    state = {("t", p): PartitionFetchState(uuid.UUID(int=1), 1, 0, lag=p * 10) for p in range(3)}
    fetchers._fetchers[(1, 0)] = SimpleNamespace(partitions=state)  # as a fetcher holds them
    assert value(metrics, MAX_LAG) == 20
    assert MAX_LAG.jmx == "kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica"
