"""`python -m sparklog tables status` at its edges on a real tiered broker: every partition of
a topic gets a line (one the table holds nothing of shows `-` and counts its pending offsets
from the log start), and a `--topic` naming no topic is an error that says so."""

from __future__ import annotations

import pytest

from sparklog.cli import main
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.records import SimpleRecord, build_batch

from .broker_wire import connect, create_topic, now_ms, produce, run
from .conftest import TEST_CONFIG
from .test_remote_log_manager import table_offsets, wait_until


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    data = tmp_path_factory.mktemp("tables-cli")
    config = {
        **TEST_CONFIG,
        "remote.log.storage.system.enable": "true",
        "remote.table.root": str(data / "tables"),
        "remote.log.manager.task.interval.ms": "100",
    }
    with EmbeddedCluster(brokers=1, data_dir=data / "cluster", config=config) as running:
        yield running


def topic_with(cluster: EmbeddedCluster, topic: str, partitions: int, sent: int, **configs):
    """A tiered topic with `sent` records in partition 0 (none in the others)."""

    async def create():
        conn = await connect(cluster.bootstrap_servers)
        try:
            props = {"remote.storage.enable": "true", "segment.bytes": "400", **configs}
            created = await create_topic(conn, topic, partitions, props)
            assert created.error_code == 0, created
        finally:
            await conn.close()

    async def send():
        conn = await connect(cluster.bootstrap_servers)
        try:
            for i in range(sent):
                record = SimpleRecord(b"v%03d" % i + b"." * 60, None, now_ms())
                response = await produce(conn, topic, build_batch([record]), 0, acks=-1)
                assert response.error_code == 0, response
        finally:
            await conn.close()

    run(create())
    for p in range(partitions):
        cluster.wait_for_leader(topic, p)
    run(send())


def status(cluster: EmbeddedCluster, topic: str, capsys) -> list[list[str]]:
    code = main(["tables", "status", "--bootstrap-server", cluster.bootstrap_servers,
                 "--topic", topic])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[0] == "TOPIC"
    return [line.split() for line in lines]


def test_a_partition_the_table_holds_nothing_of_has_a_line(tiered, capsys):
    topic_with(tiered, "half", 2, 12, **{"remote.table.freshness.ms": "0"})
    wait_until("partition 0 copied", lambda: len(table_offsets(tiered, "half", 0)) == 12)
    (p0, p1) = status(tiered, "half", capsys)
    assert p0[:6] == ["half", "0", "0", "12", "12", "0"]
    assert p1[:6] == ["half", "1", "-", "-", "0", "0"] and p1[8] == "-"


def test_offsets_not_copied_yet_count_from_the_log_start(tiered, capsys):
    topic_with(tiered, "paused", 1, 5, **{"remote.log.copy.disable": "true"})
    ((p0),) = status(tiered, "paused", capsys)
    assert p0[:6] == ["paused", "0", "-", "-", "5", "5"]
    assert float(p0[6]) >= 0.0


def test_a_topic_that_does_not_exist_is_an_error(tiered, capsys):
    code = main(["tables", "status", "--bootstrap-server", tiered.bootstrap_servers,
                 "--topic", "no-such-topic"])  # fmt: skip
    assert code == 1
    assert "no topic named or matching 'no-such-topic'" in capsys.readouterr().err
