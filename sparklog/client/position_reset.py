"""Positions for partitions that have none, found with ListOffsets as `auto.offset.reset` says
(Kafka's `OffsetFetcher.resetPositionsIfNeeded`). Blocking, from the consumer's poll thread."""

from __future__ import annotations

from sparklog.errors import OffsetOutOfRangeError, RequestTimedOutError
from sparklog.structs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition

from .admin import list_offsets
from .metadata import Metadata
from .network import NetworkClient
from .subscription_state import SubscriptionState


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """A partition has no position and `auto.offset.reset` is none (Kafka's
    `NoOffsetForPartitionException`)."""


def reset_positions(
    network: NetworkClient,
    metadata: Metadata,
    subscriptions: SubscriptionState,
    *,
    isolation_level: int,
    deadline_ms: int,
    only: list[TopicPartition] | None = None,
    best_effort: bool = False,
) -> None:
    """Reset positions that have none (of `only`, when given) with ListOffsets; a timeout is
    ignored when `best_effort` (poll() tries again next time)."""
    needing = subscriptions.needing_reset()
    if only is not None:
        needing = {tp: s for tp, s in needing.items() if tp in only}
    if not needing:
        return
    none = [tp for tp, s in needing.items() if s == "none"]
    if none:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in none)
        raise NoOffsetForPartitionError(
            f"no position for {names} and auto.offset.reset=none: seek() to an offset first"
        )
    specs = {
        tp: EARLIEST_TIMESTAMP if s == "earliest" else LATEST_TIMESTAMP for tp, s in needing.items()
    }
    try:
        found = list_offsets(
            network, metadata, specs, isolation_level=isolation_level, deadline_ms=deadline_ms
        )
    except RequestTimedOutError:
        if best_effort:
            return
        raise
    for tp, result in found.items():
        if subscriptions.is_assigned(tp) and subscriptions.state(tp).position is None:
            subscriptions.seek(tp, result.offset, result.leader_epoch)
