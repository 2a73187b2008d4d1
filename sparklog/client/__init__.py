"""sparklog's Kafka clients: producer, consumer (manual assignment) and admin, speaking the
Kafka protocol over blocking sockets with background threads, configured with Kafka's
setting names (`{"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 5, ...}`).

The names below load their module on first use, so `sparklog.client.config` (checked on the
driver for every read and write) does not bring in the network stack and kio's schemas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklog.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from sparklog.structs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, TopicPartition

    from .accumulator import BatchMetadata, RecordMetadata
    from .admin import (
        AdminClient,
        AlterConfigOp,
        ClusterDescription,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        OffsetAndTimestamp,
        TopicDescription,
    )
    from .arrow_batches import arrow_schema
    from .config import (
        ADMIN_SETTINGS,
        CONSUMER_SETTINGS,
        PRODUCER_SETTINGS,
        ClientConfig,
        ConfigError,
        admin_config,
        consumer_config,
        producer_config,
    )
    from .consumer import KafkaConsumer, NoGroupError
    from .fetcher import ConsumerRecord
    from .group_member import CommitFailedError
    from .metadata import BrokerNode, PartitionInfo
    from .partitioner import BuiltInPartitioner, RoundRobinPartitioner
    from .position_reset import NoOffsetForPartitionError
    from .producer import ClientClosedError, KafkaProducer, ProducerRecord
    from .transaction_batch import BatchDecision, end_transactions, fence_transactions
    from .transaction_manager import TransactionHandle, TransactionStateError

_MODULES = {
    "BatchMetadata": "accumulator",
    "RecordMetadata": "accumulator",
    "EARLIEST_TIMESTAMP": "sparklog.structs",
    "LATEST_TIMESTAMP": "sparklog.structs",
    "MAX_TIMESTAMP": "sparklog.structs",
    "AdminClient": "admin",
    "AlterConfigOp": "admin",
    "ClusterDescription": "admin",
    "ConfigEntry": "admin",
    "ConfigResource": "admin",
    "NewTopic": "admin",
    "OffsetAndTimestamp": "admin",
    "TopicDescription": "admin",
    "arrow_schema": "arrow_batches",
    "ADMIN_SETTINGS": "config",
    "CONSUMER_SETTINGS": "config",
    "PRODUCER_SETTINGS": "config",
    "ClientConfig": "config",
    "ConfigError": "config",
    "admin_config": "config",
    "consumer_config": "config",
    "producer_config": "config",
    "KafkaConsumer": "consumer",
    "NoGroupError": "consumer",
    "ConsumerRecord": "fetcher",
    "CommitFailedError": "group_member",
    "BrokerNode": "metadata",
    "PartitionInfo": "metadata",
    "TopicPartition": "sparklog.structs",
    "BuiltInPartitioner": "partitioner",
    "NoOffsetForPartitionError": "position_reset",
    "RoundRobinPartitioner": "partitioner",
    "ClientClosedError": "producer",
    "KafkaProducer": "producer",
    "ProducerRecord": "producer",
    "BatchDecision": "transaction_batch",
    "end_transactions": "transaction_batch",
    "fence_transactions": "transaction_batch",
    "TransactionHandle": "transaction_manager",
    "TransactionStateError": "transaction_manager",
}


__getattr__ = lazy_getattr(
    __name__, {n: m if "." in m else f"{__name__}.{m}" for n, m in _MODULES.items()}
)


__all__ = [
    "ADMIN_SETTINGS",
    "CONSUMER_SETTINGS",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "PRODUCER_SETTINGS",
    "AdminClient",
    "AlterConfigOp",
    "BatchDecision",
    "BatchMetadata",
    "BrokerNode",
    "BuiltInPartitioner",
    "ClientClosedError",
    "ClientConfig",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigError",
    "ConfigResource",
    "ConsumerRecord",
    "NoGroupError",
    "CommitFailedError",
    "KafkaConsumer",
    "KafkaProducer",
    "NewTopic",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "PartitionInfo",
    "ProducerRecord",
    "RecordMetadata",
    "RoundRobinPartitioner",
    "TopicDescription",
    "TopicPartition",
    "TransactionHandle",
    "TransactionStateError",
    "admin_config",
    "arrow_schema",
    "consumer_config",
    "end_transactions",
    "fence_transactions",
    "producer_config",
]
