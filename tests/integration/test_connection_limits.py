"""Kafka's connection bounds on a broker: `max.connections.per.ip` / `max.connections` refuse
what is over the limit (the connection is closed at once, one log line per 10 s), and
`connections.max.idle.ms` closes connections that stay silent; real clients keep working."""

from __future__ import annotations

import selectors
import socket
import time

import pytest
from confluent_kafka import Producer

from sparklog.cluster.embedded import EmbeddedCluster


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    config = {"max.connections.per.ip": "8", "connections.max.idle.ms": "800"}
    with EmbeddedCluster(brokers=1, data_dir=tmp_path_factory.mktemp("limits"), config=config) as c:
        yield c


def readable(sockets: list[socket.socket]) -> list[socket.socket]:
    """The sockets with something to read now (poll-based: fds above 1,024 are fine)."""
    with selectors.DefaultSelector() as selector:
        for s in sockets:
            selector.register(s, selectors.EVENT_READ)
        return [key.fileobj for key, _ in selector.select(0)]


def closed_by_peer(s: socket.socket, wait_s: float) -> bool:
    s.settimeout(wait_s)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_connections_over_the_per_ip_limit_are_refused(limited):
    broker = limited.brokers[0]
    before = broker.server.refused_connections
    opened = [socket.create_connection((broker.host, broker.port)) for _ in range(12)]
    try:
        time.sleep(0.3)  # well inside connections.max.idle.ms: only refusals close sockets
        refused = [s for s in readable(opened) if closed_by_peer(s, 0.1)]
        assert len(refused) >= 4  # up to 8 from 127.0.0.1, some already taken by the cluster
        assert broker.server.refused_connections - before == len(refused)
    finally:
        for s in opened:
            s.close()
    time.sleep(0.2)
    producer = Producer({"bootstrap.servers": limited.bootstrap_servers})
    producer.produce("limits", b"still served")
    assert producer.flush(30) == 0


def test_idle_connections_are_closed(limited):
    broker = limited.brokers[0]
    before = broker.server.idle_closed_connections
    with socket.create_connection((broker.host, broker.port)) as s:
        assert not closed_by_peer(s, 0.2)  # not yet idle long enough
        assert closed_by_peer(s, 3.0)  # connections.max.idle.ms=800
    assert broker.server.idle_closed_connections > before


def test_a_per_host_override_raises_the_limit_for_that_host(tmp_path, caplog):
    config = {"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "localhost:40"}
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=config) as c:
        broker = c.brokers[0]
        assert broker.server.max_connections_per_ip_overrides == {"127.0.0.1": 40}
        opened = [socket.create_connection((broker.host, broker.port)) for _ in range(20)]
        try:
            time.sleep(0.3)
            assert not [s for s in readable(opened) if closed_by_peer(s, 0.1)], "20 of 40 allowed"
            more = [socket.create_connection((broker.host, broker.port)) for _ in range(25)]
            opened += more
            time.sleep(0.3)
            assert [s for s in readable(more) if closed_by_peer(s, 0.1)], "over 40: refused"
        finally:
            for s in opened:
                s.close()
    assert any("max.connections.per.ip.overrides=40" in r.getMessage() for r in caplog.records)


def test_a_bad_override_entry_is_named():
    from sparklog.broker.config import BrokerConfig

    config = BrokerConfig.from_properties({"max.connections.per.ip.overrides": "10.0.0.1=5"})
    with pytest.raises(ValueError, match="expected host:count"):
        config.connection_limit_overrides()
