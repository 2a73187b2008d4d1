"""Consistency checks of one partition log's derived state, shared by the storage unit tests
and the simulations: what a replica built while appending, truncating and reloading must
equal what a fresh replay of its own batches builds (Kafka rebuilds both from the log).

- `producer_view`: each producer as a snapshot keeps it (epoch, coordinator epoch, last
  timestamp, open transaction, last batch); snapshots keep only the last batch, so the
  comparison does too.
- `aborted_view`: the `.txnindex` entries of every segment, oldest first.
- `check_log_consistent`: log start <= HW <= log end, and both views equal a rebuild.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sparklog.records.batch import RecordBatch
from sparklog.records.control import decode_end_txn_marker
from sparklog.storage.log import Log
from sparklog.storage.producer_state import ProducerStateManager
from sparklog.storage.txn_index import AbortedTxn

ProducerView = dict[int, tuple[int, int, int, int | None, int, int, int]]


def producer_view(manager: ProducerStateManager) -> ProducerView:
    return {
        pid: (
            e.producer_epoch,
            e.coordinator_epoch,
            e.last_timestamp,
            e.current_txn_first_offset,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
        )
        for pid, e in manager.active_producers.items()
    }


def aborted_view(log: Log) -> list[AbortedTxn]:
    return [a for segment in log.segments for a in segment.txn_index.all_aborted()]


def rebuilt(log: Log) -> tuple[ProducerView, list[AbortedTxn], int | None]:
    """Producer view, aborted transactions and first unstable offset from a fresh replay of
    every batch of `log` (no snapshot)."""
    with tempfile.TemporaryDirectory(prefix="sparklog-rebuild-") as directory:
        fresh = ProducerStateManager(Path(directory))
        fresh.update_map_end_offset(log.log_start_offset)
        aborted: list[AbortedTxn] = []
        for segment in log.segments:
            for found in segment.iter_batches():
                header = found.header
                marker = None
                if header.is_control and header.has_producer_id and header.records_count:
                    raw = segment.read_bytes(found.position, header.size_in_bytes)
                    record = RecordBatch(raw, 0).records()[0]
                    marker = decode_end_txn_marker(header, record.key, record.value)
                recovered = fresh.replay_batch(header, marker)
                if recovered is not None and recovered.txn.is_aborted:
                    txn = recovered.txn
                    aborted.append(
                        AbortedTxn(
                            txn.producer_id,
                            txn.first_offset,
                            txn.last_offset,
                            recovered.last_stable_offset,
                        )
                    )
        fresh.on_high_watermark_updated(log.high_watermark)
        return producer_view(fresh), aborted, fresh.first_unstable_offset()


def check_log_consistent(log: Log, what: str = "") -> None:
    """Assert the log's invariants and that its producer state and txn index equal a rebuild."""
    name = f"{what or log.directory.name}"
    assert log.log_start_offset <= log.high_watermark <= log.log_end_offset, (
        f"{name}: log start {log.log_start_offset}, HW {log.high_watermark}, "
        f"log end {log.log_end_offset}"
    )
    producers, aborted, first_unstable = rebuilt(log)
    got = producer_view(log.producer_state)
    assert got == producers, f"{name}: producer state {got} != rebuilt from the log {producers}"
    index = aborted_view(log)
    assert index == aborted, f"{name}: txn index {index} != rebuilt from the log {aborted}"
    unstable = log.producer_state.first_unstable_offset()
    assert unstable == first_unstable, (
        f"{name}: first unstable offset {unstable} != rebuilt {first_unstable}"
    )
