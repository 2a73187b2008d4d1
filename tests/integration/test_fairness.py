"""One connection cannot stall every client of a broker (issue 27): while the broker works
through a request naming thousands of entries, or a connection's pipelined requests, other
connections are answered in between.

Deterministic rather than timed: the clients run on the broker's own event loop, and
`cooperative.SLICE_S = 0` makes the broker pause every `CHECK_EVERY` entries. A client waits
until the heavy request's handler has started (a wrapper around the handler sets a flag before
calling it), then sends a small request on another connection: it must be answered before the
heavy one. Before the fix the heavy request ran to its response without letting the loop go,
so the client could not even send until the heavy response was written.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol import codec, cooperative, kio_build
from sparklog.protocol.api_versions import ApiKey

from .broker_wire import call, connect, create_topic

ENTRIES = 5_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path_factory.mktemp("fair")) as c:
        yield c


@pytest.fixture
def every_slice_used(monkeypatch):
    monkeypatch.setattr(cooperative, "SLICE_S", 0.0)


def _partition_fetch(index: int) -> dict:
    return {
        "partition": index, "current_leader_epoch": -1, "fetch_offset": 0,
        "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1024,
    }  # fmt: skip


HEAVY = {
    "metadata": (
        ApiKey.METADATA,
        {
            "topics": [{"name": f"absent-{i}", "topic_id": None} for i in range(ENTRIES)],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    ),
    "fetch_partitions": (
        ApiKey.FETCH,
        {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "fair", "partitions": [_partition_fetch(i) for i in range(ENTRIES)]}],
            "forgotten_topics_data": [], "rack_id": "",
        },
    ),
    "fetch_topics": (
        ApiKey.FETCH,
        {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": f"t{i}", "partitions": [_partition_fetch(0)]} for i in range(ENTRIES)],
            "forgotten_topics_data": [], "rack_id": "",
        },
    ),
    "list_offsets": (
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": "fair", "partitions": [
                {"partition_index": i, "current_leader_epoch": -1, "timestamp": -1} for i in range(ENTRIES)]}],
        },
    ),
    "offset_for_leader_epoch": (
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        {
            "replica_id": -1,
            "topics": [{"topic": "fair", "partitions": [
                {"partition": i, "current_leader_epoch": -1, "leader_epoch": 0} for i in range(ENTRIES)]}],
        },
    ),
}  # fmt: skip


def _on_broker_loop(broker, coro, timeout_s: float = 120):
    return asyncio.run_coroutine_threadsafe(coro, broker._loop).result(timeout_s)


class _Watch:
    """Wraps the broker's handler: `started` is set when a request of `api_key` starts."""

    def __init__(self, broker, api_key: int) -> None:
        self.server = broker.server
        self.inner = self.server.handler
        self.api_key = api_key
        self.started = asyncio.Event()

    def __enter__(self) -> _Watch:
        async def handler(request):
            if request.api_key == self.api_key:
                self.started.set()  # no await: the flag costs the request no turn of the loop
            return await self.inner(request)

        self.server.handler = handler
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.handler = self.inner


@pytest.mark.parametrize("heavy", sorted(HEAVY))
def test_a_request_of_many_entries_lets_other_connections_be_answered(
    cluster, every_slice_used, heavy
):
    broker = cluster.brokers[0]
    api_key, data = HEAVY[heavy]

    async def go():
        hostile, bystander = await connect(broker.bootstrap), await connect(broker.bootstrap)
        try:
            await create_topic(bystander, "fair")
            with _Watch(broker, api_key) as watch:
                answer = asyncio.ensure_future(call(hostile, api_key, data, timeout_s=100))
                await watch.started.wait()
                small = await call(
                    bystander,
                    ApiKey.METADATA,
                    {
                        "topics": [{"name": "fair", "topic_id": None}],
                        "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False,
                    },
                )
                overtaken = not answer.done()
                await answer
            return overtaken, small
        finally:
            await hostile.close()
            await bystander.close()

    overtaken, small = _on_broker_loop(broker, go())
    assert [t.name for t in small.topics] == ["fair"]
    assert overtaken, f"the bystander waited for the whole {heavy} request of {ENTRIES} entries"


def test_a_connection_pipelining_requests_does_not_starve_the_others(cluster, every_slice_used):
    broker = cluster.brokers[0]
    schema = codec.request_schema(ApiKey.API_VERSIONS, 3)
    body = kio_build.build(
        schema, {"client_software_name": "flood", "client_software_version": "1"}
    )
    count = 300
    frames = b"".join(codec.encode_request(body, i, "flood") for i in range(count))

    async def go():
        host, port = broker.bootstrap.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        bystander = await connect(broker.bootstrap)
        answered = 0

        async def read_all() -> None:
            nonlocal answered
            for _ in range(count):
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                await reader.readexactly(size)
                answered += 1

        try:
            with _Watch(broker, ApiKey.API_VERSIONS) as watch:
                writer.write(frames)  # every request at once: one read holds them all
                reading = asyncio.ensure_future(read_all())
                await watch.started.wait()
                await call(
                    bystander,
                    ApiKey.METADATA,
                    {
                        "topics": [],
                        "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False,
                    },
                )
                seen = answered
                await reading
            return seen
        finally:
            writer.close()
            await bystander.close()

    seen = _on_broker_loop(broker, go())
    assert seen < count, "the bystander was answered only after all pipelined requests"
