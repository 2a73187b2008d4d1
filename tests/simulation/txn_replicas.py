"""The replicas of one partition in the transaction simulation: three real `Log`s, one the
leader, the others following it in fetched chunks of random size (so one follower append often
holds several producers' data and markers, aborts included, as a follower catching up does).

Replication is modelled on Kafka's: the high watermark is the minimum log end over the ISR and
every replica learns it at once (capped by its own log end); acks=all waits for the ISR only. A
follower drops out of the ISR (it lags, or its broker restarts) and fetches on in chunks that
grow to span many transactions, rejoining once it has the leader's whole log. A leader change
(a failover or a preferred-leader move) picks an ISR member, which holds at least the high
watermark, stamps a new leader epoch, and every other replica cuts its divergent suffix the way
the replica fetcher does (OffsetForLeaderEpoch -> `truncation_for` -> `Log.truncate_to`). A
restart reopens a follower's log from its files, after a clean close or (a kill) without its
final flush and snapshot, and recovers it from offset 0.

Invariants checked here (`tests/log_checks.py`): after every truncation and restart, log start
<= HW <= log end and the replica's producer state, txn index and first unstable offset equal a
fresh replay of its log; once caught up (`check_replicas_agree`), every replica holds the same
log, the same aborted transactions in its `.txnindex` (LSO included) and the same producers.
"""

from __future__ import annotations

import random
from pathlib import Path

from sparklog.broker.truncation import truncation_for
from sparklog.records.batch import iter_batches
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log
from sparklog.storage.producer_append_info import AppendOrigin
from tests.log_checks import aborted_view, check_log_consistent, producer_view

REPLICAS = 3
# small segments: rolls, hence producer snapshots, happen within a run (truncation reloads one)
CONFIG = LogConfig.from_properties({"segment.bytes": 600, "index.interval.bytes": 1})
CHUNK_BYTES = (1, 400, 2_000, 1 << 20)  # a follower's fetch budget (at least one batch)


class PartitionReplicas:
    def __init__(self, directory: Path, rng: random.Random) -> None:
        self.directory = directory
        self.rng = rng
        self.leader_epoch = 0
        self.leader_index = 0
        self.replicas = [Log.open(self._dir(i), CONFIG, now_ms=0) for i in range(REPLICAS)]
        self.high_watermark = 0
        self.isr = set(range(REPLICAS))
        self.truncations = 0  # that cut something
        self.restarts = 0
        self.multi_abort_chunks = 0  # follower appends holding aborts of 2+ producers

    def _dir(self, index: int) -> Path:
        return self.directory / f"replica-{index}"

    @property
    def leader(self) -> Log:
        return self.replicas[self.leader_index]

    def followers(self) -> list[int]:
        return [i for i in range(REPLICAS) if i != self.leader_index]

    # -- the leader -------------------------------------------------------------------------

    def append(self, batch: bytes, origin: AppendOrigin, now_ms: int) -> int:
        """Append to the leader (raises its KafkaError); returns the first offset."""
        return self.leader.append_as_leader(
            batch, self.leader_epoch, now_ms, origin=origin
        ).first_offset

    def value_at(self, offset: int) -> bytes | None:
        """The (first) record value of the leader's batch at `offset`, if it has that batch."""
        log = self.leader
        if not log.log_start_offset <= offset < log.log_end_offset:
            return None
        for batch in iter_batches(bytes(log.read(offset, 1).records)):
            if batch.header.base_offset == offset:
                return batch.records()[0].value
        return None

    def _advance_high_watermark(self) -> None:
        hw = min(self.replicas[i].log_end_offset for i in self.isr)
        assert hw >= self.high_watermark, f"HW went back: {self.high_watermark} -> {hw}"
        self.high_watermark = hw
        for log in self.replicas:
            log.update_high_watermark(hw)

    # -- followers --------------------------------------------------------------------------

    def fetch(self, index: int, now_ms: int, max_bytes: int | None = None) -> bool:
        """One fetch of follower `index` from the leader; False when it was caught up."""
        follower, leader = self.replicas[index], self.leader
        if follower.log_end_offset >= leader.log_end_offset:
            return False
        budget = self.rng.choice(CHUNK_BYTES) if max_bytes is None else max_bytes
        data = bytes(leader.read(follower.log_end_offset, budget).records)
        follower.append_as_follower(data, now_ms)
        if follower.log_end_offset == leader.log_end_offset:
            self.isr.add(index)  # caught up: back in the ISR (Kafka: AlterPartition)
        aborting = {
            b.header.producer_id
            for b in iter_batches(data)
            if b.header.is_control and b.records()[0].key[2:4] == b"\x00\x00"  # ABORT
        }
        self.multi_abort_chunks += len(aborting) > 1
        self._advance_high_watermark()
        return True

    def catch_up(self, now_ms: int, everyone: bool = False) -> None:
        """The ISR's followers (`everyone`: all followers) fetch until they have the leader's
        log: acks=all is then met."""
        for index in self.followers():
            if everyone or index in self.isr:
                while self.fetch(index, now_ms):
                    pass

    def lag(self) -> None:
        """A follower falls behind and out of the ISR (replica.lag.time.max.ms); at least
        min.insync.replicas (2) stay in."""
        lagging = [i for i in self.followers() if i in self.isr]
        if len(self.isr) > 2 and lagging:
            self.isr.discard(self.rng.choice(lagging))

    # -- faults -----------------------------------------------------------------------------

    def change_leader(self, now_ms: int) -> None:
        """Leadership moves to another replica (failover or preferred-leader move); the others
        truncate to it. Any replica holds the HW, so nothing acknowledged is cut."""
        candidates = [i for i in self.followers() if i in self.isr]
        if not candidates:
            return  # no other ISR member: the leader stays (no unclean election)
        self.leader_index = self.rng.choice(candidates)
        self.leader_epoch += 1
        self.leader.epoch_cache.assign(self.leader_epoch, self.leader.log_end_offset)
        for index in self.followers():
            self._truncate(index, now_ms)
        self._advance_high_watermark()

    def _truncate(self, index: int, now_ms: int) -> None:
        follower, leader = self.replicas[index], self.leader
        for _ in range(10):
            latest = follower.latest_epoch
            if latest is None:
                cut_offset, done = follower.high_watermark, True
            else:
                epoch, end = leader.epoch_cache.end_offset_for(latest, leader.log_end_offset)
                cut = truncation_for(
                    epoch,
                    end,
                    local_end_offset_for=lambda e: follower.epoch_cache.end_offset_for(
                        e, follower.log_end_offset
                    ),
                    log_end_offset=follower.log_end_offset,
                    high_watermark=follower.high_watermark,
                )
                cut_offset, done = cut.offset, cut.done
            if follower.truncate_to(cut_offset, now_ms):
                self.truncations += 1
            check_log_consistent(follower, f"replica {index} after truncation to {cut_offset}")
            if done:
                return
        raise AssertionError(f"replica {index} still truncating after 10 rounds")

    def restart_follower(self, now_ms: int) -> None:
        """A follower's broker restarts: its log is reopened from its files (after a kill, the
        final flush and producer snapshot are missing and recovery starts at 0)."""
        index = self.rng.choice(self.followers())
        old = self.replicas[index]
        clean = self.rng.random() < 0.5
        if clean:
            old.close()
        else:
            for segment in old.segments:  # the process died: no flush, no final snapshot
                segment.close()
        log = Log.open(self._dir(index), CONFIG, now_ms=now_ms, recovery_point=0)
        self.replicas[index] = log
        self.isr.discard(index)  # fenced while it was gone; rejoins once caught up
        self.restarts += 1
        log.update_high_watermark(self.high_watermark)  # learnt from the leader's next answer
        check_log_consistent(log, f"replica {index} after a {'clean ' if clean else ''}restart")

    # -- checks -----------------------------------------------------------------------------

    def check_high_watermarks(self) -> None:
        for index, log in enumerate(self.replicas):
            assert log.log_start_offset <= log.high_watermark <= log.log_end_offset, (
                f"replica {index}: {log}"
            )

    def check_replicas_agree(self, what: str) -> None:
        """Once caught up: the same batches, aborted transactions and producers everywhere."""
        leader = self.leader
        expected_log = bytes(leader.read(0, 1 << 30).records)
        expected_aborted = aborted_view(leader)
        expected_producers = producer_view(leader.producer_state)
        for index, log in enumerate(self.replicas):
            name = f"{what} replica {index}"
            check_log_consistent(log, name)
            if index == self.leader_index:
                continue
            assert bytes(log.read(0, 1 << 30).records) == expected_log, f"{name}: log differs"
            got = aborted_view(log)
            assert got == expected_aborted, (
                f"{name}: txn index {got} != the leader's {expected_aborted}"
            )
            producers = producer_view(log.producer_state)
            assert producers == expected_producers, (
                f"{name}: producers {producers} != the leader's {expected_producers}"
            )

    def close(self) -> None:
        for log in self.replicas:
            log.close()
