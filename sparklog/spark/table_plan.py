"""Planning a read across the two tiers of a topic, pure (no Spark, no Delta, no I/O).

A partition's records live in two places once its topic has a remote tier (DESIGN D17): the
topic's Delta table holds the contiguous range [`start_offset`, `end_offset`) that its leaders
copied, the brokers hold the rest (and, until local retention deletes them, a copy of the
table's recent rows too). A read of [from, until) is cut, per partition, into

- offsets below the table's start: brokers (which report data loss exactly as before the
  tier existed: the table never hides a loss),
- offsets the table holds: Spark tasks that read the table's Parquet files directly
  (`table_reader.read_table_range`), each with the files whose offset statistics overlap its
  range, so no broker is on the path,
- offsets at or past the table's end: brokers, as today.

The pieces are consecutive and disjoint, so the read stays one gap-free, duplicate-free range.
The table's snapshot is taken once on the driver (its file list, `TableFile`s); a task reads
exactly those files, so a commit that lands while the query runs changes nothing it reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sparklog.spark.offsets import OffsetRange

#: Bytes of Parquet one table task reads at most (Spark's `spark.sql.files.maxPartitionBytes`
#: default); a file larger than this is one task by itself.
DEFAULT_TABLE_TASK_BYTES = 128 << 20


@dataclass(frozen=True, slots=True)
class TableFile:
    """One Parquet file of the table: its partition and the offsets its statistics cover."""

    uri: str
    partition: int
    min_offset: int
    max_offset: int  # inclusive, as Delta's statistics
    size_bytes: int
    num_records: int


@dataclass(frozen=True, slots=True)
class PartitionTier:
    """What the table holds for one partition at the snapshot: [start_offset, end_offset)."""

    start_offset: int
    end_offset: int  # the copied end (exclusive)
    files: tuple[TableFile, ...]

    def __post_init__(self) -> None:
        assert self.start_offset <= self.end_offset, (self.start_offset, self.end_offset)


@dataclass(frozen=True)
class TierSnapshot:
    """One topic's table at one Delta version, as the driver listed it."""

    topic: str
    location: str
    version: int
    partitions: Mapping[int, PartitionTier]
    #: delta-rs / object_store options to reach the files (credentials: out of repr)
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True)
class TableRange:
    """One Spark task reading [from_offset, until_offset) of a partition from table files."""

    range: OffsetRange
    location: str
    version: int
    files: tuple[TableFile, ...]
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)


def split_at_tier(r: OffsetRange, tier: PartitionTier | None) -> tuple[list[OffsetRange], ...]:
    """(table ranges, broker ranges) covering `r` exactly: the table serves what it holds,
    the brokers everything below and above it."""
    if tier is None or r.size == 0:
        return [], [r] if r.size else []
    low = max(r.from_offset, tier.start_offset)
    high = min(r.until_offset, tier.end_offset)
    if low >= high:  # no overlap: wholly below or above the table
        return [], [r]
    brokers = []
    if r.from_offset < low:
        brokers.append(OffsetRange(r.topic, r.partition, r.from_offset, low))
    if high < r.until_offset:
        brokers.append(OffsetRange(r.topic, r.partition, high, r.until_offset))
    return [OffsetRange(r.topic, r.partition, low, high)], brokers


def overlapping(
    files: Iterable[TableFile], from_offset: int, until_offset: int
) -> tuple[TableFile, ...]:
    """The files whose offset statistics meet [from_offset, until_offset)."""
    return tuple(f for f in files if f.min_offset < until_offset and f.max_offset >= from_offset)


def cut_table_range(
    r: OffsetRange,
    files: Sequence[TableFile],
    *,
    task_bytes: int = DEFAULT_TABLE_TASK_BYTES,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Cut a table range into task ranges: at a file's first offset once the files so far
    reach `task_bytes`, and into pieces of at most `max_records_per_partition` offsets."""
    cuts = [r.from_offset]
    total = 0
    for f in sorted(overlapping(files, r.from_offset, r.until_offset), key=lambda f: f.min_offset):
        if total >= task_bytes and cuts[-1] < f.min_offset < r.until_offset:
            cuts.append(f.min_offset)
            total = 0
        total += f.size_bytes
    cuts.append(r.until_offset)
    pieces = [
        OffsetRange(r.topic, r.partition, a, b)
        for a, b in zip(cuts, cuts[1:], strict=False)
        if b > a
    ]
    if max_records_per_partition is None:
        return pieces
    out = []
    for p in pieces:
        for a in range(p.from_offset, p.until_offset, max_records_per_partition):
            b = min(a + max_records_per_partition, p.until_offset)
            out.append(OffsetRange(p.topic, p.partition, a, b))
    return out


def plan_tiers(
    ranges: Iterable[OffsetRange],
    tiers: Mapping[str, TierSnapshot],
    *,
    task_bytes: int = DEFAULT_TABLE_TASK_BYTES,
    max_records_per_partition: int | None = None,
) -> tuple[list[TableRange], list[OffsetRange]]:
    """(table task ranges, broker ranges still to split) of `ranges` (unsplit, one per
    partition); a topic without a snapshot in `tiers` is read through brokers only."""
    table: list[TableRange] = []
    brokers: list[OffsetRange] = []
    for r in ranges:
        snapshot = tiers.get(r.topic)
        tier = snapshot.partitions.get(r.partition) if snapshot is not None else None
        in_table, in_brokers = split_at_tier(r, tier)
        brokers.extend(in_brokers)
        if not in_table:
            continue
        assert snapshot is not None and tier is not None
        for t in in_table:
            for piece in cut_table_range(
                t,
                tier.files,
                task_bytes=task_bytes,
                max_records_per_partition=max_records_per_partition,
            ):
                table.append(
                    TableRange(
                        piece,
                        snapshot.location,
                        snapshot.version,
                        overlapping(tier.files, piece.from_offset, piece.until_offset),
                        snapshot.storage_options,
                    )
                )
    return table, brokers


def partition_tiers(
    files: Iterable[TableFile], copied_ends: Mapping[int, int] | None = None
) -> dict[int, PartitionTier]:
    """Each partition's tier from its files: the table holds whole batches from the smallest
    offset to the largest (rows of control records included), so [min, max + 1), or to the
    copied end its app transaction records (`copied_ends`) when that is known."""
    ends = copied_ends or {}
    by_partition: dict[int, list[TableFile]] = {}
    for f in files:
        by_partition.setdefault(f.partition, []).append(f)
    return {
        p: PartitionTier(
            min(f.min_offset for f in fs),
            max(max(f.max_offset for f in fs) + 1, ends.get(p, 0)),
            tuple(sorted(fs, key=lambda f: (f.min_offset, f.uri))),
        )
        for p, fs in sorted(by_partition.items())
    }
