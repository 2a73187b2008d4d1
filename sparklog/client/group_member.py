"""A consumer's membership in a consumer group (Kafka's `ConsumerCoordinator` +
`HeartbeatThread`, and the KIP-848 `ConsumerMembershipManager`).

`ensure_active(deadline)` runs inside `poll()`: it finds the coordinator and, when needed,
(re)joins. Classic protocol: JoinGroup (with the KIP-394 member-id round trip), the leader runs
the client-side assignor (`partition.assignment.strategy`: range, roundrobin, sticky,
cooperative-sticky), SyncGroup hands everyone their share. Eager assignors give up everything
before rejoining (`on_revoke`); with only cooperative-sticky configured (KIP-429) a member keeps
what it owns, gives up only what moved, and rejoins once more so it is handed over. KIP-848 (`group.protocol=consumer`): ConsumerGroupHeartbeat carries the
subscription and owned partitions, the coordinator assigns, and the member revokes and takes
partitions as the answers say.

A background thread heartbeats every `heartbeat.interval.ms` (classic) and notices rebalances,
fencing and a coordinator move; if `poll()` is not called for `max.poll.interval.ms` it leaves
the group, as Java's consumer does. Everything else (joins, commits, callbacks) runs on the
caller's thread.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sparklog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedMemberEpochError,
    IllegalGenerationError,
    KafkaError,
    MemberIdRequiredError,
    NotCoordinatorError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    error_for_code,
)
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.consumer_protocol import (
    assignment_partitions,
    encode_assignment,
    encode_subscription,
    subscription_owned,
    subscription_topics,
)
from sparklog.structs import TopicPartition

from .assignors import ASSIGNORS
from .broker_connection import now_ms
from .metadata import Metadata
from .network import NetworkClient

logger = logging.getLogger(__name__)

_REJOIN = frozenset(
    {IllegalGenerationError.code, UnknownMemberIdError.code, RebalanceInProgressError.code}
)
#: Connections to a group coordinator are keyed by this minus its broker id (Java's client).
COORDINATOR_CONNECTION_ID_BASE = 2**31 - 1
_COORDINATOR_GONE = frozenset(
    {
        CoordinatorLoadInProgressError.code,
        CoordinatorNotAvailableError.code,
        NotCoordinatorError.code,
    }
)
#: KIP-848: rejoin with epoch 0.
_FENCED_848 = frozenset({UnknownMemberIdError.code, FencedMemberEpochError.code})


class CommitFailedError(KafkaError):
    """A commit the group refused because this member is no longer part of the generation
    (Kafka's `CommitFailedException`): the partitions may be someone else's now."""

    code = IllegalGenerationError.code


class GroupMember:
    """One consumer's membership; `subscriptions` is the consumer's SubscriptionState."""

    def __init__(
        self,
        network: NetworkClient,
        metadata: Metadata,
        config: Mapping[str, Any],
        on_assigned: Callable[[list[TopicPartition]], None],
        on_revoked: Callable[[list[TopicPartition], bool], None],
    ) -> None:
        self.network = network
        self.metadata = metadata
        self.config = config
        self.group_id: str = config["group.id"]
        self.instance_id: str | None = config["group.instance.id"]
        self.kip848 = config["group.protocol"] == "consumer"
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        strategies = list(config["partition.assignment.strategy"])
        unknown = [s for s in strategies if s not in ASSIGNORS]
        if not self.kip848 and (unknown or not strategies):
            raise ValueError(
                f"partition.assignment.strategy={strategies}: sparklog's consumer runs "
                f"{', '.join(ASSIGNORS)} (or use group.protocol=consumer)"
            )
        self.strategies = strategies
        #: KIP-429: incremental rebalancing when every configured assignor is cooperative
        self.cooperative = all(s == "cooperative-sticky" for s in strategies)
        self.topics: list[str] = []
        self.coordinator: int | None = None
        self.member_id = str(uuid.uuid4()) if self.kip848 else ""
        self.generation = -1  # the member epoch with KIP-848
        self.owned: list[TopicPartition] = []
        self._ids: dict[str, Any] = {}
        self._pending: tuple[str, Any, Any] | None = None  # (step, future, context)
        self._lock = threading.Lock()
        self._rejoin = True
        self._lost = False
        self._last_poll_ms = now_ms()
        self._next_heartbeat_ms = 0
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    # -- caller's thread --------------------------------------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        with self._lock:
            self.topics = sorted(set(topics))
            self._rejoin = True
        self.metadata.add_topics(self.topics)

    def ensure_active(self, deadline_ms: int) -> None:
        """Find the coordinator and (re)join when needed; called by every poll()."""
        self._last_poll_ms = now_ms()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._heartbeat_loop, name=f"sparklog-heartbeat-{self.group_id}", daemon=True
            )
            self._thread.start()
        while now_ms() < deadline_ms:
            try:
                self._ensure_coordinator()
                if self.kip848:
                    if self._rejoin or now_ms() >= self._next_heartbeat_ms:
                        self._heartbeat_848()
                    if not self._rejoin:
                        return
                elif self._rejoin:
                    self._join_classic(deadline_ms)
                    if self._pending is not None and now_ms() >= deadline_ms:
                        return
                else:
                    return
            except KafkaError as e:
                if not getattr(e, "retriable", False) and e.code not in _COORDINATOR_GONE | _REJOIN:
                    raise
                logger.info("group %s: %s; retrying", self.group_id, e)
                time.sleep(self.config["retry.backoff.ms"] / 1000)

    def _request(self, api: ApiKey, fields: dict[str, Any], timeout_ms: int | None = None) -> Any:
        if self.coordinator is None:
            raise CoordinatorNotAvailableError(f"group {self.group_id} has no coordinator yet")
        try:
            return self.network.send(self.coordinator, api, fields, timeout_ms=timeout_ms).result()
        except KafkaError:
            self.coordinator = None
            raise

    def _ensure_coordinator(self) -> None:
        if self.coordinator is not None:
            return
        node = self.network.least_loaded_node(self.metadata.candidates())
        if node is None:
            self.metadata.request_update()
            raise CoordinatorNotAvailableError("no broker to ask for the group coordinator")
        response = self.network.send(
            node, ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [self.group_id]}
        ).result()
        found = response.coordinators[0]
        if int(found.error_code):
            raise error_for_code(int(found.error_code))(f"FindCoordinator for {self.group_id}")
        # Kafka's AbstractCoordinator: the coordinator gets a connection of its own (node id
        # MAX_VALUE - broker id), so a JoinGroup that waits for the whole group never holds
        # back fetches to the same broker (which answers a connection's requests in order).
        connection_id = COORDINATOR_CONNECTION_ID_BASE - int(found.node_id)
        self.network.set_address(connection_id, found.host, int(found.port))
        self.coordinator = connection_id

    # -- classic protocol ------------------------------------------------------------------

    def _join_classic(self, deadline_ms: int) -> None:
        """One step of the join: send JoinGroup, or collect its answer and send SyncGroup, or
        collect that and apply the assignment. Requests stay in flight across polls (a
        JoinGroup waits for the whole group), so `poll()` returns when its timeout is up."""
        if self._pending is None:
            if self.owned and (not self.cooperative or self._lost):
                self._revoke(self.owned, lost=self._lost)  # eager: give everything up first
            self._send("join", ApiKey.JOIN_GROUP, self._join_fields())
        pending = self._pending
        assert pending is not None  # `_send` set it
        step, future, context = pending
        remaining_s = max(0.0, (deadline_ms - now_ms()) / 1000)
        try:
            response = future.result(timeout=remaining_s)
        except TimeoutError:
            return  # still waiting: the next poll() collects it
        except KafkaError:
            self._pending = None
            self.coordinator = None
            raise
        self._pending = None
        if step == "join":
            self._on_join(response)
        else:
            self._on_sync(response)

    def _send(self, step: str, api: ApiKey, fields: dict[str, Any], context: Any = None) -> None:
        if self.coordinator is None:
            raise CoordinatorNotAvailableError(f"group {self.group_id} has no coordinator yet")
        timeout = self.config["max.poll.interval.ms"] + self.config["request.timeout.ms"]
        future = self.network.send(self.coordinator, api, fields, timeout_ms=timeout)
        logger.debug("group %s: sent %s as %s", self.group_id, api.name, self.member_id)
        self._pending = (step, future, context)

    def _join_fields(self) -> dict[str, Any]:
        owned = [(tp.topic, tp.partition) for tp in self.owned] if self.cooperative else None
        subscription = encode_subscription(self.topics, owned=owned)
        return {
            "group_id": self.group_id,
            "session_timeout": self.config["session.timeout.ms"],
            "rebalance_timeout": self.config["max.poll.interval.ms"],
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": "consumer",
            "protocols": [{"name": s, "metadata": subscription} for s in self.strategies],
            "reason": None,
        }

    def _on_join(self, response: Any) -> None:
        code = int(response.error_code)
        if code == MemberIdRequiredError.code:  # KIP-394: join again with the id we were given
            self.member_id = response.member_id
            return
        if code == UnknownMemberIdError.code:
            self.member_id = ""
        if code:
            raise error_for_code(code)(f"JoinGroup for group {self.group_id}")
        self.member_id, self.generation = response.member_id, int(response.generation_id)
        assignments = []
        if response.leader == self.member_id:
            assignments = self._assign(response.protocol_name, response.members)
        self._send(
            "sync",
            ApiKey.SYNC_GROUP,
            {
                "group_id": self.group_id,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": self.instance_id,
                "protocol_type": "consumer",
                "protocol_name": response.protocol_name,
                "assignments": assignments,
            },
        )

    def _on_sync(self, sync: Any) -> None:
        if int(sync.error_code):
            raise error_for_code(int(sync.error_code))(f"SyncGroup for group {self.group_id}")
        with self._lock:
            self._rejoin, self._lost = False, False
        partitions = [
            TopicPartition(t, p) for t, p in assignment_partitions(bytes(sync.assignment))
        ]
        revoked = [tp for tp in self.owned if tp not in partitions]
        if revoked:  # cooperative: give up what moved, then rejoin so it can be handed over
            self._revoke(revoked, lost=False)
            with self._lock:
                self._rejoin = True
        self.owned = partitions
        logger.info(
            "group %s generation %d: assigned %s", self.group_id, self.generation, partitions
        )
        self.on_assigned(partitions)

    def _assign(self, protocol: str, members: Iterable[Any]) -> list[dict[str, Any]]:
        members = list(members)
        subscriptions = {
            m.member_id: sorted(subscription_topics(bytes(m.metadata))) for m in members
        }
        owned = {m.member_id: subscription_owned(bytes(m.metadata)) for m in members}
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        response = self.metadata.request_metadata(topics)
        counts = {t.name: len(t.partitions) for t in response.topics if int(t.error_code) == 0}
        plan = ASSIGNORS[protocol](subscriptions, counts, owned)
        return [{"member_id": m, "assignment": encode_assignment(tps)} for m, tps in plan.items()]

    def _revoke(self, partitions: list[TopicPartition], lost: bool) -> None:
        self.owned = [tp for tp in self.owned if tp not in partitions]
        self.on_revoked(list(partitions), lost)

    # -- KIP-848 ---------------------------------------------------------------------------

    def _heartbeat_848(self) -> None:
        joining = self.generation <= 0
        ids = self._topic_ids()
        owned: dict[Any, list[int]] = {}
        for tp in self.owned:
            if tp.topic in ids:
                owned.setdefault(ids[tp.topic], []).append(tp.partition)
        response = self._request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            {
                "group_id": self.group_id,
                "member_id": self.member_id,
                "member_epoch": max(self.generation, 0),
                "instance_id": self.instance_id,
                "rack_id": None,
                "rebalance_timeout": self.config["max.poll.interval.ms"],
                "subscribed_topic_names": self.topics,
                "subscribed_topic_regex": None,
                "server_assignor": None,
                "topic_partitions": [
                    {"topic_id": i, "partitions": sorted(ps)} for i, ps in owned.items()
                ],
            },
        )
        code = int(response.error_code)
        if code in _FENCED_848:
            self._revoke(self.owned, lost=True)
            self.generation = 0
            raise RebalanceInProgressError(f"fenced from group {self.group_id}: rejoining")
        if code:
            raise error_for_code(code)(f"ConsumerGroupHeartbeat for {self.group_id}")
        if response.member_id:
            self.member_id = response.member_id
        self.generation = int(response.member_epoch)
        self._next_heartbeat_ms = now_ms() + int(
            getattr(response.heartbeat_interval, "total_seconds", lambda: 5)() * 1000
        )
        with self._lock:
            self._rejoin = False
        if response.assignment is not None:
            self._apply_848(response.assignment, joining)

    def _topic_ids(self, refresh: bool = False) -> dict[str, Any]:
        """Topic name -> id of the subscribed topics (KIP-848 speaks ids)."""
        if refresh or any(t not in self._ids for t in self.topics):
            response = self.metadata.request_metadata(None if refresh else self.topics)
            self._ids.update(
                {t.name: t.topic_id for t in response.topics if t.name and int(t.error_code) == 0}
            )
        return self._ids

    def _apply_848(self, assignment: Any, joining: bool) -> None:
        names = {i: n for n, i in self._topic_ids().items()}
        if any(tp.topic_id not in names for tp in assignment.topic_partitions):
            names = {i: n for n, i in self._topic_ids(refresh=True).items()}
        target = [
            TopicPartition(names[tp.topic_id], int(p))
            for tp in assignment.topic_partitions
            if tp.topic_id in names
            for p in tp.partitions
        ]
        revoked = [tp for tp in self.owned if tp not in target]
        if revoked:
            self._revoke(revoked, lost=False)
        added = [tp for tp in target if tp not in self.owned]
        self.owned = [*self.owned, *added]
        if added or joining:
            self.on_assigned(list(self.owned))

    # -- heartbeat thread ------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        interval_s = self.config["heartbeat.interval.ms"] / 1000
        while not self._closed.wait(interval_s):
            if now_ms() - self._last_poll_ms > self.config["max.poll.interval.ms"]:
                logger.warning(
                    "group %s: poll() not called for max.poll.interval.ms (%d ms); leaving the "
                    "group so its partitions move",
                    self.group_id,
                    self.config["max.poll.interval.ms"],
                )
                self._leave()
                with self._lock:
                    self._rejoin, self._lost = True, True
                self._last_poll_ms = now_ms()
                continue
            if self.kip848 or self._rejoin or self.coordinator is None or self.generation < 0:
                continue  # KIP-848 heartbeats ride on poll(); a joining member has no generation
            try:
                response = self.network.send(
                    self.coordinator,
                    ApiKey.HEARTBEAT,
                    {
                        "group_id": self.group_id,
                        "generation_id": self.generation,
                        "member_id": self.member_id,
                        "group_instance_id": self.instance_id,
                    },
                ).result()
            except KafkaError:
                self.coordinator = None
                continue
            code = int(response.error_code)
            if code in _REJOIN:
                with self._lock:
                    self._rejoin = True
                    self._lost = code != RebalanceInProgressError.code
                if code == UnknownMemberIdError.code:
                    self.member_id = ""
            elif code in _COORDINATOR_GONE:
                self.coordinator = None

    # -- commits and leaving ---------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """OffsetCommit for this generation; CommitFailedError when the group moved on."""
        if not offsets:
            return
        self._ensure_coordinator()
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                }  # fmt: skip
            )
        response = self._request(
            ApiKey.OFFSET_COMMIT,
            {
                "group_id": self.group_id,
                "generation_id_or_member_epoch": self.generation,
                "member_id": self.member_id,
                "group_instance_id": self.instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        )
        codes = {int(p.error_code) for t in response.topics for p in t.partitions} - {0}
        if codes & (_REJOIN | {StaleMemberEpochError.code}):
            with self._lock:
                self._rejoin = True
            raise CommitFailedError(
                f"commit refused: group {self.group_id} rebalanced (error {min(codes)}); "
                "poll() again to rejoin — the partitions may have moved"
            )
        if codes:
            raise error_for_code(min(codes))(f"OffsetCommit for group {self.group_id}")

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        tps = list(partitions)
        self._ensure_coordinator()
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        response = self._request(
            ApiKey.OFFSET_FETCH,
            {
                "groups": [
                    {
                        "group_id": self.group_id,
                        "member_id": None,
                        "member_epoch": -1,
                        "topics": [
                            {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()
                        ],
                    }
                ],
                "require_stable": False,
            },
        )
        found: dict[TopicPartition, int | None] = dict.fromkeys(tps)
        for t in response.groups[0].topics:
            for p in t.partitions:
                offset = int(p.committed_offset)
                found[TopicPartition(t.name, int(p.partition_index))] = (
                    offset if offset >= 0 else None
                )
        return found

    def _leave(self) -> None:
        if self.coordinator is None:
            return
        try:
            if self.kip848:
                if self.generation > 0:
                    self.network.send(
                        self.coordinator,
                        ApiKey.CONSUMER_GROUP_HEARTBEAT,
                        {
                            "group_id": self.group_id,
                            "member_id": self.member_id,
                            "member_epoch": -1,
                            "instance_id": self.instance_id,
                            "rack_id": None,
                            "rebalance_timeout": -1,
                            "subscribed_topic_names": None,
                            "subscribed_topic_regex": None,
                            "server_assignor": None,
                            "topic_partitions": None,
                        },  # fmt: skip
                    ).result()
            elif self.member_id and self.instance_id is None:  # static members stay (KIP-345)
                self.network.send(
                    self.coordinator,
                    ApiKey.LEAVE_GROUP,
                    {
                        "group_id": self.group_id,
                        "members": [
                            {
                                "member_id": self.member_id,
                                "group_instance_id": None,
                                "reason": "the consumer is closing",
                            }
                        ],
                    },  # fmt: skip
                ).result()
        except KafkaError as e:
            logger.info("leaving group %s failed: %s", self.group_id, e)
        self.generation = -1 if not self.kip848 else 0

    def close(self) -> None:
        self._closed.set()
        self._leave()
        if self._thread is not None:
            self._thread.join(5)
