"""The controller over real sockets on 127.0.0.1, with `AsyncKafkaConnection` as a fake broker:
registration, heartbeats, following the metadata log with Fetch, topic admin, restarts."""

from __future__ import annotations

import asyncio
import datetime
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.static.primitive import i32Timedelta

from sparklog.controller import BrokerLaunchFacts, broker_client_id
from sparklog.controller.server import ControllerServer
from sparklog.errors import UnsupportedEndpointTypeError
from sparklog.metadata import MetadataImage
from sparklog.metadata.configs import ControllerConfig
from sparklog.protocol import codec
from sparklog.protocol.api_versions import CONTROLLER_APIS, ApiKey
from sparklog.protocol.async_client import AsyncKafkaConnection


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[ControllerServer]:
    server = ControllerServer(tmp_path / "controller").start_in_thread()
    yield server
    server.stop()


def schema(api_key: ApiKey, version: int) -> Any:
    """The kio request module of one version (for its nested entity classes)."""
    return __import__(codec.request_schema(int(api_key), version).__module__, fromlist=["_"])


def ms(value: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


class FakeBroker:
    """A broker's controller-facing side, built on AsyncKafkaConnection."""

    def __init__(self, server: ControllerServer, broker_id: int, attempt: int = 0) -> None:
        self.server = server
        self.broker_id = broker_id
        facts = BrokerLaunchFacts(f"exec-{broker_id}", attempt, f"/data/broker-{broker_id}")
        self.conn = AsyncKafkaConnection(
            "127.0.0.1", server.port, client_id=broker_client_id(facts)
        )
        self.incarnation_id = uuid.uuid4()
        self.image = MetadataImage()
        self.broker_epoch = -1

    async def __aenter__(self) -> FakeBroker:
        await self.conn.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.conn.close()

    async def call(self, api_key: ApiKey, **fields: Any) -> Any:
        version = self.conn.version_for(int(api_key), CONTROLLER_APIS[api_key])
        return await self.conn.request(codec.request_schema(int(api_key), version)(**fields))

    async def register(self, rack: str | None = None) -> Any:
        version = self.conn.version_for(
            ApiKey.BROKER_REGISTRATION, CONTROLLER_APIS[ApiKey.BROKER_REGISTRATION]
        )
        listener = schema(ApiKey.BROKER_REGISTRATION, version).Listener(
            name="PLAINTEXT", host="127.0.0.1", port=19092 + self.broker_id, security_protocol=0
        )
        response = await self.call(
            ApiKey.BROKER_REGISTRATION,
            broker_id=self.broker_id,
            cluster_id=self.server.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=(listener,),
            features=(),
            rack=rack,
        )
        self.broker_epoch = response.broker_epoch
        return response

    async def heartbeat(self, **flags: bool) -> Any:
        return await self.call(
            ApiKey.BROKER_HEARTBEAT,
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.image.offset,
            want_fence=flags.get("want_fence", False),
            want_shut_down=flags.get("want_shut_down", False),
        )

    async def fetch_metadata(self, max_wait_ms: int = 0) -> int:
        """One Fetch of `__cluster_metadata-0` from the image offset; records applied."""
        fetch = schema(ApiKey.FETCH, 12)
        response = await self.call(
            ApiKey.FETCH,
            max_wait=ms(max_wait_ms),
            min_bytes=1,
            topics=(
                fetch.FetchTopic(
                    topic="__cluster_metadata",
                    partitions=(
                        fetch.FetchPartition(
                            partition=0, fetch_offset=self.image.offset, partition_max_bytes=1 << 20
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        (partition,) = response.responses[0].partitions
        assert partition.error_code == 0
        return self.image.apply_batches(partition.records or b"")

    async def log_end_offset(self) -> int:
        offsets = schema(ApiKey.LIST_OFFSETS, 7)
        response = await self.call(
            ApiKey.LIST_OFFSETS,
            replica_id=-1,
            isolation_level=0,
            topics=(
                offsets.ListOffsetsTopic(
                    name="__cluster_metadata",
                    partitions=(offsets.ListOffsetsPartition(partition_index=0, timestamp=-1),),
                ),
            ),
        )
        (partition,) = response.topics[0].partitions
        assert partition.error_code == 0
        return partition.offset

    async def catch_up(self) -> None:
        end = await self.log_end_offset()
        while self.image.offset < end:
            await self.fetch_metadata()

    async def start(self) -> None:
        """Register, follow the log past the registration, heartbeat until unfenced."""
        assert (await self.register()).error_code == 0
        await self.catch_up()
        reply = await self.heartbeat()
        assert (reply.error_code, reply.is_caught_up, reply.is_fenced) == (0, True, False)


async def create_topics(
    broker: FakeBroker, *topics: tuple[str, int, int], version: int = 7, **kwargs: Any
) -> Any:
    mod = schema(ApiKey.CREATE_TOPICS, version)
    body = codec.request_schema(ApiKey.CREATE_TOPICS, version)(
        topics=tuple(
            mod.CreatableTopic(
                name=n, num_partitions=p, replication_factor=r, assignments=(), configs=()
            )
            for n, p, r in topics
        ),
        timeout=ms(30_000),
        validate_only=kwargs.get("validate_only", False),
    )
    return await broker.conn.request(body)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_broker_registers_heartbeats_and_follows_the_log_to_an_identical_image(controller):
    async def scenario() -> None:
        async with FakeBroker(controller, 0) as b0, FakeBroker(controller, 1) as b1:
            await b0.start()
            await b1.start()
            created = await create_topics(b0, ("orders", 4, 2), ("logs", 1, 1))
            assert [(t.name, t.error_code, t.num_partitions) for t in created.topics] == [
                ("orders", 0, 4),
                ("logs", 0, 1),
            ]
            await b1.catch_up()
            assert b1.image == controller.metadata_image()
            registered = b1.image.broker(0)
            assert (registered.executor_id, registered.task_attempt, registered.data_dir) == (
                "exec-0",
                0,
                "/data/broker-0",
            )

    run(scenario())


def test_create_topic_errors_and_older_versions_over_the_wire(controller):
    async def scenario() -> None:
        async with FakeBroker(controller, 0) as b0:
            await b0.start()
            response = await create_topics(b0, ("t", 1, 3), ("u", 2, 1), version=2)
            too_many, ok = response.topics
            assert (too_many.error_code, too_many.error_message) == (
                38,
                "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
                "cannot be reached because only 1 broker(s) are registered.",
            )
            assert ok.error_code == 0
            dry = await create_topics(b0, ("v", 1, 1), validate_only=True)
            assert dry.topics[0].error_code == 0
            metadata = await b0.call(
                ApiKey.METADATA, topics=None, include_topic_authorized_operations=False
            )
            assert [t.name for t in metadata.topics] == ["u"]
            assert [b.node_id for b in metadata.brokers] == [0]
            (topic,) = metadata.topics
            assert [(p.partition_index, p.leader_id, p.leader_epoch) for p in topic.partitions] == [
                (0, 0, 0),
                (1, 0, 0),
            ]

    run(scenario())


def test_metadata_auto_creates_topics_and_describe_cluster(controller):
    async def scenario() -> None:
        async with FakeBroker(controller, 0) as b0:
            await b0.start()
            request = schema(ApiKey.METADATA, 12)
            metadata = await b0.call(
                ApiKey.METADATA,
                topics=(
                    request.MetadataRequestTopic(topic_id=None, name="auto"),
                    request.MetadataRequestTopic(topic_id=None, name="bad name"),
                ),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            )
            assert [(t.name, t.error_code) for t in metadata.topics] == [
                ("auto", 0),
                ("bad name", 17),
            ]
            assert metadata.cluster_id == controller.cluster_id and metadata.controller_id == 0
            cluster = await b0.call(
                ApiKey.DESCRIBE_CLUSTER,
                include_cluster_authorized_operations=False,
                endpoint_type=2,
            )
            assert [(b.host, b.port) for b in cluster.brokers] == [("127.0.0.1", controller.port)]
            unknown = await b0.call(
                ApiKey.DESCRIBE_CLUSTER,
                include_cluster_authorized_operations=False,
                endpoint_type=3,
            )
            assert unknown.error_code == UnsupportedEndpointTypeError.code and not unknown.brokers

    run(scenario())


def test_fetch_long_polls_until_the_next_controller_write(controller):
    async def scenario() -> None:
        async with FakeBroker(controller, 0) as b0, FakeBroker(controller, 1) as b1:
            await b0.start()
            await b1.catch_up()
            assert await b1.fetch_metadata(max_wait_ms=20) == 0  # nothing new: empty after the wait
            waiting = asyncio.create_task(b1.fetch_metadata(max_wait_ms=20_000))
            await asyncio.sleep(0)  # let the fetch reach the controller first
            await create_topics(b0, ("woken", 1, 1))
            async with asyncio.timeout(10):
                applied = await waiting
            assert applied >= 2 and b1.image.topic("woken") is not None

    run(scenario())


def test_duplicate_incarnation_is_refused_and_producer_ids_come_in_blocks(controller):
    async def scenario() -> None:
        async with FakeBroker(controller, 0) as b0, FakeBroker(controller, 0) as twin:
            await b0.start()
            assert (await twin.register()).error_code == 101
            first = await b0.call(
                ApiKey.ALLOCATE_PRODUCER_IDS, broker_id=0, broker_epoch=b0.broker_epoch
            )
            second = await b0.call(
                ApiKey.ALLOCATE_PRODUCER_IDS, broker_id=0, broker_epoch=b0.broker_epoch
            )
            assert [(r.producer_id_start, r.producer_id_len) for r in (first, second)] == [
                (0, 1000),
                (1000, 1000),
            ]
            stale = await b0.call(ApiKey.ALLOCATE_PRODUCER_IDS, broker_id=0, broker_epoch=99)
            assert stale.error_code == 77

    run(scenario())


def test_lease_expiry_fences_and_launcher_shutdown_reaches_heartbeats(tmp_path):
    config = ControllerConfig(broker_session_timeout_ms=200, broker_heartbeat_interval_ms=50)
    server = ControllerServer(tmp_path, config=config).start_in_thread()

    async def scenario() -> None:
        async with FakeBroker(server, 0) as b0, FakeBroker(server, 1) as b1:
            await b0.start()
            await b1.start()
            await create_topics(b0, ("t", 2, 1))
            async with asyncio.timeout(10):
                while not (b0.image.broker(1) and b0.image.broker(1).fenced):
                    await b0.heartbeat()  # b0 keeps its lease, b1 stays silent
                    await b0.fetch_metadata(max_wait_ms=50)
            assert not b0.image.broker(0).fenced
            assert [p.leader for p in b0.image.partitions()] == [0, -1]
            server.request_shutdown(0)
            assert (await b0.heartbeat()).should_shut_down
            reply = await b0.heartbeat(want_shut_down=True)
            assert reply.should_shut_down and reply.is_fenced

    try:
        run(scenario())
    finally:
        server.stop()


def test_restart_on_the_same_dir_restores_everything(tmp_path):
    directory = tmp_path / "controller"
    first = ControllerServer(directory).start_in_thread()

    async def before_restart() -> tuple[MetadataImage, int]:
        async with FakeBroker(first, 0) as b0:
            await b0.start()
            await create_topics(b0, ("kept", 3, 1))
            await b0.call(ApiKey.ALLOCATE_PRODUCER_IDS, broker_id=0, broker_epoch=b0.broker_epoch)
            await b0.catch_up()
            return b0.image, b0.broker_epoch

    image, broker_epoch = run(before_restart())
    assert first.next_node_id() == 1
    first.stop()
    second = ControllerServer(directory).start_in_thread()
    try:
        assert second.cluster_id == first.cluster_id
        assert second.next_node_id() == 1  # one above every registered id
        restored = second.metadata_image()
        assert restored.topic_names() == ["kept"] and restored.next_producer_id == 1000
        # Every unfenced broker gets a fresh lease (Kafka's activate): nothing moves yet.
        assert not restored.broker(0).fenced
        assert [p.leader for p in restored.partitions()] == [0, 0, 0]

        async def after_restart() -> None:
            async with FakeBroker(second, 0) as b0:
                b0.image, b0.broker_epoch = image, broker_epoch
                await b0.catch_up()
                reply = await b0.heartbeat()
                assert (reply.error_code, reply.is_fenced) == (0, False)
                await b0.catch_up()
                assert [p.leader for p in b0.image.partitions()] == [0, 0, 0]
                assert all(p.leader_epoch == 0 for p in b0.image.partitions())
                block = await b0.call(
                    ApiKey.ALLOCATE_PRODUCER_IDS, broker_id=0, broker_epoch=broker_epoch
                )
                assert block.producer_id_start == 1000
                await b0.catch_up()
                assert b0.image == second.metadata_image()

        run(after_restart())
    finally:
        second.stop()


def test_launcher_views_from_another_thread(controller):
    async def scenario() -> None:
        async with FakeBroker(controller, 0) as b0, FakeBroker(controller, 1) as b1:
            await b0.start()
            await b1.register()  # registered, still fenced
            await create_topics(b0, ("v", 2, 1))

    run(scenario())
    assert controller.live_brokers() == [
        {"broker_id": 0, "host": "127.0.0.1", "port": 19092, "rack": None}
    ]
    brokers = controller.describe_brokers()
    assert [(b["broker_id"], b["fenced"], b["executor_id"]) for b in brokers] == [
        (0, False, "exec-0"),
        (1, True, "exec-1"),
    ]
    (topic,) = controller.describe_topics()
    assert topic["name"] == "v" and topic["configs"] == {}
    assert [(p["partition"], p["leader"], p["replicas"]) for p in topic["partitions"]] == [
        (0, 0, [0]),
        (1, 0, [0]),
    ]


def test_stop_leaves_no_threads_and_a_second_stop_is_harmless(tmp_path):
    before = set(threading.enumerate())
    server = ControllerServer(tmp_path).start_in_thread()
    assert server.bootstrap == f"127.0.0.1:{server.port}" and server.port > 0
    server.stop()
    server.stop()
    assert set(threading.enumerate()) == before


def test_a_slow_store_write_leaves_the_controller_serving(controller):
    """A controller write waits for its store (an fsync, a PUT to an object store) on the
    writer thread: meanwhile the loop answers reads, and the write still completes, in order."""
    gate, entered = threading.Event(), threading.Event()
    write_batch = controller.store.write_batch

    def slow_write(base_offset: int, batch: bytes) -> None:
        entered.set()
        assert gate.wait(30)
        write_batch(base_offset, batch)

    controller.store.write_batch = slow_write
    blocks: list[tuple[int, int]] = []
    writer = threading.Thread(target=lambda: blocks.append(controller.allocate_producer_ids(7)))
    writer.start()
    try:
        assert entered.wait(10)

        async def read_while_writing() -> None:
            async with FakeBroker(controller, 0) as b0:  # connecting negotiates ApiVersions
                async with asyncio.timeout(10):  # a blocked loop would never answer
                    metadata = await b0.call(
                        ApiKey.METADATA, topics=None, include_topic_authorized_operations=False
                    )
                assert metadata.cluster_id == controller.cluster_id

        run(read_while_writing())
        assert not blocks  # the write is still waiting for its store
    finally:
        gate.set()
        writer.join(30)
    assert blocks == [(0, 1000)]
    assert controller.allocate_producer_ids(7) == (1000, 1000)  # and the next one follows it
