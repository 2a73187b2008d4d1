"""The remote tier on a real S3-compatible server (S3Proxy) with brokers in processes of their
own and no AWS_* environment: the brokers reach the topic tables with their own
`remote.table.storage.options.*` settings (the driver's `storage.options.*` never leave it),
copy, and serve the tiered offsets back."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from deltalake import DeltaTable

from sparklog.client import (
    AdminClient,
    ConfigResource,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
    TopicPartition,
)
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.storage.remote.schema import TOPIC_ID_KEY, app_id, table_location
from tests.s3proxy import SECRET_KEY

from .conftest import TEST_CONFIG

pytestmark = pytest.mark.slow


def _copied_end(location: str, options: dict[str, str]) -> int:
    """The table's copied end of partition 0 (its app transaction's version), -1 if none."""
    try:
        table = DeltaTable(location, storage_options=options)
    except Exception:  # noqa: BLE001 - not created yet
        return -1
    topic_id = uuid.UUID(table.metadata().configuration[TOPIC_ID_KEY])
    version = table.transaction_version(app_id(topic_id, 0))
    return -1 if version is None else int(version)


def test_brokers_reach_the_tier_on_s3_with_their_own_storage_options(
    s3proxy, tmp_path, monkeypatch
):
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)  # the broker processes inherit no credentials
    bucket = s3proxy.create_bucket(f"tier-{uuid.uuid4().hex[:8]}")
    root = f"s3://{bucket}/tables"
    options = s3proxy.storage_options()
    config = {
        **TEST_CONFIG,
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "100",
        "remote.log.manager.task.retry.backoff.ms": "100",
        "remote.log.manager.task.retry.backoff.max.ms": "500",
        "remote.table.root": root,
        **{f"remote.table.storage.options.{k}": v for k, v in options.items()},
    }
    topic = f"s3tier-{uuid.uuid4().hex[:8]}"
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path, config=config, broker_processes=True
    ) as cluster:
        bootstrap = cluster.bootstrap_servers
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            configs = {
                "remote.storage.enable": "true",
                "segment.bytes": "100",
                "local.retention.ms": "1",
            }
            admin.create_topics([NewTopic(topic, 1, 1, configs=configs)])
        with KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
            for i in range(5):
                producer.send(topic, b"v%d" % i, partition=0).result(30)
        location = table_location(root, topic)
        deadline = time.monotonic() + 60
        while _copied_end(location, options) < 5:
            assert time.monotonic() < deadline, "the broker copied nothing to the table on s3"
            time.sleep(0.2)
        consumer = KafkaConsumer({"bootstrap.servers": bootstrap})
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + 30
            while len(got) < 5:
                assert time.monotonic() < deadline, f"read back only {got}"
                got += [(r.offset, r.value) for r in consumer.poll(500)]
            assert got == [(i, b"v%d" % i) for i in range(5)]
        finally:
            consumer.close()
        # DescribeConfigs never answers the broker's secret
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            described = admin.describe_configs([ConfigResource("broker", "0")])
        assert SECRET_KEY not in repr(described)
