"""A follower below its leader's local log start (Kafka's `TierStateMachine`, KIP-405).

The leader answers a fetch of an offset only its remote tier holds with
OFFSET_MOVED_TO_TIERED_STORAGE. The follower then asks the leader for its local log start
(ListOffsets -4) and log start (-2), reads from the topic's table the leader epochs and each
producer's last batch below that local start (`TopicTable.epochs` / `producer_states`, as
Kafka's follower reads the remote leader-epoch checkpoint and producer snapshot), empties its
log, starts it at the leader's local start (its log start at the leader's) and restores the
epochs and producer state, then fetches from there: it never copies the tiered part.

`read_tier_state` runs on a worker thread (table I/O); `restore_from_tier` is the log change,
on the broker's loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparklog.broker.remote_fetch import TableFor
from sparklog.records.batch_header import MAGIC, BatchHeader
from sparklog.storage.remote.tier import EpochEntry, ProducerSnapshotEntry
from sparklog.structs import NO_SEQUENCE


@dataclass(frozen=True, slots=True)
class TierState:
    """What the table says about a partition below an offset."""

    epochs: tuple[EpochEntry, ...] = ()
    producers: tuple[ProducerSnapshotEntry, ...] = ()


def read_tier_state(table_for: TableFor, topic: str, partition: int, below: int) -> TierState:
    """The epochs and producer states of `topic`-`partition` below `below` (worker thread);
    empty when the topic has no table here."""
    table = table_for(topic)
    if table is None:
        return TierState()
    table.refresh()
    return TierState(
        tuple(table.epochs(partition, below)), tuple(table.producer_states(partition, below))
    )


def restore_from_tier(log_: Any, local_start: int, log_start: int, state: TierState) -> None:
    """Empty `log_`, start it at `local_start` with its log start at `log_start` (Kafka's
    `truncateFullyAndStartAt(nextOffset, logStartOffset)`), then take the tier's leader epochs
    and producers below `local_start`. No transaction is open across the local start: the tier
    holds only offsets below the last stable offset."""
    log_.truncate_fully_and_start_at(local_start, log_start)
    for entry in state.epochs:
        if entry.start_offset < local_start:
            log_.epoch_cache.assign(entry.epoch, entry.start_offset)
    producer_state = log_.producer_state
    for p in state.producers:
        if p.last_offset < local_start:
            producer_state.replay_batch(_last_batch_of(p))
    producer_state.update_map_end_offset(local_start)
    log_.update_highest_offset_in_remote_storage(local_start - 1)


def _last_batch_of(p: ProducerSnapshotEntry) -> BatchHeader:
    """A header standing for a producer's last batch, to replay into the producer state."""
    has_sequence = p.first_sequence != NO_SEQUENCE and p.last_sequence != NO_SEQUENCE
    delta = (p.last_sequence - p.first_sequence) & 0x7FFFFFFF if has_sequence else 0
    return BatchHeader(
        base_offset=p.last_offset - delta,
        batch_length=0,
        partition_leader_epoch=-1,
        magic=MAGIC,
        crc=0,
        attributes=0,
        last_offset_delta=delta,
        base_timestamp=p.last_timestamp,
        max_timestamp=p.last_timestamp,
        producer_id=p.producer_id,
        producer_epoch=p.producer_epoch,
        base_sequence=p.first_sequence,
        records_count=delta + 1,
    )
