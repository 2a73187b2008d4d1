"""Zero-copy reads: large fetches are file slices for sendfile, with the same bytes and the
same CRC checks as a copying read (a damaged batch is never handed out)."""

from __future__ import annotations

import pytest

from sparklog.records import CorruptRecordError, SimpleRecord, build_batch, iter_batches
from sparklog.records.file_records import ZERO_COPY_MIN_BYTES, FileRecords
from sparklog.storage.log import Log

from .test_corruption_on_read import damage

NOW = 1_700_000_000_000
VALUE = 40_000  # three batches of one such value exceed ZERO_COPY_MIN_BYTES


@pytest.fixture
def big_batches(tmp_path):
    log = Log.open(tmp_path / "t-0", now_ms=NOW)
    for i in range(3):
        value = bytes([65 + i]) * VALUE
        log.append_as_leader(
            build_batch([SimpleRecord(value, None, NOW)]), leader_epoch=0, now_ms=NOW
        )
    log.flush()
    positions, at = [], 0
    for b in iter_batches(log.read(0, 1 << 20).records):
        positions.append(at)
        at += len(b.data)
    yield log, positions
    log.close()


def test_a_large_read_is_a_file_slice_with_the_bytes_of_a_copying_read(big_batches):
    log, _ = big_batches
    copied = log.read(0, 1 << 20).records
    sliced = log.read(0, 1 << 20, zero_copy=True).records
    assert isinstance(copied, bytes) and len(copied) > ZERO_COPY_MIN_BYTES
    assert isinstance(sliced, FileRecords)
    assert len(sliced) == len(copied) and sliced.tobytes() == copied
    sliced.close()


def test_a_small_read_is_copied(big_batches):
    log, _ = big_batches
    one = log.read(0, 1, zero_copy=True).records  # one batch (KIP-74), below the threshold
    assert isinstance(one, bytes) and len(one) < ZERO_COPY_MIN_BYTES


def test_a_damaged_batch_ends_the_slice_before_it(big_batches):
    log, positions = big_batches
    damage(log, positions[2] + 100)  # inside the third batch's value
    sliced = log.read(0, 1 << 20, zero_copy=True).records
    assert isinstance(sliced, FileRecords)
    assert [r.value[:1] for b in iter_batches(sliced.tobytes()) for r in b.records()] == [
        b"A",
        b"B",
    ]
    sliced.close()
    damage(log, positions[0] + 100)
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.read(0, 1 << 20, zero_copy=True)


def test_a_slice_stays_readable_after_its_segment_is_deleted(big_batches):
    log, _ = big_batches
    expected = log.read(0, 1 << 20).records
    sliced = log.read(0, 1 << 20, zero_copy=True).records
    log.active_segment.log_path.unlink()
    log.close()
    assert sliced.tobytes() == expected
    sliced.close()


def test_out_of_descriptors_copies_instead_of_failing_the_disk(big_batches, monkeypatch):
    import errno
    import os

    log, _ = big_batches
    expected = log.read(0, 1 << 20).records

    def no_descriptor(fd):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "dup", no_descriptor)
    assert log.read(0, 1 << 20, zero_copy=True).records == expected
