"""The batches in a buffer of concatenated v2 batches, found and checked without a loop per
record (the first half of `arrow_decode`): where each complete batch starts (`walk_batches`),
all headers at once through a big-endian numpy record dtype (`read_headers`), CRC-32C checks
(`verify_crcs`), which batches to decode (`select_batches`: control batches and, for
read_committed, aborted transactions dropped as Kafka's `CompletedFetch` does), and `BatchSpans`,
the selected batches cut into work groups of about `_WORK_BYTES` of records, decompressed group
by group so they are still in cache when `arrow_scan` reads them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sparklog.records.arrow_encode import HEADER_DTYPE
from sparklog.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PRODUCER_ID,
    TRANSACTIONAL_MASK,
    RecordBatch,
    read_header,
)
from sparklog.records.compression import CompressionType, decompress
from sparklog.records.control import ControlRecordType, control_type_of
from sparklog.records.crc import crc32c
from sparklog.records.errors import (
    CorruptRecordError,
    DecompressedTooLargeError,
    InvalidCrcError,
)

_WORK_BYTES = 1 << 20
_NO_BOUNDS = np.empty(0, dtype=np.int64)  # starts/ends of a group whose data is None
_BATCH_LENGTH = struct.Struct(">i")  # at byte 8 of a batch
_MAGIC_OFFSET = 16


def walk_batches(view: memoryview, allow_partial_tail: bool) -> tuple[list[int], int]:
    """Start of every complete batch, and where the complete batches end (as `iter_batches`)."""
    end = len(view)
    pos = 0
    positions = []
    unpack = _BATCH_LENGTH.unpack_from
    while pos < end:
        size = LOG_OVERHEAD + unpack(view, pos + 8)[0] if end - pos >= LOG_OVERHEAD else None
        if size is None or pos + size > end:
            if allow_partial_tail:
                break
            raise CorruptRecordError(
                pos, f"truncated batch: {end - pos} bytes left, batch needs {size or LOG_OVERHEAD}"
            )
        if size < HEADER_SIZE or view[pos + _MAGIC_OFFSET] != MAGIC:
            read_header(view[:end], pos)  # raises what iter_batches would
            raise AssertionError("read_header accepted a batch walk_batches rejected")
        positions.append(pos)
        pos += size
    return positions, pos


def read_headers(view: memoryview, u8: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """All batch headers as one structured array; an invalid one raises as `read_header`."""
    rows = np.lib.stride_tricks.as_strided(
        u8, shape=(len(u8) - HEADER_SIZE + 1, HEADER_SIZE), strides=(1, 1), writeable=False
    )
    headers = np.ascontiguousarray(rows[pos]).view(HEADER_DTYPE).reshape(len(pos))
    bad = (
        (headers["records_count"] < 0)
        | (headers["last_offset_delta"] < 0)
        | ((headers["attributes"] & COMPRESSION_MASK) > max(CompressionType))
    )
    if bad.any():
        read_header(view, int(pos[np.argmax(bad)]))
        raise AssertionError("read_header accepted a header the vectorized check rejected")
    return headers


def verify_crcs(
    view: memoryview, pos: np.ndarray, sizes: np.ndarray, crcs: np.ndarray, core=None
) -> None:
    """Raise InvalidCrcError for the first batch whose CRC-32C does not match."""
    if core is not None:
        first = core.first_bad_crc(view, le64(pos), le64(sizes))
        if first < 0:
            return
        pos, sizes, crcs = pos[first:], sizes[first:], crcs[first:]
    for p, size, stored in zip(pos.tolist(), sizes.tolist(), crcs.tolist(), strict=True):
        actual = crc32c(view[p + ATTRIBUTES_OFFSET : p + size])
        if actual != stored:
            raise InvalidCrcError(
                p + CRC_OFFSET,
                f"CRC-32C mismatch: stored {stored:#010x}, computed {actual:#010x}",
            )


def select_batches(
    view: memoryview,
    pos: np.ndarray,
    sizes: np.ndarray,
    headers: np.ndarray,
    skip_control: bool,
    aborted: list[tuple[int, int]] | None,
) -> np.ndarray | None:
    """Which batches to decode (None: all): control batches out unless asked, aborted ones out."""
    is_control = (headers["attributes"] & CONTROL_MASK) != 0
    if aborted is None and not (skip_control and is_control.any()):
        return None
    keep = ~is_control if skip_control else np.ones(len(pos), dtype=bool)
    if aborted is not None:
        keep &= ~_aborted_batches(view, pos, sizes, headers, is_control, aborted)
    return keep


def _aborted_batches(
    view: memoryview,
    pos: np.ndarray,
    sizes: np.ndarray,
    headers: np.ndarray,
    is_control: np.ndarray,
    aborted: list[tuple[int, int]],
) -> np.ndarray:
    """read_committed: batches of aborted transactions (Kafka's `CompletedFetch` logic).

    An aborted transaction (producer_id, first_offset) becomes active once a batch's last
    offset reaches first_offset; that producer's transactional batches are dropped until its
    ABORT marker.
    """
    pending = sorted(aborted, key=lambda t: t[1])
    active: set[int] = set()
    dropped = np.zeros(len(pos), dtype=bool)
    i = 0
    with_pid = np.flatnonzero(headers["producer_id"] != NO_PRODUCER_ID)
    for b in with_pid.tolist():
        h = headers[b]
        last_offset = int(h["base_offset"]) + int(h["last_offset_delta"])
        while i < len(pending) and pending[i][1] <= last_offset:
            active.add(pending[i][0])
            i += 1
        producer_id = int(h["producer_id"])
        if is_control[b]:
            if _is_abort_marker(view, int(pos[b]), int(sizes[b])):
                active.discard(producer_id)
        elif int(h["attributes"]) & TRANSACTIONAL_MASK and producer_id in active:
            dropped[b] = True
    return dropped


def _is_abort_marker(view: memoryview, pos: int, size: int) -> bool:
    """Whether a control batch's first record is an ABORT marker (`ControlRecordType.parse`)."""
    records = RecordBatch(view[pos : pos + size], pos).records()
    return bool(records) and control_type_of(records[0].key) == ControlRecordType.ABORT


@dataclass(frozen=True, slots=True)
class BatchSpans:
    """The batches to decode: positions, sizes and headers in the input, and their codecs."""

    view: memoryview
    u8: np.ndarray
    positions: np.ndarray
    sizes: np.ndarray
    headers: np.ndarray
    codecs: np.ndarray

    def groups(
        self,
        max_bytes: int | None = None,
        given: list[bytes | None] | None = None,
    ) -> Iterator[tuple[int, int, np.ndarray | None, np.ndarray, np.ndarray]]:
        """Work groups: (lo, hi, data, starts, ends) for runs of whole batches holding about
        `_WORK_BYTES` of records, batch lo + i's records being data[starts[i]:ends[i]].
        `given[i]`, when not None, is batch i's section already decompressed.

        Uncompressed, `data` is the input itself; compressed batches are decompressed one by
        one into a group until it holds `_WORK_BYTES`, just before it is scanned. A batch whose
        section does not decompress comes alone with `data` None: the caller hands it to the
        per-record decoder, so errors surface in batch order whatever their kind; so does a
        batch unpacking to more than `max_bytes` (its reader raises DecompressedTooLargeError).
        """
        ends = np.cumsum(self.sizes)
        compressed = np.flatnonzero(self.codecs)
        lo = 0
        while lo < len(self):
            if self.codecs[lo] == 0:  # a run of uncompressed batches, cut by input bytes
                run_end = (
                    int(compressed[np.searchsorted(compressed, lo)])
                    if compressed.size and compressed[-1] > lo
                    else len(self)
                )
                limit = int(ends[lo] - self.sizes[lo]) + _WORK_BYTES
                hi = min(max(int(np.searchsorted(ends, limit, side="right")), lo + 1), run_end)
                pos = self.positions[lo:hi]
                yield lo, hi, self.u8, pos + HEADER_SIZE, pos + self.sizes[lo:hi]
                lo = hi
                continue
            sections = []
            held = 0
            hi = lo
            while hi < len(self) and self.codecs[hi] and held < _WORK_BYTES:
                p, size = int(self.positions[hi]), int(self.sizes[hi])
                raw = self.view[p + HEADER_SIZE : p + size]
                section = given[hi] if given is not None else None
                try:
                    codec = CompressionType(int(self.codecs[hi]))
                    if section is None:
                        section = decompress(codec, raw, p + HEADER_SIZE, max_bytes) if raw else b""
                except (CorruptRecordError, DecompressedTooLargeError):
                    break  # batch hi starts the next group, where it comes alone
                sections.append(section)
                held += len(section)
                hi += 1
            if not sections:  # batch lo does not decompress: its reader names the error
                yield lo, lo + 1, None, _NO_BOUNDS, _NO_BOUNDS
                lo += 1
                continue
            lengths = np.fromiter(map(len, sections), dtype=np.int64, count=len(sections))
            group_ends = np.cumsum(lengths)
            joined = sections[0] if len(sections) == 1 else b"".join(sections)
            yield lo, hi, np.frombuffer(joined, dtype=np.uint8), group_ends - lengths, group_ends
            lo = hi

    def __len__(self) -> int:
        return len(self.positions)


def le64(a: np.ndarray) -> bytes:
    """int64 values as little-endian bytes (how the native core takes positions and sizes)."""
    return np.ascontiguousarray(a, dtype="<i8").tobytes()
