"""sparklog's Kafka clients: producer, consumer (manual assignment) and admin, speaking the
Kafka protocol over blocking sockets with background threads, configured with Kafka's
setting names (`{"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 5, ...}`).
"""

from .accumulator import BatchMetadata, RecordMetadata
from .admin import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
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
from .consumer import KafkaConsumer, NoGroupError, NoOffsetForPartitionError
from .fetcher import ConsumerRecord
from .group_member import CommitFailedError
from .metadata import BrokerNode, PartitionInfo, TopicPartition
from .partitioner import BuiltInPartitioner, RoundRobinPartitioner
from .producer import ClientClosedError, KafkaProducer, ProducerRecord
from .transaction_batch import BatchDecision, end_transactions, fence_transactions
from .transaction_manager import TransactionHandle, TransactionStateError

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
