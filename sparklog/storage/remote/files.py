"""Which data files of a topic table a request needs, from the statistics of their add actions
(no file is opened to decide). Pure: the table module feeds it the add actions.

A file holds rows of one partition and one date; within a partition files may overlap in offsets
(a batch whose records straddle midnight lands in two date directories, compaction merges
neighbours). So a batch's rows can be spread over files, and reads pick files by batch bounds,
not by row offsets: a file may hold rows of a batch ending at or after `start` only if
`max(batch_base_offset) + max(batch_last_offset_delta) >= start`.

Read order: files sorted by the smallest batch base offset they hold. After reading the files
before `next_min_base`, every batch whose base is below it is complete (any other file with its
rows would sort earlier), which lets a read stop early once it has `max_bytes` of complete
batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

_INT64_MAX = np.iinfo(np.int64).max
_US_PER_MS = 1000


@dataclass(frozen=True, slots=True)
class PartitionFiles:
    """One partition's files, sorted by `min_base` (arrays aligned with `paths`)."""

    paths: list[str]
    size: np.ndarray
    rows: np.ndarray
    min_offset: np.ndarray
    max_offset: np.ndarray
    min_base: np.ndarray
    max_batch_end: np.ndarray  # max(batch_base_offset) + max_delta: >= the end of any batch
    max_delta: np.ndarray  # max(batch_last_offset_delta)
    max_timestamp_ms: np.ndarray  # largest batch max timestamp (ms)
    min_epoch: np.ndarray
    max_epoch: np.ndarray
    max_producer_id: np.ndarray

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def start_offset(self) -> int | None:
        return int(self.min_offset.min()) if len(self) else None

    def for_read(self, start: int, upper: int | None) -> list[int]:
        """Indexes (in read order) of the files that may hold a batch ending at or after
        `start` and starting before `upper`."""
        keep = self.max_batch_end >= start
        if upper is not None:
            keep &= self.min_base < upper
        return np.flatnonzero(keep).tolist()

    def below(self, end_offset: int) -> list[int]:
        return np.flatnonzero(self.min_offset < end_offset).tolist()

    def expire_offset(self, *, cutoff_ms: int | None, retention_bytes: int | None) -> int | None:
        """The offset below which whole files are past retention (time: every batch in them
        older than `cutoff_ms`; size: the tier stays at least `retention_bytes` after the
        drop), in offset order as Kafka deletes remote segments: a file is only dropped when
        every file holding an offset below its end goes too. None: nothing to drop."""
        if not len(self):
            return None
        order = np.argsort(self.max_offset, kind="stable")
        ends = self.max_offset[order] + 1
        # a drop up to ends[i] takes files order[:i + 1]; it is whole when no other file
        # holds an offset below ends[i]
        whole = np.searchsorted(np.sort(self.min_offset), ends) == np.arange(1, len(order) + 1)
        droppable = np.zeros(len(order), dtype=bool)
        if cutoff_ms is not None:
            droppable |= np.logical_and.accumulate(self.max_timestamp_ms[order] < cutoff_ms)
        if retention_bytes is not None:
            droppable |= int(self.size.sum()) - np.cumsum(self.size[order]) >= retention_bytes
        ok = np.flatnonzero(droppable & whole)
        return int(ends[ok.max()]) if len(ok) else None


def partition_files(actions: pa.Table) -> dict[int, PartitionFiles]:
    """Group a table's add actions (`get_add_actions(flatten=True)`) by partition."""
    if actions.num_rows == 0:
        return {}

    def col(name: str, default: int = 0) -> np.ndarray:
        if name not in actions.column_names:
            return np.full(actions.num_rows, default, dtype=np.int64)
        c = actions.column(name).cast(pa.int64())
        return np.asarray(c.fill_null(default).to_numpy(zero_copy_only=False), dtype=np.int64)

    partition = col("partition.partition")
    max_batch_ts = col("max.batch_max_timestamp", _INT64_MAX)
    if "max.timestamp" in actions.column_names:  # LogAppendTime rows: batch max is the time
        max_batch_ts = np.maximum(max_batch_ts, col("max.timestamp") // _US_PER_MS)
    fields = {
        "size": col("size_bytes"),
        "rows": col("num_records"),
        "min_offset": col("min.offset"),
        "max_offset": col("max.offset"),
        "min_base": col("min.batch_base_offset"),
        "max_batch_end": col("max.batch_base_offset", _INT64_MAX // 2)
        + col("max.batch_last_offset_delta", _INT64_MAX // 2),
        "max_delta": col("max.batch_last_offset_delta", _INT64_MAX // 2),
        "max_timestamp_ms": max_batch_ts,
        "min_epoch": col("min.leader_epoch", -1),
        "max_epoch": col("max.leader_epoch", _INT64_MAX),
        "max_producer_id": col("max.producer_id", _INT64_MAX),
    }
    paths = actions.column("path").to_pylist()
    out = {}
    for p in np.unique(partition).tolist():
        mine = np.flatnonzero(partition == p)
        mine = mine[np.argsort(fields["min_base"][mine], kind="stable")]
        out[int(p)] = PartitionFiles(
            paths=[paths[i] for i in mine.tolist()],
            **{k: v[mine] for k, v in fields.items()},
        )
    return out


EMPTY_PARTITION = PartitionFiles(
    paths=[],
    **{
        name: np.zeros(0, dtype=np.int64)
        for name in PartitionFiles.__dataclass_fields__
        if name != "paths"
    },
)
