"""One followed partition's place in its fetcher (Kafka's `PartitionFetchState` and its
`ReplicaState`: truncating, fetching; sparklog adds resetting, after OFFSET_OUT_OF_RANGE, and
tiered, after OFFSET_MOVED_TO_TIERED_STORAGE: Kafka's `TierStateMachine`) and
where an out-of-range follower goes next (`AbstractFetcherThread.fetchOffsetAndTruncate`).
`replica_fetcher` moves partitions through these phases."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass


class FetchPhase(enum.Enum):
    TRUNCATING = "truncating"
    RESETTING = "resetting"
    TIERED = "tiered"
    FETCHING = "fetching"


@dataclass(slots=True)
class PartitionFetchState:
    """One followed partition in a fetcher (Kafka's `PartitionFetchState`)."""

    topic_id: uuid.UUID
    leader_id: int
    leader_epoch: int
    phase: FetchPhase = FetchPhase.TRUNCATING
    fetch_offset: int = 0
    delayed_until_ms: int = 0
    #: the leader's high watermark minus our fetch offset at the last fetch (Kafka's
    #: `FetcherLagMetrics.lag`, read as ReplicaFetcherManager MaxLag)
    lag: int = 0


@dataclass(frozen=True, slots=True)
class OutOfRangeReset:
    """Where a follower goes after OFFSET_OUT_OF_RANGE: cut to `truncate_to`, or restart empty
    at `start_at`, then fetch from `fetch_offset`."""

    fetch_offset: int
    truncate_to: int | None = None
    start_at: int | None = None


def reset_for_out_of_range(
    log_end_offset: int, leader_log_start_offset: int, leader_log_end_offset: int
) -> OutOfRangeReset:
    """Kafka's `fetchOffsetAndTruncate`: a leader log that ends before ours (possible only after
    an unclean election) cuts ours to its end; one that starts after our end restarts ours at
    its start; otherwise our end is in range again and we simply fetch from it."""
    if leader_log_end_offset < log_end_offset:
        return OutOfRangeReset(leader_log_end_offset, truncate_to=leader_log_end_offset)
    if leader_log_start_offset > log_end_offset:
        return OutOfRangeReset(leader_log_start_offset, start_at=leader_log_start_offset)
    return OutOfRangeReset(log_end_offset)
