"""Offset bookkeeping of the source, pure: JSON offsets, offset ranges, splitting, rate limits.

Follows Spark's Kafka connector: `KafkaSourceOffset` / `JsonUtils` (offsets as
`{"topic":{"partition":offset}}` with topics and partitions in a stable order),
`KafkaOffsetRangeCalculator` (`minPartitions`, `maxRecordsPerPartition`) and
`KafkaMicroBatchStream.rateLimit` (`maxOffsetsPerTrigger` spread over partitions in proportion
to their backlog). Unlike Spark's rate limit, the total never exceeds the limit: Spark rounds
small shares up to 1 and can overshoot; here every backlogged partition still gets at least
one record while the limit allows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sparklog.structs import TopicPartition

PartitionOffsets = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records `from_offset <= offset < until_offset` of one partition (one Spark task)."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)


def to_json_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """`{"topic": {"0": n, ...}}` with topics sorted by name and partitions by number, so the
    same offsets always serialize to the same JSON (Spark compares offsets as strings)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json_dict(data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    """The inverse of `to_json_dict` (what Spark hands back from its offset log)."""
    return {
        TopicPartition(topic, int(partition)): int(offset)
        for topic, parts in data.items()
        for partition, offset in parts.items()
    }


def ranges_between(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> list[OffsetRange]:
    """One range per partition of `end` (a partition missing from `start` reads from 0, the
    caller resolves new partitions first), sorted by topic and partition."""
    return [
        OffsetRange(topic, partition, start.get(TopicPartition(topic, partition), 0), until)
        for (topic, partition), until in sorted(end.items())
    ]


def split_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Spark's `KafkaOffsetRangeCalculator.getRanges`: drop empty ranges; cut every range into
    pieces of at most `max_records_per_partition`; then, when there are fewer pieces than
    `min_partitions`, cut the ranges in proportion to their share of all records into
    `min_partitions` pieces (Spark rounds each share and may end up with fewer; here the
    count is exact whenever there are enough records)."""
    pieces = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        pieces = [
            part
            for r in pieces
            for part in _divide(r, -(-r.size // max_records_per_partition))
            if part.size > 0
        ]
    if min_partitions is None or len(pieces) >= min_partitions:
        return pieces
    counts = _shares([r.size for r in pieces], min_partitions)
    return [p for r, n in zip(pieces, counts, strict=True) for p in _divide(r, n)]


def _shares(sizes: list[int], parts: int) -> list[int]:
    """Split `parts` over ranges in proportion to `sizes` (largest remainders first), each
    at least 1 and at most its size, so the total is `parts` whenever the records allow."""
    total = sum(sizes)
    exact = [size * parts / total for size in sizes]
    counts = [min(size, max(1, int(x))) for size, x in zip(sizes, exact, strict=True)]
    order = sorted(range(len(sizes)), key=lambda i: (-(exact[i] - int(exact[i])), i))
    left = parts - sum(counts)
    while left > 0:
        grown = False
        for i in order:
            if left > 0 and counts[i] < sizes[i]:
                counts[i] += 1
                left -= 1
                grown = True
        if not grown:
            break
    return counts


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """`parts` consecutive ranges covering `r`, sizes differing by at most one."""
    parts = max(1, min(parts, r.size))
    out = []
    start = r.from_offset
    remaining = r.size
    for i in range(parts):
        size = remaining // (parts - i)
        out.append(OffsetRange(r.topic, r.partition, start, start + size))
        start += size
        remaining -= size
    assert start == r.until_offset
    return out


def backlog(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> int:
    """Records between `start` and `latest` over all partitions of `latest`."""
    return sum(max(0, end - start.get(tp, end)) for tp, end in latest.items())


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_records: int
) -> PartitionOffsets:
    """End offsets advancing at most `max_records` in total past `start`, shared in proportion
    to each partition's backlog (largest remainders first); every backlogged partition gets at
    least one record when `max_records` allows, so small partitions are not starved."""
    assert max_records > 0
    sizes = {tp: end - start[tp] for tp, end in latest.items() if tp in start and end > start[tp]}
    total = sum(sizes.values())
    if total <= max_records:
        return dict(latest)
    order = sorted(sizes, key=lambda tp: (-sizes[tp], tp))
    take = dict.fromkeys(sizes, 0)
    budget = max_records
    if budget >= len(sizes):
        for tp in sizes:
            take[tp] = 1
        budget -= len(sizes)
        rest = {tp: size - 1 for tp, size in sizes.items()}
        rest_total = total - len(sizes)
        shares = {tp: budget * rest[tp] / rest_total for tp in sizes}
    else:  # fewer records than backlogged partitions: one each, biggest backlog first
        shares = {tp: 1.0 if i < budget else 0.0 for i, tp in enumerate(order)}
    whole = {tp: int(shares[tp]) for tp in sizes}
    left = budget - sum(whole.values()) if budget >= len(sizes) else 0
    by_fraction = sorted(sizes, key=lambda tp: (-(shares[tp] - whole[tp]), tp))
    for tp in by_fraction[:left]:
        whole[tp] += 1
    out = dict(latest)
    for tp in sizes:
        out[tp] = start[tp] + min(sizes[tp], take[tp] + whole[tp])
    assert backlog(start, out) <= max_records
    return out
