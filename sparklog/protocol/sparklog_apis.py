"""sparklog's extensions to Kafka's protocol: EndTxnBatch, which ends many transactions in
one coordinator decision (one Delta commit), keyed so that a replay is recognised, and
AuditEvents, in which a broker hands the driver its audit events (DESIGN D16).

Spark's exactly-once sink needs it: each task of a micro-batch writes its rows as its own
transaction, and the driver's `commit(batchId)` must make all of them visible at once, or
none. Kafka's EndTxn ends one transaction per request; a crash between two of them would
leave a micro-batch half visible. The schema follows kio's generated classes so the codec
reads and writes it like any Kafka message; the key lies far above Kafka's API keys.

AuditEvents: brokers decide most authorizations and every authentication on their own
listeners, but the audit table is the driver's (one Delta writer, `coordinator.audit_log`). A
broker buffers its events (bounded, dropping and counting when full) and sends them in batches
on its channel to the coordinator; `dropped` carries how many it lost since its last batch, so
the gap is recorded in the table itself. The coordinator answers CLUSTER_AUTHORIZATION_FAILED
to a sender without CLUSTER_ACTION on the cluster, as Kafka does for its broker-only RPCs.
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import ProducerId, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import f64, i16, i32, i32Timedelta, i64

from sparklog.security.audit import AuditEvent

END_TXN_BATCH = 32_001
AUDIT_EVENTS = 32_002
QUOTA_USAGE = 32_003


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnBatchTransaction:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(END_TXN_BATCH)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnBatchRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(END_TXN_BATCH)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    batch_key: str = field(metadata={"kafka_type": "string"})
    """Identifies the decision (e.g. a streaming query's id and batch id) for replays."""
    committed: bool = field(metadata={"kafka_type": "bool"})
    transactions: tuple[EndTxnBatchTransaction, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnBatchTransactionResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(END_TXN_BATCH)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnBatchResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(END_TXN_BATCH)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"})
    outcome: str = field(metadata={"kafka_type": "string"})
    """"committed" / "aborted" (this request decided), or "already-committed" /
    "already-aborted" (an earlier request with the same key decided; these transactions
    were aborted as duplicates)."""
    results: tuple[EndTxnBatchTransactionResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEventEntry:
    """One `sparklog.security.audit.AuditEvent`, field for field."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(AUDIT_EVENTS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    time_ms: i64 = field(metadata={"kafka_type": "int64"})
    principal: str = field(metadata={"kafka_type": "string"})
    client_address: str = field(metadata={"kafka_type": "string"})
    listener: str = field(metadata={"kafka_type": "string"})
    api: str = field(metadata={"kafka_type": "string"})
    resource_type: str = field(metadata={"kafka_type": "string"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    operation: str = field(metadata={"kafka_type": "string"})
    decision: str = field(metadata={"kafka_type": "string"})
    node_id: i32 = field(metadata={"kafka_type": "int32"})
    detail: str = field(metadata={"kafka_type": "string"})


def audit_event_entry(event: AuditEvent) -> AuditEventEntry:
    """An audit event as a broker sends it to the driver."""
    return AuditEventEntry(
        time_ms=i64(event.time_ms),
        principal=event.principal,
        client_address=event.client_address,
        listener=event.listener,
        api=event.api,
        resource_type=event.resource_type,
        resource_name=event.resource_name,
        operation=event.operation,
        decision=event.decision,
        node_id=i32(event.node_id),
        detail=event.detail,
    )


def audit_event(entry: AuditEventEntry) -> AuditEvent:
    """The audit event an `AuditEventEntry` carries (the driver's side of `audit_event_entry`)."""
    return AuditEvent(
        time_ms=int(entry.time_ms),
        principal=entry.principal,
        client_address=entry.client_address,
        listener=entry.listener,
        api=entry.api,
        resource_type=entry.resource_type,
        resource_name=entry.resource_name,
        operation=entry.operation,
        decision=entry.decision,
        node_id=int(entry.node_id),
        detail=entry.detail,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEventsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(AUDIT_EVENTS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    node_id: i32 = field(metadata={"kafka_type": "int32"})
    """The sending broker."""
    dropped: i64 = field(metadata={"kafka_type": "int64"})
    """Events the sender dropped (its buffer full) since its last accepted batch."""
    events: tuple[AuditEventEntry, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEventsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(AUDIT_EVENTS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


# -- QuotaUsage: cluster-wide quotas (`metrics/cluster_quota.py`). Once per quota window a broker
# with `quota.scope=cluster` sends the controller the rate each quota entity measured there; the
# answer is this broker's share of each entity's quota (and of entities it did not name).


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaTag:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUOTA_USAGE)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata={"kafka_type": "string"})
    value: str = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaUsageEntry:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUOTA_USAGE)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    quota_type: str = field(metadata={"kafka_type": "string"})
    """Produce, Fetch, Request (the quota manager's metric group)."""
    tags: tuple[QuotaTag, ...]
    """The quota entity's metric tags, in Kafka's order."""
    value: f64 = field(metadata={"kafka_type": "float64"})
    """Its rate on the sender (the request: measured; the response: the sender's share)."""
    limit: f64 = field(metadata={"kafka_type": "float64"})
    """The limit the sender enforces now (the request; 0 when unknown; 0 in the response)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaUsageRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUOTA_USAGE)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    node_id: i32 = field(metadata={"kafka_type": "int32"})
    entries: tuple[QuotaUsageEntry, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaUsageResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUOTA_USAGE)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    default_share: f64 = field(metadata={"kafka_type": "float64"})
    """The share of every entity not in `shares`."""
    shares: tuple[QuotaUsageEntry, ...]


REQUESTS = {
    (END_TXN_BATCH, 0): EndTxnBatchRequest,
    (AUDIT_EVENTS, 0): AuditEventsRequest,
    (QUOTA_USAGE, 0): QuotaUsageRequest,
}
RESPONSES = {
    (END_TXN_BATCH, 0): EndTxnBatchResponse,
    (AUDIT_EVENTS, 0): AuditEventsResponse,
    (QUOTA_USAGE, 0): QuotaUsageResponse,
}
