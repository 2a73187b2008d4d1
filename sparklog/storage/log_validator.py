"""What a leader checks in a client's batches before appending them (Kafka's `LogValidator`).

`analyze_and_validate_records` checks each batch of an append (size, CRC, record count,
control batches; Kafka's `UnifiedLog.analyzeAndValidateRecords`), then, for clients,
`validate_client_records` walks every record of every batch, by the native core in one pass that builds nothing when it is there (`leader_check`:
it only ever says "passes" or "ask the reference"), else, and whenever it is unsure, by
`records.record_walk`: the structure must parse, offset deltas must run 0..n-1 (the
broker never re-encodes, so readers see exactly these deltas), and per record: a key on
compacted topics, a timestamp within `message.timestamp.before/after.max.ms`. Rule breaks found
in records are reported as Kafka reports them (KIP-467): one `RecordError` per record (its
index within the batch and why), the whole append refused with INVALID_RECORD, or
INVALID_TIMESTAMP when a timestamp was at fault.

What Kafka's `LogValidator` rewrites in a batch's header instead of refusing, this one does
too: a CreateTime batch's maxTimestamp is the records' latest timestamp, or -1 (NO_TIMESTAMP)
when none is later than -1, whatever the client wrote (`setMaxTimestamp(CREATE_TIME,
maxBatchTimestamp)`: librdkafka writes 0 there when every record's timestamp is -1). The
validated headers carry it, and `offset_assignment` writes it with a new CRC; no record byte
changes. What would need the records rewritten (offset deltas not 0..n-1, which Kafka re-encodes
in compressed batches and stores as sent in uncompressed ones) is refused: those records would
read back at other offsets than the ones assigned.

Compressed sections are unpacked under a bound (`decompressed_max_bytes`, the broker's
`sparklog.batch.decompressed.max.bytes`, never below the topic's `max.message.bytes`): a
section unpacking to more is refused with RECORD_TOO_LARGE before any record is walked, and
decompression stops at the bound, so a compression bomb costs at most the bound in memory and
the time to unpack it. Kafka has no such bound (its `LogValidator` streams the records, so
memory stays small but the broker accepts the bomb and every reader must unpack it); the code
is the one Kafka gives a batch too large after its validator re-compresses it
(`UnifiedLog.append`: RecordTooLargeException), and the one its Java producer answers by
splitting the batch. Pure: no I/O, the clock is passed in.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from sparklog.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    MessageTooLargeError,
)
from sparklog.records import native
from sparklog.records.batch import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    TimestampType,
    iter_batches,
)
from sparklog.records.compression import DECOMPRESSED_MAX_BYTES, CompressionType, decompress
from sparklog.records.errors import CorruptRecordError, DecompressedTooLargeError
from sparklog.records.record_walk import BatchFacts, walk_records
from sparklog.storage.config import LogConfig
from sparklog.storage.producer_append_info import AppendOrigin

_SHOWN_ERRORS = 3
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1  # Kafka's message lists the first three record errors
#: The broker setting bounding a client batch's decompressed records section (sparklog's own:
#: Kafka has none). Its default is Kafka's `socket.request.max.bytes`: a batch may take no
#: more memory unpacked than the largest request the broker already accepts into memory.
DECOMPRESSED_MAX_BYTES_SETTING = "sparklog.batch.decompressed.max.bytes"
DEFAULT_DECOMPRESSED_MAX_BYTES = 104_857_600
_UNPACKED_NATIVELY = (int(CompressionType.NONE), int(CompressionType.LZ4))


@dataclass(frozen=True, slots=True)
class RecordError:
    """KIP-467: the index of a record within its batch and why it was refused."""

    batch_index: int
    message: str


class RecordValidationError(KafkaError):
    """Records that break a rule, each listed in `record_errors`; raised as one of the two
    subclasses below so that callers can catch Kafka's error classes."""

    def __init__(self, message: str, record_errors: list[RecordError]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class InvalidRecordsError(RecordValidationError, InvalidRecordError):
    """INVALID_RECORD with per-record errors."""


class InvalidTimestampsError(RecordValidationError, InvalidTimestampError):
    """INVALID_TIMESTAMP with per-record errors."""


def validate_client_records(
    buf: bytes | bytearray | memoryview,
    batches: list[tuple[int, BatchHeader]],
    config: LogConfig,
    now_ms: int,
    partition: str,
    decompressed_max_bytes: int = DEFAULT_DECOMPRESSED_MAX_BYTES,
) -> list[tuple[int, BatchHeader]]:
    """Raise unless every record of the client `batches` (positions in `buf`) may be appended;
    returns `batches` with the headers to write (maxTimestamp set as Kafka's validator sets it)."""
    lowest = now_ms - config.message_timestamp_before_max_ms
    highest = now_ms + config.message_timestamp_after_max_ms
    # An uncompressed batch may hold max.message.bytes: a compressed one may unpack to as much.
    bound = min(max(decompressed_max_bytes, config.max_message_bytes), DECOMPRESSED_MAX_BYTES)
    try:
        sections = _sections(buf, batches, bound)  # the bound first, before any record
        core = native.core()
        if core is not None and _pass_natively(
            core, buf, batches, sections, config, lowest, highest, bound
        ):
            return batches  # the core passes only headers whose maxTimestamp is right
        walked = walk_records(buf, batches, bound, sections)
    except DecompressedTooLargeError as e:
        raise MessageTooLargeError(
            f"a batch to {partition} is a compression bomb or far larger than producers build: "
            f"{e}, the most this broker unpacks ({DECOMPRESSED_MAX_BYTES_SETTING}, at least "
            f"max.message.bytes); send smaller batches or raise the setting"
        ) from None
    validated: list[tuple[int, BatchHeader]] = []
    for (pos, header), facts in zip(batches, walked, strict=True):
        if len(facts.offset_deltas) != header.records_count:  # the walk refuses this first
            raise InvalidRecordError(f"a batch to {partition} holds a wrong number of records")
        keyless, late = _bad_records(facts, config, lowest, highest)
        wrong_type = _wrong_timestamp_type(header, config)
        if keyless or late or wrong_type:
            errors = {i: _key_error(partition) for i in keyless}
            for i in late:
                errors[i] = _timestamp_error(int(facts.timestamps[i]), i, lowest, highest)
            if wrong_type:  # every record whose key is fine, as Kafka checks keys first
                for i in range(header.records_count):
                    errors.setdefault(i, _TIMESTAMP_TYPE_ERROR)
            late_or_type = bool(late) or wrong_type
            _refuse([RecordError(i, errors[i]) for i in sorted(errors)], late_or_type, partition)
        _check_offset_deltas(facts, partition)
        if header.timestamp_type == TimestampType.CREATE_TIME:
            ts = facts.timestamps
            latest = int(ts.max()) if facts.vectorized else max(ts)  # no Python loop per record
            latest = max(latest, NO_TIMESTAMP)  # Kafka's maxBatchTimestamp starts at -1
            if latest != header.max_timestamp:
                header = header._replace(max_timestamp=latest)
        validated.append((pos, header))
    return validated


def analyze_and_validate_records(
    buf: bytes | bytearray | memoryview,
    config: LogConfig,
    now_ms: int,
    partition: str,
    *,
    origin: AppendOrigin,
    decompressed_max_bytes: int = DEFAULT_DECOMPRESSED_MAX_BYTES,
) -> list[tuple[int, BatchHeader]]:
    """The batches of an append as (position, header), each checked (Kafka's
    `UnifiedLog.analyzeAndValidateRecords` and `LogValidator`): size against
    max.message.bytes and CRC for all; record counts, control batches and, for clients, every
    record (`validate_client_records`) unless `origin` is REPLICATION (a follower takes what
    its leader accepted). Raises as `Log.append_as_leader` documents; nothing is written."""
    found: list[tuple[int, BatchHeader]] = []
    for batch in iter_batches(buf):
        header = batch.header
        # Followers take what the leader accepted (Kafka does not re-check the size).
        too_large = header.size_in_bytes > config.max_message_bytes
        if too_large and origin is not AppendOrigin.REPLICATION:
            raise MessageTooLargeError(
                f"batch of {header.size_in_bytes} bytes exceeds max.message.bytes "
                f"{config.max_message_bytes} of {partition}"
            )
        batch.ensure_valid()
        if origin is not AppendOrigin.REPLICATION:
            _validate_client_batch(header, origin)
        found.append((batch.position, header))
    if not found:
        raise InvalidRecordError("an append needs at least one record batch")
    if origin is AppendOrigin.CLIENT:
        # the headers as Kafka's validator leaves them (maxTimestamp set)
        found = validate_client_records(
            buf, found, config, now_ms, partition, decompressed_max_bytes
        )
    return found


def _validate_client_batch(header: BatchHeader, origin: AppendOrigin) -> None:
    if header.records_count == 0 or header.records_count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"batch declares {header.records_count} records but lastOffsetDelta "
            f"{header.last_offset_delta}; client batches hold offset deltas 0..n-1"
        )
    if header.is_control != (origin is AppendOrigin.COORDINATOR):
        raise InvalidRecordError(
            "clients may not write control batches"
            if header.is_control
            else "the coordinator appends only control batches"
        )


def _sections(
    buf: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]], bound: int
) -> list[bytes | None]:
    """The records sections the native check cannot unpack itself (gzip, snappy, zstd),
    unpacked under `bound` before any record is checked (DecompressedTooLargeError past it),
    once for the native check and the walk alike. None for the rest: uncompressed and empty
    sections, sections that do not decompress (the walk names that error), and LZ4, which the
    native check and the walk unpack under the same bound (a Python round trip per batch here
    cost LZ4 validation a third of its speed); past it they refuse in batch order."""
    sections: list[bytes | None] = []
    for pos, header in batches:
        section = None
        codec = header.attributes & COMPRESSION_MASK
        if codec not in _UNPACKED_NATIVELY and header.size_in_bytes > HEADER_SIZE:
            raw = memoryview(buf)[pos + HEADER_SIZE : pos + header.size_in_bytes]
            with contextlib.suppress(CorruptRecordError):
                section = decompress(CompressionType(codec), raw, pos + HEADER_SIZE, bound)
        sections.append(section)
    return sections


def _pass_natively(
    core: Any,
    buf: bytes | bytearray | memoryview,
    batches: list[tuple[int, BatchHeader]],
    sections: list[bytes | None],
    config: LogConfig,
    lowest: int,
    highest: int,
    bound: int,
) -> bool:
    """The native core's one-pass check of every batch (no per-record facts built): True when
    all pass every rule below; False sends the append through the reference walk, which names
    what is wrong, or accepts a legal oddity the core leaves to it."""
    low, high = max(lowest, _LONG_MIN), min(highest, _LONG_MAX)
    compact, check_time = config.compact, not config.log_append_time
    for (pos, header), section in zip(batches, sections, strict=True):
        if section is None and header.attributes & COMPRESSION_MASK not in _UNPACKED_NATIVELY:
            return False  # does not decompress (or is empty): the reference says what
        if _wrong_timestamp_type(header, config):
            return False
        size = header.size_in_bytes
        args = (buf, pos, size, section, low, high, compact, check_time, bound)
        if not core.leader_check(*args):
            return False
    return True


def _bad_records(
    facts: BatchFacts, config: LogConfig, lowest: int, highest: int
) -> tuple[list[int], list[int]]:
    """Indexes of keyless records on a compacted topic, and of other records whose CreateTime
    is out of range (as Kafka, a keyless record's timestamp is not checked too)."""
    compact, check_time = config.compact, not config.log_append_time
    if facts.vectorized:
        nulls, ts = facts.key_nulls, facts.timestamps
        keyless = np.flatnonzero(nulls).tolist() if compact else []
        if not check_time:
            return keyless, []
        low, high = max(lowest, _LONG_MIN), min(highest, _LONG_MAX)
        out = (ts != -1) & ((ts < low) | (ts > high))
        if compact:
            out &= ~nulls
        return keyless, np.flatnonzero(out).tolist()
    keyless, late = [], []
    for i, (ts, null) in enumerate(zip(facts.timestamps, facts.key_nulls, strict=True)):
        if null and compact:
            keyless.append(i)
        elif check_time and ts != -1 and not lowest <= ts <= highest:
            late.append(i)
    return keyless, late


def _wrong_timestamp_type(header: BatchHeader, config: LogConfig) -> bool:
    """Whether a client batch's LogAppendTime flag is refused (INVALID_TIMESTAMP), as Kafka's
    `LogValidator.validateTimestamp` refuses it: always on a LogAppendTime topic (the broker
    stamps the time), and on a CreateTime topic when its maxTimestamp is -1 (the time every
    record then reads). On a CreateTime topic with a maxTimestamp that is checked as each
    record's CreateTime, and the flag is cleared on append (`offset_assignment`)."""
    return bool(header.attributes & TIMESTAMP_TYPE_MASK) and (
        config.log_append_time or header.max_timestamp == NO_TIMESTAMP
    )


#: Kafka's record error for a producer's LogAppendTime flag.
_TIMESTAMP_TYPE_ERROR = (
    "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime."
)


def _key_error(partition: str) -> str:
    return f"Compacted topic cannot accept message without key in topic partition {partition}."


def _timestamp_error(ts: int, offset: int, lowest: int, highest: int) -> str:
    return (
        f"Timestamp {ts} of message with offset {offset} is out of range. "
        f"The timestamp should be within [{lowest}, {highest}]"
    )


def _refuse(errors: list[RecordError], late: bool, partition: str) -> None:
    shown = ", ".join(f"[{e.batch_index}] {e.message}" for e in errors[:_SHOWN_ERRORS])
    if late:
        raise InvalidTimestampsError(
            f"One or more records to {partition} have been rejected due to invalid timestamp: "
            f"{shown}",
            errors,
        )
    raise InvalidRecordsError(
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: {shown}",
        errors,
    )


def _check_offset_deltas(facts: BatchFacts, partition: str) -> None:
    deltas = facts.offset_deltas
    if facts.vectorized:
        wrong = np.flatnonzero(deltas != np.arange(len(deltas))).tolist()
    else:
        wrong = [i for i, d in enumerate(deltas) if d != i]
    if wrong:
        raise InvalidRecordsError(
            f"record {wrong[0]} of a batch to {partition} has offset delta "
            f"{int(deltas[wrong[0]])}; client batches number their records 0..n-1",
            [RecordError(i, "offset delta out of sequence") for i in wrong],
        )
