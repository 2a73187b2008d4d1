"""A sans-IO group coordinator with an in-memory store and a hand-moved clock, for tests.

`Harness.flush()` plays the edge: it "persists" every pending write (keeping the rows, so a
restart can reload them) and completes it. `restart()` builds a new coordinator from the rows,
as a driver restart on the same table does.
"""

from __future__ import annotations

import itertools
from typing import Any

from sparklog.coordinator.group.config import GroupConfig
from sparklog.coordinator.group.coordinator import GroupCoordinator, OffsetCommitPartition
from sparklog.coordinator.shard import complete_write
from sparklog.protocol.consumer_protocol import encode_subscription

SESSION_MS = 10_000
REBALANCE_MS = 30_000
TOPICS = {"t": 6, "u": 2}


class Answer:
    """Collects what a responder was called with."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> None:
        self.values.append(value)

    @property
    def done(self) -> bool:
        return bool(self.values)

    @property
    def value(self) -> Any:
        assert len(self.values) == 1, f"answered {len(self.values)} times: {self.values}"
        return self.values[0]


class Harness:
    def __init__(self, **config: Any) -> None:
        defaults = {"group_initial_rebalance_delay_ms": 0}
        self.config = GroupConfig(**{**defaults, **config})
        self.now_ms = 1_700_000_000_000  # wall-clock ms, as the coordinator persists
        self.rows: list[dict[str, Any]] = []
        self.fail_next_flush: int = 0
        self._ids = itertools.count()
        self.core = self._new_core()

    def _new_core(self) -> GroupCoordinator:
        return GroupCoordinator(
            self.config,
            lambda topic: TOPICS.get(topic, 0),
            new_uuid=lambda: f"id{next(self._ids)}",
        )

    # -- the edge ---------------------------------------------------------------------------

    def flush(self) -> int:
        """Persist and complete every pending write (again until none is left)."""
        count = 0
        while writes := self.core.take_writes():
            for w in writes:
                code = self.fail_next_flush
                if not code:
                    self.rows.extend(w.rows)
                complete_write(w, [self.core], self.now_ms, code)
                count += 1
            self.fail_next_flush = 0
        return count

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        self.core.tick(self.now_ms)
        self.flush()

    def restart(self) -> None:
        self.core = self._new_core()
        self.core.load(list(self.rows), self.now_ms)

    # -- requests ---------------------------------------------------------------------------

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        *,
        instance_id: str | None = None,
        topics: list[str] | None = None,
        protocols: list[str] | None = None,
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        version: int = 9,
        client_id: str = "client",
    ) -> Answer:
        answer = Answer()
        meta = encode_subscription(topics or ["t"])
        self.core.join_group(
            self.now_ms,
            answer,
            group_id=group,
            member_id=member_id,
            group_instance_id=instance_id,
            client_id=client_id,
            client_host="/127.0.0.1",
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type=protocol_type,
            protocols=[(p, meta) for p in (protocols or ["range"])],
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
        self.flush()
        return answer

    def join_new(self, group: str = "g", **kw: Any) -> Answer:
        """KIP-394: the first JoinGroup gets a member id, the second one joins with it."""
        first = self.join(group, **kw)
        if kw.get("instance_id") is not None:
            return first
        assert first.value["error_code"] == 79, first.value  # MEMBER_ID_REQUIRED
        return self.join(group, first.value["member_id"], **kw)

    def sync(
        self,
        member_id: str,
        generation: int,
        group: str = "g",
        assignments: dict[str, bytes] | None = None,
        instance_id: str | None = None,
    ) -> Answer:
        answer = Answer()
        self.core.sync_group(
            self.now_ms,
            answer,
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocol_name=None,
            assignments=assignments or {},
        )
        self.flush()
        return answer

    def heartbeat(
        self, member_id: str, generation: int, group: str = "g", instance_id: str | None = None
    ) -> int:
        return self.core.heartbeat(
            self.now_ms,
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
        )

    def leave(self, *members: tuple[str, str | None], group: str = "g") -> tuple[int, list[int]]:
        result = self.core.leave_group(self.now_ms, group, list(members))
        self.flush()
        return result

    def commit(
        self,
        offsets: dict[tuple[str, int], int],
        group: str = "g",
        member_id: str = "",
        generation: int = -1,
        metadata: str = "",
        instance_id: str | None = None,
    ) -> dict[tuple[str, int], int]:
        answer = Answer()
        self.core.commit_offsets(
            self.now_ms,
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            retention_time_ms=-1,
            partitions=[
                OffsetCommitPartition(t, p, o, -1, metadata) for (t, p), o in offsets.items()
            ],
            respond=answer,
        )
        self.flush()
        return answer.value

    def committed(self, group: str = "g") -> dict[tuple[str, int], int]:
        found = self.core.fetch_offsets(group, None)
        return {tp: o.committed_offset for tp, o in found.items() if o is not None}

    def state(self, group: str = "g") -> str:
        described = self.core.describe_group(group)
        return "Dead" if described is None else described["group_state"]


def consumer_heartbeat(
    h: Harness,
    member_id: str,
    epoch: int,
    group: str = "cg",
    *,
    topics: list[str] | None = None,
    owned: dict[str, set[int]] | None = None,
    assignor: str | None = None,
    instance_id: str | None = None,
) -> dict[str, Any]:
    """One ConsumerGroupHeartbeat (KIP-848) with `owned` as the member reports it."""
    answer = h.core.consumer_heartbeat(
        h.now_ms,
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance_id,
        rack_id=None,
        rebalance_timeout_ms=REBALANCE_MS,
        subscribed_topic_names=topics,
        subscribed_topic_regex=None,
        server_assignor=assignor,
        owned=owned,
        client_id="client",
        client_host="/127.0.0.1",
    )
    h.flush()
    return answer
