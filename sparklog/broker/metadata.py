"""The broker's copy of the cluster metadata (Kafka's `MetadataCache` + `BrokerMetadataListener`
+ `BrokerMetadataPublisher`).

`MetadataFollower.run()` long-polls the controller's metadata log, applies each fetched batch to
a `MetadataImage` and then publishes it: the replica manager reconciles its partitions, and
requests waiting for the image to reach an offset (forwarded admin requests, auto-created
topics) are released. `published_offset` only moves after publishing, so a waiter released at
offset N finds the logs of every partition created below N.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType

from sparklog.broker.config import BrokerConfig
from sparklog.broker.controller_client import ControllerClient
from sparklog.broker.partition import PartitionRegistration
from sparklog.broker.replica_base import TopicMetadata
from sparklog.errors import KafkaError, OffsetOutOfRangeError
from sparklog.metadata.broker_configs import DEFAULT_RESOURCE, dynamic_topic_defaults
from sparklog.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from sparklog.metadata.log_records import MetadataRecordError
from sparklog.metrics.replication_quota import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ReplicationQuotaManager,
    parse_throttled_replicas,
    throttled_rate,
)
from sparklog.storage.config import LogConfig

logger = logging.getLogger(__name__)

METADATA_FETCH_MAX_WAIT_MS = 500
_RETRY_BACKOFF_S = 0.1


def dynamic_layers(image: MetadataImage, broker_id: int | None) -> list[Mapping[str, str]]:
    """The dynamic broker configs that apply to broker `broker_id`, lowest precedence first:
    the cluster-wide default, then the broker's own (KIP-226)."""
    layers = [image.configs(BROKER_RESOURCE, DEFAULT_RESOURCE)]
    if broker_id is not None:
        layers.append(image.configs(BROKER_RESOURCE, str(broker_id)))
    return layers


def apply_replication_throttles(
    image: MetadataImage,
    broker_id: int,
    layers: list[Mapping[str, str]],
    leader: ReplicationQuotaManager | None,
    follower: ReplicationQuotaManager | None,
) -> None:
    """Point the KIP-73 quotas at the image: the rates from the dynamic broker configs, the
    throttled partitions from the topics' `*.replication.throttled.replicas` (Kafka's
    `DynamicConfigManager` handlers); visits only topics that have config overrides."""
    for quota, rate, replicas in (
        (leader, LEADER_RATE, LEADER_REPLICAS),
        (follower, FOLLOWER_RATE, FOLLOWER_REPLICAS),
    ):
        if quota is None:
            continue
        quota.update_quota(throttled_rate(layers, rate))
        quota.set_throttled(
            {
                topic: parse_throttled_replicas(configs[replicas], broker_id)
                for topic, configs in image.configs_of_type(TOPIC_RESOURCE)
                if configs.get(replicas)
            }
        )


def topic_defaults(image: MetadataImage, config: BrokerConfig, broker_id: int | None) -> LogConfig:
    """The topic defaults broker `broker_id` applies now: static, then the dynamic ones."""
    return dynamic_topic_defaults(config.default_log_config, dynamic_layers(image, broker_id))


def topics_from_image(
    image: MetadataImage, config: BrokerConfig, broker_id: int | None = None
) -> dict[str, TopicMetadata]:
    """What the replica manager needs from `image`: each topic's partitions and LogConfig
    (its overrides on top of this broker's static and dynamic topic defaults)."""
    defaults = topic_defaults(image, config, broker_id)
    topics: dict[str, TopicMetadata] = {}
    for name in image.topic_names():
        topic = image.topic(name)
        assert topic is not None
        partitions = {
            index: PartitionRegistration(
                p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch
            )
            for index, p in topic.partitions.items()
        }
        topics[name] = TopicMetadata(
            name, topic.topic_id, MappingProxyType(partitions), _config(image, name, defaults)
        )
    return topics


def _config(image: MetadataImage, name: str, defaults: LogConfig) -> LogConfig:
    overrides = dict(image.topic_config(name))
    try:
        return LogConfig.from_properties(overrides, base=defaults)
    except ValueError as e:  # the controller validated it; a newer controller may know more
        logger.warning("topic %s: ignoring configs this broker cannot apply (%s)", name, e)
        return defaults


class BrokerMetadata:
    """The image a broker serves from, and waits on its progress."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.cluster_id: str | None = None
        self.published_offset = 0
        self.controller_high_watermark = -1
        self._changed = asyncio.Event()

    def on_published(self) -> None:
        self.published_offset = self.image.offset
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for_offset(self, offset: int, timeout_s: float) -> bool:
        """Wait until everything below metadata `offset` is published; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.published_offset < offset:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
            except TimeoutError:
                return self.published_offset >= offset
        return True


class MetadataFollower:
    """Fetches the metadata log forever, applying and publishing what arrives."""

    def __init__(
        self,
        metadata: BrokerMetadata,
        controller: ControllerClient,
        publish: Callable[[MetadataImage], Awaitable[None] | None],
        *,
        max_wait_ms: int = METADATA_FETCH_MAX_WAIT_MS,
    ) -> None:
        self.metadata = metadata
        self.controller = controller
        self.publish = publish
        self.max_wait_ms = max_wait_ms
        self.failures = 0
        self._unpublished = False

    async def poll_once(self, max_wait_ms: int | None = None) -> int:
        """One Fetch: apply and publish the records it brings; returns how many."""
        image = self.metadata.image
        fetched = await self.controller.fetch_metadata(
            image.offset, self.max_wait_ms if max_wait_ms is None else max_wait_ms
        )
        if fetched.error_code == OffsetOutOfRangeError.code:
            raise MetadataRecordError(
                f"the controller's metadata log no longer holds offset {image.offset}"
            )
        if fetched.error_code != 0:
            raise ConnectionError(f"metadata fetch failed with error {fetched.error_code}")
        self.metadata.controller_high_watermark = fetched.high_watermark
        applied = image.apply_batches(fetched.records) if fetched.records else 0
        if applied or self._unpublished:
            # Reconciliation is idempotent: a failed publish is simply retried next poll.
            self._unpublished = True
            published = self.publish(image)
            if published is not None:
                await published
            self._unpublished = False
        self.metadata.on_published()
        return applied

    async def catch_up(self, end_offset: int, timeout_s: float) -> None:
        """Fetch without waiting until the image reaches `end_offset`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.metadata.image.offset < end_offset:
            if loop.time() > deadline:
                raise TimeoutError(
                    f"metadata reached offset {self.metadata.image.offset} of {end_offset} "
                    f"within {timeout_s:.0f} s"
                )
            await self.poll_once(max_wait_ms=0)

    async def run(self) -> None:
        """Follow the log until cancelled; connection problems are retried with a backoff."""
        while True:
            try:
                await self.poll_once()
                self.failures = 0
            except asyncio.CancelledError:
                raise
            except MetadataRecordError:
                logger.exception("cannot apply the metadata log; the broker stops following it")
                raise
            except (ConnectionError, OSError, TimeoutError, KafkaError) as e:
                self.failures += 1
                if self.failures in (1, 10) or self.failures % 100 == 0:
                    logger.warning(
                        "metadata fetch from the controller failed (%d times): %s", self.failures, e
                    )
                await asyncio.sleep(min(2.0, _RETRY_BACKOFF_S * self.failures))
