"""A deterministic, seeded simulation of transactions: the real transaction and group
coordinator cores and real partition logs (producer state, `.txnindex`, last stable offset),
three replicas per partition (`txn_replicas.py`), driven by transactional producers under a
seeded fault schedule.

Faults: the coordinator restarts (rebuilt from the persisted rows; writes not yet flushed are
lost and their requests never answered), a Delta write fails, markers arrive late, one
partition at a time, or twice, a producer restarts as a new incarnation (fencing the old one,
which keeps sending as a zombie), and transactions outlive their timeout. Each producer's
batches pass the broker's KIP-890 check before they are appended, as on a broker. Replication
(issue 27): followers catch up in chunks of random size that span several producers' data and
markers, leadership moves to any replica (the others cut their divergent suffix: a marker or
data nobody else got), and followers restart, cleanly or killed. A producer's EndTxn(commit)
first flushes its sends (acks=all); a send that a leader change cut makes it start over, and a
marker append the replicas have not all acknowledged is delivered again.

After every step: no partition's LSO goes backwards, every replica keeps HW <= log end; after
every truncation and restart the replica's producer state and txn index equal a replay of its
log. At the end (faults stop, every marker delivered, followers caught up): every replica holds
the same log, aborted transactions and producers; a read_committed read of every partition
shows every record of each committed transaction and nothing of any other, and the group's
committed offset is one that a committed transaction carried, the newest.

Run with the replication simulation (`--sim-seeds=N`, `--sim-seed=K`).
"""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path
from typing import Any

import pytest

from sparklog.coordinator.group.config import GroupConfig
from sparklog.coordinator.group.coordinator import GroupCoordinator, OffsetCommitPartition
from sparklog.coordinator.shard import complete_write
from sparklog.coordinator.transaction.config import TransactionConfig
from sparklog.coordinator.transaction.coordinator import MarkerJob, TransactionCoordinator
from sparklog.errors import KafkaError
from sparklog.records import SimpleRecord, build_batch
from sparklog.records.batch import iter_batches
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.storage.log import Log
from sparklog.storage.producer_append_info import AppendOrigin
from tests.simulation.txn_replicas import PartitionReplicas

PARTITIONS = 3
TOPICS = {"t": PARTITIONS, "src": 1}
STEPS = 400
TIMEOUT_MS = 4_000


@dataclasses.dataclass
class Txn:
    uid: int
    partitions: set[int] = dataclasses.field(default_factory=set)
    appended: set[bytes] = dataclasses.field(default_factory=set)
    sent: list[tuple[int, int, bytes]] = dataclasses.field(default_factory=list)  # p, offset, v
    offset: int | None = None
    outcome: str = "open"  # committed / aborted / unknown (the answer was lost)


class Producer:
    """One incarnation of a transactional producer (a client's view)."""

    def __init__(self, tid: str) -> None:
        self.tid = tid
        self.pid = -1
        self.epoch = -1
        self.state = "init"  # init / waiting / ready / in_txn / ending / fenced
        self.txn: Txn | None = None
        self.sequences: dict[int, int] = {}


class Simulation:
    def __init__(self, seed: int, directory: Path) -> None:
        self.rng = random.Random(seed)
        self.now_ms = 1_700_000_000_000  # wall-clock ms, as the coordinator persists
        self.rows: list[dict[str, Any]] = []
        self.pids = iter(range(5000, 10**6))
        self.partitions = {
            p: PartitionReplicas(directory / f"t-{p}", self.rng) for p in range(PARTITIONS)
        }
        self.lso = dict.fromkeys(range(PARTITIONS), 0)
        self.txns: list[Txn] = []
        self.commit_order: list[Txn] = []  # as the coordinator answered the commits
        self.next_uid = 0
        self.next_offset = 0
        self.producers = [Producer(f"tx-{i}") for i in range(3)]
        self.zombies: list[Producer] = []
        self.markers: list[tuple[MarkerJob, set[int]]] = []
        self.generation = 0  # of the coordinator, bumped by restarts
        self.faults = True
        self._build()

    @property
    def logs(self) -> dict[int, Log]:
        """Each partition's leader log."""
        return {p: replicas.leader for p, replicas in self.partitions.items()}

    # -- the coordinator and its "table" ------------------------------------------------

    def _build(self) -> None:
        self.groups = GroupCoordinator(GroupConfig(), lambda t: TOPICS.get(t, 0))
        config = TransactionConfig(transaction_abort_timed_out_transaction_cleanup_interval_ms=500)
        self.txn = TransactionCoordinator(
            config, self.generation, lambda: next(self.pids), self.groups
        )
        self.groups.txn_check = self.txn.check_offset_commit

    def restart_coordinator(self) -> None:
        self.generation += 1
        self.groups.take_writes()
        self.txn.take_writes()  # never persisted, never answered
        self._build()
        self.groups.load(list(self.rows), self.now_ms)
        self.txn.load(list(self.rows), self.now_ms)
        self.markers = [(j, set(p for _t, p in j.partitions)) for j in self.txn.take_markers()]
        for producer in self.producers:  # their requests went unanswered: they start over
            if producer.state in ("waiting", "ending"):
                self._lost_answer(producer)

    def flush(self) -> None:
        while writes := self.groups.take_writes() + self.txn.take_writes():
            fail = self.faults and self.rng.random() < 0.05
            for w in writes:
                if not fail:
                    self.rows.extend(w.rows)
                code = 15 if fail else 0  # COORDINATOR_NOT_AVAILABLE
                complete_write(w, [self.groups, self.txn], self.now_ms, code)
        for job in self.txn.take_markers():
            self.markers.append((job, {p for _t, p in job.partitions}))

    # -- markers --------------------------------------------------------------------------

    def deliver_marker(self, everything: bool = False) -> None:
        if not self.markers:
            return
        index = 0 if everything else self.rng.randrange(len(self.markers))
        job, left = self.markers[index]
        chosen = sorted(left) if everything else [self.rng.choice(sorted(left))]
        for partition in chosen:
            kind = ControlRecordType.COMMIT if job.committed else ControlRecordType.ABORT
            batch = build_end_txn_marker_batch(
                EndTransactionMarker(kind, job.coordinator_epoch),
                producer_id=job.producer_id,
                producer_epoch=job.producer_epoch,
                timestamp_ms=self.now_ms,
            )
            times = 2 if self.faults and self.rng.random() < 0.1 else 1
            for _ in range(times):  # a duplicate marker (a retried WriteTxnMarkers)
                self._append(partition, batch, AppendOrigin.COORDINATOR)
            if self.faults and self.rng.random() < 0.2:
                continue  # acks=all not met yet: the coordinator will write it again
            self.partitions[partition].catch_up(self.now_ms)
            left.discard(partition)
        if not left:
            del self.markers[index]
            self.txn.markers_done(self.now_ms, job)
            self.flush()

    def _append(self, partition: int, batch: bytes, origin: AppendOrigin) -> int | None:
        """Append to the partition's leader; its first offset, None when refused."""
        try:
            return self.partitions[partition].append(batch, origin, self.now_ms)
        except KafkaError:
            return None

    # -- producers ------------------------------------------------------------------------

    def _lost_answer(self, producer: Producer) -> None:
        if producer.txn is not None and producer.txn.outcome == "open":
            producer.txn.outcome = "unknown"
        producer.txn = None
        producer.state = "init"

    def step_producer(self, producer: Producer) -> None:
        if producer.state == "init":
            producer.state = "waiting"

            def initialized(code: int, pid: int, epoch: int) -> None:
                if producer.state != "waiting":
                    return
                if code:
                    producer.state = "init"
                    return
                producer.pid, producer.epoch, producer.sequences = pid, epoch, {}
                producer.state = "ready"

            self.txn.init_producer_id(
                self.now_ms,
                transactional_id=producer.tid,
                timeout_ms=TIMEOUT_MS,
                producer_id=-1,
                producer_epoch=-1,
                respond=initialized,
            )
        elif producer.state == "ready":
            producer.txn = Txn(self.next_uid)
            self.next_uid += 1
            self.txns.append(producer.txn)
            producer.state = "in_txn"
        elif producer.state == "in_txn":
            assert producer.txn is not None
            roll = self.rng.random()
            if roll < 0.5:
                self._produce(producer, self.rng.randrange(PARTITIONS))
            elif roll < 0.6 and producer.txn.offset is None:
                self._commit_offsets(producer)
            else:
                self._end(producer, self.rng.random() < 0.6)

    def _produce(self, producer: Producer, partition: int) -> None:
        txn = producer.txn
        assert txn is not None
        if partition not in txn.partitions:
            producer.state = "waiting"

            def added(code: int) -> None:
                if producer.state != "waiting" or producer.txn is not txn:
                    return
                producer.state = "in_txn"
                if code == 0:
                    txn.partitions.add(partition)
                else:
                    self._failed(producer, code)

            self.txn.add_partitions(
                self.now_ms,
                transactional_id=producer.tid,
                producer_id=producer.pid,
                producer_epoch=producer.epoch,
                partitions=[("t", partition)],
                respond=added,
            )
            return
        self._send(producer, partition, txn)

    def _send(self, producer: Producer, partition: int, txn: Txn | None) -> None:
        """One transactional batch, after the broker's KIP-890 check."""
        verified = self.txn.verify_partitions(
            producer.tid, producer.pid, producer.epoch, [("t", partition)]
        )
        if verified[("t", partition)] and self._opens_transaction(producer, partition):
            return  # refused by the broker
        value = b"%d:%d" % (txn.uid if txn else -1, self.rng.randrange(10**9))
        sequence = producer.sequences.get(partition, 0)
        batch = build_batch(
            [SimpleRecord(value, None, self.now_ms)],
            producer_id=producer.pid,
            producer_epoch=producer.epoch,
            base_sequence=sequence,
            is_transactional=True,
        )
        offset = self._append(partition, batch, AppendOrigin.CLIENT)
        if offset is not None:
            producer.sequences[partition] = sequence + 1
            if txn is not None:
                txn.appended.add(value)
                txn.sent.append((partition, offset, value))

    def _flush(self, txn: Txn) -> bool:
        """The producer's flush before committing: every send acknowledged by all replicas
        (acks=all), or one was cut by a leader change (False)."""
        for partition in sorted({p for p, _o, _v in txn.sent}):
            self.partitions[partition].catch_up(self.now_ms)
        return all(self.partitions[p].value_at(o) == v for p, o, v in txn.sent)

    def _opens_transaction(self, producer: Producer, partition: int) -> bool:
        entry = self.logs[partition].producer_state.last_entry(producer.pid)
        return not (
            entry is not None
            and entry.current_txn_first_offset is not None
            and entry.producer_epoch == producer.epoch
        )

    def _commit_offsets(self, producer: Producer) -> None:
        txn = producer.txn
        assert txn is not None
        producer.state = "waiting"
        offset = self.next_offset
        self.next_offset += 1

        def committed(codes: dict) -> None:
            if producer.state != "waiting" or producer.txn is not txn:
                return
            producer.state = "in_txn"
            if all(c == 0 for c in codes.values()):
                txn.offset = offset

        def added(code: int) -> None:
            if producer.state != "waiting" or producer.txn is not txn:
                return
            if code:
                producer.state = "in_txn"
                return self._failed(producer, code)
            self.groups.txn_commit_offsets(
                self.now_ms,
                transactional_id=producer.tid,
                producer_id=producer.pid,
                producer_epoch=producer.epoch,
                group_id="g",
                generation_id=-1,
                member_id="",
                group_instance_id=None,
                partitions=[OffsetCommitPartition("src", 0, offset, -1, "")],
                respond=committed,
            )

        self.txn.add_offsets(
            self.now_ms,
            transactional_id=producer.tid,
            producer_id=producer.pid,
            producer_epoch=producer.epoch,
            group_id="g",
            respond=added,
        )

    def _end(self, producer: Producer, commit: bool) -> None:
        txn = producer.txn
        assert txn is not None
        if commit and not self._flush(txn):
            return self._failed(producer, -1)  # a send was lost: start over (abandons the txn)
        producer.state = "ending"

        def ended(code: int) -> None:
            if producer.state != "ending" or producer.txn is not txn:
                return
            if code == 0:
                txn.outcome = "committed" if commit else "aborted"
                if commit:
                    self.commit_order.append(txn)
                producer.txn, producer.state = None, "ready"
            elif code == 51:  # CONCURRENT_TRANSACTIONS: try again later
                producer.state = "in_txn"
            else:
                self._failed(producer, code)

        self.txn.end_txn(
            self.now_ms,
            transactional_id=producer.tid,
            producer_id=producer.pid,
            producer_epoch=producer.epoch,
            committed=commit,
            respond=ended,
        )

    def _failed(self, producer: Producer, code: int) -> None:
        """Fenced, timed out or refused: the client aborts what it can and starts over."""
        if producer.txn is not None and producer.txn.outcome == "open":
            producer.txn.outcome = "unknown"
        producer.txn = None
        producer.state = "init"

    def restart_producer(self, index: int) -> None:
        old = self.producers[index]
        if old.state in ("in_txn", "ready") and old.pid >= 0:
            self.zombies.append(old)
        if old.txn is not None and old.txn.outcome == "open":
            old.txn.outcome = "unknown"
        self.producers[index] = Producer(old.tid)

    def step_zombie(self) -> None:
        """An old incarnation sends on, once the coordinator has fenced it (a newer epoch)."""
        zombie = self.rng.choice(self.zombies)
        meta = self.txn.transactions.get(zombie.tid)
        if meta is not None and (meta.producer_id, meta.producer_epoch) != (
            zombie.pid,
            zombie.epoch,
        ):
            self._send(zombie, self.rng.randrange(PARTITIONS), None)

    # -- the run --------------------------------------------------------------------------

    def check_lso(self) -> None:
        for p, log in self.logs.items():
            lso = log.last_stable_offset
            assert lso >= self.lso[p], f"LSO of partition {p} went back: {self.lso[p]} -> {lso}"
            self.lso[p] = lso
            self.partitions[p].check_high_watermarks()

    def run(self) -> None:
        for _ in range(STEPS):
            roll = self.rng.random()
            replicas = self.partitions[self.rng.randrange(PARTITIONS)]
            if roll < 0.5:
                self.step_producer(self.rng.choice(self.producers))
            elif roll < 0.65:
                self.deliver_marker()
            elif roll < 0.69 and self.zombies:
                self.step_zombie()
            elif roll < 0.71:
                self.restart_coordinator()
            elif roll < 0.73:
                self.restart_producer(self.rng.randrange(len(self.producers)))
            elif roll < 0.8:
                replicas.fetch(self.rng.choice(replicas.followers()), self.now_ms)
            elif roll < 0.82:
                replicas.lag()
            elif roll < 0.85:
                replicas.change_leader(self.now_ms)
            elif roll < 0.87:
                replicas.restart_follower(self.now_ms)
            else:
                self.now_ms += self.rng.choice((10, 100, 1000, TIMEOUT_MS))
                self.txn.tick(self.now_ms)
            if self.rng.random() < 0.8:
                self.flush()
            self.check_lso()
        self.finish()

    def finish(self) -> None:
        """No more faults: abort what is open (timeouts), deliver every marker."""
        self.faults = False
        self.flush()
        for _ in range(50):
            self.now_ms += TIMEOUT_MS + 1
            self.txn.tick(self.now_ms)
            self.flush()
            while self.markers:
                self.deliver_marker(everything=True)
                self.check_lso()
        for p, replicas in self.partitions.items():
            replicas.catch_up(self.now_ms, everyone=True)
            log = replicas.leader
            assert log.last_stable_offset == log.high_watermark, f"partition {p} still unstable"
            assert log.high_watermark == log.log_end_offset
            replicas.check_replicas_agree(f"partition {p}")

    # -- what read_committed sees ---------------------------------------------------------

    def visible(self) -> set[bytes]:
        seen: set[bytes] = set()
        for log in self.logs.values():
            data = log.read(0, 1 << 30, upper_bound_offset=log.last_stable_offset).records
            aborted = sorted(
                (a.first_offset, a.producer_id)
                for a in log.collect_aborted_transactions(0, log.last_stable_offset)
            )
            active: set[int] = set()
            for batch in iter_batches(bytes(data)):
                header = batch.header
                while aborted and aborted[0][0] <= header.base_offset:
                    active.add(aborted.pop(0)[1])
                if header.is_control:
                    if header.producer_id in active:
                        record = batch.records()[0]
                        if record.key and record.key[2:4] == b"\x00\x00":  # ABORT
                            active.discard(header.producer_id)
                    continue
                if header.is_transactional and header.producer_id in active:
                    continue
                seen.update(r.value for r in batch.records())
        return seen

    def check(self) -> None:
        seen = self.visible()
        for txn in self.txns:
            got = txn.appended & seen
            if txn.outcome == "committed":
                assert got == txn.appended, f"committed txn {txn.uid} partly visible"
            elif txn.outcome == "aborted":
                assert not got, f"aborted txn {txn.uid} visible: {sorted(got)}"
            else:
                assert got in (set(), txn.appended), f"txn {txn.uid} partly visible"
        zombie_values = {v for v in seen if v.startswith(b"-1:")}
        assert not zombie_values, f"zombie records visible: {sorted(zombie_values)}"
        found = self.groups.fetch_offsets("g", [("src", 0)])[("src", 0)]
        carried = {t.offset: t for t in self.txns if t.offset is not None}
        if found is not None:
            owner = carried.get(found.committed_offset)
            assert owner is not None and owner.outcome in ("committed", "unknown"), (
                f"offset {found.committed_offset} came from a transaction that did not commit"
            )
            last = [t.offset for t in self.commit_order if t.offset is not None]
            if last and owner.outcome == "committed":
                assert found.committed_offset == last[-1], (
                    f"offset {found.committed_offset} is not the last committed one ({last[-1]})"
                )
        else:
            assert not [t for t in self.txns if t.outcome == "committed" and t.offset is not None]

    def close(self) -> None:
        for replicas in self.partitions.values():
            replicas.close()


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulated disk never loses power: fsync (epoch checkpoints, rolls) is a no-op."""
    monkeypatch.setattr(os, "fsync", lambda _fd: None)


def test_transactions_seed(sim_seed: int, tmp_path: Path) -> None:
    sim = Simulation(sim_seed, tmp_path)
    try:
        sim.run()
        sim.check()
    except AssertionError as e:
        pytest.fail(f"transactions seed {sim_seed}: {e}", pytrace=False)
    finally:
        sim.close()


def test_the_transaction_simulation_can_fail(tmp_path: Path) -> None:
    """The checks are not vacuous: runs commit and abort transactions with records, cut
    replicas' suffixes and fetch chunks holding several producers' aborts, and a marker written
    for the wrong decision is caught."""
    totals = {"committed": 0, "aborted": 0, "records": 0, "truncations": 0, "multi_abort": 0}
    for seed in range(10):
        sim = Simulation(seed, tmp_path / str(seed))
        try:
            sim.run()
            sim.check()
            for t in sim.txns:
                if t.appended and t.outcome in ("committed", "aborted"):
                    totals[t.outcome] += 1
                totals["records"] += len(t.appended)
            for replicas in sim.partitions.values():
                totals["truncations"] += replicas.truncations
                totals["multi_abort"] += replicas.multi_abort_chunks
        finally:
            sim.close()
    assert totals["committed"] > 5 and totals["aborted"] > 1 and totals["records"] > 50, totals
    # replication is exercised: cut suffixes, follower chunks with several producers' aborts
    assert totals["truncations"] > 2 and totals["multi_abort"] > 5, totals

    for seed in range(10):
        sim = Simulation(seed, tmp_path / f"broken-{seed}")
        try:
            sim.run()
            victim = next((t for t in sim.txns if t.outcome == "aborted" and t.appended), None)
            if victim is None:
                continue
            victim.outcome = "committed"  # the truth says otherwise: the check must notice
            with pytest.raises(AssertionError, match="partly visible"):
                sim.check()
            return
        finally:
            sim.close()
    pytest.fail("no seed aborted a transaction that had records")
