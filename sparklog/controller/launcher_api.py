"""What the launcher and the driver's group coordinator call on a running `ControllerServer`
from any thread: `next_node_id()`, `request_shutdown()`, `unregister_broker()`,
`metadata_image()`, `live_brokers()`, `describe_brokers()`, `describe_topics()` and
`allocate_producer_ids()` run on the controller's loop (writes through `commit`); the
coordinator's lookups (`partition_count()`, `partition_leader()`, `group_config()`, the topic
names and ids) read the image without hopping onto the loop. `ControllerServer`
(`controller/server.py`) inherits them; the loop, the log and the writes are its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from sparklog.controller.apis import ControllerApis
from sparklog.controller.metadata_log import MetadataLog
from sparklog.controller.quorum_controller import QuorumController
from sparklog.controller.results import ControllerResult
from sparklog.metadata.image import GROUP_RESOURCE, MetadataImage
from sparklog.protocol.connection import Request
from sparklog.protocol.server_lifecycle import ServerLifecycle

T = TypeVar("T")
_CALL_TIMEOUT_S = 30.0


class ControllerLauncherApi(ServerLifecycle):
    """The controller's calls from other threads (see the module doc)."""

    # set by ControllerServer
    controller: QuorumController | None
    metadata_log: MetadataLog | None
    apis: ControllerApis | None
    inter_broker_listener_name: str
    _stopping: bool

    if TYPE_CHECKING:

        async def commit(self, operation: Callable[[], ControllerResult[T]]) -> T: ...

    def next_node_id(self) -> int:
        """A fresh broker id for a new broker (Kafka's protocol has no id-allocation API)."""
        return self._call(lambda: self._require_controller().next_node_id())

    def request_shutdown(self, broker_id: int | None = None) -> None:
        """Make heartbeats of `broker_id` (every broker when None) answer should_shut_down."""
        self._call(lambda: self._require_controller().request_shutdown(broker_id))

    def unregister_broker(self, broker_id: int) -> None:
        """Forget a broker (e.g. before relaunching its identity in a new Spark job)."""
        controller = self._require_controller()
        self._call_write(lambda: controller.unregister_broker(broker_id))

    def acl_image(self) -> MetadataImage | None:  # the authorizers' ACLs (the coordinator's too)
        return None if self.controller is None else self.controller.image

    def metadata_image(self) -> MetadataImage:
        """A copy of the current image (brokers, topics, partitions, configs)."""
        return self._call(
            lambda: MetadataImage.from_dict(self._require_controller().image.to_dict())
        )

    def live_brokers(self) -> list[dict[str, Any]]:
        """Unfenced brokers, sorted by id: `broker_id`, `host`, `port`, `rack`."""

        def view() -> list[dict[str, Any]]:
            image = self._require_controller().image
            return [
                {"broker_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in image.unfenced_brokers()
            ]

        return self._call(view)

    def describe_brokers(self) -> list[dict[str, Any]]:
        """Every registered broker with its launch facts and `fenced` flag, sorted by id."""
        return self._call(lambda: self.metadata_image().to_dict()["brokers"])

    def describe_topics(self) -> list[dict[str, Any]]:
        """Every topic: `name`, `topic_id`, `partitions` (leader, epochs, replicas, ISR), `configs`."""

        def view() -> list[dict[str, Any]]:
            image = self._require_controller().image
            topics = []
            for name in image.topic_names():
                topic = image.topic(name)
                assert topic is not None
                partitions = [topic.partitions[i].to_record() for i in sorted(topic.partitions)]
                for p in partitions:
                    del p["type"], p["topic_id"]
                configs = dict(image.topic_config(name))
                topics.append(
                    {
                        "name": name,
                        "topic_id": str(topic.topic_id),
                        "partitions": partitions,
                        "configs": configs,
                    }
                )
            return topics

        return self._call(view)

    async def handle_from_other_loop(self, request: Request) -> Any:
        """Serve a client request on the controller's loop, awaited from another loop (the
        group coordinator answers Metadata and DescribeCluster this way)."""
        loop = self._loop
        if loop is None or self._stopping or self.apis is None:
            raise RuntimeError("the controller is not running")
        self._check_not_fenced()
        future = asyncio.run_coroutine_threadsafe(self.apis.handle(request), loop)
        return await asyncio.wrap_future(future)

    def allocate_producer_ids(self, owner_id: int) -> tuple[int, int]:
        """(first id, count) of a fresh producer-id block for the driver's coordinator."""

        controller = self._require_controller()
        block = self._call_write(lambda: controller.producer_ids_block(owner_id))
        return block.producer_id_start, block.producer_id_len

    def partition_count(self, topic: str) -> int:
        """How many partitions `topic` has (0: no such topic), read from the image without
        hopping onto the loop (a lookup in dicts the loop replaces atomically; it may lag one
        record behind)."""
        controller = self.controller
        image = None if controller is None else controller.image.topic(topic)
        return 0 if image is None else len(image.partitions)

    def partition_leader(self, topic: str, partition: int) -> tuple[int, str, int] | None:
        """(broker id, host, port) of the partition's leader on the inter-broker listener (where
        the coordinator's markers go); None while it has no live one.
        Read without hopping onto the loop, like `partition_count`."""
        controller = self.controller
        image = None if controller is None else controller.image
        found = None if image is None else image.topic(topic)
        registration = None if found is None else found.partitions.get(partition)
        if image is None or registration is None or not registration.is_online:
            return None
        broker = image.broker(registration.leader)
        endpoint = None if broker is None else broker.endpoint(self.inter_broker_listener_name)
        if broker is None or broker.fenced or endpoint is None:
            return None
        return broker.broker_id, endpoint.host, endpoint.port

    def group_config(self, group_id: str) -> Mapping[str, str]:
        """A group's own configs (GROUP resource `Config` records), read from the image without
        hopping onto the loop, like `partition_count`."""
        controller = self.controller
        return (
            {} if controller is None else dict(controller.image.configs(GROUP_RESOURCE, group_id))
        )

    def topic_names(self) -> list[str]:
        controller = self.controller
        return [] if controller is None else list(controller.image.topic_names())

    def topic_id(self, topic: str) -> uuid.UUID | None:
        controller = self.controller
        image = None if controller is None else controller.image.topic(topic)
        return None if image is None else image.topic_id

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        controller = self.controller
        image = None if controller is None else controller.image.topic_by_id(topic_id)
        return None if image is None else image.name

    def _require_controller(self) -> QuorumController:
        if self.controller is None:
            raise RuntimeError("the controller is not started")
        return self.controller

    def _check_not_fenced(self) -> None:
        if self.metadata_log is not None:
            self.metadata_log.check_not_fenced()

    def _call_write(self, operation: Callable[[], ControllerResult[T]]) -> T:
        """`commit(operation)` from another thread: wait for its response."""
        loop = self._loop
        if loop is None or self._stopping:
            raise RuntimeError("the controller is not running")
        self._check_not_fenced()
        assert threading.get_ident() != self._loop_thread_id, "on the loop: await commit()"
        future = asyncio.run_coroutine_threadsafe(self.commit(operation), loop)
        return future.result(_CALL_TIMEOUT_S)

    def _call(self, fn: Callable[[], T]) -> T:
        loop = self._loop
        if loop is None or self._stopping:
            raise RuntimeError("the controller is not running")
        self._check_not_fenced()
        if threading.get_ident() == self._loop_thread_id:
            return fn()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as e:
                future.set_exception(e)

        loop.call_soon_threadsafe(run)
        return future.result(_CALL_TIMEOUT_S)
