"""Admin APIs on a broker: forwarding to the controller, DescribeConfigs, topic auto-creation.

CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
AlterPartitionReassignments and ListPartitionReassignments are sent to the controller as they
came (Kafka's forwarding, KIP-590); before the controller's answer is returned the broker waits
until its own image holds everything the controller has written (architecture.md §3), so a
client that creates a topic through any broker sees it in that broker's Metadata right after.
DescribeConfigs is answered from the broker's image with the
controller's own describe functions, so both answer alike.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kio.schema.envelope.v0.response import EnvelopeResponse

from sparklog.broker.config import BrokerConfig
from sparklog.broker.controller_client import ControllerClient
from sparklog.broker.metadata import BrokerMetadata, dynamic_layers
from sparklog.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata import admin_authz, mutation_admission
from sparklog.metadata.broker_configs import DEFAULT_RESOURCE, describe_broker_resource
from sparklog.metadata.configs import (
    ConfigEntry,
    ConfigResourceType,
    describe_topic_configs,
    described_cluster_settings,
)
from sparklog.metadata.group_configs import describe_group_configs
from sparklog.metadata.image import BROKER_RESOURCE, GROUP_RESOURCE
from sparklog.protocol import codec, cooperative, envelope, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request
from sparklog.protocol.request_metrics import remote_wait
from sparklog.security.acl import AclOperation

logger = logging.getLogger(__name__)

#: How long a Metadata request waits for an auto-created topic to reach this broker's image.
AUTO_CREATE_WAIT_S = 5.0
_NETWORK_ERRORS = (ConnectionError, OSError, TimeoutError)


class AdminApis:
    """Forwarded admin requests, DescribeConfigs and auto-creation for one broker."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        metadata: BrokerMetadata,
        controller: ControllerClient,
        node_id: int | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.metadata = metadata
        self.controller = controller

    # -- forwarding ---------------------------------------------------------------------------

    async def handle_forwarded(self, request: Request) -> Any:
        """Forward what the client may do (`admin_authz`), answer the rest here."""
        body, refused = admin_authz.split(request, self._topic_of_id)
        if body is None:
            return refused
        if request.api_key in mutation_admission.STRICT_SINCE:
            response = await self._forward_enveloped(request, body)
        else:
            response = await self._forward(request, body)
        if refused is not None:
            response = admin_authz.merge(response, refused, ApiKey(request.api_key))
        return response

    async def _forward_enveloped(self, request: Request, body: Any) -> Any:
        """CreateTopics, CreatePartitions and DeleteTopics go in an Envelope (KIP-590) carrying
        the client's principal, client id and address, as Kafka's brokers forward them: the
        controller charges the client's `controller_mutation_rate` (KIP-599, Kafka's
        `ControllerApis`) once for the whole cluster, whichever broker the client asked. The
        controller's throttle time mutes the client's connection here."""
        inner = dataclasses.replace(request, body=body, raw=None)
        wrapped = envelope.wrap(
            inner, request.session.client_host, envelope.principal_bytes(request.session)
        )
        answer = await self._forward(request, wrapped)
        if not isinstance(answer, EnvelopeResponse):
            return answer  # the controller did not answer: the error response for the client
        if int(answer.error_code) or answer.response_data is None:
            return forward_error_response(
                request,
                int(answer.error_code) or UnknownServerError.code,
                "the controller refused the forwarded request",
            )
        response = envelope.decode_inner(inner, bytes(answer.response_data))
        throttle = getattr(response, "throttle_time", None)
        if throttle is not None:
            throttle_ms = int(kio_build.millis(throttle))
            context = request.context
            context.throttle_time_ms = max(context.throttle_time_ms, throttle_ms)
        return response

    def _topic_of_id(self, topic_id: Any) -> str | None:
        topic = self.metadata.image.topic_by_id(topic_id) if topic_id is not None else None
        return None if topic is None else topic.name

    async def _forward(self, request: Request, body: Any) -> Any:
        timeout_s = self._timeout_s(body)
        with remote_wait():  # the controller's time is the request's RemoteTimeMs
            try:
                response = await self.controller.forward(body, timeout_s=timeout_s + 5)
            except _NETWORK_ERRORS as e:
                logger.warning(
                    "forwarding %s to the controller failed: %s", ApiKey(request.api_key).name, e
                )
                return forward_error_response(
                    request, RequestTimedOutError.code, f"the controller did not answer: {e}"
                )
            await self.wait_for_controller_metadata(timeout_s)
        return response

    def _timeout_s(self, body: Any) -> float:
        timeout = getattr(body, "timeout", None)
        if timeout is None:
            return self.config.controller_socket_timeout_ms / 1000
        return max(0.0, kio_build.millis(timeout) / 1000)

    async def wait_for_controller_metadata(self, timeout_s: float) -> bool:
        """Wait until this broker published everything in the controller's metadata log."""
        try:
            end_offset = await self.controller.metadata_end_offset()
        except _NETWORK_ERRORS as e:
            logger.warning("cannot read the controller's metadata end offset: %s", e)
            return False
        caught_up = await self.metadata.wait_for_offset(end_offset, timeout_s)
        if not caught_up:
            logger.warning(
                "metadata at offset %d, the controller at %d after %.1f s",
                self.metadata.published_offset,
                end_offset,
                timeout_s,
            )
        return caught_up

    async def auto_create_topics(self, names: list[str]) -> dict[str, int]:
        """Create missing topics with the cluster defaults (Kafka's `AutoTopicCreationManager`);
        returns the error code to show for each topic that is still missing afterwards."""
        version = await self.controller.version_for(ApiKey.CREATE_TOPICS, (2, 7))
        request = kio_build.build(
            codec.request_schema(ApiKey.CREATE_TOPICS, version),
            {
                "topics": [
                    {
                        "name": n,
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "assignments": [],
                        "configs": [],
                    }
                    for n in names
                ],
                "timeout": int(AUTO_CREATE_WAIT_S * 1000),
                "validate_only": False,
            },
        )
        try:
            response = await self.controller.forward(request, timeout_s=AUTO_CREATE_WAIT_S + 5)
        except _NETWORK_ERRORS as e:
            logger.warning("auto-creating %s failed: %s", brief(names), e)
            return {n: LeaderNotAvailableError.code for n in names}
        errors, created = {}, []
        for topic in response.topics:
            code = int(topic.error_code)
            if code not in (0, TopicAlreadyExistsError.code):
                errors[topic.name] = code  # e.g. INVALID_TOPIC_EXCEPTION for a bad name
            else:
                created.append(topic.name)
        if created:
            logger.info("auto-created topics %s", brief(created))
        if errors:
            first = next(t for t in response.topics if t.name in errors)
            logger.warning(
                "auto-creating %s refused: %s", brief(list(errors)), first.error_message or ""
            )
        await self.wait_for_controller_metadata(AUTO_CREATE_WAIT_S)
        return {n: errors.get(n, LeaderNotAvailableError.code) for n in names}

    # -- DescribeConfigs ----------------------------------------------------------------------

    async def handle_describe_configs(self, request: Request) -> Any:
        body = request.body
        synonyms = bool(getattr(body, "include_synonyms", False))
        weight = cooperative.CHECK_EVERY  # a resource describes ~100 configs: look each time
        results = [
            self._describe_resource(request, r, synonyms)
            async for r in cooperative.each(body.resources, weight)
        ]
        return await kio_build.response_cooperatively(request, {"results": results})

    def _describe_resource(
        self, request: Request, resource: Any, include_synonyms: bool
    ) -> dict[str, Any]:
        kind = int(resource.resource_type)
        name = str(resource.resource_name)
        keys = None if resource.configuration_keys is None else list(resource.configuration_keys)
        keys = keys or None  # Kafka: null or empty = every config
        answer: dict[str, Any] = {
            "resource_type": kind,
            "resource_name": name,
            "error_message": None,
        }
        denied = admin_authz.config_resource_check(
            request, kind, name, AclOperation.DESCRIBE_CONFIGS
        )
        if denied:
            answer.update(error_code=denied, error_message="Authorization failed.", configs=[])
            return answer
        try:
            entries = self._entries(kind, name, keys, include_synonyms)
        except (InvalidRequestError, UnknownTopicOrPartitionError) as e:
            answer.update(error_code=e.code, error_message=str(e), configs=[])
            return answer
        answer.update(error_code=0, configs=[_entry_data(e) for e in entries])
        return answer

    def _entries(
        self, kind: int, name: str, keys: list[str] | None, include_synonyms: bool
    ) -> list[ConfigEntry]:
        if kind == ConfigResourceType.TOPIC:
            if self.metadata.image.topic(name) is None:
                raise UnknownTopicOrPartitionError(f"topic {name} does not exist")
            overrides = self.metadata.image.topic_config(name)
            default, own = dynamic_layers(self.metadata.image, self.node_id or 0)
            return describe_topic_configs(
                overrides,
                self.config.cluster,
                keys,
                include_synonyms=include_synonyms,
                dynamic_broker=own,
                dynamic_default=default,
            )
        if kind == ConfigResourceType.BROKER:
            return self._broker_entries(name, keys, include_synonyms)
        if kind == ConfigResourceType.GROUP:
            if not name:
                raise InvalidRequestError("Group name must not be empty")
            return describe_group_configs(
                self.metadata.image.configs(GROUP_RESOURCE, name),
                self.config.cluster.group_defaults,
                keys,
                include_synonyms=include_synonyms,
            )
        raise InvalidRequestError(f"Unsupported resource type: {kind}")

    def _broker_entries(
        self, name: str, keys: list[str] | None, include_synonyms: bool
    ) -> list[ConfigEntry]:
        """A broker describes itself or the cluster default (Kafka's `ConfigHelper`)."""
        if (
            name
            and self.node_id is not None
            and name.lstrip("-").isdigit()
            and int(name) != self.node_id
        ):
            raise InvalidRequestError(
                f"Unexpected broker id, expected {self.node_id} or empty string, but "
                f"received {name}"
            )
        # the cluster's parse of a shared name wins, as before dynamic configs
        listed = {
            **self.config.described_settings(),
            **described_cluster_settings(self.config.cluster),
        }
        image = self.metadata.image
        return describe_broker_resource(
            self.config.cluster,
            name,
            image.configs(BROKER_RESOURCE, DEFAULT_RESOURCE),
            image.configs(BROKER_RESOURCE, name) if name else {},
            listed,
            keys,
            include_synonyms=include_synonyms,
        )


def _entry_data(entry: ConfigEntry) -> dict[str, Any]:
    return {
        "name": entry.name,
        "value": entry.value,
        "read_only": entry.read_only,
        "config_source": int(entry.source),
        "is_sensitive": entry.is_sensitive,
        "synonyms": [
            {"name": s.name, "value": s.value, "source": int(s.source)} for s in entry.synonyms
        ],
        "config_type": int(entry.config_type),
        "documentation": None,
    }


def brief(names: list[str], limit: int = 10) -> str:
    """`names` for a log line: the first `limit`, then how many in all (a request may name
    100,000 topics; a log line should not)."""
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])}, ... ({len(names)} in all)"


#: The response to a forwarded admin request that never reached the controller.
forward_error_response = admin_authz.error_response
