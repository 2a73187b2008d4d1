"""Every API and version a broker accepts, sent as a plausible request and then mutated (bytes
flipped, bodies cut or padded, integers made extreme), over a real socket. The property of
issue 14: each frame gets a response or a closed connection, never a handler that hangs (unless
the request asks to wait), never an unexpected exception in the broker's log; afterwards a real
client reads every record it had acknowledged byte for byte and can still produce.

`SPARKLOG_WIRE_FUZZ_SEED` picks the mutations (printed on failure), `SPARKLOG_WIRE_FUZZ_MUTATIONS`
how many per frame."""

from __future__ import annotations

import logging
import os
import random
import socket
import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol.api_versions import (
    BROKER_APIS,
    CONTROLLER_APIS,
    GROUP_COORDINATOR_SERVED_APIS,
    ApiKey,
)
from tests.fuzz.examples import example_frames

from .conftest import TEST_CONFIG

SEED = int(os.environ.get("SPARKLOG_WIRE_FUZZ_SEED", "20261125"))
MUTATIONS = int(os.environ.get("SPARKLOG_WIRE_FUZZ_MUTATIONS", "8"))

#: Requests that may legitimately wait as long as they ask (a mutated timeout can be days).
MAY_WAIT = {
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS,
    ApiKey.CREATE_PARTITIONS,
    ApiKey.DELETE_RECORDS,
    ApiKey.ELECT_LEADERS,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS,
}
EXTREMES = (0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 0x00000000, 0x0000FFFF)


def mutate(frame: bytes, rng: random.Random) -> bytes:
    """A variant of a size-prefixed frame whose prefix still matches its length."""
    body = bytearray(frame[4:])
    header = 8  # api key, version, correlation id stay: the mutation targets the request
    kind = rng.randrange(4)
    if kind == 0 or len(body) <= header + 4:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(header, max(header + 1, len(body)))
            if i < len(body):
                body[i] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del body[rng.randrange(header, len(body)) :]
    elif kind == 2:
        body += rng.randbytes(rng.randint(1, 64))
    else:
        i = rng.randrange(header, len(body) - 3)
        struct.pack_into(">I", body, i, rng.choice(EXTREMES))
    return struct.pack(">i", len(body)) + bytes(body)


class Wire:
    """One raw connection, reopened whenever the broker closes it."""

    def __init__(self, host: str, port: int) -> None:
        self.address = (host, port)
        self.sock: socket.socket | None = None
        self.closes = 0

    def exchange(self, frame: bytes, timeout_s: float) -> str:
        """'answered', 'closed' or 'waiting' (no answer within `timeout_s`)."""
        if self.sock is None:
            self.sock = socket.create_connection(self.address)
        self.sock.settimeout(timeout_s)
        try:
            self.sock.sendall(frame)
            head = self.sock.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return self._closed()
            (size,) = struct.unpack(">i", head)
            body = self.sock.recv(size, socket.MSG_WAITALL)
            return "answered" if len(body) == size else self._closed()
        except TimeoutError:
            self._reset()
            return "waiting"
        except (ConnectionError, BrokenPipeError):
            return self._closed()

    def _closed(self) -> str:
        self.closes += 1
        self._reset()
        return "closed"

    def _reset(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    config = {**TEST_CONFIG, "controller.max.records.per.batch": "2000"}
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path_factory.mktemp("wire-fuzz"), config=config
    ) as c:
        yield c


def fuzz_server(
    host: str, port: int, apis, rng: random.Random, caplog
) -> tuple[dict[str, int], list, list, list]:
    """Send every example of `apis` and MUTATIONS variants of each to (host, port); returns
    (outcomes, unanswered originals, hung handlers, unexpected errors logged)."""
    wire = Wire(host, port)
    outcomes: dict[str, int] = {"answered": 0, "closed": 0, "waiting": 0}
    unanswered_originals, hung = [], []
    with caplog.at_level(logging.WARNING):
        for api, version, frame in example_frames(apis, f"fuzz-{uuid.uuid4().hex[:6]}"):
            if wire.exchange(frame, 10.0) != "answered":
                unanswered_originals.append((api.name, version))
            for _ in range(MUTATIONS):
                outcome = wire.exchange(mutate(frame, rng), 3.0)
                outcomes[outcome] += 1
                if outcome == "waiting" and api not in MAY_WAIT:
                    hung.append((api.name, version))
    failed = [
        r.getMessage()[:300]
        for r in caplog.records
        if r.exc_info or "unexpected error" in r.getMessage() or "handler failed" in r.getMessage()
    ]
    return outcomes, unanswered_originals, hung, failed


def check_fuzz(name: str, result) -> None:
    outcomes, unanswered_originals, hung, failed = result
    report = f"{name}, seed {SEED}: {outcomes}"
    assert not unanswered_originals, (
        f"{report}: plausible requests not answered: {unanswered_originals}"
    )
    assert not hung, f"{report}: handlers that did not answer in 3 s: {hung}"
    assert not failed, f"{report}: unexpected errors logged: {failed[:5]}"
    assert outcomes["answered"] > 0 and outcomes["closed"] > 0, report


def test_broker_and_coordinator_answer_or_close_and_lose_nothing(cluster, caplog):
    acked_topic = f"acked-{uuid.uuid4().hex[:6]}"
    rng = random.Random(SEED)
    values = [rng.randbytes(rng.randint(0, 300)) for _ in range(300)]
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(acked_topic, value, key=str(i).encode(), partition=0)
    assert producer.flush(30) == 0

    broker, coordinator = cluster.brokers[0], cluster.coordinator
    check_fuzz("broker", fuzz_server(broker.host, broker.port, BROKER_APIS, rng, caplog))
    check_fuzz(
        "coordinator",
        fuzz_server(coordinator.host, coordinator.port, GROUP_COORDINATOR_SERVED_APIS, rng, caplog),
    )

    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "wire-fuzz",
         "enable.auto.commit": False}
    )  # fmt: skip
    consumer.assign([TopicPartition(acked_topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        for m in consumer.consume(500, timeout=0.5):
            assert m.error() is None, m.error()
            got.append(m.value() or b"")
    consumer.close()
    assert got == values, "every acknowledged record reads back byte for byte"
    producer.produce(acked_topic, b"after", partition=0)
    assert producer.flush(10) == 0, "the broker still takes writes"


def test_the_controller_answers_or_closes(tmp_path, caplog):
    """The controller's listener (broker registration, heartbeats, forwarded admin requests):
    the same property. Its callers are brokers, so mutated heartbeats may legitimately fence
    or stop the cluster's broker; only the controller's own health is checked here."""
    rng = random.Random(SEED + 1)
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=TEST_CONFIG) as c:
        controller = c.controller
        check_fuzz(
            "controller",
            fuzz_server(controller.host, controller.port, CONTROLLER_APIS, rng, caplog),
        )
        wire = Wire(controller.host, controller.port)
        frames = example_frames({ApiKey.DESCRIBE_CLUSTER: (0, 0)}, "t")
        assert wire.exchange(frames[0][2], 10.0) == "answered", "the controller still serves"
