"""A batch damaged on Apache Kafka's disk reaches the consumer inside a good Fetch response:
Kafka's broker serves segment bytes as they are (zero-copy, no CRC check), so the client's own
check (`check.crcs`) is what finds it. confluent-kafka with `check.crcs=true` is the oracle for
which records precede the damage; sparklog's consumer delivers exactly those, then raises
CorruptBatchError on every poll until the application seeks past the batch (issue 27 item 6,
where `poll()` raised once and skipped 150 records and `poll_arrow()` delivered nothing)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.errors import CorruptBatchError
from tests.corrupt_log import damage_batch_holding, oracle_read, produce_batches, sparklog_read

pytestmark = pytest.mark.oracle


@pytest.fixture(scope="module")
def damaged(apache_kafka):
    topic = f"damaged-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": apache_kafka.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    values = produce_batches(apache_kafka.bootstrap_servers, topic, 50, 20)
    damage = damage_batch_holding(apache_kafka.log_dir(1) / f"{topic}-0", 600)
    return apache_kafka.bootstrap_servers, topic, values, damage


@pytest.mark.parametrize("how", ["poll", "poll_arrow", "poll_arrow-python"])
def test_a_corrupt_batch_inside_a_response_stops_the_consumer_there(damaged, how):
    bootstrap, topic, values, damage = damaged
    want, code = oracle_read(bootstrap, topic, check_crcs=True)
    assert want == [(o, values[o]) for o in range(damage.base_offset)], code

    read = sparklog_read(bootstrap, topic, how, skip_to=damage.next_offset, rest=40)
    assert read.records == want, "every record before the damaged batch, once, in order"
    assert len(read.errors) == 3 and read.polls_after_first_error == 2, "every poll raises"
    error = read.errors[0]
    assert all(isinstance(e, CorruptBatchError) for e in read.errors), read.errors
    assert (error.topic, error.partition, error.offset) == (topic, 0, damage.base_offset)
    assert f"{topic}-0 at offset {damage.base_offset}" in str(error)
    assert error.code == 2 and not error.retriable and "CRC-32C" in str(error)
    assert not error.refetching, "Kafka's consumer does not fetch bytes it found corrupt again"
    following = range(damage.next_offset, damage.next_offset + 40)
    assert read.after_seek[:40] == [(o, values[o]) for o in following]
