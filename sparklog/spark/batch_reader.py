"""Batch reads: `spark.read.format("sparklog")` (Spark's `KafkaBatch`/`KafkaRelation`).

`partitions()` runs on the driver: it resolves the subscription's partitions and their
starting and ending offsets once, then cuts the ranges into input partitions
(`minPartitions`, `maxRecordsPerPartition`). Each input partition carries its range and the
parsed options, so `read()` on an executor needs nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from sparklog.spark.offset_reader import OffsetReader
from sparklog.spark.offsets import OffsetRange, PartitionOffsets, split_ranges
from sparklog.spark.options import SourceOptions, SparkLogOptionError
from sparklog.spark.partition_reader import read_range, report_data_loss
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


def plan_ranges(
    start: PartitionOffsets, end: PartitionOffsets, options: SourceOptions
) -> list[OffsetRange]:
    """Ranges between resolved offsets, checked for data loss, then split for parallelism.
    A partition missing from `start` is left out (the caller resolves new partitions)."""
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
    return split_ranges(
        ranges,
        min_partitions=options.min_partitions,
        max_records_per_partition=options.max_records_per_partition,
    )


def to_input_partitions(ranges: list[OffsetRange], options: SourceOptions) -> list[InputPartition]:
    return [RangePartition(i, r, options) for i, r in enumerate(ranges)]


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """`read()` of both readers; Spark sends `InputPartition(None)` when there is no range."""
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
        return to_input_partitions(plan_ranges(start, end, self.options), self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)
