"""The authorize stage: built from a server's properties, fed from its metadata image's ACLs,
binding authorizer, audit sink and node id to every request."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.authorization import (
    AuthorizeStage,
    authorize_stage,
    stages_with,
)
from sparklog.protocol.connection import Request, RequestContext
from sparklog.protocol.pipeline import NoAuthorizer, RequestPipeline, authorize
from sparklog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from sparklog.security.audit import AuditEvent
from sparklog.settings import ConfigError

STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
READ_T = AclBinding(
    ResourcePattern(ResourceType.TOPIC, "t"),
    AccessControlEntry("User:ANONYMOUS", "*", AclOperation.READ, AclPermissionType.ALLOW),
)


class Image:
    """The two things the stage reads of a MetadataImage."""

    def __init__(self) -> None:
        self.offset = 0
        self.acls: dict[uuid.UUID, AclBinding] = {}


class Sink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def record(self, event: AuditEvent) -> None:
        self.events.append(event)


def request() -> Request:
    return Request(int(ApiKey.FETCH), 12, 1, "c", None, 0, RequestContext())


def test_no_authorizer_keeps_the_pipelines_no_policy_fast_path():
    stage = authorize_stage({}, lambda: None, node_id=4)
    assert isinstance(stage, NoAuthorizer)
    pipeline = RequestPipeline(lambda r: None, stages_with(stage))  # type: ignore[arg-type,return-value]
    assert not pipeline._before and not pipeline._after
    r = request()
    assert authorize(r, AclOperation.WRITE, ResourceType.TOPIC, "t")


def test_a_bad_authorizer_class_is_refused_naming_the_choices():
    with pytest.raises(ConfigError, match="StandardAuthorizer"):
        authorize_stage({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}, dict)


def test_the_stage_follows_the_images_acls_and_audits_denials_with_its_node():
    image, sink = Image(), Sink()
    stage = authorize_stage(STANDARD, lambda: image, node_id=7, audit=sink)
    assert isinstance(stage, AuthorizeStage)
    r = request()
    stage.on_request(r)
    assert not authorize(r, AclOperation.READ, ResourceType.TOPIC, "t")
    (event,) = sink.events
    assert (event.decision, event.node_id, event.api, event.resource_name) == (
        "DENIED",
        7,
        "FETCH",
        "t",
    )
    acl_id = uuid.uuid4()
    image.acls[acl_id] = READ_T
    image.offset = 1
    r = request()
    stage.on_request(r)
    assert authorize(r, AclOperation.READ, ResourceType.TOPIC, "t")
    del image.acls[acl_id]  # removed at offset 2: the next request sees it
    image.offset = 2
    r = request()
    stage.on_request(r)
    assert not authorize(r, AclOperation.READ, ResourceType.TOPIC, "t")


def test_super_users_and_allow_everyone_come_from_the_properties():
    props = {**STANDARD, "super.users": "User:ANONYMOUS", "allow.everyone.if.no.acl.found": "true"}
    stage = authorize_stage(props, Image)
    assert isinstance(stage, AuthorizeStage)
    assert stage.authorizer.super_users == {"User:ANONYMOUS"}
    assert stage.authorizer.allow_everyone_if_no_acl_found


def test_the_stage_sits_in_the_authorize_slot_of_the_pipeline():
    image = Image()
    image.acls[uuid.uuid4()] = READ_T
    stage = authorize_stage(STANDARD, lambda: image)

    async def handler(r: Request) -> bool:
        return authorize(r, AclOperation.READ, ResourceType.TOPIC, "t")

    pipeline = RequestPipeline(handler, stages_with(stage))
    assert [s.name for s in pipeline.stages] == ["authenticate", "authorize", "throttle", "measure"]
    assert asyncio.run(pipeline(request())) is True


def test_before_its_image_is_loaded_the_stage_closes_connections_but_of_super_users():
    """A starting broker has no ACLs yet: rather than refuse with non-retriable codes, the
    connection is closed (clients retry), as Kafka serves nothing before its authorizer's
    initial load; super users pass."""
    from sparklog.protocol.connection import ProtocolError
    from sparklog.security.session import KafkaPrincipal, Session

    loaded = False
    props = {**STANDARD, "super.users": "User:admin"}
    stage = authorize_stage(props, Image, ready=lambda: loaded)
    with pytest.raises(ProtocolError, match="not ready"):
        stage.on_request(request())
    admin = request()
    admin.context.session = Session(principal=KafkaPrincipal("User", "admin"))
    stage.on_request(admin)
    loaded = True
    stage.on_request(request())
