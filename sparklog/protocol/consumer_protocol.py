"""The consumer's embedded protocol: ConsumerProtocolSubscription / ConsumerProtocolAssignment
bytes that classic groups carry opaquely (Kafka's `ConsumerProtocol`). The coordinator reads them
only to describe groups and to refuse OffsetDelete on subscribed topics."""

from __future__ import annotations

import struct
from collections.abc import Sequence

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return v

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return v

    def string(self) -> str:
        n = self.i16()
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("bad string length in consumer protocol bytes")
        s = bytes(self.data[self.pos : self.pos + n]).decode()
        self.pos += n
        return s

    def count(self) -> int:
        n = self.i32()
        if n < 0 or n > len(self.data):
            raise ValueError("bad array length in consumer protocol bytes")
        return n


def subscription_topics(metadata: bytes) -> set[str]:
    """The topics of a ConsumerProtocolSubscription (any version); ValueError if malformed."""
    try:
        r = _Reader(metadata)
        r.i16()  # version
        return {r.string() for _ in range(r.count())}
    except struct.error as e:
        raise ValueError(f"truncated consumer protocol subscription: {e}") from None


def subscription_owned(metadata: bytes) -> list[tuple[str, int]]:
    """The owned partitions of a ConsumerProtocolSubscription v1+ (KIP-429; [] for v0)."""
    try:
        r = _Reader(metadata)
        version = r.i16()
        for _ in range(r.count()):
            r.string()
        n = r.i32()  # user data
        if n > 0:
            r.pos += n
        if version < 1 or r.pos >= len(r.data):
            return []
        owned: list[tuple[str, int]] = []
        for _ in range(r.count()):
            topic = r.string()
            owned.extend((topic, r.i32()) for _ in range(r.count()))
        return owned
    except struct.error as e:
        raise ValueError(f"truncated consumer protocol subscription: {e}") from None


def assignment_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a ConsumerProtocolAssignment; ValueError if malformed."""
    if not assignment:
        return []
    try:
        r = _Reader(assignment)
        r.i16()  # version
        pairs: list[tuple[str, int]] = []
        for _ in range(r.count()):
            topic = r.string()
            pairs.extend((topic, r.i32()) for _ in range(r.count()))
        return pairs
    except struct.error as e:
        raise ValueError(f"truncated consumer protocol assignment: {e}") from None


def encode_subscription(
    topics: list[str],
    user_data: bytes | None = None,
    owned: list[tuple[str, int]] | None = None,
) -> bytes:
    """A ConsumerProtocolSubscription: version 0, or version 1 with `owned` partitions (the
    cooperative protocol, KIP-429)."""
    out = bytearray(_I16.pack(0 if owned is None else 1) + _I32.pack(len(topics)))
    for t in topics:
        raw = t.encode()
        out += _I16.pack(len(raw)) + raw
    out += _I32.pack(-1) if user_data is None else _I32.pack(len(user_data)) + user_data
    if owned is not None:
        out += _topic_partitions(owned)
    return bytes(out)


def _topic_partitions(partitions: Sequence[tuple[str, int]]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    out = bytearray(_I32.pack(len(by_topic)))
    for topic, ps in sorted(by_topic.items()):
        raw = topic.encode()
        out += _I16.pack(len(raw)) + raw + _I32.pack(len(ps))
        for p in sorted(ps):
            out += _I32.pack(p)
    return bytes(out)


def encode_assignment(
    partitions: Sequence[tuple[str, int]], user_data: bytes | None = None
) -> bytes:
    """A version-0 ConsumerProtocolAssignment."""
    out = _I16.pack(0) + _topic_partitions(partitions)
    return out + (_I32.pack(-1) if user_data is None else _I32.pack(len(user_data)) + user_data)
