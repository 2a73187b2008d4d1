"""Where a follower cuts its log before fetching from a new leader (KIP-101, KIP-279).

A follower asks the leader, with OffsetForLeaderEpoch, where the follower's latest epoch ends
in the leader's log. The answer `(epoch, end_offset)` is the largest leader epoch <= the one
asked and where it ends. If the follower holds that same epoch, everything past
`min(leader end, own end of that epoch)` diverges and is cut; done. If not (the follower's
own epochs skip the leader's), it cuts to the same bound and asks again with its new latest
epoch. Without epoch information on either side it falls back to the high watermark (Kafka's
pre-KIP-101 rule). Pure functions: the fetcher does the I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sparklog.structs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True)
class Truncation:
    """Cut the log to `offset`; when `done` is False ask the leader again afterwards."""

    offset: int
    done: bool


def truncation_for(
    leader_epoch: int,
    leader_end_offset: int,
    *,
    local_end_offset_for: Callable[[int], tuple[int, int]],
    log_end_offset: int,
    high_watermark: int,
) -> Truncation:
    """The truncation implied by the leader's OffsetForLeaderEpoch answer.

    `local_end_offset_for(epoch)` is the follower's own `(epoch, end offset)` for `epoch`
    (`LeaderEpochFileCache.end_offset_for` with the follower's log end offset).
    """
    if leader_epoch == UNDEFINED_EPOCH or leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return Truncation(min(high_watermark, log_end_offset), True)
    local_epoch, local_end = local_end_offset_for(leader_epoch)
    if local_epoch == UNDEFINED_EPOCH or local_end == UNDEFINED_EPOCH_OFFSET:
        return Truncation(min(high_watermark, log_end_offset, leader_end_offset), True)
    offset = min(leader_end_offset, local_end, log_end_offset)
    return Truncation(offset, local_epoch == leader_epoch)


__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "Truncation", "truncation_for"]
