"""The errors the record codec raises for bad bytes."""

from __future__ import annotations

from sparklog.errors import CorruptMessageError, MessageTooLargeError


class CorruptRecordError(CorruptMessageError):
    """Bytes that are not a valid Kafka v2 record batch; names where and why.

    It is a `CorruptMessageError` (Kafka error 2, CORRUPT_MESSAGE) so a broker answers a bad
    Produce with the right code without translating.
    """

    def __init__(self, position: int, reason: str) -> None:
        self.position = position
        self.reason = reason
        super().__init__(f"corrupt record batch at byte {position}: {reason}")


class InvalidCrcError(CorruptRecordError):
    """A batch whose stored CRC-32C does not match its bytes (Kafka counts these apart, as
    `InvalidMessageCrcRecordsPerSec`)."""


class DecompressedTooLargeError(MessageTooLargeError):
    """A compressed records section that unpacks to more than `max_bytes` (a compression bomb,
    or a batch far larger than any producer builds); decompression stopped at the bound.

    It is a `MessageTooLargeError` (Kafka error 10, RECORD_TOO_LARGE), not a corruption: the
    bytes may be valid, there are just too many of them. Kafka's Java producer answers this
    code by splitting a batch of several records and sending the halves again
    (`Sender.completeBatch`), so a legitimate large batch still gets through.
    """

    def __init__(self, position: int, codec: str, max_bytes: int) -> None:
        self.position = position
        self.codec = codec
        self.max_bytes = max_bytes
        self.reason = f"the {codec} records section decompresses to more than {max_bytes} bytes"
        super().__init__(
            f"the {codec} records section at byte {position} decompresses to more than "
            f"{max_bytes} bytes"
        )
