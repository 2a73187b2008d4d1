"""The one error the record codec raises for bad bytes."""

from __future__ import annotations

from sparklog.errors import CorruptMessageError


class CorruptRecordError(CorruptMessageError):
    """Bytes that are not a valid Kafka v2 record batch; names where and why.

    It is a `CorruptMessageError` (Kafka error 2, CORRUPT_MESSAGE) so a broker answers a bad
    Produce with the right code without translating.
    """

    def __init__(self, position: int, reason: str) -> None:
        self.position = position
        self.reason = reason
        super().__init__(f"corrupt record batch at byte {position}: {reason}")
