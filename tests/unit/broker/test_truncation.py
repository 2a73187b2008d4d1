"""Follower truncation from the leader's OffsetForLeaderEpoch answer (KIP-101/KIP-279 cases)."""

from __future__ import annotations

import pytest

from sparklog.broker.truncation import Truncation, truncation_for
from sparklog.storage.epoch_cache import LeaderEpochFileCache
from sparklog.structs import UNDEFINED_EPOCH


def _cache(tmp_path, entries):
    cache = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def _truncate(cache, leo, hw, leader_epoch, leader_end):
    return truncation_for(
        leader_epoch,
        leader_end,
        local_end_offset_for=lambda epoch: cache.end_offset_for(epoch, leo),
        log_end_offset=leo,
        high_watermark=hw,
    )


def test_same_epoch_cuts_the_suffix_the_leader_never_had(tmp_path):
    # follower: epoch 1 from 0, epoch 2 from 10, LEO 15; leader ended epoch 2 at 12
    cache = _cache(tmp_path, [(1, 0), (2, 10)])
    assert _truncate(cache, 15, 8, 2, 12) == Truncation(12, True)


def test_leader_ahead_in_the_same_epoch_truncates_nothing(tmp_path):
    cache = _cache(tmp_path, [(1, 0), (2, 10)])
    assert _truncate(cache, 15, 8, 2, 40) == Truncation(15, True)


def test_divergent_epoch_cuts_where_the_leaders_epoch_ended(tmp_path):
    # follower wrote epoch 3 (a leader that lost) from 20; the leader's epoch 2 ended at 18
    cache = _cache(tmp_path, [(1, 0), (2, 10), (3, 20)])
    assert _truncate(cache, 25, 15, 2, 18) == Truncation(18, True)


def test_follower_missing_the_leaders_epoch_asks_again(tmp_path):
    # follower has epochs 1 and 3; the leader answers epoch 2 (which the follower never saw)
    cache = _cache(tmp_path, [(1, 0), (3, 10)])
    result = _truncate(cache, 14, 5, 2, 12)
    assert result == Truncation(10, False)  # cut to where our epoch 1 ended, then ask again


@pytest.mark.parametrize("leader_epoch, leader_end", [(UNDEFINED_EPOCH, 30), (2, -1)])
def test_no_epoch_information_falls_back_to_the_high_watermark(tmp_path, leader_epoch, leader_end):
    cache = _cache(tmp_path, [(1, 0)])
    assert _truncate(cache, 15, 9, leader_epoch, leader_end) == Truncation(9, True)


def test_empty_follower_cache_keeps_at_most_the_high_watermark(tmp_path):
    cache = _cache(tmp_path, [])
    assert _truncate(cache, 15, 9, 4, 30) == Truncation(9, True)
    assert _truncate(cache, 15, 9, 4, 5) == Truncation(5, True)
