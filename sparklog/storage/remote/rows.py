"""Row-level helpers of the topic table that need no `deltalake`: checking an upload's rows,
ordering what a read found, sizing it, and what followers rebuild from rows (aborted
transactions, producer states)."""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.records.control import ControlRecordType, control_type_of
from sparklog.storage.remote.codec import batches_to_rows
from sparklog.storage.remote.schema import PARTITION_COLUMNS, TABLE_SCHEMA
from sparklog.storage.remote.tier import FencedUploadError, ProducerSnapshotEntry, SegmentUpload
from sparklog.storage.txn_index import AbortedTxn

#: The columns of a data file (Delta keeps partition columns in the paths), and what a read
#: needs to rebuild batches.
FILE_SCHEMA = pa.schema([f for f in TABLE_SCHEMA if f.name not in PARTITION_COLUMNS])
READ_COLUMNS = FILE_SCHEMA.names
_INT32_MAX = 0x7FFFFFFF


def upload_rows(upload: SegmentUpload) -> pa.Table:
    """The rows of an upload's batches; ValueError when they leave its [start, end)."""
    rows = batches_to_rows(upload.records, upload.partition, upload.aborted)
    if rows.num_rows:
        offsets = rows.column("offset")
        first = pc.min(rows.column("batch_base_offset")).as_py()
        last = pc.max(offsets).as_py()
        if first < upload.start_offset or last >= upload.end_offset:
            raise ValueError(
                f"upload of partition {upload.partition} holds offsets {first}..{last}, "
                f"outside [{upload.start_offset}, {upload.end_offset})"
            )
    return rows


def in_offset_order(
    pieces: list[pa.Table] | list[pa.RecordBatch], complete_below: int | None
) -> pa.Table:
    """The pieces' rows of batches starting below `complete_below` (all: None), by offset."""
    if not pieces:
        return FILE_SCHEMA.empty_table().select(READ_COLUMNS)
    tables = [p if isinstance(p, pa.Table) else pa.Table.from_batches([p]) for p in pieces]
    schema = tables[0].schema
    rows = pa.concat_tables([t if t.schema == schema else t.cast(schema) for t in tables])
    if complete_below is not None:
        base = rows.column("batch_base_offset").to_numpy()
        keep = base < complete_below
        if not keep.all():
            rows = rows.filter(pa.array(keep))
    offsets = rows.column("offset").to_numpy()
    if len(offsets) > 1 and not bool(np.all(offsets[1:] > offsets[:-1])):
        rows = rows.take(pa.array(np.argsort(offsets, kind="stable")))
    return rows


def complete_bytes(pieces: list[pa.Table] | list[pa.RecordBatch], complete_below: int) -> int:
    """About how many batch bytes the rows of batches starting below `complete_below` take."""
    total = 0
    for piece in pieces:
        keep = piece.column("batch_base_offset").to_numpy() < complete_below
        total += int(row_sizes(piece)[keep].sum())
    return total


def row_sizes(rows: pa.Table | pa.RecordBatch) -> np.ndarray:
    """A lower bound of each row's size in an uncompressed batch (a record takes at least 7
    bytes besides its key and value), so a read that stops at `max_bytes` of it has enough."""
    size = np.full(rows.num_rows, 7, dtype=np.int64)
    for name in ("key", "value"):
        lengths = pc.binary_length(rows.column(name))
        size += np.asarray(pc.fill_null(lengths, 0).to_numpy(zero_copy_only=False), np.int64)
    return size


def row_bytes(rows: pa.Table | pa.RecordBatch) -> int:
    """`row_sizes` summed."""
    size = 7 * rows.num_rows
    for name in ("key", "value"):
        size += int(pc.sum(pc.binary_length(rows.column(name))).as_py() or 0)
    return size


def timestamps_ms(rows: pa.Table) -> np.ndarray:
    return rows.column("timestamp").cast(pa.int64()).to_numpy() // 1000


def rows_end_offset(batch: bytes) -> int:
    """The last offset of a v2 batch (base offset + last offset delta)."""
    return int.from_bytes(batch[0:8], "big", signed=True) + int.from_bytes(
        batch[23:27], "big", signed=True
    )


def aborted_txns(rows: pa.Table) -> tuple[AbortedTxn, ...]:
    """The aborted transactions the rows show, one entry each as a local transaction index
    lists them: from the transaction's first aborted batch in the rows to its ABORT marker (or
    its last aborted record when the marker is past the rows). A producer's transactions are
    told apart by its ABORT markers: a consumer's read_committed filter drops a producer's
    batches from an entry's `first_offset` until it meets an ABORT marker, so each aborted
    transaction of a producer needs an entry of its own."""
    aborted = rows.filter(pc.field("aborted") & ~pc.field("is_control"))
    if not aborted.num_rows:
        return ()
    batches = aborted.group_by(["producer_id", "batch_base_offset"]).aggregate([("offset", "max")])
    markers: dict[int, list[int]] = {}
    control = rows.filter(pc.field("is_control"))
    for pid, offset, key in zip(
        control.column("producer_id").to_pylist(),
        control.column("offset").to_pylist(),
        control.column("key").to_pylist(),
        strict=True,
    ):
        with contextlib.suppress(Exception):
            if control_type_of(key) == ControlRecordType.ABORT:
                markers.setdefault(pid, []).append(offset)
    for offsets in markers.values():
        offsets.sort()

    def marker_after(pid: int, offset: int) -> int | None:
        found = markers.get(pid, [])
        i = bisect.bisect_right(found, offset)
        return found[i] if i < len(found) else None

    out: list[AbortedTxn] = []
    open_txns: dict[int, list[int]] = {}  # producer -> [first offset, last aborted offset]
    for pid, base, last in sorted(
        zip(
            batches.column("producer_id").to_pylist(),
            batches.column("batch_base_offset").to_pylist(),
            batches.column("offset_max").to_pylist(),
            strict=True,
        ),
        key=lambda b: b[1],
    ):
        current = open_txns.get(pid)
        if current is not None:
            marker = marker_after(pid, current[0])
            if marker is not None and marker < base:  # that transaction ended before this
                out.append(AbortedTxn(pid, current[0], marker, current[0]))
                current = None
        if current is None:
            open_txns[pid] = [base, last]
        else:
            current[1] = max(current[1], last)
    for pid, (first, last) in open_txns.items():
        marker = marker_after(pid, first)
        end = last if marker is None else marker
        out.append(AbortedTxn(pid, first, end, first))
    return tuple(sorted(out, key=lambda t: t.first_offset))


def producer_entries(rows: pa.Table) -> list[ProducerSnapshotEntry]:
    if not rows.num_rows:
        return []
    pid = rows.column("producer_id").to_numpy()
    base = rows.column("batch_base_offset").to_numpy()
    order = np.lexsort((base, pid))
    last_of_pid = np.flatnonzero(np.append(pid[order][1:] != pid[order][:-1], True))
    picked = rows.take(pa.array(order[last_of_pid]))
    out = []
    for r in picked.to_pylist():
        delta = r["batch_last_offset_delta"]
        first_seq = r["base_sequence"]
        last_seq = first_seq if first_seq < 0 else (first_seq + delta) & _INT32_MAX
        out.append(
            ProducerSnapshotEntry(
                producer_id=r["producer_id"],
                producer_epoch=r["producer_epoch"],
                first_sequence=first_seq,
                last_sequence=last_seq,
                last_offset=r["batch_base_offset"] + delta,
                last_timestamp=r["batch_max_timestamp"],
            )
        )
    return out


def pending_uploads(
    uploads: list[SegmentUpload], copied_end: Callable[[int], int | None], topic: str, where: str
) -> list[SegmentUpload]:
    """The uploads not in the table yet (one whose partition already ends at its end is a
    retry or a duplicate); FencedUploadError when one cannot follow the copied end. `where`
    names the table in the message."""
    todo = []
    for u in uploads:
        end = copied_end(u.partition)
        if end == u.end_offset:
            continue
        if end is not None and end != u.start_offset:
            raise FencedUploadError(
                f"{topic}-{u.partition}: the topic table {where} holds offsets up to {end}, "
                f"this upload covers [{u.start_offset}, {u.end_offset}) (copied by another "
                "leader, or a stale retry); copy again from its copied end"
            )
        todo.append(u)
    return todo


def fenced_message(
    todo: list[SegmentUpload], copied_end: Callable[[int], int | None], topic: str, where: str
) -> str:
    """Why a commit lost to another copier's (a concurrent commit of one of its partitions)."""
    moved = {u.partition: e for u in todo if (e := copied_end(u.partition)) != u.start_offset}
    named = ", ".join(f"{topic}-{p} (now at {e})" for p, e in sorted(moved.items()))
    return (
        f"Another copier committed to the topic table {where} first for "
        f"{named or 'a partition'}; nothing of this commit was written: copy again from the "
        "copied end"
    )
