"""On-disk compatibility both ways (DESIGN D4): Kafka's own DumpLogSegments reads what sparklog
writes without complaint, and a partition directory Apache Kafka wrote is opened and served by
a sparklog broker with offsets, timestamps, keys, values and headers intact."""

from __future__ import annotations

import re
import shutil
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.oracle.kafka_server import run_tool

pytestmark = pytest.mark.oracle

DUMP = "org.apache.kafka.tools.DumpLogSegments"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(bootstrap: str, topic: str, configs: dict[str, str] | None = None) -> None:
    with_admin = AdminClient({"bootstrap.servers": bootstrap})
    future = with_admin.create_topics([NewTopic(topic, 1, 1, config=configs or {})])[topic]
    future.result(30)


def produce_mixed(bootstrap: str, topic: str, per_codec: int = 300) -> int:
    """Records in every compression, with and without keys and headers, explicit timestamps."""
    base = int(time.time() * 1000) - 60_000
    count = 0
    for c, codec in enumerate(CODECS):
        producer = Producer(
            {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5}
        )
        for i in range(per_codec):
            producer.produce(
                topic,
                value=b"%s-%d-" % (codec.encode(), i) * (1 + i % 7),
                key=None if i % 5 == 0 else b"key-%d" % (i % 13),
                headers=[("h", b"%d" % i)] if i % 3 == 0 else None,
                timestamp=base + c * 1000 + i,
                partition=0,
            )
            count += 1
            if i % 50 == 49:
                producer.poll(0)
        assert producer.flush(30) == 0
    return count


def consume(bootstrap: str, topic: str, expected: int) -> list[tuple]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.timestamp(), m.key(), m.value(), m.headers()))
    finally:
        consumer.close()
    return got


def dump(*args: str) -> str:
    done = run_tool(DUMP, *args, timeout_s=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout + done.stderr


def test_kafka_dump_log_segments_reads_sparklog_segments(sparklog_cluster):
    topic = unique("dump")
    bootstrap = sparklog_cluster.bootstrap_servers
    create(bootstrap, topic, {"segment.bytes": "8192", "index.interval.bytes": "512"})
    produced = produce_mixed(bootstrap, topic)
    log_dir = sparklog_cluster.broker_dir(sparklog_cluster.brokers[0].node_id) / f"{topic}-0"
    time.sleep(0.5)
    logs = sorted(log_dir.glob("*.log"))
    assert len(logs) > 2, "the test wants several segments"
    files = [
        str(p)
        for log in logs
        for p in (log, log.with_suffix(".index"), log.with_suffix(".timeindex"))
    ]

    checked = dump("--files", ",".join(files), "--deep-iteration", "--verify-index-only")
    assert "Mismatches" not in checked and "Exception" not in checked, checked[-3000:]
    sane = dump("--files", ",".join(files), "--index-sanity-check")
    assert "Exception" not in sane and "is corrupt" not in sane, sane[-3000:]
    printed = dump(
        "--files", ",".join(str(p) for p in logs), "--deep-iteration", "--print-data-log"
    )
    offsets = [int(m) for m in re.findall(r"\| offset: (\d+) ", printed)]
    assert offsets == list(range(produced)), printed[-2000:]
    assert len(re.findall(r"headerKeys: \[h\]", printed)) == sum(
        1 for _ in range(len(CODECS)) for i in range(300) if i % 3 == 0
    )
    for codec in CODECS:
        assert f"compresscodec: {codec}" in printed.lower() or codec == "none", codec


def test_sparklog_serves_a_partition_directory_written_by_kafka(apache_kafka, sparklog_cluster):
    topic = unique("from-kafka")
    create(apache_kafka.bootstrap_servers, topic)
    produced = produce_mixed(apache_kafka.bootstrap_servers, topic, per_codec=200)
    want = consume(apache_kafka.bootstrap_servers, topic, produced)
    assert len(want) == produced

    create(sparklog_cluster.bootstrap_servers, topic)
    broker = sparklog_cluster.brokers[0]
    ours = sparklog_cluster.broker_dir(broker.node_id) / f"{topic}-0"
    sparklog_cluster.stop_broker(0)
    shutil.rmtree(ours)
    # Everything but partition.metadata: it carries Kafka's topic id, and a broker treats a log
    # of another topic id as stray (Kafka does too); sparklog writes its own on load.
    shutil.copytree(
        apache_kafka.log_dir() / f"{topic}-0",
        ours,
        ignore=shutil.ignore_patterns("partition.metadata"),
    )
    sparklog_cluster.restart_broker(0)
    sparklog_cluster.wait_for_leader(topic)
    got = consume(sparklog_cluster.bootstrap_servers, topic, produced)
    assert got == want


def test_kafka_dump_log_segments_reads_the_txn_index_a_follower_chunk_wrote(tmp_path):
    """Issue 27: a follower's one append of two producers' transactions and their ABORT markers
    (out of producer order) indexes both; Kafka's DumpLogSegments reads the
    same entries as sparklog's reader."""
    from sparklog.records import SimpleRecord, build_batch
    from sparklog.records.control import (
        ControlRecordType,
        EndTransactionMarker,
        build_end_txn_marker_batch,
    )
    from sparklog.storage.log import Log

    def data(pid: int, offset: int) -> bytes:
        records = [SimpleRecord(b"v%d" % i, None, 1) for i in range(3)]
        return build_batch(
            records, base_offset=offset, producer_id=pid, producer_epoch=0, base_sequence=0,
            is_transactional=True,
        )  # fmt: skip

    def abort(pid: int, offset: int) -> bytes:
        marker = EndTransactionMarker(ControlRecordType.ABORT, 0)
        return build_end_txn_marker_batch(
            marker, producer_id=pid, producer_epoch=0, timestamp_ms=1, base_offset=offset
        )

    log = Log.open(tmp_path / "t-0", now_ms=1)
    log.append_as_follower(data(1, 0) + data(2, 3) + abort(2, 6) + abort(1, 7), 1)
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.txnindex"
    printed = dump("--files", str(index))  # a .txnindex file is dumped as the index it is
    found = re.findall(
        r"producerId: (\d+) firstOffset: (\d+) lastOffset: (\d+) lastStableOffset: (\d+)", printed
    )
    assert [tuple(int(x) for x in f) for f in found] == [(2, 3, 6, 0), (1, 0, 7, 8)], printed
