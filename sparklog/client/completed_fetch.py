"""The records one Fetch returned for one partition, handed out as positions advance (Kafka's
`CompletedFetch`), per record or as Arrow.

Theory of operation. The bytes are decoded lazily: `next_records` walks the batches one by
one (checking each CRC-32C when `check.crcs`), `next_arrow` decodes the whole response at once,
vectorized. Control batches and, with read_committed, aborted transactions are skipped.

Corrupt data. A batch whose CRC does not match, whose bytes do not decode, or a non-empty
response holding no complete batch at all (a damaged length field: a broker that follows
KIP-74 always sends the first batch whole, Kafka's `FetchCollector.initialize`) ends the
fetch there: every record of the batches before it is still handed out, then `exhausted` is
set with `corrupt` naming what is wrong, and the position returned is the bad batch's start.
The fetcher turns that into a `CorruptBatchError` raised until the application seeks. Nothing
past a bad batch is delivered, since its length cannot be trusted to find the next batch.

Not thread-safe: the consumer's poll thread owns it.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.records import iter_batches
from sparklog.records.arrow_codec import DecodedBatches, read_batches
from sparklog.records.batch import RecordBatch
from sparklog.records.batch_header import batch_size_at
from sparklog.records.control import ControlRecordType, control_type_of
from sparklog.records.errors import CorruptRecordError, DecompressedTooLargeError
from sparklog.structs import TopicPartition

#: A batch that cannot be read: damaged, or unpacking past the readers' bound (2 GiB - 1: a
#: broker cannot make a consumer hold more for one batch, issue 27); both stop the partition.
_UNREADABLE = (CorruptRecordError, DecompressedTooLargeError)
#: `corrupt` of a non-empty response without one complete batch
NO_COMPLETE_BATCH = (
    "the broker sent bytes but not one complete record batch (a damaged batch length field)"
)


@dataclass(slots=True)
class CompletedFetch:
    """The records one Fetch returned for one partition, consumed as positions advance."""

    tp: TopicPartition
    fetch_offset: int
    records: memoryview
    aborted: list[tuple[int, int]] | None
    check_crcs: bool
    _batches: Iterator[RecordBatch] | None = None
    _batch_end: int = -1
    _seen_batch: bool = False
    _pending: deque = field(default_factory=deque)
    _aborted_active: set[int] = field(default_factory=set)
    _aborted_queue: list[tuple[int, int]] = field(default_factory=list)
    _arrow: pa.RecordBatch | None = None
    _arrow_next_offset: int = -1
    _epochs: tuple[list[int], list[int]] | None = None  # batch base offsets, leader epochs
    _continuation: int = -1
    exhausted: bool = False
    prefetched: bool = False  # the Fetch for the offset after this one's data is sent
    #: why the batch after the records handed out cannot be read (None: no corruption found)
    corrupt: str | None = None

    def _scan_headers(self) -> tuple[list[int], list[int]]:
        """One pass over the batch headers (no record decoded): base offsets and leader epochs
        for `epoch_before`, and the offset after the last complete batch for pipelining."""
        if self._epochs is None:
            bases: list[int] = []
            epochs: list[int] = []
            try:
                for batch in iter_batches(self.records, allow_partial_tail=True):
                    bases.append(batch.header.base_offset)
                    epochs.append(batch.header.partition_leader_epoch)
                    self._continuation = batch.header.next_offset
            except _UNREADABLE:
                self._continuation = -1  # decoding names the error; no prefetch past bad bytes
            self._epochs = (bases, epochs)
        return self._epochs

    def next_fetch_offset(self) -> int:
        """The offset after the last complete batch, or -1 when there is none: where the next
        Fetch of the partition starts."""
        self._scan_headers()
        return self._continuation

    def epoch_before(self, position: int, default: int) -> int:
        """The leader epoch of the batch holding offset `position - 1`, or `default` when
        this fetch does not reach back that far (Kafka's `CompletedFetch.lastEpoch`)."""
        bases, epochs = self._scan_headers()
        i = bisect.bisect_right(bases, position - 1) - 1
        return epochs[i] if i >= 0 and position > self.fetch_offset else default

    # ------------------------------------------------------------------ per record

    def next_records(self, position: int, limit: int) -> tuple[list[Any], int]:
        """Up to `limit` records at or after `position` and the position after them."""
        if self._batches is None:
            self._batches = iter_batches(self.records, allow_partial_tail=True)
            self._aborted_queue = sorted(self.aborted or (), key=lambda t: t[1])
        out: list[Any] = []
        while len(out) < limit:
            if self._pending:
                record = self._pending.popleft()
                if record.offset >= position:
                    out.append(record)
                    position = record.offset + 1
                continue
            # The current batch is used up: move past its end (compacted gaps, control batches).
            position = max(position, self._batch_end)
            try:
                batch = self._next_batch()
            except _UNREADABLE as e:
                self._stop(e.reason)  # Kafka checks a whole batch before returning any record
                break
            if batch is None:
                if not self._seen_batch and len(self.records):
                    self._stop(NO_COMPLETE_BATCH)
                self.exhausted = True
                break
        if not self._pending:
            position = max(position, self._batch_end)
        return out, position

    def _next_batch(self) -> RecordBatch | None:
        """The next complete batch, its records queued unless skipped; raises
        CorruptRecordError for a batch that fails its CRC check or does not decode."""
        assert self._batches is not None
        batch = next(self._batches, None)
        if batch is None:
            return None
        if self.check_crcs:
            batch.ensure_valid()
        records = None if self._skip(batch) else batch.records()
        self._seen_batch = True
        self._batch_end = batch.header.next_offset
        if records:
            self._pending.extend(records)
        return batch

    def _stop(self, reason: str) -> None:
        self.corrupt = reason
        self.exhausted = True

    def _skip(self, batch: RecordBatch) -> bool:
        """Control batches always; with read_committed, batches of aborted transactions."""
        h = batch.header
        if self.aborted is not None and h.has_producer_id:
            while self._aborted_queue and self._aborted_queue[0][1] <= h.last_offset:
                self._aborted_active.add(self._aborted_queue.pop(0)[0])
            if h.is_control:
                records = batch.records()
                if records and control_type_of(records[0].key) == ControlRecordType.ABORT:
                    self._aborted_active.discard(h.producer_id)
            elif h.is_transactional and h.producer_id in self._aborted_active:
                return True
        return h.is_control

    # ---------------------------------------------------------------------- Arrow

    def next_arrow(
        self, position: int, limit: int, include_headers: bool
    ) -> tuple[pa.RecordBatch, int]:
        """Up to `limit` records at or after `position` as Arrow, and the position after them."""
        if self._arrow is None:
            decoded = self._decode_good_prefix(include_headers)
            self._arrow = decoded.records
            self._arrow_next_offset = decoded.next_offset
        table = self._arrow
        offsets = table.column("offset")
        start = int(np.searchsorted(offsets.to_numpy(), position)) if len(table) else 0
        rows = table.slice(start, limit)
        if start + len(rows) >= len(table):
            self.exhausted = True
            end = max(position, self._arrow_next_offset)
            if len(rows):
                end = max(end, int(rows.column("offset")[-1].as_py()) + 1)
            return rows, end
        return rows, int(rows.column("offset")[-1].as_py()) + 1

    def _decode_good_prefix(self, include_headers: bool) -> DecodedBatches:
        """Every batch before the first bad one, decoded; `corrupt` says why that one is bad.

        The vectorized decoder refuses a whole buffer for one bad batch, so the buffer is cut
        at the start of the batch it names and decoded again, until it decodes: its checks run
        in phases (framing, CRCs, records), so a later batch may be named before an earlier
        one, and the last cut is the earliest bad batch.
        """
        end = len(self.records)
        while True:
            try:
                decoded = read_batches(
                    self.records[:end],
                    include_headers=include_headers,
                    check_crcs=self.check_crcs,
                    aborted=self.aborted,
                )
            except _UNREADABLE as e:
                self.corrupt = e.reason
                end = _start_of_batch_at(self.records, e.position, end)
                continue
            if self.corrupt is None and not decoded.valid_bytes and len(self.records):
                self.corrupt = NO_COMPLETE_BATCH
            return decoded


def _start_of_batch_at(view: memoryview, position: int, end: int) -> int:
    """The start of the batch holding byte `position` of `view[:end]`, walking the batches by
    their length fields from the start; always below `end`, so each cut shortens the buffer."""
    start = 0
    while True:
        size = batch_size_at(view[:end], start)
        if size is None or size <= 0 or start + size > position or start + size >= end:
            return start
        start += size
