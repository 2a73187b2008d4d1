"""The APIs and versions sparklog serves, announced through ApiVersions so clients negotiate.

Version ranges are capped where a newer version would change semantics we do not implement
(Fetch >= 13 and Produce >= 13 address topics by id only; we serve names).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class ApiKey(enum.IntEnum):
    """Kafka API keys (`org.apache.kafka.common.protocol.ApiKeys`) that sparklog uses."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    #: sparklog's extension (`sparklog_apis`): many transactions ended in one decision
    SPARKLOG_END_TXN_BATCH = 32_001
    #: sparklog's extension (`sparklog_apis`): a broker's audit events for the driver's table
    SPARKLOG_AUDIT_EVENTS = 32_002
    #: sparklog's extension (`sparklog_apis`): a broker's quota usage for cluster-wide quotas
    SPARKLOG_QUOTA_USAGE = 32_003


VersionRange = tuple[int, int]

#: Kafka's `TransactionVersion` feature (ApiVersions' finalized features): level 2 is
#: transactions v2 (KIP-890 part 2), which clients use when the cluster finalized it.
TRANSACTION_VERSION_FEATURE = "transaction.version"

#: The group APIs and the versions served: OffsetCommit/OffsetFetch stop below v10 (topic ids);
#: OffsetCommit v0-v1 are gone since Kafka 4.0 (KIP-896).
GROUP_APIS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {
        ApiKey.JOIN_GROUP: (0, 9),
        ApiKey.SYNC_GROUP: (0, 5),
        ApiKey.HEARTBEAT: (0, 4),
        ApiKey.LEAVE_GROUP: (0, 5),
        ApiKey.OFFSET_COMMIT: (2, 9),
        ApiKey.OFFSET_FETCH: (1, 9),
        ApiKey.OFFSET_DELETE: (0, 0),
        ApiKey.LIST_GROUPS: (0, 5),
        ApiKey.DESCRIBE_GROUPS: (0, 5),
        ApiKey.DELETE_GROUPS: (0, 2),
        ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
        ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    }
)

#: The transaction APIs clients send to the transaction coordinator, and the versions served, as
#: Kafka 4.x: EndTxn v5 and TxnOffsetCommit v5 are transaction version 2 (KIP-890 part 2: an
#: epoch bump at every end, the group added by TxnOffsetCommit itself); AddPartitionsToTxn v4+
#: are the brokers' (v4 verifies, KIP-890 part 1; v5 without verifyOnly adds for a TV2
#: produce); AddPartitionsToTxn v5, AddOffsetsToTxn v4, EndTxn v4 and TxnOffsetCommit v4 are
#: the versions that know TRANSACTION_ABORTABLE (KIP-890, KIP-1050).
TRANSACTION_APIS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
        ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
        ApiKey.END_TXN: (0, 5),
        ApiKey.TXN_OFFSET_COMMIT: (0, 5),
        ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
        ApiKey.LIST_TRANSACTIONS: (0, 1),
    }
)

#: ACLs and SCRAM credentials (cluster metadata): the versions Kafka 4.x serves (v0 of the ACL
#: APIs went with Kafka 4.0, KIP-896). Brokers forward the writes to the controller.
SECURITY_METADATA_APIS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {
        ApiKey.DESCRIBE_ACLS: (1, 3),
        ApiKey.CREATE_ACLS: (1, 3),
        ApiKey.DELETE_ACLS: (1, 3),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    }
)

#: Client quotas (cluster metadata, KIP-546): the versions Kafka 4.x serves. Brokers forward
#: AlterClientQuotas to the controller and answer DescribeClientQuotas from their image.
CLIENT_QUOTA_APIS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1), ApiKey.ALTER_CLIENT_QUOTAS: (0, 1)}
)

#: The SASL handshake, accepted and announced on every listener of every server as Kafka does
#: (a listener without SASL answers it ILLEGAL_SASL_STATE), and answered by the connection's
#: authenticator (`protocol.sasl_authenticator`), never by a server's handler: v0 is kept for
#: kafka-python (raw tokens after the handshake, KAFKA-18270), SaslAuthenticate v1 adds the
#: session lifetime (KIP-368), v2 is flexible.
SASL_APIS_VERSIONS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2)}
)

#: What a broker serves to clients (and followers).
BROKER_APIS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {
        # v12: a transactional batch adds its partition to the transaction (KIP-890 part 2)
        ApiKey.PRODUCE: (3, 12),
        ApiKey.FETCH: (4, 12),
        # v8: -4 EARLIEST_LOCAL_TIMESTAMP (KIP-405), v9: -5 LATEST_TIERED_TIMESTAMP (KIP-1005)
        ApiKey.LIST_OFFSETS: (1, 9),
        ApiKey.METADATA: (1, 12),
        ApiKey.API_VERSIONS: (0, 4),
        ApiKey.CREATE_TOPICS: (2, 7),
        ApiKey.DELETE_TOPICS: (1, 5),
        ApiKey.DELETE_RECORDS: (0, 2),
        ApiKey.INIT_PRODUCER_ID: (0, 5),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
        ApiKey.DESCRIBE_CONFIGS: (1, 4),
        ApiKey.ALTER_CONFIGS: (0, 2),
        ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
        ApiKey.CREATE_PARTITIONS: (0, 3),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        ApiKey.DESCRIBE_CLUSTER: (0, 1),
        ApiKey.FIND_COORDINATOR: (0, 4),
        ApiKey.ELECT_LEADERS: (0, 2),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        # v2 carries each marker's transaction version (KIP-890 part 2)
        ApiKey.WRITE_TXN_MARKERS: (1, 2),
        ApiKey.DESCRIBE_PRODUCERS: (0, 0),
        # forwarded to the controller, which answers for its one-voter quorum (KIP-595)
        ApiKey.DESCRIBE_QUORUM: (0, 2),
        # forwarded to the controller: feature levels (KIP-584, KIP-778)
        ApiKey.UPDATE_FEATURES: (0, 2),
        **SECURITY_METADATA_APIS,
        **CLIENT_QUOTA_APIS,
        # group and transaction APIs: brokers forward them to the driver's coordinator
        # (`FORWARDED_TO_COORDINATOR_APIS`), which serves `GROUP_COORDINATOR_APIS`
        **GROUP_APIS,
        **TRANSACTION_APIS,
    }
)

#: What a broker accepts: what it announces plus sparklog's EndTxnBatch, which it forwards to the
#: coordinator like the other transaction APIs (not announced: sparklog's own clients send it).
BROKER_SERVED_APIS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {**BROKER_APIS, ApiKey.SPARKLOG_END_TXN_BATCH: (0, 0)}
)

#: What a broker announces in ApiVersions: `BROKER_APIS`, except that Produce is listed from v0.
#: Like Kafka 4.0 (KAFKA-18659): librdkafka before 2.11.1 sends gzip/snappy/lz4 batches
#: uncompressed when a broker's lowest Produce version is above 0. A v0-v2 Produce request is
#: still refused: `ServerConnection` checks `BROKER_APIS` and closes the connection, as Kafka does.
BROKER_ADVERTISED_APIS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {**BROKER_APIS, ApiKey.PRODUCE: (0, BROKER_APIS[ApiKey.PRODUCE][1])}
)

#: What the controller serves to brokers and admin clients.
CONTROLLER_APIS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {
        ApiKey.API_VERSIONS: (0, 4),
        ApiKey.FETCH: (4, 12),
        ApiKey.LIST_OFFSETS: (1, 7),
        ApiKey.METADATA: (1, 12),
        ApiKey.CREATE_TOPICS: (2, 7),
        ApiKey.DELETE_TOPICS: (1, 5),
        ApiKey.CREATE_PARTITIONS: (0, 3),
        ApiKey.DESCRIBE_CONFIGS: (1, 4),
        ApiKey.ALTER_CONFIGS: (0, 2),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        ApiKey.ELECT_LEADERS: (0, 2),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.ALTER_PARTITION: (2, 3),
        ApiKey.BROKER_REGISTRATION: (0, 4),
        ApiKey.BROKER_HEARTBEAT: (0, 1),
        ApiKey.UNREGISTER_BROKER: (0, 0),
        ApiKey.ALLOCATE_PRODUCER_IDS: (0, 0),
        ApiKey.DESCRIBE_CLUSTER: (0, 1),
        ApiKey.DESCRIBE_QUORUM: (0, 2),
        ApiKey.UPDATE_FEATURES: (0, 2),
        **SECURITY_METADATA_APIS,
        **CLIENT_QUOTA_APIS,
    }
)


#: What the controller accepts: what it announces plus sparklog's QuotaUsage (not announced:
#: only sparklog's brokers send it, for `quota.scope=cluster`) and Envelope (KIP-590; brokers
#: forward their clients' CreateTopics, CreatePartitions and DeleteTopics in it, so the
#: controller charges the client's mutation quota; not announced, as the listener is not
#: Kafka's controller listener).
CONTROLLER_SERVED_APIS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {**CONTROLLER_APIS, ApiKey.SPARKLOG_QUOTA_USAGE: (0, 0), ApiKey.ENVELOPE: (0, 0)}
)


#: Controller APIs the group coordinator answers by handing them to the controller in-process,
#: for a client that connects to its listener directly and sends what it sends to "any node"
#: (Metadata, DescribeConfigs, admin requests). Clients normally reach the coordinator through
#: brokers, which forward its APIs (`FORWARDED_TO_COORDINATOR_APIS`), and never see it as a node.
COORDINATOR_DELEGATED_APIS = frozenset(
    {
        ApiKey.METADATA,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.DESCRIBE_CONFIGS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
    }
)

#: What the driver's coordinator serves (its own listener): the group and transaction APIs,
#: InitProducerId, and the delegated controller APIs.
GROUP_COORDINATOR_APIS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {
        ApiKey.API_VERSIONS: (0, 4),
        ApiKey.FIND_COORDINATOR: (0, 4),
        ApiKey.INIT_PRODUCER_ID: (0, 5),
        **GROUP_APIS,
        **TRANSACTION_APIS,
        **{api: CONTROLLER_APIS[api] for api in COORDINATOR_DELEGATED_APIS},
    }
)


#: What the coordinator's listener accepts: what it announces plus sparklog's extensions, which
#: are not announced (sparklog's own clients and brokers send them at v0; other clients never
#: see them), and Envelope (KIP-590), in which brokers forward their clients' group and
#: transaction requests.
GROUP_COORDINATOR_SERVED_APIS: MappingProxyType[ApiKey, VersionRange] = MappingProxyType(
    {
        **GROUP_COORDINATOR_APIS,
        ApiKey.SPARKLOG_END_TXN_BATCH: (0, 0),
        ApiKey.SPARKLOG_AUDIT_EVENTS: (0, 0),
        ApiKey.ENVELOPE: (0, 0),
    }
)

#: The requests a broker forwards to the driver's coordinator in an Envelope: every group and
#: transaction API (InitProducerId only with a transactional id; FindCoordinator to learn whether
#: the coordinator is up) - what a Kafka broker serves from its own coordinator partitions.
FORWARDED_TO_COORDINATOR_APIS = frozenset(
    {
        *GROUP_APIS,
        *TRANSACTION_APIS,
        ApiKey.FIND_COORDINATOR,
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.SPARKLOG_END_TXN_BATCH,
    }
)


def is_supported(table: Mapping[ApiKey, VersionRange], api_key: int, version: int) -> bool:
    """Whether `table` serves `api_key` at `version`."""
    try:
        low, high = table[ApiKey(api_key)]
    except (ValueError, KeyError):
        return False
    return low <= version <= high


def pick_version(ours: VersionRange, theirs: VersionRange | None, api_key: int) -> int:
    """The highest version both sides speak (client side of negotiation)."""
    if theirs is None:
        raise UnsupportedApiError(api_key, ours, None)
    high = min(ours[1], theirs[1])
    if high < max(ours[0], theirs[0]):
        raise UnsupportedApiError(api_key, ours, theirs)
    return high


class UnsupportedApiError(Exception):
    """No common version of an API between a client and a server."""

    def __init__(self, api_key: int, ours: VersionRange, theirs: VersionRange | None) -> None:
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = str(api_key)
        super().__init__(
            f"no common version of {name}: we speak {ours[0]}..{ours[1]}, "
            f"the server {'nothing' if theirs is None else f'{theirs[0]}..{theirs[1]}'}"
        )


#: The first version of each API whose client throttles itself on `throttle_time_ms`
#: (KIP-219; Kafka's `AbstractResponse.shouldClientThrottle`): to those the broker sends
#: the response at once and then mutes the connection; to older ones it delays the
#: response instead. APIs added after KIP-219 (Kafka 2.0) throttle from their first version.
KIP_219_FIRST_VERSION: dict[int, int] = {
    ApiKey.PRODUCE: 6,
    ApiKey.FETCH: 8,
    ApiKey.LIST_OFFSETS: 3,
    ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4,
    ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3,
    ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2,
    ApiKey.SYNC_GROUP: 2,
    ApiKey.DESCRIBE_GROUPS: 2,
    ApiKey.LIST_GROUPS: 2,
    ApiKey.API_VERSIONS: 2,
    ApiKey.CREATE_TOPICS: 3,
    ApiKey.DELETE_TOPICS: 2,
    ApiKey.DELETE_RECORDS: 1,
    ApiKey.INIT_PRODUCER_ID: 1,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 2,
    ApiKey.ADD_PARTITIONS_TO_TXN: 1,
    ApiKey.ADD_OFFSETS_TO_TXN: 1,
    ApiKey.END_TXN: 1,
    ApiKey.TXN_OFFSET_COMMIT: 1,
    ApiKey.DESCRIBE_ACLS: 1,
    ApiKey.CREATE_ACLS: 1,
    ApiKey.DELETE_ACLS: 1,
    ApiKey.DESCRIBE_CONFIGS: 2,
    ApiKey.ALTER_CONFIGS: 1,
    ApiKey.DESCRIBE_LOG_DIRS: 1,
    ApiKey.CREATE_PARTITIONS: 1,
    ApiKey.DELETE_GROUPS: 1,
    ApiKey.SASL_HANDSHAKE: 1 << 15,  # no throttle time in its response at any version
}


def client_throttles(api_key: int, api_version: int) -> bool:
    """Whether the client of this request version throttles itself (KIP-219): the server
    answers at once and mutes the connection; otherwise it delays the answer."""
    return api_version >= KIP_219_FIRST_VERSION.get(api_key, 0)
