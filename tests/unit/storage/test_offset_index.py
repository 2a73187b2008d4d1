"""OffsetIndex: Kafka's `.index` format and semantics (cases from Kafka's OffsetIndexTest)."""

from __future__ import annotations

import bisect
import random
import struct

import pytest

from sparklog.storage.abstract_index import (
    CorruptIndexError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
)
from sparklog.storage.offset_index import OffsetIndex, OffsetPosition

BASE_OFFSET = 45


@pytest.fixture
def index(tmp_path):
    idx = OffsetIndex(tmp_path / f"{BASE_OFFSET:020d}.index", BASE_OFFSET, 30 * 8)
    yield idx
    idx.close()


def file_entries(path):
    return list(struct.iter_unpack(">ii", path.read_bytes()))


def test_new_index_creates_empty_file(index):
    assert index.path.read_bytes() == b""
    assert index.entries_count == 0
    assert index.last_offset == BASE_OFFSET
    assert index.max_entries == 30


def test_on_disk_format_is_relative_offset_and_position_big_endian(index):
    index.append(BASE_OFFSET + 3, 0)
    index.append(BASE_OFFSET + 70_000, 4097)
    data = index.path.read_bytes()
    assert data == bytes.fromhex("00000003 00000000 00011170 00001001")
    assert file_entries(index.path) == [(3, 0), (70_000, 4097)]


def test_random_lookup_matches_a_sorted_map(index):
    rng = random.Random(7)
    offsets, positions = [], []
    offset, position = BASE_OFFSET, 0
    for _ in range(index.max_entries):
        offset += rng.randint(1, 15)
        position += rng.randint(1, 15)
        offsets.append(offset)
        positions.append(position)
        index.append(offset, position)
    for offset, position in zip(offsets, positions, strict=True):
        assert index.lookup(offset) == (offset, position)
    for target in range(BASE_OFFSET - 3, offsets[-1] + 3):
        slot = bisect.bisect_right(offsets, target) - 1
        expected = (BASE_OFFSET, 0) if slot < 0 else (offsets[slot], positions[slot])
        assert index.lookup(target) == expected


def test_lookup_extreme_cases(index):
    assert index.lookup(BASE_OFFSET) == (BASE_OFFSET, 0)
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.lookup(BASE_OFFSET) == (BASE_OFFSET, 0)
    assert index.lookup(BASE_OFFSET + index.max_entries) == (BASE_OFFSET + 30, 29)
    assert index.lookup(2**62) == (BASE_OFFSET + 30, 29)
    assert isinstance(index.lookup(0), OffsetPosition)


def test_entry(index):
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i, i)
    assert [index.entry(i) for i in range(30)] == [(BASE_OFFSET + i, i) for i in range(30)]
    assert index.entries() == [(BASE_OFFSET + i, i) for i in range(30)]
    with pytest.raises(IndexError):
        index.entry(30)
    with pytest.raises(IndexError):
        index.entry(-1)


def test_entry_on_empty_index_fails(index):
    with pytest.raises(IndexError):
        index.entry(0)


def test_append_too_many(index):
    for i in range(index.max_entries):
        assert not index.is_full()
        index.append(BASE_OFFSET + i + 1, i)
    assert index.is_full()
    with pytest.raises(ValueError, match="full"):
        index.append(BASE_OFFSET + 31, 31)
    assert len(index.path.read_bytes()) == 30 * 8


def test_append_out_of_order(index):
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(50, 1)
    with pytest.raises(InvalidOffsetError):
        index.append(51, 1)
    assert index.entries() == [(51, 0)]
    assert file_entries(index.path) == [(6, 0)]


def test_append_rejects_decreasing_position(index):
    index.append(51, 100)
    with pytest.raises(ValueError):
        index.append(52, 99)
    index.append(52, 100)  # equal positions are allowed
    assert index.entries_count == 2


def test_append_rejects_offsets_outside_int32_of_base(index):
    assert not index.can_append_offset(BASE_OFFSET - 1)
    assert index.can_append_offset(BASE_OFFSET + 2**31 - 1)
    assert not index.can_append_offset(BASE_OFFSET + 2**31)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE_OFFSET - 1, 0)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE_OFFSET + 2**31, 0)
    assert index.entries_count == 0 and index.path.read_bytes() == b""


def test_fetch_upper_bound_offset(index):
    first, second, third, fourth = (
        OffsetPosition(BASE_OFFSET, 0),
        OffsetPosition(BASE_OFFSET + 1, 10),
        OffsetPosition(BASE_OFFSET + 2, 23),
        OffsetPosition(BASE_OFFSET + 3, 37),
    )
    assert index.fetch_upper_bound_offset(first.position, 5) is None
    for entry in (first, second, third, fourth):
        index.append(entry.offset, entry.position)
    assert index.fetch_upper_bound_offset(first.position, 5) == second
    assert index.fetch_upper_bound_offset(first.position, 10) == second
    assert index.fetch_upper_bound_offset(first.position, 23) == third
    assert index.fetch_upper_bound_offset(first.position, 22) == third
    assert index.fetch_upper_bound_offset(second.position, 24) == fourth
    assert index.fetch_upper_bound_offset(fourth.position, 1) is None
    assert index.fetch_upper_bound_offset(first.position, 200) is None
    assert index.fetch_upper_bound_offset(second.position, 200) is None


def test_reopen_reads_entries_from_disk(index):
    index.append(51, 0)
    index.append(52, 1)
    index.flush()
    index.close()
    reopened = OffsetIndex(index.path, BASE_OFFSET, 30 * 8)
    reopened.sanity_check()
    assert reopened.lookup(51) == (51, 0)
    assert reopened.lookup(52) == (52, 1)
    assert reopened.last_offset == 52
    assert reopened.entries_count == 2
    reopened.append(60, 9)
    assert file_entries(reopened.path) == [(6, 0), (7, 1), (15, 9)]
    reopened.close()


def test_truncate(tmp_path):
    idx = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 10 * 8)
    idx.truncate()
    for i in range(1, 10):
        idx.append(i, i)

    idx.truncate_to(12)
    assert idx.lookup(10) == (9, 9), "unchanged by truncate past the end"
    assert idx.last_offset == 9

    idx.append(10, 10)
    idx.truncate_to(10)
    assert idx.lookup(10) == (9, 9), "truncate at an entry removes it"
    assert idx.last_offset == 9
    idx.append(10, 10)

    idx.truncate_to(9)
    assert idx.lookup(10) == (8, 8)
    assert idx.last_offset == 8
    idx.append(9, 9)

    idx.truncate_to(5)
    assert idx.lookup(10) == (4, 4)
    assert idx.last_offset == 4
    assert file_entries(idx.path) == [(i, i) for i in range(1, 5)]
    idx.append(5, 5)

    idx.truncate()
    assert idx.entries_count == 0
    assert idx.path.read_bytes() == b""
    idx.append(0, 0)
    assert file_entries(idx.path) == [(0, 0)]
    idx.close()


def test_truncate_to_between_entries_keeps_the_lower_one(index):
    index.append(50, 0)
    index.append(60, 100)
    index.truncate_to(55)
    assert index.entries() == [(50, 0)]
    index.truncate_to(BASE_OFFSET)
    assert index.entries() == []


def test_sanity_last_offset_equal_to_base_offset(tmp_path):
    idx = OffsetIndex(tmp_path / "x.index", 20, 10 * 8)
    idx.append(20, 0)
    idx.sanity_check()
    assert file_entries(idx.path) == [(0, 0)]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">ii", 1, 0) + b"\x00\x00\x00", "not a multiple of 8"),
        (struct.pack(">iiii", 5, 0, 5, 10), "entry 1 has offset 50"),
        (struct.pack(">iiii", 5, 0, 3, 10), "entry 1 has offset 48"),
        (struct.pack(">ii", -1, 0), "less than the base offset"),
        (struct.pack(">iiii", 1, 50, 2, 10), "decreasing positions"),
        # Kafka's preallocated-but-unused tail after a crash reads as zero entries.
        (struct.pack(">ii", 7, 100) + bytes(8 * 4), "entry 1 has offset 45"),
    ],
)
def test_sanity_check_detects_corrupt_files(tmp_path, data, message):
    path = tmp_path / "corrupt.index"
    path.write_bytes(data)
    idx = OffsetIndex(path, BASE_OFFSET)
    with pytest.raises(CorruptIndexError, match=message):
        idx.sanity_check()
    idx.reset()  # what the log does before rebuilding
    idx.sanity_check()
    assert path.read_bytes() == b""
    idx.append(BASE_OFFSET + 1, 0)
    assert file_entries(path) == [(1, 0)]


def test_invalid_max_index_size(tmp_path):
    with pytest.raises(ValueError):
        OffsetIndex(tmp_path / "x.index", 0, 7)


def test_rename_keeps_appending_to_renamed_file(index, tmp_path):
    index.append(50, 0)
    new_path = tmp_path / f"{BASE_OFFSET:020d}.index.deleted"
    index.rename(new_path)
    assert index.path == new_path
    assert not (tmp_path / f"{BASE_OFFSET:020d}.index").exists()
    index.append(51, 10)
    index.flush()
    assert file_entries(new_path) == [(5, 0), (6, 10)]


def test_delete(index):
    index.append(50, 0)
    assert index.delete() is True
    assert not index.path.exists()
    assert index.delete() is False


def test_flush_after_close_persists_entries(index):
    index.append(50, 0)
    index.close()
    index.flush()
    assert file_entries(index.path) == [(5, 0)]
    index.append(51, 8)  # reopens its descriptor
    assert file_entries(index.path) == [(5, 0), (6, 8)]


def test_reset_inside_the_except_block_of_a_failed_sanity_check(tmp_path):
    path = tmp_path / "corrupt.index"
    path.write_bytes(struct.pack(">iiii", 5, 0, 5, 10))
    idx = OffsetIndex(path, BASE_OFFSET)
    try:
        idx.sanity_check()
    except CorruptIndexError:
        idx.reset()  # the traceback is still alive here
    assert idx.entries_count == 0
    idx.append(BASE_OFFSET, 0)
