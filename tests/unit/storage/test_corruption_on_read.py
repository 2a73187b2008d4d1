"""A batch damaged on disk after it was written (a flipped bit, a torn header in an old segment)
is caught by its CRC-32C when read: readers get the good batches before it, then
CORRUPT_MESSAGE, and never the damaged bytes (issue 14, disk faults)."""

from __future__ import annotations

import logging
import os

import pytest

from sparklog.records import CorruptRecordError, SimpleRecord, build_batch, iter_batches
from sparklog.records.batch import ATTRIBUTES_OFFSET, LENGTH_OFFSET
from sparklog.storage.log import Log

NOW = 1_700_000_000_000


def values_of(data: bytes) -> list[bytes]:
    return [r.value for b in iter_batches(data) for r in b.records()]


@pytest.fixture
def three_batches(tmp_path):
    """A log holding batches [a0, a1], [b0, b1], [c0]; returns (log, positions of each batch)."""
    log = Log.open(tmp_path / "t-0", now_ms=NOW)
    for prefix, n in (("a", 2), ("b", 2), ("c", 1)):
        records = [SimpleRecord(f"{prefix}{i}".encode(), None, NOW) for i in range(n)]
        log.append_as_leader(build_batch(records), leader_epoch=0, now_ms=NOW)
    log.flush()
    data = log.read(0, 1 << 20).records
    positions, at = [], 0
    for b in iter_batches(data):
        positions.append(at)
        at += len(b.data)
    yield log, positions
    log.close()


def damage(log: Log, position: int, xor: int = 0x40) -> None:
    path = log.active_segment.log_path
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ xor]))
        f.flush()
        os.fsync(f.fileno())


def test_a_flipped_bit_in_a_value_stops_reads_before_the_damaged_batch(three_batches, caplog):
    log, positions = three_batches
    damage(log, positions[2] - 3)  # inside batch b's last record
    assert values_of(log.read(0, 1 << 20).records) == [b"a0", b"a1"]
    with caplog.at_level(logging.ERROR), pytest.raises(CorruptRecordError, match="CRC"):
        log.read(2, 1 << 20)
    assert "corrupt on disk" in caplog.text and "re-fetches from the leader" in caplog.text
    assert values_of(log.read(4, 1 << 20).records) == [b"c0"], "batches after it still serve"


def test_a_damaged_header_of_a_later_batch_ends_the_read_there(three_batches):
    log, positions = three_batches
    damage(log, positions[1] + ATTRIBUTES_OFFSET, xor=0x01)  # batch b's attributes: CRC'd bytes
    assert values_of(log.read(0, 1 << 20).records) == [b"a0", b"a1"]
    with pytest.raises(CorruptRecordError):
        log.read(2, 1 << 20)


def test_a_damaged_length_field_is_refused_not_followed(three_batches):
    log, positions = three_batches
    damage(log, positions[1] + LENGTH_OFFSET, xor=0x80)  # batchLength turns negative
    assert values_of(log.read(0, 1 << 20).records) == [b"a0", b"a1"]
    with pytest.raises(CorruptRecordError):
        log.read(2, 1 << 20)


def test_an_undamaged_log_reads_whole(three_batches):
    log, _ = three_batches
    assert values_of(log.read(0, 1 << 20).records) == [b"a0", b"a1", b"b0", b"b1", b"c0"]
