"""The request pipeline's authorize stage with an authorizer: binds the server's
`StandardAuthorizer`, audit sink, `audit.log.allowed` and node id to every request's context,
after bringing the authorizer's ACLs up to date with the server's metadata image.

Every server (broker, controller, group coordinator) serves from a metadata image that follows
the controller's log; its `acls` (id -> binding, Kafka's `AccessControlEntryRecord`s) are the
authorizer's input. Before each request the stage looks at the image's offset: unchanged, the
authorizer is current (one attribute read per request); moved, the ACL ids are compared and the
authorizer reloaded when they differ. So an ACL removal takes effect on open connections at
their next request after the server's image has it, as Kafka's `AclPublisher` feeding the
`StandardAuthorizer` does.

Handlers then call `pipeline.authorize(request, op, type, name)` per Kafka's "Operations and
Resources on Protocols" table (`AuthHelper.authorize` in `KafkaApis`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from sparklog.protocol.connection import ProtocolError, Request
from sparklog.protocol.pipeline import NoAuthorizer, RequestStage, authorize
from sparklog.security.acl import CLUSTER_NAME, AclBinding, AclOperation, ResourceType
from sparklog.security.audit import AuditConfig, AuditSink
from sparklog.security.authorizer_config import AuthorizerConfig
from sparklog.security.standard_authorizer import StandardAuthorizer

logger = logging.getLogger(__name__)


class AclImage(Protocol):
    """What the stage reads of a metadata image (`sparklog.metadata.image.MetadataImage`)."""

    @property
    def offset(self) -> int: ...

    @property
    def acls(self) -> Mapping[uuid.UUID, AclBinding]: ...


class AuthorizeStage(RequestStage):
    """Binds `authorizer` (fed from `image()`'s ACLs), the audit sink and the node id to
    every request. `audit` is replaceable while serving (the audit trail's sink is set once
    the driver's table is open)."""

    name = "authorize"

    def __init__(
        self,
        authorizer: StandardAuthorizer,
        image: Callable[[], AclImage | None],
        *,
        node_id: int = -1,
        audit: AuditSink | None = None,
        audit_allowed: bool = False,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.authorizer = authorizer
        self.image = image
        #: whether the image holds the cluster's ACLs yet (a starting broker's does not)
        self.ready = ready
        self.node_id = node_id
        self.audit = audit
        self.audit_allowed = audit_allowed
        self._seen: Any = None
        self._seen_offset = -1

    def on_request(self, request: Request) -> Any | None:
        if self.ready is not None and not self.ready():
            self._not_ready(request)
        self.refresh()
        context = request.context
        context.authorizer = self.authorizer
        context.audit = self.audit
        context.audit_allowed = self.audit_allowed
        context.node_id = self.node_id
        return None

    def _not_ready(self, request: Request) -> None:
        """Before the image holds the ACLs every request would be refused for lack of them,
        with non-retriable codes. Kafka's brokers do not process requests until their
        authorizer's initial load completed (`enableRequestProcessing(authorizerFutures)`);
        here the connection is closed, which clients retry. Super users pass, as Kafka's
        StandardAuthorizer allows them before its load."""
        if str(request.context.session.principal) in self.authorizer.super_users:
            return
        raise ProtocolError(
            "the authorizer is not ready: this server is still loading the cluster's metadata "
            "(ACLs); the client retries"
        )

    def refresh(self) -> None:
        """Reload the authorizer's ACLs if the image moved and its ACL set changed."""
        image = self.image()
        if image is None:
            return
        offset = image.offset
        if image is self._seen and offset == self._seen_offset:
            return
        try:
            acls = image.acls
            if acls.keys() != self.authorizer.acl_ids():
                self.authorizer.load_snapshot(dict(acls))
        except RuntimeError:  # the image changed under us on its own thread: next request
            return
        self._seen, self._seen_offset = image, offset


def denied_topics(
    request: Request, operation: AclOperation, topics: Iterable[str], *, audit: bool = True
) -> set[str]:
    """The topics among `topics` the request's principal may not `operation` (none without
    an authorizer, without looking)."""
    if request.context.authorizer is None:
        return set()
    return {
        t
        for t in dict.fromkeys(topics)
        if not authorize(request, operation, ResourceType.TOPIC, t, audit_denied=audit)
    }


def cluster_allowed(request: Request, operation: AclOperation, *, audit: bool = True) -> bool:
    """Whether the request's principal may `operation` on the cluster."""
    if request.context.authorizer is None:
        return True
    return authorize(request, operation, ResourceType.CLUSTER, CLUSTER_NAME, audit_denied=audit)


def authorize_stage(
    props: Mapping[str, object] | None,
    image: Callable[[], AclImage | None],
    *,
    node_id: int = -1,
    audit: AuditSink | None = None,
    audit_allowed: bool | None = None,
    ready: Callable[[], bool] | None = None,
) -> RequestStage:
    """The authorize stage a server's properties ask for: `AuthorizeStage` with
    `authorizer.class.name` set, else `NoAuthorizer` (no hook: the pipeline's no-policy fast
    path stays; without an authorizer no decision is audited). `audit` is the server's sink
    (`BrokerServer.audit`, ...); `audit_allowed` its `audit.log.allowed` (read from `props`
    when not given)."""
    config = AuthorizerConfig.from_properties(props)
    authorizer = config.build()
    if authorizer is None:
        return NoAuthorizer()
    if audit_allowed is None:
        audit_allowed = AuditConfig.from_properties(props).audit_log_allowed
    logger.info(
        "authorizer StandardAuthorizer on node %d (super.users=%s, "
        "allow.everyone.if.no.acl.found=%s)",
        node_id,
        config.super_users or "none",
        str(config.allow_everyone_if_no_acl_found).lower(),
    )
    return AuthorizeStage(
        authorizer, image, node_id=node_id, audit=audit, audit_allowed=audit_allowed, ready=ready
    )


def stages_with(*stages: RequestStage) -> list[RequestStage]:
    """The default pipeline with each of `stages` in its slot (`stage.name`)."""
    from sparklog.protocol.pipeline import default_stages

    chosen = {stage.name: stage for stage in stages}
    return [chosen.get(s.name, s) for s in default_stages()]
