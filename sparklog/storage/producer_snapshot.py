"""One producer's state (`ProducerStateEntry`) and the snapshot files that persist it.

The entry model lives here, next to its on-disk form, as Kafka's `readSnapshot` returns
`ProducerStateEntry`s; `producer_state.py` (the manager and the append validation) uses it and
can be imported from for it. Kept apart so neither module grows past ~600 lines.

Snapshot layout (Kafka's `ProducerStateManager.PID_SNAPSHOT_MAP_SCHEMA`), big-endian::

    version int16 (= 1) | crc uint32 | entries: int32 count, then per producer (46 bytes):
        producerId int64 | epoch int16 | lastSequence int32 | lastOffset int64 |
        offsetDelta int32 | timestamp int64 | coordinatorEpoch int32 | currentTxnFirstOffset int64

The CRC-32C covers every byte after the crc field (the count and the entries). Only a producer's
newest batch survives; `lastOffset` is -1 when it has none, `currentTxnFirstOffset` -1 without
an ongoing transaction. A file is named for the map end offset it was taken at (`%020d.snapshot`).
Unlike Kafka (which writes the file in place and fsyncs it) a snapshot is written to a temp file,
fsynced and renamed (`checkpoint.write_atomically`), so a crash never leaves a torn snapshot.
"""

from __future__ import annotations

import os
import re
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sparklog.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_TIMESTAMP
from sparklog.records.crc import crc32c
from sparklog.storage.checkpoint import write_atomically
from sparklog.structs import INT32_MAX

NUM_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN = max.in.flight per producer
PRODUCER_SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_OFFSET = _VERSION.size
_ENTRIES_OFFSET = _CRC_OFFSET + _CRC.size  # where the CRC-covered bytes start
_SNAPSHOT_NAME = re.compile(r"([0-9]+)" + re.escape(SNAPSHOT_SUFFIX))


class CorruptSnapshotError(ValueError):
    """A snapshot file that cannot be trusted (bad version, CRC, size); Kafka's
    `CorruptSnapshotException`. The manager deletes it and falls back to an older snapshot."""


def decrement_sequence(sequence: int, decrement: int) -> int:
    """`sequence - decrement` wrapping below 0 to INT32_MAX (Kafka's `decrementSequence`)."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """A retained batch of one producer (Kafka's `BatchMetadata`)."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """The state of one producer id (Kafka's `ProducerStateEntry`); mutable, owned by a manager
    or by one pending `ProducerAppendInfo`.

    Invariant: every retained batch has `producer_epoch`; at most 5, oldest first.
    """

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batch_metadata: deque[BatchMetadata] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.batch_metadata = deque(self.batch_metadata, maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def without_batches(self) -> ProducerStateEntry:
        """A copy with no retained batches: the start of a pending update."""
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        """Adopt a new epoch; the retained batches belong to the old one and are dropped."""
        if self.producer_epoch == producer_epoch:
            return False
        self.batch_metadata.clear()
        self.producer_epoch = producer_epoch
        return True

    def add_batch(
        self,
        producer_epoch: int,
        last_seq: int,
        last_offset: int,
        offset_delta: int,
        timestamp: int,
    ) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def end_txn(self, producer_epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """Apply a transaction marker (Kafka's `update(epoch, coordinatorEpoch, timestamp)`)."""
        self.maybe_update_producer_epoch(producer_epoch)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = None
        self.last_timestamp = timestamp

    def update(self, next_entry: ProducerStateEntry) -> None:
        """Merge a pending entry into this committed one (Kafka's `update(ProducerStateEntry)`)."""
        self.maybe_update_producer_epoch(next_entry.producer_epoch)
        self.batch_metadata.extend(next_entry.batch_metadata)
        self.coordinator_epoch = next_entry.coordinator_epoch
        self.current_txn_first_offset = next_entry.current_txn_first_offset
        self.last_timestamp = next_entry.last_timestamp

    def find_duplicate_batch(
        self, producer_epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The retained batch with exactly this sequence range in this epoch, if any."""
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batch_metadata:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The file's bytes for `entries` (in the given order)."""
    entries = list(entries)
    body = bytearray(_COUNT.pack(len(entries)))
    for e in entries:
        txn_first_offset = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        body += _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            txn_first_offset,
        )
    return _VERSION.pack(PRODUCER_SNAPSHOT_VERSION) + _CRC.pack(crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes | bytearray | memoryview) -> list[ProducerStateEntry]:
    """Parse snapshot bytes; raises CorruptSnapshotError naming what is wrong."""
    if len(data) < _ENTRIES_OFFSET + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot is {len(data)} bytes, shorter than its header")
    (version,) = _VERSION.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
    (stored_crc,) = _CRC.unpack_from(data, _CRC_OFFSET)
    computed_crc = crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if stored_crc != computed_crc:
        raise CorruptSnapshotError(
            f"snapshot is corrupt (CRC is no longer valid): stored {stored_crc:#010x}, "
            f"computed {computed_crc:#010x}"
        )
    (count,) = _COUNT.unpack_from(data, _ENTRIES_OFFSET)
    start = _ENTRIES_OFFSET + _COUNT.size
    if count < 0 or start + count * _ENTRY.size != len(data):
        raise CorruptSnapshotError(
            f"snapshot says {count} entries but holds {len(data) - start} bytes of entries "
            f"({_ENTRY.size} bytes each)"
        )
    return [_decode_entry(data, start + n * _ENTRY.size) for n in range(count)]


def _decode_entry(data: bytes | bytearray | memoryview, pos: int) -> ProducerStateEntry:
    pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn_first = (
        _ENTRY.unpack_from(data, pos)
    )
    batches = [BatchMetadata(last_seq, last_offset, delta, timestamp)] if last_offset >= 0 else []
    txn_first_offset = txn_first if txn_first >= 0 else None
    return ProducerStateEntry(
        pid, epoch, coordinator_epoch, timestamp, txn_first_offset, deque(batches)
    )


def snapshot_path(log_dir: str | os.PathLike[str], offset: int) -> Path:
    """`<log_dir>/<offset as 20 digits>.snapshot` (Kafka's `LogFileUtils.producerSnapshotFile`)."""
    assert offset >= 0, offset
    return Path(log_dir) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def offset_from_snapshot_path(path: str | os.PathLike[str]) -> int | None:
    """The offset a snapshot file is named for, or None if the name is not `<digits>.snapshot`."""
    match = _SNAPSHOT_NAME.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None


def list_snapshot_files(log_dir: str | os.PathLike[str]) -> dict[int, Path]:
    """Offset -> path of every snapshot file in `log_dir`, ascending; {} if the dir is missing."""
    directory = Path(log_dir)
    if not directory.is_dir():
        return {}
    found: dict[int, Path] = {}
    for path in directory.iterdir():
        offset = offset_from_snapshot_path(path)
        if offset is not None and path.is_file():
            found[offset] = path
    return dict(sorted(found.items()))


def write_snapshot(path: str | os.PathLike[str], entries: Iterable[ProducerStateEntry]) -> None:
    """Atomically write a snapshot holding `entries` (temp file, fsync, rename, fsync dir)."""
    write_atomically(path, encode_snapshot(entries))


def read_snapshot(path: str | os.PathLike[str]) -> list[ProducerStateEntry]:
    """Read and verify one snapshot file; CorruptSnapshotError names the file and the problem."""
    try:
        return decode_snapshot(Path(path).read_bytes())
    except CorruptSnapshotError as e:
        raise CorruptSnapshotError(f"{path}: {e}") from None


@dataclass(frozen=True, slots=True)
class CorruptSnapshot:
    """A snapshot file that failed to load and was deleted."""

    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class NewestSnapshot:
    """The newest snapshot that loaded (`offset` None: none did) and the corrupt ones deleted
    on the way to it."""

    offset: int | None
    entries: list[ProducerStateEntry]
    corrupt: tuple[CorruptSnapshot, ...]


class SnapshotFiles:
    """The snapshot files of one partition dir, by offset (the `snapshots` map inside Kafka's
    `ProducerStateManager`).

    Invariant: the map is ascending and names files this object wrote or found at the last scan.
    Thread-safety: none; the owning producer state manager serialises calls.
    """

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.log_dir = Path(log_dir)
        self._files = list_snapshot_files(self.log_dir)

    def rescan(self) -> None:
        """Re-read the dir, removing temp files left by a write interrupted by a crash."""
        if self.log_dir.is_dir():
            for leftover in self.log_dir.glob(f"*{SNAPSHOT_SUFFIX}.tmp"):
                leftover.unlink(missing_ok=True)
        self._files = list_snapshot_files(self.log_dir)

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(self._files)

    @property
    def latest_offset(self) -> int | None:
        return next(reversed(self._files), None)

    @property
    def oldest_offset(self) -> int | None:
        return next(iter(self._files), None)

    def path_for(self, offset: int) -> Path | None:
        return self._files.get(offset)

    def write(self, offset: int, entries: Iterable[ProducerStateEntry]) -> Path:
        path = snapshot_path(self.log_dir, offset)
        write_snapshot(path, entries)
        self._files[offset] = path
        self._files = dict(sorted(self._files.items()))
        return path

    def delete(self, offset: int) -> None:
        path = self._files.pop(offset, None)
        if path is not None:
            path.unlink(missing_ok=True)

    def delete_where(self, doomed: Callable[[int], bool]) -> tuple[int, ...]:
        """Delete the snapshots whose offset satisfies `doomed`; returns their offsets."""
        offsets = tuple(o for o in self._files if doomed(o))
        for offset in offsets:
            self.delete(offset)
        return offsets

    def remove_strays(self, segment_base_offsets: Iterable[int]) -> tuple[int, ...]:
        """Delete snapshots matching no segment base offset, except the newest stray when it is
        above every segment (the clean-shutdown snapshot); Kafka's `removeStraySnapshots`."""
        bases = set(segment_base_offsets)
        self._files = list_snapshot_files(self.log_dir)
        strays = [o for o in self._files if o not in bases]
        doomed = strays[:-1]
        if strays and bases and strays[-1] < max(bases):
            doomed.append(strays[-1])
        return self.delete_where(set(doomed).__contains__)

    def read_newest(self) -> NewestSnapshot:
        """Read the newest snapshot, deleting corrupt ones and falling back to older ones."""
        corrupt: list[CorruptSnapshot] = []
        while self._files:
            offset = next(reversed(self._files))
            try:
                entries = read_snapshot(self._files[offset])
            except CorruptSnapshotError as e:
                corrupt.append(CorruptSnapshot(offset, str(e)))
                self.delete(offset)
                continue
            return NewestSnapshot(offset, entries, tuple(corrupt))
        return NewestSnapshot(None, [], tuple(corrupt))
