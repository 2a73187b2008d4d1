"""What the coordinators need from the process hosting them (the controller, in-process on
the driver): `CoordinatorContext`. Only what they use — metadata lookups, producer-id blocks
and the admin requests clients send to the coordinator as to any node."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sparklog.protocol.connection import Request
from sparklog.security.credentials import CredentialStore


class TopicIds(Protocol):
    """Topic name <-> id lookups (the KIP-848 APIs name topics by id)."""

    def topic_id(self, topic: str) -> uuid.UUID | None: ...

    def topic_name(self, topic_id: uuid.UUID) -> str | None: ...


class CoordinatorContext(TopicIds, Protocol):
    def partition_count(self, topic: str) -> int:
        """Partitions of `topic` (0: no such topic)."""
        ...

    def topic_names(self) -> list[str]:
        """Every topic (KIP-848 regex subscriptions)."""
        ...

    def partition_leader(self, topic: str, partition: int) -> tuple[int, str, int] | None:
        """(broker id, host, port) of the partition's leader; None while it has none."""
        ...

    def group_config(self, group_id: str) -> Mapping[str, str]:
        """A group's own configs by name (the GROUP config resource: `kafka-configs
        --entity-type groups`); empty when it has none. Read without blocking."""
        ...

    def allocate_producer_ids(self, owner_id: int) -> tuple[int, int]:
        """A block of producer ids: (first id, count). Blocking; called off the loop."""
        ...

    def scram_credentials(self) -> CredentialStore | None:
        """The cluster's SCRAM credentials (a SASL coordinator listener's logins). Read
        without blocking."""
        ...

    def acl_image(self) -> Any:
        """The controller's live metadata image (its `acls` feed the coordinator's
        authorizer); None before the controller started."""
        ...

    async def handle_from_other_loop(self, request: Request) -> Any:
        """Answer a request the coordinator delegates (Metadata, admin APIs)."""
        ...


class CurrentContext:
    """The `CoordinatorContext` of whichever controller hosts the coordinator *now*: every
    call goes to `current()` at call time. The coordinator hands these methods to its cores
    and channels once, at start; a controller restarted under a running coordinator
    (`EmbeddedCluster.restart_controller`) replaces the server's `controller`, and bound
    methods of the old one would keep answering from its stopped image (every topic created
    since then unknown: OffsetCommit answered UNKNOWN_TOPIC_OR_PARTITION)."""

    def __init__(self, current: Callable[[], CoordinatorContext]) -> None:
        self._current = current

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return self._current().topic_id(topic)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._current().topic_name(topic_id)

    def partition_count(self, topic: str) -> int:
        return self._current().partition_count(topic)

    def topic_names(self) -> list[str]:
        return self._current().topic_names()

    def partition_leader(self, topic: str, partition: int) -> tuple[int, str, int] | None:
        return self._current().partition_leader(topic, partition)

    def group_config(self, group_id: str) -> Mapping[str, str]:
        return self._current().group_config(group_id)

    def allocate_producer_ids(self, owner_id: int) -> tuple[int, int]:
        return self._current().allocate_producer_ids(owner_id)

    def scram_credentials(self) -> CredentialStore | None:
        return self._current().scram_credentials()

    def acl_image(self) -> Any:
        return self._current().acl_image()

    async def handle_from_other_loop(self, request: Request) -> Any:
        return await self._current().handle_from_other_loop(request)
