"""TimeIndex: Kafka's `.timeindex` format and semantics (cases from Kafka's TimeIndexTest)."""

from __future__ import annotations

import struct

import pytest

from sparklog.storage.abstract_index import (
    CorruptIndexError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
)
from sparklog.storage.time_index import TimeIndex, TimestampOffset
from sparklog.structs import NO_TIMESTAMP

MAX_ENTRIES = 30
BASE_OFFSET = 45


@pytest.fixture
def idx(tmp_path):
    index = TimeIndex(tmp_path / f"{BASE_OFFSET:020d}.timeindex", BASE_OFFSET, MAX_ENTRIES * 12)
    yield index
    index.close()


def append_entries(index, count):
    for i in range(1, count + 1):
        index.maybe_append(i * 10, i * 10 + BASE_OFFSET)


def file_entries(path):
    return list(struct.iter_unpack(">qi", path.read_bytes()))


def test_on_disk_format_is_timestamp_and_relative_offset_big_endian(idx):
    idx.maybe_append(1_700_000_000_000, BASE_OFFSET + 2)
    idx.maybe_append(1_700_000_000_001, BASE_OFFSET + 70_000)
    assert idx.path.read_bytes() == bytes.fromhex(
        "0000018bcfe56800 00000002 0000018bcfe56801 00011170"
    )
    assert file_entries(idx.path) == [(1_700_000_000_000, 2), (1_700_000_000_001, 70_000)]


def test_lookup(idx):
    assert idx.lookup(100) == (-1, BASE_OFFSET)
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.lookup(9) == (-1, BASE_OFFSET), "smaller than the earliest entry"
    assert idx.lookup(25) == (20, 65), "between two entries"
    assert idx.lookup(30) == (30, 75), "equal to an entry"
    assert idx.lookup(10**12) == (290, 335)
    assert isinstance(idx.lookup(30), TimestampOffset)


def test_entry(idx):
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.entry(0) == (10, 55)
    assert idx.entry(1) == (20, 65)
    assert idx.entry(2) == (30, 75)
    assert idx.entry(3) == (40, 85)
    assert len(idx.entries()) == MAX_ENTRIES - 1


def test_entry_overflow(idx):
    with pytest.raises(IndexError):
        idx.entry(0)


def test_truncate(idx):
    append_entries(idx, MAX_ENTRIES - 1)
    idx.truncate()
    assert idx.entries_count == 0
    assert idx.path.read_bytes() == b""

    append_entries(idx, MAX_ENTRIES - 1)
    idx.truncate_to(10 + BASE_OFFSET)
    assert idx.entries_count == 0


def test_truncate_to_keeps_entries_below_offset(idx):
    append_entries(idx, 5)  # offsets 55, 65, 75, 85, 95
    idx.truncate_to(80)
    assert idx.entries() == [(10, 55), (20, 65), (30, 75)]
    assert idx.last_entry == (30, 75)
    idx.truncate_to(75)
    assert idx.entries() == [(10, 55), (20, 65)]
    idx.truncate_to(1_000)
    assert file_entries(idx.path) == [(10, 10), (20, 20)]


def test_append(idx):
    append_entries(idx, MAX_ENTRIES - 1)
    with pytest.raises(ValueError, match="full"):
        idx.maybe_append(10_000, 1_000)
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(10_000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    idx.maybe_append(10_000, 1_000, skip_full_check=True)
    assert idx.last_entry == (10_000, 1_000)
    assert idx.entries_count == MAX_ENTRIES


def test_maybe_append_skips_timestamps_not_above_last(idx):
    idx.maybe_append(NO_TIMESTAMP, BASE_OFFSET)  # no timestamp: never indexed
    assert idx.entries_count == 0
    idx.maybe_append(100, 50)
    idx.maybe_append(100, 50)  # the same entry again, as a roll does: ignored
    idx.maybe_append(100, 60)
    assert idx.entries() == [(100, 50)]
    idx.maybe_append(101, 50)  # same offset, larger timestamp: appended
    assert file_entries(idx.path) == [(100, 5), (101, 5)]


def test_maybe_append_rejects_going_back_in_time(idx):
    idx.maybe_append(100, 50)
    with pytest.raises(ValueError, match="timestamp"):
        idx.maybe_append(99, 51)
    with pytest.raises(IndexOffsetOverflowError):
        idx.maybe_append(200, BASE_OFFSET + 2**31)
    assert idx.entries() == [(100, 50)]


def test_is_full_reserves_one_slot_for_the_roll(idx):
    assert not idx.is_full()
    append_entries(idx, MAX_ENTRIES - 2)
    assert not idx.is_full()
    idx.maybe_append(10_000, 10_000)
    assert idx.is_full()


def test_last_entry(idx):
    assert idx.last_entry == (NO_TIMESTAMP, BASE_OFFSET)
    idx.maybe_append(1, 1 + BASE_OFFSET)
    assert idx.last_entry == (1, BASE_OFFSET + 1)


def test_reload_from_disk(idx):
    append_entries(idx, 5)
    idx.flush()
    idx.close()
    reopened = TimeIndex(idx.path, BASE_OFFSET, MAX_ENTRIES * 12)
    reopened.sanity_check()
    assert reopened.entries() == idx.entries()
    assert reopened.last_entry == (50, 95)
    assert reopened.lookup(35) == (30, 75)
    reopened.maybe_append(60, 105)
    assert file_entries(reopened.path)[-1] == (60, 60)
    reopened.close()


def test_sanity_check_accepts_empty_and_valid(idx):
    idx.sanity_check()
    append_entries(idx, 5)
    idx.sanity_check()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">qi", 10, 1) + b"\x00", "not a multiple of 12"),
        (struct.pack(">qiqi", 10, 1, 5, 2), "entry 1 has timestamp 5"),
        (struct.pack(">qiqi", 10, 1, 10, 2), "entry 1 has timestamp 10"),
        (struct.pack(">qi", 10, -1), "less than the base offset"),
        (struct.pack(">qiqi", 10, 5, 20, 4), "decreasing offsets"),
        # Kafka's preallocated-but-unused tail after a crash reads as zero entries.
        (struct.pack(">qi", 10, 1) + bytes(12 * 3), "entry 1 has timestamp 0"),
    ],
)
def test_sanity_check_detects_corrupt_files(tmp_path, data, message):
    path = tmp_path / "corrupt.timeindex"
    path.write_bytes(data)
    index = TimeIndex(path, BASE_OFFSET)
    with pytest.raises(CorruptIndexError, match=message):
        index.sanity_check()
    index.reset()
    index.sanity_check()
    assert path.read_bytes() == b""


def test_rename_and_delete(idx, tmp_path):
    append_entries(idx, 2)
    new_path = tmp_path / f"{BASE_OFFSET:020d}.timeindex.swap"
    idx.rename(new_path)
    idx.maybe_append(1_000, 1_000)
    assert len(file_entries(new_path)) == 3
    assert idx.delete() is True
    assert not new_path.exists()


def test_reset_inside_the_except_block_of_a_failed_sanity_check(tmp_path):
    path = tmp_path / "corrupt.timeindex"
    path.write_bytes(struct.pack(">qiqi", 10, 1, 5, 2))
    index = TimeIndex(path, BASE_OFFSET)
    try:
        index.sanity_check()
    except CorruptIndexError:
        index.reset()  # the traceback is still alive here
    assert index.entries_count == 0
    index.maybe_append(1, BASE_OFFSET)
