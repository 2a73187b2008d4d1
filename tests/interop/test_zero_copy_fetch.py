"""Fetch answered with sendfile from the segment files (Kafka's zero-copy transferTo): every
client reads exactly what a copying broker serves, and the large ranges did go by sendfile."""

from __future__ import annotations

import pytest

from sparklog.cluster.embedded import EmbeddedCluster

from .test_clients_interop import (
    CLUSTER_CONFIG,
    CONSUMERS,
    expected,
    make_records,
    new_topic,
    produce_sparklog,
)

pytestmark = pytest.mark.interop

COUNT = 3_000  # about 1 MB: every first fetch of a partition exceeds ZERO_COPY_MIN_BYTES


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path_factory.mktemp("zero-copy"), config=CLUSTER_CONFIG
    ) as running:
        yield running


@pytest.fixture(scope="module")
def topic(cluster):
    name = new_topic(cluster)
    records = make_records(COUNT, same_headers=False, timestamps=True)
    produce_sparklog(cluster.bootstrap_servers, name, records, "none")
    return name, expected(records)


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize("zero_copy", [True, False], ids=["sendfile", "copied"])
def test_every_client_reads_the_same_records(cluster, topic, consumer, zero_copy):
    name, want = topic
    apis = cluster.brokers[0].apis
    apis.zero_copy_fetch = zero_copy
    before = apis.zero_copy_fetch_bytes
    try:
        got = CONSUMERS[consumer](cluster.bootstrap_servers, name, len(want))
    finally:
        apis.zero_copy_fetch = True
    assert sorted(got, key=lambda r: (r.partition, r.offset)) == want
    sent = apis.zero_copy_fetch_bytes - before
    assert (sent > 0) == zero_copy, f"{sent} bytes went by sendfile"


def test_quotas_configured_but_not_hit_keep_sendfile(cluster, topic):
    """1,000 quota entities of other clients plus a `<default>` client-id consumer quota this
    consumer stays under: its Fetches still go out by sendfile (the bench's 1,000-entity
    consume cell takes this path), unthrottled."""
    from sparklog.metadata.quotas import ClientQuotaEntity, QuotasImage, quota_record

    image = QuotasImage()
    for i in range(1000):
        entity = ClientQuotaEntity.of({("user", "client-id")[i % 2]: f"other-{i}"})
        image.replay(quota_record(entity, "consumer_byte_rate", 1e6))
    default = ClientQuotaEntity.of({"client-id": None})
    image.replay(quota_record(default, "consumer_byte_rate", 1e12))
    name, want = topic
    broker = cluster.brokers[0]
    kept = broker.quotas.source
    broker.quotas.source = lambda: image
    before = broker.server.file_responses_sent
    try:
        got = CONSUMERS["confluent"](cluster.bootstrap_servers, name, len(want))
    finally:
        broker.quotas.source = kept
    assert sorted(got, key=lambda r: (r.partition, r.offset)) == want
    assert broker.server.file_responses_sent > before, "no Fetch went out by sendfile"
    assert broker.server.muted_connections == 0
