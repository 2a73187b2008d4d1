"""The record accumulator: batching, readiness (linger, full, flush), draining, retries in order."""

from __future__ import annotations

from sparklog.client.accumulator import (
    BatchMetadata,
    ProducerBatch,
    RecordAccumulator,
    RecordMetadata,
    estimate_record_bytes,
    restamp_producer,
)
from sparklog.records import SimpleRecord, build_batch, iter_batches
from sparklog.records.compression import CompressionType
from sparklog.structs import TopicPartition

from .helpers import cluster

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def accumulator(**overrides) -> RecordAccumulator:
    settings = {
        "batch_size": 100,
        "linger_ms": 10,
        "buffer_memory": 10_000,
        "delivery_timeout_ms": 1_000,
        "retry_backoff_ms": 50,
        "retry_backoff_max_ms": 400,
    }
    settings.update(overrides)
    return RecordAccumulator(**settings)


def record(value: bytes = b"x" * 10, ts: int = 1) -> tuple:
    """What `append` takes for one record: timestamp, key, value, headers."""
    return (ts, None, value, ())


def noop(meta, error):
    pass


def test_records_share_a_batch_until_batch_size():
    acc = accumulator(batch_size=130)  # the 61-byte batch header counts, as in Kafka
    size = estimate_record_bytes(None, b"x" * 10, ())
    assert acc.append(T0, *record(), noop, size, now_ms=0) is True  # a new batch wakes the sender
    wakes = [acc.append(T0, *record(), noop, size, now_ms=0) for _ in range(3)]
    batches = acc.queued(T0)
    assert len(batches) == 2
    assert [b.record_count for b in batches] == [2, 2]
    # a record that does not fill its batch leaves the sender alone; a second batch wakes it
    assert wakes == [False, True, False]
    assert acc.used_bytes == 4 * size


def test_a_record_larger_than_batch_size_gets_its_own_batch():
    acc = accumulator()
    acc.append(T0, *record(b"y" * 500), noop, 521, now_ms=0)
    acc.append(T0, *record(), noop, 31, now_ms=0)
    assert [b.record_count for b in acc.queued(T0)] == [1, 1]


def test_ready_after_linger_or_when_full():
    acc = accumulator()
    c = cluster({"t": [1, 2]})
    acc.append(T0, *record(), noop, 31, now_ms=0)
    check = acc.ready(5, c)
    assert check.nodes == frozenset()
    assert check.next_ready_check_ms == 5
    assert acc.ready(10, c).nodes == frozenset({1})
    for _ in range(4):  # fill partition 1's batch: sendable at once
        acc.append(T1, *record(), noop, 31, now_ms=0)
    assert acc.ready(0, c).nodes == frozenset({2})


def test_flush_and_close_make_everything_sendable():
    acc = accumulator()
    c = cluster({"t": [1, 2]})
    acc.append(T0, *record(), noop, 31, now_ms=0)
    acc.flushes_in_progress += 1
    assert acc.ready(0, c).nodes == frozenset({1})
    acc.flushes_in_progress -= 1
    acc.closed = True
    assert acc.ready(0, c).nodes == frozenset({1})


def test_unknown_leaders_are_reported():
    acc = accumulator()
    acc.append(T1, *record(), noop, 31, now_ms=0)
    check = acc.ready(100, cluster({"t": [1, -1]}))
    assert check.nodes == frozenset()
    assert check.unknown_leader_topics == frozenset({"t"})


def test_drain_takes_one_batch_per_partition_within_max_request_size():
    acc = accumulator(batch_size=130)
    c = cluster({"t": [1, 1]})
    for tp in (T0, T0, T1):  # two batches of two records for T0, one for T1
        acc.append(tp, *record(), noop, 31, now_ms=0)
        acc.append(tp, *record(), noop, 31, now_ms=0)
    first = acc.drain(c, 1, max_request_size=10_000, now_ms=20)
    assert sorted(b.tp for b in first) == [T0, T1]
    assert all(b.closed for b in first)
    second = acc.drain(c, 1, max_request_size=10_000, now_ms=20)
    assert [b.tp for b in second] == [T0]
    assert acc.drain(c, 1, max_request_size=10_000, now_ms=20) == []
    assert acc.drain(c, 2, max_request_size=10_000, now_ms=20) == []


def test_drain_stops_at_max_request_size_but_always_sends_one():
    acc = accumulator(batch_size=1000)
    c = cluster({"t": [1, 1]})
    acc.append(T0, *record(b"a" * 300), noop, 321, now_ms=0)
    acc.append(T1, *record(b"b" * 300), noop, 321, now_ms=0)
    assert len(acc.drain(c, 1, max_request_size=100, now_ms=20)) == 1
    assert len(acc.drain(c, 1, max_request_size=100, now_ms=20)) == 1


def test_retries_go_back_in_sequence_order_and_wait_for_earlier_in_flight():
    acc = accumulator(batch_size=31, linger_ms=0)
    c = cluster({"t": [1]})
    for _ in range(3):
        acc.append(T0, *record(), noop, 31, now_ms=0)
    sent = []
    for seq in (0, 1, 2):
        (batch,) = acc.drain(c, 1, 10_000, now_ms=0)
        batch.base_sequence = seq
        sent.append(batch)
    assert acc.in_flight_count(T0) == 3
    # The middle batch fails first, then the last: both return sorted by sequence.
    acc.on_attempt_done(sent[2])
    acc.reenqueue(sent[2], now_ms=0)
    acc.on_attempt_done(sent[1])
    acc.reenqueue(sent[1], now_ms=0)
    assert [b.base_sequence for b in acc.queued(T0)] == [1, 2]
    # Muted while batch 0 is still in flight, and backing off afterwards.
    assert acc.ready(100, c).nodes == frozenset()
    acc.on_attempt_done(sent[0])
    acc.deallocate(sent[0])
    assert acc.ready(10, c).nodes == frozenset()  # backoff 50 ms
    assert acc.ready(50, c).nodes == frozenset({1})
    (retry,) = acc.drain(c, 1, 10_000, now_ms=50)
    assert retry is sent[1] and retry.attempts == 1


def test_retry_backoff_grows_exponentially_up_to_the_max():
    acc = accumulator()
    batch = ProducerBatch(T0, 0)
    backoffs = []
    for _ in range(5):
        acc.reenqueue(batch, now_ms=0)
        acc._queues[T0].clear()
        backoffs.append(batch.backoff_ms)
    assert backoffs == [50, 100, 200, 400, 400]


def test_expire_removes_batches_older_than_delivery_timeout():
    acc = accumulator()
    acc.append(T0, *record(), noop, 31, now_ms=0)
    acc.append(T1, *record(), noop, 31, now_ms=500)
    expired = acc.expire(1_000)
    assert [b.tp for b in expired] == [T0]
    assert acc.queued(T0) == [] and len(acc.queued(T1)) == 1


def test_memory_is_reserved_until_batches_complete():
    acc = accumulator(buffer_memory=100)
    assert acc.has_room_for(200)  # a lone record always fits an empty buffer
    acc.append(T0, *record(), noop, 60, now_ms=0)
    assert not acc.has_room_for(41)
    assert acc.has_room_for(40)
    (batch,) = acc.drain(cluster({"t": [1]}), 1, 10_000, now_ms=100)
    acc.on_attempt_done(batch)
    acc.deallocate(batch)
    assert acc.used_bytes == 0 and not acc.has_incomplete


def test_batch_completion_gives_each_record_its_offset():
    got = []
    batch = ProducerBatch(T0, 0)
    for ts in (7, 8):
        batch.try_append(*record(ts=ts), lambda m, e: got.append((m, e)), 31, 1000)
    batch.complete(base_offset=40, log_append_time_ms=-1)
    assert got == [(RecordMetadata("t", 0, 40, 7), None), (RecordMetadata("t", 0, 41, 8), None)]
    assert batch.done


def test_log_append_time_replaces_record_timestamps_and_errors_reach_every_record():
    got = []
    batch = ProducerBatch(T0, 0)
    batch.try_append(*record(ts=7), lambda m, e: got.append(m), 31, 1000)
    batch.complete(base_offset=0, log_append_time_ms=99)
    assert got == [RecordMetadata("t", 0, 0, 99)]
    errors = []
    failing = ProducerBatch(T0, 0)
    failing.try_append(*record(), lambda m, e: errors.append(e), 31, 1000)
    failing.try_append(*record(), lambda m, e: errors.append(e), 31, 1000)
    boom = RuntimeError("boom")
    failing.fail(boom)
    assert errors == [boom, boom]


def test_encode_uses_producer_id_and_sequence():
    batch = ProducerBatch(T0, 0)
    batch.try_append(*record(ts=5), noop, 31, 1000)
    batch.producer_id, batch.producer_epoch, batch.base_sequence = 7, 1, 42
    (decoded,) = iter_batches(batch.encode(CompressionType.GZIP))
    decoded.ensure_valid()
    h = decoded.header
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 1, 42)
    assert h.compression == CompressionType.GZIP
    assert [r.value for r in decoded.records()] == [b"x" * 10]


def test_prebuilt_batches_are_restamped_with_a_valid_crc():
    raw = build_batch(
        [SimpleRecord(b"a", timestamp=1), SimpleRecord(b"b", timestamp=1)],
        compression=CompressionType.LZ4,
    )
    stamped = restamp_producer(raw, producer_id=11, producer_epoch=2, base_sequence=9)
    (decoded,) = iter_batches(stamped)
    decoded.ensure_valid()
    assert (decoded.header.producer_id, decoded.header.base_sequence) == (11, 9)
    assert [r.value for r in decoded.records()] == [b"a", b"b"]
    got = []
    acc = accumulator()
    acc.append_prebuilt(T0, raw, 2, lambda m, e: got.append(m), now_ms=0)
    (batch,) = acc.queued(T0)
    assert batch.closed and batch.record_count == 2
    batch.complete(base_offset=5, log_append_time_ms=-1)
    assert got == [BatchMetadata("t", 0, 5, 2, -1)]
