"""The cluster metadata that brokers and the controller share (DESIGN D15; Kafka's `metadata`
module): the metadata image (`image`) and its records (`log_records`), the partition-change
values of AlterPartition (`alter_partition`) and the config vocabulary: topic-config names and
their broker synonyms, DescribeConfigs entries, cluster settings (`configs`), dynamic broker configs
(`broker_configs`) and group configs (`group_configs`); client quotas (`quotas`).

This package is part of the floor under the three servers: it imports only `records`,
`storage` (for `LogConfig`) and `errors`, and the controller, the brokers and the coordinator
import it, never each other (docs/architecture.md, "Layers"). The names below load their
module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklog.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from .alter_partition import IsrChange, IsrChangeOutcome
    from .configs import (
        TOPIC_CONFIG_SYNONYMS,
        AlterConfigOp,
        ConfigEntry,
        ConfigResource,
        ConfigResourceType,
        ConfigSource,
        ConfigType,
        ControllerConfig,
        OpType,
        describe_configs,
        effective_topic_config,
    )
    from .image import MetadataImage, TopicImage
    from .log_records import BrokerRegistration, MetadataRecordError, PartitionRegistration
    from .quotas import ClientQuotaEntity, QuotasImage, ResolvedQuota

_MODULES = {
    "IsrChange": "alter_partition",
    "IsrChangeOutcome": "alter_partition",
    "TOPIC_CONFIG_SYNONYMS": "configs",
    "AlterConfigOp": "configs",
    "ConfigEntry": "configs",
    "ConfigResource": "configs",
    "ConfigResourceType": "configs",
    "ConfigSource": "configs",
    "ConfigType": "configs",
    "ControllerConfig": "configs",
    "OpType": "configs",
    "describe_configs": "configs",
    "effective_topic_config": "configs",
    "BrokerRegistration": "log_records",
    "MetadataImage": "image",
    "MetadataRecordError": "log_records",
    "PartitionRegistration": "log_records",
    "TopicImage": "image",
    "ClientQuotaEntity": "quotas",
    "QuotasImage": "quotas",
    "ResolvedQuota": "quotas",
}

__getattr__ = lazy_getattr(__name__, {n: f"{__name__}.{m}" for n, m in _MODULES.items()})

__all__ = [
    "TOPIC_CONFIG_SYNONYMS",
    "AlterConfigOp",
    "BrokerRegistration",
    "ClientQuotaEntity",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigType",
    "ControllerConfig",
    "IsrChange",
    "IsrChangeOutcome",
    "MetadataImage",
    "MetadataRecordError",
    "OpType",
    "PartitionRegistration",
    "QuotasImage",
    "ResolvedQuota",
    "TopicImage",
    "describe_configs",
    "effective_topic_config",
]
