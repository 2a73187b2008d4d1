"""Batch reads: `spark.read.format("sparklog")` (Spark's `KafkaBatch`/`KafkaRelation`).

`partitions()` runs on the driver: it resolves the subscription's partitions and their
starting and ending offsets once, then cuts the ranges into input partitions
(`minPartitions`, `maxRecordsPerPartition`). Each input partition carries its range and the
parsed options, so `read()` on an executor needs nothing else.

A topic with a remote tier (a Delta table, DESIGN D17) has the offsets its table holds planned
as tasks that read the table's files (`table_plan`, `table_reader`), the rest as broker
ranges: one gap-free, duplicate-free read either way.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from sparklog.spark.offset_reader import OffsetReader
from sparklog.spark.offsets import OffsetRange, PartitionOffsets, split_ranges
from sparklog.spark.options import SourceOptions, SparkLogOptionError
from sparklog.spark.partition_reader import read_range, report_data_loss
from sparklog.spark.table_plan import TableRange, TierSnapshot, plan_tiers
from sparklog.spark.user_errors import user_errors


class RangePartition(InputPartition):
    """One Spark task's work: an offset range of one partition, plus the source options."""

    def __init__(self, index: int, offset_range: OffsetRange, options: SourceOptions) -> None:
        super().__init__(index)
        self.range = offset_range
        self.options = options

    def __repr__(self) -> str:
        r = self.range
        return f"RangePartition({r.topic}-{r.partition} [{r.from_offset}, {r.until_offset}))"


class TableRangePartition(InputPartition):
    """One Spark task's work read from a topic table's files (`table_reader`)."""

    def __init__(self, index: int, table_range: TableRange, options: SourceOptions) -> None:
        super().__init__(index)
        self.table_range = table_range
        self.options = options

    def __repr__(self) -> str:
        r = self.table_range.range
        return (
            f"TableRangePartition({r.topic}-{r.partition} [{r.from_offset}, {r.until_offset}) "
            f"from {len(self.table_range.files)} files of version {self.table_range.version})"
        )


def plan_reads(
    start: PartitionOffsets,
    end: PartitionOffsets,
    options: SourceOptions,
    tiers: dict[str, TierSnapshot],
) -> list[InputPartition]:
    """The input partitions of a read: table tasks for what the topics' tables hold (their
    snapshots in `tiers`), broker ranges split as `plan_ranges` does for the rest, in
    partition and offset order."""
    table, brokers = plan_tiers(
        checked_ranges(start, end, options),
        tiers,
        max_records_per_partition=options.max_records_per_partition,
    )
    min_partitions = options.min_partitions
    if min_partitions is not None and table:
        min_partitions = max(1, min_partitions - len(table)) if brokers else None
    pieces: list[OffsetRange | TableRange] = [
        *table,
        *split_ranges(
            brokers,
            min_partitions=min_partitions,
            max_records_per_partition=options.max_records_per_partition,
        ),
    ]

    def key(p: OffsetRange | TableRange) -> tuple[str, int, int]:
        r = p.range if isinstance(p, TableRange) else p
        return (r.topic, r.partition, r.from_offset)

    out: list[InputPartition] = []
    for i, p in enumerate(sorted(pieces, key=key)):
        if isinstance(p, TableRange):
            out.append(TableRangePartition(i, p, options))
        else:
            out.append(RangePartition(i, p, options))
    return out


def checked_ranges(
    start: PartitionOffsets, end: PartitionOffsets, options: SourceOptions
) -> list[OffsetRange]:
    """One range per partition between resolved offsets, checked for data loss."""
    ranges = []
    for tp, until in sorted(end.items()):
        if tp not in start:
            continue
        from_offset = start[tp]
        if until < from_offset:
            report_data_loss(
                options.fail_on_data_loss,
                f"Partition {tp[0]}-{tp[1]}'s offset was changed from {from_offset} to {until}",
            )
            continue
        ranges.append(OffsetRange(tp[0], tp[1], from_offset, until))
    return ranges


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """`read()` of both readers; Spark sends `InputPartition(None)` when there is no range."""
    if isinstance(partition, TableRangePartition):
        from sparklog.spark.table_reader import read_table_range

        return read_table_range(partition.table_range, partition.options)
    if not isinstance(partition, RangePartition):
        return iter(())
    return read_range(partition.range, partition.options)


class SparkLogBatchReader(DataSourceReader):
    """Reads the offsets between `startingOffsets` and `endingOffsets` once."""

    def __init__(self, options: SourceOptions) -> None:
        assert options.ending is not None, "batch reads have an ending offset spec"
        self.options = options

    def partitions(self) -> list[InputPartition]:
        with user_errors(), OffsetReader(self.options) as reader:
            tps = reader.partitions()
            if reader.missing:
                raise SparkLogOptionError(
                    "option 'assign' names partitions that do not exist: "
                    + ", ".join(f"{t}-{p}" for t, p in reader.missing)
                )
            start = reader.resolve(self.options.starting, tps, starting=True)
            assert self.options.ending is not None  # checked in __init__
            end = reader.resolve(self.options.ending, tps, starting=False)
            tiers = self._tiers(reader, {t for t, _ in tps})
        return plan_reads(start, end, self.options, tiers)

    def _tiers(self, reader: OffsetReader, topics: set[str]) -> dict[str, TierSnapshot]:
        if not self.options.remote_table_reads or not topics:
            return {}
        from sparklog.spark.table_listing import locator_for, tier_snapshots

        return tier_snapshots(locator_for(self.options, reader.admin), topics)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)
