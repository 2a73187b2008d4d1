"""Kafka's request bounds on a broker, over real sockets: a client that never reads its
responses is closed after `connections.max.idle.ms` without delaying others, requests parked in
purgatory do not hold `queued.max.requests` slots, and `queued.max.request.bytes` mutes
connections while frames being received hold the pool (issue 14, bounded resources)."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest
from confluent_kafka import Producer

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey


def fetch_frame(topic: str, correlation_id: int, *, max_wait_ms: int = 0) -> bytes:
    body = kio_build.build(
        codec.request_schema(ApiKey.FETCH, 4),
        {
            "replica_id": -1,
            "max_wait": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 4 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
    )
    return codec.encode_request(body, correlation_id, "bounds-test")


def api_versions_frame(correlation_id: int) -> bytes:
    body = kio_build.build(codec.request_schema(ApiKey.API_VERSIONS, 0), {})
    return codec.encode_request(body, correlation_id, "bounds-test")


def read_frame(s: socket.socket, timeout_s: float) -> bytes | None:
    """One response frame, or None if none arrives within `timeout_s`."""
    s.settimeout(timeout_s)
    try:
        head = s.recv(4, socket.MSG_WAITALL)
        (size,) = struct.unpack(">i", head)
        return s.recv(size, socket.MSG_WAITALL)
    except TimeoutError:
        return None


def produce_and_time(bootstrap: str, topic: str, n: int, size: int = 1000) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked = []
    started = time.monotonic()
    for _ in range(n):
        producer.produce(topic, b"x" * size, partition=0, on_delivery=lambda e, m: acked.append(e))
    assert producer.flush(20) == 0
    assert acked and all(e is None for e in acked)
    return time.monotonic() - started


@pytest.fixture
def cluster(request, tmp_path):
    config = {"num.partitions": "1", "auto.create.topics.enable": "true", **request.param}
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=config) as running:
        yield running


@pytest.mark.parametrize("cluster", [{"connections.max.idle.ms": "1500"}], indirect=True)
def test_a_client_that_never_reads_is_closed_and_delays_nobody(cluster):
    broker = cluster.brokers[0]
    topic = f"stall-{uuid.uuid4().hex[:6]}"
    produce_and_time(cluster.bootstrap_servers, topic, 2000)  # ~2 MB to fetch
    before = broker.server.idle_closed_connections
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect((broker.host, broker.port))
    stalled.sendall(b"".join(fetch_frame(topic, n) for n in range(200)))  # ~200 MB of answers
    time.sleep(0.5)
    assert broker.server.connection_count >= 1
    assert produce_and_time(cluster.bootstrap_servers, topic, 200) < 5, "others keep being served"
    deadline = time.monotonic() + 10
    while broker.server.idle_closed_connections == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert broker.server.idle_closed_connections > before, "the stalled reader was closed"
    stalled.close()


@pytest.mark.parametrize("cluster", [{"queued.max.requests": "2"}], indirect=True)
def test_requests_parked_in_purgatory_do_not_hold_queue_slots(cluster):
    broker = cluster.brokers[0]
    assert broker.server.request_slots.capacity == 2
    topic = f"park-{uuid.uuid4().hex[:6]}"
    produce_and_time(cluster.bootstrap_servers, topic, 1)
    pollers = []
    for n in range(8):  # each long-polls 4 s past the one record: 8 parked requests
        s = socket.create_connection((broker.host, broker.port))
        body = fetch_frame(topic, n, max_wait_ms=4000)
        pollers.append(s)
        s.sendall(body)
        assert read_frame(s, 5) is not None  # offset 0 has data: answered at once
        s.sendall(_fetch_from(topic, 1, n + 100))  # then wait at the log end
    time.sleep(0.3)
    assert produce_and_time(cluster.bootstrap_servers, topic, 50) < 2.0, (
        "two slots, eight parked fetches: a producer is still admitted at once"
    )
    for s in pollers:  # the append wakes every parked fetch
        assert read_frame(s, 3) is not None
        s.close()


def _fetch_from(topic: str, offset: int, correlation_id: int) -> bytes:
    body = kio_build.build(
        codec.request_schema(ApiKey.FETCH, 4),
        {
            "replica_id": -1,
            "max_wait": 4000,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
    )
    return codec.encode_request(body, correlation_id, "bounds-test")


@pytest.mark.parametrize("cluster", [{"queued.max.request.bytes": "1000000"}], indirect=True)
def test_frames_being_received_hold_the_memory_pool(cluster):
    broker = cluster.brokers[0]
    hog = socket.create_connection((broker.host, broker.port))
    hog.sendall(struct.pack(">i", 5_000_000) + b"\0" * 100)  # declares 5 MB, sends 100 bytes
    time.sleep(0.3)
    assert broker.server.memory_pool.reserved >= 5_000_000
    other = socket.create_connection((broker.host, broker.port))
    other.sendall(api_versions_frame(7))
    assert read_frame(other, 0.8) is None, "the pool is exhausted: new reads wait"
    hog.close()
    answer = read_frame(other, 5)
    assert answer is not None and struct.unpack(">i", answer[:4])[0] == 7
    assert broker.server.memory_pool.reserved == 0
    other.close()
