"""Replication without sockets: two replica managers on real logs (leader and follower sides),
the fetcher's decisions, and the AlterPartition sender."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sparklog.broker.config import BrokerConfig
from sparklog.broker.fetch_params import FetchParams, FetchPartition
from sparklog.broker.isr_manager import AlterPartitionManager
from sparklog.broker.log_manager import LogManager
from sparklog.broker.partition import IsrChangeProposed, PartitionRegistration
from sparklog.broker.partition_fetch_state import (
    FetchPhase,
    OutOfRangeReset,
    reset_for_out_of_range,
)
from sparklog.broker.replica_base import TopicMetadata
from sparklog.broker.replica_fetcher_manager import ReplicaFetcherManager, fetcher_id_for
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.broker.truncation import truncation_for
from sparklog.errors import FencedLeaderEpochError, NotLeaderOrFollowerError, RequestTimedOutError
from sparklog.metadata.alter_partition import IsrChangeOutcome
from sparklog.records import SimpleRecord, build_batch, iter_batches
from sparklog.storage.config import LogConfig

NOW = 1_700_000_000_000
TOPIC_ID = uuid.uuid4()
TP = ("t", 0)
NONE = 0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


class RecordingAlterPartition:
    """Stands in for the AlterPartition sender: keeps what the replica manager submits."""

    def __init__(self) -> None:
        self.submitted: list[tuple[tuple[str, int], uuid.UUID, IsrChangeProposed]] = []

    def submit(self, tp, topic_id, proposal) -> None:
        self.submitted.append((tp, topic_id, proposal))


def meta(leader, isr, replicas=(1, 2, 3), leader_epoch=0, partition_epoch=0, **configs):
    registration = PartitionRegistration(replicas, isr, leader, leader_epoch, partition_epoch)
    return {
        "t": TopicMetadata("t", TOPIC_ID, {0: registration}, LogConfig.from_properties(configs))
    }


@pytest.fixture
def brokers(tmp_path):
    """Replica managers of brokers 1, 2 and 3 on their own data dirs, one shared clock."""
    clock = Clock()
    made = {}
    for node in (1, 2, 3):
        (tmp_path / str(node)).mkdir()
        lm = LogManager(tmp_path / str(node), BrokerConfig.from_properties({}), clock_ms=clock)
        made[node] = ReplicaManager(node, lm, clock_ms=clock)
        made[node].alter_partition = RecordingAlterPartition()
    yield made, clock
    for rm in made.values():
        rm.log_manager.shutdown()


def batch(*values: bytes, **kwargs) -> bytes:
    return build_batch([SimpleRecord(v) for v in values], now_ms=NOW, **kwargs)


def produce(rm, records, acks=1):
    return asyncio.run(rm.append_records(acks, 1000, {TP: records}))[TP]


def follower_fetch(leader, replica_id, offset, current_leader_epoch=-1):
    params = FetchParams(replica_id, 0, 1, 1 << 20)
    part = FetchPartition("t", 0, offset, 1 << 20, current_leader_epoch)
    return asyncio.run(leader.fetch_messages(params, [part]))[0]


def replicate(leader, follower, leader_epoch=0):
    """One fetch round of `follower` from `leader`, as the fetcher does it."""
    offset = follower.hosted(*TP).log.log_end_offset
    got = follower_fetch(leader, follower.node_id, offset, leader_epoch)
    assert got.error_code == NONE
    return follower.append_fetched(
        TP,
        leader_epoch,
        got.records,
        leader_high_watermark=got.high_watermark,
        leader_log_start_offset=got.log_start_offset,
    )


def values(rm) -> list[bytes]:
    log_ = rm.hosted(*TP).log
    data = log_.read(0, 1 << 20, upper_bound_offset=log_.log_end_offset).records
    return [r.value for b in iter_batches(data) for r in b.records()]


# -- follower side ---------------------------------------------------------------------------------


def test_followers_copy_offsets_epochs_and_the_high_watermark(brokers):
    rms, _clock = brokers
    for rm in rms.values():
        rm.apply_metadata(meta(leader=1, isr=(1, 2, 3), leader_epoch=3, partition_epoch=3))
    leader, f2, f3 = rms[1], rms[2], rms[3]
    produce(leader, batch(b"a", b"b"))
    produce(leader, batch(b"c"))
    assert replicate(leader, f2, 3) == 3
    assert f2.hosted(*TP).log.high_watermark == 0, "the leader's HW had not moved yet"
    assert replicate(leader, f3, 3) == 3
    assert leader.hosted(*TP).log.high_watermark == 0  # followers' LEOs arrive with next fetch
    replicate(leader, f2, 3)
    replicate(leader, f3, 3)
    assert leader.hosted(*TP).partition.high_watermark == 3
    replicate(leader, f2, 3)
    assert f2.hosted(*TP).log.high_watermark == 3
    assert f2.hosted(*TP).partition.high_watermark == 3
    assert values(f2) == [b"a", b"b", b"c"]
    f2_log, leader_log = f2.hosted(*TP).log, leader.hosted(*TP).log
    assert f2_log.epoch_cache.entries() == leader_log.epoch_cache.entries()
    epochs = [
        b.header.partition_leader_epoch for b in iter_batches(f2_log.read(0, 1 << 20).records)
    ]
    assert epochs == [3, 3]


def test_a_new_leader_deduplicates_an_idempotent_retry_it_only_replicated(brokers):
    rms, _clock = brokers
    for rm in rms.values():
        rm.apply_metadata(meta(leader=1, isr=(1, 2, 3)))
    idempotent = {"producer_id": 42, "producer_epoch": 0}
    first = produce(rms[1], batch(b"once", base_sequence=0, **idempotent))
    assert (first.error_code, first.base_offset) == (NONE, 0)
    replicate(rms[1], rms[2])
    for rm in (rms[2], rms[3]):
        rm.apply_metadata(meta(leader=2, isr=(2, 3), leader_epoch=1, partition_epoch=1))
    retry = produce(rms[2], batch(b"once", base_sequence=0, **idempotent))
    assert (retry.error_code, retry.base_offset) == (NONE, 0)
    assert values(rms[2]) == [b"once"]
    nxt = produce(rms[2], batch(b"twice", base_sequence=1, **idempotent))
    assert nxt.base_offset == 1


def test_the_follower_log_start_follows_the_leader_up_to_its_own_high_watermark(brokers):
    rms, _clock = brokers
    for rm in (rms[1], rms[2]):
        rm.apply_metadata(meta(leader=1, isr=(1, 2), replicas=(1, 2)))
    for i in range(4):
        produce(rms[1], batch(b"%d" % i))
    replicate(rms[1], rms[2])
    replicate(rms[1], rms[2])  # learns HW 4
    assert rms[1].delete_records("t", 0, 3) == 3
    replicate(rms[1], rms[2])
    assert rms[2].hosted(*TP).log.log_start_offset == 3


def test_an_empty_follower_starts_where_the_leaders_first_batch_starts(brokers):
    rms, _clock = brokers
    for rm in (rms[1], rms[2]):
        rm.apply_metadata(meta(leader=1, isr=(1,), replicas=(1, 2)))
    produce(rms[1], batch(b"a", b"b", b"c"))
    produce(rms[1], batch(b"d"))
    rms[1].delete_records("t", 0, 2)  # the leader's log starts inside the first batch
    rms[2].truncate_fully_follower(TP, 0, 2)  # what the out-of-range reset does
    got = follower_fetch(rms[1], 2, 2)
    assert (
        rms[2].append_fetched(
            TP, 0, got.records, leader_high_watermark=4, leader_log_start_offset=2
        )
        == 4
    )
    assert rms[2].hosted(*TP).log.log_start_offset == 2


def test_nothing_is_appended_once_this_broker_leads_or_the_epoch_moved(brokers):
    rms, _clock = brokers
    for rm in (rms[1], rms[2]):
        rm.apply_metadata(meta(leader=1, isr=(1, 2), replicas=(1, 2)))
    produce(rms[1], batch(b"a"))
    got = follower_fetch(rms[1], 2, 0)
    rms[2].apply_metadata(meta(leader=1, isr=(1, 2), replicas=(1, 2), leader_epoch=1))
    with pytest.raises(FencedLeaderEpochError):
        rms[2].append_fetched(
            TP, 0, got.records, leader_high_watermark=1, leader_log_start_offset=0
        )
    rms[2].apply_metadata(
        meta(leader=2, isr=(1, 2), replicas=(1, 2), leader_epoch=2, partition_epoch=2)
    )
    with pytest.raises(NotLeaderOrFollowerError):
        rms[2].append_fetched(
            TP, 2, got.records, leader_high_watermark=1, leader_log_start_offset=0
        )
    assert rms[2].hosted(*TP).log.log_end_offset == 0


def test_a_divergent_suffix_is_cut_at_the_new_leaders_epoch_boundary(brokers):
    rms, _clock = brokers
    old, new = rms[1], rms[2]
    for rm in (old, new):
        rm.apply_metadata(meta(leader=1, isr=(1, 2), replicas=(1, 2)))
    for i in range(3):
        produce(old, batch(b"c%d" % i))
    replicate(old, new)
    for i in range(2):  # the old leader's suffix the new leader never gets
        produce(old, batch(b"lost%d" % i))
    for rm in (old, new):
        rm.apply_metadata(
            meta(leader=2, isr=(2,), replicas=(1, 2), leader_epoch=1, partition_epoch=1)
        )
    produce(new, batch(b"new"))
    old_log = old.hosted(*TP).log
    asked = old_log.latest_epoch
    epoch, end = new.end_offset_for_epoch("t", 0, asked, current_leader_epoch=1)
    assert (epoch, end) == (0, 3)
    cut = truncation_for(
        epoch,
        end,
        local_end_offset_for=lambda e: old_log.epoch_cache.end_offset_for(
            e, old_log.log_end_offset
        ),
        log_end_offset=old_log.log_end_offset,
        high_watermark=old_log.high_watermark,
    )
    assert (cut.offset, cut.done) == (3, True)
    assert old.truncate_follower(TP, 1, cut.offset) == 3
    replicate(new, old, leader_epoch=1)
    assert values(old) == [b"c0", b"c1", b"c2", b"new"]
    assert old_log.epoch_cache.entries() == new.hosted(*TP).log.epoch_cache.entries()


def truncate_against(follower, leader, leader_epoch, max_rounds=4) -> int:
    """The fetcher's truncation phase: ask, cut, repeat; returns the rounds it took."""
    log_ = follower.hosted(*TP).log
    for rounds in range(1, max_rounds + 1):
        epoch, end = leader.end_offset_for_epoch("t", 0, log_.latest_epoch, leader_epoch)
        cut = truncation_for(
            epoch,
            end,
            local_end_offset_for=lambda e: log_.epoch_cache.end_offset_for(e, log_.log_end_offset),
            log_end_offset=log_.log_end_offset,
            high_watermark=log_.high_watermark,
        )
        follower.truncate_follower(TP, leader_epoch, cut.offset)
        if cut.done:
            return rounds
    raise AssertionError(f"truncation did not finish; still asking for {log_.latest_epoch}")


def test_an_epoch_a_leader_stamped_but_never_wrote_does_not_stall_truncation(brokers):
    rms, _clock = brokers

    def elect(leader, epoch, isr=(1, 2, 3)):
        for rm in rms.values():
            rm.apply_metadata(meta(leader, isr, leader_epoch=epoch, partition_epoch=epoch))

    elect(1, 0)
    produce(rms[1], batch(b"a"))
    replicate(rms[1], rms[2])
    replicate(rms[1], rms[3])
    elect(1, 1)
    produce(rms[1], batch(b"b"))
    replicate(rms[1], rms[3], leader_epoch=1)  # only 3 gets it
    elect(2, 2)  # 2 stamps 2@1 and is gone before appending anything
    elect(3, 3)
    produce(rms[3], batch(b"c"))
    assert [(e.epoch, e.start_offset) for e in rms[2].hosted(*TP).log.epoch_cache.entries()] == [
        (0, 0),
        (2, 1),
    ]
    assert truncate_against(rms[2], rms[3], 3) == 2
    assert rms[2].hosted(*TP).log.latest_epoch == 0
    replicate(rms[3], rms[2], leader_epoch=3)
    assert values(rms[2]) == [b"a", b"b", b"c"]


# -- leader side -----------------------------------------------------------------------------------


def test_a_caught_up_live_follower_is_proposed_and_the_outcome_applied(brokers):
    rms, clock = brokers
    leader = rms[1]
    leader.apply_metadata(meta(leader=1, isr=(1, 2)), live_brokers=[1, 2])
    produce(leader, batch(b"a"))
    follower_fetch(leader, 2, 1)
    follower_fetch(leader, 3, 1)  # caught up, but broker 3 is fenced
    assert leader.alter_partition.submitted == []
    leader.apply_metadata(meta(leader=1, isr=(1, 2)), live_brokers=[1, 2, 3])
    follower_fetch(leader, 3, 1)
    ((tp, topic_id, proposal),) = leader.alter_partition.submitted
    assert (tp, topic_id, proposal) == (TP, TOPIC_ID, IsrChangeProposed((1, 2, 3), 0, 0))
    outcome = IsrChangeOutcome(TOPIC_ID, 0, 0, None, 1, 0, (1, 2, 3), 1)
    assert leader.on_isr_outcome(TP, proposal, outcome) is False
    partition = leader.hosted(*TP).partition
    assert (partition.isr, partition.partition_epoch) == ((1, 2, 3), 1)


def test_shrink_proposals_and_an_isr_that_shrank_while_acks_all_waited(brokers):
    """The ISR shrinks below min.insync.replicas while an acks=all produce waits: the high
    watermark no longer moves (Kafka 4.x's `isUnderMinIsr`, KIP-966: the replicas that left are
    eligible leaders and must hold every committed record), so the produce times out."""
    rms, clock = brokers
    leader = rms[1]
    leader.apply_metadata(meta(leader=1, isr=(1, 2, 3), min_insync_replicas="3"))

    async def go():
        waiting = asyncio.create_task(leader.append_records(-1, 300, {TP: batch(b"a")}))
        await asyncio.sleep(0)
        assert not waiting.done()
        clock.now += 31_000  # both followers silent past replica.lag.time.max.ms
        assert leader.maybe_shrink_isr(clock.now, 30_000) == 1
        ((_tp, _id, proposal),) = leader.alter_partition.submitted
        assert proposal.isr == (1,)
        leader.on_isr_outcome(TP, proposal, IsrChangeOutcome(TOPIC_ID, 0, 0, None, 1, 0, (1,), 1))
        return await asyncio.wait_for(waiting, 5)

    result = asyncio.run(go())[TP]
    assert result.error_code == RequestTimedOutError.code
    assert leader.hosted(*TP).log.high_watermark == 0
    assert leader.hosted(*TP).log.log_end_offset == 1


def test_the_high_watermark_waits_while_the_isr_is_below_min_isr(brokers):
    """acks=1 appends to a leader alone in the ISR of a min.insync.replicas=2 topic stay above
    the high watermark until a follower is back in the ISR (Kafka 4.x, KIP-966)."""
    rms, clock = brokers
    leader = rms[1]
    leader.apply_metadata(meta(leader=1, isr=(1,), min_insync_replicas="2"))
    produce(leader, batch(b"a"))
    assert leader.hosted(*TP).log.high_watermark == 0
    follower_fetch(leader, 2, 1)
    ((_tp, _id, proposal),) = leader.alter_partition.submitted
    assert proposal.isr == (1, 2) and leader.hosted(*TP).log.high_watermark == 0
    leader.on_isr_outcome(TP, proposal, IsrChangeOutcome(TOPIC_ID, 0, 0, None, 1, 0, (1, 2), 1))
    assert leader.hosted(*TP).log.high_watermark == 1


# -- fetcher decisions -----------------------------------------------------------------------------


def test_out_of_range_resets_follow_kafka():
    assert reset_for_out_of_range(10, 0, 7) == OutOfRangeReset(7, truncate_to=7)
    assert reset_for_out_of_range(10, 15, 20) == OutOfRangeReset(15, start_at=15)
    assert reset_for_out_of_range(10, 5, 20) == OutOfRangeReset(10)


def test_fetcher_ids_are_stable_and_in_range():
    ids = {fetcher_id_for(("topic", p), 3) for p in range(30)}
    assert ids == {0, 1, 2}
    assert fetcher_id_for(("topic", 4), 3) == fetcher_id_for(("topic", 4), 3)
    assert fetcher_id_for(("topic", 4), 1) == 0


def test_fetcher_manager_moves_partitions_between_leaders(brokers):
    rms, clock = brokers
    config = BrokerConfig.from_properties({"num.replica.fetchers": "2"})

    async def go():
        manager = ReplicaFetcherManager(2, rms[2], config, lambda _id: None, clock_ms=clock)
        manager.add_partition(("a", 0), TOPIC_ID, 1, 0)
        manager.add_partition(("b", 0), TOPIC_ID, 3, 0)
        manager.add_partition(("c", 0), TOPIC_ID, -1, 0)  # offline: nobody to fetch from
        manager.add_partition(("d", 0), TOPIC_ID, 2, 0)  # ourselves
        assert manager.statistics() == {"fetchers": 2, "partitions": 2}
        assert manager.fetch_state(("a", 0)).phase is FetchPhase.TRUNCATING
        manager.add_partition(("a", 0), TOPIC_ID, 3, 1)  # new leader
        state = manager.fetch_state(("a", 0))
        assert (state.leader_id, state.leader_epoch) == (3, 1)
        assert manager.statistics()["partitions"] == 2
        manager.remove_partition(("a", 0))
        manager.remove_partition(("b", 0))
        assert manager.statistics() == {"fetchers": 0, "partitions": 0}
        manager.add_partition(("e", 0), TOPIC_ID, 1, 0)
        await asyncio.sleep(0.01)  # its fetcher runs (and finds no endpoint for broker 1)
        await manager.shutdown()
        assert manager.statistics() == {"fetchers": 0, "partitions": 0}

    asyncio.run(go())


# -- the AlterPartition sender ---------------------------------------------------------------------


class ScriptedController:
    """Answers AlterPartition from a script of error codes; records every request."""

    def __init__(self, script):
        self.script = list(script)
        self.requests: list[list] = []
        self.release = asyncio.Event()

    async def alter_partition(self, broker_id, broker_epoch, changes):
        self.requests.append(list(changes))
        await self.release.wait()
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return [
            IsrChangeOutcome(c.topic_id, c.partition, step, None, 1, c.leader_epoch, c.new_isr, 9)
            for c in changes
        ]


def test_alter_partition_batches_one_request_at_a_time_and_retries():
    async def go():
        controller = ScriptedController([ConnectionError("down"), 0, 0])
        answered = []

        def on_outcome(tp, proposal, outcome):
            answered.append((tp, outcome.error_code))
            return outcome.error_code != 0

        manager = AlterPartitionManager(controller, 1, lambda: 5, on_outcome, retry_backoff_ms=1)
        sender = asyncio.create_task(manager.run())
        manager.submit(("t", 0), TOPIC_ID, IsrChangeProposed((1, 2), 0, 0))
        manager.submit(("t", 1), TOPIC_ID, IsrChangeProposed((1,), 0, 0))
        await asyncio.sleep(0.01)
        assert [len(r) for r in controller.requests] == [2]  # both in one request
        manager.submit(("t", 2), TOPIC_ID, IsrChangeProposed((1, 3), 0, 0))
        assert manager.statistics()["in_flight"] == 2 and manager.statistics()["unsent"] == 1
        controller.release.set()
        for _ in range(100):
            if len(answered) >= 5:
                break
            await asyncio.sleep(0.01)
        sender.cancel()
        return controller.requests, answered

    requests, answered = asyncio.run(go())
    # the retried two and the one submitted meanwhile go out together
    assert [sorted(c.partition for c in r) for r in requests] == [[0, 1], [0, 1, 2]]
    assert answered[:2] == [(("t", 0), 13), (("t", 1), 13)]  # NETWORK_EXCEPTION: retried
    assert sorted(answered[2:]) == [(("t", 0), 0), (("t", 1), 0), (("t", 2), 0)]


# -- truncation of a returning leader (issue 27) -----------------------------------------------------


def test_a_returning_leader_with_producer_state_truncates_cleanly(brokers):
    """The old leader cuts idempotent and transactional records nobody else got. Before the fix
    `Log.truncate_to` raised TypeError (the log passed as the time) once a producer snapshot
    existed, leaving producer state cleared and HW above the log end."""
    from tests.log_checks import check_log_consistent

    rms, _clock = brokers
    old, new = rms[1], rms[2]
    for rm in (old, new):
        rm.apply_metadata(meta(leader=1, isr=(1, 2), replicas=(1, 2), **{"segment.bytes": 300}))
    for i in range(6):
        produce(old, batch(b"i%d" % i, producer_id=7, producer_epoch=0, base_sequence=i))
    replicate(old, new)
    replicate(old, new)  # the follower's fetch position moves the leader's HW up
    old_log = old.hosted(*TP).log
    assert old_log.producer_state.snapshot_offsets, "segments rolled, snapshots taken"
    for i in range(6, 9):  # the suffix the new leader never gets
        produce(old, batch(b"x%d" % i, producer_id=7, producer_epoch=0, base_sequence=i))
    for rm in (old, new):
        rm.apply_metadata(
            meta(leader=2, isr=(2,), replicas=(1, 2), leader_epoch=1, partition_epoch=1)
        )
    assert truncate_against(old, new, 1) == 1
    assert old_log.log_end_offset == 6 and old_log.high_watermark <= old_log.log_end_offset
    check_log_consistent(old_log)
    entry = old_log.producer_state.last_entry(7)
    assert entry is not None and entry.last_seq == 5


def test_a_failed_truncation_marks_the_partition_failed(brokers, caplog):
    """Kafka's markPartitionFailed: an unexpected error while truncating stops following the
    partition (it must not fetch its way back into the ISR with state that cannot be trusted)
    until the metadata assigns it again. Before, the fetcher logged and carried on."""
    rms, clock = brokers
    follower = rms[2]
    follower.apply_metadata(meta(leader=1, isr=(1, 2), replicas=(1, 2)))

    def broken(*_args):
        raise TypeError("a bug")

    follower.truncate_follower = broken

    async def go():
        manager = ReplicaFetcherManager(2, follower, BrokerConfig.from_properties({}),
                                        lambda _id: None, clock_ms=clock)  # fmt: skip
        manager.add_partition(TP, TOPIC_ID, 1, 0)
        fetcher = next(iter(manager._fetchers.values()))
        fetcher._apply_truncation(TP, manager.fetch_state(TP), 0, 0)
        assert manager.failed_partitions == {TP}
        assert manager.fetch_state(TP) is None
        manager.add_partition(TP, TOPIC_ID, 1, 1)  # a new leader epoch: followed again
        assert manager.failed_partitions == set() and manager.fetch_state(TP) is not None
        await manager.shutdown()

    with caplog.at_level("WARNING", logger="sparklog.broker.replica_fetcher"):
        asyncio.run(go())
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert errors and errors[0].exc_info and "truncation to 0" in errors[0].getMessage()
    assert any("marked as failed" in r.getMessage() for r in caplog.records)
