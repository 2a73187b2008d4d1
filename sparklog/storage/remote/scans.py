"""Reading a topic table's data files once `files.PartitionFiles` chose them: whole batches
for a fetch, timestamps for ListOffsets, epochs and producer states for a follower. Plain
pyarrow over the table's filesystem (the table module hands in an empty dataset of the table,
whose filesystem and format open single files); no `deltalake` here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from sparklog.storage.remote.files import PartitionFiles
from sparklog.storage.remote.rows import (
    FILE_SCHEMA,
    READ_COLUMNS,
    complete_bytes,
    in_offset_order,
    producer_entries,
    row_bytes,
    timestamps_ms,
)
from sparklog.storage.remote.tier import EpochEntry, ProducerSnapshotEntry

_BATCH_COLUMNS = [
    "offset",
    "batch_base_offset",
    "batch_last_offset_delta",
    "batch_max_timestamp",
    "leader_epoch",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "is_control",
]
_FAR = 1 << 62


class FileScanner:
    """Opens some of a table's data files; a failure becomes `error(what, exception)`."""

    def __init__(self, base: Any, error: Callable[[str, BaseException], Exception]) -> None:
        self._base = base
        self._error = error

    def _dataset(self, paths: list[str]) -> Any:
        base = self._base
        fragments = [base.format.make_fragment(p, filesystem=base.filesystem) for p in paths]
        return ds.FileSystemDataset(fragments, FILE_SCHEMA, base.format, base.filesystem)

    def batches(self, path: str, where: Any) -> Iterator[pa.RecordBatch]:
        """The file's rows matching `where`, record batch by record batch."""
        try:
            scanner = self._dataset([path]).scanner(
                columns=READ_COLUMNS,
                filter=where,
                use_threads=False,
                batch_readahead=0,  # a read stops after about max_bytes
                fragment_readahead=0,
            )
            yield from scanner.to_batches()
        except Exception as e:
            raise self._error("cannot be read (a data file is missing or damaged)", e) from e

    def table(self, paths: list[str], where: Any, columns: list[str]) -> pa.Table:
        try:
            return self._dataset(paths).to_table(columns=columns, filter=where, use_threads=False)
        except Exception as e:
            raise self._error("cannot be read (a data file is missing or damaged)", e) from e


def read_rows(
    files: PartitionFiles, scanner: FileScanner, start: int, max_bytes: int, upper: int | None
) -> pa.Table:
    """Rows of the whole batches from the one holding `start`, about `max_bytes` of them
    (more when needed to complete a batch), in offset order. Files are scanned in
    `files.PartitionFiles` read order, row group by row group, and the scan stops once the
    batches known complete (starting below every unread row's batch) hold `max_bytes`."""
    order = files.for_read(start, upper)
    pieces: list[pa.RecordBatch] = []
    size = 0
    for i, f in enumerate(order):
        next_base = int(files.min_base[order[i + 1]]) if i + 1 < len(order) else None
        scan = scanner.batches(files.paths[f], read_filter(files, f, start, upper))
        in_order, last_offset = True, -1  # a file's rows are in offset order as written
        for piece in scan:
            if not piece.num_rows:
                continue
            pieces.append(piece)
            size += row_bytes(piece)
            offsets = piece.column("offset").to_numpy()
            in_order &= bool(offsets[0] > last_offset) and bool(np.all(np.diff(offsets) > 0))
            last_offset = int(offsets[-1])
            if size >= max_bytes and in_order:  # rows of the last batch read may follow
                last_base = piece.column("batch_base_offset")[-1].as_py()
                bound = last_base if next_base is None else min(next_base, last_base)
                if complete_bytes(pieces, bound) >= max_bytes:
                    scan.close()  # type: ignore[attr-defined]  # a generator
                    return in_offset_order(pieces, bound)
        if (  # the file is read whole: batches below the next file's are complete
            next_base is not None
            and size >= max_bytes
            and complete_bytes(pieces, next_base) >= max_bytes
        ):
            return in_offset_order(pieces, next_base)
    return in_offset_order(pieces, None)


def read_filter(files: PartitionFiles, f: int, start: int, upper: int | None) -> Any:
    """Rows of batches ending at or after `start` and starting before `upper`; the
    `batch_base_offset` bounds also skip row groups by their statistics."""
    where = pc.field("batch_base_offset") >= start - int(files.max_delta[f])
    if int(files.min_base[f]) < start:
        batch_end = pc.add(pc.field("batch_base_offset"), pc.field("batch_last_offset_delta"))
        where &= batch_end >= start
    if upper is not None:
        where &= pc.field("batch_base_offset") < upper
    return where


def max_timestamp(files: PartitionFiles, scanner: FileScanner) -> tuple[int, int]:
    """(offset, timestamp) of the record with the largest timestamp (the first of equals)."""
    best = int(files.max_timestamp_ms.max())
    paths = [files.paths[i] for i in np.flatnonzero(files.max_timestamp_ms == best).tolist()]
    rows = scanner.table(paths, None, ["offset", "timestamp"])
    ts = timestamps_ms(rows)
    top = int(ts.max()) if len(ts) else best
    offsets = rows.column("offset").to_numpy()[ts == top]
    return int(offsets.min()), top


def first_at_or_after(
    files: PartitionFiles, scanner: FileScanner, timestamp: int
) -> tuple[int, int] | None:
    """Kafka's search: the first offset (in offset order) whose timestamp >= `timestamp`."""
    candidates = np.flatnonzero(files.max_timestamp_ms >= timestamp)
    order = candidates[np.argsort(files.min_offset[candidates], kind="stable")].tolist()
    found: tuple[int, int] | None = None
    cut = pc.field("timestamp") >= pa.scalar(timestamp * 1000, pa.timestamp("us", "UTC"))
    for i in order:
        if found is not None and int(files.min_offset[i]) > found[0]:
            break  # files are in offset order: nothing earlier can follow
        rows = scanner.table([files.paths[i]], cut, ["offset", "timestamp"])
        if rows.num_rows:
            at = int(np.argmin(rows.column("offset").to_numpy()))
            offset = int(rows.column("offset")[at].as_py())
            if found is None or offset < found[0]:
                found = (offset, int(timestamps_ms(rows)[at]))
    return found


def epochs(files: PartitionFiles, scanner: FileScanner, end_offset: int) -> list[EpochEntry]:
    """Leader epochs below `end_offset` with their first offsets; a file of one epoch is
    answered from its statistics, without opening it."""
    starts: dict[int, int] = {}
    mixed = []
    for i in files.below(end_offset):
        if files.min_epoch[i] == files.max_epoch[i] and files.max_offset[i] < end_offset:
            e = int(files.min_epoch[i])
            starts[e] = min(starts.get(e, _FAR), int(files.min_base[i]))
        else:
            mixed.append(files.paths[i])
    if mixed:
        where = pc.field("offset") < end_offset
        rows = scanner.table(mixed, where, ["leader_epoch", "batch_base_offset"])
        if rows.num_rows:
            grouped = rows.group_by("leader_epoch").aggregate([("batch_base_offset", "min")])
            for e, s in zip(
                grouped.column("leader_epoch").to_pylist(),
                grouped.column("batch_base_offset_min").to_pylist(),
                strict=True,
            ):
                starts[e] = min(starts.get(e, _FAR), s)
    entries, last = [], -1
    for epoch in sorted(starts):  # epochs only grow along the log
        if epoch >= 0 and starts[epoch] > last:
            entries.append(EpochEntry(epoch, starts[epoch]))
            last = starts[epoch]
    return entries


def producer_states(
    files: PartitionFiles, scanner: FileScanner, end_offset: int
) -> list[ProducerSnapshotEntry]:
    """Each producer's last data batch ending below `end_offset` (files without producer ids
    skipped by their statistics)."""
    paths = [files.paths[i] for i in files.below(end_offset) if files.max_producer_id[i] >= 0]
    if not paths:
        return []
    last = pc.add(pc.field("batch_base_offset"), pc.field("batch_last_offset_delta"))
    where = (last < end_offset) & (pc.field("producer_id") >= 0) & ~pc.field("is_control")
    return producer_entries(scanner.table(paths, where, _BATCH_COLUMNS))
