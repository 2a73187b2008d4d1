"""Kafka's error codes as exceptions.

A peer's bad input raises a `KafkaError` subclass carrying Kafka's numeric error code, so a
broker handler can turn it into a response field and keep serving (STYLE.md rule 5). The codes
and names follow Kafka's `org.apache.kafka.common.protocol.Errors`.
"""

from __future__ import annotations


class KafkaError(Exception):
    """Base class: an error a Kafka peer understands, identified by `code`."""

    code: int = -1
    retriable: bool = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__name__)


_BY_CODE: dict[int, type[KafkaError]] = {}


def _error(name: str, code: int, retriable: bool = False) -> type[KafkaError]:
    cls = type(name, (KafkaError,), {"code": code, "retriable": retriable})
    cls.__doc__ = f"Kafka error {code} ({name})."
    cls.__module__ = __name__
    _BY_CODE[code] = cls
    return cls


UnknownServerError = _error("UnknownServerError", -1)
OffsetOutOfRangeError = _error("OffsetOutOfRangeError", 1)
CorruptMessageError = _error("CorruptMessageError", 2, retriable=True)
UnknownTopicOrPartitionError = _error("UnknownTopicOrPartitionError", 3, retriable=True)
InvalidFetchSizeError = _error("InvalidFetchSizeError", 4)
LeaderNotAvailableError = _error("LeaderNotAvailableError", 5, retriable=True)
NotLeaderOrFollowerError = _error("NotLeaderOrFollowerError", 6, retriable=True)
RequestTimedOutError = _error("RequestTimedOutError", 7, retriable=True)
BrokerNotAvailableError = _error("BrokerNotAvailableError", 8)
ReplicaNotAvailableError = _error("ReplicaNotAvailableError", 9, retriable=True)
MessageTooLargeError = _error("MessageTooLargeError", 10)
StaleControllerEpochError = _error("StaleControllerEpochError", 11)
OffsetMetadataTooLargeError = _error("OffsetMetadataTooLargeError", 12)
NetworkExceptionError = _error("NetworkExceptionError", 13, retriable=True)
CoordinatorLoadInProgressError = _error("CoordinatorLoadInProgressError", 14, retriable=True)
CoordinatorNotAvailableError = _error("CoordinatorNotAvailableError", 15, retriable=True)
NotCoordinatorError = _error("NotCoordinatorError", 16, retriable=True)
InvalidTopicError = _error("InvalidTopicError", 17)
RecordListTooLargeError = _error("RecordListTooLargeError", 18)
NotEnoughReplicasError = _error("NotEnoughReplicasError", 19, retriable=True)
NotEnoughReplicasAfterAppendError = _error("NotEnoughReplicasAfterAppendError", 20, retriable=True)
InvalidRequiredAcksError = _error("InvalidRequiredAcksError", 21)
IllegalGenerationError = _error("IllegalGenerationError", 22)
InconsistentGroupProtocolError = _error("InconsistentGroupProtocolError", 23)
InvalidGroupIdError = _error("InvalidGroupIdError", 24)
UnknownMemberIdError = _error("UnknownMemberIdError", 25)
InvalidSessionTimeoutError = _error("InvalidSessionTimeoutError", 26)
RebalanceInProgressError = _error("RebalanceInProgressError", 27)
InvalidCommitOffsetSizeError = _error("InvalidCommitOffsetSizeError", 28)
TopicAuthorizationFailedError = _error("TopicAuthorizationFailedError", 29)
GroupAuthorizationFailedError = _error("GroupAuthorizationFailedError", 30)
ClusterAuthorizationFailedError = _error("ClusterAuthorizationFailedError", 31)
InvalidTimestampError = _error("InvalidTimestampError", 32)
UnsupportedSaslMechanismError = _error("UnsupportedSaslMechanismError", 33)
IllegalSaslStateError = _error("IllegalSaslStateError", 34)
UnsupportedVersionError = _error("UnsupportedVersionError", 35)
TopicAlreadyExistsError = _error("TopicAlreadyExistsError", 36)
InvalidPartitionsError = _error("InvalidPartitionsError", 37)
InvalidReplicationFactorError = _error("InvalidReplicationFactorError", 38)
InvalidReplicaAssignmentError = _error("InvalidReplicaAssignmentError", 39)
InvalidConfigError = _error("InvalidConfigError", 40)
NotControllerError = _error("NotControllerError", 41, retriable=True)
InvalidRequestError = _error("InvalidRequestError", 42)
UnsupportedForMessageFormatError = _error("UnsupportedForMessageFormatError", 43)
PolicyViolationError = _error("PolicyViolationError", 44)
OutOfOrderSequenceNumberError = _error("OutOfOrderSequenceNumberError", 45)
DuplicateSequenceNumberError = _error("DuplicateSequenceNumberError", 46)
InvalidProducerEpochError = _error("InvalidProducerEpochError", 47)
InvalidTxnStateError = _error("InvalidTxnStateError", 48)
InvalidProducerIdMappingError = _error("InvalidProducerIdMappingError", 49)
InvalidTransactionTimeoutError = _error("InvalidTransactionTimeoutError", 50)
ConcurrentTransactionsError = _error("ConcurrentTransactionsError", 51, retriable=True)
TransactionCoordinatorFencedError = _error("TransactionCoordinatorFencedError", 52)
TransactionalIdAuthorizationFailedError = _error("TransactionalIdAuthorizationFailedError", 53)
SecurityDisabledError = _error("SecurityDisabledError", 54)
OperationNotAttemptedError = _error("OperationNotAttemptedError", 55)
KafkaStorageError = _error("KafkaStorageError", 56, retriable=True)
LogDirNotFoundError = _error("LogDirNotFoundError", 57)
SaslAuthenticationFailedError = _error("SaslAuthenticationFailedError", 58)
UnknownProducerIdError = _error("UnknownProducerIdError", 59)
ReassignmentInProgressError = _error("ReassignmentInProgressError", 60)
InvalidRecordError = _error("InvalidRecordError", 87)
FencedLeaderEpochError = _error("FencedLeaderEpochError", 74, retriable=True)
UnknownLeaderEpochError = _error("UnknownLeaderEpochError", 75, retriable=True)
UnsupportedCompressionTypeError = _error("UnsupportedCompressionTypeError", 76)
StaleBrokerEpochError = _error("StaleBrokerEpochError", 77)
OffsetNotAvailableError = _error("OffsetNotAvailableError", 78, retriable=True)
MemberIdRequiredError = _error("MemberIdRequiredError", 79)
PreferredLeaderNotAvailableError = _error("PreferredLeaderNotAvailableError", 80, retriable=True)
GroupMaxSizeReachedError = _error("GroupMaxSizeReachedError", 81)
FencedInstanceIdError = _error("FencedInstanceIdError", 82)
EligibleLeadersNotAvailableError = _error("EligibleLeadersNotAvailableError", 83, retriable=True)
ElectionNotNeededError = _error("ElectionNotNeededError", 84, retriable=True)
NoReassignmentInProgressError = _error("NoReassignmentInProgressError", 85)
GroupSubscribedToTopicError = _error("GroupSubscribedToTopicError", 86)
UnstableOffsetCommitError = _error("UnstableOffsetCommitError", 88, retriable=True)
ThrottlingQuotaExceededError = _error("ThrottlingQuotaExceededError", 89, retriable=True)
ProducerFencedError = _error("ProducerFencedError", 90)
InconsistentTopicIdError = _error("InconsistentTopicIdError", 103, retriable=True)
NonEmptyGroupError = _error("NonEmptyGroupError", 68)
GroupIdNotFoundError = _error("GroupIdNotFoundError", 69)
FencedMemberEpochError = _error("FencedMemberEpochError", 110)
UnreleasedInstanceIdError = _error("UnreleasedInstanceIdError", 111)
UnsupportedAssignorError = _error("UnsupportedAssignorError", 112)
StaleMemberEpochError = _error("StaleMemberEpochError", 113)
FetchSessionIdNotFoundError = _error("FetchSessionIdNotFoundError", 70, retriable=True)
InvalidFetchSessionEpochError = _error("InvalidFetchSessionEpochError", 71, retriable=True)
UnknownTopicIdError = _error("UnknownTopicIdError", 100, retriable=True)
InvalidUpdateVersionError = _error("InvalidUpdateVersionError", 95)
DuplicateBrokerRegistrationError = _error("DuplicateBrokerRegistrationError", 101)
BrokerIdNotRegisteredError = _error("BrokerIdNotRegisteredError", 102)
InconsistentClusterIdError = _error("InconsistentClusterIdError", 104)
NewLeaderElectedError = _error("NewLeaderElectedError", 106)
IneligibleReplicaError = _error("IneligibleReplicaError", 107)
TransactionalIdNotFoundError = _error("TransactionalIdNotFoundError", 105)
TransactionAbortableError = _error("TransactionAbortableError", 120)


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


def error_for_code(code: int) -> type[KafkaError]:
    """The exception class for a Kafka error code (UnknownServerError when unknown)."""
    return _BY_CODE.get(code, UnknownServerError)
