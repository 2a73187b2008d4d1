"""The controller's Kafka-protocol handlers (Kafka's `ControllerApis`): kio request in, core
call, records committed, kio response out — one handler per API.

Responses are built for the request's version (`responses.Response` drops the fields that
version does not have), so one handler serves every version in `CONTROLLER_APIS`.
Per-resource errors carry Kafka's codes and messages; a bad request never stops the server.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from sparklog.controller import admin_apis, authz, quota_apis, replication_apis, security_apis
from sparklog.controller.api_responses import missing_topic
from sparklog.controller.cluster_control import (
    BrokerHeartbeat,
    BrokerRegistrationRequest,
    InconsistentClusterIdError,
    parse_broker_client_id,
    registered_endpoints,
)
from sparklog.controller.controller_context import ControllerContext
from sparklog.controller.feature_apis import handle_update_features
from sparklog.controller.metadata_log import MetadataLog
from sparklog.controller.quorum_apis import QuorumObservers, describe_quorum_response
from sparklog.controller.quorum_controller import QuorumController
from sparklog.controller.quota_enforcement import ControllerQuotas
from sparklog.controller.replication_control import NewTopic, validate_topic_name
from sparklog.errors import (
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    LeaderNotAvailableError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    UnsupportedEndpointTypeError,
    UnsupportedVersionError,
)
from sparklog.metadata.image import SUPPORTED_FEATURES, MetadataImage, TopicImage
from sparklog.metadata.mutation_admission import with_throttle
from sparklog.protocol.api_versions import CONTROLLER_APIS, ApiKey
from sparklog.protocol.async_client import FeatureLevels, api_versions_response
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import throttle_time_ms
from sparklog.protocol.responses import Response, to_ms
from sparklog.security.acl import CLUSTER_NAME, ResourceType
from sparklog.structs import (
    CONTROLLER_NODE_ID,
    METADATA_PARTITION,
    METADATA_TOPIC,
    NO_LEADER,
)

logger = logging.getLogger(__name__)

_MAX_FETCH_WAIT_MS = 60_000
_BROKERS_ENDPOINT, _CONTROLLERS_ENDPOINT = 1, 2


class ControllerApis:
    """Dispatches requests to handlers; `server` persists records and owns the core."""

    def __init__(self, server: ControllerContext) -> None:
        self.server = server
        #: the mutation quota of direct clients, the shares of cluster-wide quotas
        self.quotas = ControllerQuotas(server, lambda: self.image)
        #: the brokers' metadata progress from their heartbeats (DescribeQuorum's observers)
        self.quorum_observers = QuorumObservers()
        self._handlers: dict[int, Callable[[Request], Any]] = {
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.CREATE_TOPICS: self._with_server(admin_apis.handle_create_topics),
            ApiKey.DELETE_TOPICS: self._with_server(admin_apis.handle_delete_topics),
            ApiKey.CREATE_PARTITIONS: self._with_server(admin_apis.handle_create_partitions),
            ApiKey.DESCRIBE_CONFIGS: self._with_server(admin_apis.handle_describe_configs),
            ApiKey.ALTER_CONFIGS: self._with_server(admin_apis.handle_alter_configs),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._with_server(
                admin_apis.handle_incremental_alter_configs
            ),
            ApiKey.ALTER_PARTITION: self._with_server(replication_apis.handle_alter_partition),
            ApiKey.ELECT_LEADERS: self._with_server(replication_apis.handle_elect_leaders),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self._with_server(
                replication_apis.handle_alter_partition_reassignments
            ),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self._with_server(
                replication_apis.handle_list_partition_reassignments
            ),
            ApiKey.BROKER_REGISTRATION: self.handle_broker_registration,
            ApiKey.BROKER_HEARTBEAT: self.handle_broker_heartbeat,
            ApiKey.UNREGISTER_BROKER: self.handle_unregister_broker,
            ApiKey.ALLOCATE_PRODUCER_IDS: self.handle_allocate_producer_ids,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
            ApiKey.SPARKLOG_QUOTA_USAGE: self.quotas.handle_quota_usage,
            ApiKey.ENVELOPE: lambda request: self.quotas.handle_envelope(request, self.handle),
            ApiKey.CREATE_ACLS: self._with_server(security_apis.handle_create_acls),
            ApiKey.DELETE_ACLS: self._with_server(security_apis.handle_delete_acls),
            ApiKey.DESCRIBE_ACLS: self._with_server(security_apis.handle_describe_acls),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._with_server(
                security_apis.handle_alter_user_scram_credentials
            ),
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self._with_server(
                security_apis.handle_describe_user_scram_credentials
            ),
            ApiKey.ALTER_CLIENT_QUOTAS: self._with_server(quota_apis.handle_alter_client_quotas),
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self._with_server(
                quota_apis.handle_describe_client_quotas
            ),
            ApiKey.DESCRIBE_QUORUM: lambda request: describe_quorum_response(
                self.server, self.quorum_observers, request
            ),
            ApiKey.UPDATE_FEATURES: self._with_server(handle_update_features),
        }

    def _with_server(self, handler: Callable[[Any, Request], Any]) -> Callable[[Request], Any]:
        return lambda request: handler(self.server, request)

    async def handle(self, request: Request) -> Any:
        handler = self._handlers.get(request.api_key)
        assert handler is not None, (
            f"CONTROLLER_APIS announces api {request.api_key} without a handler"
        )
        served, refused = authz.check(request)  # ACLs (controller/authz.py)
        throttle_ms = 0
        if served is not None:  # the controller mutation quota (KIP-599)
            served, refused, throttle_ms = self.quotas.admit_mutations(
                request, served, lambda a, b: authz.merge(request, a, b), refused
            )
        if served is None:
            return with_throttle(refused, throttle_ms)
        response = handler(served)
        if inspect.isawaitable(response):
            response = await response
        if request.api_key == ApiKey.METADATA:
            return authz.filter_metadata(request, response)
        if refused is not None:
            response = authz.merge(request, response, refused)
        return with_throttle(response, throttle_ms)

    @property
    def controller(self) -> QuorumController:
        controller = self.server.controller
        assert controller is not None  # requests are served once the server started
        return controller

    @property
    def metadata_log(self) -> MetadataLog:
        metadata_log = self.server.metadata_log
        assert metadata_log is not None  # requests are served once the server started
        return metadata_log

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    # -- cluster membership -----------------------------------------------------------------

    def handle_api_versions(self, request: Request) -> Any:
        if request.body is None:  # a version we do not speak: answer v0 with our table
            return api_versions_response(CONTROLLER_APIS, 0, UnsupportedVersionError.code)
        image = self.image
        return api_versions_response(
            CONTROLLER_APIS,
            request.api_version,
            throttle_time_ms=throttle_time_ms(request),
            features=FeatureLevels(SUPPORTED_FEATURES, image.finalized_features, image.offset - 1),
        )

    async def handle_broker_registration(self, request: Request) -> Any:
        body, respond = request.body, Response(request)
        listeners = list(body.listeners)
        try:
            if not listeners or body.incarnation_id is None:
                raise InvalidRequestError(
                    "BrokerRegistration needs a listener and an incarnation id"
                )
            endpoints = registered_endpoints(listeners)
            core_request = BrokerRegistrationRequest(
                broker_id=body.broker_id,
                cluster_id=body.cluster_id,
                incarnation_id=str(body.incarnation_id),
                host=listeners[0].host,
                port=listeners[0].port,
                rack=body.rack,
                endpoints=endpoints,
                facts=parse_broker_client_id(request.client_id),
                # v3+ (KIP-966); older brokers cannot say, which counts as an unclean shutdown
                previous_broker_epoch=body.previous_broker_epoch
                if request.api_version >= 3
                else -1,
            )
            broker_epoch = await self.server.commit(
                lambda: self.controller.register_broker(self.server.now_ms(), core_request)
            )
        except KafkaError as e:
            logger.warning("refused registration of broker %d: %s", body.broker_id, e)
            return respond(error_code=e.code, broker_epoch=-1)
        logger.info("registered broker %d at epoch %d", body.broker_id, broker_epoch)
        return respond(error_code=0, broker_epoch=broker_epoch)

    async def handle_broker_heartbeat(self, request: Request) -> Any:
        body = request.body
        heartbeat = BrokerHeartbeat(
            broker_id=body.broker_id,
            broker_epoch=body.broker_epoch,
            current_metadata_offset=body.current_metadata_offset,
            want_fence=body.want_fence,
            want_shut_down=body.want_shut_down,
        )
        reply = await self.server.commit(
            lambda: self.controller.heartbeat(self.server.now_ms(), heartbeat)
        )
        if reply.error_code:
            logger.info("heartbeat of broker %d refused: %s", body.broker_id, reply.error_message)
        else:
            self.quorum_observers.on_heartbeat(
                body.broker_id, body.current_metadata_offset, self.metadata_log.end_offset
            )
        return Response(request)(
            error_code=reply.error_code,
            is_caught_up=reply.is_caught_up,
            is_fenced=reply.is_fenced,
            should_shut_down=reply.should_shut_down,
        )

    async def handle_unregister_broker(self, request: Request) -> Any:
        respond = Response(request)
        try:
            await self.server.commit(
                lambda: self.controller.unregister_broker(request.body.broker_id)
            )
        except KafkaError as e:
            return respond(error_code=e.code, error_message=str(e))
        return respond(error_code=0, error_message=None)

    async def handle_allocate_producer_ids(self, request: Request) -> Any:
        body, respond = request.body, Response(request)
        try:
            block = await self.server.commit(
                lambda: self.controller.allocate_producer_ids(body.broker_id, body.broker_epoch)
            )
        except KafkaError as e:
            return respond(error_code=e.code, producer_id_start=-1, producer_id_len=0)
        return respond(
            error_code=0,
            producer_id_start=block.producer_id_start,
            producer_id_len=block.producer_id_len,
        )

    def handle_describe_cluster(self, request: Request) -> Any:
        respond = Response(request)
        endpoint_type = getattr(request.body, "endpoint_type", _BROKERS_ENDPOINT)
        nodes: list[tuple[int, str, int, str | None]]
        if endpoint_type == _CONTROLLERS_ENDPOINT:
            nodes = [(CONTROLLER_NODE_ID, self.server.host, self.server.port, None)]
            controller_id = CONTROLLER_NODE_ID
        elif endpoint_type == _BROKERS_ENDPOINT:
            nodes = [(b.broker_id, b.host, b.port, b.rack) for b in self.image.unfenced_brokers()]
            controller_id = self._controller_id()
        else:  # Kafka's AuthHelper.computeDescribeClusterResponse: UNSUPPORTED_ENDPOINT_TYPE
            return respond(
                error_code=UnsupportedEndpointTypeError.code,
                error_message=f"Unsupported endpoint type {endpoint_type}",
                cluster_id=self.server.cluster_id,
                brokers=(),
            )
        brokers = tuple(
            respond.nested("DescribeClusterBroker", broker_id=i, host=h, port=p, rack=r)
            for i, h, p, r in nodes
        )
        return respond(
            error_code=0,
            error_message=None,
            endpoint_type=endpoint_type,
            cluster_id=self.server.cluster_id,
            controller_id=controller_id,
            brokers=brokers,
            cluster_authorized_operations=respond.authorized_operations(
                ResourceType.CLUSTER, CLUSTER_NAME
            ),
        )

    def _client_nodes(self) -> list[tuple[int, str, int, str | None]]:
        """The nodes clients see: live brokers only (the group coordinator is reached through
        them, so it is not listed as a node that could host replicas)."""
        return [(b.broker_id, b.host, b.port, b.rack) for b in self.image.unfenced_brokers()]

    def _controller_id(self) -> int:
        """What clients see as the controller: a live broker, which forwards admin requests
        here (Kafka's KRaft brokers answer the same way)."""
        brokers = self.image.unfenced_brokers()
        return brokers[0].broker_id if brokers else NO_LEADER

    # -- the metadata log -------------------------------------------------------------------

    async def handle_fetch(self, request: Request) -> Any:
        body, respond = request.body, Response(request)
        cluster_id = getattr(body, "cluster_id", None)
        if cluster_id is not None and cluster_id != self.server.cluster_id:
            error = InconsistentClusterIdError.code
            return respond(error_code=error, session_id=0, responses=())
        wanted = self._metadata_fetch_offset(body)
        max_wait_ms = min(to_ms(body.max_wait), _MAX_FETCH_WAIT_MS)
        if wanted == self.metadata_log.end_offset and max_wait_ms > 0:
            await self.server.wait_for_metadata(wanted, max_wait_ms / 1000)
        responses = tuple(
            respond.nested(
                "FetchableTopicResponse",
                topic=topic.topic,
                partitions=tuple(
                    self._fetch_partition(respond, topic.topic, p, body.max_bytes)
                    for p in topic.partitions
                ),
            )
            for topic in body.topics
        )
        return respond(error_code=0, session_id=0, responses=responses)

    @staticmethod
    def _metadata_fetch_offset(body: Any) -> int | None:
        for topic in body.topics:
            for p in topic.partitions:
                if topic.topic == METADATA_TOPIC and p.partition == METADATA_PARTITION:
                    return p.fetch_offset
        return None

    def _fetch_partition(self, respond: Response, topic: str, p: Any, max_bytes: int) -> Any:
        metadata_log = self.metadata_log
        values: dict[str, Any] = {
            "partition_index": p.partition,
            "high_watermark": metadata_log.end_offset,
            "last_stable_offset": metadata_log.end_offset,
            "log_start_offset": metadata_log.start_offset,
            "aborted_transactions": None,
            "records": None,
        }
        if topic != METADATA_TOPIC or p.partition != METADATA_PARTITION:
            return respond.nested(
                "PartitionData", error_code=UnknownTopicOrPartitionError.code, **values
            )
        try:
            data = metadata_log.read(p.fetch_offset, min(p.partition_max_bytes, max_bytes))
        except OffsetOutOfRangeError:
            return respond.nested("PartitionData", error_code=OffsetOutOfRangeError.code, **values)
        values["records"] = data.records
        return respond.nested("PartitionData", error_code=0, **values)

    def handle_list_offsets(self, request: Request) -> Any:
        respond = Response(request)
        topics = []
        for topic in request.body.topics:
            partitions = tuple(self._list_offset(respond, topic.name, p) for p in topic.partitions)
            topics.append(
                respond.nested("ListOffsetsTopicResponse", name=topic.name, partitions=partitions)
            )
        return respond(topics=tuple(topics))

    def _list_offset(self, respond: Response, topic: str, p: Any) -> Any:
        name = "ListOffsetsPartitionResponse"
        if topic != METADATA_TOPIC or p.partition_index != METADATA_PARTITION:
            return respond.nested(
                name,
                partition_index=p.partition_index,
                error_code=UnknownTopicOrPartitionError.code,
            )
        found = self.metadata_log.offset_for_timestamp(p.timestamp)
        offset, timestamp = found if found is not None else (-1, -1)
        return respond.nested(
            name,
            partition_index=p.partition_index,
            error_code=0,
            timestamp=timestamp,
            offset=offset,
            leader_epoch=0,
        )

    # -- Metadata ---------------------------------------------------------------------------

    async def handle_metadata(self, request: Request) -> Any:
        body, respond = request.body, Response(request)
        if body.topics is None:
            wanted = [self.image.topic(name) for name in self.image.topic_names()]
            entries = [topic for topic in wanted if topic is not None]
        else:
            allow_auto = getattr(body, "allow_auto_topic_creation", True)
            entries = await self._requested_topics(body.topics, allow_auto)
        brokers = tuple(
            respond.nested("MetadataResponseBroker", node_id=i, host=h, port=p, rack=r)
            for i, h, p, r in self._client_nodes()
        )
        topics = tuple(
            self._metadata_topic(respond, entry)
            if isinstance(entry, TopicImage)
            else entry(respond)
            for entry in entries
        )
        return respond(
            brokers=brokers,
            cluster_id=self.server.cluster_id,
            controller_id=self._controller_id(),
            topics=topics,
            cluster_authorized_operations=respond.authorized_operations(  # v8-v10 only
                ResourceType.CLUSTER, CLUSTER_NAME
            ),
        )

    async def _requested_topics(self, requested: Any, allow_auto: bool) -> list[Any]:
        """TopicImages, or callables building an error entry, in request order."""
        missing = [
            t.name for t in requested if t.name is not None and self.image.topic(t.name) is None
        ]
        if missing and allow_auto and self.server.config.auto_create_topics_enable:
            await self._auto_create(missing)
        entries: list[Any] = []
        for t in requested:
            topic_id = getattr(t, "topic_id", None)  # v10+; before it a name is all there is
            topic = (
                self.image.topic(t.name)
                if t.name is not None
                else self.image.topic_by_id(topic_id)
                if topic_id is not None
                else None
            )
            entries.append(topic if topic is not None else missing_topic(t.name, topic_id))
        return entries

    async def _auto_create(self, names: list[str]) -> None:
        valid = []
        for name in dict.fromkeys(names):
            try:
                validate_topic_name(name)
            except InvalidTopicError:
                continue
            valid.append(NewTopic(name))
        if valid:
            results = await self.server.commit(lambda: self.controller.create_topics(valid))
            for result in results:
                if not result.error.is_success:
                    logger.info(
                        "auto-creating topic %s failed: %s", result.name, result.error.message
                    )

    def _metadata_topic(self, respond: Response, topic: TopicImage) -> Any:
        partitions = tuple(
            respond.nested(
                "MetadataResponsePartition",
                error_code=0 if p.is_online else LeaderNotAvailableError.code,
                partition_index=p.partition,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=p.replicas,
                isr_nodes=p.isr,
                offline_replicas=tuple(r for r in p.replicas if not self.image.is_unfenced(r)),
            )
            for _, p in sorted(topic.partitions.items())
        )
        return respond.nested(
            "MetadataResponseTopic",
            error_code=0,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=False,
            partitions=partitions,
            topic_authorized_operations=respond.authorized_operations(
                ResourceType.TOPIC, topic.name
            ),
        )


__all__ = ["ControllerApis"]
