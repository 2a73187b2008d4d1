"""Brokers on loopback with a real controller: Kafka's APIs end to end at the protocol level."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
import uuid

import pytest

from sparklog.broker.server import BrokerServer
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol.api_versions import (
    BROKER_ADVERTISED_APIS,
    BROKER_APIS,
    SASL_APIS_VERSIONS,
    ApiKey,
)
from sparklog.records import CompressionType, SimpleRecord, TimestampType, build_batch
from sparklog.records.batch import CRC_OFFSET

from .broker_wire import (
    batch,
    call,
    closed_by_peer,
    connect,
    create_topic,
    fetch,
    frame,
    list_offset,
    metadata,
    now_ms,
    produce,
    raw_socket,
    read_frame,
    records_of,
    run,
)
from .conftest import TEST_CONFIG

NONE, OFFSET_OUT_OF_RANGE, CORRUPT_MESSAGE, UNKNOWN_TOPIC = 0, 1, 2, 3
NOT_LEADER, MESSAGE_TOO_LARGE, INVALID_TOPIC = 6, 10, 17
INVALID_REQUIRED_ACKS, INVALID_TIMESTAMP, UNSUPPORTED_VERSION = 21, 32, 35
OUT_OF_ORDER_SEQUENCE, INVALID_PRODUCER_EPOCH = 45, 47
FETCH_SESSION_ID_NOT_FOUND, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 70, 74, 75
NOT_COORDINATOR = 16


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- versions, metadata, admin -----------------------------------------------------------------


def test_api_versions_announces_the_broker_table(cluster):
    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            return conn.api_versions
        finally:
            await conn.close()

    announced = run(go())
    # every listener announces the SASL handshake APIs too, as Kafka's brokers do
    advertised = {**BROKER_ADVERTISED_APIS, **SASL_APIS_VERSIONS}
    assert announced == {int(k): v for k, v in advertised.items()}
    # Like Kafka 4.0 (KAFKA-18659): Produce listed from v0, so old librdkafka compresses ...
    assert announced[ApiKey.PRODUCE] == (0, BROKER_APIS[ApiKey.PRODUCE][1])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_closes_the_connection_as_kafka_4_does(cluster, version):
    # ... and a Produce v0-v2 request is refused by closing the connection.
    payload = struct.pack(">hii", 1, 1000, 0)  # acks, timeout, no topics (v0 body)
    sock = raw_socket(cluster.bootstrap_servers)
    with sock:
        sock.sendall(frame(ApiKey.PRODUCE, version, correlation_id=9, payload=payload))
        assert closed_by_peer(sock)
    sock = raw_socket(cluster.bootstrap_servers)
    with sock:  # the broker keeps serving others
        sock.sendall(frame(ApiKey.API_VERSIONS, 0, correlation_id=10))
        assert int.from_bytes(read_frame(sock)[0:4], "big") == 10


def test_api_versions_at_an_unknown_version_answers_v0_with_unsupported_version(cluster):
    sock = raw_socket(cluster.bootstrap_servers)
    with sock:
        sock.sendall(frame(ApiKey.API_VERSIONS, 99, correlation_id=7))
        response = read_frame(sock)
    assert int.from_bytes(response[0:4], "big") == 7  # correlation id, v0 header
    assert int.from_bytes(response[4:6], "big", signed=True) == UNSUPPORTED_VERSION
    assert int.from_bytes(response[6:10], "big") == len(
        {**BROKER_ADVERTISED_APIS, **SASL_APIS_VERSIONS}
    )


def test_metadata_auto_creates_a_topic_and_lists_the_broker(cluster):
    topic = unique("auto")

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            refused = await metadata(conn, [topic], allow_auto=False)
            created = await metadata(conn, [topic])
            everything = await metadata(conn, None)
            return refused, created, everything
        finally:
            await conn.close()

    refused, created, everything = run(go())
    assert refused.topics[0].error_code == UNKNOWN_TOPIC
    broker = cluster.brokers[0]
    assert [(b.node_id, b.host, b.port) for b in created.brokers] == [
        (broker.node_id, broker.host, broker.port),  # brokers only: not the coordinator
    ]
    assert created.cluster_id == broker.cluster_id
    t = created.topics[0]
    assert (t.error_code, t.name, len(t.partitions)) == (NONE, topic, 1)
    p = t.partitions[0]
    assert (p.error_code, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)) == (
        NONE,
        broker.node_id,
        (broker.node_id,),
        (broker.node_id,),
    )
    assert topic in {t.name for t in everything.topics}


def test_metadata_for_an_invalid_name_is_not_auto_created(cluster):
    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            return await metadata(conn, ["bad name!"])
        finally:
            await conn.close()

    assert run(go()).topics[0].error_code == INVALID_TOPIC


def test_admin_requests_are_forwarded_and_visible_right_after(cluster):
    topic = unique("admin")

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            created = await create_topic(
                conn, topic, partitions=2, configs={"retention.ms": "12345"}
            )
            after_create = await metadata(conn, [topic], allow_auto=False)
            duplicate = await create_topic(conn, topic)
            more = await call(
                conn,
                ApiKey.CREATE_PARTITIONS,
                {
                    "topics": [{"name": topic, "count": 3, "assignments": None}],
                    "timeout": 10_000,
                    "validate_only": False,
                },
            )
            after_grow = await metadata(conn, [topic], allow_auto=False)
            altered = await call(
                conn,
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                {
                    "resources": [
                        {
                            "resource_type": 2,
                            "resource_name": topic,
                            "configs": [
                                {
                                    "name": "cleanup.policy",
                                    "config_operation": 0,
                                    "value": "compact",
                                }
                            ],
                        }
                    ],
                    "validate_only": False,
                },
            )
            described = await call(
                conn,
                ApiKey.DESCRIBE_CONFIGS,
                {
                    "resources": [
                        {"resource_type": 2, "resource_name": topic, "configuration_keys": None}
                    ],
                    "include_synonyms": False,
                    "include_documentation": False,
                },
            )
            deleted = await call(
                conn, ApiKey.DELETE_TOPICS, {"topic_names": [topic], "timeout": 10_000}
            )
            after_delete = await metadata(conn, [topic], allow_auto=False)
            return (
                created,
                after_create,
                duplicate,
                more,
                after_grow,
                altered,
                described,
                deleted,
                after_delete,
            )
        finally:
            await conn.close()

    (
        created,
        after_create,
        duplicate,
        more,
        after_grow,
        altered,
        described,
        deleted,
        after_delete,
    ) = run(go())
    assert created.error_code == NONE
    assert len(after_create.topics[0].partitions) == 2
    assert duplicate.error_code == 36  # TOPIC_ALREADY_EXISTS
    assert more.results[0].error_code == NONE
    assert len(after_grow.topics[0].partitions) == 3
    assert altered.responses[0].error_code == NONE
    configs = {c.name: c for c in described.results[0].configs}
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("12345", 1)
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].config_source) == (
        "compact",
        1,
    )
    assert configs["segment.bytes"].config_source == 5  # DEFAULT_CONFIG
    assert deleted.responses[0].error_code == NONE
    assert after_delete.topics[0].error_code == UNKNOWN_TOPIC
    broker_dir = cluster.broker_dir(cluster.brokers[0].node_id)
    assert not list(broker_dir.glob(f"{topic}-*")), "deleting a topic removes its partition dirs"


def test_describe_configs_of_the_broker_and_of_an_unknown_topic(cluster):
    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            return await call(
                conn,
                ApiKey.DESCRIBE_CONFIGS,
                {
                    "resources": [
                        {
                            "resource_type": 4,
                            "resource_name": str(cluster.brokers[0].node_id),
                            "configuration_keys": None,
                        },
                        {
                            "resource_type": 2,
                            "resource_name": "no-such-topic",
                            "configuration_keys": None,
                        },
                    ],
                    "include_synonyms": True,
                    "include_documentation": False,
                },
            )
        finally:
            await conn.close()

    broker, missing = run(go()).results
    configs = {c.name: c for c in broker.configs}
    assert broker.error_code == NONE
    assert configs["log.retention.check.interval.ms"].value == "100"
    assert configs["log.retention.check.interval.ms"].config_source == 4  # STATIC_BROKER_CONFIG
    assert configs["socket.request.max.bytes"].config_source == 5
    assert missing.error_code == UNKNOWN_TOPIC


def test_describe_cluster(cluster):
    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            return await call(
                conn, ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False}
            )
        finally:
            await conn.close()

    response = run(go())
    broker = cluster.brokers[0]
    assert response.error_code == NONE and response.cluster_id == broker.cluster_id
    assert [(b.broker_id, b.port) for b in response.brokers] == [(broker.node_id, broker.port)]


# -- produce and fetch ---------------------------------------------------------------------------


@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize(
    "compression",
    [
        CompressionType.NONE,
        CompressionType.GZIP,
        CompressionType.SNAPPY,
        CompressionType.LZ4,
        CompressionType.ZSTD,
    ],
)
def test_produce_fetch_round_trip(cluster, acks, compression):
    topic = unique(f"rt-{compression.name.lower()}")
    records = [
        SimpleRecord(b"v1", key=b"k1", headers=(("h", b"x"), ("n", None))),
        SimpleRecord(None, key=b"tombstone"),
        SimpleRecord(b"no key"),
        SimpleRecord(b"", key=b"", headers=()),
    ]

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, topic)
            first = await produce(
                conn,
                topic,
                build_batch(records, now_ms=now_ms(), compression=compression),
                acks=acks,
            )
            second = await produce(
                conn, topic, build_batch(records[:1], now_ms=now_ms()), acks=acks
            )
            if acks == 0:  # no response: wait until the appends are visible
                for _ in range(200):
                    if (await list_offset(conn, topic, -1)).offset == 5:
                        break
                    await asyncio.sleep(0.01)
            fetched = await fetch(conn, topic, 0)
            return first, second, fetched
        finally:
            await conn.close()

    first, second, fetched = run(go())
    if acks != 0:
        assert (first.error_code, first.base_offset) == (NONE, 0)
        assert (second.error_code, second.base_offset) == (NONE, 4)
        assert first.log_append_time is None  # CreateTime topic: -1
    assert fetched.error_code == NONE and fetched.high_watermark == 5
    got = records_of(fetched.records)
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    assert [(r.key, r.value, tuple(r.headers)) for r in got[:4]] == [
        (r.key, r.value, tuple(r.headers)) for r in records
    ]


def test_log_append_time_topic_stamps_the_broker_clock(cluster):
    topic = unique("lat")

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, topic, configs={"message.timestamp.type": "LogAppendTime"})
            before = now_ms()
            produced = await produce(conn, topic, build_batch([SimpleRecord(b"a", timestamp=1)]))
            return before, produced, await fetch(conn, topic, 0)
        finally:
            await conn.close()

    before, produced, fetched = run(go())
    assert produced.error_code == NONE
    append_ms = int(produced.log_append_time.timestamp() * 1000)
    assert before <= append_ms <= now_ms()
    (record,) = records_of(fetched.records)
    assert (record.timestamp, record.timestamp_type) == (append_ms, TimestampType.LOG_APPEND_TIME)


def test_produce_errors_per_partition_while_other_clients_keep_working(cluster):
    topic = unique("errors")

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        other = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, topic, configs={"max.message.bytes": "2000"})
            too_large = await produce(conn, topic, batch([b"x" * 5000]))
            corrupt = bytearray(batch([b"flipped"]))
            corrupt[CRC_OFFSET] ^= 0xFF
            corrupted = await produce(conn, topic, bytes(corrupt))
            torn = await produce(conn, topic, batch([b"torn"])[:-3])
            future = await produce(
                conn, topic, build_batch([SimpleRecord(b"f", timestamp=now_ms() + 10 * 3600_000)])
            )
            unknown = await produce(conn, unique("missing"), batch([b"x"]))
            bad_partition = await produce(conn, topic, batch([b"x"]), partition=7)
            bad_acks = await produce(conn, topic, batch([b"x"]), acks=2)
            ok = await produce(other, topic, batch([b"fine"]))
            log_end = await list_offset(conn, topic, -1)
            return too_large, corrupted, torn, future, unknown, bad_partition, bad_acks, ok, log_end
        finally:
            await conn.close()
            await other.close()

    too_large, corrupted, torn, future, unknown, bad_partition, bad_acks, ok, log_end = run(go())
    assert too_large.error_code == MESSAGE_TOO_LARGE
    assert corrupted.error_code == CORRUPT_MESSAGE
    assert torn.error_code == CORRUPT_MESSAGE
    assert future.error_code == INVALID_TIMESTAMP
    assert unknown.error_code == UNKNOWN_TOPIC
    assert bad_partition.error_code == UNKNOWN_TOPIC
    assert bad_acks.error_code == INVALID_REQUIRED_ACKS
    assert (ok.error_code, ok.base_offset) == (NONE, 0), "rejected batches left the log untouched"
    assert log_end.offset == 1


def test_idempotent_producer_dedupes_retries_and_rejects_gaps(cluster):
    topic = unique("idem")

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, topic)
            init = await call(
                conn,
                ApiKey.INIT_PRODUCER_ID,
                {"transactional_id": None, "transaction_timeout": 60_000},
            )
            txn = await call(
                conn,
                ApiKey.INIT_PRODUCER_ID,
                {"transactional_id": "tx", "transaction_timeout": 60_000},
            )
            pid = init.producer_id
            b0 = batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0)
            first = await produce(conn, topic, b0, acks=-1)
            retry = await produce(conn, topic, b0, acks=-1)
            gap = await produce(
                conn, topic, batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=5)
            )
            nxt = await produce(
                conn, topic, batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=2)
            )
            bumped = await produce(
                conn, topic, batch([b"d"], producer_id=pid, producer_epoch=1, base_sequence=0)
            )
            stale = await produce(
                conn, topic, batch([b"e"], producer_id=pid, producer_epoch=0, base_sequence=3)
            )
            fetched = await fetch(conn, topic, 0)
            return init, txn, first, retry, gap, nxt, bumped, stale, fetched
        finally:
            await conn.close()

    init, txn, first, retry, gap, nxt, bumped, stale, fetched = run(go())
    assert (init.error_code, init.producer_epoch) == (NONE, 0) and init.producer_id >= 0
    # forwarded to the driver's transaction coordinator, which fences with epoch 0
    assert (txn.error_code, txn.producer_epoch) == (NONE, 0)
    assert (first.error_code, first.base_offset) == (NONE, 0)
    assert (retry.error_code, retry.base_offset) == (NONE, 0), (
        "a retried batch is not written twice"
    )
    assert gap.error_code == OUT_OF_ORDER_SEQUENCE
    assert (nxt.error_code, nxt.base_offset) == (NONE, 2)
    assert (bumped.error_code, bumped.base_offset) == (NONE, 3)
    assert stale.error_code == INVALID_PRODUCER_EPOCH
    assert [r.value for r in records_of(fetched.records)] == [b"a", b"b", b"c", b"d"]


def test_a_second_producer_id_is_distinct(cluster):
    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            ids = []
            for _ in range(3):
                r = await call(
                    conn,
                    ApiKey.INIT_PRODUCER_ID,
                    {"transactional_id": None, "transaction_timeout": 1000},
                )
                ids.append(r.producer_id)
            return ids
        finally:
            await conn.close()

    ids = run(go())
    assert len(set(ids)) == 3


def test_fetch_errors_and_limits(cluster):
    topic = unique("fetch")

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, topic)
            for i in range(5):
                await produce(conn, topic, batch([b"%d" % i * 100]))
            beyond = await fetch(conn, topic, 99)
            at_end = await fetch(conn, topic, 5)
            small = await fetch(conn, topic, 0, partition_max_bytes=10)  # one whole batch anyway
            session = await fetch(conn, topic, 0, session_id=12, session_epoch=3)
            meta = await metadata(conn, [topic])
            epoch = meta.topics[0].partitions[0].leader_epoch
            fenced = (
                await fetch(conn, topic, 0, current_leader_epoch=epoch - 1) if epoch > 0 else None
            )
            unknown_epoch = await fetch(conn, topic, 0, current_leader_epoch=epoch + 1)
            old_version = await fetch(conn, topic, 2, version=4)
            return beyond, at_end, small, session, fenced, unknown_epoch, old_version
        finally:
            await conn.close()

    beyond, at_end, small, session, fenced, unknown_epoch, old_version = run(go())
    assert beyond.error_code == OFFSET_OUT_OF_RANGE
    assert (at_end.error_code, at_end.records, at_end.high_watermark) == (NONE, b"", 5)
    assert [r.offset for r in records_of(small.records)] == [0]
    assert session.error_code == FETCH_SESSION_ID_NOT_FOUND and session.session_id == 0
    assert fenced is None or fenced.error_code == FENCED_LEADER_EPOCH
    assert unknown_epoch.error_code == UNKNOWN_LEADER_EPOCH
    assert [r.offset for r in records_of(old_version.records)] == [2, 3, 4]


def test_long_poll_fetch_wakes_on_produce(cluster):
    topic = unique("poll")

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        producer = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, topic)
            waited_out = time.monotonic()
            empty = await fetch(conn, topic, 0, max_wait_ms=200)
            waited_out = time.monotonic() - waited_out
            started = time.monotonic()
            poll = asyncio.create_task(fetch(conn, topic, 0, max_wait_ms=20_000))
            await produce(producer, topic, batch([b"wake up"]))
            fetched = await poll
            return empty, waited_out, fetched, time.monotonic() - started
        finally:
            await conn.close()
            await producer.close()

    empty, waited_out, fetched, elapsed = run(go())
    assert empty.records == b"" and waited_out >= 0.19
    assert [r.value for r in records_of(fetched.records)] == [b"wake up"]
    assert elapsed < 10, "the append woke the waiting fetch long before max_wait_ms"


def test_list_offsets_epochs_and_delete_records(cluster):
    topic = unique("offsets")
    base = now_ms() - 60_000

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, topic)
            for i in range(4):
                await produce(
                    conn, topic, build_batch([SimpleRecord(b"x", timestamp=base + i * 1000)])
                )
            found = {
                ts: await list_offset(conn, topic, ts)
                for ts in (-2, -1, -3, base + 1500, base + 99_999)
            }
            epochs = await call(
                conn,
                ApiKey.OFFSET_FOR_LEADER_EPOCH,
                {
                    "replica_id": -1,
                    "topics": [
                        {"topic": topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}
                    ],
                },
            )
            deleted = await call(
                conn,
                ApiKey.DELETE_RECORDS,
                {
                    "topics": [
                        {"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}
                    ],
                    "timeout": 5000,
                },
            )
            earliest = await list_offset(conn, topic, -2)
            below = await fetch(conn, topic, 1)
            return found, epochs, deleted, earliest, below
        finally:
            await conn.close()

    found, epochs, deleted, earliest, below = run(go())
    assert found[-2].offset == 0
    assert found[-1].offset == 4
    assert (found[-3].offset, found[-3].timestamp) == (3, base + 3000)
    assert (found[base + 1500].offset, found[base + 1500].timestamp) == (2, base + 2000)
    assert found[base + 99_999].offset == -1
    p = epochs.topics[0].partitions[0]
    assert (p.error_code, p.leader_epoch, p.end_offset) == (NONE, 0, 4)
    assert deleted.topics[0].partitions[0].low_watermark == 2
    assert earliest.offset == 2
    assert below.error_code == OFFSET_OUT_OF_RANGE


# -- connections -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        frame(ApiKey.PRODUCE, 9, 1, b"\xff\xff\xff"),  # body cut short
        frame(ApiKey.METADATA, 1, 1, b"\x00\x00\x00\x05junk"),
        frame(999, 0, 1),  # unknown api
        frame(ApiKey.FETCH, 99, 1),  # unsupported version
        (2**31 - 1).to_bytes(4, "big"),  # beyond socket.request.max.bytes
        b"\x00\x00\x00\x01\x00",  # too short for a header
    ],
    ids=["cut", "junk", "unknown-api", "bad-version", "oversize", "tiny"],
)
def test_a_malformed_frame_closes_only_that_connection(cluster, bad, caplog):
    async def go():
        good = await connect(cluster.bootstrap_servers)
        try:
            sock = raw_socket(cluster.bootstrap_servers)
            with sock:
                sock.sendall(bad)
                closed = await asyncio.to_thread(closed_by_peer, sock)
            still = await metadata(good, [], allow_auto=False)
            fresh = await connect(cluster.bootstrap_servers)
            await fresh.close()
            return closed, still
        finally:
            await good.close()

    closed, still = run(go())
    assert closed
    assert still.brokers, "the other connection is still served"
    assert any("closing connection" in r.getMessage() for r in caplog.records), (
        "the reason is logged"
    )


def test_oversize_request_against_a_small_limit(tmp_path):
    config = {**TEST_CONFIG, "socket.request.max.bytes": "4096"}
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=config) as small:
        topic = unique("small")

        async def go():
            conn = await connect(small.bootstrap_servers)
            other = await connect(small.bootstrap_servers)
            try:
                await create_topic(conn, topic)
                with pytest.raises(ConnectionError):
                    await produce(conn, topic, batch([b"x" * 8000]))
                return await produce(other, topic, batch([b"ok"]))
            finally:
                await conn.close()
                await other.close()

        assert run(go()).error_code == NONE


# -- lifecycle -------------------------------------------------------------------------------


def test_broker_restart_recovers_data_and_identity(tmp_path):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=TEST_CONFIG) as c:
        topic = unique("restart")
        node_id = c.brokers[0].node_id

        async def write():
            conn = await connect(c.bootstrap_servers)
            try:
                await create_topic(conn, topic, partitions=2)
                for i in range(10):
                    await produce(conn, topic, batch([b"r%d" % i]), partition=i % 2)
            finally:
                await conn.close()

        async def read():
            conn = await connect(c.bootstrap_servers)
            try:
                return [
                    records_of((await fetch(conn, topic, 0, partition=p)).records) for p in (0, 1)
                ]
            finally:
                await conn.close()

        run(write())
        before = run(read())
        c.kill_broker(0)
        restarted = c.restart_broker(0)
        assert restarted.node_id == node_id
        assert run(read()) == before
        c.stop_broker(0)  # a clean stop, then a start from the checkpoints
        c.restart_broker(0)
        assert run(read()) == before
        assert sum(len(p) for p in before) == 10


def test_retention_thread_deletes_old_segments(cluster):
    topic = unique("retention")
    old = now_ms() - 3_600_000

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(
                conn, topic, configs={"segment.bytes": "200", "retention.ms": "60000"}
            )
            for i in range(5):
                await produce(
                    conn, topic, build_batch([SimpleRecord(b"o" * 100, timestamp=old + i)])
                )
            await produce(conn, topic, batch([b"new" * 40]))
            deadline = time.monotonic() + 20
            earliest = -1
            while earliest < 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # passes may land between the appends: wait for all
                earliest = (await list_offset(conn, topic, -2)).offset
            return earliest
        finally:
            await conn.close()

    assert run(go()) == 5


def test_controller_shutdown_request_stops_the_broker(tmp_path):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=TEST_CONFIG) as c:
        broker = c.brokers[0]
        c.controller.request_shutdown(broker.node_id)
        deadline = time.monotonic() + 10
        while broker.state.value != "not running" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert broker.state.value == "not running"
        assert broker.stop_reason == "the controller asked this broker to shut down"


def test_stop_leaves_no_threads(tmp_path):
    before = set(threading.enumerate())
    with EmbeddedCluster(brokers=2, data_dir=tmp_path, config=TEST_CONFIG) as c:
        run(_touch(c.bootstrap_servers))
    leftover = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert leftover == []


async def _touch(bootstrap):
    conn = await connect(bootstrap)
    try:
        topic = unique("touch")
        await create_topic(conn, topic)
        await produce(conn, topic, batch([b"x"]))
    finally:
        await conn.close()


# -- three brokers ---------------------------------------------------------------------------


def test_three_brokers_spread_leadership_and_refuse_foreign_partitions(cluster3):
    topic = unique("spread")

    async def go():
        conn = await connect(cluster3.bootstrap_servers)
        try:
            await create_topic(conn, topic, partitions=3)
            meta = await metadata(conn, [topic], allow_auto=False)
            leaders = {p.partition_index: p.leader_id for p in meta.topics[0].partitions}
            ports = {b.node_id: f"{b.host}:{b.port}" for b in meta.brokers}
            results = {}
            for index, leader in leaders.items():
                other = next(b for b in ports if b != leader)
                on_leader = await connect(ports[leader])
                on_other = await connect(ports[other])
                try:
                    good = await produce(on_leader, topic, batch([b"p%d" % index]), partition=index)
                    wrong = await produce(on_other, topic, batch([b"p%d" % index]), partition=index)
                    results[index] = (
                        good.error_code,
                        wrong.error_code,
                        wrong.current_leader.leader_id,
                    )
                finally:
                    await on_leader.close()
                    await on_other.close()
            return meta, leaders, results
        finally:
            await conn.close()

    meta, leaders, results = run(go())
    assert sorted(b.node_id for b in meta.brokers) == [0, 1, 2]  # brokers only
    assert sorted(leaders.values()) == sorted(b.node_id for b in cluster3.brokers)
    for index, (good, wrong, hint) in results.items():
        assert (good, wrong, hint) == (NONE, NOT_LEADER, leaders[index])


def test_confluent_kafka_producer_quick_check(cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = unique("confluent")
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True, "acks": "all"}
    )
    delivered = []
    for i in range(20):
        producer.produce(
            topic,
            key=b"k%d" % i,
            value=b"v%d" % i,
            on_delivery=lambda err, msg: delivered.append((err, msg.offset())),
        )
    assert producer.flush(30) == 0
    assert [err for err, _ in delivered] == [None] * 20
    assert sorted(off for _, off in delivered) == list(range(20))

    async def read():
        conn = await connect(cluster.bootstrap_servers)
        try:
            return records_of((await fetch(conn, topic, 0)).records)
        finally:
            await conn.close()

    assert [(r.key, r.value) for r in run(read())] == [(b"k%d" % i, b"v%d" % i) for i in range(20)]


def test_confluent_kafka_consumer_reads_with_assign(cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = unique("consume")
    run(_produce_values(cluster.bootstrap_servers, topic, [b"c%d" % i for i in range(30)]))
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 30 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append(message.value())
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, 0), timeout=10
        )
    finally:
        consumer.close()
    assert got == [b"c%d" % i for i in range(30)]
    assert (low, high) == (0, 30)


async def _produce_values(bootstrap, topic, values):
    conn = await connect(bootstrap)
    try:
        await create_topic(conn, topic)
        for value in values:
            assert (await produce(conn, topic, batch([value]))).error_code == NONE
    finally:
        await conn.close()


def test_registration_carries_the_launcher_facts(cluster):
    broker = cluster.brokers[0]
    registered = cluster.controller.metadata_image().broker(broker.node_id)
    assert (registered.host, registered.port) == (broker.host, broker.port)
    assert registered.executor_id == "embedded"
    assert registered.data_dir == str(cluster.broker_dir(broker.node_id))
    assert not registered.fenced


def test_the_log_cleaner_compacts_a_compacted_topic(cluster):
    topic = unique("compact")
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": "300",
        "min.cleanable.dirty.ratio": "0.01",
    }

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, topic, configs=configs)
            for i in range(30):
                records = [SimpleRecord(b"value-%d" % i, key=b"key-%d" % (i % 3))]
                assert (
                    await produce(conn, topic, build_batch(records, now_ms=now_ms()))
                ).error_code == NONE
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                got = records_of((await fetch(conn, topic, 0, max_bytes=1 << 20)).records)
                if len(got) < 30:
                    return got
                await asyncio.sleep(0.05)
            return got
        finally:
            await conn.close()

    got = run(go())
    assert len(got) < 30, "the cleaner removed overwritten keys"
    latest = {}
    for r in got:
        latest[r.key] = r.value
    assert latest == {b"key-0": b"value-27", b"key-1": b"value-28", b"key-2": b"value-29"}


def test_run_broker_adopts_its_identity_and_stops_on_its_event(tmp_path):
    from sparklog.broker.run import run_broker
    from sparklog.controller.server import ControllerServer

    controller = ControllerServer(tmp_path / "controller", config=TEST_CONFIG).start_in_thread()
    try:
        base_dir = tmp_path / "brokers"

        def run_one(node_id):
            stop = threading.Event()
            result = []
            thread = threading.Thread(
                target=lambda: result.append(
                    run_broker(
                        node_id,
                        base_dir,
                        controller.bootstrap,
                        TEST_CONFIG,
                        stop,
                        executor_id="e1",
                        task_attempt=2,
                    )
                )
            )
            thread.start()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                unfenced = controller.metadata_image().unfenced_brokers()
                if unfenced:
                    break
                time.sleep(0.02)
            stop.set()
            thread.join(20)
            return [b.broker_id for b in unfenced], result

        first, result = run_one(5)
        assert first == [5] and result == ["stop_event set"]
        second, _ = run_one(9)  # the identity of node 5 is on disk and free: adopted
        assert second == [5]
        assert sorted(p.name for p in base_dir.iterdir()) == ["broker-5"]
    finally:
        controller.stop()


def test_an_unregistered_broker_registers_again(tmp_path):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=TEST_CONFIG) as c:
        broker = c.brokers[0]
        first_epoch = broker.broker_epoch
        c.controller.unregister_broker(broker.node_id)
        deadline = time.monotonic() + 10
        registered = None
        while time.monotonic() < deadline:
            registered = c.controller.metadata_image().broker(broker.node_id)
            if registered is not None and not registered.fenced:
                break
            time.sleep(0.02)
        assert registered is not None and not registered.fenced
        assert registered.broker_epoch > first_epoch
        assert broker.broker_epoch == registered.broker_epoch


def test_a_failed_acks_0_produce_closes_the_connection(cluster):
    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await produce(conn, unique("nowhere"), batch([b"lost"]), acks=0)
            with pytest.raises(ConnectionError):
                await metadata(conn, [], allow_auto=False)  # Kafka closes it so the client notices
        finally:
            await conn.close()

    run(go())


def test_a_second_process_with_a_live_brokers_id_gives_up(tmp_path):
    """A zombie of an older task attempt (its executor killed, its Python worker alive) or a
    second broker started with a live broker's id is refused while the first heartbeats; it
    stops after three session timeouts instead of retrying for ever."""
    with EmbeddedCluster(brokers=1, data_dir=tmp_path / "a", config=TEST_CONFIG) as c:
        live = c.brokers[0]
        twin = BrokerServer(live.node_id, tmp_path / "twin", c.controller.bootstrap, TEST_CONFIG)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="another live process holds this broker id"):
            twin.start_in_thread(timeout_s=30)
        waited = time.monotonic() - started
        assert waited >= 3 * 1.5, "it retried while a lease could still run out"
        image = c.controller.metadata_image().broker(live.node_id)
        assert image is not None and not image.fenced, "the live broker is untouched"


def test_creating_many_logs_does_not_starve_the_heartbeats(tmp_path, monkeypatch, caplog):
    """A topic of hundreds of partitions takes the broker seconds of file-system calls to
    create (here a slow disk: 12 ms per log). The metadata apply lets the event loop run
    meanwhile, so heartbeats keep the broker unfenced throughout; a blocked loop got every
    broker fenced, and leadership piled up on whichever came back first."""
    from sparklog.broker.log_manager import LogManager

    real = LogManager.get_or_create_log

    def slow_disk(self, *args, **kwargs):
        time.sleep(0.012)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(LogManager, "get_or_create_log", slow_disk)
    config = {**TEST_CONFIG, "broker.session.timeout.ms": "2000"}
    caplog.set_level("INFO", logger="sparklog.controller.server")
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=config) as c:
        topic, partitions = unique("many"), 400
        started = time.monotonic()

        async def go():
            conn = await connect(c.bootstrap_servers)
            try:
                await create_topic(conn, topic, partitions=partitions)
            finally:
                await conn.close()

        run(go())
        rm = c.brokers[0].replica_manager
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            hosted = [h for (t, _i), h in rm.partitions.items() if t == topic]
            if len(hosted) == partitions and all(h.partition.is_leader for h in hosted):
                break
            time.sleep(0.05)
        took = time.monotonic() - started
        # Read while the cluster runs: stopping it closes (and syncs) 400 logs, which on a
        # busy disk can outlast the session before the controller stops; and its controlled
        # shutdown moves every leadership away (the broker may apply that before it stops).
        log_while_running = caplog.text
        led_while_running = len(hosted) == partitions and all(h.partition.is_leader for h in hosted)
    assert led_while_running
    assert took > 2 * 2.0  # the apply outlasted the session timeout twice over
    assert "fenced broker" not in log_while_running
