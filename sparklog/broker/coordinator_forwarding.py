"""Group and transaction APIs on a broker: forwarded to the driver's coordinator.

In Kafka every broker hosts some group and transaction coordinators (the leaders of
`__consumer_offsets` and `__transaction_state` partitions), FindCoordinator names one of them,
and clients send it their group and transaction requests. sparklog keeps all of that state in
one coordinator on the driver (DESIGN D8), which is not a broker: it hosts no replica, so
Metadata and DescribeCluster do not list it (clients read that list as replica candidates:
"RF = number of brokers" scripts, `kafka-reassign-partitions --generate`). Instead, as Kafka's
brokers forward admin requests to the controller (KIP-590), a broker forwards group and
transaction requests to the coordinator in Envelopes (`CoordinatorChannel`):

- FindCoordinator (v0-v3 one key, v4+ many) is asked of the coordinator, so its answer says
  whether the coordinator serves (COORDINATOR_NOT_AVAILABLE when it is down or cannot load its
  table, with its reason), and each key found is then pointed at a live broker chosen by a hash
  of the key over the live brokers' ids: stable while membership is, spread over the brokers as
  Kafka spreads keys over `__consumer_offsets` partitions.
- Every other group and transaction request goes to the coordinator whichever broker receives
  it (all state is in one place, so no broker is a wrong one), and its answer comes back as is.
- ListGroups and ListTransactions: Kafka's admin clients ask every broker and concatenate the
  answers (`kafka-consumer-groups --list`); each broker answers the groups and transactions
  whose key hashes to it, so each is listed once.
- When the coordinator cannot be reached, keyed requests are answered NOT_COORDINATOR (clients
  find the coordinator again), lists and FindCoordinator COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import dataclasses
import logging
import zlib
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from sparklog.broker.coordinator_channel import (
    CoordinatorChannel,
    CoordinatorUnreachableError,
    forward_timeout_s,
)
from sparklog.broker.metadata import BrokerMetadata
from sparklog.errors import CoordinatorNotAvailableError, NotCoordinatorError
from sparklog.protocol import envelope
from sparklog.protocol.api_versions import FORWARDED_TO_COORDINATOR_APIS, ApiKey
from sparklog.protocol.connection import Request
from sparklog.protocol.request_metrics import remote_wait
from sparklog.protocol.responses import find_coordinator_response, refusal

logger = logging.getLogger(__name__)


def coordinator_broker(key: str, broker_ids: list[int]) -> int | None:
    """The broker that FindCoordinator names for `key` among the live `broker_ids` (sorted):
    a CRC-32 of the key modulo their number (stable across processes, unlike `hash()`)."""
    if not broker_ids:
        return None
    return broker_ids[zlib.crc32(key.encode()) % len(broker_ids)]


class CoordinatorForwarding:
    """The group and transaction handlers of one broker (`node_id`), forwarding to `channel`."""

    def __init__(self, node_id: int, metadata: BrokerMetadata, channel: CoordinatorChannel) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.channel = channel

    @property
    def handlers(self) -> dict[ApiKey, Any]:
        """A handler for each forwarded API (InitProducerId: KafkaApis decides which)."""
        handlers: dict[ApiKey, Any] = dict.fromkeys(FORWARDED_TO_COORDINATOR_APIS, self.forward)
        handlers[ApiKey.FIND_COORDINATOR] = self.handle_find_coordinator
        handlers[ApiKey.LIST_GROUPS] = self.handle_list_groups
        handlers[ApiKey.LIST_TRANSACTIONS] = self.handle_list_transactions
        del handlers[ApiKey.INIT_PRODUCER_ID]
        return handlers

    def _live_broker_ids(self) -> list[int]:
        return [b.broker_id for b in self.metadata.image.unfenced_brokers()]

    def owns(self, key: str) -> bool:
        """Whether FindCoordinator names this broker for `key` (what it lists)."""
        return coordinator_broker(key, self._live_broker_ids()) == self.node_id

    async def _ask(self, request: Request) -> bytes:
        with remote_wait():  # the coordinator's time is the request's RemoteTimeMs
            return await self.channel.forward(
                request, request.session.client_host, timeout_s=forward_timeout_s(request)
            )

    async def forward(self, request: Request) -> Any:
        """The coordinator's answer to `request`, as it wrote it (NOT_COORDINATOR when it
        cannot be asked)."""
        try:
            data = await self._ask(request)
        except CoordinatorUnreachableError as e:
            logger.debug("%s", e)
            return refusal(request, NotCoordinatorError.code)
        except envelope.EnvelopeError as e:
            return refusal(request, e.code)
        return envelope.inner_body(request, data)

    async def _ask_decoded(self, request: Request) -> Any | None:
        """The coordinator's answer decoded (None: it cannot be asked)."""
        try:
            return envelope.decode_inner(request, await self._ask(request))
        except (CoordinatorUnreachableError, envelope.EnvelopeError) as e:
            logger.debug("%s", e)
            return None

    async def handle_find_coordinator(self, request: Request) -> Any:
        answer = await self._ask_decoded(request)
        if answer is None:
            message = f"the coordinator at {self.channel.endpoint} cannot be reached"
            code = CoordinatorNotAvailableError.code
            return find_coordinator_response(request, "", -1, (code, message))
        if request.api_version >= 4:
            found = tuple(
                self._point_at_broker(c, c.key, request.session.listener_name)
                for c in answer.coordinators
            )
            return dataclasses.replace(answer, coordinators=found)
        return self._point_at_broker(answer, request.body.key, request.session.listener_name)

    def _point_at_broker(self, entry: Any, key: str, listener_name: str) -> Any:
        """`entry` (a FindCoordinator answer or one v4 coordinator) naming the live broker
        chosen for `key`, at its endpoint on the request's listener, instead of the
        coordinator's own listener. A chosen broker without that listener is
        COORDINATOR_NOT_AVAILABLE, as Kafka's `getAliveBrokerNode(id, listenerName)` miss."""
        if int(entry.error_code):
            return entry
        brokers = self.metadata.image.unfenced_brokers()
        chosen = coordinator_broker(key, [b.broker_id for b in brokers])
        broker = next((b for b in brokers if b.broker_id == chosen), None)
        endpoint = None if broker is None else broker.endpoint(listener_name)
        if broker is None or endpoint is None:
            fields: dict[str, Any] = {
                "error_code": ErrorCode(CoordinatorNotAvailableError.code),
                "node_id": i32(-1),
                "host": "",
                "port": i32(-1),
            }
            if hasattr(entry, "error_message"):
                fields["error_message"] = "no live broker to name as coordinator"
            return dataclasses.replace(entry, **fields)
        return dataclasses.replace(
            entry, node_id=i32(broker.broker_id), host=endpoint.host, port=i32(endpoint.port)
        )

    async def handle_list_groups(self, request: Request) -> Any:
        answer = await self._ask_decoded(request)
        if answer is None:
            return refusal(request, CoordinatorNotAvailableError.code)
        mine = tuple(g for g in answer.groups if self.owns(g.group_id))
        return dataclasses.replace(answer, groups=mine)

    async def handle_list_transactions(self, request: Request) -> Any:
        answer = await self._ask_decoded(request)
        if answer is None:
            return refusal(request, CoordinatorNotAvailableError.code)
        mine = tuple(t for t in answer.transaction_states if self.owns(t.transactional_id))
        return dataclasses.replace(answer, transaction_states=mine)

    async def close(self) -> None:
        await self.channel.close()
