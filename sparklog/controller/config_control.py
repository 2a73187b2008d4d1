"""Config changes and descriptions on the controller (Kafka's `ConfigurationControlManager`):
topic configs, dynamic broker configs (per broker and the cluster default) and group configs,
each stored as `Config` records of its resource type.

Like the rest of the controller core it is sans-IO: an operation reads the image, validates
and returns the records that make it true (`ControllerResult`); nothing is applied until the
caller persisted and replayed them. `effective_config()` is the controller's settings with the
cluster-wide dynamic broker configs applied (the topic defaults it reads when it creates topics
or elects leaders); the `QuorumController` refreshes it when it replays a broker `Config`
record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from sparklog.controller.replication_control import check_min_insync_replicas
from sparklog.controller.results import NONE, ApiError, ControllerResult
from sparklog.errors import InvalidRequestError, KafkaError, UnknownTopicOrPartitionError
from sparklog.metadata.broker_configs import (
    DEFAULT_RESOURCE,
    broker_changes,
    broker_legacy_changes,
    describe_broker_resource,
    dynamic_topic_defaults,
)
from sparklog.metadata.configs import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ControllerConfig,
    describe_configs,
    described_cluster_settings,
    effective_topic_config,
    incremental_changes,
    legacy_changes,
    validate_remote_storage,
)
from sparklog.metadata.group_configs import (
    check_group_resource,
    describe_group_configs,
    group_changes,
    group_legacy_changes,
)
from sparklog.metadata.image import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE, MetadataImage
from sparklog.metadata.log_records import CLEAR_ELR, CONFIG

MIN_INSYNC_REPLICAS = "min.insync.replicas"

_RECORD_TYPE = {
    ConfigResourceType.TOPIC: TOPIC_RESOURCE,
    ConfigResourceType.BROKER: BROKER_RESOURCE,
    ConfigResourceType.GROUP: GROUP_RESOURCE,
}

AlterResults = ControllerResult[list[tuple[ConfigResource, ApiError]]]


def effective_config(static: ControllerConfig, image: MetadataImage) -> ControllerConfig:
    """`static` with the cluster-wide dynamic broker configs of `image` on its topic defaults."""
    layer = image.configs(BROKER_RESOURCE, DEFAULT_RESOURCE)
    if not layer:
        return static
    return replace(static, topic_defaults=dynamic_topic_defaults(static.topic_defaults, [layer]))


class ConfigurationControl:
    """DescribeConfigs, IncrementalAlterConfigs and AlterConfigs over one metadata image;
    `config()` returns the controller's current (effective) settings."""

    def __init__(self, image: MetadataImage, config: Callable[[], ControllerConfig]) -> None:
        self.image = image
        self.config = config

    def describe(
        self,
        resource: ConfigResource,
        keys: Sequence[str] | None = None,
        *,
        include_synonyms: bool = False,
    ) -> tuple[ApiError, list[ConfigEntry]]:
        config = self.config()
        try:
            if resource.resource_type == ConfigResourceType.BROKER:
                entries = describe_broker_resource(
                    config,
                    resource.resource_name,
                    self.image.configs(BROKER_RESOURCE, DEFAULT_RESOURCE),
                    self.image.configs(BROKER_RESOURCE, resource.resource_name),
                    described_cluster_settings(config),
                    keys,
                    include_synonyms=include_synonyms,
                )
            elif resource.resource_type == ConfigResourceType.GROUP:
                if not resource.resource_name:
                    raise InvalidRequestError("Group name must not be empty")
                entries = describe_group_configs(
                    self.image.configs(GROUP_RESOURCE, resource.resource_name),
                    config.group_defaults,
                    keys,
                    include_synonyms=include_synonyms,
                )
            else:
                entries = describe_configs(
                    self.image, config, resource, keys, include_synonyms=include_synonyms
                )
        except KafkaError as e:
            return ApiError.of(e), []
        return NONE, entries

    def incremental_alter(
        self,
        resources: Sequence[tuple[ConfigResource, Sequence[AlterConfigOp]]],
        *,
        validate_only: bool = False,
    ) -> AlterResults:
        """IncrementalAlterConfigs (SET/DELETE/APPEND/SUBTRACT): per-resource results."""

        def changes(
            resource: ConfigResource, ops: Sequence[AlterConfigOp]
        ) -> dict[str, str | None]:
            current = self._current(resource)
            if resource.resource_type == ConfigResourceType.BROKER:
                return broker_changes(resource.resource_name, current, ops)
            if resource.resource_type == ConfigResourceType.GROUP:
                return group_changes(ops, self.config().group_defaults)
            return incremental_changes(current, ops, self.config().topic_defaults)

        return self._alter(resources, changes, validate_only)

    def alter(
        self,
        resources: Sequence[tuple[ConfigResource, Mapping[str, str | None]]],
        *,
        validate_only: bool = False,
    ) -> AlterResults:
        """AlterConfigs (legacy): the given configs replace all of a resource's overrides."""

        def changes(
            resource: ConfigResource, configs: Mapping[str, str | None]
        ) -> dict[str, str | None]:
            current = self._current(resource)
            if resource.resource_type == ConfigResourceType.BROKER:
                return broker_legacy_changes(resource.resource_name, current, configs)
            if resource.resource_type == ConfigResourceType.GROUP:
                return group_legacy_changes(current, configs, self.config().group_defaults)
            return legacy_changes(current, configs, self.config().topic_defaults)

        return self._alter(resources, changes, validate_only)

    def _current(self, resource: ConfigResource) -> Mapping[str, str]:
        kind = _RECORD_TYPE[ConfigResourceType(resource.resource_type)]
        return self.image.configs(kind, resource.resource_name)

    def _alter(
        self,
        resources: Sequence[tuple[ConfigResource, Any]],
        changes: Callable[[ConfigResource, Any], dict[str, str | None]],
        validate_only: bool,
    ) -> AlterResults:
        seen = [resource for resource, _ in resources]
        results: list[tuple[ConfigResource, ApiError]] = []
        records: list[dict[str, Any]] = []
        for resource, alterations in resources:
            try:
                if seen.count(resource) > 1:
                    raise InvalidRequestError("Duplicate resource in the request.")
                self._check_alterable(resource)
                resource_changes = changes(resource, alterations)
                if resource.resource_type == ConfigResourceType.TOPIC:
                    self._check_min_insync(resource.resource_name, resource_changes)
                    self._check_remote_storage(resource.resource_name, resource_changes)
            except KafkaError as e:
                results.append((resource, ApiError.of(e)))
                continue
            results.append((resource, NONE))
            if not validate_only:
                records.extend(self._records(resource, resource_changes))
        return ControllerResult(results, tuple(records))

    def _records(
        self, resource: ConfigResource, changes: Mapping[str, str | None]
    ) -> list[dict[str, Any]]:
        kind = _RECORD_TYPE[ConfigResourceType(resource.resource_type)]
        records: list[dict[str, Any]] = [
            {
                "type": CONFIG,
                "resource_type": kind,
                "resource_name": resource.resource_name,
                "name": name,
                "value": value,
            }
            for name, value in sorted(changes.items())
        ]
        if kind == TOPIC_RESOURCE and MIN_INSYNC_REPLICAS in changes and self.image.elr_enabled:
            # KIP-966: an ELR member is only known to hold every committed record under the
            # min ISR it was chosen with (Kafka's ClearElrRecord).
            records.append({"type": CLEAR_ELR, "topic_name": resource.resource_name})
        return records

    def _check_min_insync(self, name: str, changes: Mapping[str, str | None]) -> None:
        """Refuse a min.insync.replicas above the topic's (smallest) replication factor."""
        topic = self.image.topic(name)
        assert topic is not None  # _check_alterable
        merged = {**self.image.topic_config(name), **changes}
        overrides = {k: v for k, v in merged.items() if v is not None}
        min_insync = effective_topic_config(overrides, self.config().topic_defaults)
        replication_factor = min(len(p.target_replicas) for p in topic.partitions.values())
        check_min_insync_replicas(name, min_insync.min_insync_replicas, replication_factor)

    def _check_remote_storage(self, name: str, changes: Mapping[str, str | None]) -> None:
        """Kafka's remote-storage rules on the topic's new config (`validate_remote_storage`)."""
        current = self.image.topic_config(name)
        merged = {**current, **changes}
        overrides = {k: v for k, v in merged.items() if v is not None}
        defaults = self.config().topic_defaults
        was = effective_topic_config(current, defaults).remote_storage_enable
        validate_remote_storage(
            effective_topic_config(overrides, defaults),
            system_enabled=self.config().remote_log_storage_system_enable,
            was_enabled=was,
        )

    def _check_alterable(self, resource: ConfigResource) -> None:
        if resource.resource_type == ConfigResourceType.BROKER:
            return  # the name is checked with the changes (Kafka's wording)
        if resource.resource_type == ConfigResourceType.GROUP:
            check_group_resource(resource.resource_name)
            return
        if resource.resource_type != ConfigResourceType.TOPIC:
            raise InvalidRequestError(f"Unknown resource type {resource.resource_type}")
        if not resource.resource_name:
            raise InvalidRequestError("Default topic resources are not allowed.")
        if self.image.topic(resource.resource_name) is None:
            raise UnknownTopicOrPartitionError(
                f"The topic '{resource.resource_name}' does not exist."
            )


__all__ = ["ConfigurationControl", "effective_config"]
