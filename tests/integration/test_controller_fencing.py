"""Two drivers on one metadata.log.dir (issue 27 item 4): the zombie is the one fenced.

A driver cut off by a network partition keeps running while its replacement starts on another
host with the same `metadata.log.dir`. The new controller commits its LeaderChange claim before
it serves, so the OLD one loses its next write (the conditional create of the next offset),
logs one line, stops serving and acknowledges nothing more; the new one keeps working. The same
on S3 (S3Proxy) and on a shared directory (link-created batch files).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid

import pytest

from sparklog.controller.metadata_store import MetadataLogFencedError
from sparklog.controller.server import ControllerServer
from sparklog.metrics.metric import MetricName

from .conftest import TEST_CONFIG
from .test_controller import FakeBroker, create_topics


@pytest.fixture(params=["s3", "shared-dir"])
def shared_settings(request, tmp_path):
    if request.param == "shared-dir":
        return {"metadata.log.dir": str(tmp_path / "shared-filesystem" / "sparklog")}
    s3proxy = request.getfixturevalue("s3proxy")
    bucket = s3proxy.create_bucket(f"fence-{uuid.uuid4().hex[:8]}")
    return {"metadata.log.dir": f"s3://{bucket}/cluster", **s3proxy.settings()}


def _create_topic(controller: ControllerServer, broker_id: int, name: str) -> None:
    """CreateTopics over the Kafka protocol, from a broker registered with `controller`."""

    async def scenario() -> None:
        async with FakeBroker(controller, broker_id) as broker:
            await broker.start()
            response = await create_topics(broker, (name, 1, 1))
            assert [t.error_code for t in response.topics] == [0]

    asyncio.run(scenario())


def _refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


def test_the_older_controller_is_fenced_at_its_next_write(tmp_path, shared_settings, caplog):
    caplog.set_level(logging.ERROR, logger="sparklog")
    config = {**TEST_CONFIG, **shared_settings}
    old = ControllerServer(tmp_path / "host-a", config=config).start_in_thread()
    new = None
    try:
        _create_topic(old, 0, "before")
        old_block = old.allocate_producer_ids(0)

        # the replacement driver starts on another host; the old one runs on
        new = ControllerServer(tmp_path / "host-b", config=config).start_in_thread()
        assert new.cluster_id == old.cluster_id
        assert new.topic_names() == ["before"]
        old_port = old.port

        # the old one's next write (this one, or its tick's) loses, with one clear line naming
        # the new owner
        with pytest.raises(MetadataLogFencedError, match="FENCED"):
            old.allocate_producer_ids(0)
        fenced_lines = [r for r in caplog.records if "FENCED" in r.getMessage()]
        assert len(fenced_lines) == 1 and not fenced_lines[0].exc_info
        assert new.incarnation_id in fenced_lines[0].getMessage()
        assert old.fenced

        # and it serves nothing more: no acknowledgement, no listener, no launcher call
        with pytest.raises(MetadataLogFencedError):
            old.allocate_producer_ids(0)
        with pytest.raises(OSError):  # refused: never answered
            _create_topic(old, 1, "from-the-zombie")
        assert _refuses_connections(old_port)

        # the new one keeps working, and nothing the zombie tried is in the log
        _create_topic(new, 2, "after")
        new_block = new.allocate_producer_ids(0)
        assert new_block[0] >= old_block[0] + old_block[1]
        assert new.topic_names() == ["after", "before"]
    finally:
        old.stop()
        if new is not None:
            new.stop()

    # a third start sees exactly what the new controller wrote
    third = ControllerServer(tmp_path / "host-c", config=config).start_in_thread()
    try:
        assert third.topic_names() == ["after", "before"]
        assert third.allocate_producer_ids(0)[0] >= new_block[0] + new_block[1]
    finally:
        third.stop()


def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def test_an_idle_zombie_stops_without_writing(tmp_path, shared_settings, caplog):
    """A zombie with nothing to write would grant leases and serve stale metadata for ever:
    its tick probes the log's next offset and finds its successor's claim there."""
    caplog.set_level(logging.ERROR, logger="sparklog")
    config = {**TEST_CONFIG, **shared_settings}
    old = ControllerServer(tmp_path / "host-a", config=config).start_in_thread()
    try:
        new = ControllerServer(tmp_path / "host-b", config=config).start_in_thread()
        try:
            _wait(lambda: old.fenced and _refuses_connections(old.port), 30, "the zombie to stop")
            fenced_lines = [r for r in caplog.records if "FENCED" in r.getMessage()]
            assert len(fenced_lines) == 1 and new.incarnation_id in fenced_lines[0].getMessage()
            assert not new.fenced
            # Kafka's alert on the sum of ActiveControllerCount over the cluster stays 1
            assert _active_controller_count(old) == 0
            assert _active_controller_count(new) == 1
            new.allocate_producer_ids(0)
        finally:
            new.stop()
    finally:
        old.stop()


def _active_controller_count(controller: ControllerServer) -> float:
    name = MetricName.of("kafka.controller", "KafkaController", "ActiveControllerCount")
    metric = controller.metrics.metric(name)
    assert metric is not None
    return metric.value()
