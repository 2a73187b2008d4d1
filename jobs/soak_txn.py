"""The soak's transactional workload and its checkers (issue 27), importable by other soaks
(`soak.py` runs them; the multi-host soak reuses them).

- `TransactionalProducer`: a confluent-kafka producer with a `transactional.id`, writing
  transactions of `RECORDS_PER_TXN` numbered records over the partitions of `TXN_TOPIC` and
  aborting every `ABORT_EVERY`-th on purpose. Each transaction's outcome is what the client was
  told: committed, aborted, or unknown (an error left it undecided: all or nothing may show).
- `ReadCommittedReader`: a read_committed consumer reading `TXN_TOPIC` from the start while the
  nemesis acts; `read_committed_final` reads it again from the start at the end.
- `check_transactions`: no record of an aborted transaction visible, every committed transaction
  whole, nothing committed lost or read twice, no unknown transaction partly visible.
- `elect_preferred_leaders`: a preferred-leader move through the admin client (ElectLeaders
  PREFERRED), which brings a restarted broker back to leading its partitions.
- `compare_replicas`: after the brokers stopped cleanly, every replica of a partition must hold
  the same aborted transactions in its `.txnindex` files and, at the same log end, the same
  producers in its newest producer snapshot (the one taken at close), and its checkpointed high
  watermark must not exceed its log end.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.storage.checkpoint import OffsetCheckpointFile
from sparklog.storage.producer_snapshot import read_snapshot
from sparklog.storage.txn_index import TransactionIndex

TXN_TOPIC = "soak-txn"
TXN_PARTITIONS = 3
RECORDS_PER_TXN = 6
ABORT_EVERY = 5
TXN_PAUSE_S = 0.05


def create_txn_topic(bootstrap: str, timeout_s: float = 60) -> None:
    """RF=3, min.insync.replicas=2; returns once every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(TXN_TOPIC, TXN_PARTITIONS, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([topic])[TXN_TOPIC].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = admin.list_topics(TXN_TOPIC, timeout=5).topics.get(TXN_TOPIC)
        leaders = [p.leader for p in found.partitions.values()] if found else []
        if len(leaders) == TXN_PARTITIONS and min(leaders) >= 0:
            return
        time.sleep(0.5)
    raise RuntimeError(f"{TXN_TOPIC} has no leader for every partition after {timeout_s} s")


class TransactionalProducer(threading.Thread):
    """Transactions of numbered records `tid:n:i`; every ABORT_EVERY-th is aborted."""

    def __init__(self, bootstrap: str, tid: str) -> None:
        super().__init__(name=f"soak-{tid}", daemon=True)
        self.bootstrap = bootstrap
        self.tid = tid
        self.outcomes: dict[int, str] = {}  # txn number -> committed / aborted / unknown
        self.values: dict[int, list[bytes]] = {}
        self.errors: Counter[str] = Counter()
        self.stopping = threading.Event()

    def _new_producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.tid,
                "transaction.timeout.ms": 60_000,
                "message.timeout.ms": 55_000,
                "linger.ms": 5,
            }
        )
        producer.init_transactions(120)  # fences an earlier incarnation, aborting its txn
        return producer

    def run(self) -> None:
        producer: Producer | None = None
        number = 0
        while not self.stopping.is_set():
            try:
                if producer is None:
                    producer = self._new_producer()
                self._one(producer, number)
            except KafkaException as e:
                producer = self._on_error(producer, number, e.args[0])
            number += 1
            time.sleep(TXN_PAUSE_S)

    def _one(self, producer: Producer, number: int) -> None:
        self.outcomes[number] = "unknown"
        values = self.values[number] = []
        producer.begin_transaction()
        for i in range(RECORDS_PER_TXN):
            value = b"%s:%d:%d" % (self.tid.encode(), number, i)
            producer.produce(TXN_TOPIC, value=value, key=b"%d" % i)
            values.append(value)
        producer.poll(0)
        if number % ABORT_EVERY == ABORT_EVERY - 1:
            # abort_transaction purges what is still queued: send it first, so the aborted
            # records are in the log (and its .txnindex) for read_committed to skip
            if producer.flush(120):
                raise KafkaException("records of a transaction to abort were not delivered")
            producer.abort_transaction(120)
            self.outcomes[number] = "aborted"
        else:
            self._commit(producer, number)

    def _commit(self, producer: Producer, number: int) -> None:
        for _ in range(5):
            try:
                producer.commit_transaction(120)
                self.outcomes[number] = "committed"
                return
            except KafkaException as e:
                if not e.args[0].retriable():
                    raise
                self.errors[e.args[0].name()] += 1
        raise KafkaException("commit_transaction kept failing with retriable errors")

    def _on_error(self, producer: Producer | None, number: int, err: Any) -> Producer | None:
        """An abortable error: abort (then the outcome is known); anything else: start over
        with a new producer (init_transactions aborts what is open)."""
        self.errors[err.name() if hasattr(err, "name") else str(err)] += 1
        if producer is not None and getattr(err, "txn_requires_abort", lambda: False)():
            try:
                producer.abort_transaction(120)
                if number in self.outcomes:
                    self.outcomes[number] = "aborted"
                return producer
            except KafkaException as e:
                self.errors[e.args[0].name()] += 1
        time.sleep(1)
        return None

    def finish(self, timeout_s: float = 180) -> None:
        self.stopping.set()
        self.join(timeout_s)


class ReadCommittedReader(threading.Thread):
    """read_committed from offset 0 of every partition while the run goes on."""

    def __init__(self, bootstrap: str, name: str = "soak-read-committed") -> None:
        super().__init__(name=name, daemon=True)
        self.consumer = _read_committed_consumer(bootstrap, name)
        self.seen: Counter[bytes] = Counter()
        self.errors: Counter[str] = Counter()
        self.stopping = threading.Event()

    def run(self) -> None:
        self.consumer.assign([TopicPartition(TXN_TOPIC, p, 0) for p in range(TXN_PARTITIONS)])
        while not self.stopping.is_set():
            for msg in self.consumer.consume(500, timeout=0.2):
                if msg.error():
                    self.errors[msg.error().name()] += 1
                else:
                    self.seen[msg.value()] += 1
        self.consumer.close()


def _read_committed_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def read_committed_final(bootstrap: str, timeout_s: float = 120) -> Counter[bytes]:
    """Every record read_committed shows, from offset 0 up to each partition's LSO (the HW
    once no transaction is open), with how often each was read."""
    consumer = _read_committed_consumer(bootstrap, "soak-txn-final")
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(TXN_TOPIC, p), timeout=10)[1]
        for p in range(TXN_PARTITIONS)
    }
    consumer.assign([TopicPartition(TXN_TOPIC, p, 0) for p in range(TXN_PARTITIONS)])
    seen: Counter[bytes] = Counter()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=0.5):
            if not msg.error():
                seen[msg.value()] += 1
        positions = consumer.position([TopicPartition(TXN_TOPIC, p) for p in ends])
        if all(tp.offset >= ends[tp.partition] for tp in positions):
            break
    consumer.close()
    return seen


def check_transactions(
    producers: list[TransactionalProducer], seen: Counter[bytes], seen_during_run: Counter[bytes]
) -> dict[str, Any]:
    """The read_committed verdict over what the producers were told (see module doc)."""
    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}

    def found(kind: str, what: str, n: int = 1) -> None:
        counts[kind] += n
        examples.setdefault(kind, [])
        if len(examples[kind]) < 5:
            examples[kind].append(what)

    for producer in producers:
        for number, outcome in producer.outcomes.items():
            values = producer.values.get(number, [])
            counts[f"transactions_{outcome}"] += 1
            visible = [v for v in values if seen[v] or seen_during_run[v]]
            name = f"{producer.tid}:{number}"
            if outcome == "aborted" and visible:
                found("aborted_records_visible", name, len(visible))
                counts["aborted_transactions_visible"] += 1
            elif outcome == "committed":
                lost = [v for v in values if not seen[v]]
                if lost:
                    found("committed_records_lost", name, len(lost))
                    counts["committed_transactions_partial"] += len(lost) < len(values)
            elif outcome == "unknown" and 0 < len(visible) < len(values):
                found("unknown_transactions_partly_visible", name)
            counts["records_committed"] += len(values) if outcome == "committed" else 0
    duplicated = [v for v, n in seen.items() if n > 1]
    if duplicated:
        found("records_duplicated", duplicated[0].decode(), len(duplicated))
    keys = (
        "transactions_committed",
        "transactions_aborted",
        "transactions_unknown",
        "records_committed",
        "aborted_records_visible",
        "aborted_transactions_visible",
        "committed_records_lost",
        "committed_transactions_partial",
        "records_duplicated",
        "unknown_transactions_partly_visible",
    )
    report: dict[str, Any] = {k: counts[k] for k in keys}
    report["examples"] = examples
    report["errors"] = dict(sum((p.errors for p in producers), Counter()))
    report["ok"] = not any(
        counts[k]
        for k in (
            "aborted_records_visible",
            "committed_records_lost",
            "records_duplicated",
            "unknown_transactions_partly_visible",
        )
    )
    return report


def elect_preferred_leaders(bootstrap: str, topics: dict[str, int]) -> int:
    """ElectLeaders PREFERRED for every partition of `topics` (name -> partition count); returns
    how many partitions moved (ELECTION_NOT_NEEDED and unavailable replicas are not errors)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    try:
        results = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(30)
    except KafkaException:
        return 0
    return sum(1 for error in results.values() if error is None)


def compare_replicas(log_dirs: Path, topic: str, partitions: int) -> dict[str, Any]:
    """Compare every replica of each partition under `log_dirs` (searched recursively), read
    from the files once the brokers stopped: `.txnindex` entries (what read_committed skips)
    and the newest producer snapshot (taken at the log end on close)."""
    differs_index: list[str] = []
    differs_producers: list[str] = []
    hw_above_end: list[str] = []
    entries = 0
    replicas = 0
    for partition in range(partitions):
        found = {d: _replica_state(d) for d in sorted(log_dirs.rglob(f"{topic}-{partition}"))}
        replicas += len(found)
        if not found:
            continue
        # the reference: the longest log, and of those the fullest index (a lost entry is the
        # failure this looks for, so the replica holding the most is the likeliest whole one)
        reference_dir, (ref_end, ref_index, ref_producers) = max(
            found.items(), key=lambda item: (item[1][0], len(item[1][1]))
        )
        entries += len(ref_index)
        for directory, (end, index, producers) in found.items():
            name = str(directory.relative_to(log_dirs))
            checkpoint = OffsetCheckpointFile(directory.parent / "replication-offset-checkpoint")
            hw = checkpoint.read().get((topic, partition), 0)
            if hw > end >= 0:
                hw_above_end.append(f"{name}: HW {hw} above log end {end}")
            expected = [a for a in ref_index if a.last_offset < end]
            if [a for a in index if a.last_offset < end] != expected:
                differs_index.append(f"{name}: {len(index)} entries, {len(expected)} expected")
            if end == ref_end and producers != ref_producers:
                differs_producers.append(f"{name} differs from {reference_dir.name}")
    return {
        "replicas_compared": replicas,
        "txn_index_entries": entries,
        "replicas_whose_txn_index_differs": len(differs_index),
        "replicas_whose_producer_snapshot_differs": len(differs_producers),
        "replicas_with_hw_above_log_end": len(hw_above_end),
        "examples": {
            "txn_index": differs_index[:5],
            "producer_snapshot": differs_producers[:5],
            "hw": hw_above_end[:5],
        },
        "ok": not differs_index and not differs_producers and not hw_above_end,
    }


def _replica_state(directory: Path) -> tuple[int, list[Any], dict[int, tuple]]:
    """(log end as the newest snapshot says, every .txnindex entry, producers by id)."""
    index = []
    for path in sorted(directory.glob("*.txnindex")):
        txn_index = TransactionIndex(path, int(path.name.split(".")[0]))
        index.extend(txn_index.all_aborted())
        txn_index.close()
    snapshots = sorted(directory.glob("*.snapshot"))
    if not snapshots:
        return -1, index, {}
    newest = snapshots[-1]
    producers = {
        e.producer_id: (
            e.producer_epoch,
            e.coordinator_epoch,
            e.current_txn_first_offset,
            e.last_seq,
            e.last_data_offset,
        )
        for e in read_snapshot(newest)
    }
    return int(newest.name.split(".")[0]), index, producers
