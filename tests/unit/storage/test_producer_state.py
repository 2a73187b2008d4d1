"""Producer state: Kafka's ProducerStateManagerTest cases, plus the snapshot byte format."""

from __future__ import annotations

import struct

import pytest

from sparklog.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from sparklog.records.batch import NO_SEQUENCE, BatchHeader, attributes_for, iter_batches
from sparklog.records.builder import SimpleRecord, build_batch
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    decode_end_txn_marker,
)
from sparklog.records.crc import crc32c
from sparklog.storage.producer_append_info import (
    AppendOrigin,
    CompletedTxn,
    DuplicateBatch,
    ProducerAppendInfo,
    TxnMetadata,
)
from sparklog.storage.producer_snapshot import (
    BatchMetadata,
    CorruptSnapshotError,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
    snapshot_path,
)
from sparklog.storage.producer_state import (
    LATE_TRANSACTION_BUFFER_MS,
    ProducerStateEntry,
    ProducerStateManager,
)
from sparklog.structs import INT32_MAX

PID = 1
EPOCH = 0
EXPIRATION_MS = 86_400_000
MAX_TXN_TIMEOUT_MS = 5 * 60 * 1000
COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT


@pytest.fixture
def psm(tmp_path):
    return ProducerStateManager(tmp_path, max_transaction_timeout_ms=MAX_TXN_TIMEOUT_MS)


def header(pid, epoch, seq, offset, *, count=1, ts=0, txn=False, control=False) -> BatchHeader:
    return BatchHeader(
        base_offset=offset,
        batch_length=49,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=attributes_for(is_transactional=txn or control, is_control=control),
        last_offset_delta=count - 1,
        base_timestamp=ts,
        max_timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=NO_SEQUENCE if control else seq,
        records_count=count,
    )


def append(psm, pid, epoch, seq, offset, ts=0, *, txn=False, count=1, origin="client"):
    """Kafka's appendClientEntry / appendReplicationEntry: prepare, commit, move the map end."""
    info = psm.prepare_append(header(pid, epoch, seq, offset, count=count, ts=ts, txn=txn), origin)
    assert isinstance(info, ProducerAppendInfo)
    psm.update(info)
    psm.update_map_end_offset(offset + count)
    return info


def end_txn(psm, pid, epoch, control_type, offset, coordinator_epoch=0, ts=0, **kwargs):
    """Kafka's appendEndTxnMarker: a coordinator-origin marker, completed like the log does."""
    marker = EndTransactionMarker(control_type, coordinator_epoch)
    h = header(pid, epoch, NO_SEQUENCE, offset, ts=ts, control=True)
    info = psm.prepare_append(h, kwargs.pop("origin", "coordinator"), marker=marker, **kwargs)
    psm.update(info)
    for txn in info.completed_txns:
        psm.complete_txn(txn)
    psm.update_map_end_offset(offset + 1)
    return info.completed_txns


def entry(psm, pid=PID) -> ProducerStateEntry:
    found = psm.last_entry(pid)
    assert found is not None, f"producer {pid} should have state"
    return found


def reloaded(tmp_path, log_start_offset, log_end_offset, now_ms=0) -> ProducerStateManager:
    fresh = ProducerStateManager(tmp_path, max_transaction_timeout_ms=MAX_TXN_TIMEOUT_MS)
    fresh.load(log_start_offset, log_end_offset, now_ms)
    return fresh


def snapshot_files(tmp_path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir())


# -- sequences, epochs, duplicates ---------------------------------------------------------------


def test_basic_id_mapping(psm):
    append(psm, PID, EPOCH, 0, 0)
    append(psm, PID, EPOCH, 1, 1)
    # Appending a duplicate without the duplicate check is out of sequence.
    with pytest.raises(OutOfOrderSequenceNumberError):
        psm.prepare_update(PID, "client").append(header(PID, EPOCH, 1, 2))
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(psm, PID, EPOCH, 5, 2)
    append(psm, PID, EPOCH + 1, 0, 3)
    with pytest.raises(InvalidProducerEpochError):
        append(psm, PID, EPOCH, 0, 4)


def test_duplicate_of_any_of_the_last_five_batches_returns_its_original_offsets(psm):
    for n in range(6):  # batches of 2 records: sequences 2n..2n+1 at offsets 10n..10n+1
        append(psm, PID, EPOCH, 2 * n, 10 * n, ts=100 + n, count=2)
    retry = psm.prepare_append(header(PID, EPOCH, 2, 999, count=2), "client")
    assert retry == DuplicateBatch(PID, EPOCH, 2, 3, 10, 11, 101)
    newest = psm.prepare_append(header(PID, EPOCH, 10, 999, count=2), AppendOrigin.CLIENT)
    assert isinstance(newest, DuplicateBatch) and newest.base_offset == 50
    # The sixth-newest batch fell out of the cache: an old sequence, rejected.
    with pytest.raises(OutOfOrderSequenceNumberError):
        psm.prepare_append(header(PID, EPOCH, 0, 999, count=2), "client")
    # Same first sequence but a different range is not a duplicate.
    with pytest.raises(OutOfOrderSequenceNumberError):
        psm.prepare_append(header(PID, EPOCH, 2, 999, count=3), "client")
    assert entry(psm).last_seq == 11 and len(entry(psm).batch_metadata) == 5


def test_duplicate_check_needs_the_same_epoch_and_client_origin(psm):
    append(psm, PID, EPOCH, 0, 0)
    fenced = psm.prepare_append(header(PID, EPOCH + 1, 0, 1), "client")
    assert isinstance(fenced, ProducerAppendInfo)  # same range, other epoch: a new batch
    replicated = psm.prepare_append(header(PID, EPOCH, 0, 1), "replication")
    assert isinstance(replicated, ProducerAppendInfo)  # followers never dedupe


def test_rejected_batch_leaves_state_unchanged(psm):
    append(psm, PID, EPOCH, 0, 0, ts=5)
    before = (entry(psm).last_seq, entry(psm).last_data_offset, psm.map_end_offset)
    with pytest.raises(OutOfOrderSequenceNumberError):
        psm.prepare_append(header(PID, EPOCH, 3, 1), "client")
    assert (entry(psm).last_seq, entry(psm).last_data_offset, psm.map_end_offset) == before


def test_prepare_update_does_not_mutate(psm):
    info = psm.prepare_update(PID, AppendOrigin.CLIENT)
    info.append(header(PID, EPOCH, 0, 15, count=6))
    assert psm.last_entry(PID) is None
    psm.update(info)
    next_info = psm.prepare_append(header(PID, EPOCH, 6, 26, count=5), "client")
    assert (entry(psm).first_seq, entry(psm).last_seq, entry(psm).last_data_offset) == (0, 5, 20)
    psm.update(next_info)
    assert (entry(psm).first_seq, entry(psm).last_seq, entry(psm).last_data_offset) == (0, 10, 30)


def test_base_offset_is_supplied_by_the_log(psm):
    info = psm.prepare_append(header(PID, EPOCH, 0, 0, count=3), "client", base_offset=40)
    psm.update(info)
    assert (entry(psm).first_data_offset, entry(psm).last_data_offset) == (40, 42)


def test_several_batches_of_one_producer_in_one_append(psm):
    append(psm, PID, EPOCH, 0, 0)
    info = psm.prepare_append(header(PID, EPOCH, 1, 1, count=2), "client")
    same = psm.prepare_append(header(PID, EPOCH, 3, 3, count=2), "client", pending=info)
    assert same is info and entry(psm).last_seq == 0
    with pytest.raises(OutOfOrderSequenceNumberError):  # checked against the pending batches
        psm.prepare_append(header(PID, EPOCH, 3, 5), "client", pending=info)
    psm.update(info)
    assert [b.first_seq for b in entry(psm).batch_metadata] == [0, 1, 3]


def test_unknown_producer_is_not_sequence_checked_within_its_first_append(psm):
    # Kafka checks against the committed entry's epoch: none yet, so gaps pass (checkSequence).
    info = psm.prepare_append(header(PID, EPOCH, 7, 0), "client")
    psm.prepare_append(header(PID, EPOCH, 20, 1), "client", pending=info)
    psm.update(info)
    with pytest.raises(OutOfOrderSequenceNumberError):
        psm.prepare_append(header(PID, EPOCH, 30, 2), "client")


def test_unknown_producer_may_start_at_any_sequence(psm):
    # KIP-360: its state may have expired or its batches been deleted by retention.
    append(psm, PID, 3, 42, 0)
    assert (entry(psm).producer_epoch, entry(psm).last_seq) == (3, 42)
    append(psm, PID, 3, 43, 1)


def test_epoch_bump_must_restart_sequence_at_zero(psm):
    for seq in range(3):
        append(psm, PID, EPOCH, seq, seq)
    with pytest.raises(OutOfOrderSequenceNumberError, match="new epoch"):
        psm.prepare_append(header(PID, 1, 5, 3), "client")
    append(psm, PID, 1, 0, 3)
    assert (entry(psm).producer_epoch, entry(psm).first_seq, entry(psm).last_seq) == (1, 0, 0)
    assert len(entry(psm).batch_metadata) == 1  # the old epoch's batches are gone


def test_old_epoch_is_fenced_for_clients_but_followed_on_replicas(psm):
    append(psm, PID, 5, 0, 0)
    with pytest.raises(InvalidProducerEpochError):
        psm.prepare_append(header(PID, 4, 1, 1), "client")
    append(psm, PID, 4, 7, 1, origin="replication")
    assert entry(psm).producer_epoch == 4


def test_sequence_wrap_around(psm):
    append(psm, PID, 15, INT32_MAX, 735, origin="replication")
    append(psm, PID, 15, 0, 1235)
    assert (entry(psm).producer_epoch, entry(psm).first_seq, entry(psm).last_seq) == (
        15,
        INT32_MAX,
        0,
    )


def test_sequence_invalid_wrap_around(psm):
    append(psm, PID, 15, INT32_MAX, 735, origin="replication")
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(psm, PID, 15, 1, 1235)


def test_batch_whose_sequences_wrap(psm):
    first_seq = INT32_MAX - 10  # 21 records: the last sequence wraps to 9
    append(psm, PID, 15, first_seq, 2000, count=21, origin="replication")
    e = entry(psm)
    assert (e.first_seq, e.last_seq, e.first_data_offset, e.last_data_offset) == (
        first_seq,
        9,
        2000,
        2020,
    )
    retry = psm.prepare_append(header(PID, 15, first_seq, 0, count=21), "client")
    assert isinstance(retry, DuplicateBatch) and (retry.first_seq, retry.last_seq) == (first_seq, 9)
    append(psm, PID, 15, 10, 2021)


def test_no_validation_on_first_entry_when_loading_log(psm):
    append(psm, PID, 5, 16, 735, origin="replication")
    e = entry(psm)
    assert (e.producer_epoch, e.first_seq, e.last_seq, e.first_data_offset) == (5, 16, 16, 735)


def test_replica_accepts_sequence_gaps(psm):
    append(psm, PID, EPOCH, 0, 0)
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(psm, PID, EPOCH, 3, 1)
    assert entry(psm).last_seq == 0
    append(psm, PID, EPOCH, 3, 1, origin="replication")
    assert entry(psm).last_seq == 3


def test_coordinator_appends_without_sequences(psm):
    # Offset commits of a transaction (Kafka's group metadata topic) carry no sequence numbers.
    append(psm, PID, EPOCH, NO_SEQUENCE, 99, txn=True, origin="coordinator")
    append(psm, PID, EPOCH, NO_SEQUENCE, 100, txn=True, origin="coordinator")


# -- transactions --------------------------------------------------------------------------------


def test_append_txn_marker_with_no_producer_state(psm):
    end_txn(psm, PID, 2, COMMIT, 27)
    assert (entry(psm).producer_epoch, entry(psm).last_seq) == (2, NO_SEQUENCE)
    with pytest.raises(InvalidProducerEpochError):  # fencing works with only the marker left
        append(psm, PID, 0, 0, 28)
    with pytest.raises(OutOfOrderSequenceNumberError):  # and the producer must reset to 0
        append(psm, PID, 2, 17, 28)
    append(psm, PID, 2, 0, 28)
    assert entry(psm).last_seq == 0


def test_control_record_bumps_producer_epoch(psm):
    append(psm, PID, EPOCH, 0, 0)
    end_txn(psm, PID, 1, ABORT, 1)
    e = entry(psm)
    assert (e.producer_epoch, e.current_txn_first_offset, e.first_seq, e.last_seq) == (
        1,
        None,
        NO_SEQUENCE,
        NO_SEQUENCE,
    )
    append(psm, PID, 1, 0, 2)
    assert entry(psm).first_seq == 0


def test_out_of_sequence_after_control_record_epoch_bump(psm):
    append(psm, PID, EPOCH, 0, 0, txn=True)
    append(psm, PID, EPOCH, 1, 1, txn=True)
    end_txn(psm, PID, 1, ABORT, 2)
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(psm, PID, 1, 2, 3, txn=True)
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(psm, PID, 2, 2, 3, txn=True)
    append(psm, PID, 1, 0, 3, txn=True)
    assert (entry(psm).producer_epoch, entry(psm).last_seq) == (1, 0)


def test_transaction_state_within_one_append(psm):
    append(psm, PID, EPOCH, 0, 9)
    info = psm.prepare_append(header(PID, EPOCH, 1, 16, count=5, txn=True), "client")
    psm.prepare_append(header(PID, EPOCH, 6, 26, count=5, txn=True), "client", pending=info)
    pending = info.to_entry()
    assert (pending.first_seq, pending.last_seq, pending.current_txn_first_offset) == (1, 10, 16)
    commit = header(PID, EPOCH, NO_SEQUENCE, 40, control=True)
    completed = info.append(commit, marker=EndTransactionMarker(COMMIT, 15))
    assert completed == CompletedTxn(PID, 16, 40, is_aborted=False)
    # The marker leaves the cached batches alone and closes the transaction.
    assert (pending.first_seq, pending.last_seq, pending.first_data_offset) == (1, 10, 16)
    assert (pending.last_data_offset, pending.current_txn_first_offset) == (30, None)
    assert info.started_transactions == (TxnMetadata(PID, 16),)
    assert info.completed_txns == (completed,)


def test_non_transactional_append_with_ongoing_transaction(psm):
    append(psm, PID, EPOCH, 0, 0, txn=True)
    with pytest.raises(InvalidTxnStateError):
        append(psm, PID, EPOCH, 1, 1)


def test_first_unstable_offset_and_last_stable_offset(psm):
    assert psm.first_undecided_offset() is None and psm.last_stable_offset(50) == 50
    append(psm, PID, 5, 0, 99, txn=True)
    assert psm.first_undecided_offset() == 99 and psm.first_unstable_offset() == 99
    append(psm, 2, 5, 0, 105, txn=True)
    assert psm.first_unstable_offset() == 99 and list(psm.ongoing_txns) == [99, 105]
    assert end_txn(psm, PID, 5, COMMIT, 109) == (CompletedTxn(PID, 99, 109, False),)
    assert psm.first_undecided_offset() == 105
    assert psm.first_unstable_offset() == 99  # the marker is not replicated yet
    psm.on_high_watermark_updated(109)  # the marker itself is not below the HW yet
    assert psm.first_unstable_offset() == 99 and psm.last_stable_offset(109) == 99
    psm.on_high_watermark_updated(110)
    assert psm.first_unstable_offset() == 105 and psm.last_stable_offset(110) == 105
    end_txn(psm, 2, 5, ABORT, 112)
    assert psm.first_undecided_offset() is None and psm.first_unstable_offset() == 105
    psm.on_high_watermark_updated(113)
    assert psm.first_unstable_offset() is None and psm.last_stable_offset(113) == 113


def test_last_stable_offset_of_completed_txn(psm):
    start1, start2, start3 = 992342, 992367, 992399
    for pid, start in ((1, start1), (2, start2), (3, start3)):
        append(psm, pid, EPOCH, 0, start, txn=True)
    txn1 = CompletedTxn(1, start1, start3 + 15, False)
    assert psm.last_stable_offset_for(txn1) == start2
    psm.complete_txn(txn1)
    psm.on_high_watermark_updated(txn1.last_offset + 1)
    assert psm.first_unstable_offset() == start2
    txn3 = CompletedTxn(3, start3, txn1.last_offset + 20, False)
    assert psm.last_stable_offset_for(txn3) == start2
    psm.complete_txn(txn3)
    txn2 = CompletedTxn(2, start2, txn3.last_offset + 78, False)
    assert psm.last_stable_offset_for(txn2) == txn2.last_offset + 1
    psm.complete_txn(txn2)
    psm.on_high_watermark_updated(txn2.last_offset + 1)
    assert psm.first_unstable_offset() is None


def test_skip_empty_transactions(psm):
    first = psm.prepare_append(header(PID, EPOCH, 0, 16, count=5, txn=True), "client")
    assert first.started_transactions == (TxnMetadata(PID, 16),)
    psm.update(first)
    psm.on_high_watermark_updated(21)
    assert psm.first_unstable_offset() == 16

    def marker(kind, offset):
        h = header(PID, EPOCH, NO_SEQUENCE, offset, control=True)
        return second.append(h, marker=EndTransactionMarker(kind, 27))

    second = psm.prepare_update(PID, "client")
    first_done = marker(COMMIT, 21)
    assert first_done == CompletedTxn(PID, 16, 21, False)
    assert marker(COMMIT, 22) is None and marker(ABORT, 23) is None  # empty transactions
    second.append(header(PID, EPOCH, 5, 24, count=4, txn=True))
    second_done = marker(ABORT, 28)
    assert second_done == CompletedTxn(PID, 24, 28, True)
    assert marker(ABORT, 29) is None
    second.append(header(PID, EPOCH, 9, 30, count=2, txn=True))
    assert second.started_transactions == (TxnMetadata(PID, 24), TxnMetadata(PID, 30))
    psm.update(second)
    psm.complete_txn(first_done)
    psm.complete_txn(second_done)
    psm.on_high_watermark_updated(32)
    assert psm.first_unstable_offset() == 30


def test_old_epoch_for_control_record(psm):
    append(psm, PID, 5, 0, 99, txn=True)
    with pytest.raises(InvalidProducerEpochError):
        end_txn(psm, PID, 3, COMMIT, 100)


def test_coordinator_fencing(psm):
    append(psm, PID, 5, 0, 99, txn=True)
    end_txn(psm, PID, 5, COMMIT, 100, coordinator_epoch=1)
    assert entry(psm).coordinator_epoch == 1
    end_txn(psm, PID, 5, COMMIT, 101, coordinator_epoch=1)  # the current epoch is allowed
    end_txn(psm, PID, 5, COMMIT, 102, coordinator_epoch=2)  # and a bumped one
    with pytest.raises(TransactionCoordinatorFencedError):
        end_txn(psm, PID, 5, COMMIT, 103, coordinator_epoch=1)
    end_txn(psm, PID, 5, COMMIT, 103, coordinator_epoch=1, origin="replication")


def test_transactions_v2_markers_need_a_bumped_epoch(psm):
    append(psm, PID, 5, 0, 99, txn=True)
    with pytest.raises(InvalidProducerEpochError, match="<="):
        end_txn(psm, PID, 5, COMMIT, 100, transaction_version=2)
    assert end_txn(psm, PID, 6, COMMIT, 100, transaction_version=2) == (
        CompletedTxn(PID, 99, 100, False),
    )
    # KAFKA-19999: a retried marker of the ended transaction is written, not rejected.
    assert end_txn(psm, PID, 6, COMMIT, 101, transaction_version=2) == ()
    assert entry(psm).producer_epoch == 6


def test_empty_control_batch_starts_no_transaction(psm):
    empty = header(23423, EPOCH, NO_SEQUENCE, 15, control=True)._replace(records_count=0)
    info = psm.prepare_append(empty, "client")
    assert info.completed_txns == ()
    psm.update(info)
    assert entry(psm, 23423).current_txn_first_offset is None


# -- expiration ----------------------------------------------------------------------------------


def test_pid_expiration_timeout(psm):
    append(psm, PID, 5, 0, 1, ts=0)
    assert psm.remove_expired_producers(EXPIRATION_MS - 1) == []
    assert psm.remove_expired_producers(EXPIRATION_MS) == [PID]
    append(psm, PID, 5, 1, 2, ts=EXPIRATION_MS + 1)  # unknown again: any sequence is accepted
    assert list(psm.active_producers) == [PID] and entry(psm).last_seq == 1
    assert psm.map_end_offset == 3


def test_expiration_interval_can_be_given_per_call(psm):
    append(psm, PID, 5, 0, 1, ts=1000)
    assert psm.remove_expired_producers(1500, producer_id_expiration_ms=1000) == []
    assert psm.remove_expired_producers(2000, producer_id_expiration_ms=1000) == [PID]


def test_producers_with_ongoing_transactions_do_not_expire(psm):
    append(psm, PID, 5, 0, 99, txn=True)
    assert psm.remove_expired_producers(10 * EXPIRATION_MS) == []
    assert psm.last_entry(PID) is not None and psm.first_undecided_offset() == 99


def test_producer_state_after_fencing_abort_marker(psm):
    append(psm, PID, EPOCH, 0, 0, txn=True, ts=7)
    end_txn(psm, PID, EPOCH + 1, ABORT, 1, ts=7)
    e = entry(psm)
    assert (e.current_txn_first_offset, e.last_data_offset, e.first_data_offset) == (None, -1, -1)
    assert psm.remove_expired_producers(7) == []  # the fencing epoch is kept


def test_has_late_transaction(psm):
    late_ms = MAX_TXN_TIMEOUT_MS + LATE_TRANSACTION_BUFFER_MS
    append(psm, 39, 2, 0, 100, ts=1000, txn=True)
    append(psm, 57, 9, 0, 150, ts=1500, txn=True)
    assert not psm.has_late_transaction(1000 + late_ms)
    assert psm.has_late_transaction(1000 + late_ms + 1)
    end_txn(psm, 39, 2, COMMIT, 200, ts=1000 + late_ms + 1)
    assert not psm.has_late_transaction(1500 + late_ms)
    assert psm.has_late_transaction(1500 + late_ms + 1)
    end_txn(psm, 57, 9, COMMIT, 250, ts=1500 + late_ms + 1)
    assert not psm.has_late_transaction(10 * late_ms)


# -- snapshots -----------------------------------------------------------------------------------


def test_snapshot_bytes_follow_kafkas_schema(psm, tmp_path):
    append(psm, 7, 3, 10, 100, ts=1234, count=4)
    append(psm, 9, 1, 0, 104, ts=5678, txn=True)
    end_txn(psm, 11, 2, COMMIT, 105, coordinator_epoch=8, ts=999)  # no batch, no txn
    path = psm.take_snapshot()
    assert path == tmp_path / "00000000000000000106.snapshot" == snapshot_path(tmp_path, 106)
    data = path.read_bytes()
    entry_fmt = ">q h i q i q i q"  # pid, epoch, lastSeq, lastOffset, delta, ts, coordEpoch, txn
    entries = (
        struct.pack(entry_fmt, 7, 3, 13, 103, 3, 1234, -1, -1)
        + struct.pack(entry_fmt, 9, 1, 0, 104, 0, 5678, -1, 104)
        + struct.pack(entry_fmt, 11, 2, -1, -1, 0, 999, 8, -1)
    )
    body = struct.pack(">i", 3) + entries
    assert data == struct.pack(">h", 1) + struct.pack(">I", crc32c(body)) + body
    assert len(data) == 2 + 4 + 4 + 3 * 46
    assert snapshot_files(tmp_path) == ["00000000000000000106.snapshot"]  # no temp file left


def test_read_write_snapshot_round_trip():
    entries = [
        ProducerStateEntry(1, 2, 3, -1, 100, [BatchMetadata(1, 2, 3, -1)]),
        ProducerStateEntry(11, 12, 13, 123456, None, []),
    ]
    assert decode_snapshot(encode_snapshot(entries)) == entries


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: b"",
        lambda data: data[: len(data) // 2],
        lambda data: data[:20] + bytes(37) + data[57:],
        lambda data: b"\x00\x02" + data[2:],
        lambda data: data + b"\x00",
    ],
    ids=["empty", "truncated", "garbage", "bad-version", "trailing-byte"],
)
def test_decode_rejects_damaged_snapshots(damage):
    data = encode_snapshot([ProducerStateEntry(1, 0, 0, 5, None, [BatchMetadata(0, 0, 0, 5)])])
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(damage(data))


def test_take_snapshot_skips_unchanged_offset(psm, tmp_path):
    append(psm, PID, EPOCH, 0, 0)
    assert psm.take_snapshot() is not None
    assert psm.take_snapshot() is None
    assert snapshot_files(tmp_path) == ["00000000000000000001.snapshot"]
    assert psm.take_snapshot(log_end_offset=7) == snapshot_path(tmp_path, 7)  # a roll at LEO 7
    assert psm.snapshot_offsets == (1, 7) and psm.map_end_offset == 7


def test_recover_from_snapshot_unfinished_transaction(psm, tmp_path):
    append(psm, PID, EPOCH, 0, 0, txn=True)
    append(psm, PID, EPOCH, 1, 1, txn=True)
    psm.take_snapshot()
    recovered = reloaded(tmp_path, 0, 3)
    e = entry(recovered)  # only the newest batch survives a snapshot
    assert (e.first_data_offset, e.first_seq, e.last_data_offset, e.last_seq) == (1, 1, 1, 1)
    assert e.current_txn_first_offset == 0 and recovered.first_unstable_offset() == 0
    append(recovered, PID, EPOCH, 2, 2, txn=True)


def test_recover_from_snapshot_finished_transaction(psm, tmp_path):
    append(psm, PID, EPOCH, 0, 0, txn=True)
    append(psm, PID, EPOCH, 1, 1, txn=True)
    end_txn(psm, PID, EPOCH, ABORT, 2)
    psm.take_snapshot()
    e = entry(reloaded(tmp_path, 0, 3))
    assert (e.first_data_offset, e.last_seq, e.current_txn_first_offset) == (1, 1, None)


def test_recover_from_snapshot_empty_transaction(psm, tmp_path):
    end_txn(psm, PID, EPOCH, ABORT, 0, ts=4242)
    psm.take_snapshot()
    e = entry(reloaded(tmp_path, 0, 1, now_ms=4242))
    assert (e.last_timestamp, e.current_txn_first_offset) == (4242, None)


def test_duplicates_after_reload_match_only_the_snapshotted_batch(psm, tmp_path):
    append(psm, PID, EPOCH, 0, 0)
    append(psm, PID, EPOCH, 1, 1, ts=9)
    psm.take_snapshot()
    recovered = reloaded(tmp_path, 0, 2)
    assert recovered.prepare_append(header(PID, EPOCH, 1, 2), "client") == DuplicateBatch(
        PID, EPOCH, 1, 1, 1, 1, 9
    )
    with pytest.raises(OutOfOrderSequenceNumberError):
        recovered.prepare_append(header(PID, EPOCH, 0, 2), "client")


def test_expired_producers_are_dropped_on_reload(psm, tmp_path):
    append(psm, PID, EPOCH, 0, 0, ts=0)
    append(psm, PID, EPOCH, 1, 1, ts=1)
    psm.take_snapshot()
    recovered = ProducerStateManager(tmp_path, producer_id_expiration_ms=60000)
    recovered.load(0, 2, now_ms=70000)
    assert dict(recovered.active_producers) == {}
    append(recovered, PID, EPOCH, 2, 2, ts=70001)
    assert entry(recovered).last_seq == 2 and recovered.map_end_offset == 3


def test_coordinator_fenced_after_reload(psm, tmp_path):
    append(psm, PID, EPOCH, 0, 99, txn=True)
    end_txn(psm, PID, EPOCH, COMMIT, 100, coordinator_epoch=1)
    psm.take_snapshot()
    recovered = reloaded(tmp_path, 0, 101)
    with pytest.raises(TransactionCoordinatorFencedError):
        end_txn(recovered, PID, EPOCH, COMMIT, 101, coordinator_epoch=0)


def test_delete_snapshots_before(psm, tmp_path):
    append(psm, PID, EPOCH, 0, 0)
    append(psm, PID, EPOCH, 1, 1)
    psm.take_snapshot()
    append(psm, PID, EPOCH, 2, 2)
    psm.take_snapshot()
    assert psm.snapshot_offsets == (2, 3)
    assert psm.delete_snapshots_before(3) == (2,)
    assert snapshot_files(tmp_path) == ["00000000000000000003.snapshot"]
    assert psm.delete_snapshots_before(4) == (3,)
    assert snapshot_files(tmp_path) == [] and psm.latest_snapshot_offset is None


def test_truncate_fully_and_start_at(psm, tmp_path):
    append(psm, PID, EPOCH, 0, 0)
    psm.take_snapshot()
    append(psm, PID, EPOCH, 1, 1, txn=True)
    psm.take_snapshot()
    psm.truncate_fully_and_start_at(0)
    assert snapshot_files(tmp_path) == [] and psm.is_empty and psm.first_unstable_offset() is None
    append(psm, PID, EPOCH, 0, 0)
    psm.take_snapshot()
    assert psm.snapshot_offsets == (1,)


def test_truncate_and_reload_removes_out_of_range_snapshots(psm):
    for seq in range(5):
        append(psm, PID, EPOCH, seq, seq)
        psm.take_snapshot()
    result = psm.truncate_and_reload(1, 3, now_ms=0)
    assert (psm.oldest_snapshot_offset, psm.latest_snapshot_offset) == (2, 3)
    assert result.removed_snapshot_offsets == (1, 4, 5)
    assert (result.reloaded, result.snapshot_offset, result.map_end_offset) == (True, 3, 3)
    assert entry(psm).last_seq == 2


def test_truncate_and_reload_keeps_state_that_already_ends_there(psm):
    append(psm, PID, EPOCH, 0, 0)
    result = psm.truncate_and_reload(0, 1, now_ms=0)
    assert not result.reloaded and entry(psm).last_seq == 0


def test_first_unstable_offset_after_truncation(psm):
    append(psm, PID, EPOCH, 0, 99, txn=True)
    assert psm.first_unstable_offset() == 99
    psm.take_snapshot()  # at 100
    end_txn(psm, PID, EPOCH, COMMIT, 105)
    psm.on_high_watermark_updated(106)
    assert psm.first_unstable_offset() is None
    psm.take_snapshot()  # at 106
    append(psm, PID, EPOCH, 1, 106)
    psm.truncate_and_reload(0, 106, now_ms=0)
    assert psm.first_unstable_offset() is None
    psm.truncate_and_reload(0, 100, now_ms=0)
    assert psm.first_unstable_offset() == 99


def test_load_from_snapshot_retains_non_expired_producers(psm):
    append(psm, 1, EPOCH, 0, 0)
    append(psm, 2, EPOCH, 0, 1)
    psm.take_snapshot()
    psm.truncate_and_reload(1, 2, now_ms=0)
    assert (entry(psm, 1).last_data_offset, entry(psm, 2).last_data_offset) == (0, 1)


@pytest.mark.parametrize(
    "damage",
    [lambda d: b"", lambda d: d[: len(d) // 2], lambda d: bytes(37) + d[37:]],
    ids=["empty", "truncated", "garbage"],
)
def test_corrupt_snapshot_is_deleted_and_an_older_one_loaded(psm, tmp_path, damage):
    append(psm, PID, EPOCH, 0, 0)
    psm.take_snapshot()
    append(psm, PID, EPOCH, 1, 1)
    newest = psm.take_snapshot()
    newest.write_bytes(damage(newest.read_bytes()))
    recovered = ProducerStateManager(tmp_path)
    result = recovered.load(0, 20, now_ms=0)
    assert not newest.exists()
    assert [c.offset for c in result.corrupt_snapshots] == [2]
    assert (result.snapshot_offset, result.map_end_offset) == (1, 1)
    assert entry(recovered).last_data_offset == 0


def test_load_without_snapshots_starts_at_log_start(tmp_path):
    (tmp_path / "00000000000000000005.snapshot.tmp").write_bytes(b"torn")  # crash mid-write
    psm = ProducerStateManager(tmp_path)
    result = psm.load(3, 10, now_ms=0)
    assert (result.snapshot_offset, result.map_end_offset, psm.map_end_offset) == (None, 3, 3)
    assert snapshot_files(tmp_path) == []


def test_load_deletes_snapshots_past_the_log_end(psm, tmp_path):
    append(psm, PID, EPOCH, 0, 0)
    psm.take_snapshot()
    append(psm, PID, EPOCH, 1, 1)
    psm.take_snapshot()
    recovered = ProducerStateManager(tmp_path)
    result = recovered.load(0, 1, now_ms=0)
    assert result.removed_snapshot_offsets == (2,) and recovered.snapshot_offsets == (1,)
    assert entry(recovered).last_seq == 0


def test_remove_stray_snapshots_keeps_clean_shutdown_snapshot(psm, tmp_path):
    for offset in (5, 2, 42):
        snapshot_path(tmp_path, offset).touch()
    assert psm.remove_stray_snapshots([5]) == (2,)
    assert (psm.oldest_snapshot_offset, psm.latest_snapshot_offset) == (5, 42)


def test_remove_all_stray_snapshots(psm, tmp_path):
    for offset in (5, 2, 42):
        snapshot_path(tmp_path, offset).touch()
    psm.remove_stray_snapshots([42])
    assert snapshot_files(tmp_path) == ["00000000000000000042.snapshot"]


def test_snapshot_file_is_readable_standalone(psm, tmp_path):
    append(psm, PID, EPOCH, 0, 0, txn=True)
    path = psm.take_snapshot()
    assert read_snapshot(path) == [entry(psm)]
    assert psm.fetch_snapshot(1) == path and psm.fetch_snapshot(2) is None


# -- rebuilding from the log ---------------------------------------------------------------------


def test_rebuild_from_real_batches_after_a_snapshot(psm, tmp_path):
    append(psm, PID, EPOCH, 0, 0, txn=True)
    psm.take_snapshot()  # at offset 1, transaction open
    log = b"".join(
        [
            build_batch(
                [SimpleRecord(b"a"), SimpleRecord(b"b")],
                base_offset=1,
                producer_id=PID,
                producer_epoch=EPOCH,
                base_sequence=1,
                is_transactional=True,
            ),
            build_batch([SimpleRecord(b"plain")], base_offset=3),  # no producer id
            build_end_txn_marker_batch(
                EndTransactionMarker(ABORT, 4),
                producer_id=PID,
                producer_epoch=EPOCH,
                timestamp_ms=77,
                base_offset=4,
            ),
            build_batch(
                [SimpleRecord(b"c")],
                base_offset=5,
                producer_id=2,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            ),
        ]
    )
    recovered = ProducerStateManager(tmp_path)
    assert recovered.load(0, 6, now_ms=0).map_end_offset == 1

    def with_marker(batch):
        if not batch.header.is_control:
            return batch.header, None
        (record,) = batch.records()
        return batch.header, decode_end_txn_marker(batch.header, record.key, record.value)

    done = recovered.rebuild_from(with_marker(b) for b in iter_batches(log))
    assert [(r.txn, r.last_stable_offset) for r in done] == [
        (CompletedTxn(PID, 0, 4, is_aborted=True), 5)
    ]
    assert recovered.map_end_offset == 6 and recovered.first_undecided_offset() == 5
    e = entry(recovered)
    assert (e.last_seq, e.coordinator_epoch, e.current_txn_first_offset) == (2, 4, None)
    assert len(e.batch_metadata) == 2  # the snapshotted batch plus the replayed one
