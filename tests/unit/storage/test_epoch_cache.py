"""LeaderEpochFileCache: Kafka's semantics (cases mirror Kafka's LeaderEpochFileCacheTest)."""

from __future__ import annotations

import pytest

from sparklog.storage.checkpoint import CorruptCheckpointError
from sparklog.storage.epoch_cache import EpochEntry, LeaderEpochFileCache
from sparklog.structs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "leader-epoch-checkpoint"


@pytest.fixture
def cache(path):
    return LeaderEpochFileCache(path)


def assign_all(cache, *pairs):
    for epoch, start_offset in pairs:
        cache.assign(epoch, start_offset)


def test_previous_epoch(cache):
    assert cache.previous_epoch() is None
    cache.assign(2, 10)
    assert cache.previous_epoch() is None
    cache.assign(4, 15)
    assert cache.previous_epoch() == 2
    cache.assign(10, 20)
    assert cache.previous_epoch() == 4
    cache.truncate_from_end(18)
    assert cache.previous_epoch() == 2


def test_find_previous_and_next_epoch(cache):
    assert cache.previous_epoch(2) is None
    assign_all(cache, (0, 0), (2, 100), (5, 200))
    assert cache.previous_epoch(2) == 0
    assert cache.previous_epoch(3) == 2
    assert cache.previous_epoch(0) is None
    assert cache.next_epoch(-1) == 0
    assert cache.next_epoch(0) == 2
    assert cache.next_epoch(2) == 5
    assert cache.next_epoch(5) is None
    assert cache.next_epoch(100) is None
    assert cache.epoch_entry(2) == EpochEntry(2, 100)
    assert cache.epoch_entry(3) is None


def test_add_epoch_and_message_offset_to_cache(cache, path):
    cache.assign(2, 10)
    assert cache.latest_epoch == 2
    assert cache.entries() == [EpochEntry(2, 10)]
    assert cache.end_offset_for(2, 11) == (2, 11)
    assert path.read_bytes() == b"0\n1\n2 10\n"


def test_return_log_end_offset_if_latest_epoch_requested(cache):
    cache.assign(2, 11)
    cache.assign(2, 12)
    assert cache.end_offset_for(2, 14) == (2, 14)


def test_undefined_epoch_requested(cache):
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED
    assign_all(cache, (2, 11), (3, 12))
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_not_overwrite_start_offset_once_assigned(cache):
    cache.assign(2, 9)
    cache.assign(2, 10)
    assert cache.entries() == [EpochEntry(2, 9)]
    cache.assign(2, 6)  # an earlier start for the latest epoch does replace it
    assert cache.entries() == [EpochEntry(2, 6)]


def test_enforce_monotonically_increasing_start_offsets(cache):
    cache.assign(2, 9)
    cache.assign(3, 9)
    assert cache.entries() == [EpochEntry(3, 9)]


def test_unsupported_if_no_epoch_recorded(cache):
    assert cache.end_offset_for(0, 0) == UNDEFINED
    assert cache.end_offset_for(7, 0) == UNDEFINED
    assert cache.latest_epoch is None
    assert cache.latest_entry is None
    assert cache.earliest_entry is None
    assert not cache.non_empty()


def test_requested_epoch_below_first_epoch_returns_first_start_offset(cache):
    # Kafka's endOffsetFor: the follower truncates to where this log starts.
    assign_all(cache, (5, 11), (6, 12), (7, 13))
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_truncate_if_matching_epoch_but_earlier_starting_offset(cache):
    assign_all(cache, (5, 11), (6, 12), (7, 13))
    cache.assign(7, 12)
    assert cache.entries() == [EpochEntry(5, 11), EpochEntry(7, 12)]
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


def test_first_offset_of_subsequent_epoch_for_previous_epoch(cache):
    assign_all(cache, (1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16))
    assert cache.end_offset_for(2, 17) == (2, 15)


def test_next_available_epoch_if_no_exact_epoch(cache):
    assign_all(cache, (0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)


def test_not_update_if_epoch_and_start_offset_did_not_change(cache):
    cache.assign(2, 6)
    cache.assign(2, 7)
    assert cache.entries() == [EpochEntry(2, 6)]


def test_invalid_offset_if_epoch_not_tracked(cache):
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEFINED


def test_epochs_that_do_not_start_from_zero(cache):
    cache.assign(2, 6)
    assert cache.end_offset_for(2, 7) == (2, 7)
    assert cache.entries() == [EpochEntry(2, 6)]


def test_persist_epochs_between_instances(path):
    LeaderEpochFileCache(path).assign(2, 6)
    assert LeaderEpochFileCache(path).entries() == [EpochEntry(2, 6)]


def test_enforce_monotonically_increasing_epochs(cache):
    assign_all(cache, (1, 5), (2, 6), (1, 7))
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED
    assert cache.entries() == [EpochEntry(1, 7)]


def test_enforce_offsets_increase_monotonically(cache):
    cache.assign(2, 6)
    cache.assign(3, 5)
    assert cache.entries() == [EpochEntry(3, 5)]


def test_track_epochs_as_leaders_change_many_times(cache):
    cache.assign(0, 0)
    cache.assign(1, 0)
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 0) == (1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)
    assert cache.end_offset_for(1, 5) == (1, 5)
    assert cache.end_offset_for(0, 5) == (0, 0)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == (2, 10)
    assert cache.end_offset_for(1, 10) == (1, 5)
    assert cache.end_offset_for(0, 10) == (0, 0)


def test_track_epochs_as_follower_receives_many_messages(cache):
    assign_all(cache, (0, 0), (0, 1), (0, 2))
    assert cache.end_offset_for(0, 3) == (0, 3)
    assign_all(cache, (1, 3), (1, 4), (1, 5))
    assert cache.end_offset_for(1, 6) == (1, 6)
    assign_all(cache, (2, 6), (2, 7), (2, 8))
    assert cache.latest_epoch == 2
    assert cache.end_offset_for(2, 9) == (2, 9)
    assert cache.end_offset_for(0, 9) == (0, 3)
    assert cache.end_offset_for(1, 9) == (1, 6)


@pytest.mark.parametrize(
    ("end_offset", "expected"),
    [
        (8, [(2, 6)]),  # drop entries on the epoch boundary
        (9, [(2, 6), (3, 8)]),  # drop entries between epoch boundaries
        (12, [(2, 6), (3, 8), (4, 11)]),
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
        (6, []),
    ],
)
def test_truncate_from_end(cache, path, end_offset, expected):
    assign_all(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(end_offset)
    assert cache.entries() == [EpochEntry(*pair) for pair in expected]
    assert LeaderEpochFileCache(path).entries() == cache.entries()


@pytest.mark.parametrize(
    ("start_offset", "expected"),
    [
        (8, [(3, 8), (4, 11)]),  # preserve the reset offset when one exists
        (1, [(2, 6), (3, 8), (4, 11)]),  # too early: nothing cleared
        (6, [(2, 6), (3, 8), (4, 11)]),  # the first offset: nothing cleared
        (11, [(4, 11)]),  # keep the latest epoch
        (9, [(3, 9), (4, 11)]),  # move the start between boundaries
        (15, [(4, 15)]),  # keep the latest epoch and move its start
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_start(cache, path, start_offset, expected):
    assign_all(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(start_offset)
    assert cache.entries() == [EpochEntry(*pair) for pair in expected]
    assert LeaderEpochFileCache(path).entries() == cache.entries()


def test_update_offset_between_first_two_epoch_boundaries_on_clear_earliest(cache):
    assign_all(cache, (0, 0), (1, 7), (2, 10))
    cache.truncate_from_start(5)
    assert cache.entries() == [EpochEntry(0, 5), EpochEntry(1, 7), EpochEntry(2, 10)]


def test_clear_all_entries(cache, path):
    assign_all(cache, (2, 6), (3, 8), (4, 11))
    cache.clear_and_flush()
    assert cache.entries() == []
    assert path.read_bytes() == b"0\n0\n"


def test_truncations_on_empty_cache(cache, path):
    cache.truncate_from_start(7)
    cache.truncate_from_end(7)
    assert cache.entries() == []
    assert not path.exists()


def test_epoch_for_offset(cache):
    assign_all(cache, (0, 10), (1, 20), (5, 30))
    assert cache.epoch_for_offset(25) == 1
    assert cache.epoch_for_offset(20) == 1
    assert cache.epoch_for_offset(30) == 5
    assert cache.epoch_for_offset(50) == 5
    assert cache.epoch_for_offset(5) is None


def test_write_checkpoint_on_truncation(cache, path):
    assign_all(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(11)
    cache.truncate_from_start(8)
    assert path.read_bytes() == b"0\n1\n3 8\n"


def test_earliest_and_latest_entries(cache):
    assign_all(cache, (2, 6), (3, 8))
    assert cache.earliest_entry == EpochEntry(2, 6)
    assert cache.latest_entry == EpochEntry(3, 8)
    assert cache.non_empty()


def test_rejects_negative_epoch_or_offset(cache, path):
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)
    assert not path.exists()


def test_loads_kafka_written_checkpoint(path):
    path.write_bytes(b"0\n3\n0 0\n1 100\n4 250\n")
    cache = LeaderEpochFileCache(path)
    assert cache.entries() == [EpochEntry(0, 0), EpochEntry(1, 100), EpochEntry(4, 250)]


def test_load_repairs_non_monotonic_checkpoint_in_memory(path):
    data = b"0\n3\n0 0\n3 100\n2 50\n"
    path.write_bytes(data)
    cache = LeaderEpochFileCache(path)
    assert cache.entries() == [EpochEntry(0, 0), EpochEntry(2, 50)]
    assert path.read_bytes() == data  # loading does not rewrite the file


def test_corrupt_checkpoint_raises_naming_file_and_line(path):
    path.write_bytes(b"0\n2\n0 0\n1 x\n")
    with pytest.raises(CorruptCheckpointError, match="line 4") as info:
        LeaderEpochFileCache(path)
    assert info.value.path == path
