"""The request pipeline and the session: who asked, and the policy around every handler."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from sparklog.protocol.api_versions import BROKER_APIS, ApiKey
from sparklog.protocol.connection import (
    NEED_DATA,
    ClientConnection,
    ConnectionState,
    ProtocolError,
    Request,
    RequestContext,
    ServerConnection,
)
from sparklog.protocol.pipeline import (
    RequestPipeline,
    RequestStage,
    authorized_operations,
    throttle_time_ms,
)
from sparklog.security.acl import (
    AUTHORIZED_OPERATIONS_OMITTED,
    AclOperation,
    ResourceType,
    from_bitfield,
    supported_operations,
    to_bitfield,
)
from sparklog.security.session import ANONYMOUS, KafkaPrincipal, SecurityProtocol


def metadata_request() -> MetadataRequest:
    return MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def vars_of(entity) -> dict:
    return {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}


def receive(server: ServerConnection, body, client_id: str = "app-1") -> Request:
    _cid, data = ClientConnection(client_id).send_request(body)
    server.receive_data(data)
    request = server.next_request()
    assert request is not NEED_DATA
    return request


def test_plaintext_requests_carry_an_anonymous_session():
    server = ServerConnection(
        BROKER_APIS, listener_name="CLIENTS", client_address="10.1.2.3", client_port=5555
    )
    assert server.state is ConnectionState.AUTHENTICATED
    first = receive(server, metadata_request())
    session = first.session
    assert str(session.principal) == "User:ANONYMOUS"
    assert session.listener_name == "CLIENTS"
    assert session.security_protocol is SecurityProtocol.PLAINTEXT
    assert (session.client_address, session.client_port) == ("10.1.2.3", 5555)
    assert session.client_id == "app-1" and session.client_host == "/10.1.2.3"
    assert receive(server, metadata_request()).session is session  # one per client id
    assert receive(server, metadata_request(), "app-2").session.client_id == "app-2"


def test_before_authentication_only_the_handshake_apis_pass():
    server = ServerConnection(BROKER_APIS, authenticated_as=None)
    assert server.state is ConnectionState.PRE_AUTHENTICATION
    versions = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    assert receive(server, versions).api_key == ApiKey.API_VERSIONS
    with pytest.raises(ProtocolError, match="METADATA request before authentication"):
        receive(server, metadata_request())
    later = ServerConnection(BROKER_APIS, authenticated_as=None)
    later.authenticated(KafkaPrincipal("User", "alice"))
    assert str(receive(later, metadata_request()).session.principal) == "User:alice"


def test_a_sasl_connection_needs_its_authenticator():
    with pytest.raises(ValueError, match="no SASL server side"):
        ServerConnection(BROKER_APIS, security_protocol=SecurityProtocol.SASL_SSL)


class Recorder(RequestStage):
    def __init__(self, name: str, log: list, refuse: bool = False) -> None:
        self.name, self.log, self.refuse = name, log, refuse

    def on_request(self, request):
        self.log.append(f"{self.name}>")
        return "refused" if self.refuse else None

    def on_response(self, request, response):
        self.log.append(f"<{self.name}")
        return response


def test_stages_run_in_order_around_the_handler():
    log: list[str] = []

    async def handler(request):
        log.append("handler")
        return "answer"

    pipeline = RequestPipeline(handler, [Recorder("a", log), Recorder("b", log)])
    request = Request(ApiKey.METADATA, 12, 0, None, None, 0)
    assert asyncio.run(pipeline(request)) == "answer"
    assert log == ["a>", "b>", "handler", "<b", "<a"]
    log.clear()
    refusing = pipeline.with_stage(Recorder("a", log, refuse=True))
    assert asyncio.run(refusing(request)) == "refused"
    assert log == ["a>", "<b", "<a"]
    with pytest.raises(KeyError, match="no stage 'quota'"):
        pipeline.stage("quota")


def test_default_pipeline_calls_only_the_handler():
    pipeline = RequestPipeline(lambda r: asyncio.sleep(0, "ok"))
    assert [s.name for s in pipeline.stages] == ["authenticate", "authorize", "throttle", "measure"]
    assert pipeline._before == [] and pipeline._after == []
    assert asyncio.run(pipeline(Request(ApiKey.METADATA, 12, 0, None, None, 0))) == "ok"


class DenyWrites:
    def authorize(self, session, operation, resource_type, name):
        return operation != AclOperation.WRITE


def test_response_fields_come_from_the_request_context():
    asking = metadata_request()
    asking = type(asking)(**{**vars_of(asking), "include_topic_authorized_operations": True})
    request = Request(ApiKey.METADATA, 12, 0, None, asking, 0)
    assert throttle_time_ms(request) == 0
    topic_ops = authorized_operations(request, ResourceType.TOPIC, "t")  # the request's flag
    assert from_bitfield(topic_ops) == supported_operations(ResourceType.TOPIC)
    assert topic_ops == 3576  # Kafka's answer without an authorizer (READ..ALTER_CONFIGS)
    not_asked = Request(ApiKey.METADATA, 12, 0, None, metadata_request(), 0)
    assert (
        authorized_operations(not_asked, ResourceType.TOPIC, "t") == AUTHORIZED_OPERATIONS_OMITTED
    )
    # Metadata v12 has no cluster flag: not asked
    assert authorized_operations(request, ResourceType.CLUSTER, "kafka-cluster") < 0
    omitted = authorized_operations(request, ResourceType.TOPIC, "t", include=False)
    assert omitted == AUTHORIZED_OPERATIONS_OMITTED
    context = RequestContext(authorizer=DenyWrites(), throttle_time_ms=250)
    limited = Request(ApiKey.METADATA, 12, 0, None, None, 0, context)
    assert throttle_time_ms(limited) == 250
    allowed = from_bitfield(authorized_operations(limited, ResourceType.TOPIC, "t", include=True))
    assert AclOperation.WRITE not in allowed and AclOperation.READ in allowed
    assert limited.session.principal == ANONYMOUS


def test_bitfields_round_trip():
    for resource_type in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER):
        ops = supported_operations(resource_type)
        assert from_bitfield(to_bitfield(ops)) == ops
    with pytest.raises(ValueError, match="not a concrete resource type"):
        supported_operations(ResourceType.ANY)
