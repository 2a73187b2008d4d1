"""Tiered offsets through the replica manager (KIP-405), on real logs and an in-memory topic
table: consumer fetches below the local log start read the table on the remote reader's
threads, several partitions at once, within the fetch's byte budget, with read_committed's
aborted list; followers get OFFSET_MOVED_TO_TIERED_STORAGE; ListOffsets -4/-5, -2, -3 and by
timestamp span both tiers."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

from sparklog.broker.config import BrokerConfig
from sparklog.broker.fetch_params import FetchParams, FetchPartition
from sparklog.broker.log_manager import LogManager
from sparklog.broker.partition import PartitionRegistration
from sparklog.broker.remote_fetch import FetchByteRate, RemoteLogReader, merge_offsets
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.broker.tier_state import read_tier_state, restore_from_tier
from sparklog.protocol import cooperative
from sparklog.records import SimpleRecord, build_batch, iter_batches
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.storage.producer_append_info import AppendOrigin
from sparklog.storage.remote.config import RemoteLogManagerConfig
from sparklog.storage.remote.tier import RemoteStorageError
from sparklog.structs import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from tests.support.tier_fakes import MemoryTopicTable, tier_log
from tests.unit.broker.test_replica_manager import (
    NODE,
    NOW,
    Clock,
    batch,
    produce,
    topic_meta,
    values,
)

UNKNOWN_SERVER_ERROR, OFFSET_OUT_OF_RANGE, OFFSET_MOVED_TO_TIERED_STORAGE = -1, 1, 109


@pytest.fixture(autouse=True)
def _fresh_slice():
    """Leave the thread's cooperative slice as a new test expects it (its step count is
    thread-local: a count left high makes the next test's reads pause at other places)."""
    yield
    cooperative.restart()


@pytest.fixture
def tiered(tmp_path):
    """A replica manager leading `t` (two partitions, remote storage on) whose first three
    batches of each partition (offsets 0..5) are only in the table."""
    log_manager = LogManager(tmp_path, BrokerConfig.from_properties({}), clock_ms=Clock())
    rm = ReplicaManager(NODE, log_manager, clock_ms=Clock())
    regs = {p: PartitionRegistration((NODE,), (NODE,), NODE, 0, 0) for p in (0, 1)}
    rm.apply_metadata({"t": topic_meta(partitions=regs, **{"remote.storage.enable": "true"})})
    table = MemoryTopicTable("t")
    produced.clear()
    config = RemoteLogManagerConfig(
        remote_log_storage_system_enable=True, remote_log_reader_threads=2
    )
    rm.remote_reader = RemoteLogReader(config, {"t": table}.get, clock_ms=Clock())
    for p in (0, 1):
        for i in range(4):
            ts = NOW + 10 * i + p
            recs = [SimpleRecord(b"%d-%d" % (p, 2 * i + k), timestamp=ts) for k in (0, 1)]
            produce(rm, build_batch(recs, now_ms=ts), tp=("t", p))
        log_ = rm.hosted("t", p).log
        produced[p] = bytes(log_.read(0, 1 << 20, upper_bound_offset=6).records)
        tier_log(log_, table, p, 6)
    yield rm, table
    rm.remote_reader.close(wait=True)
    log_manager.shutdown()


def fetch_many(rm, offsets, *, max_bytes=1 << 20, partition_max_bytes=1 << 20, **kw):
    params = FetchParams(
        kw.get("replica_id", -1), kw.get("max_wait_ms", 500), 1, max_bytes, kw.get("isolation", 0)
    )
    parts = [FetchPartition("t", p, o, partition_max_bytes) for p, o in offsets.items()]
    return asyncio.run(rm.fetch_messages(params, parts))


#: the bytes of offsets 0..5 of each partition, as the log held them before they were tiered
produced: dict[int, bytes] = {}


def batches_from(partition, offset):
    return b"".join(
        b.data for b in iter_batches(produced[partition]) if b.header.base_offset >= offset
    )


def test_a_consumer_fetch_below_the_local_start_is_served_from_the_table(tiered):
    rm, table = tiered
    (got,) = fetch_many(rm, {0: 2})
    assert got.error_code == 0 and (got.high_watermark, got.log_start_offset) == (8, 0)
    assert values(got.records) == [b"0-2", b"0-3", b"0-4", b"0-5"]
    assert got.records == batches_from(0, 2)  # the very bytes produced
    assert table.reads == 1
    assert table.read_threads and all(n.startswith("remote-log-reader") for n in table.read_threads)
    (local,) = fetch_many(rm, {0: 6})  # at the local start: the local log, not the table
    assert values(local.records) == [b"0-6", b"0-7"] and table.reads == 1


def test_several_partitions_of_one_fetch_each_read_the_table(tiered):
    rm, table = tiered
    got = fetch_many(rm, {0: 0, 1: 4}, max_bytes=50 << 20)  # the consumer's defaults
    assert [values(r.records) for r in got] == [
        [b"0-0", b"0-1", b"0-2", b"0-3", b"0-4", b"0-5"],
        [b"1-4", b"1-5"],
    ]
    assert table.reads == 2


def test_fetch_max_bytes_holds_across_remote_and_local_data(tiered):
    """KAFKA-19462/20019: a tiered partition takes its whole partition share of the budget,
    so a local partition after it gets what is left, and the answer stays within max_bytes."""
    rm, _table = tiered
    one = len(next(iter_batches(produced[0])).data)
    got = fetch_many(rm, {0: 0, 1: 6}, max_bytes=3 * one, partition_max_bytes=2 * one)
    assert [len(values(r.records)) for r in got] == [4, 2]  # two batches, then one
    assert sum(len(r.records) for r in got) <= 3 * one
    squeezed = fetch_many(rm, {0: 0, 1: 6}, max_bytes=2 * one, partition_max_bytes=2 * one)
    assert [len(values(r.records)) for r in squeezed] == [4, 0]


def test_read_committed_gets_the_aborted_transactions_from_the_table(tmp_path):
    log_manager = LogManager(tmp_path, BrokerConfig.from_properties({}), clock_ms=Clock())
    rm = ReplicaManager(NODE, log_manager, clock_ms=Clock())
    rm.apply_metadata({"t": topic_meta(**{"remote.storage.enable": "true"})})
    table = MemoryTopicTable("t")
    config = RemoteLogManagerConfig(remote_log_storage_system_enable=True)
    rm.remote_reader = RemoteLogReader(config, {"t": table}.get, clock_ms=Clock())
    try:
        txn = dict(producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
        produce(rm, batch(b"a", b"b", **txn))
        marker = build_end_txn_marker_batch(
            EndTransactionMarker(ControlRecordType.ABORT, 0),
            producer_id=7,
            producer_epoch=0,
            timestamp_ms=NOW,
        )
        asyncio.run(rm.append_records(1, 1000, {("t", 0): marker}, origin=AppendOrigin.COORDINATOR))
        produce(rm, batch(b"c"))
        tier_log(rm.hosted("t", 0).log, table, 0, 3)
        (got,) = fetch_many(rm, {0: 0}, isolation=1)
        assert got.error_code == 0 and values(got.records)[:2] == [b"a", b"b"]
        assert [(a.producer_id, a.first_offset) for a in got.aborted_transactions] == [(7, 0)]
        (uncommitted,) = fetch_many(rm, {0: 0})
        assert uncommitted.aborted_transactions is None
    finally:
        rm.remote_reader.close(wait=True)
        log_manager.shutdown()


def test_a_follower_below_the_local_start_is_told_the_offset_moved_to_tiered_storage(tiered):
    rm, table = tiered
    (got,) = fetch_many(rm, {0: 2}, replica_id=2, max_wait_ms=0)
    assert got.error_code == OFFSET_MOVED_TO_TIERED_STORAGE
    assert (got.high_watermark, got.log_start_offset) == (8, 0)
    assert table.reads == 0


def test_table_failures_answer_kafkas_error_codes(tiered):
    rm, table = tiered
    table.failure = RemoteStorageError("table gone")
    (failed,) = fetch_many(rm, {0: 0})
    assert failed.error_code == UNKNOWN_SERVER_ERROR and not failed.records
    assert rm.remote_reader.failed_reads == 1
    table.failure = None
    table._parts[1].start = 4  # the tier's retention moved past the fetch offset
    got = fetch_many(rm, {0: 0, 1: 2})
    assert [r.error_code for r in got] == [0, OFFSET_OUT_OF_RANGE]


def test_a_slow_table_answers_empty_after_the_remote_wait_without_blocking_the_loop(tiered):
    rm, table = tiered
    rm.remote_reader.config = RemoteLogManagerConfig(
        remote_log_storage_system_enable=True, remote_fetch_max_wait_ms=50
    )
    table.gate = threading.Event()
    ticks = 0

    async def go():
        nonlocal ticks
        params = FetchParams(-1, 500, 1, 1 << 20)
        fetch = asyncio.ensure_future(
            rm.fetch_messages(params, [FetchPartition("t", 0, 0, 1 << 20)])
        )
        while not fetch.done():  # the loop keeps running while the table read waits
            ticks += 1
            await asyncio.sleep(0.005)
        return fetch.result()

    try:
        (got,) = asyncio.run(go())
    finally:
        table.gate.set()
    assert got.error_code == 0 and got.records == b"" and got.high_watermark == 8
    assert ticks > 1 and rm.remote_reader.expired == 1


def test_the_fetch_byte_rate_leaves_tiered_partitions_empty_once_exceeded(tiered):
    rm, table = tiered
    rm.remote_reader.quota = FetchByteRate(1.0)  # one byte per second
    (first,) = fetch_many(rm, {0: 0})
    assert values(first.records)
    (second,) = fetch_many(rm, {0: 0}, max_wait_ms=0)
    assert second.error_code == 0 and second.records == b"" and table.reads == 1
    assert rm.remote_reader.throttled == 1


def list_offset(rm, timestamp, partition=0):
    rm_list = rm.list_offset_with_tier if rm.lists_with_tier("t", partition, timestamp) else None
    if rm_list is None:
        return rm.list_offset("t", partition, timestamp)
    return asyncio.run(rm_list("t", partition, timestamp))


def test_list_offsets_earliest_local_latest_tiered_and_earliest(tiered):
    rm, _table = tiered
    assert list_offset(rm, EARLIEST_LOCAL_TIMESTAMP) == (6, -1, 0)
    assert list_offset(rm, LATEST_TIERED_TIMESTAMP) == (5, -1, 0)
    assert list_offset(rm, EARLIEST_TIMESTAMP)[0] == 0  # the log start, tier included
    assert list_offset(rm, LATEST_TIMESTAMP)[0] == 8


def test_list_offsets_by_timestamp_spans_both_tiers(tiered):
    rm, table = tiered
    assert list_offset(rm, NOW + 10) == (2, NOW + 10, 0)  # only in the table
    assert list_offset(rm, NOW + 11) == (4, NOW + 20, 0)
    assert list_offset(rm, NOW + 25) == (6, NOW + 30, 0)  # past the tier: the local log
    assert list_offset(rm, NOW + 31) == (-1, -1, -1)
    assert list_offset(rm, MAX_TIMESTAMP) == (6, NOW + 30, 0)


def test_list_offsets_by_timestamp_starts_at_the_log_start_before_the_table_drops_rows(tiered):
    rm, table = tiered
    rm.hosted("t", 0).log.delete_records_before(4)  # the table still holds offsets 0..5
    assert table.start_offset(0) == 0
    assert list_offset(rm, NOW) == (4, NOW + 20, 0)
    assert list_offset(rm, NOW + 10) == (4, NOW + 20, 0)
    assert list_offset(rm, NOW + 21) == (6, NOW + 30, 0)  # the local log


def test_latest_tiered_of_a_topic_without_remote_storage_is_minus_one(tiered):
    rm, _table = tiered
    rm.apply_metadata({"plain": topic_meta("plain")})
    produce(rm, batch(b"x"), tp=("plain", 0))
    assert rm.list_offset("plain", 0, LATEST_TIERED_TIMESTAMP) == (-1, -1, -1)
    assert rm.list_offset("plain", 0, EARLIEST_LOCAL_TIMESTAMP) == (0, -1, 0)


def test_max_timestamp_takes_the_later_tier_and_the_earlier_offset_on_a_tie():
    assert merge_offsets(MAX_TIMESTAMP, (3, 90), (7, 50)) == (3, 90)
    assert merge_offsets(MAX_TIMESTAMP, (3, 50), (7, 90)) == (7, 90)
    assert merge_offsets(MAX_TIMESTAMP, (3, 50), (7, 50)) == (3, 50)
    assert merge_offsets(MAX_TIMESTAMP, None, (7, 50)) == (7, 50)
    assert merge_offsets(100, (3, 120), (7, 130)) == (3, 120)
    assert merge_offsets(100, None, (7, 130)) == (7, 130)


def test_a_follower_restarts_at_the_local_start_with_the_tiers_epochs_and_producers(tiered):
    rm, table = tiered
    produce(rm, batch(b"i0", b"i1", producer_id=9, producer_epoch=2, base_sequence=0), tp=("t", 1))
    tier_log(rm.hosted("t", 1).log, table, 1, 10)
    state = read_tier_state({"t": table}.get, "t", 1, 10)
    assert [(e.epoch, e.start_offset) for e in state.epochs] == [(0, 0)]
    assert [(p.producer_id, p.last_sequence, p.last_offset) for p in state.producers] == [(9, 1, 9)]
    log_ = rm.hosted("t", 0).log  # stands for a wiped follower's log
    restore_from_tier(log_, 10, 0, state)
    assert (log_.log_start_offset, log_.local_log_start_offset, log_.log_end_offset) == (0, 10, 10)
    assert [(e.epoch, e.start_offset) for e in log_.epoch_cache.entries()] == [(0, 0)]
    entry = log_.producer_state.last_entry(9)
    assert (entry.producer_epoch, entry.last_seq, entry.last_data_offset) == (2, 1, 9)
    assert log_.producer_state.map_end_offset == 10


def test_sequential_fetches_are_served_from_one_read_ahead(tiered):
    """A consumer reading history forward: one table read, then the read-ahead chunk serves
    the following fetches, each within its partition max bytes and below the high watermark."""
    rm, table = tiered
    one = len(next(iter_batches(produced[0])).data)
    offset, got = 0, []
    while offset < 6:
        (r,) = fetch_many(rm, {0: offset}, partition_max_bytes=one)
        assert r.error_code == 0 and len(r.records) == one  # one batch per fetch
        got += values(r.records)
        offset += 2
    assert got == [b"0-%d" % i for i in range(6)]
    assert table.reads == 1 and rm.remote_reader.cache.hits == 2


def test_without_read_ahead_every_fetch_reads_the_table(tiered):
    rm, table = tiered
    rm.remote_reader.cache = None
    for offset in (0, 2):
        (r,) = fetch_many(rm, {0: offset})
        assert values(r.records)[0] == b"0-%d" % offset
    assert table.reads == 2


def test_the_read_ahead_loads_the_next_chunk_before_the_consumer_reaches_it(monkeypatch):
    import sparklog.broker.remote_read_cache as rrc

    monkeypatch.setattr(rrc, "READ_AHEAD_BYTES", 400)
    batches = [build_batch([SimpleRecord(b"v" * 60)], base_offset=i) for i in range(10)]
    loads: list[int] = []

    def read(offset, read_bytes):
        loads.append(offset)
        out, size = [], 0
        for b in batches[offset:]:
            if out and size + len(b) > read_bytes:
                break
            out.append(b)
            size += len(b)
        return rrc.RemoteRead(offset, b"".join(out), ())

    cache = rrc.ReadAheadCache(max_bytes=10_000, submit=lambda fn: fn())
    key = (uuid.uuid4(), 0)
    got, offset = [], 0
    while offset < 10:
        served = cache.lookup(key, offset, 1, None, False)
        if served is None:
            served = cache.load(key, read, offset, 1, None, False)
        (batch,) = iter_batches(served.records)
        got.append(batch.header.base_offset)
        offset = batch.header.base_offset + 1
    assert got == list(range(10))
    per_chunk = 400 // len(batches[0])  # 3 batches a chunk
    assert loads[:4] == list(range(0, 10, per_chunk))  # each chunk read once, ahead of need
    assert loads == sorted(set(loads)) and cache.misses == 1
    assert cache.size <= 2 * 400


def _gauge(metrics, name):
    from sparklog.metrics.metric import MetricName

    metric = metrics.metric(MetricName.of("kafka.log.remote", "RemoteStorageThreadPool", name))
    return None if metric is None else metric.value()


def test_the_reader_pool_reports_its_queue_and_idle_share():
    """Kafka's RemoteLogReaderTaskQueueSize (reads waiting for a thread) and
    RemoteLogReaderAvgIdlePercent (the threads' idle share) of the reader pool."""
    from sparklog.metrics.registry import Metrics

    metrics = Metrics()
    config = RemoteLogManagerConfig(
        remote_log_storage_system_enable=True, remote_log_reader_threads=1
    )
    reader = RemoteLogReader(config, {}.get, clock_ms=Clock(), metrics=metrics)
    assert _gauge(metrics, "RemoteLogReaderTaskQueueSize") == 0
    started, release = threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        release.wait(30)
        return 1

    async def three() -> list[int]:
        runs = [asyncio.ensure_future(reader.run(slow)) for _ in range(3)]
        await asyncio.to_thread(started.wait, 30)
        assert _gauge(metrics, "RemoteLogReaderTaskQueueSize") == 2
        assert _gauge(metrics, "RemoteLogReaderAvgIdlePercent") < 1.0
        release.set()
        return list(await asyncio.gather(*runs))

    try:
        assert asyncio.run(three()) == [1, 1, 1]
        assert _gauge(metrics, "RemoteLogReaderTaskQueueSize") == 0
    finally:
        reader.close(wait=True)
    assert _gauge(metrics, "RemoteLogReaderTaskQueueSize") is None  # gone with the pool


def test_pool_idle_share_over_the_window():
    from sparklog.broker.remote_fetch import PoolIdleMeter

    meter = PoolIdleMeter(threads=2, window_ns=10_000, now_ns=0)
    assert meter.idle_ratio(now_ns=0) == 1.0
    meter.started(now_ns=1_000)
    meter.finished(started_ns=1_000, now_ns=5_000)  # one thread busy 4 of 10 units
    assert meter.idle_ratio(now_ns=10_000) == pytest.approx(1 - 4_000 / 20_000)
    meter.started(now_ns=10_000)  # running: counts up to now
    # the window is [2_000, 12_000]: 3_000 of the finished read, 2_000 of the running one
    assert meter.idle_ratio(now_ns=12_000) == pytest.approx(1 - 5_000 / 20_000)
