"""The coordinator's times are wall-clock (issue 27, item 3): the offsets table holds real
dates, and a driver restarted on a host whose clocks differ by days neither expires the offsets
of a recently emptied group nor holds an abandoned transaction open for days.

The restarted coordinator gets a `CoordinatorClock` whose wall clock is days off and whose
monotonic clock the test moves by hand, so "after its timeout" is decided by the test's clock,
not by sleeping."""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid

import pytest
from deltalake import DeltaTable

from sparklog.client import AdminClient, KafkaConsumer, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.coordinator.clock import CoordinatorClock, wall_clock_ms
from sparklog.protocol.api_versions import ApiKey

from .broker_wire import call, connect, produce
from .conftest import TEST_CONFIG
from .test_coordinator_wire import commit, fetch
from .test_transactions_wire import add_partitions, txn_batch

DAY_MS = 86_400_000
TXN_TIMEOUT_MS = 60_000
CONFIG = {
    **TEST_CONFIG,
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "50",
}


class HandClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


def wait_for(predicate, what: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def checked_at_or_after(cluster, now_ms: int) -> bool:
    """Whether both cores ran their expiry/abort checks at `now_ms` or later."""
    coordinator = cluster.coordinator
    groups_checked = coordinator.call(lambda core: core._next_expiry_check_ms)
    txn_checked = coordinator.call(lambda _core: coordinator.txn._next_abort_check_ms)
    return groups_checked > now_ms and txn_checked > now_ms


def restart_with(cluster, wall_offset_ms: int) -> HandClock:
    mono = HandClock()
    clock = CoordinatorClock(wall_ms=lambda: wall_clock_ms() + wall_offset_ms, mono_ms=mono)
    cluster.restart_coordinator(clock=clock)
    return mono


def group_that_emptied(cluster, topic: str) -> str:
    """A classic group whose only member committed and left: Empty, generation 1."""
    group = f"left-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 200,
        }
    )
    try:
        consumer.subscribe([topic])
        wait_for(lambda: consumer.poll(20) is not None and consumer.assignment(), "assigned")
        consumer.commit({(topic, 0): 7})
    finally:
        consumer.close()
    return group


async def abandon_a_transaction(cluster, topic: str, tid: str) -> None:
    """InitProducerId, AddPartitionsToTxn and a transactional batch, then nothing more."""
    coord = await connect(cluster.coordinator.bootstrap)
    broker = await connect(cluster.bootstrap_servers)
    try:
        r = await call(
            coord,
            ApiKey.INIT_PRODUCER_ID,
            {"transactional_id": tid, "transaction_timeout": TXN_TIMEOUT_MS},
            version=4,
        )
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert await add_partitions(coord, tid, pid, epoch, topic, 0) == {(topic, 0): 0}
        await produce(
            broker, topic, txn_batch([b"x"], pid, epoch), 0, acks=-1, transactional_id=tid
        )
    finally:
        await coord.close()
        await broker.close()


def committed(cluster, group: str) -> dict[tuple[str, int], int]:
    async def go():
        conn = await connect(cluster.coordinator.bootstrap)
        try:
            return await fetch(conn, group)
        finally:
            await conn.close()

    return asyncio.run(go())


def txn_state(cluster, tid: str) -> str:
    return cluster.coordinator.call(
        lambda _core: cluster.coordinator.txn.transactions[tid].state.value
    )


@pytest.mark.parametrize("days", [-3, 3])
def test_a_restart_on_a_clock_days_off_keeps_offsets_and_times_transactions_out(tmp_path, days):
    topic = "clock"
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=CONFIG) as cluster:
        with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic(topic, 1)])
        emptied = group_that_emptied(cluster, topic)

        async def standalone():
            conn = await connect(cluster.coordinator.bootstrap)
            try:
                await commit(conn, "standalone", topic, {0: 42})
            finally:
                await conn.close()

        asyncio.run(standalone())
        asyncio.run(abandon_a_transaction(cluster, topic, "abandoned"))
        before = wall_clock_ms()

        # the table holds real dates (an uptime-based clock wrote 1970)
        table = DeltaTable(cluster.coordinator.table_path)
        stamps = table.to_pyarrow_dataset().to_table(use_threads=False)["commit_timestamp"]
        years = {t.year for t in stamps.to_pylist() if t is not None}
        assert years and all(2020 <= y <= datetime.datetime.now().year + 1 for y in years), years

        mono = restart_with(cluster, days * DAY_MS)
        wait_for(lambda: checked_at_or_after(cluster, 0), "the first expiry and abort checks")
        # an Empty group's offsets, committed moments ago by any sane clock, are kept
        assert committed(cluster, emptied) == {(topic, 0): 7}
        assert committed(cluster, "standalone") == {(topic, 0): 42}
        if days < 0:
            # the wall clock went back: the transaction still runs until its timeout...
            mono.ms = TXN_TIMEOUT_MS // 2
            now = cluster.coordinator.now_ms()
            wait_for(lambda: checked_at_or_after(cluster, now), "an abort check at half time")
            assert txn_state(cluster, "abandoned") == "Ongoing"
            assert now < before + TXN_TIMEOUT_MS
            # ...and no longer, though the wall clock is still days behind its start
            mono.ms = TXN_TIMEOUT_MS + 1_000
        # (forward by days: the timeout passed long ago, so it is aborted at once)
        wait_for(
            lambda: txn_state(cluster, "abandoned") in ("PrepareAbort", "CompleteAbort"),
            "the abandoned transaction aborted",
        )
        assert committed(cluster, emptied) == {(topic, 0): 7}
