"""Safety checks: a `History` of what every node did, checked as it happens and at the end.

Continuous checks (cheap, raise `Violation` at the first offence, so the trace shows the cause):

- one leader per (partition, leader epoch), whoever claims it: the controller's records, a
  broker becoming leader, a broker appending as leader;
- leader and partition epochs never go backwards, in the controller's records and on every
  broker process;
- the committed prefix never changes: when any leader's HW passes an offset, the record there
  is committed; every later HW (leader or follower) must cover the same records, and no replica
  may truncate below its HW;
- the ISR contract: every member of the controller's ISR, and of its ELR (KIP-966's eligible
  leader replicas), holds every committed record (checked when the committed prefix grows and
  when the controller persists a new ISR or ELR). This is what
  makes a clean election safe, and it catches a hazard (a lagging new-leader HW admitting a
  replica, an expansion without the maximal ISR, a stale admission of a replica that lost its
  disk) even when no election follows to turn it into a loss;
- a consumer never gets an offset at or above the HW of the leader that served it, and never
  two different records at one offset;
- no (producer id, sequence) twice in any log (the log asserts it) or acknowledged at two
  offsets.

Final checks (`check_final_state`, after the faults heal and the cluster settles): every
acknowledged acks=all record is in the final leader's log exactly once at its offset; every
record a consumer saw is there; replicas in the ISR are identical up to the HW; and liveness:
every partition has a leader, a full ISR, and HW = LEO everywhere.

With `unclean.leader.election.enable=true` an election outside the ISR may lose acknowledged
records: from the first unclean election of a partition on, its durability checks (committed
prefix, acknowledged and consumed records) are skipped and the election is counted; the other
checks still hold. An election from the ELR is clean; so is KIP-966's election of the last
known leader, unless that broker ever lost records to a power or disk loss (`lossy_brokers`):
Kafka then elects it knowing the data may be gone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparklog.metadata.log_records import PartitionRegistration

from .messages import TopicPartition
from .sim_log import SimLog, SimRecord
from .sim_network import Scheduler


class Violation(AssertionError):
    """A safety or liveness property does not hold."""


@dataclass(frozen=True, slots=True)
class Ack:
    tp: TopicPartition
    offset: int
    producer_id: int
    sequence: int
    value: str
    time_ms: int


class History:
    """Observations of one run, checked as they arrive."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.stats: Counter[str] = Counter()
        self.leader_of_epoch: dict[tuple[TopicPartition, int], int] = {}
        self.controller_epochs: dict[TopicPartition, tuple[int, int]] = {}
        self.broker_epochs: dict[tuple[int, int, TopicPartition], tuple[int, int]] = {}
        self.committed: dict[TopicPartition, list[SimRecord]] = {}
        self.unclean_since_ms: dict[TopicPartition, int] = {}
        self.acked: dict[TopicPartition, list[Ack]] = {}
        self._ack_of: dict[tuple[int, int], Ack] = {}
        self.consumed: dict[TopicPartition, dict[int, SimRecord]] = {}
        # set by the cluster: the controller's ISR of a partition, a broker's log of it
        self.isr_of: Callable[[TopicPartition], Sequence[int]] = lambda tp: ()
        self.log_of: Callable[[int, TopicPartition], SimLog | None] = lambda b, tp: None
        self.lossy_brokers: set[int] = set()  # set by the cluster: logs that lost records

    def fail(self, message: str) -> None:
        raise Violation(f"[t={self.scheduler.now_ms} ms] {message}")

    def durable(self, tp: TopicPartition) -> bool:
        """Whether acknowledged data of `tp` must survive (no unclean election yet)."""
        return tp not in self.unclean_since_ms

    # -- leaders and epochs -----------------------------------------------------------------

    def _claim(self, tp: TopicPartition, leader_epoch: int, broker: int, who: str) -> None:
        holder = self.leader_of_epoch.setdefault((tp, leader_epoch), broker)
        if holder != broker:
            self.fail(
                f"two leaders of {tp} in epoch {leader_epoch}: broker {holder} and broker "
                f"{broker} ({who})"
            )

    def on_partition_record(
        self, tp: TopicPartition, old: PartitionRegistration | None, record: Mapping[str, Any]
    ) -> None:
        """A Partition/PartitionChange record the controller is about to persist."""
        leader, leader_epoch = int(record["leader"]), int(record["leader_epoch"])
        partition_epoch = int(record["partition_epoch"])
        before = self.controller_epochs.get(tp)
        if before is not None and (leader_epoch < before[0] or partition_epoch <= before[1]):
            self.fail(
                f"controller moves {tp} epochs backwards: (leader, partition) epoch {before} -> "
                f"{(leader_epoch, partition_epoch)}"
            )
        self.controller_epochs[tp] = (leader_epoch, partition_epoch)
        if leader >= 0:
            self._claim(tp, leader_epoch, leader, "controller record")
            if old is not None and leader != old.leader and not self._clean_election(old, leader):
                self.stats["unclean_elections"] += 1
                self.unclean_since_ms.setdefault(tp, self.scheduler.now_ms)
                self.scheduler.note(
                    "UNCLEAN election of %s: broker %s (ISR %s)", tp, leader, old.isr
                )
            elif old is not None and leader != old.leader:
                self.stats["elections"] += 1
        if old is not None and leader == old.leader:
            grown = len(record["isr"]) - len(old.isr)
            if grown:
                self.stats["isr_expansions" if grown > 0 else "isr_shrinks"] += 1

    def _clean_election(self, old: PartitionRegistration, leader: int) -> bool:
        """From the ISR or the ELR (whose members hold every committed record: checked), or
        the last known leader if its log never lost records (KIP-966)."""
        if leader in old.isr or leader in old.elr:
            return True
        return old.last_known_elr == (leader,) and leader not in self.lossy_brokers

    def on_became_leader(self, broker: int, tp: TopicPartition, leader_epoch: int) -> None:
        self._claim(tp, leader_epoch, broker, "became leader")

    def on_broker_partition(
        self, broker: int, incarnation: int, tp: TopicPartition, epochs: tuple[int, int]
    ) -> None:
        """A broker's partition state after applying metadata or an ISR outcome."""
        key = (broker, incarnation, tp)
        before = self.broker_epochs.get(key)
        if before is not None and (epochs[0] < before[0] or epochs[1] < before[1]):
            self.fail(
                f"broker {broker} moved {tp} (leader, partition) epochs back: {before} -> {epochs}"
            )
        self.broker_epochs[key] = epochs

    def on_leader_append(self, broker: int, tp: TopicPartition, record: SimRecord) -> None:
        holder = self.leader_of_epoch.get((tp, record.leader_epoch))
        if holder != broker:
            self.fail(
                f"broker {broker} appended {record} to {tp} as leader of epoch "
                f"{record.leader_epoch}, whose leader is {holder}"
            )
        self.stats["appends"] += 1
        latest = self.controller_epochs.get(tp)
        if latest is not None and record.leader_epoch < latest[0]:
            self.stats["zombie_appends"] += 1  # a deposed leader that has not heard yet

    # -- committed prefix -------------------------------------------------------------------

    def on_high_watermark(
        self, broker: int, tp: TopicPartition, log: SimLog, old: int, new: int, leader: bool
    ) -> None:
        """`broker`'s HW of `tp` moved from `old` to `new` (> old)."""
        if new > log.log_end_offset:
            self.fail(f"broker {broker}: HW {new} of {tp} above its log end {log.log_end_offset}")
        if not self.durable(tp):
            return
        committed = self.committed.setdefault(tp, [])
        before, grew = len(committed), False
        for offset in range(max(0, old), new):
            record = log.records[offset]
            if offset < len(committed):
                if committed[offset] != record:
                    self.fail(
                        f"committed record changed: broker {broker} "
                        f"({'leader' if leader else 'follower'}) has {record} below its HW "
                        f"{new} of {tp}, but {committed[offset]} was committed"
                    )
            elif leader:
                committed.append(record)
                grew = True
            else:
                self.fail(
                    f"follower {broker} HW {new} of {tp} passed every leader's HW {len(committed)}"
                )
        if grew:
            self._check_isr_holds(tp, self.isr_of(tp), before, "its HW advanced")

    def on_isr_persisted(
        self, tp: TopicPartition, isr: Sequence[int], added: Sequence[int]
    ) -> None:
        """The controller persisted a new ISR of `tp`; `added` joined it."""
        if added and self.durable(tp):
            self._check_isr_holds(tp, added, 0, f"the controller added it to the ISR {tuple(isr)}")

    def on_elr_persisted(
        self, tp: TopicPartition, elr: Sequence[int], added: Sequence[int]
    ) -> None:
        """The controller persisted a new ELR of `tp`; `added` joined it (KIP-966)."""
        if added and self.durable(tp):
            self._check_isr_holds(tp, added, 0, f"the controller added it to the ELR {tuple(elr)}")

    def _check_isr_holds(
        self, tp: TopicPartition, brokers: Sequence[int], start: int, when: str
    ) -> None:
        committed = self.committed.get(tp, [])
        for broker in brokers:
            log = self.log_of(broker, tp)
            records = log.records[start : len(committed)] if log is not None else []
            if records != committed[start:]:
                have = log.log_end_offset if log is not None else 0
                self.fail(
                    f"ISR contract broken: broker {broker}, in the controller's ISR or ELR of "
                    f"{tp}, "
                    f"lacks committed records (its log end {have}, committed {len(committed)}, "
                    f"first difference at or after {start}) when {when}"
                )

    def on_truncate(
        self, broker: int, tp: TopicPartition, offset: int, log_end_offset: int, hw: int
    ) -> None:
        if offset < log_end_offset:
            self.stats["truncations"] += 1
            self.scheduler.note(
                "b%s truncates %s from %s to %s (hw %s)", broker, tp, log_end_offset, offset, hw
            )
        if offset < hw and self.durable(tp):
            self.fail(f"broker {broker} truncated {tp} to {offset}, below its HW {hw}")

    # -- clients ----------------------------------------------------------------------------

    def on_consumer_read(
        self, broker: int, tp: TopicPartition, records: Sequence[SimRecord], hw: int
    ) -> None:
        seen = self.consumed.setdefault(tp, {})
        for record in records:
            if record.offset >= hw:
                self.fail(f"broker {broker} served {record} of {tp} to a consumer at HW {hw}")
            before = seen.setdefault(record.offset, record)
            if before != record and self.durable(tp):
                self.fail(f"consumers read {before} and later {record} at one offset of {tp}")
        self.stats["consumed"] += len(records)

    def on_ack(self, ack: Ack) -> None:
        key = (ack.producer_id, ack.sequence)
        before = self._ack_of.setdefault(key, ack)
        if before.offset != ack.offset or before.tp != ack.tp:
            self.fail(f"producer {key} acknowledged twice: {before} and {ack}")
        if before is ack:
            self.acked.setdefault(ack.tp, []).append(ack)
            self.stats["acked"] += 1


def check_final_state(
    history: History,
    partitions: Mapping[TopicPartition, PartitionRegistration],
    logs: Mapping[TopicPartition, Mapping[int, SimLog]],
    leader_high_watermarks: Mapping[TopicPartition, int],
    live_brokers: Sequence[int],
) -> None:
    """The checks after the faults healed and the cluster settled (see module doc)."""
    for tp in sorted(partitions):
        registration = partitions[tp]
        replica_logs = logs[tp]
        if registration.leader < 0 or registration.leader not in live_brokers:
            history.fail(f"liveness: {tp} has no live leader after healing: {registration}")
        leader_log = replica_logs[registration.leader]
        hw = leader_high_watermarks[tp]
        if sorted(registration.isr) != sorted(registration.replicas):
            history.fail(f"liveness: {tp} ISR {registration.isr} not full after healing")
        if hw != leader_log.log_end_offset:
            history.fail(
                f"liveness: {tp} leader HW {hw} != its log end {leader_log.log_end_offset}"
            )
        prefix = leader_log.records[:hw]
        for broker in registration.isr:
            if replica_logs[broker].records[:hw] != prefix:
                history.fail(f"ISR replica {broker} of {tp} differs from the leader below HW {hw}")
        _check_durability(history, tp, leader_log)


def _check_durability(history: History, tp: TopicPartition, leader_log: SimLog) -> None:
    if not history.durable(tp):
        history.stats["unclean_partitions"] += 1
        lost = sum(
            1
            for a in history.acked.get(tp, ())
            if a.offset >= leader_log.log_end_offset
            or leader_log.records[a.offset].value != a.value
        )
        history.stats["acked_lost_after_unclean"] += lost
        return
    records = leader_log.records
    for ack in history.acked.get(tp, ()):
        found = records[ack.offset] if ack.offset < len(records) else None
        if found is None or (found.producer_id, found.sequence, found.value) != (
            ack.producer_id,
            ack.sequence,
            ack.value,
        ):
            history.fail(f"acknowledged record lost: {ack} ; final log has {found}")
        if leader_log.offset_of(ack.producer_id, ack.sequence) != ack.offset:
            history.fail(f"acknowledged record {ack} not exactly once in the final log")
    for offset, record in sorted(history.consumed.get(tp, {}).items()):
        if offset >= len(records) or records[offset] != record:
            history.fail(f"consumed record {record} of {tp} is not in the final log")
    committed = history.committed.get(tp, [])
    if records[: len(committed)] != committed:
        history.fail(f"final log of {tp} does not start with the committed prefix")
