"""Streaming reads: `spark.readStream.format("sparklog")` (Spark's `KafkaMicroBatchStream`).

Theory of operation. Offsets are `{"topic": {"partition": next offset}}` JSON with topics and
partitions in sorted order. Spark keeps one reader alive per query in a driver-side Python
worker and asks it, per trigger:

1. `latestOffset(start, limit)`: the partitions the subscription covers now (new topics of a
   pattern and new partitions included; a new partition starts at its log start offset, a
   partition that vanished is data loss), their end offsets (or, after
   `prepareForTriggerAvailableNow`, the ends recorded then), cut down by the read limit:
   `ReadAllAvailable` (Trigger.Once, or no limit options) takes everything; otherwise
   `minOffsetsPerTrigger` holds the batch back until enough records arrived or
   `maxTriggerDelay` passed, and `maxOffsetsPerTrigger` caps the records, spread over
   partitions by backlog. PySpark has no CompositeReadLimit, so Spark's limit carries one
   value and the other comes from the options.
2. `partitions(start, end)`: ranges per partition, split like batch reads; the offsets a
   topic's table holds become tasks reading its files (`table_plan`), the table listed
   incrementally from the last micro-batch's snapshot.
3. `read(partition)` on executors: `partition_reader.read_range`.

The offsets a batch covers are in Spark's checkpoint, so a restarted query re-plans the same
ranges and reads the same records: the checkpoint stays the source of truth. With
`kafka.group.id`, `commit(end)` also commits each finished batch's end offsets to that consumer
group (in the group coordinator's Delta table), so `kafka-consumer-groups`, `consumer_lag_df`
and any lag monitor see the query's progress (Spark's Kafka connector never commits). Spark calls
`commit(end)` only while planning the next batch, so the driver's `GroupCommitListener`
(group_commits.py) commits each batch's end as its progress is reported. A failed
group commit is logged, never fails the query; a replayed commit commits the same offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from sparklog.spark.batch_reader import plan_reads, read_partition
from sparklog.spark.offset_reader import OffsetReader
from sparklog.spark.offsets import (
    PartitionOffsets,
    backlog,
    from_json_dict,
    rate_limit,
    to_json_dict,
)
from sparklog.spark.options import SourceOptions
from sparklog.spark.partition_reader import report_data_loss

logger = logging.getLogger(__name__)


class SparkLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One streaming query's view of its subscription (see the module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._offsets: OffsetReader | None = None
        self._latest: PartitionOffsets | None = None  # ends seen by the last latestOffset
        self._available_now: PartitionOffsets | None = None
        self._last_trigger_ms = 0.0  # Spark's lastTriggerMillis: the first trigger never waits
        self._group_committed: PartitionOffsets | None = None  # last offsets sent to the group
        self._tiers: Any = None  # table_listing.TierLocator, made on the first partitions()

    def __getstate__(self) -> dict[str, Any]:
        """Spark pickles the reader for `read()` on executors: leave the connections behind."""
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["options"])

    @property
    def offsets(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = OffsetReader(self.options)
        return self._offsets

    # ------------------------------------------------------------------ offsets

    def initialOffset(self) -> dict:
        tps = self.offsets.partitions()
        start = self.offsets.resolve(self.options.starting, tps, starting=True)
        logger.info("initial offsets %s", start)
        return to_json_dict(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: what exists now is all this query run will read."""
        tps = self.offsets.partitions()
        self._available_now = self.offsets.latest(tps)
        logger.info("Trigger.AvailableNow reads up to %s", self._available_now)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # `start` ends the batch Spark finished last (micro-batches run one after the other):
        # Spark calls `commit` for it only when it plans the next one, which never comes after
        # an AvailableNow run's last batch, so the group hears of it here as well
        self._commit_to_group(start)
        begin = self._current_start(from_json_dict(start))
        latest = self._ends(begin)
        self._latest = latest
        end: PartitionOffsets | None
        if isinstance(limit, ReadAllAvailable) or not isinstance(limit, ReadLimit):
            end = latest
        else:
            end = self._limited(begin, latest, limit)
            if end is None:
                return start
        if end == from_json_dict(start):
            return start
        return to_json_dict(end)

    def _current_start(self, start: PartitionOffsets) -> PartitionOffsets:
        """`start` for the partitions that exist now: new ones from their log start; ones that
        vanished are reported as data loss."""
        tps = self.offsets.partitions()
        if self._available_now is not None:
            tps = [tp for tp in tps if tp in self._available_now]
        gone = sorted(set(start) - set(tps))
        if gone:
            report_data_loss(
                self.options.fail_on_data_loss,
                "partitions " + ", ".join(f"{t}-{p}" for t, p in gone) + " are gone",
            )
        new = [tp for tp in tps if tp not in start]
        if new:
            logger.info("new partitions %s start at their log start offset", new)
        fresh = self.offsets.earliest(new)
        return {tp: start[tp] if tp in start else fresh[tp] for tp in tps}

    def _ends(self, begin: PartitionOffsets) -> PartitionOffsets:
        if self._available_now is not None:
            return {tp: max(self._available_now[tp], begin[tp]) for tp in begin}
        # An end below the start (a truncated or recreated partition) is passed on:
        # partitions() reports it as data loss and the next batch starts from there.
        return self.offsets.latest(list(begin))

    def _limited(
        self, begin: PartitionOffsets, latest: PartitionOffsets, limit: ReadLimit
    ) -> PartitionOffsets | None:
        """Apply the read limit (and the limit option PySpark could not pass along); None
        means: hold this batch back (minOffsetsPerTrigger)."""
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else None
        max_rows = max_rows if max_rows is not None else self.options.max_offsets_per_trigger
        min_rows = min_rows if min_rows is not None else self.options.min_offsets_per_trigger
        if (
            min_rows is not None
            and self._available_now is None
            and self._delay(begin, latest, min_rows)
        ):
            return None
        if max_rows is not None:
            return rate_limit(begin, latest, max_rows)
        return latest

    def _delay(self, begin: PartitionOffsets, latest: PartitionOffsets, min_rows: int) -> bool:
        """Spark's `delayBatch`: wait for `min_rows` records, at most `maxTriggerDelay`."""
        now_ms = time.time() * 1000
        if now_ms - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now_ms
            return False
        if backlog(begin, latest) < min_rows:
            return True
        self._last_trigger_ms = now_ms
        return False

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else to_json_dict(self._latest)

    # -------------------------------------------------------------- partitions

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = from_json_dict(start)
        until = from_json_dict(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self.offsets.earliest(new))
            for tp in new:
                if begin[tp] > until[tp]:  # the new partition lost records since latestOffset
                    report_data_loss(
                        self.options.fail_on_data_loss,
                        f"Cannot fetch offsets [{until[tp]}, {begin[tp]}) of new partition "
                        f"{tp[0]}-{tp[1]}",
                    )
                    begin[tp] = until[tp]
        return plan_reads(begin, until, self.options, self._tier_snapshots(until))

    def _tier_snapshots(self, until: PartitionOffsets) -> dict:
        if not self.options.remote_table_reads or not until:
            return {}
        from sparklog.spark.table_listing import locator_for, tier_snapshots

        if self._tiers is None:
            self._tiers = locator_for(self.options, self.offsets.admin)
        return tier_snapshots(self._tiers, {t for t, _ in until})

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        """With `kafka.group.id`: commit the batch's end offsets to that group (monitoring and
        hand-over; the checkpoint remains the query's position)."""
        self._commit_to_group(end)

    def _commit_to_group(self, end: dict) -> None:
        group = self.options.kafka.get("group.id")
        offsets = from_json_dict(end or {})
        if not group or not offsets or offsets == self._group_committed:
            return
        from sparklog.client import AdminClient
        from sparklog.errors import KafkaError

        try:
            with AdminClient(self.options.admin_config()) as admin:
                admin.alter_group_offsets(group, offsets)
            self._group_committed = offsets
        except (KafkaError, OSError) as e:
            logger.warning("committing the batch's offsets to group %r failed: %s", group, e)

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None
