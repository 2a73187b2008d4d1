"""Transactions on the wire, request by request: FindCoordinator for transactional ids, the
coordinator's answers to requests out of order, produce-time verification (KIP-890) refusing a
batch for a partition the transaction never added, brokers refusing stale markers, and a
decided transaction finished after the coordinator restarts while its markers could not be
delivered. Every refusal leaves the log as it was."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol.api_versions import GROUP_COORDINATOR_APIS, ApiKey

from .broker_wire import (
    batch,
    call,
    connect,
    create_topic,
    fetch,
    list_offset,
    produce,
    records_of,
)
from .conftest import TEST_CONFIG

NONE, UNKNOWN_PARTITION, NOT_COORDINATOR = 0, 3, 16
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_MAPPING = 47, 48, 49
CONCURRENT, COORDINATOR_FENCED, NOT_ATTEMPTED, PRODUCER_FENCED = 51, 52, 55, 90
READ_COMMITTED, TXN_ID_AUTHORIZATION_FAILED = 1, 53


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path_factory.mktemp("txn"), config=TEST_CONFIG
    ) as running:
        yield running


def run(coro):
    return asyncio.run(coro)


def coordinator_version(api: ApiKey) -> int:
    return GROUP_COORDINATOR_APIS[api][1]


async def init(coord, tid: str) -> tuple[int, int]:
    r = await call(
        coord,
        ApiKey.INIT_PRODUCER_ID,
        {"transactional_id": tid, "transaction_timeout": 60_000},
        version=coordinator_version(ApiKey.INIT_PRODUCER_ID),
    )
    assert r.error_code == NONE, r
    return int(r.producer_id), int(r.producer_epoch)


async def add_partitions(coord, tid: str, pid: int, epoch: int, topic: str, *parts: int):
    r = await call(
        coord,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": list(parts)}],
        },
        version=3,
    )
    return {
        (t.name, int(p.partition_index)): int(p.partition_error_code)
        for t in r.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


async def end_txn(coord, tid: str, pid: int, epoch: int, commit: bool) -> int:
    """EndTxn v4: a client of transactions v1 (the epoch stays; `end_txn_v5` bumps it)."""
    r = await call(
        coord,
        ApiKey.END_TXN,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
        version=4,
    )
    return int(r.error_code)


def txn_batch(values: list[bytes], pid: int, epoch: int, seq: int = 0) -> bytes:
    return batch(
        values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )


async def coordinator_conn(cluster):
    return await connect(cluster.coordinator.bootstrap)


def test_find_coordinator_names_a_broker_that_forwards_transactional_requests(cluster):
    async def go():
        broker = await connect(cluster.bootstrap_servers)
        try:
            old = await call(
                broker, ApiKey.FIND_COORDINATOR, {"key": "tx", "key_type": 1}, version=3
            )
            new = await call(
                broker,
                ApiKey.FIND_COORDINATOR,
                {"key_type": 1, "coordinator_keys": ["tx", "ty"]},
                version=4,
            )
            initialized = await call(
                broker,
                ApiKey.INIT_PRODUCER_ID,
                {"transactional_id": "tx", "transaction_timeout": 1000},
                version=4,
            )
            return old, new, initialized
        finally:
            await broker.close()

    old, new, initialized = run(go())
    broker = cluster.brokers[0]
    assert (old.error_code, old.node_id, old.port) == (NONE, broker.node_id, broker.port)
    assert [(c.key, c.node_id) for c in new.coordinators] == [
        ("tx", broker.node_id),
        ("ty", broker.node_id),
    ]
    # the broker forwards it to the driver's transaction coordinator
    assert (initialized.error_code, initialized.producer_epoch) == (NONE, 0)
    assert initialized.producer_id >= 0


def test_out_of_order_requests_get_kafkas_errors(cluster):
    topic = f"order-{uuid.uuid4().hex[:6]}"

    async def go():
        broker = await connect(cluster.bootstrap_servers)
        coord = await coordinator_conn(cluster)
        try:
            await create_topic(broker, topic, partitions=2)
            pid, epoch = await init(coord, "order")
            answers = {
                "end unknown id": await end_txn(coord, "nobody", pid, epoch, True),
                "end without txn": await end_txn(coord, "order", pid, epoch, True),
                "add stale epoch": await add_partitions(coord, "order", pid, epoch - 1, topic, 0),
                "add unknown topic": await add_partitions(
                    coord, "order", pid, epoch, "no-such-topic", 0
                ),
                "add": await add_partitions(coord, "order", pid, epoch, topic, 0, 1),
                "commit": await end_txn(coord, "order", pid, epoch, True),
            }
            answers["abort after commit"] = await end_txn(coord, "order", pid, epoch, False)
            answers["commit again"] = await end_txn(coord, "order", pid, epoch, True)
            return answers
        finally:
            await broker.close()
            await coord.close()

    a = run(go())
    assert a["end unknown id"] == INVALID_MAPPING
    assert a["end without txn"] == INVALID_TXN_STATE
    assert set(a["add stale epoch"].values()) == {PRODUCER_FENCED}
    assert set(a["add unknown topic"].values()) == {UNKNOWN_PARTITION}
    assert set(a["add"].values()) == {NONE}
    assert a["commit"] == NONE
    assert a["abort after commit"] in (INVALID_TXN_STATE,)
    assert a["commit again"] in (NONE, CONCURRENT), "a retried commit succeeds"


def test_a_batch_for_a_partition_not_in_the_transaction_is_refused_and_not_written(cluster):
    topic = f"verify-{uuid.uuid4().hex[:6]}"

    async def go():
        broker = await connect(cluster.bootstrap_servers)
        coord = await coordinator_conn(cluster)
        try:
            await create_topic(broker, topic, partitions=2)
            pid, epoch = await init(coord, "verify")
            await add_partitions(coord, "verify", pid, epoch, topic, 0)
            # Produce v10: a client of transactions v1 that predates TRANSACTION_ABORTABLE
            ok = await produce(
                broker,
                topic,
                txn_batch([b"in"], pid, epoch),
                0,
                acks=-1,
                transactional_id="verify",
                version=10,
            )
            stray = await produce(
                broker,
                topic,
                txn_batch([b"stray"], pid, epoch),
                1,
                acks=-1,
                transactional_id="verify",
                version=10,
            )
            no_id = await produce(
                broker, topic, txn_batch([b"x"], pid, epoch), 1, acks=-1, version=10
            )
            end = await end_txn(coord, "verify", pid, epoch, True)
            # once the markers are written, the partition's transaction is closed: a late
            # batch (a zombie's retry) would open a new one, which verification refuses
            deadline = time.monotonic() + 10
            while cluster.coordinator.txn.transactions["verify"].state.value != "CompleteCommit":
                assert time.monotonic() < deadline, "the markers were not written"
                await asyncio.sleep(0.02)
            late = await produce(
                broker,
                topic,
                txn_batch([b"late"], pid, epoch, seq=1),
                0,
                acks=-1,
                transactional_id="verify",
                version=10,
            )
            await asyncio.sleep(0.5)
            p0 = await fetch(broker, topic, 0, 0, isolation_level=READ_COMMITTED)
            p1 = await fetch(broker, topic, 0, 1)
            return ok, stray, no_id, end, late, p0, p1
        finally:
            await broker.close()
            await coord.close()

    ok, stray, no_id, end, late, p0, p1 = run(go())
    assert ok.error_code == NONE
    assert stray.error_code == INVALID_TXN_STATE and "not part" in stray.error_message
    assert no_id.error_code == TXN_ID_AUTHORIZATION_FAILED
    assert end == NONE
    assert late.error_code == INVALID_TXN_STATE, "a late batch cannot reopen the transaction"
    assert int(p1.high_watermark) == 0, "nothing was written to the partition never added"
    values = [r.value for r in records_of(p0.records) if r.value is not None]
    assert b"in" in values and b"late" not in values
    assert int(p0.last_stable_offset) == int(p0.high_watermark) == 2, "record + COMMIT marker"


def test_brokers_refuse_stale_markers_and_write_nothing(cluster):
    topic = f"markers-{uuid.uuid4().hex[:6]}"

    async def marker(broker, pid: int, epoch: int, coordinator_epoch: int, name: str = topic):
        r = await call(
            broker,
            ApiKey.WRITE_TXN_MARKERS,
            {
                "markers": [
                    {
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "transaction_result": False,
                        "topics": [{"name": name, "partition_indexes": [0]}],
                        "coordinator_epoch": coordinator_epoch,
                    }
                ]
            },
            version=1,
        )
        return int(r.markers[0].topics[0].partitions[0].error_code)

    async def go():
        broker = await connect(cluster.bootstrap_servers)
        coord = await coordinator_conn(cluster)
        try:
            await create_topic(broker, topic, partitions=1)
            pid, epoch = await init(coord, "markers")
            await add_partitions(coord, "markers", pid, epoch, topic, 0)
            await produce(
                broker, topic, txn_batch([b"v"], pid, epoch), 0, acks=-1, transactional_id="markers"
            )
            assert await end_txn(coord, "markers", pid, epoch, False) == NONE
            await asyncio.sleep(0.5)
            before = int((await fetch(broker, topic, 0)).high_watermark)
            codes = {
                "unknown partition": await marker(broker, pid, epoch, 10**6, "no-such-topic"),
                "older producer epoch": await marker(broker, pid, epoch - 1, 10**6),
                "older coordinator epoch": await marker(broker, pid, epoch + 1, -5),
            }
            after = int((await fetch(broker, topic, 0)).high_watermark)
            return before, codes, after
        finally:
            await broker.close()
            await coord.close()

    before, codes, after = run(go())
    assert codes == {
        "unknown partition": UNKNOWN_PARTITION,
        "older producer epoch": INVALID_PRODUCER_EPOCH,
        "older coordinator epoch": COORDINATOR_FENCED,
    }
    assert before == after == 2


def test_a_decided_transaction_is_finished_after_a_coordinator_restart(tmp_path):
    topic = "restart"
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=TEST_CONFIG) as cluster:

        async def decide():
            broker = await connect(cluster.bootstrap_servers)
            coord = await coordinator_conn(cluster)
            try:
                await create_topic(broker, topic, partitions=2)
                pid, epoch = await init(coord, "restart")
                await add_partitions(coord, "restart", pid, epoch, topic, 0, 1)
                for p in (0, 1):
                    await produce(
                        broker,
                        topic,
                        txn_batch([b"r%d" % p], pid, epoch),
                        p,
                        acks=-1,
                        transactional_id="restart",
                    )
            finally:
                await broker.close()
            try:
                cluster.stop_broker(0)  # the markers cannot be delivered
                return await end_txn(coord, "restart", pid, epoch, True)
            finally:
                await coord.close()

        assert run(decide()) == NONE
        assert cluster.coordinator.call(lambda c: None) is None
        state = cluster.coordinator.txn.transactions["restart"].state.value
        assert state == "PrepareCommit"
        cluster.restart_coordinator()
        assert cluster.coordinator.txn.transactions["restart"].state.value == "PrepareCommit"
        cluster.restart_broker(0)

        async def read():
            broker = await connect(cluster.bootstrap_servers)
            try:
                found = {}
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    for p in (0, 1):
                        data = await fetch(broker, topic, 0, p, isolation_level=READ_COMMITTED)
                        if getattr(data, "error_code", 1) == NONE:
                            found[p] = data
                    if len(found) == 2 and all(
                        int(d.last_stable_offset) == 2 for d in found.values()
                    ):
                        return found
                    await asyncio.sleep(0.2)
                return found
            finally:
                await broker.close()

        found = run(read())
        for p, data in found.items():
            records = records_of(data.records)
            assert int(data.last_stable_offset) == 2, p
            assert [r.value for r in records][0] == b"r%d" % p
        assert len(found) == 2
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            state = cluster.coordinator.txn.transactions["restart"].state.value
            if state == "CompleteCommit":
                break
            time.sleep(0.1)
        assert state == "CompleteCommit"


def test_read_committed_stops_at_the_open_transaction_until_its_marker(cluster):
    topic = f"lso-{uuid.uuid4().hex[:6]}"

    async def go():
        broker = await connect(cluster.bootstrap_servers)
        coord = await coordinator_conn(cluster)
        try:
            await create_topic(broker, topic, partitions=1)
            pid, epoch = await init(coord, "lso")
            await add_partitions(coord, "lso", pid, epoch, topic, 0)
            await produce(
                broker, topic, txn_batch([b"a", b"b"], pid, epoch), acks=-1, transactional_id="lso"
            )
            open_ = [
                await list_offset(broker, topic, -1, isolation_level=level) for level in (0, 1)
            ]
            hidden = await fetch(broker, topic, 0, isolation_level=READ_COMMITTED)
            assert await end_txn(coord, "lso", pid, epoch, True) == NONE
            deadline = time.monotonic() + 10
            while int((await list_offset(broker, topic, -1, isolation_level=1)).offset) != 3:
                assert time.monotonic() < deadline, "the LSO did not move past the marker"
                await asyncio.sleep(0.02)
            shown = await fetch(broker, topic, 0, isolation_level=READ_COMMITTED)
            return open_, hidden, shown
        finally:
            await broker.close()
            await coord.close()

    (uncommitted, committed), hidden, shown = run(go())
    assert (int(uncommitted.offset), int(committed.offset)) == (2, 0), "ListOffsets: HW vs LSO"
    assert records_of(hidden.records) == [] and int(hidden.last_stable_offset) == 0
    assert [r.value for r in records_of(shown.records)][:2] == [b"a", b"b"]


# -- transactions v2 (KIP-890 part 2) ---------------------------------------------------------

TRANSACTION_ABORTABLE = 120


async def end_txn_v5(coord, tid: str, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    """EndTxn v5: (error, producer id, epoch) - the ones the next transaction uses."""
    r = await call(
        coord,
        ApiKey.END_TXN,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
        version=5,
    )
    return int(r.error_code), int(r.producer_id), int(r.producer_epoch)


async def wait_state(cluster, tid: str, state: str) -> None:
    deadline = time.monotonic() + 10
    while cluster.coordinator.txn.transactions[tid].state.value != state:
        assert time.monotonic() < deadline, f"{tid} never reached {state}"
        await asyncio.sleep(0.02)


def test_a_v12_produce_adds_its_partitions_and_end_txn_v5_bumps_the_epoch(cluster):
    topic = f"tv2-{uuid.uuid4().hex[:6]}"
    tid = f"tv2-{topic}"
    store = cluster.coordinator.store

    async def go():
        broker = await connect(cluster.bootstrap_servers)
        coord = await coordinator_conn(cluster)
        try:
            await create_topic(broker, topic, partitions=2)
            pid, epoch = await init(coord, tid)
            # no AddPartitionsToTxn: the first v12 batch of each partition adds it
            first = [
                await produce(
                    broker,
                    topic,
                    txn_batch([b"a%d" % p], pid, epoch),
                    p,
                    acks=-1,
                    transactional_id=tid,
                    version=12,
                )
                for p in (0, 1)
            ]
            added = set(cluster.coordinator.txn.transactions[tid].partitions)
            commits_before = store.commits
            ended = await end_txn_v5(coord, tid, pid, epoch, True)
            decision_commits = store.commits - commits_before
            await wait_state(cluster, tid, "CompleteCommit")
            retried = await end_txn_v5(coord, tid, pid, epoch, True)
            # the next transaction runs at the epoch EndTxn answered, its sequences from 0
            _code, _pid, bumped = ended
            second = await produce(
                broker,
                topic,
                txn_batch([b"b"], pid, bumped),
                0,
                acks=-1,
                transactional_id=tid,
                version=12,
            )
            ended2 = await end_txn_v5(coord, tid, pid, bumped, True)
            await wait_state(cluster, tid, "CompleteCommit")
            p0 = await fetch(broker, topic, 0, 0, isolation_level=READ_COMMITTED)
            return first, added, ended, decision_commits, retried, second, ended2, p0
        finally:
            await broker.close()
            await coord.close()

    first, added, ended, decision_commits, retried, second, ended2, p0 = run(go())
    assert [r.error_code for r in first] == [NONE, NONE]
    assert added == {(topic, 0), (topic, 1)}
    code, pid, epoch = ended
    assert code == NONE and epoch == 1, "EndTxn v5 answers the bumped epoch"
    assert decision_commits <= 2, "EndTxn waits for one commit (the adds rode earlier)"
    assert retried == (NONE, pid, epoch), "a retried EndTxn v5 answers the same"
    assert second.error_code == NONE
    assert ended2 == (NONE, pid, 2)
    values = [r.value for r in records_of(p0.records) if r.value in (b"a0", b"b")]
    assert values == [b"a0", b"b"]
    # a0, COMMIT, b, COMMIT: everything decided
    assert int(p0.last_stable_offset) == int(p0.high_watermark) == 4


def test_a_late_produce_after_a_v2_abort_is_fenced_and_opens_no_transaction(cluster):
    """The hanging transaction KIP-890 closes: a batch of an aborted transaction arriving
    after the abort (a zombie's retry, here to a partition the transaction never touched,
    whose broker knows nothing of the producer) must not start a new implicit transaction."""
    topic = f"hang-{uuid.uuid4().hex[:6]}"
    tid = f"hang-{topic}"

    async def go():
        broker = await connect(cluster.bootstrap_servers)
        coord = await coordinator_conn(cluster)
        try:
            await create_topic(broker, topic, partitions=2)
            pid, epoch = await init(coord, tid)
            ok = await produce(
                broker,
                topic,
                txn_batch([b"in"], pid, epoch),
                0,
                acks=-1,
                transactional_id=tid,
                version=12,
            )
            aborted = await end_txn_v5(coord, tid, pid, epoch, False)
            await wait_state(cluster, tid, "CompleteAbort")
            late = {
                p: await produce(
                    broker,
                    topic,
                    txn_batch([b"late"], pid, epoch, seq=1 if p == 0 else 0),
                    p,
                    acks=-1,
                    transactional_id=tid,
                    version=12,
                )
                for p in (0, 1)
            }
            meta = cluster.coordinator.txn.transactions[tid]
            p0 = await fetch(broker, topic, 0, 0, isolation_level=READ_COMMITTED)
            p1 = await fetch(broker, topic, 0, 1)
            return ok, aborted, late, (meta.state.value, set(meta.partitions)), p0, p1
        finally:
            await broker.close()
            await coord.close()

    ok, aborted, late, meta, p0, p1 = run(go())
    assert ok.error_code == NONE
    assert aborted[0] == NONE and aborted[2] == 1
    assert {p: r.error_code for p, r in late.items()} == {
        0: INVALID_PRODUCER_EPOCH,
        1: INVALID_PRODUCER_EPOCH,
    }
    assert meta == ("CompleteAbort", set()), "no new transaction was opened"
    assert int(p1.high_watermark) == 0, "nothing reached the untouched partition"
    assert int(p0.last_stable_offset) == int(p0.high_watermark) == 2, "record + ABORT marker"
    assert [r.value for r in records_of(p0.records) if r.value == b"late"] == []


def test_a_v11_produce_outside_the_transaction_gets_transaction_abortable(cluster):
    topic = f"abortable-{uuid.uuid4().hex[:6]}"
    tid = f"abortable-{topic}"

    async def go():
        broker = await connect(cluster.bootstrap_servers)
        coord = await coordinator_conn(cluster)
        try:
            await create_topic(broker, topic, partitions=1)
            pid, epoch = await init(coord, tid)
            return await produce(
                broker,
                topic,
                txn_batch([b"x"], pid, epoch),
                0,
                acks=-1,
                transactional_id=tid,
                version=11,
            )
        finally:
            await broker.close()
            await coord.close()

    stray = run(go())
    # KIP-890/KIP-1050: Produce v11+ clients know TRANSACTION_ABORTABLE; v11 adds nothing
    assert stray.error_code == TRANSACTION_ABORTABLE


def _on_broker_loop(broker, coro, timeout_s: float = 60):
    return asyncio.run_coroutine_threadsafe(coro, broker._loop).result(timeout_s)


def test_a_coordinator_restart_aborts_the_open_v2_transactions_it_forgot(tmp_path):
    """TV2 adds live in the coordinator's memory: after a restart the producer may not commit
    (TRANSACTION_ABORTABLE, it aborts) and the leaders abort the data it left open."""
    topic, tid = "forgot", "forgot-tx"
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=TEST_CONFIG) as cluster:
        broker_server = cluster.brokers[0]

        async def produce_v12(broker, pid: int, epoch: int, partition: int, seq: int = 0):
            return await produce(
                broker,
                topic,
                txn_batch([b"p%d" % partition], pid, epoch, seq=seq),
                partition,
                acks=-1,
                transactional_id=tid,
                version=12,
            )

        async def before_restart():
            broker = await connect(cluster.bootstrap_servers)
            coord = await coordinator_conn(cluster)
            try:
                await create_topic(broker, topic, partitions=3)
                pid, epoch = await init(coord, tid)
                codes = [(await produce_v12(broker, pid, epoch, p)).error_code for p in (0, 1)]
                return pid, epoch, codes
            finally:
                await broker.close()
                await coord.close()

        pid, epoch, codes = run(before_restart())
        assert codes == [NONE, NONE]
        cluster.restart_coordinator()
        restored = cluster.coordinator.txn.transactions[tid]
        assert restored.partitions == set() and restored.suspect

        async def after_restart():
            broker = await connect(cluster.bootstrap_servers)
            coord = await coordinator_conn(cluster)
            try:
                new_partition = await produce_v12(broker, pid, epoch, 2)
                commit = await end_txn_v5(coord, tid, pid, epoch, True)
                abort = await end_txn_v5(coord, tid, pid, epoch, False)
                return new_partition, commit, abort
            finally:
                await broker.close()
                await coord.close()

        new_partition, commit, abort = run(after_restart())
        assert new_partition.error_code == TRANSACTION_ABORTABLE
        assert commit[0] == TRANSACTION_ABORTABLE, "no commit of a transaction it forgot"
        assert abort == (NONE, pid, epoch + 1), "the abort bumps the epoch"
        # two rounds: a transaction open at both is asked about, and aborted as an orphan
        aborter = broker_server.apis.txn_recovery
        assert _on_broker_loop(broker_server, aborter.check_once()) == 0
        assert _on_broker_loop(broker_server, aborter.check_once()) == 2
        assert _on_broker_loop(broker_server, aborter.check_once()) == 0

        async def read():
            broker = await connect(cluster.bootstrap_servers)
            try:
                return [
                    await fetch(broker, topic, 0, p, isolation_level=READ_COMMITTED)
                    for p in (0, 1, 2)
                ]
            finally:
                await broker.close()

        found = run(read())
        for p, data in enumerate(found):
            assert int(data.last_stable_offset) == int(data.high_watermark), p
        # the data of p0 and p1 is aborted (a record + the ABORT marker); p2 was refused
        assert [int(d.high_watermark) for d in found] == [2, 2, 0]
        assert [[int(a.producer_id) for a in d.aborted_transactions or ()] for d in found] == [
            [pid],
            [pid],
            [],
        ]


def test_the_orphan_check_leaves_open_transactions_the_coordinator_knows(cluster):
    topic = f"known-{uuid.uuid4().hex[:6]}"
    tid = f"known-{topic}"
    broker_server = cluster.brokers[0]

    async def go():
        broker = await connect(cluster.bootstrap_servers)
        coord = await coordinator_conn(cluster)
        try:
            await create_topic(broker, topic, partitions=1)
            pid, epoch = await init(coord, tid)
            produced = await produce(
                broker,
                topic,
                txn_batch([b"open"], pid, epoch),
                0,
                acks=-1,
                transactional_id=tid,
                version=12,
            )
            return pid, epoch, produced
        finally:
            await broker.close()
            await coord.close()

    pid, epoch, produced = run(go())
    assert produced.error_code == NONE
    aborter = broker_server.apis.txn_recovery
    for _ in range(3):
        assert _on_broker_loop(broker_server, aborter.check_once()) == 0

    async def end():
        coord = await coordinator_conn(cluster)
        try:
            return await end_txn_v5(coord, tid, pid, epoch, True)
        finally:
            await coord.close()

    assert run(end())[0] == NONE, "still the producer's to commit"
