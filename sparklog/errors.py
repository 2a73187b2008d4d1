"""Kafka's error codes as exceptions, one class per code, in code order.

A peer's bad input raises a `KafkaError` subclass carrying Kafka's numeric error code, so a
broker handler can turn it into a response field and keep serving (STYLE.md rule 5). The codes,
the names (`name`, Kafka's enum constant) and the retriable flags follow Kafka 4.x's
`org.apache.kafka.common.protocol.Errors` (retriable: its exception is a `RetriableException`);
`tests/oracle/test_errors_table.py` checks every class against the pinned Kafka JARs.

This is the only place a numeric error code is written: everywhere else says
`UnknownTopicOrPartitionError.code` (a raw 119 once answered where Kafka sends 114;
`tests/unit/test_no_raw_error_codes.py` keeps them out). Class names are Kafka's exception names
with `Error` (`NetworkExceptionError` and `InvalidTopicError` keep the names callers know).

`IllegalStateTransition` is not a wire error: it is our bug (a state machine asked to move
along an edge its transition table lacks) and carries no code.
"""

from __future__ import annotations

from sparklog.error_table import ErrorTable


class KafkaError(Exception):
    """Base class: an error a Kafka peer understands, identified by `code`.

    Subclasses state their code, Kafka's name and whether a client may retry as class
    keywords: `class NotCoordinatorError(KafkaError, code=16, name="NOT_COORDINATOR",
    retriable=True)`; a subclass of a code class (e.g. `CorruptBatchError`) inherits them.
    """

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False

    def __init_subclass__(
        cls, *, code: int | None = None, name: str | None = None, retriable: bool | None = None
    ) -> None:
        super().__init_subclass__()
        if code is not None:
            cls.code = code
        if name is not None:
            cls.name = name
        if retriable is not None:
            cls.retriable = retriable

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__name__)


class UnknownServerError(KafkaError, code=-1, name="UNKNOWN_SERVER_ERROR"): ...


class OffsetOutOfRangeError(KafkaError, code=1, name="OFFSET_OUT_OF_RANGE"): ...


class CorruptMessageError(KafkaError, code=2, name="CORRUPT_MESSAGE", retriable=True): ...


class UnknownTopicOrPartitionError(
    KafkaError, code=3, name="UNKNOWN_TOPIC_OR_PARTITION", retriable=True
): ...


class InvalidFetchSizeError(KafkaError, code=4, name="INVALID_FETCH_SIZE"): ...


class LeaderNotAvailableError(KafkaError, code=5, name="LEADER_NOT_AVAILABLE", retriable=True): ...


class NotLeaderOrFollowerError(
    KafkaError, code=6, name="NOT_LEADER_OR_FOLLOWER", retriable=True
): ...


class RequestTimedOutError(KafkaError, code=7, name="REQUEST_TIMED_OUT", retriable=True): ...


class BrokerNotAvailableError(KafkaError, code=8, name="BROKER_NOT_AVAILABLE"): ...


class ReplicaNotAvailableError(
    KafkaError, code=9, name="REPLICA_NOT_AVAILABLE", retriable=True
): ...


class MessageTooLargeError(KafkaError, code=10, name="MESSAGE_TOO_LARGE"): ...


class StaleControllerEpochError(KafkaError, code=11, name="STALE_CONTROLLER_EPOCH"): ...


class OffsetMetadataTooLargeError(KafkaError, code=12, name="OFFSET_METADATA_TOO_LARGE"): ...


class NetworkExceptionError(KafkaError, code=13, name="NETWORK_EXCEPTION", retriable=True): ...


class CoordinatorLoadInProgressError(
    KafkaError, code=14, name="COORDINATOR_LOAD_IN_PROGRESS", retriable=True
): ...


class CoordinatorNotAvailableError(
    KafkaError, code=15, name="COORDINATOR_NOT_AVAILABLE", retriable=True
): ...


class NotCoordinatorError(KafkaError, code=16, name="NOT_COORDINATOR", retriable=True): ...


class InvalidTopicError(KafkaError, code=17, name="INVALID_TOPIC_EXCEPTION"): ...


class RecordListTooLargeError(KafkaError, code=18, name="RECORD_LIST_TOO_LARGE"): ...


class NotEnoughReplicasError(KafkaError, code=19, name="NOT_ENOUGH_REPLICAS", retriable=True): ...


class NotEnoughReplicasAfterAppendError(
    KafkaError, code=20, name="NOT_ENOUGH_REPLICAS_AFTER_APPEND", retriable=True
): ...


class InvalidRequiredAcksError(KafkaError, code=21, name="INVALID_REQUIRED_ACKS"): ...


class IllegalGenerationError(KafkaError, code=22, name="ILLEGAL_GENERATION"): ...


class InconsistentGroupProtocolError(KafkaError, code=23, name="INCONSISTENT_GROUP_PROTOCOL"): ...


class InvalidGroupIdError(KafkaError, code=24, name="INVALID_GROUP_ID"): ...


class UnknownMemberIdError(KafkaError, code=25, name="UNKNOWN_MEMBER_ID"): ...


class InvalidSessionTimeoutError(KafkaError, code=26, name="INVALID_SESSION_TIMEOUT"): ...


class RebalanceInProgressError(KafkaError, code=27, name="REBALANCE_IN_PROGRESS"): ...


class InvalidCommitOffsetSizeError(KafkaError, code=28, name="INVALID_COMMIT_OFFSET_SIZE"): ...


class TopicAuthorizationFailedError(KafkaError, code=29, name="TOPIC_AUTHORIZATION_FAILED"): ...


class GroupAuthorizationFailedError(KafkaError, code=30, name="GROUP_AUTHORIZATION_FAILED"): ...


class ClusterAuthorizationFailedError(KafkaError, code=31, name="CLUSTER_AUTHORIZATION_FAILED"): ...


class InvalidTimestampError(KafkaError, code=32, name="INVALID_TIMESTAMP"): ...


class UnsupportedSaslMechanismError(KafkaError, code=33, name="UNSUPPORTED_SASL_MECHANISM"): ...


class IllegalSaslStateError(KafkaError, code=34, name="ILLEGAL_SASL_STATE"): ...


class UnsupportedVersionError(KafkaError, code=35, name="UNSUPPORTED_VERSION"): ...


class TopicAlreadyExistsError(KafkaError, code=36, name="TOPIC_ALREADY_EXISTS"): ...


class InvalidPartitionsError(KafkaError, code=37, name="INVALID_PARTITIONS"): ...


class InvalidReplicationFactorError(KafkaError, code=38, name="INVALID_REPLICATION_FACTOR"): ...


class InvalidReplicaAssignmentError(KafkaError, code=39, name="INVALID_REPLICA_ASSIGNMENT"): ...


class InvalidConfigError(KafkaError, code=40, name="INVALID_CONFIG"): ...


class NotControllerError(KafkaError, code=41, name="NOT_CONTROLLER", retriable=True): ...


class InvalidRequestError(KafkaError, code=42, name="INVALID_REQUEST"): ...


class UnsupportedForMessageFormatError(
    KafkaError, code=43, name="UNSUPPORTED_FOR_MESSAGE_FORMAT"
): ...


class PolicyViolationError(KafkaError, code=44, name="POLICY_VIOLATION"): ...


class OutOfOrderSequenceNumberError(KafkaError, code=45, name="OUT_OF_ORDER_SEQUENCE_NUMBER"): ...


class DuplicateSequenceNumberError(KafkaError, code=46, name="DUPLICATE_SEQUENCE_NUMBER"): ...


class InvalidProducerEpochError(KafkaError, code=47, name="INVALID_PRODUCER_EPOCH"): ...


class InvalidTxnStateError(KafkaError, code=48, name="INVALID_TXN_STATE"): ...


class InvalidProducerIdMappingError(KafkaError, code=49, name="INVALID_PRODUCER_ID_MAPPING"): ...


class InvalidTransactionTimeoutError(KafkaError, code=50, name="INVALID_TRANSACTION_TIMEOUT"): ...


class ConcurrentTransactionsError(
    KafkaError, code=51, name="CONCURRENT_TRANSACTIONS", retriable=True
): ...


class TransactionCoordinatorFencedError(
    KafkaError, code=52, name="TRANSACTION_COORDINATOR_FENCED"
): ...


class TransactionalIdAuthorizationFailedError(
    KafkaError, code=53, name="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
): ...


class SecurityDisabledError(KafkaError, code=54, name="SECURITY_DISABLED"): ...


class OperationNotAttemptedError(KafkaError, code=55, name="OPERATION_NOT_ATTEMPTED"): ...


class KafkaStorageError(KafkaError, code=56, name="KAFKA_STORAGE_ERROR", retriable=True): ...


class LogDirNotFoundError(KafkaError, code=57, name="LOG_DIR_NOT_FOUND"): ...


class SaslAuthenticationFailedError(KafkaError, code=58, name="SASL_AUTHENTICATION_FAILED"): ...


class UnknownProducerIdError(KafkaError, code=59, name="UNKNOWN_PRODUCER_ID"): ...


class ReassignmentInProgressError(KafkaError, code=60, name="REASSIGNMENT_IN_PROGRESS"): ...


class DelegationTokenAuthDisabledError(
    KafkaError, code=61, name="DELEGATION_TOKEN_AUTH_DISABLED"
): ...


class DelegationTokenNotFoundError(KafkaError, code=62, name="DELEGATION_TOKEN_NOT_FOUND"): ...


class DelegationTokenOwnerMismatchError(
    KafkaError, code=63, name="DELEGATION_TOKEN_OWNER_MISMATCH"
): ...


class DelegationTokenRequestNotAllowedError(
    KafkaError, code=64, name="DELEGATION_TOKEN_REQUEST_NOT_ALLOWED"
): ...


class DelegationTokenAuthorizationFailedError(
    KafkaError, code=65, name="DELEGATION_TOKEN_AUTHORIZATION_FAILED"
): ...


class DelegationTokenExpiredError(KafkaError, code=66, name="DELEGATION_TOKEN_EXPIRED"): ...


class InvalidPrincipalTypeError(KafkaError, code=67, name="INVALID_PRINCIPAL_TYPE"): ...


class NonEmptyGroupError(KafkaError, code=68, name="NON_EMPTY_GROUP"): ...


class GroupIdNotFoundError(KafkaError, code=69, name="GROUP_ID_NOT_FOUND"): ...


class FetchSessionIdNotFoundError(
    KafkaError, code=70, name="FETCH_SESSION_ID_NOT_FOUND", retriable=True
): ...


class InvalidFetchSessionEpochError(
    KafkaError, code=71, name="INVALID_FETCH_SESSION_EPOCH", retriable=True
): ...


class ListenerNotFoundError(KafkaError, code=72, name="LISTENER_NOT_FOUND", retriable=True): ...


class TopicDeletionDisabledError(KafkaError, code=73, name="TOPIC_DELETION_DISABLED"): ...


class FencedLeaderEpochError(KafkaError, code=74, name="FENCED_LEADER_EPOCH", retriable=True): ...


class UnknownLeaderEpochError(KafkaError, code=75, name="UNKNOWN_LEADER_EPOCH", retriable=True): ...


class UnsupportedCompressionTypeError(KafkaError, code=76, name="UNSUPPORTED_COMPRESSION_TYPE"): ...


class StaleBrokerEpochError(KafkaError, code=77, name="STALE_BROKER_EPOCH"): ...


class OffsetNotAvailableError(KafkaError, code=78, name="OFFSET_NOT_AVAILABLE", retriable=True): ...


class MemberIdRequiredError(KafkaError, code=79, name="MEMBER_ID_REQUIRED"): ...


class PreferredLeaderNotAvailableError(
    KafkaError, code=80, name="PREFERRED_LEADER_NOT_AVAILABLE", retriable=True
): ...


class GroupMaxSizeReachedError(KafkaError, code=81, name="GROUP_MAX_SIZE_REACHED"): ...


class FencedInstanceIdError(KafkaError, code=82, name="FENCED_INSTANCE_ID"): ...


class EligibleLeadersNotAvailableError(
    KafkaError, code=83, name="ELIGIBLE_LEADERS_NOT_AVAILABLE", retriable=True
): ...


class ElectionNotNeededError(KafkaError, code=84, name="ELECTION_NOT_NEEDED", retriable=True): ...


class NoReassignmentInProgressError(KafkaError, code=85, name="NO_REASSIGNMENT_IN_PROGRESS"): ...


class GroupSubscribedToTopicError(KafkaError, code=86, name="GROUP_SUBSCRIBED_TO_TOPIC"): ...


class InvalidRecordError(KafkaError, code=87, name="INVALID_RECORD"): ...


class UnstableOffsetCommitError(
    KafkaError, code=88, name="UNSTABLE_OFFSET_COMMIT", retriable=True
): ...


class ThrottlingQuotaExceededError(
    KafkaError, code=89, name="THROTTLING_QUOTA_EXCEEDED", retriable=True
): ...


class ProducerFencedError(KafkaError, code=90, name="PRODUCER_FENCED"): ...


class ResourceNotFoundError(KafkaError, code=91, name="RESOURCE_NOT_FOUND"): ...


class DuplicateResourceError(KafkaError, code=92, name="DUPLICATE_RESOURCE"): ...


class UnacceptableCredentialError(KafkaError, code=93, name="UNACCEPTABLE_CREDENTIAL"): ...


class InconsistentVoterSetError(KafkaError, code=94, name="INCONSISTENT_VOTER_SET"): ...


class InvalidUpdateVersionError(KafkaError, code=95, name="INVALID_UPDATE_VERSION"): ...


class FeatureUpdateFailedError(KafkaError, code=96, name="FEATURE_UPDATE_FAILED"): ...


class PrincipalDeserializationFailureError(
    KafkaError, code=97, name="PRINCIPAL_DESERIALIZATION_FAILURE"
): ...


class SnapshotNotFoundError(KafkaError, code=98, name="SNAPSHOT_NOT_FOUND"): ...


class PositionOutOfRangeError(KafkaError, code=99, name="POSITION_OUT_OF_RANGE"): ...


class UnknownTopicIdError(KafkaError, code=100, name="UNKNOWN_TOPIC_ID", retriable=True): ...


class DuplicateBrokerRegistrationError(
    KafkaError, code=101, name="DUPLICATE_BROKER_REGISTRATION"
): ...


class BrokerIdNotRegisteredError(KafkaError, code=102, name="BROKER_ID_NOT_REGISTERED"): ...


class InconsistentTopicIdError(
    KafkaError, code=103, name="INCONSISTENT_TOPIC_ID", retriable=True
): ...


class InconsistentClusterIdError(KafkaError, code=104, name="INCONSISTENT_CLUSTER_ID"): ...


class TransactionalIdNotFoundError(KafkaError, code=105, name="TRANSACTIONAL_ID_NOT_FOUND"): ...


class FetchSessionTopicIdError(
    KafkaError, code=106, name="FETCH_SESSION_TOPIC_ID_ERROR", retriable=True
): ...


class IneligibleReplicaError(KafkaError, code=107, name="INELIGIBLE_REPLICA"): ...


class NewLeaderElectedError(KafkaError, code=108, name="NEW_LEADER_ELECTED"): ...


class OffsetMovedToTieredStorageError(
    KafkaError, code=109, name="OFFSET_MOVED_TO_TIERED_STORAGE"
): ...


class FencedMemberEpochError(KafkaError, code=110, name="FENCED_MEMBER_EPOCH"): ...


class UnreleasedInstanceIdError(KafkaError, code=111, name="UNRELEASED_INSTANCE_ID"): ...


class UnsupportedAssignorError(KafkaError, code=112, name="UNSUPPORTED_ASSIGNOR"): ...


class StaleMemberEpochError(KafkaError, code=113, name="STALE_MEMBER_EPOCH"): ...


class MismatchedEndpointTypeError(KafkaError, code=114, name="MISMATCHED_ENDPOINT_TYPE"): ...


class UnsupportedEndpointTypeError(KafkaError, code=115, name="UNSUPPORTED_ENDPOINT_TYPE"): ...


class UnknownControllerIdError(KafkaError, code=116, name="UNKNOWN_CONTROLLER_ID"): ...


class UnknownSubscriptionIdError(KafkaError, code=117, name="UNKNOWN_SUBSCRIPTION_ID"): ...


class TelemetryTooLargeError(KafkaError, code=118, name="TELEMETRY_TOO_LARGE"): ...


class InvalidRegistrationError(KafkaError, code=119, name="INVALID_REGISTRATION"): ...


class TransactionAbortableError(KafkaError, code=120, name="TRANSACTION_ABORTABLE"): ...


class InvalidRecordStateError(KafkaError, code=121, name="INVALID_RECORD_STATE"): ...


class ShareSessionNotFoundError(
    KafkaError, code=122, name="SHARE_SESSION_NOT_FOUND", retriable=True
): ...


class InvalidShareSessionEpochError(
    KafkaError, code=123, name="INVALID_SHARE_SESSION_EPOCH", retriable=True
): ...


class FencedStateEpochError(KafkaError, code=124, name="FENCED_STATE_EPOCH"): ...


class InvalidVoterKeyError(KafkaError, code=125, name="INVALID_VOTER_KEY"): ...


class DuplicateVoterError(KafkaError, code=126, name="DUPLICATE_VOTER"): ...


class VoterNotFoundError(KafkaError, code=127, name="VOTER_NOT_FOUND"): ...


class InvalidRegularExpressionError(KafkaError, code=128, name="INVALID_REGULAR_EXPRESSION"): ...


class RebootstrapRequiredError(KafkaError, code=129, name="REBOOTSTRAP_REQUIRED"): ...


class StreamsInvalidTopologyError(KafkaError, code=130, name="STREAMS_INVALID_TOPOLOGY"): ...


class StreamsInvalidTopologyEpochError(
    KafkaError, code=131, name="STREAMS_INVALID_TOPOLOGY_EPOCH"
): ...


class StreamsTopologyFencedError(KafkaError, code=132, name="STREAMS_TOPOLOGY_FENCED"): ...


class ShareSessionLimitReachedError(
    KafkaError, code=133, name="SHARE_SESSION_LIMIT_REACHED", retriable=True
): ...


class GroupDeletionFailedError(KafkaError, code=134, name="GROUP_DELETION_FAILED"): ...


class StreamsTopologyDescriptionUpdateFailedError(
    KafkaError, code=135, name="STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED"
): ...


class ControllerIdNotRegisteredError(KafkaError, code=136, name="CONTROLLER_ID_NOT_REGISTERED"): ...


class CorruptBatchError(CorruptMessageError):
    """A consumer reached a corrupt record batch of `topic`-`partition` at `offset` (Kafka's
    consumer: `CompletedFetch.maybeEnsureValid` and `FetchCollector.handleInitializeErrors`).

    Every record before the batch has been delivered and the partition's position stays at
    `offset`; every poll raises this again until one of these happens:

    - the consumer's own CRC check (`check.crcs`) or the decoder failed on the batch in a Fetch
      response: fetching the same bytes again cannot help (Kafka's consumer keeps them and
      raises), so the application must seek: past the batch to skip it (its records are lost),
      or to `offset` to fetch it again after a repair;
    - the broker answered CORRUPT_MESSAGE (its copy of the log is damaged there; `refetching`
      is true): the consumer keeps fetching the partition, as Kafka's does, after
      `retry.backoff.ms` doubling up to `retry.backoff.max.ms`, and goes on by itself once it is
      served (leadership moved to a good copy, or the segment was repaired), or the application
      seeks past it.

    Not retriable in Kafka's sense (an application must see it; a producer's CORRUPT_MESSAGE is,
    its next attempt resends good bytes); it keeps Kafka's code 2.
    """

    retriable = False

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        reason: str,
        advice: str | None = None,
        *,
        refetching: bool = False,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason
        self.refetching = refetching
        if advice is None and refetching:
            advice = (
                f"Every record before it was delivered and the position stays at {offset}; the "
                "consumer keeps fetching it (every retry.backoff.ms, doubling up to "
                "retry.backoff.max.ms) and goes on by itself once a replica serves it "
                "(leadership moved to a good copy, or the segment repaired): seek() past the "
                "batch to skip it instead (its records are lost)"
            )
        elif advice is None:
            advice = (
                f"Every record before it was delivered and the position stays at {offset}: "
                "seek() past the batch to skip it (its records are lost), or repair the replica "
                f"(or move leadership to a good copy) and seek() to {offset} to read it again"
            )
        super().__init__(
            f"the record batch of {topic}-{partition} at offset {offset} is corrupt ({reason}). "
            + advice
        )


class IllegalStateTransition(AssertionError):
    """A state machine was asked to move along an edge its transition table lacks: a bug in
    sparklog, never a peer's fault, so it is an `AssertionError` (STYLE.md rule 5) and has no
    Kafka code. Group, partition, cleaner and transaction state machines all raise it."""


_TABLE = ErrorTable(KafkaError, __name__, UnknownServerError)

#: Kafka error code -> class, every code Kafka 4.x defines except 0 (NONE).
BY_CODE: dict[int, type[KafkaError]] = _TABLE.by_code
#: Kafka's enum name ("UNKNOWN_TOPIC_OR_PARTITION") -> class.
BY_NAME: dict[str, type[KafkaError]] = _TABLE.by_name


def error_for_code(code: int) -> type[KafkaError]:
    """The exception class for a Kafka error code (UnknownServerError when unknown)."""
    return _TABLE.for_code(code)


def error_for_name(name: str) -> type[KafkaError]:
    """The exception class for Kafka's error name, e.g. "NOT_COORDINATOR" (KeyError if none)."""
    return _TABLE.for_name(name)
