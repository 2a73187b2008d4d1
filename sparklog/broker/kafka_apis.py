"""The broker's request handlers, one per Kafka API (Kafka's `KafkaApis`).

`KafkaApis.handle(request)` dispatches a decoded request to `handle_<api>` and returns the kio
response body (None for Produce with acks=0). Handlers read the request, call the replica
manager or the metadata image, and answer with Kafka's per-partition error codes; the response
for each API version is built once with `kio_build`, fields a version lacks being dropped. Admin
APIs that change the cluster are forwarded to the controller (`admin_apis.AdminApis`).

Request parsing lives in plain functions (`produce_entries`, `fetch_partitions`, ...) so it can
be tested without sockets.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

from sparklog.broker import authz
from sparklog.broker.admin_apis import AdminApis
from sparklog.broker.config import BrokerConfig
from sparklog.broker.controller_client import ProducerIdManager
from sparklog.broker.coordinator_channel import CoordinatorChannel
from sparklog.broker.coordinator_forwarding import CoordinatorForwarding
from sparklog.broker.delayed_produce import ProduceResult
from sparklog.broker.fetch_params import FetchParams, FetchResult
from sparklog.broker.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchManager,
    FetchSessionCache,
)
from sparklog.broker.group_apis import handle_not_coordinator
from sparklog.broker.log_dirs import describe_log_dirs
from sparklog.broker.metadata import BrokerMetadata
from sparklog.broker.produce_response import encode_produce_body, produce_response_data
from sparklog.broker.replica_base import error_code_of
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.broker.request_parsing import (
    fetch_params,
    fetch_partition_data,
    fetch_partitions_steps,
    forgotten_partitions,
    partitions_of,
    produce_entries,
)
from sparklog.broker.security_apis import security_handlers
from sparklog.broker.txn_apis import handle_describe_producers, handle_write_txn_markers
from sparklog.broker.txn_recovery import OrphanTransactionAborter
from sparklog.broker.txn_verification import (
    PRODUCE_ABORTABLE_VERSION,
    PRODUCE_TV2_VERSION,
    TransactionVerifier,
)
from sparklog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidRequestError,
    KafkaError,
    LeaderNotAvailableError,
    ListenerNotFoundError,
    MismatchedEndpointTypeError,
    NotCoordinatorError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    UnsupportedEndpointTypeError,
    UnsupportedVersionError,
)
from sparklog.metadata.image import SUPPORTED_FEATURES
from sparklog.protocol import cooperative, kio_build
from sparklog.protocol.api_versions import (
    BROKER_ADVERTISED_APIS,
    BROKER_SERVED_APIS,
    FORWARDED_TO_COORDINATOR_APIS,
    ApiKey,
)
from sparklog.protocol.async_client import FeatureLevels, api_versions_response
from sparklog.protocol.connection import ProtocolError, Request
from sparklog.protocol.file_response import FileResponse, placeholder
from sparklog.protocol.outbound import PLAINTEXT, server_client_security
from sparklog.protocol.pipeline import authorized_operations, throttle_time_ms
from sparklog.protocol.responses import (
    TRANSACTION_STATE_NAMES,
    find_coordinator_response,
    group_by_topic,
)
from sparklog.records.file_records import FileRecords
from sparklog.security.acl import AclOperation, ResourceType
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)

#: DescribeCluster's endpoint types (KIP-919: DescribeClusterRequest.endpoint_type).
_BROKER_ENDPOINT, _CONTROLLER_ENDPOINT = 1, 2


#: Kafka's switch for produce-time transaction verification (KIP-890), on by default.
TXN_VERIFICATION = "transaction.partition.verification.enable"
#: sparklog's broker setting: answer Fetch with sendfile from the segment files (Kafka always does
#: on plaintext listeners; "false" copies the bytes through Python instead).
ZERO_COPY_FETCH = "sparklog.fetch.zero.copy"
#: Broker setting the launchers set: host:port of the driver's group coordinator.
GROUP_COORDINATOR_ENDPOINT = "sparklog.group.coordinator.endpoint"


# -- handlers ---------------------------------------------------------------------------------


class KafkaApis:
    """Handlers for every API in `BROKER_SERVED_APIS`."""

    def __init__(
        self,
        *,
        node_id: int,
        config: BrokerConfig,
        metadata: BrokerMetadata,
        replica_manager: ReplicaManager,
        admin: AdminApis,
        producer_ids: ProducerIdManager,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.admin = admin
        self.producer_ids = producer_ids
        #: large fetched ranges go from the segment files to the socket with sendfile
        self.zero_copy_fetch = config.sparklog_fetch_zero_copy
        self.zero_copy_fetch_bytes = 0  # handed to sendfile, for tests and benchmarks
        self.incremental_fetches = 0  # served on a KIP-227 session, for tests and benchmarks
        self.fetch_manager = FetchManager(
            FetchSessionCache(
                config.max_incremental_fetch_session_cache_slots,
                config.min_incremental_fetch_session_eviction_ms,
            )
        )
        #: KIP-890 produce-time verification, when there is a coordinator to ask
        self.txn_verifier: TransactionVerifier | None = None
        #: aborts open transactions a restarted coordinator forgot (its TV2 adds are in memory)
        self.txn_recovery: OrphanTransactionAborter | None = None
        endpoint = config.sparklog_group_coordinator_endpoint
        # the coordinator serves a listener named and secured like the inter-broker one
        inter_broker = server_client_security(config.listener_config) if endpoint else PLAINTEXT
        if endpoint and config.transaction_partition_verification_enable:
            self.txn_verifier = TransactionVerifier(
                str(endpoint), replica_manager, security=inter_broker
            )
            self.txn_recovery = OrphanTransactionAborter(
                self.txn_verifier, replica_manager, replica_manager.now_ms
            )
        #: group and transaction requests go on to the driver's coordinator (KIP-590 Envelopes)
        self.forwarding: CoordinatorForwarding | None = None
        if endpoint:
            channel = CoordinatorChannel(str(endpoint), security=inter_broker)
            self.forwarding = CoordinatorForwarding(node_id, metadata, channel)
        self._handlers = {
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.DELETE_RECORDS: self.handle_delete_records,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
            **self._coordinator_handlers(),
            ApiKey.DESCRIBE_CONFIGS: admin.handle_describe_configs,
            ApiKey.DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs,
            ApiKey.WRITE_TXN_MARKERS: lambda r: handle_write_txn_markers(
                r, replica_manager, replica_manager.now_ms
            ),
            ApiKey.DESCRIBE_PRODUCERS: self.handle_describe_producers,
            ApiKey.CREATE_TOPICS: admin.handle_forwarded,
            ApiKey.DELETE_TOPICS: admin.handle_forwarded,
            ApiKey.CREATE_PARTITIONS: admin.handle_forwarded,
            ApiKey.ALTER_CONFIGS: admin.handle_forwarded,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: admin.handle_forwarded,
            ApiKey.ELECT_LEADERS: admin.handle_forwarded,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: admin.handle_forwarded,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: admin.handle_forwarded,
            ApiKey.DESCRIBE_QUORUM: admin.handle_forwarded,
            ApiKey.UPDATE_FEATURES: admin.handle_forwarded,
            **security_handlers(admin, metadata),
        }
        assert set(self._handlers) == set(BROKER_SERVED_APIS), "every API served has a handler"

    def _coordinator_handlers(self) -> dict[ApiKey, Any]:
        """Group and transaction APIs: forwarded to the driver's coordinator; without one (a
        broker run alone) refused as a Kafka broker refuses what it does not coordinate."""
        if self.forwarding is not None:
            return self.forwarding.handlers
        handlers = dict.fromkeys(FORWARDED_TO_COORDINATOR_APIS, handle_not_coordinator)
        handlers[ApiKey.FIND_COORDINATOR] = self.handle_find_coordinator
        handlers[ApiKey.LIST_GROUPS] = self.handle_list_groups
        handlers[ApiKey.LIST_TRANSACTIONS] = self.handle_list_transactions
        del handlers[ApiKey.INIT_PRODUCER_ID]
        return handlers

    async def handle(self, request: Request) -> Any | None:
        """The response body for `request` (None: no response, Produce acks=0)."""
        handler = self._handlers.get(ApiKey(request.api_key))
        if handler is None:  # KafkaServer only passes announced APIs
            raise ProtocolError(f"no handler for api {request.api_key}")
        return await handler(request)

    async def handle_api_versions(self, request: Request) -> Any:
        if request.body is None:  # a version we do not know: v0 answer listing ours (Kafka)
            return api_versions_response(BROKER_ADVERTISED_APIS, 0, UnsupportedVersionError.code)
        image = self.metadata.image
        return api_versions_response(
            BROKER_ADVERTISED_APIS,
            request.api_version,
            throttle_time_ms=throttle_time_ms(request),
            features=FeatureLevels(SUPPORTED_FEATURES, image.finalized_features, image.offset - 1),
        )

    # -- produce ------------------------------------------------------------------------------

    async def handle_produce(self, request: Request) -> Any | None:
        body = request.body
        acks = int(body.acks)
        entries = produce_entries(body)
        denied = authz.produce_denials(request, entries)
        if denied:
            entries = {tp: r for tp, r in entries.items() if tp not in denied}
        refused: dict[TopicPartition, int] = {}
        if self.txn_verifier is not None and entries:
            version = request.api_version
            refused = await self.txn_verifier.verify(
                body.transactional_id,
                entries,
                # KIP-890 part 2: a v12 produce adds its partitions when TV2 is finalized
                add=version >= PRODUCE_TV2_VERSION and self.metadata.image.transaction_version >= 2,
                abortable=version >= PRODUCE_ABORTABLE_VERSION,
            )
        results = await self.replica_manager.append_records(
            acks,
            kio_build.millis(body.timeout),
            {tp: r for tp, r in entries.items() if tp not in refused},
        )
        for tp, code in refused.items():
            results[tp] = ProduceResult(
                code,
                error_message=f"{tp[0]}-{tp[1]} is not part of the producer's ongoing "
                "transaction (AddPartitionsToTxn first)",
            )
        for tp, code in denied.items():
            results[tp] = ProduceResult(code, error_message="not authorized")
        if acks == 0:
            failed = [
                f"{t}-{p}: {r.error_message}" for (t, p), r in results.items() if r.error_code
            ]
            if failed:  # Kafka closes the connection so an acks=0 client notices
                raise ProtocolError(f"acks=0 produce failed ({'; '.join(failed)})")
            return None
        encoded = encode_produce_body(
            request.api_version, results.items(), throttle_time_ms=throttle_time_ms(request)
        )
        if encoded is not None:
            return encoded
        data, leaders = produce_response_data(results.items(), self.replica_manager.leader_of)
        data["node_endpoints"] = [
            b for b in self._alive_brokers(request.session.listener_name) if b["node_id"] in leaders
        ]
        return kio_build.response(request, data)

    # -- fetch --------------------------------------------------------------------------------

    async def handle_fetch(self, request: Request) -> Any:
        body = request.body
        params = fetch_params(body, zero_copy=self.zero_copy_fetch)
        cap = request.context.fetch_max_bytes_cap  # the client's fetch quota window (KIP-13)
        if cap is not None and cap < params.max_bytes:
            params = dataclasses.replace(params, max_bytes=max(1, cap))
        partitions = [p async for p in cooperative.each(fetch_partitions_steps(body))]
        context = self.fetch_manager.new_context(
            int(getattr(body, "session_id", INVALID_SESSION_ID)),
            int(getattr(body, "session_epoch", FINAL_EPOCH)),
            partitions,
            forgotten_partitions(body),
            from_follower=params.is_from_follower,
            now_ms=self.replica_manager.now_ms(),
        )
        if context.kind == "incremental":
            self.incremental_fetches += 1
        results: list[FetchResult | None] = []
        denied = authz.fetch_denials(request, params.is_from_follower, context.partitions)
        if denied:
            results = await self._fetch_authorized(params, context, denied)
        elif context.partitions:
            results = await self.replica_manager.fetch_messages(
                params, context.partitions, context.unchanged
            )
        error_code, session_id, answered = context.respond(results)
        if len(answered) < len(results):  # an incremental response leaves some out
            kept = {id(r) for _p, r in answered}
            for r in results:
                if r is not None and isinstance(r.records, FileRecords) and id(r) not in kept:
                    r.records.close()
        items = []
        file_records: dict[bytes, FileRecords] = {}
        topic_stats = self.replica_manager.topic_stats
        async for p, r in cooperative.each(answered):
            if r is not None and r.records:  # Kafka's updateBytesOut, as the response is built
                topic_stats.bytes_out(p.topic, len(r.records), params.is_from_follower)
            data = fetch_partition_data(p, r, params.isolation_level)
            if isinstance(data["records"], FileRecords):
                key = placeholder(len(file_records))
                file_records[key] = data["records"]
                self.zero_copy_fetch_bytes += len(data["records"])
                data["records"] = key
            items.append((p.topic, data))
        response = await kio_build.response_cooperatively(
            request,
            {
                "error_code": error_code,
                "session_id": session_id,
                "responses": group_by_topic(items, "topic"),
            },
        )
        return FileResponse(response, file_records) if file_records else response

    async def _fetch_authorized(
        self, params: FetchParams, context: Any, denied: set[TopicPartition]
    ) -> list[FetchResult | None]:
        """Read the partitions not in `denied`; the denied ones answer
        TOPIC_AUTHORIZATION_FAILED, in the order of `context.partitions`."""
        allowed = [p for p in context.partitions if (p.topic, p.partition) not in denied]
        read = iter(
            await self.replica_manager.fetch_messages(params, allowed, context.unchanged)
            if allowed
            else ()
        )
        refused = FetchResult(authz.TOPIC_DENIED)
        return [
            refused if (p.topic, p.partition) in denied else next(read) for p in context.partitions
        ]

    # -- offsets ------------------------------------------------------------------------------

    async def handle_list_offsets(self, request: Request) -> Any:
        body = request.body
        isolation_level = int(getattr(body, "isolation_level", 0))
        replica_id = int(getattr(body, "replica_id", -1))
        seen: set[TopicPartition] = set()
        items = []
        denied = authz.denied_topics(request, AclOperation.DESCRIBE, (t.name for t in body.topics))
        async for topic, p in cooperative.each(partitions_of(body.topics)):
            tp = TopicPartition(topic.name, int(p.partition_index))
            data: dict[str, Any] = {"partition_index": tp[1]}
            try:
                if tp[0] in denied:
                    raise TopicAuthorizationFailedError(f"not authorized to describe {tp[0]}")
                if tp in seen:
                    raise InvalidRequestError(f"{tp[0]}-{tp[1]} appears twice")
                seen.add(tp)
                rm = self.replica_manager
                list_offset = (
                    rm.list_offset_with_tier
                    if rm.lists_with_tier(*tp, int(p.timestamp))
                    else rm.list_offset
                )  # a lookup in a remote tier goes to the remote reader's threads
                found = list_offset(
                    *tp,
                    int(p.timestamp),
                    isolation_level=isolation_level,
                    current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
                    replica_id=replica_id,
                )
                offset, timestamp, epoch = found if isinstance(found, tuple) else await found
                data.update(error_code=0, offset=offset, timestamp=timestamp, leader_epoch=epoch)
            except Exception as e:  # noqa: BLE001 - a per-partition error code
                data["error_code"] = error_code_of(e, f"ListOffsets {tp}")[0]
            items.append((topic.name, data))
        return await kio_build.response_cooperatively(
            request, {"topics": group_by_topic(items, "name")}
        )

    async def handle_offset_for_leader_epoch(self, request: Request) -> Any:
        items = []
        topics = request.body.topics
        denied = authz.offset_for_leader_epoch_denials(request, (t.topic for t in topics))
        async for topic, p in cooperative.each(partitions_of(topics)):
            data: dict[str, Any] = {"partition": int(p.partition)}
            try:
                if topic.topic in denied:
                    raise TopicAuthorizationFailedError(f"not authorized on {topic.topic}")
                epoch, end_offset = self.replica_manager.end_offset_for_epoch(
                    topic.topic,
                    int(p.partition),
                    int(p.leader_epoch),
                    int(getattr(p, "current_leader_epoch", -1)),
                )
                data.update(error_code=0, leader_epoch=epoch, end_offset=end_offset)
            except Exception as e:  # noqa: BLE001
                data["error_code"] = error_code_of(e, f"OffsetForLeaderEpoch {topic.topic}")[0]
            items.append((topic.topic, data))
        return await kio_build.response_cooperatively(
            request, {"topics": group_by_topic(items, "topic")}
        )

    async def handle_delete_records(self, request: Request) -> Any:
        items = []
        topics = request.body.topics
        denied = authz.denied_topics(request, AclOperation.DELETE, (t.name for t in topics))
        async for topic, p in cooperative.each(partitions_of(topics)):
            data: dict[str, Any] = {"partition_index": int(p.partition_index), "low_watermark": -1}
            try:
                if topic.name in denied:
                    raise TopicAuthorizationFailedError(f"not authorized to delete {topic.name}")
                low = self.replica_manager.delete_records(
                    topic.name, int(p.partition_index), int(p.offset)
                )
                data.update(error_code=0, low_watermark=low)
            except Exception as e:  # noqa: BLE001
                data["error_code"] = error_code_of(e, f"DeleteRecords {topic.name}")[0]
            items.append((topic.name, data))
        return await kio_build.response_cooperatively(
            request, {"topics": group_by_topic(items, "name")}
        )

    # -- coordinators -------------------------------------------------------------------------

    async def handle_find_coordinator(self, request: Request) -> Any:
        """FindCoordinator on a broker without a coordinator (run alone; with one, see
        `CoordinatorForwarding`): COORDINATOR_NOT_AVAILABLE (retriable), as a Kafka cluster
        answers while its coordinators load. Served all the same because librdkafka turns on
        lz4 only for brokers that list it."""
        key_type = int(getattr(request.body, "key_type", 0))
        what = "transactions" if key_type == 1 else "consumer groups"
        message = f"sparklog does not serve {what} on this cluster (no coordinator configured)"
        return find_coordinator_response(
            request, "", -1, (CoordinatorNotAvailableError.code, message)
        )

    async def handle_list_transactions(self, request: Request) -> Any:
        """No coordinator, no transactions (with one: `CoordinatorForwarding`)."""
        wanted = set(request.body.state_filters or ())
        unknown = sorted(wanted - TRANSACTION_STATE_NAMES)
        return kio_build.response(
            request,
            {
                "error_code": 0,
                "unknown_state_filters": unknown,
                "transaction_states": [],
            },
        )

    async def handle_describe_producers(self, request: Request) -> Any:
        return handle_describe_producers(request, self.replica_manager)

    async def handle_list_groups(self, request: Request) -> Any:
        """No coordinator, no groups (with one: `CoordinatorForwarding`)."""
        return kio_build.response(request, {"error_code": 0, "groups": []})

    # -- producer ids -------------------------------------------------------------------------

    async def handle_init_producer_id(self, request: Request) -> Any:
        body = request.body
        answer: dict[str, Any] = {"producer_id": -1, "producer_epoch": -1}
        if body.transactional_id is not None:  # the transaction coordinator's (on the driver)
            if self.forwarding is not None:
                return await self.forwarding.forward(request)
            answer["error_code"] = NotCoordinatorError.code
            return kio_build.response(request, answer)
        if not authz.idempotent_write_allowed(request):
            answer["error_code"] = authz.CLUSTER_DENIED
            return kio_build.response(request, answer)
        try:
            answer.update(
                error_code=0, producer_id=await self.producer_ids.next_id(), producer_epoch=0
            )
        except (KafkaError, ConnectionError, OSError, TimeoutError) as e:
            logger.warning("no producer id for InitProducerId: %s", e)
            answer["error_code"] = CoordinatorLoadInProgressError.code  # retriable, as Kafka
        return kio_build.response(request, answer)

    # -- metadata -----------------------------------------------------------------------------

    def _alive_brokers(self, listener_name: str) -> list[dict[str, Any]]:
        """Live brokers at their `listener_name` endpoints; a broker without one is left out
        (Kafka's `MetadataCache.getAliveBrokerNodes(listenerName)`)."""
        return [
            {"node_id": b.broker_id, "host": e.host, "port": e.port, "rack": b.rack}
            for b in self.metadata.image.unfenced_brokers()
            if (e := b.endpoint(listener_name)) is not None
        ]

    def _controller_id_for_clients(self) -> int:
        """Kafka (KRaft) tells clients a live broker id; brokers forward controller requests."""
        alive = [b.broker_id for b in self.metadata.image.unfenced_brokers()]
        if self.node_id in alive or not alive:
            return self.node_id
        return alive[0]

    async def handle_metadata(self, request: Request) -> Any:
        body = request.body
        image = self.metadata.image
        denied: set[str] = set()
        denied_ids: dict[str, Any] = {}
        if body.topics is None:
            names = authz.visible_topics(request, image.topic_names())
        else:
            names = [t.name for t in body.topics if t.name is not None]
            by_id = self._names_for_ids(t.topic_id for t in body.topics if t.name is None)
            names += by_id
            denied = authz.denied_topics(request, AclOperation.DESCRIBE, names)
            denied_ids = {n: image.topic(n) for n in by_id if n in denied}
        allow_create = bool(getattr(body, "allow_auto_topic_creation", True))
        missing = [n for n in names if image.topic(n) is None and n not in denied]
        create_errors: dict[str, int] = {}
        if missing and allow_create and self.config.auto_create_topics_enable:
            refused = authz.create_denied(request, missing)
            create_errors = dict.fromkeys(refused, authz.TOPIC_DENIED)
            if len(refused) < len(missing):
                create_errors |= await self.admin.auto_create_topics(
                    [n for n in missing if n not in refused]
                )
        listener = request.session.listener_name
        # Kafka's `errorUnavailableListeners`: from v6 a live leader without the request's
        # listener is LISTENER_NOT_FOUND, before it LEADER_NOT_AVAILABLE
        no_listener = (
            ListenerNotFoundError if request.api_version >= 6 else LeaderNotAvailableError
        ).code
        topics = [
            authz.denied_topic_metadata(name, denied_ids.get(name))
            if name in denied
            else self._topic_metadata(name, create_errors, listener, no_listener)
            async for name in cooperative.each(dict.fromkeys(names))
        ]
        for topic in topics:
            if topic["error_code"] != authz.TOPIC_DENIED:
                topic["topic_authorized_operations"] = authorized_operations(
                    request, ResourceType.TOPIC, topic["name"]
                )
        return await kio_build.response_cooperatively(
            request,
            {
                "brokers": self._alive_brokers(listener),
                "cluster_id": self.metadata.cluster_id,
                "controller_id": self._controller_id_for_clients(),
                "topics": topics,
                "cluster_authorized_operations": authz.cluster_operations(request),  # v8-v10
            },
        )

    def _names_for_ids(self, topic_ids: Iterable[Any]) -> list[str]:
        names = []
        for topic_id in topic_ids:
            topic = self.metadata.image.topic_by_id(topic_id) if topic_id is not None else None
            if topic is not None:
                names.append(topic.name)
        return names

    def _topic_metadata(
        self, name: str, create_errors: dict[str, int], listener: str, no_listener_code: int
    ) -> dict[str, Any]:
        image = self.metadata.image
        topic = image.topic(name)
        if topic is None:
            code = create_errors.get(name, UnknownTopicOrPartitionError.code)
            return {"error_code": code, "name": name, "topic_id": None, "partitions": []}
        partitions = []
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            leader = image.broker(p.leader) if image.is_unfenced(p.leader) else None
            code = LeaderNotAvailableError.code if leader is None else 0
            if leader is not None and leader.endpoint(listener) is None:
                leader, code = None, no_listener_code
            partitions.append(
                {
                    "error_code": code,
                    "partition_index": index,
                    "leader_id": p.leader if leader is not None else -1,
                    "leader_epoch": p.leader_epoch,
                    "replica_nodes": list(p.replicas),
                    "isr_nodes": list(p.isr),
                    "offline_replicas": [b for b in p.replicas if not image.is_unfenced(b)],
                }
            )
        return {
            "error_code": 0,
            "name": name,
            "topic_id": topic.topic_id,
            "is_internal": False,
            "partitions": partitions,
        }

    async def handle_describe_log_dirs(self, request: Request) -> Any:
        if not authz.cluster_allowed(request, AclOperation.DESCRIBE):
            return kio_build.response(request, {"error_code": authz.CLUSTER_DENIED, "results": []})
        results = describe_log_dirs(self.replica_manager.log_manager, request.body.topics)
        return kio_build.response(request, {"error_code": 0, "results": results})

    async def handle_describe_cluster(self, request: Request) -> Any:
        endpoint_type = int(getattr(request.body, "endpoint_type", _BROKER_ENDPOINT))
        answer: dict[str, Any] = {
            "error_code": 0,
            "endpoint_type": endpoint_type,
            "cluster_id": self.metadata.cluster_id or "",
            "controller_id": self._controller_id_for_clients(),
            "brokers": [
                {"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                for b in self._alive_brokers(request.session.listener_name)
            ],
            "cluster_authorized_operations": authz.cluster_operations(request),
        }
        if endpoint_type != _BROKER_ENDPOINT:
            # Kafka's KafkaApis.handleDescribeCluster (KIP-919): a broker asked for controller
            # endpoints answers MISMATCHED_ENDPOINT_TYPE, any other type UNSUPPORTED_ENDPOINT_TYPE,
            # both with the response's default endpoint type (brokers) and no brokers.
            error: type[KafkaError]
            if endpoint_type == _CONTROLLER_ENDPOINT:
                error = MismatchedEndpointTypeError
                message = "this is a broker endpoint: ask a controller for controller endpoints"
            else:
                error = UnsupportedEndpointTypeError
                message = f"unsupported endpoint type {endpoint_type}"
            answer.update(
                error_code=error.code,
                error_message=message,
                endpoint_type=_BROKER_ENDPOINT,
                brokers=[],
            )
        return kio_build.response(request, answer)
