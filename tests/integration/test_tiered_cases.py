"""Kafka's tiered-storage integration cases (apache/kafka storage/src/test/.../tiered/storage/
integration), adapted to a remote tier that is a Delta table per topic (issue 32 §4).

Topics are created the way Kafka's `TieredStorageTestBuilder` creates them: one batch per
segment (`segment.bytes` 100, each record its own batch), `local.retention.ms` 1 so a segment
leaves the broker's disk as soon as it is in the table. Every case ends with the tier verifier
(tests/support/tier_verifier.py): the topic read from its beginning through the brokers,
read_uncommitted and read_committed, equals the table offset by offset.

  OffloadAndConsumeFromLeaderTest        test_offload_and_consume_from_the_leader
  RollAndOffloadActiveSegmentTest        test_roll_and_offload_the_active_segment
  (sparklog: remote.table.freshness.ms)  test_freshness_copies_the_active_segment_unrolled
  ListOffsetsTest                        test_list_offsets_across_the_tiers
  DeleteSegmentsByRetentionTimeTest      test_retention_time_deletes_from_the_table
  DeleteSegmentsByRetentionSizeTest      test_retention_size_deletes_from_the_table
  DeleteSegmentsDueToLogStartOffset...   (in test_list_offsets_across_the_tiers)
  DeleteTopicTest                        test_delete_topic_drops_its_table
  EnableRemoteLogOnTopicTest             test_enable_on_an_existing_topic_backfills
  DisableRemoteLogOnTopicTest            test_copy_disable_then_disable_with_delete
  TransactionsWithTieredStoreTest        test_transactions_with_the_tier
  ReassignReplicaMoveTest                test_reassigned_replica_rebuilds_from_the_tier
  PartitionsExpandTest                   test_partition_growth
"""

from __future__ import annotations

import time

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.structs import EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP
from tests.support.tier_cluster import (
    Tier,
    consume_values,
    produce,
    produce_transactions,
    tier_settings,
    tier_topic_configs,
    wait_until,
)
from tests.support.tier_verifier import table_exists

from .conftest import TEST_CONFIG

EARLIEST, LATEST = -2, -1
ON_BROKER_0 = {0: [0]}


@pytest.fixture(scope="module")
def tier(tmp_path_factory):
    root = tmp_path_factory.mktemp("tier-tables")
    with EmbeddedCluster(
        brokers=2,
        data_dir=tmp_path_factory.mktemp("tier-cluster"),
        config=tier_settings(root, TEST_CONFIG),
    ) as cluster:
        running = Tier(cluster, root)
        yield running
        running.close()


def _values(n: int, start: int = 0) -> list[bytes]:
    return [b"v%d" % i for i in range(start, start + n)]


def _earliest_local_at_least(tier: Tier, topic: str, offset: int) -> int:
    return wait_until(
        lambda: (o := tier.list_offset(topic, 0, EARLIEST_LOCAL_TIMESTAMP)) >= offset and o,
        f"{topic}: earliest local offset >= {offset}",
    )


def test_offload_and_consume_from_the_leader(tier):
    topic = tier.create_topic(assignment=ON_BROKER_0)
    assert produce(tier.bootstrap, topic, _values(3)) == [0, 1, 2]
    tier.wait_tiered(topic, {0: 2})
    _earliest_local_at_least(tier, topic, 2)
    assert all(base >= 2 for base in tier.local_segments(topic, 0))
    # offsets 0 and 1 exist only in the table now; the leader serves them
    assert consume_values(tier.bootstrap, topic, 0, 1, 2) == [(1, b"v1"), (2, b"v2")]
    # (A.3) after a restart the broker still knows what its table holds
    tier.cluster.restart_broker(0)
    wait_until(lambda: tier.cluster.leader_of(topic, 0) == 0, "the leader back")
    assert consume_values(tier.bootstrap, topic, 0, 0, 3) == [(0, b"v0"), (1, b"v1"), (2, b"v2")]
    tier.verify(topic)


def test_roll_and_offload_the_active_segment(tier):
    """Kafka rolls an active segment that is wholly past local retention, so it is copied and
    the earliest local offset moves to the new, empty one."""
    topic = tier.create_topic(assignment=ON_BROKER_0)
    produce(tier.bootstrap, topic, _values(4))
    tier.wait_tiered(topic, {0: 4})
    assert _earliest_local_at_least(tier, topic, 4) == 4
    assert consume_values(tier.bootstrap, topic, 0, 0, 4) == list(enumerate(_values(4)))
    tier.verify(topic)


def test_freshness_copies_the_active_segment_unrolled(tier):
    """`remote.table.freshness.ms`: the stable prefix of the active segment reaches the table
    without a roll; local data stays (local retention follows retention)."""
    configs = {
        "remote.storage.enable": "true",
        "remote.table.freshness.ms": "100",
    }
    topic = tier.create_topic(assignment=ON_BROKER_0, configs=configs)
    produce(tier.bootstrap, topic, _values(5), one_batch_each=False)
    tier.wait_tiered(topic, {0: 5})
    assert tier.local_segments(topic, 0) == [0]
    produce(tier.bootstrap, topic, _values(3, start=5), one_batch_each=False)
    tier.wait_tiered(topic, {0: 8})
    assert tier.local_segments(topic, 0) == [0]
    tier.verify(topic)


def test_list_offsets_across_the_tiers(tier):
    topic = tier.create_topic(assignment=ON_BROKER_0, configs=tier_topic_configs())
    t0 = int(time.time() * 1000) - 60_000
    produce(tier.bootstrap, topic, _values(6), timestamps=[t0 + i for i in range(6)])
    # local retention rolls the active segment too (Kafka): everything ends in the table
    tier.wait_tiered(topic, {0: 6})
    local = _earliest_local_at_least(tier, topic, 6)
    assert tier.list_offset(topic, 0, EARLIEST) == 0
    assert tier.list_offset(topic, 0, LATEST) == 6
    tiered_last = tier.list_offset(topic, 0, LATEST_TIERED_TIMESTAMP)
    assert tiered_last == local - 1  # the last offset the table holds, inclusive
    # by timestamp: from the table below the local start, from the local log above it
    assert tier.list_offset(topic, 0, t0 - 1) == 0
    assert tier.list_offset(topic, 0, t0) == 0
    assert tier.list_offset(topic, 0, t0 + 1) == 1
    assert tier.list_offset(topic, 0, t0 + 3) == 3
    assert tier.list_offset(topic, 0, t0 + 5) == 5
    assert tier.list_offset(topic, 0, t0 + 6) == -1
    # DeleteRecords (DeleteSegmentsDueToLogStartOffsetBreachTest): the table's rows go too
    assert tier.delete_records(topic, 0, 3) == 3
    assert tier.list_offset(topic, 0, EARLIEST) == 3
    wait_until(lambda: tier.table_ranges(topic).get(0, (3, 0))[0] >= 3, "rows below 3 deleted")
    assert tier.list_offset(topic, 0, EARLIEST_LOCAL_TIMESTAMP) == local
    tier.verify(topic)
    # every tiered offset deleted: earliest = earliest local; latest tiered stays (Kafka)
    tier.delete_records(topic, 0, local)
    assert tier.list_offset(topic, 0, EARLIEST) == local
    assert tier.list_offset(topic, 0, EARLIEST_LOCAL_TIMESTAMP) == local
    assert tier.list_offset(topic, 0, LATEST_TIERED_TIMESTAMP) == tiered_last
    wait_until(lambda: 0 not in tier.table_ranges(topic), "every row deleted")


@pytest.mark.parametrize("setting", ["retention.ms", "retention.bytes"])
def test_retention_deletes_from_the_table(tier, setting):
    """DeleteSegmentsByRetentionTime/SizeTest: whole-log retention applies to the table."""
    topic = tier.create_topic(assignment=ON_BROKER_0)
    produce(tier.bootstrap, topic, _values(4))
    tier.wait_tiered(topic, {0: 3})
    tier.alter_topic(topic, **{setting: "1"})
    start = wait_until(
        lambda: (o := tier.list_offset(topic, 0, EARLIEST)) >= 3 and o, "the log start to move"
    )
    wait_until(
        lambda: tier.table_ranges(topic).get(0, (start, 0))[0] >= start,
        "the table's rows below the log start deleted",
    )
    tier.verify(topic)


def test_delete_topic_drops_its_table(tier):
    topic = tier.create_topic(assignment=ON_BROKER_0)
    produce(tier.bootstrap, topic, _values(3))
    tier.wait_tiered(topic, {0: 2})
    location = tier.location(topic)
    tier.admin.delete_topics([topic])
    wait_until(lambda: not table_exists(location), "the topic's table dropped")


def test_enable_on_an_existing_topic_backfills(tier):
    topic = tier.create_topic(assignment=ON_BROKER_0, configs={"segment.bytes": "100"})
    produce(tier.bootstrap, topic, _values(4))
    assert not table_exists(tier.location(topic))
    tier.alter_topic(topic, remote_storage_enable="true", local_retention_ms="1")
    tier.wait_tiered(topic, {0: 3})  # the history from offset 0, not only what comes next
    _earliest_local_at_least(tier, topic, 3)
    produce(tier.bootstrap, topic, _values(2, start=4))
    tier.wait_tiered(topic, {0: 5})
    tier.verify(topic)


def test_copy_disable_then_disable_with_delete(tier):
    topic = tier.create_topic(assignment=ON_BROKER_0)
    produce(tier.bootstrap, topic, _values(3))
    tier.wait_tiered(topic, {0: 3})  # all three: local retention rolls the active one too
    # Kafka: with copies off local retention must equal retention (nothing leaves the disk)
    tier.alter_topic(topic, remote_log_copy_disable="true", local_retention_ms="-2")
    leader = tier.cluster.brokers[0]
    wait_until(
        lambda: leader.metadata.image.topic_config(topic).get("remote.log.copy.disable") == "true",
        "the leader to see copies disabled",
    )
    time.sleep(0.3)  # a copy round that started before it ends
    produce(tier.bootstrap, topic, _values(2, start=3))
    time.sleep(1.0)  # ten copy-task intervals: nothing may be copied in them
    assert tier.table_ranges(topic)[0][1] == 3
    assert tier.list_offset(topic, 0, EARLIEST) == 0  # tiered data stays readable
    tier.verify(topic)
    # Kafka refuses to turn the tier off without deleting it (KIP-950)
    with pytest.raises(Exception, match="remote.log.delete.on.disable"):
        tier.alter_topic(topic, remote_storage_enable="false")
    tier.alter_topic(topic, remote_storage_enable="false", remote_log_delete_on_disable="true")
    wait_until(lambda: not tier.table_ranges(topic), "the table's rows deleted")
    local = tier.list_offset(topic, 0, EARLIEST_LOCAL_TIMESTAMP)
    wait_until(lambda: tier.list_offset(topic, 0, EARLIEST) == local, "log start = local start")
    assert consume_values(tier.bootstrap, topic, 0, local, 5 - local)[0][0] == local


def test_transactions_with_the_tier(tier):
    """TransactionsWithTieredStoreTest: committed and aborted transactions beside idempotent
    records, all below the LSO copied (freshness copies the markers in the active segment);
    read_committed readers get the committed data from the table, aborted data flagged. One
    transactional producer commits and aborts twice, so the aborted list of a read holds two
    transactions of one producer id."""
    configs = tier_topic_configs(remote_table_freshness_ms=100)
    topic = tier.create_topic(assignment=ON_BROKER_0, configs=configs)
    produce(tier.bootstrap, topic, _values(2))
    produce_transactions(
        tier.bootstrap,
        topic,
        [
            ([b"c0", b"c1"], True),
            ([b"a0", b"a1"], False),
            ([b"c2"], True),
            ([b"a2", b"a3"], False),
        ],
        partitions=[0],
    )
    produce(tier.bootstrap, topic, _values(2, start=2))
    end = tier.list_offset(topic, 0, LATEST)
    assert end == 2 + (2 + 2 + 1 + 2) + 4 + 2  # four markers
    tier.wait_tiered(topic, {0: end})
    _earliest_local_at_least(tier, topic, 1)
    committed = consume_values(
        tier.bootstrap, topic, 0, 0, 7, **{"isolation.level": "read_committed"}
    )
    assert [v for _, v in committed] == [b"v0", b"v1", b"c0", b"c1", b"c2", b"v2", b"v3"]
    report = tier.verify(topic)
    assert report.partitions[0].aborted_rows == 4 and report.partitions[0].control_rows == 4


@pytest.mark.slow
def test_reassigned_replica_rebuilds_from_the_tier(tier):
    """ReassignReplicaMoveTest: the partition moves from broker 0 to broker 1, whose new
    replica starts at the leader's local log start (OFFSET_MOVED_TO_TIERED_STORAGE, epochs
    and producer state from the table); the new leader serves tiered offsets and copies on
    from the table's end."""
    topic = tier.create_topic(assignment=ON_BROKER_0)
    produce(tier.bootstrap, topic, _values(3))
    tier.wait_tiered(topic, {0: 2})
    _earliest_local_at_least(tier, topic, 2)
    tier.admin.alter_partition_reassignments({(topic, 0): [1]})
    wait_until(
        lambda: tier.cluster.leader_of(topic, 0) == 1 and tier.cluster.isr_of(topic, 0) == (1,),
        "the partition to move to broker 1",
    )
    assert consume_values(tier.bootstrap, topic, 0, 0, 3) == list(enumerate(_values(3)))
    produce(tier.bootstrap, topic, _values(2, start=3))
    tier.wait_tiered(topic, {0: 4})
    tier.verify(topic)


def test_partition_growth(tier):
    topic = tier.create_topic(assignment=ON_BROKER_0)
    produce(tier.bootstrap, topic, _values(3))
    tier.admin.create_partitions({topic: 2})
    wait_until(lambda: tier.cluster.leader_of(topic, 1) >= 0, "the new partition's leader")
    produce(tier.bootstrap, topic, _values(3, start=10), partition=1)
    tier.wait_tiered(topic, {0: 2, 1: 2})
    tier.verify(topic, partitions=2)
