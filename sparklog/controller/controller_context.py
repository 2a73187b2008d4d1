"""What the controller's API handlers need from the server that runs them.

`ControllerApis` and the replication handlers are written against this interface, not against
`ControllerServer`, so the server depends on its handlers and never the other way round (as
Kafka's `ControllerApis` takes its collaborators instead of the `ControllerServer`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from sparklog.controller.metadata_log import MetadataLog
from sparklog.controller.quorum_controller import QuorumController
from sparklog.controller.results import ControllerResult
from sparklog.metadata.configs import ControllerConfig

T = TypeVar("T")


class ControllerContext(Protocol):
    """The controller's endpoint, settings, core and metadata log, and how to commit to it."""

    host: str
    port: int
    cluster_id: str
    config: ControllerConfig
    controller: QuorumController | None
    metadata_log: MetadataLog | None
    #: (host, port) of the driver's group coordinator, None when there is none
    coordinator_endpoint: tuple[str, int] | None

    async def commit(self, operation: Callable[[], ControllerResult[T]]) -> T:
        """Run `operation` (a core call) when no other write is in progress, make its records
        durable, apply them, and return its response."""
        ...

    def now_ms(self) -> int:
        """The controller's clock."""
        ...

    async def wait_for_metadata(self, offset: int, timeout_s: float) -> bool:
        """Whether the metadata log reached `offset` within `timeout_s`."""
        ...
