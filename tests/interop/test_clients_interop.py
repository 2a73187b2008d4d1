"""Real Kafka clients against sparklog brokers, and sparklog's client against the same topics.

Every producer (confluent-kafka, kafka-python, Debian's kcat, sparklog's `send` and
`send_arrow`) writes the same records with every compression codec it supports; every consumer
(confluent-kafka, kafka-python, kcat, sparklog's `poll` and `poll_arrow`) must then read back
exactly those records: partition, offset, key, value, headers and timestamp. Clusters of one and
three brokers (leaders spread over the brokers) on loopback.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pytest

from sparklog.client import AdminClient, KafkaConsumer, KafkaProducer, NewTopic, TopicPartition
from sparklog.client.broker_connection import now_ms
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.records import iter_batches
from sparklog.records.arrow_codec import HEADERS_TYPE
from sparklog.records.batch import HEADER_SIZE
from sparklog.records.compression import CompressionType, compress
from sparklog.records.murmur2 import partition_for_key

pytestmark = pytest.mark.interop

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
kafka_codec = pytest.importorskip("kafka.codec")

#: Brokers listen on 127.0.0.1 only: keep librdkafka to IPv4. (It needs
#: `api.version.request=true` too, its default; setting it only logs a deprecation warning.)
LIBRDKAFKA = {"broker.address.family": "v4"}
KCAT = shutil.which("kcat")
needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make kcat)")
DEADLINE_MS = 30_000
PARTITIONS = 3
BASE_TIMESTAMP = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: Codecs a librdkafka client would silently replace by "none" against sparklog's ApiVersions
#: (every record still round-trips; only the compression is lost; `debug=feature,msg` shows it).
#: librdkafka <= 2.11.0 (Debian's kcat links 2.0.2) uses gzip, snappy and lz4 only if the broker
#: lists Produce v0 (rdkafka_msgset_writer.c); sparklog lists it, as Kafka 4.0 does since
#: KAFKA-18659, while refusing v0-v2 requests. Empty now; a client that downgrades goes here.
LIBRDKAFKA_DOWNGRADES: dict[tuple[str, str], str] = {}
CLUSTER_CONFIG = {"broker.heartbeat.interval.ms": "200", "num.partitions": "1"}


@pytest.fixture(scope="module", params=[1, 3], ids=["1-broker", "3-brokers"])
def cluster(request, tmp_path_factory):
    with EmbeddedCluster(
        brokers=request.param, data_dir=tmp_path_factory.mktemp("interop"), config=CLUSTER_CONFIG
    ) as running:
        yield running


def new_topic(cluster: EmbeddedCluster, partitions: int = PARTITIONS) -> str:
    name = f"interop-{uuid.uuid4().hex[:10]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])
    return name


@dataclass(frozen=True)
class Rec:
    """One record as produced and as consumed (offset/timestamp None when not known)."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    offset: int | None = None


def make_records(count: int, *, same_headers: bool, timestamps: bool) -> list[Rec]:
    """Records kcat can carry too: no spaces, colons or newlines; some long, compressible."""
    out = []
    for i in range(count):
        value = f"value-{i}-é-" + ("abcdefgh" * (150 if i % 10 == 0 else i % 5))
        headers = (("trace", b"t-1"), ("origin", b"interop"))
        if not same_headers:
            headers = (("n", str(i).encode()), *(() if i % 3 else (("empty", b""),)))
        out.append(
            Rec(
                partition=i % PARTITIONS,
                key=f"key-{i}".encode(),
                value=value.encode(),
                headers=headers,
                timestamp=BASE_TIMESTAMP + i if timestamps else None,
            )
        )
    return out


def expected(records: list[Rec]) -> list[Rec]:
    """What a consumer must see: offsets in produce order per partition, sorted."""
    next_offset: dict[int, int] = {}
    out = []
    for r in records:
        offset = next_offset.get(r.partition, 0)
        next_offset[r.partition] = offset + 1
        out.append(Rec(r.partition, r.key, r.value, r.headers, r.timestamp, offset))
    return sorted(out, key=lambda r: (r.partition, r.offset))


# ---------------------------------------------------------------------------- producers


def produce_confluent(bs: str, topic: str, records: list[Rec], codec: str) -> None:
    errors = []
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bs,
            **LIBRDKAFKA,
            "compression.type": codec,
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    for r in records:
        producer.produce(
            topic,
            value=r.value,
            key=r.key,
            partition=r.partition,
            headers=list(r.headers),
            timestamp=r.timestamp or 0,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(DEADLINE_MS / 1000) == 0
    assert errors == []


def produce_kafka_python(bs: str, topic: str, records: list[Rec], codec: str) -> None:
    producer = kafka.KafkaProducer(
        bootstrap_servers=bs,
        compression_type=None if codec == "none" else codec,
        acks=1,
        linger_ms=5,
    )
    futures = [
        producer.send(
            topic,
            value=r.value,
            key=r.key,
            partition=r.partition,
            headers=list(r.headers),
            timestamp_ms=r.timestamp,
        )
        for r in records
    ]
    producer.flush(DEADLINE_MS / 1000)
    for future in futures:
        future.get(timeout=DEADLINE_MS / 1000)
    producer.close()


def produce_kcat(bs: str, topic: str, records: list[Rec], codec: str) -> None:
    """One `kcat -P -K:` per partition; kcat's -H headers go on every record of a run."""
    for partition in sorted({r.partition for r in records}):
        mine = [r for r in records if r.partition == partition]
        headers = [arg for k, v in mine[0].headers for arg in ("-H", f"{k}={v.decode()}")]
        lines = b"".join(r.key + b":" + r.value + b"\n" for r in mine)
        kcat(
            "-P",
            "-t",
            topic,
            "-p",
            str(partition),
            "-K:",
            "-z",
            codec,
            *headers,
            bs=bs,
            stdin=lines,
        )


def produce_sparklog(bs: str, topic: str, records: list[Rec], codec: str) -> None:
    with KafkaProducer({"bootstrap.servers": bs, "compression.type": codec}) as producer:
        futures = [
            producer.send(topic, r.value, r.key, r.headers, r.partition, r.timestamp)
            for r in records
        ]
        producer.flush()
    for future in futures:
        future.result(timeout=DEADLINE_MS / 1000)


def produce_sparklog_arrow(bs: str, topic: str, records: list[Rec], codec: str) -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array([r.key for r in records], pa.binary()),
            "value": pa.array([r.value for r in records], pa.binary()),
            "timestamp": pa.array([r.timestamp for r in records], pa.int64()),
            "headers": pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records], HEADERS_TYPE
            ),
            "partition": pa.array([r.partition for r in records], pa.int32()),
        }
    )
    with KafkaProducer({"bootstrap.servers": bs, "compression.type": codec}) as producer:
        producer.send_arrow(topic, batch).result(timeout=DEADLINE_MS / 1000)


@dataclass(frozen=True)
class Producer:
    produce: Callable[[str, str, list[Rec], str], None]
    codecs: tuple[str, ...]
    sets_timestamps: bool = True
    varies_headers: bool = True


PRODUCERS = {
    "confluent": Producer(produce_confluent, CODECS),
    "kafka-python": Producer(
        produce_kafka_python,
        ("none", "gzip")
        + (("snappy",) if kafka_codec.has_snappy() else ())
        + (("lz4",) if kafka_codec.has_lz4() else ())
        + (("zstd",) if kafka_codec.has_zstd() else ()),
    ),
    "kcat": Producer(produce_kcat, CODECS, sets_timestamps=False, varies_headers=False),
    "sparklog": Producer(produce_sparklog, CODECS),
    "sparklog-arrow": Producer(produce_sparklog_arrow, CODECS),
}


# ---------------------------------------------------------------------------- consumers


def consume_confluent(bs: str, topic: str, count: int, start: int = 0) -> list[Rec]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bs,
            **LIBRDKAFKA,
            "group.id": f"interop-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, start) for p in range(PARTITIONS)])
    got: list[Rec] = []
    deadline = now_ms() + DEADLINE_MS
    try:
        while len(got) < count and now_ms() < deadline:
            for m in consumer.consume(num_messages=count - len(got), timeout=0.5):
                assert m.error() is None, m.error()
                headers = tuple(m.headers() or ())
                got.append(
                    Rec(m.partition(), m.key(), m.value(), headers, m.timestamp()[1], m.offset())
                )
    finally:
        consumer.close()
    return got


def consume_kafka_python(bs: str, topic: str, count: int, start: int = 0) -> list[Rec]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bs, group_id=None, enable_auto_commit=False)
    tps = [kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, start)
    got: list[Rec] = []
    deadline = now_ms() + DEADLINE_MS
    try:
        while len(got) < count and now_ms() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                for m in messages:
                    headers = tuple((k, v) for k, v in m.headers)
                    got.append(Rec(tp.partition, m.key, m.value, headers, m.timestamp, m.offset))
    finally:
        consumer.close()
    return got


def consume_kcat(bs: str, topic: str, count: int, start: int = 0) -> list[Rec]:
    """`kcat -C -o beginning -e`: partition, offset, timestamp, key, value, headers per line."""
    out = kcat(
        "-C",
        "-t",
        topic,
        "-o",
        str(start) if start else "beginning",
        "-e",
        "-q",
        "-f",
        "%p %o %T %k %s %h\n",
        bs=bs,
    )
    got = []
    for line in out.splitlines():
        partition, offset, timestamp, key, value, *rest = line.split(b" ", 5)
        headers = (
            tuple(
                (k.decode(), v) for k, _, v in (h.partition(b"=") for h in rest[0].split(b",") if h)
            )
            if rest
            else ()
        )
        got.append(Rec(int(partition), key, value, headers, int(timestamp), int(offset)))
    assert len(got) == count, out[-2000:]
    return got


def consume_sparklog(bs: str, topic: str, count: int, start: int = 0) -> list[Rec]:
    got: list[Rec] = []
    with KafkaConsumer({"bootstrap.servers": bs}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        for p in range(PARTITIONS):
            consumer.seek((topic, p), start)
        deadline = now_ms() + DEADLINE_MS
        while len(got) < count and now_ms() < deadline:
            got += [
                Rec(r.partition, r.key, r.value, r.headers, r.timestamp, r.offset)
                for r in consumer.poll(500)
            ]
    return got


def consume_sparklog_arrow(bs: str, topic: str, count: int, start: int = 0) -> list[Rec]:
    got: list[Rec] = []
    with KafkaConsumer({"bootstrap.servers": bs}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        for p in range(PARTITIONS):
            consumer.seek((topic, p), start)
        deadline = now_ms() + DEADLINE_MS
        while len(got) < count and now_ms() < deadline:
            batch = consumer.poll_arrow(500, include_headers=True)
            assert set(batch.column("topic").to_pylist()) <= {topic}
            for row in batch.to_pylist():
                headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
                got.append(
                    Rec(
                        row["partition"],
                        row["key"],
                        row["value"],
                        headers,
                        row["timestamp"],
                        row["offset"],
                    )
                )
    return got


#: Codecs kafka-python can decompress here (the others read every codec).
KAFKA_PYTHON_CODECS = PRODUCERS["kafka-python"].codecs

CONSUMERS = {
    "confluent": consume_confluent,
    "kafka-python": consume_kafka_python,
    "kcat": consume_kcat,
    "sparklog": consume_sparklog,
    "sparklog-arrow": consume_sparklog_arrow,
}


def kcat(*args: str, bs: str, stdin: bytes | None = None) -> bytes:
    if KCAT is None:
        pytest.skip("kcat is not installed (make kcat)")
    result = subprocess.run(
        [KCAT, "-b", bs, "-X", "broker.address.family=v4", *args],
        input=stdin,
        capture_output=True,
        timeout=DEADLINE_MS / 1000,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout


def stored_codecs(cluster: EmbeddedCluster, topic: str, codec: str | None = None) -> set[str]:
    """The compression of every batch of `topic` as the brokers stored it.

    With `codec`: an uncompressed batch that `codec` would not have made smaller counts as
    `codec` — librdkafka sends such a batch uncompressed on purpose (rdkafka_msgset_writer.c,
    "compressed data is larger than uncompressed"), which happens when timing splits off a
    batch of a record or two.
    """
    codecs = set()
    for broker in cluster.brokers:
        for (name, _partition), log in broker.log_manager.logs().items():
            if name != topic:
                continue
            data = log.read(log.log_start_offset, 1 << 30).records
            for batch in iter_batches(data):
                stored = batch.header.compression.name.lower()
                if stored == "none" and codec is not None:
                    section = bytes(batch.data[HEADER_SIZE:])
                    packed = compress(CompressionType.from_name(codec), section)
                    if len(packed) >= len(section):
                        stored = codec
                codecs.add(stored)
    return codecs


def end_offsets(bs: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    with KafkaConsumer({"bootstrap.servers": bs}) as consumer:
        found = consumer.end_offsets([(topic, p) for p in range(partitions)])
    return {tp.partition: offset for tp, offset in found.items()}


# -------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", PRODUCERS)
def test_every_client_reads_what_each_client_wrote(cluster, producer, codec):
    spec = PRODUCERS[producer]
    if codec not in spec.codecs:
        pytest.skip(f"{producer} has no {codec} codec in this environment")
    if producer == "kcat" and KCAT is None:
        pytest.skip("kcat is not installed (make kcat)")
    bs, topic = cluster.bootstrap_servers, new_topic(cluster)
    records = make_records(
        60, same_headers=not spec.varies_headers, timestamps=spec.sets_timestamps
    )
    spec.produce(bs, topic, records, codec)

    want = expected(records)
    assert end_offsets(bs, topic) == {
        p: sum(r.partition == p for r in records) for p in range(PARTITIONS)
    }
    for name, consume in CONSUMERS.items():
        if name == "kafka-python" and codec not in KAFKA_PYTHON_CODECS:
            continue
        got = sorted(consume(bs, topic, len(records)), key=lambda r: (r.partition, r.offset))
        if not spec.sets_timestamps:  # the producer's clock: check it is recent, then ignore it
            assert all(abs(r.timestamp - time.time() * 1000) < 600_000 for r in got), name
            got = [Rec(r.partition, r.key, r.value, r.headers, None, r.offset) for r in got]
        assert got == want, f"{name} read something else than {producer} wrote ({codec})"

    downgrade = LIBRDKAFKA_DOWNGRADES.get((producer, codec))
    # the broker keeps the producer's batches as sent
    librdkafka = producer in ("confluent", "kcat") and downgrade is None
    stored = stored_codecs(cluster, topic, codec if librdkafka else None)
    if downgrade is None:
        assert stored == {codec}
    elif stored == {codec}:
        pytest.fail(f"{producer} now sends {codec}: remove it from LIBRDKAFKA_DOWNGRADES")
    else:
        assert stored == {"none"}
        pytest.xfail(downgrade)


@pytest.mark.parametrize(
    "consumer", ["confluent", "kafka-python", "kcat", "sparklog", "sparklog-arrow"]
)
def test_consumers_start_at_an_explicit_offset(cluster, consumer):
    bs, topic = cluster.bootstrap_servers, new_topic(cluster)
    records = make_records(45, same_headers=False, timestamps=True)
    produce_sparklog(bs, topic, records, "lz4")
    want = [r for r in expected(records) if r.offset >= 10]
    got = CONSUMERS[consumer](bs, topic, len(want), start=10)
    assert sorted(got, key=lambda r: (r.partition, r.offset)) == want


def test_null_keys_null_values_and_binary_bytes(cluster):
    bs, topic = cluster.bootstrap_servers, new_topic(cluster)
    blob = bytes(range(256)) * 4
    records = [
        Rec(0, None, b"no key", (), BASE_TIMESTAMP),
        Rec(0, b"tombstone", None, (), BASE_TIMESTAMP),
        Rec(1, blob, blob[::-1], (("bin", blob[:64]), ("null", None)), BASE_TIMESTAMP),
        Rec(2, b"", b"", (("empty", b""),), BASE_TIMESTAMP),
    ]
    # kafka-python refuses a null header value: it sends an empty one instead
    no_null_header = [
        Rec(r.partition, r.key, r.value, tuple((k, v or b"") for k, v in r.headers), r.timestamp)
        for r in records
    ]
    produce_confluent(bs, topic, records, "zstd")
    produce_kafka_python(bs, topic, no_null_header, "zstd")
    produce_sparklog(bs, topic, records, "zstd")
    want = expected(records + no_null_header + records)
    for name in ("confluent", "kafka-python", "sparklog", "sparklog-arrow"):
        got = sorted(CONSUMERS[name](bs, topic, len(want)), key=lambda r: (r.partition, r.offset))
        assert got == want, name


def test_keyed_records_land_where_murmur2_says(cluster):
    """Kafka's default partitioner (murmur2 of the key) in confluent (murmur2_random),
    kafka-python and sparklog puts each key in the same partition."""
    bs, topic = cluster.bootstrap_servers, new_topic(cluster, partitions=5)
    keys = [f"user-{i}".encode() for i in range(40)]
    placed: dict[str, list[int]] = {}

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bs, **LIBRDKAFKA, "partitioner": "murmur2_random"}
    )
    delivered: dict[bytes, int] = {}
    for key in keys:
        producer.produce(
            topic, b"c", key, on_delivery=lambda err, m: delivered.update({m.key(): m.partition()})
        )
    assert producer.flush(DEADLINE_MS / 1000) == 0
    placed["confluent"] = [delivered[key] for key in keys]

    kp = kafka.KafkaProducer(bootstrap_servers=bs)
    placed["kafka-python"] = [
        kp.send(topic, b"k", key).get(DEADLINE_MS / 1000).partition for key in keys
    ]
    kp.close()

    with KafkaProducer({"bootstrap.servers": bs}) as sp:
        futures = [sp.send(topic, b"s", key) for key in keys]
    placed["sparklog"] = [f.result().partition for f in futures]

    want = [partition_for_key(key, 5) for key in keys]
    assert placed == {name: want for name in placed}


def test_idempotent_confluent_producer_gets_a_producer_id_and_no_duplicates(cluster):
    bs, topic = cluster.bootstrap_servers, new_topic(cluster)
    records = make_records(300, same_headers=False, timestamps=True)
    produce_confluent(bs, topic, records, "lz4")  # enable.idempotence=true
    counts = {p: sum(r.partition == p for r in records) for p in range(PARTITIONS)}
    assert end_offsets(bs, topic) == counts
    producers = {}
    for broker in cluster.brokers:
        for (name, partition), log in broker.log_manager.logs().items():
            if name == topic:
                producers[partition] = log.last_records_of_active_producers()
    assert sorted(producers) == list(range(PARTITIONS))
    for partition, active in producers.items():
        assert len(active) == 1, active  # one producer id, from InitProducerId
        ((pid, (last_offset, epoch)),) = active.items()
        assert pid >= 0 and epoch >= 0
        assert last_offset == counts[partition] - 1
    assert sorted(
        consume_sparklog(bs, topic, len(records)), key=lambda r: (r.partition, r.offset)
    ) == expected(records)


def test_offset_lookups_agree(cluster):
    """ListOffsets as each client asks it: earliest, latest and by timestamp."""
    bs, topic = cluster.bootstrap_servers, new_topic(cluster)
    records = make_records(30, same_headers=False, timestamps=True)
    produce_kafka_python(bs, topic, records, "gzip")
    counts = {p: sum(r.partition == p for r in records) for p in range(PARTITIONS)}

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bs, **LIBRDKAFKA, "group.id": "lookups"}
    )
    try:
        for p in range(PARTITIONS):
            tp = confluent_kafka.TopicPartition(topic, p)
            assert consumer.get_watermark_offsets(tp, timeout=10) == (0, counts[p])
        # record i has timestamp BASE + i and sits in partition i % 3 at offset i // 3
        wanted = [
            confluent_kafka.TopicPartition(topic, p, BASE_TIMESTAMP + 10) for p in range(PARTITIONS)
        ]
        found = consumer.offsets_for_times(wanted, timeout=10)
        assert [tp.offset for tp in found] == [4, 3, 3]
    finally:
        consumer.close()

    kc = kafka.KafkaConsumer(bootstrap_servers=bs)
    try:
        tps = [kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert kc.end_offsets(tps) == {tp: counts[tp.partition] for tp in tps}
        assert kc.beginning_offsets(tps) == {tp: 0 for tp in tps}
        found = kc.offsets_for_times({tp: BASE_TIMESTAMP + 10 for tp in tps})
        assert [found[tp].offset for tp in tps] == [4, 3, 3]
    finally:
        kc.close()

    with KafkaConsumer({"bootstrap.servers": bs}) as sc:
        found = sc.offsets_for_times({(topic, p): BASE_TIMESTAMP + 10 for p in range(PARTITIONS)})
        assert [found[TopicPartition(topic, p)].offset for p in range(PARTITIONS)] == [4, 3, 3]
