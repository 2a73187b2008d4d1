"""Kafka's own clients read offsets that exist only in a topic's table (issue 32 §4): Kafka's
Java console consumer, kafka-python and confluent-kafka consume from offset 0 of a topic whose
first segments left the broker's disk once tiered, and Kafka's GetOffsetShell lists the
earliest local (-4) and latest tiered (-5) offsets (ListOffsets v8/v9, KIP-405/KIP-1005)."""

from __future__ import annotations

import re

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.structs import EARLIEST_LOCAL_TIMESTAMP
from tests.support.tier_cluster import Tier, consume_values, produce, tier_settings, wait_until

from .java_tools import classpath_or_fail
from .test_kafka_tools import tool

pytestmark = pytest.mark.interop

RECORDS = 20


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    """A topic of RECORDS one-batch segments, all but the active one only in the table."""
    root = tmp_path_factory.mktemp("tier-tables")
    config = tier_settings(root, {"broker.heartbeat.interval.ms": "200"})
    config["log.retention.check.interval.ms"] = "100"
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path_factory.mktemp("tier-interop"), config=config
    ) as cluster:
        tier = Tier(cluster, root)
        topic = tier.create_topic(assignment={0: [0]})
        produce(tier.bootstrap, topic, [b"v%d" % i for i in range(RECORDS)])
        # every record: local retention rolls the active segment too, so all end in the table
        tier.wait_tiered(topic, {0: RECORDS})
        wait_until(
            lambda: tier.list_offset(topic, 0, EARLIEST_LOCAL_TIMESTAMP) >= RECORDS,
            "the tiered segments to leave the disk",
        )
        yield tier, topic
        tier.close()


def _expected() -> list[str]:
    return [f"v{i}" for i in range(RECORDS)]


def test_java_console_consumer_reads_tiered_offsets(tiered):
    tier, topic = tiered
    classpath_or_fail()
    out = tool("consumer.ConsoleConsumer", "--bootstrap-server", tier.bootstrap,
               "--topic", topic, "--partition", "0", "--offset", "earliest",
               "--max-messages", str(RECORDS))  # fmt: skip
    assert out.splitlines() == _expected()


def test_get_offset_shell_lists_earliest_local_and_latest_tiered(tiered):
    tier, topic = tiered
    classpath_or_fail()

    def offset(time_spec: str) -> int:
        out = tool("GetOffsetShell", "--bootstrap-server", tier.bootstrap, "--topic", topic,
                   "--time", time_spec)  # fmt: skip
        return int(re.findall(rf"^{topic}:0:(-?\d+)$", out, re.M)[0])

    local = tier.list_offset(topic, 0, EARLIEST_LOCAL_TIMESTAMP)
    assert offset("-2") == 0
    assert offset("-4") == local
    assert offset("-5") == local - 1
    assert offset("-1") == RECORDS


def test_kafka_python_reads_tiered_offsets(tiered):
    from kafka import KafkaConsumer, TopicPartition

    tier, topic = tiered
    consumer = KafkaConsumer(
        bootstrap_servers=tier.bootstrap, enable_auto_commit=False, consumer_timeout_ms=20_000
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        for message in consumer:
            got.append((message.offset, message.value.decode()))
            if len(got) == RECORDS:
                break
    finally:
        consumer.close()
    assert got == list(enumerate(_expected()))


def test_confluent_kafka_reads_tiered_offsets(tiered):
    tier, topic = tiered
    got = consume_values(tier.bootstrap, topic, 0, 0, RECORDS)
    assert [(o, v.decode()) for o, v in got] == list(enumerate(_expected()))
