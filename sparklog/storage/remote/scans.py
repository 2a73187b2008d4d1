"""Reading a topic table's data files once `files.PartitionFiles` chose them: whole batches
for a fetch, timestamps for ListOffsets, epochs and producer states for a follower. Plain
pyarrow over the table's filesystem (the table module hands in an empty dataset of the table,
whose filesystem and format open single files); no `deltalake` here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

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


class FooterCache:
    """Parquet footers of data files by path (a data file never changes once written), so a
    fetch does not parse the footer again; bounded, oldest out first. Thread-safe enough:
    a lost race parses a footer twice."""

    def __init__(self, max_files: int = 4096) -> None:
        self._max_files = max_files
        self._footers: OrderedDict[str, Any] = OrderedDict()

    def get(self, path: str) -> Any | None:
        return self._footers.get(path)

    def put(self, path: str, footer: Any) -> None:
        self._footers[path] = footer
        while len(self._footers) > self._max_files:
            self._footers.popitem(last=False)


class FileScanner:
    """Opens some of a table's data files; a failure becomes `error(what, exception)`."""

    def __init__(
        self,
        base: Any,
        error: Callable[[str, BaseException], Exception],
        footers: FooterCache | None = None,
    ) -> None:
        self._base = base
        self._error = error
        self._footers = footers if footers is not None else FooterCache()

    def row_groups(self, path: str, start: int, upper: int | None) -> Iterator[pa.Table]:
        """The file's rows of batches ending at or after `start` and starting before `upper`,
        row group by row group (groups that cannot hold any skipped by their statistics)."""
        try:
            source = self._base.filesystem.open_input_file(path)
            footer = self._footers.get(path)
            parquet = pq.ParquetFile(source, metadata=footer, pre_buffer=True)
            if footer is None:
                self._footers.put(path, parquet.metadata)
            for group in _groups_for(parquet.metadata, start, upper):
                rows = parquet.read_row_group(group, columns=READ_COLUMNS, use_threads=False)
                if rows.schema != FILE_SCHEMA:  # the writer's view types, nullability
                    rows = rows.cast(FILE_SCHEMA)
                base = rows.column("batch_base_offset").to_numpy()
                keep = base + rows.column("batch_last_offset_delta").to_numpy() >= start
                if upper is not None:
                    keep &= base < upper
                yield rows if keep.all() else rows.filter(pa.array(keep))
        except Exception as e:
            raise self._error("cannot be read (a data file is missing or damaged)", e) from e

    def _dataset(self, paths: list[str]) -> Any:
        base = self._base
        fragments = [base.format.make_fragment(p, filesystem=base.filesystem) for p in paths]
        return ds.FileSystemDataset(fragments, FILE_SCHEMA, base.format, base.filesystem)

    def table(self, paths: list[str], where: Any, columns: list[str]) -> pa.Table:
        try:
            return self._dataset(paths).to_table(columns=columns, filter=where, use_threads=False)
        except Exception as e:
            raise self._error("cannot be read (a data file is missing or damaged)", e) from e


def _groups_for(footer: Any, start: int, upper: int | None) -> list[int]:
    """Row groups whose statistics allow a batch ending at or after `start` and starting
    before `upper` (a group without statistics is always read)."""
    names = [footer.schema.column(i).path for i in range(footer.num_columns)]
    base_at = names.index("batch_base_offset")
    delta_at = names.index("batch_last_offset_delta")
    groups = []
    for g in range(footer.num_row_groups):
        group = footer.row_group(g)
        base, delta = group.column(base_at).statistics, group.column(delta_at).statistics
        if base is None or delta is None or not (base.has_min_max and delta.has_min_max):
            groups.append(g)
            continue
        if base.max + delta.max < start or (upper is not None and base.min >= upper):
            continue
        groups.append(g)
    return groups


def read_rows(
    files: PartitionFiles, scanner: FileScanner, start: int, max_bytes: int, upper: int | None
) -> pa.Table:
    """Rows of the whole batches from the one holding `start`, about `max_bytes` of them
    (more when needed to complete a batch), in offset order. Files are scanned in
    `files.PartitionFiles` read order, row group by row group (groups skipped by their
    statistics, footers cached), and the scan stops once the batches known complete (starting
    below every unread row's batch) hold `max_bytes`."""
    order = files.for_read(start, upper)
    pieces: list[pa.Table] = []
    size = 0
    for i, f in enumerate(order):
        next_base = int(files.min_base[order[i + 1]]) if i + 1 < len(order) else None
        scan = scanner.row_groups(files.paths[f], start, upper)
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


def max_timestamp(
    files: PartitionFiles, scanner: FileScanner, start_offset: int = 0
) -> tuple[int, int] | None:
    """(offset, timestamp) of the record at or above `start_offset` with the largest timestamp
    (the first of equals); None when there is none."""
    if start_offset <= int(files.min_offset.min()):
        best = int(files.max_timestamp_ms.max())
        paths = [files.paths[i] for i in np.flatnonzero(files.max_timestamp_ms == best).tolist()]
        rows = scanner.table(paths, None, ["offset", "timestamp"])
        ts = timestamps_ms(rows)
        top = int(ts.max()) if len(ts) else best
        offsets = rows.column("offset").to_numpy()[ts == top]
        return int(offsets.min()), top
    # the log start cuts into the table: files by their largest timestamp, each read from the
    # start on, until no file left can hold a later (or equal and earlier) one
    candidates = np.flatnonzero(files.max_offset >= start_offset)
    order = candidates[np.argsort(-files.max_timestamp_ms[candidates], kind="stable")].tolist()
    found: tuple[int, int] | None = None
    for i in order:
        if found is not None and int(files.max_timestamp_ms[i]) < found[1]:
            break
        rows = scanner.table([files.paths[i]], pc.field("offset") >= start_offset, _OFFSET_TS)
        if not rows.num_rows:
            continue
        ts = timestamps_ms(rows)
        top = int(ts.max())
        offset = int(rows.column("offset").to_numpy()[ts == top].min())
        if found is None or top > found[1] or (top == found[1] and offset < found[0]):
            found = (offset, top)
    return found


_OFFSET_TS = ["offset", "timestamp"]


def first_at_or_after(
    files: PartitionFiles, scanner: FileScanner, timestamp: int, start_offset: int = 0
) -> tuple[int, int] | None:
    """Kafka's search: the first offset (in offset order, at or above `start_offset`) whose
    timestamp >= `timestamp`."""
    candidates = np.flatnonzero(
        (files.max_timestamp_ms >= timestamp) & (files.max_offset >= start_offset)
    )
    order = candidates[np.argsort(files.min_offset[candidates], kind="stable")].tolist()
    found: tuple[int, int] | None = None
    cut = pc.field("timestamp") >= pa.scalar(timestamp * 1000, pa.timestamp("us", "UTC"))
    if start_offset > 0:
        cut = cut & (pc.field("offset") >= start_offset)
    for i in order:
        if found is not None and int(files.min_offset[i]) > found[0]:
            break  # files are in offset order: nothing earlier can follow
        rows = scanner.table([files.paths[i]], cut, _OFFSET_TS)
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
