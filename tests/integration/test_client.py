"""sparklog's producer, consumer and admin client against embedded brokers on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import socket
import threading
import uuid
from concurrent.futures import wait

import pyarrow as pa
import pytest

from sparklog.client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AdminClient,
    ClientClosedError,
    ConfigError,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
    NoGroupError,
    NoOffsetForPartitionError,
    RecordMetadata,
    TopicPartition,
)
from sparklog.client.broker_connection import BrokerConnection, now_ms
from sparklog.client.network import NetworkClient
from sparklog.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    NetworkExceptionError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from sparklog.protocol.api_versions import BROKER_APIS, ApiKey
from sparklog.protocol.async_client import api_versions_response
from sparklog.protocol.connection import NEED_DATA, ClientConnection, ServerConnection
from sparklog.protocol.server import KafkaServer
from sparklog.records import native
from sparklog.records.murmur2 import partition_for_key

POLL_DEADLINE_MS = 20_000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def admin(cluster):
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as client:
        yield client


def new_topic(admin: AdminClient, partitions: int = 1, **configs: str) -> str:
    name = unique("t")
    admin.create_topics(
        [NewTopic(name, partitions, 1, {k.replace("_", "."): v for k, v in configs.items()})]
    )
    return name


def producer(cluster, **settings) -> KafkaProducer:
    return KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers, **settings})


def consumer(cluster, **settings) -> KafkaConsumer:
    return KafkaConsumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "auto.offset.reset": "earliest",
            **settings,
        }
    )


def consume(c: KafkaConsumer, count: int) -> list:
    """Poll until `count` records arrived (or fail after POLL_DEADLINE_MS)."""
    got: list = []
    deadline = now_ms() + POLL_DEADLINE_MS
    while len(got) < count and now_ms() < deadline:
        got += c.poll(500)
    assert len(got) == count, f"got {len(got)} of {count} records"
    return got


def read_all(cluster, topic: str, partitions: int, count: int, **settings) -> list:
    with consumer(cluster, **settings) as c:
        c.assign([(topic, p) for p in range(partitions)])
        records = consume(c, count)
        assert c.poll(200) == []  # nothing more
        return records


# ------------------------------------------------------------------------------ producing


@pytest.mark.parametrize(
    ("acks", "idempotence"), [(0, False), (1, False), ("all", False), ("all", True)]
)
def test_round_trip_with_every_acks_mode(cluster, admin, acks, idempotence):
    topic = new_topic(admin, partitions=2)
    with producer(cluster, acks=acks, **{"enable.idempotence": idempotence}) as p:
        futures = [p.send(topic, f"v{i}".encode(), key=f"k{i % 5}".encode()) for i in range(50)]
        p.flush()
    metas = [f.result() for f in futures]
    if acks == 0:
        assert all(m.offset == -1 for m in metas)
    else:
        per_partition = {}
        for m in metas:
            per_partition.setdefault(m.partition, []).append(m.offset)
        assert all(offsets == list(range(len(offsets))) for offsets in per_partition.values())
    assert all(
        m.partition == partition_for_key(f"k{i % 5}".encode(), 2) for i, m in enumerate(metas)
    )
    records = read_all(cluster, topic, 2, 50)
    assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(50))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_with_every_compression_codec(cluster, admin, codec):
    topic = new_topic(admin)
    values = [(b"sparklog " * 200) + str(i).encode() for i in range(200)]
    with producer(cluster, **{"compression.type": codec, "linger.ms": 50}) as p:
        for v in values:
            p.send(topic, v)
        p.flush()
    assert [r.value for r in read_all(cluster, topic, 1, 200)] == values
    log_bytes = sum(f.stat().st_size for f in (cluster.broker_dir(0)).rglob(f"{topic}-0/*.log"))
    raw_bytes = sum(len(v) for v in values)
    if codec == "none":
        assert log_bytes > raw_bytes
    else:  # the batches really were compressed on the way to the log
        assert log_bytes < raw_bytes / 10


def test_headers_nulls_and_timestamps_survive(cluster, admin):
    topic = new_topic(admin)
    sent = [
        dict(value=None, key=b"tombstone"),
        dict(value=b"", key=None),
        dict(
            value=b"v", key=b"k", headers=[("a", b"1"), ("a", None), ("b", "text")], timestamp=1234
        ),
        dict(value="unicode \u2603", headers={"h": b""}),
    ]
    with producer(cluster) as p:
        metas = [p.send(topic, **kw).result(timeout=30) for kw in sent]
    assert metas[2].timestamp == 1234
    got = read_all(cluster, topic, 1, 4)
    assert [(r.key, r.value) for r in got] == [
        (b"tombstone", None),
        (None, b""),
        (b"k", b"v"),
        (None, "unicode \u2603".encode()),
    ]
    assert got[2].headers == (("a", b"1"), ("a", None), ("b", b"text"))
    assert got[3].headers == (("h", b""),)
    assert got[2].timestamp == 1234 and got[2].timestamp_type == 0
    assert [r.offset for r in got] == [m.offset for m in metas] == [0, 1, 2, 3]


def test_callbacks_and_interceptors_see_every_record(cluster, admin):
    topic = new_topic(admin)
    delivered, acked = [], []

    class Tagger:
        def on_send(self, record):
            return dataclasses.replace(record, headers=(*record.headers, ("tag", b"1")))

        def on_acknowledgement(self, metadata, error):
            acked.append((metadata, error))

    with producer(cluster, **{"interceptor.classes": [Tagger()]}) as p:
        for _i in range(3):
            p.send(topic, b"v", on_delivery=lambda m, e: delivered.append((m, e)))
        p.flush()
    assert [m.offset for m, e in delivered] == [0, 1, 2] and all(e is None for _, e in delivered)
    assert len(acked) == 3
    assert all(r.headers == (("tag", b"1"),) for r in read_all(cluster, topic, 1, 3))


@pytest.mark.skipif(native.core() is None, reason="the native core is not built")
def test_records_waiting_in_the_producer_are_not_scanned_by_the_garbage_collector(cluster, admin):
    """send() keeps no collector-tracked object per record until it is acknowledged (the
    native future and batch builder): at a million records a second, scanning them cost more
    than sending them."""
    topic = new_topic(admin)
    with producer(cluster, **{"linger.ms": 60_000, "batch.size": 1 << 20}) as p:
        p.partitions_for(topic)
        headers = [("h", b"1")]
        futures = [p.send(topic, b"x" * 100, key=b"k", headers=headers) for _ in range(10)]
        gc.collect()
        tracked = len(gc.get_objects())
        futures += [p.send(topic, b"x" * 100, key=b"k", headers=headers) for _ in range(5000)]
        grown = len(gc.get_objects()) - tracked
        assert not any(f.done() for f in futures)  # all still waiting in the accumulator
        p.flush()
    assert grown < 100, f"{grown} tracked objects for 5,000 waiting records"
    assert [f.result().offset for f in futures] == list(range(5010))
    assert read_all(cluster, topic, 1, 5010)[-1].headers == (("h", b"1"),)


def test_flush_sends_lingering_records_and_close_drains(cluster, admin):
    topic = new_topic(admin)
    p = producer(cluster, **{"linger.ms": 60_000, "batch.size": 1 << 20})
    futures = [p.send(topic, b"x") for _ in range(10)]
    assert not any(f.done() for f in futures)  # lingering for a minute
    p.flush(timeout_ms=30_000)
    assert all(f.done() and f.exception() is None for f in futures)
    late = [p.send(topic, b"y") for _ in range(5)]
    p.close()
    assert [f.result().offset for f in late] == [10, 11, 12, 13, 14]
    with pytest.raises(ClientClosedError):
        p.send(topic, b"z")


def test_close_with_zero_timeout_fails_what_is_unsent(cluster, admin):
    topic = new_topic(admin)
    p = producer(cluster, **{"linger.ms": 60_000, "batch.size": 1 << 20})
    p.partitions_for(topic)
    futures = [p.send(topic, b"x") for _ in range(3)]
    p.close(timeout_ms=0)
    for f in futures:
        assert "closed" in str(f.exception(timeout=10))


def test_an_invalid_topic_name_fails_the_future(cluster):
    with producer(cluster, **{"max.block.ms": 5_000}) as p:
        error = p.send("no/slashes", b"v").exception(timeout=10)
    assert isinstance(error, InvalidTopicError) and "'no/slashes'" in str(error)


def test_records_too_large_fail_their_future(cluster, admin):
    topic = new_topic(admin)
    with producer(cluster, **{"max.request.size": 1000}) as p:
        error = p.send(topic, b"x" * 2000).exception(timeout=10)
    assert "max.request.size" in str(error)


def test_explicit_partition_is_checked(cluster, admin):
    topic = new_topic(admin, partitions=2)
    with producer(cluster) as p:
        assert p.send(topic, b"v", partition=1).result(timeout=30).partition == 1
        with pytest.raises(ValueError, match=r"not in the range \[0...2\)"):
            p.send(topic, b"v", partition=2)


def test_producer_refreshes_metadata_after_partitions_are_added(cluster, admin):
    topic = new_topic(admin, partitions=1)
    with producer(cluster, **{"metadata.max.age.ms": 100}) as p:
        assert p.partitions_for(topic) == [0]
        admin.create_partitions({topic: 3})
        deadline = now_ms() + POLL_DEADLINE_MS
        while p.partitions_for(topic) != [0, 1, 2] and now_ms() < deadline:
            p.send(topic, b"tick").result(timeout=30)
        assert p.partitions_for(topic) == [0, 1, 2]
        keys = [f"key{i}".encode() for i in range(30)]
        metas = [p.send(topic, b"v", key=k).result(timeout=30) for k in keys]
    assert [m.partition for m in metas] == [partition_for_key(k, 3) for k in keys]
    assert {m.partition for m in metas} == {0, 1, 2}


# ------------------------------------------------------------------------ idempotence


class LossyProxy:
    """A Kafka-protocol proxy in front of one broker that names itself in Metadata (so clients
    use it for everything) and can drop Produce responses after the broker has appended:
    the fault that makes a producer retry a batch that was in fact written."""

    def __init__(self, broker: str) -> None:
        host, _sep, port = broker.rpartition(":")
        self.broker = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.drop_produce_responses = 0
        self.dropped = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.broker)
        inbound, outbound = ServerConnection(BROKER_APIS), ClientConnection("proxy")
        try:
            while data := client.recv(1 << 16):
                inbound.receive_data(data)
                while (request := inbound.next_request()) is not NEED_DATA:
                    body = self._forward(request, upstream, outbound)
                    if body is False:
                        return  # dropped: the client only sees the connection close
                    if body is not None:
                        client.sendall(inbound.send_response(request, body))
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    def _forward(self, request, upstream, outbound):
        acks_zero = request.api_key == ApiKey.PRODUCE and int(request.body.acks) == 0
        _cid, data = outbound.send_request(request.body, expects_response=not acks_zero)
        upstream.sendall(data)
        if acks_zero:
            return None
        while (item := outbound.next_response()) is NEED_DATA:
            outbound.receive_data(upstream.recv(1 << 16))
        body = item[1]
        if request.api_key == ApiKey.METADATA:
            host, port = self.address.split(":")
            brokers = tuple(dataclasses.replace(b, host=host, port=int(port)) for b in body.brokers)
            body = dataclasses.replace(body, brokers=brokers)
        if request.api_key == ApiKey.PRODUCE:
            with self._lock:
                if self.drop_produce_responses > 0:
                    self.drop_produce_responses -= 1
                    self.dropped += 1
                    return False
        return body


def produce_through_lossy_proxy(cluster, admin, **settings) -> list:
    topic = new_topic(admin)
    proxy = LossyProxy(cluster.bootstrap_servers)
    try:
        with KafkaProducer(
            {"bootstrap.servers": proxy.address, "linger.ms": 0, "retry.backoff.ms": 10, **settings}
        ) as p:
            p.partitions_for(topic)
            proxy.drop_produce_responses = 2
            futures = [p.send(topic, f"v{i}".encode()) for i in range(20)]
            p.flush(timeout_ms=30_000)
        assert all(f.exception() is None for f in futures)
        assert proxy.dropped == 2
    finally:
        proxy.close()
    with consumer(cluster) as c:
        c.assign([(topic, 0)])
        c.seek_to_end()
        end = c.position((topic, 0))
        c.seek_to_beginning()
        return consume(c, end)


def test_idempotent_retries_do_not_duplicate(cluster, admin):
    records = produce_through_lossy_proxy(cluster, admin)
    assert [r.value for r in records] == [f"v{i}".encode() for i in range(20)]


def test_without_idempotence_the_same_fault_duplicates(cluster, admin):
    # The control for the test above: the fault really makes the producer resend.
    records = produce_through_lossy_proxy(
        cluster, admin, **{"enable.idempotence": False, "acks": 1}
    )
    values = [r.value for r in records]
    assert len(values) > 20 and set(values) == {f"v{i}".encode() for i in range(20)}


# ------------------------------------------------------------------------------ consuming


def test_the_consumer_fetches_through_a_session_and_closes_it(cluster, admin):
    """KIP-227 as Kafka's consumer does it: after the first full fetch the consumer fetches
    incrementally (an idle poll lists nothing) and reads everything; closed with no fetch in
    flight, it drops its session instead of leaving it in the broker's cache."""
    topic = new_topic(admin, partitions=3)
    with producer(cluster) as p:
        for i in range(30):
            p.send(topic, b"v%d" % i, partition=i % 3)
    apis = cluster.brokers[0].apis
    sessions = apis.fetch_manager.cache.sessions
    before_ids, before_count = set(sessions), apis.incremental_fetches
    with consumer(cluster) as c:
        c.assign([(topic, p) for p in range(3)])
        got = consume(c, 30)
        assert c.poll(300) == []
        assert apis.incremental_fetches > before_count
        assert set(sessions) - before_ids, "the consumer holds a session"
        c.pause([(topic, p) for p in range(3)])
        assert c.poll(800) == []  # the last long poll ends; nothing is fetched after it
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(30))
    assert set(sessions) <= before_ids, "close dropped the session"


def test_consumer_positions_seek_and_offset_reset(cluster, admin):
    topic = new_topic(admin)
    tp = TopicPartition(topic, 0)
    with producer(cluster) as p:
        for i in range(10):
            p.send(topic, str(i).encode())
    with consumer(cluster, **{"auto.offset.reset": "latest"}) as c:
        c.assign([tp])
        assert c.position(tp) == 10
        assert c.poll(100) == []
        c.seek(tp, 7)
        assert [r.offset for r in consume(c, 3)] == [7, 8, 9]
        c.seek_to_beginning([tp])
        assert c.position(tp) == 0
        c.seek(tp, 50)  # past the end: auto.offset.reset=latest moves back to the end
        deadline = now_ms() + POLL_DEADLINE_MS
        while c.position(tp) != 10 and now_ms() < deadline:
            c.poll(100)
        assert c.position(tp) == 10
        assert c.beginning_offsets([tp]) == {tp: 0} and c.end_offsets([tp]) == {tp: 10}


def test_offset_reset_none_raises(cluster, admin):
    topic = new_topic(admin)
    with producer(cluster) as p:
        p.send(topic, b"v").result(timeout=30)
    with consumer(cluster, **{"auto.offset.reset": "none"}) as c:
        c.assign([(topic, 0)])
        with pytest.raises(NoOffsetForPartitionError, match="auto.offset.reset=none"):
            c.poll(100)
        c.seek((topic, 0), 40)
        with pytest.raises(OffsetOutOfRangeError, match=f"{topic}-0 at 40"):
            deadline = now_ms() + POLL_DEADLINE_MS
            while now_ms() < deadline:
                c.poll(200)


def test_max_poll_records_bounds_each_poll(cluster, admin):
    topic = new_topic(admin)
    with producer(cluster) as p:
        for _i in range(25):
            p.send(topic, b"v")
    with consumer(cluster, **{"max.poll.records": 10}) as c:
        c.assign([(topic, 0)])
        sizes = []
        while sum(sizes) < 25:
            batch = c.poll(5000)
            assert batch, "records stopped arriving"
            sizes.append(len(batch))
    assert max(sizes) == 10


def test_offsets_for_times(cluster, admin):
    topic = new_topic(admin)
    tp = TopicPartition(topic, 0)
    with producer(cluster) as p:
        for ts in (1000, 2000, 3000):
            p.send(topic, b"v", timestamp=ts)
    with consumer(cluster) as c:
        found = c.offsets_for_times({tp: 1500, (topic, 0): 1500})
        assert found[tp].offset == 1 and found[tp].timestamp == 2000
        assert c.offsets_for_times({tp: 0})[tp].offset == 0
        assert c.offsets_for_times({tp: 4000}) == {tp: None}
    offsets = admin.list_offsets({tp: EARLIEST_TIMESTAMP, (topic, 0): 2500})
    assert offsets[tp].offset == 2  # the later spec for the same partition wins
    assert admin.list_offsets({tp: LATEST_TIMESTAMP})[tp].offset == 3


def test_pause_and_resume(cluster, admin):
    topic = new_topic(admin, partitions=2)
    with producer(cluster) as p:
        for part in (0, 1):
            for _ in range(5):
                p.send(topic, f"p{part}".encode(), partition=part)
    t0, t1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with consumer(cluster) as c:
        c.assign([t0, t1])
        c.pause([t1])
        assert c.paused() == {t1}
        got = consume(c, 5)
        assert {r.partition for r in got} == {0}
        assert c.poll(300) == []
        c.resume([t1])
        got = consume(c, 5)
        assert {r.partition for r in got} == {1}


def test_poll_arrow_equals_poll(cluster, admin):
    topic = new_topic(admin, partitions=3)
    with producer(cluster, **{"compression.type": "lz4"}) as p:
        for i in range(300):
            key = None if i % 7 == 0 else f"k{i % 11}".encode()
            headers = [("i", str(i).encode())] if i % 2 else None
            p.send(
                topic,
                None if i % 13 == 0 else f"v{i}".encode(),
                key=key,
                headers=headers,
                timestamp=10_000 + i,
            )
    parts = [(topic, p) for p in range(3)]
    records = read_all(cluster, topic, 3, 300)
    expected = {
        (r.partition, r.offset): {
            "key": r.key,
            "value": r.value,
            "topic": r.topic,
            "partition": r.partition,
            "offset": r.offset,
            "timestamp": r.timestamp,
            "timestampType": r.timestamp_type,
            "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
        }
        for r in records
    }
    rows = []
    with consumer(cluster, **{"max.poll.records": 64}) as c:
        c.assign(parts)
        deadline = now_ms() + POLL_DEADLINE_MS
        while len(rows) < 300 and now_ms() < deadline:
            batch = c.poll_arrow(500, include_headers=True)
            assert batch.num_rows <= 64
            rows += batch.to_pylist()
        assert c.poll_arrow(100).num_rows == 0
    assert {(r["partition"], r["offset"]): r for r in rows} == expected
    assert len(rows) == 300


def test_send_arrow_equals_send(cluster, admin):
    by_send, by_arrow = new_topic(admin, partitions=4), new_topic(admin, partitions=4)
    n = 500
    keys = [f"key-{i % 37}".encode() for i in range(n)]
    values = [None if i % 50 == 0 else f"value-{i}".encode() for i in range(n)]
    headers = [[("n", str(i).encode())] if i % 3 else [] for i in range(n)]
    timestamps = [20_000 + i for i in range(n)]
    with producer(cluster, **{"compression.type": "zstd"}) as p:
        for k, v, h, ts in zip(keys, values, headers, timestamps, strict=True):
            p.send(by_send, v, key=k, headers=h, timestamp=ts)
        table = pa.RecordBatch.from_pydict(
            {
                "key": pa.array(keys, pa.binary()),
                "value": pa.array(values, pa.binary()),
                "timestamp": pa.array(timestamps, pa.int64()),
                "headers": pa.array(
                    [[{"key": hk, "value": hv} for hk, hv in h] for h in headers],
                    pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
                ),
            }
        )
        result = p.send_arrow(by_arrow, table).result(timeout=60)
        p.flush()
    assert sum(m.record_count for m in result) == n

    def view(topic):
        return sorted(
            (r.partition, r.offset, r.key, r.value, r.timestamp, r.headers)
            for r in read_all(cluster, topic, 4, n)
        )

    assert view(by_arrow) == view(by_send)


def test_send_arrow_with_partition_column_and_null_keys(cluster, admin):
    topic = new_topic(admin, partitions=3)
    with producer(cluster) as p:
        explicit = pa.table(
            {"value": [b"a", b"b", b"c", b"d"], "partition": pa.array([2, 0, 2, None], pa.int32())}
        )
        p.send_arrow(topic, explicit).result(timeout=30)
        sticky = p.send_arrow(topic, pa.RecordBatch.from_pydict({"value": [b"x"] * 20})).result(
            timeout=30
        )
        with pytest.raises(ValueError, match=r"outside \[0, 3\)"):
            p.send_arrow(topic, pa.table({"value": [b"e"], "partition": pa.array([3], pa.int32())}))
    assert sum(m.record_count for m in sticky) == 20
    assert len({m.partition for m in sticky}) == 1  # 20 small records stick to one partition
    got = read_all(cluster, topic, 3, 24)
    assert sorted((r.partition, r.value) for r in got if r.value in (b"a", b"b", b"c")) == [
        (0, b"b"),
        (2, b"a"),
        (2, b"c"),
    ]
    assert [r.value for r in got].count(b"d") == 1


def test_group_features_without_a_group_id_name_the_fix(cluster):
    with consumer(cluster) as c:
        with pytest.raises(NoGroupError, match="set group.id"):
            c.subscribe(["t"])
        with pytest.raises(NoGroupError, match="set group.id"):
            c.commit({("t", 0): 1})
        with pytest.raises(ValueError, match="no partitions assigned"):
            c.poll(0)


def test_consumer_sees_new_partitions_after_metadata_refresh(cluster, admin):
    topic = new_topic(admin, partitions=1)
    admin.create_partitions({topic: 2})
    with producer(cluster) as p:
        p.send(topic, b"new", partition=1).result(timeout=30)
    with consumer(cluster) as c:
        c.assign([(topic, 1)])
        assert [r.value for r in consume(c, 1)] == [b"new"]


# --------------------------------------------------------------------------------- admin


def test_admin_topics_lifecycle_and_errors(cluster, admin):
    name = unique("adm")
    admin.create_topics([NewTopic(name, 2, 1, {"retention.ms": "123456"})])
    assert name in admin.list_topics()
    description = admin.describe_topics([name])[name]
    assert [p.partition for p in description.partitions] == [0, 1]
    assert all(p.leader == 0 and p.isr == (0,) for p in description.partitions)
    with pytest.raises(TopicAlreadyExistsError, match=name):
        admin.create_topics([NewTopic(name, 1, 1)])
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({name: 1})
    admin.create_partitions({name: 4})
    assert len(admin.describe_topics([name])[name].partitions) == 4
    admin.delete_topics([name])
    assert name not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topics([name])
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([name])


def test_admin_configs(cluster, admin):
    topic = new_topic(admin, retention_ms="100000")
    entries = admin.describe_configs([("topic", topic)])[("topic", topic)]
    assert entries["retention.ms"].value == "100000"
    assert entries["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"
    admin.incremental_alter_configs(
        {("topic", topic): {"retention.ms": "200000", "cleanup.policy": "compact"}}
    )
    entries = admin.describe_configs([("topic", topic)])[("topic", topic)]
    assert (entries["retention.ms"].value, entries["cleanup.policy"].value) == ("200000", "compact")
    admin.incremental_alter_configs({("topic", topic): {"retention.ms": None}})
    entries = admin.describe_configs([("topic", topic)])[("topic", topic)]
    assert entries["retention.ms"].source != "DYNAMIC_TOPIC_CONFIG"
    broker = admin.describe_configs([("broker", "0")])[("broker", "0")]
    assert "log.retention.check.interval.ms" in broker or broker


def test_admin_delete_records_and_describe_cluster(cluster, admin):
    topic = new_topic(admin)
    tp = TopicPartition(topic, 0)
    with producer(cluster) as p:
        for i in range(10):
            p.send(topic, str(i).encode())
    assert admin.delete_records({tp: 4}) == {tp: 4}
    assert admin.list_offsets({tp: EARLIEST_TIMESTAMP})[tp].offset == 4
    assert [r.value for r in read_all(cluster, topic, 1, 6)] == [
        str(i).encode() for i in range(4, 10)
    ]
    description = admin.describe_cluster()
    assert description.cluster_id and [b.node_id for b in description.brokers] == [0]


def test_unknown_settings_fail_fast(cluster):
    with pytest.raises(ConfigError, match="did you mean 'max.poll.records'"):
        KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers, "max.poll.record": 5})


# ------------------------------------------------------------------------------ network


@pytest.fixture()
def silent_server():
    """A Kafka server that answers ApiVersions but never answers Metadata."""
    loop = asyncio.new_event_loop()
    never = asyncio.Event()

    async def handler(request):
        if request.api_key == ApiKey.API_VERSIONS:
            return api_versions_response(BROKER_APIS, request.api_version)
        await never.wait()

    server = KafkaServer(handler, BROKER_APIS)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    yield server
    loop.call_soon_threadsafe(never.set)
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def metadata_fields():
    return {
        "topics": [],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }


def test_request_timeout_fails_in_flight_requests_and_closes(silent_server):
    conn = BrokerConnection(0, "127.0.0.1", silent_server.port, request_timeout_ms=200)
    conn.connect(5_000)
    assert conn.version(ApiKey.METADATA) == 12
    futures = [conn.send(ApiKey.METADATA, metadata_fields()) for _ in range(3)]
    wait(futures, timeout=10)
    for f in futures:
        assert isinstance(f.exception(), RequestTimedOutError)
    assert "request.timeout.ms=200" in str(futures[0].exception())
    assert conn.closed
    assert isinstance(
        conn.send(ApiKey.METADATA, metadata_fields()).exception(), RequestTimedOutError
    )


def test_network_client_reconnects_after_a_failure(silent_server):
    config = {
        "client.id": "t",
        "request.timeout.ms": 200,
        "reconnect.backoff.ms": 10,
        "reconnect.backoff.max.ms": 50,
        "socket.connection.setup.timeout.ms": 2_000,
        "send.buffer.bytes": -1,
        "receive.buffer.bytes": -1,
    }
    client = NetworkClient(config)
    client.set_address(7, "127.0.0.1", silent_server.port)
    first = client.connection(7)
    assert isinstance(
        client.send(7, ApiKey.METADATA, metadata_fields()).exception(timeout=10),
        RequestTimedOutError,
    )
    second = client.connection(7)
    assert second is not first and not second.closed
    client.set_address(8, "127.0.0.1", 1)  # nothing listens there
    assert isinstance(
        client.send(8, ApiKey.METADATA, metadata_fields()).exception(), NetworkExceptionError
    )
    client.close()


def test_producer_metadata_for_acks_zero_does_not_wait_for_responses(cluster, admin):
    topic = new_topic(admin)
    with producer(cluster, acks=0, **{"enable.idempotence": False}) as p:
        meta = p.send(topic, b"v").result(timeout=30)
    assert meta == RecordMetadata(topic, 0, -1, meta.timestamp)


def test_partitions_led_by_three_brokers(cluster3):
    with AdminClient({"bootstrap.servers": cluster3.bootstrap_servers}) as admin3:
        topic = unique("three")
        admin3.create_topics([NewTopic(topic, 6, 1)])
        leaders = {p.leader for p in admin3.describe_topics([topic])[topic].partitions}
        assert len(leaders) == 3
    keys = [f"k{i}".encode() for i in range(300)]
    with producer(cluster3, **{"linger.ms": 20}) as p:
        metas = [p.send(topic, k, key=k) for k in keys]
        p.flush()
    assert [f.result().partition for f in metas] == [partition_for_key(k, 6) for k in keys]
    got = read_all(cluster3, topic, 6, 300)
    assert sorted(r.value for r in got) == sorted(keys)
    assert all(r.key == r.value and r.partition == partition_for_key(r.key, 6) for r in got)


def test_close_from_a_delivery_callback_does_not_deadlock(cluster, admin):
    topic = new_topic(admin)
    p = producer(cluster)
    closed = threading.Event()

    def close_now(metadata, error):
        p.close()
        closed.set()

    p.send(topic, b"v", on_delivery=close_now).result(timeout=30)
    assert closed.wait(10)
    with pytest.raises(ClientClosedError):
        p.send(topic, b"w")


def test_clients_follow_a_broker_restart(cluster3):
    with AdminClient({"bootstrap.servers": cluster3.bootstrap_servers}) as admin3:
        topic = unique("restart")
        admin3.create_topics([NewTopic(topic, 3, 1)])
        leaders = {p.partition: p.leader for p in admin3.describe_topics([topic])[topic].partitions}
    victim = next(i for i, b in enumerate(cluster3.brokers) if b.node_id == leaders[1])
    with producer(cluster3, **{"metadata.max.age.ms": 500}) as p:
        for part in range(3):
            p.send(topic, b"before", partition=part).result(timeout=30)
        cluster3.kill_broker(victim)
        pending = [p.send(topic, b"during", partition=1) for _ in range(5)]
        cluster3.restart_broker(victim)  # comes back on a new port: found through metadata
        assert [f.result(timeout=60).offset for f in pending] == [1, 2, 3, 4, 5]
    values = sorted(r.value for r in read_all(cluster3, topic, 3, 8))
    assert values == [b"before"] * 3 + [b"during"] * 5
