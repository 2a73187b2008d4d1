"""Which producer epoch wrote each copy of a record the soak found twice (importable by the
soaks, `soak.py` and `soak_net.py`).

An idempotent producer's promise is per producer epoch: a broker drops a retry only when it
carries the same producer id, epoch and sequence range as one of the producer's last 5 batches
(Kafka's `ProducerStateEntry.findDuplicateBatch` returns nothing for another epoch), and it takes
sequence 0 of a new epoch as a fresh start (`ProducerAppendInfo.checkSequence`). librdkafka
bumps the epoch of an idempotent producer by itself (no InitProducerId) when a partition fails
with OUT_OF_ORDER_SEQUENCE_NUMBER behind a failed request or with a permanent error
(`enable.gapless.guarantee=false`), and then renumbers every message still queued from 0 — a
message of another partition waiting for a retry after an error that left it possibly persisted
(a timeout, REQUEST_TIMED_OUT, a lost connection) included. If the broker had written it, it is
written again, in the new epoch: librdkafka issue 4953 ("Sporadic message duplication during
leader transition with idempotent producer", its maintainers: "with an epoch bump there's
chance of duplications on other partitions if they had just experienced errors where the
message can be persisted, like a disconnection"). Apache Kafka writes the same two copies
(`tests/oracle/test_differential_idempotence.py` runs one scenario on both).

So two copies in batches of different epochs of one producer are what the client chose;
two copies in one epoch are the broker's fault. The record batches are read from the brokers'
segment files (read only; the replica whose log holds the offset), which tell the epoch and
sequence of each copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sparklog.records.batch import iter_batches


def batch_at(partition_dir: Path, offset: int) -> dict[str, int] | None:
    """The header of the batch holding `offset` in one replica's segment files, or None."""
    segments = sorted(partition_dir.glob("*.log"), key=lambda p: int(p.name.split(".")[0]))
    holding = [p for p in segments if int(p.name.split(".")[0]) <= offset]
    if not holding:
        return None
    data = holding[-1].read_bytes()
    for batch in iter_batches(data, allow_partial_tail=True):
        header = batch.header
        if header.base_offset <= offset <= header.last_offset:
            return {
                "base_offset": header.base_offset,
                "leader_epoch": header.partition_leader_epoch,
                "producer_id": header.producer_id,
                "producer_epoch": header.producer_epoch,
                "base_sequence": header.base_sequence,
                "sequence": header.base_sequence + offset - header.base_offset,
            }
    return None


def classify_duplicates(
    log_dirs: Path, topic: str, copies: Mapping[Any, Iterable[tuple[int, int]]]
) -> dict[str, Any]:
    """For each duplicated value, its copies `(partition, offset)` with the batch each sits in,
    read from any replica of the partition under `log_dirs` (searched recursively).

    A value is `across_producer_epochs` when every copy was written by a different epoch of the
    same producer id (a client-side epoch bump), else `within_one_producer_epoch` (a broker
    that accepted a retry it should have recognised; two producer ids count here too, as the
    soak has one idempotent producer); `unread` when a copy's batch was not found.
    """
    replicas: dict[int, list[Path]] = {}
    found: dict[str, list[dict[str, Any]]] = {}
    within, across, unread = [], [], []
    for value, where in copies.items():
        described = []
        for partition, offset in where:
            if partition not in replicas:
                replicas[partition] = sorted(log_dirs.rglob(f"{topic}-{partition}"))
            header = next(
                (h for d in replicas[partition] if (h := batch_at(d, offset)) is not None), None
            )
            described.append({"partition": partition, "offset": offset, "batch": header})
        found[str(value)] = described
        writers = [(c["batch"]["producer_id"], c["batch"]["producer_epoch"])
                   for c in described if c["batch"] is not None]  # fmt: skip
        if len(writers) < len(described):
            unread.append(value)
        elif len({pid for pid, _ in writers}) == 1 and len(set(writers)) == len(writers):
            across.append(value)
        else:
            within.append(value)
    return {
        "within_one_producer_epoch": len(within),
        "across_producer_epochs": len(across),
        "unread": len(unread),
        "copies": {str(v): found[str(v)] for v in [*within, *unread, *across][:5]},
    }
