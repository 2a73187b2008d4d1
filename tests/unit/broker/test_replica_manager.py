"""The replica manager on real logs in a temp dir, no sockets: produce, fetch, offsets, metadata."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sparklog.broker.config import BrokerConfig
from sparklog.broker.fetch_params import FetchParams, FetchPartition
from sparklog.broker.log_manager import LogManager
from sparklog.broker.partition import PartitionRegistration
from sparklog.broker.replica_base import TopicMetadata
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.errors import OffsetNotAvailableError
from sparklog.records import SimpleRecord, build_batch, iter_batches
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.storage.config import LogConfig
from sparklog.storage.producer_append_info import AppendOrigin

NOW = 1_700_000_000_000
NODE = 1
TOPIC_ID = uuid.UUID(int=7)
NONE, OFFSET_OUT_OF_RANGE, CORRUPT_MESSAGE, UNKNOWN_TOPIC, NOT_LEADER = 0, 1, 2, 3, 6
REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS, INVALID_REQUIRED_ACKS = 7, 19, 21


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def topic_meta(name="t", topic_id=None, partitions=None, **configs):
    regs = partitions or {0: PartitionRegistration((NODE,), (NODE,), NODE, 0, 0)}
    return TopicMetadata(name, topic_id or uuid.uuid4(), regs, LogConfig.from_properties(configs))


@pytest.fixture
def manager(tmp_path):
    log_manager = LogManager(tmp_path, BrokerConfig.from_properties({}), clock_ms=Clock())
    rm = ReplicaManager(NODE, log_manager, clock_ms=Clock())
    yield rm
    log_manager.shutdown()


def batch(*values: bytes, **kwargs) -> bytes:
    return build_batch([SimpleRecord(v) for v in values], now_ms=NOW, **kwargs)


def values(data: bytes) -> list[bytes | None]:
    return [r.value for b in iter_batches(data) for r in b.records()]


def fetch(rm, offset=0, topic="t", max_wait_ms=0, min_bytes=1, isolation=0, replica_id=-1, **kw):
    params = FetchParams(
        replica_id, max_wait_ms, min_bytes, kw.pop("max_bytes", 1 << 20), isolation
    )
    parts = [
        FetchPartition(
            topic, kw.pop("partition", 0), offset, kw.pop("partition_max_bytes", 1 << 20)
        )
    ]
    return asyncio.run(rm.fetch_messages(params, parts))[0]


def produce(rm, records, acks=1, tp=("t", 0), timeout_ms=1000):
    return asyncio.run(rm.append_records(acks, timeout_ms, {tp: records}))[tp]


def test_produce_then_fetch_up_to_the_high_watermark(manager):
    manager.apply_metadata({"t": topic_meta()})
    first = produce(manager, batch(b"a", b"b"))
    second = produce(manager, batch(b"c"), acks=-1)
    assert (first.error_code, first.base_offset, second.base_offset) == (NONE, 0, 2)
    got = fetch(manager)
    assert (got.error_code, got.high_watermark, got.log_start_offset) == (NONE, 3, 0)
    assert values(got.records) == [b"a", b"b", b"c"]
    assert fetch(manager, 3).records == b""
    assert fetch(manager, 4).error_code == OFFSET_OUT_OF_RANGE


def test_produce_errors_leave_the_log_untouched(manager):
    manager.apply_metadata({"t": topic_meta()})
    corrupt = bytearray(batch(b"x"))
    corrupt[-1] ^= 0xFF
    assert produce(manager, bytes(corrupt)).error_code == CORRUPT_MESSAGE
    assert produce(manager, None).error_code == CORRUPT_MESSAGE
    assert produce(manager, batch(b"x"), acks=5).error_code == INVALID_REQUIRED_ACKS
    assert produce(manager, batch(b"x"), tp=("nope", 0)).error_code == UNKNOWN_TOPIC
    assert produce(manager, batch(b"x"), tp=("t", 3)).error_code == UNKNOWN_TOPIC
    assert manager.hosted("t", 0).log.log_end_offset == 0


def test_partitions_led_elsewhere_answer_not_leader(manager):
    regs = {
        0: PartitionRegistration((2,), (2,), 2, 0, 0),  # not hosted here
        1: PartitionRegistration((2, NODE), (2, NODE), 2, 0, 0),  # we follow
    }
    manager.apply_metadata({"t": topic_meta(partitions=regs)})
    assert produce(manager, batch(b"x"), tp=("t", 0)).error_code == NOT_LEADER
    assert produce(manager, batch(b"x"), tp=("t", 1)).error_code == NOT_LEADER
    assert fetch(manager, partition=1).error_code == NOT_LEADER
    assert manager.hosted("t", 1).log.log_end_offset == 0  # a follower keeps its log


def test_acks_all_waits_for_the_isr_and_follower_fetches_release_it(manager):
    regs = {0: PartitionRegistration((NODE, 2), (NODE, 2), NODE, 0, 0)}
    manager.apply_metadata({"t": topic_meta(partitions=regs)})

    async def go():
        waiting = asyncio.create_task(manager.append_records(-1, 10_000, {("t", 0): batch(b"a")}))
        await asyncio.sleep(0)  # the append happened; the produce now waits for the HW
        assert not waiting.done()
        consumer = await manager.fetch_messages(
            FetchParams(-1, 0, 1, 1 << 20), [FetchPartition("t", 0, 0, 1 << 20)]
        )
        follower = await manager.fetch_messages(
            FetchParams(2, 0, 1, 1 << 20), [FetchPartition("t", 0, 0, 1 << 20)]
        )
        await manager.fetch_messages(
            FetchParams(2, 0, 1, 1 << 20), [FetchPartition("t", 0, 1, 1 << 20)]
        )
        return consumer[0], follower[0], await waiting

    consumer, follower, produced = asyncio.run(go())
    assert consumer.records == b"", "consumers see nothing above the high watermark"
    assert values(follower.records) == [b"a"], "followers read up to the log end"
    assert produced[("t", 0)].error_code == NONE
    assert manager.hosted("t", 0).log.high_watermark == 1


def test_acks_all_times_out_or_is_refused_below_min_isr(manager):
    regs = {0: PartitionRegistration((NODE, 2), (NODE, 2), NODE, 0, 0)}
    manager.apply_metadata({"t": topic_meta(partitions=regs)})
    assert produce(manager, batch(b"a"), acks=-1, timeout_ms=20).error_code == REQUEST_TIMED_OUT
    shrunk = {0: PartitionRegistration((NODE, 2), (NODE,), NODE, 0, 1)}
    manager.apply_metadata(
        {
            "t": topic_meta(
                partitions=shrunk,
                topic_id=manager.hosted("t", 0).topic_id,
                **{"min.insync.replicas": "2"},
            )
        }
    )
    assert produce(manager, batch(b"b"), acks=-1).error_code == NOT_ENOUGH_REPLICAS
    assert produce(manager, batch(b"b"), acks=1).error_code == NONE


def test_long_poll_returns_when_an_append_arrives(manager):
    manager.apply_metadata({"t": topic_meta()})

    async def go():
        params = FetchParams(-1, 30_000, 1, 1 << 20)
        waiting = asyncio.create_task(
            manager.fetch_messages(params, [FetchPartition("t", 0, 0, 1 << 20)])
        )
        await asyncio.sleep(0)
        assert not waiting.done() and manager.delayed.waiting_count == 1
        await manager.append_records(1, 1000, {("t", 0): batch(b"wake")})
        return await asyncio.wait_for(waiting, 5)

    (result,) = asyncio.run(go())
    assert values(result.records) == [b"wake"]
    assert manager.delayed.waiting_count == 0


def test_a_long_poll_woken_without_news_does_not_read_again(manager):
    """Kafka's DelayedFetch looks at end offsets before it reads: a caught-up fetch is not read
    as it arrives, a wake that brings no records (a notification on the key, a high watermark
    that did not move) costs no read, and a wake with an append reads once."""
    manager.apply_metadata({"t": topic_meta()})
    reads = []
    log_ = manager.hosted("t", 0).log
    real_read = log_.read
    log_.read = lambda *a, **kw: reads.append(a[0]) or real_read(*a, **kw)

    async def go():
        params = FetchParams(-1, 30_000, 1, 1 << 20)
        waiting = asyncio.create_task(
            manager.fetch_messages(params, [FetchPartition("t", 0, 0, 1 << 20)])
        )
        await asyncio.sleep(0)
        assert reads == [] and manager.delayed.waiting_count == 1
        for _ in range(3):
            manager.delayed.notify(("t", 0))
            await asyncio.sleep(0)
        assert reads == [] and not waiting.done()
        await manager.append_records(1, 1000, {("t", 0): batch(b"news")})
        return await asyncio.wait_for(waiting, 5)

    (result,) = asyncio.run(go())
    assert values(result.records) == [b"news"]
    assert reads == [0]
    # Nothing came before the deadline: the answer (caught up) needs no read of the segments.
    empty = fetch(manager, 1, max_wait_ms=50)
    assert (empty.error_code, empty.records, empty.high_watermark, reads) == (NONE, b"", 1, [0])


def test_a_waiting_session_fetch_looks_again_only_at_the_partitions_notified(manager):
    """An incremental session's fetch over many caught-up partitions: those the session knows
    all about get no result at all, and while the fetch waits a wake looks only at the
    partitions notified since the last look, not at the whole session."""
    n = 20
    regs = {i: PartitionRegistration((NODE,), (NODE,), NODE, 0, 0) for i in range(n)}
    manager.apply_metadata({"t": topic_meta(partitions=regs)})
    looked: list[int] = []

    def unchanged(tp, high_watermark, log_start_offset):
        looked.append(tp[1])
        return True  # the session was told this high watermark and log start already

    async def go():
        params = FetchParams(-1, 30_000, 1, 1 << 20)
        parts = [FetchPartition("t", i, 0, 1 << 20) for i in range(n)]
        waiting = asyncio.create_task(manager.fetch_messages(params, parts, unchanged))
        await asyncio.sleep(0)
        assert sorted(looked) == list(range(n)) and not waiting.done()
        looked.clear()
        manager.delayed.notify(("t", 3))  # no news on partition 3
        await asyncio.sleep(0)
        assert looked == [3] and not waiting.done()
        await manager.append_records(1, 1000, {("t", 7): batch(b"news")})
        return await asyncio.wait_for(waiting, 5)

    results = asyncio.run(go())
    assert [i for i, r in enumerate(results) if r is not None] == [7]
    assert values(results[7].records) == [b"news"] and results[7].high_watermark == 1
    assert looked == [3]  # partition 7 was read, not looked at as caught up; nothing else


async def _let_others_run() -> None:
    """A few loop turns: a fetch reading many partitions may pause once between them
    (`sparklog.protocol.cooperative`) before it parks."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_parked_follower_fetch_waits_under_one_key_and_wakes_for_its_partitions(manager):
    """A live follower's fetch covers every partition it replicates from this leader: it
    parks under one key for that follower, not one per partition. An append to one of its
    partitions wakes it with that partition, and so does a change to one (here the leadership
    moving away); an append to a partition it does not follow does not wake it. A replica id
    that is no live broker parks under its partitions, as a consumer's fetch does."""
    follower, n = 2, 50
    regs = {i: PartitionRegistration((NODE, follower), (NODE,), NODE, 0, 0) for i in range(n)}
    regs[n] = PartitionRegistration((NODE,), (NODE,), NODE, 0, 0)  # not replicated by 2
    manager.apply_metadata({"t": topic_meta(topic_id=TOPIC_ID, partitions=regs)}, [NODE, follower])
    keys_before = manager.delayed.statistics()["keys"]
    params = FetchParams(follower, 30_000, 1, 1 << 20)

    async def go():
        parts = [FetchPartition("t", i, 0, 1 << 20) for i in range(n)]
        parked = asyncio.create_task(manager.fetch_messages(params, parts))
        await _let_others_run()
        assert not parked.done()
        assert manager.delayed.statistics()["keys"] == keys_before + 1
        await manager.append_records(1, 1000, {("t", n): batch(b"elsewhere")})
        await _let_others_run()
        assert not parked.done()
        await manager.append_records(1, 1000, {("t", 4): batch(b"news")})
        first = await asyncio.wait_for(parked, 5)
        parts[4] = FetchPartition("t", 4, 1, 1 << 20)
        parked = asyncio.create_task(manager.fetch_messages(params, parts))
        await _let_others_run()
        assert not parked.done()
        moved = dict(regs)
        moved[9] = PartitionRegistration((NODE, follower), (follower,), follower, 1, 1)
        manager.apply_metadata(
            {"t": topic_meta(topic_id=TOPIC_ID, partitions=moved)}, [NODE, follower]
        )
        second = await asyncio.wait_for(parked, 5)
        return first, second

    async def stranger():
        params = FetchParams(99, 30_000, 1, 1 << 20)
        parked = asyncio.create_task(
            manager.fetch_messages(params, [FetchPartition("t", i, 0, 1 << 20) for i in range(3)])
        )
        await _let_others_run()
        keys = manager.delayed.statistics()["keys"]
        parked.cancel()
        return keys

    first, second = asyncio.run(go())
    assert values(first[4].records) == [b"news"]
    assert second[9].error_code == NOT_LEADER
    assert manager.delayed.statistics() == {"waiting": 0, "keys": 0, "max": 10_000}
    assert asyncio.run(stranger()) == 3


def test_a_caught_up_follower_fetch_that_waits_still_moves_the_high_watermark(manager):
    """The follower's fetch state is taken as the fetch arrives, not when it is answered: a
    follower that has everything parks its fetch, and the acks=all produce it completes is
    released at once."""
    regs = {0: PartitionRegistration((NODE, 2), (NODE, 2), NODE, 0, 0)}
    manager.apply_metadata({"t": topic_meta(partitions=regs)})

    async def go():
        produce_ = asyncio.create_task(manager.append_records(-1, 10_000, {("t", 0): batch(b"a")}))
        await asyncio.sleep(0)
        assert not produce_.done()
        params = FetchParams(2, 30_000, 1, 1 << 20)
        parked = asyncio.create_task(
            manager.fetch_messages(params, [FetchPartition("t", 0, 1, 1 << 20)])
        )
        result = await asyncio.wait_for(produce_, 5)
        assert not parked.done() and manager.hosted("t", 0).log.high_watermark == 1
        parked.cancel()
        return result

    assert asyncio.run(go())[("t", 0)].error_code == NONE


def test_fetch_max_bytes_is_shared_but_the_first_batch_always_comes(manager):
    manager.apply_metadata(
        {
            "t": topic_meta(
                partitions={
                    i: PartitionRegistration((NODE,), (NODE,), NODE, 0, 0) for i in range(3)
                }
            )
        }
    )
    for i in range(3):
        produce(manager, batch(b"x" * 300), tp=("t", i))
        produce(manager, batch(b"y" * 300), tp=("t", i))
    params = FetchParams(-1, 0, 1, 100)  # smaller than one batch
    parts = [FetchPartition("t", i, 0, 1 << 20) for i in range(3)]
    results = asyncio.run(manager.fetch_messages(params, parts))
    assert [len(values(r.records)) for r in results] == [1, 0, 0]


def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(manager):
    manager.apply_metadata({"t": topic_meta()})
    produce(manager, batch(b"plain"))
    txn = dict(producer_id=7, producer_epoch=0, is_transactional=True)
    produce(manager, batch(b"t1", b"t2", base_sequence=0, **txn))
    assert values(fetch(manager, isolation=1).records) == [b"plain"]
    assert manager.list_offset("t", 0, -1, isolation_level=1)[0] == 1
    assert manager.list_offset("t", 0, -1)[0] == 3
    marker = build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.ABORT, 0),
        producer_id=7,
        producer_epoch=0,
        timestamp_ms=NOW,
    )
    result = asyncio.run(
        manager.append_records(1, 1000, {("t", 0): marker}, origin=AppendOrigin.COORDINATOR)
    )
    assert result[("t", 0)].error_code == NONE
    committed = fetch(manager, isolation=1)
    assert committed.last_stable_offset == 4
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(7, 1)]
    assert fetch(manager).aborted_transactions is None


def test_list_offsets_and_delete_records(manager):
    manager.apply_metadata({"t": topic_meta()})
    for i in range(4):
        produce(manager, build_batch([SimpleRecord(b"x", timestamp=NOW + i)]))
    assert manager.list_offset("t", 0, -2) == (0, -1, 0)
    assert manager.list_offset("t", 0, -1) == (4, -1, 0)
    assert manager.list_offset("t", 0, -3) == (3, NOW + 3, 0)
    assert manager.list_offset("t", 0, NOW + 2) == (2, NOW + 2, 0)
    assert manager.list_offset("t", 0, NOW + 9) == (-1, -1, -1)
    assert manager.end_offset_for_epoch("t", 0, 0) == (0, 4)
    assert manager.delete_records("t", 0, 2) == 2
    assert manager.delete_records("t", 0, -1) == 4  # -1 = up to the high watermark
    assert fetch(manager, 1).error_code == OFFSET_OUT_OF_RANGE


def test_metadata_changes_delete_and_recreate_logs(manager, tmp_path):
    first = topic_meta(**{"retention.ms": "1000"})
    manager.apply_metadata({"t": first})
    produce(manager, batch(b"old"))
    assert manager.hosted("t", 0).log.config.retention_ms == 1000
    manager.apply_metadata({"t": topic_meta(topic_id=first.topic_id, **{"retention.ms": "2000"})})
    assert manager.hosted("t", 0).log.config.retention_ms == 2000
    manager.apply_metadata({})
    assert produce(manager, batch(b"x")).error_code == UNKNOWN_TOPIC
    assert not (tmp_path / "t-0").exists()
    manager.apply_metadata({"t": topic_meta()})  # re-created: a new, empty log
    assert produce(manager, batch(b"new")).base_offset == 0


def test_a_new_leader_epoch_starts_in_the_epoch_cache(manager):
    manager.apply_metadata({"t": topic_meta()})
    produce(manager, batch(b"a", b"b"))
    topic_id = manager.hosted("t", 0).topic_id
    regs = {0: PartitionRegistration((NODE,), (NODE,), NODE, 3, 1)}
    manager.apply_metadata({"t": topic_meta(topic_id=topic_id, partitions=regs)})
    assert manager.end_offset_for_epoch("t", 0, 0) == (0, 2)
    assert manager.end_offset_for_epoch("t", 0, 3) == (3, 2)
    produce(manager, batch(b"c"))
    assert [b.header.partition_leader_epoch for b in iter_batches(fetch(manager).records)] == [0, 3]


def test_a_new_leader_behind_its_epoch_start_answers_offset_not_available(manager):
    """KIP-207: re-elected with a HW (0) behind its log end (3), a leader answering ListOffsets
    (latest) with its HW would show a client the HW going back (the multi-host soak saw
    `HW 14500 after 14502` after leaders moved); it says OFFSET_NOT_AVAILABLE until the
    followers caught up. Followers still get the log end."""
    regs = {0: PartitionRegistration((NODE, 2), (NODE, 2), NODE, 0, 0)}
    manager.apply_metadata({"t": topic_meta(partitions=regs)})
    produce(manager, batch(b"a", b"b", b"c"))  # acks=1: the follower has not fetched it
    topic_id = manager.hosted("t", 0).topic_id
    again = {0: PartitionRegistration((NODE, 2), (NODE, 2), NODE, 1, 1)}
    manager.apply_metadata({"t": topic_meta(topic_id=topic_id, partitions=again)})
    assert manager.hosted("t", 0).log.high_watermark == 0
    with pytest.raises(OffsetNotAvailableError, match="behind the start offset"):
        manager.list_offset("t", 0, -1)
    with pytest.raises(OffsetNotAvailableError):
        manager.list_offset("t", 0, NOW + 1)
    assert manager.list_offset("t", 0, -2)[0] == 0  # earliest is always known
    assert manager.list_offset("t", 0, -1, replica_id=2)[0] == 3
    fetch(manager, 3, replica_id=2)  # the follower reached the log end: HW 3
    assert manager.list_offset("t", 0, -1) == (3, -1, 1)
    assert manager.list_offset("t", 0, NOW + 1) == (-1, -1, -1)
