"""The controller's quota enforcement: the controller mutation quota (KIP-599) of clients asking it
directly, and the shares of cluster-wide client quotas (`quota.scope=cluster`) it hands to the
brokers reporting their usage (sparklog's QuotaUsage, `metrics/cluster_quota.py`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from sparklog.controller.cluster_control import BROKER_CLIENT_ID_PREFIX
from sparklog.controller.controller_context import ControllerContext
from sparklog.metadata import mutation_admission
from sparklog.metadata.image import MetadataImage
from sparklog.metrics.cluster_quota import ClusterQuotaBalancer
from sparklog.metrics.config import MetricsConfig
from sparklog.metrics.controller_mutation_quota import ControllerMutationQuotaManager
from sparklog.metrics.registry import Metrics
from sparklog.protocol import envelope, kio_build
from sparklog.protocol.api_versions import CONTROLLER_APIS
from sparklog.protocol.connection import Request

#: what brokers forward in Envelopes: the requests charged to the client's mutation quota
ENVELOPED_APIS = {api: CONTROLLER_APIS[api] for api in mutation_admission.STRICT_SINCE}


class ControllerQuotas:
    """One per controller server (`ControllerApis.quotas`)."""

    def __init__(self, server: ControllerContext, image: Callable[[], MetadataImage]) -> None:
        self.server = server
        self._image = image
        metrics_config = getattr(server, "metrics_config", None) or MetricsConfig()
        window = metrics_config.quota_config
        #: cluster-wide client quotas: every broker's usage, its shares
        self.balancer = ClusterQuotaBalancer(
            window.time_window_ms, lambda: len(self._image().unfenced_brokers())
        )
        #: `controller_mutation_rate` (KIP-599) of clients asking the controller directly
        self.mutation_quota = ControllerMutationQuotaManager(
            getattr(server, "metrics", None) or Metrics(),
            metrics_config.controller_quota_config,
            mutation_admission.ImageQuotaSource(image),
        )

    def admit_mutations(
        self, request: Request, served: Request, merge: Callable[[Any, Any], Any], refused: Any
    ) -> tuple[Request | None, Any, int]:
        """(the request to serve or None, the refused answer or None, the throttle time) of a
        request that passed authorization: CreateTopics/CreatePartitions/DeleteTopics of a
        client (brokers charged theirs before forwarding) under its mutation quota."""
        if not self._charges_mutations(served):
            return served, refused, 0
        body, throttled, throttle_ms = mutation_admission.admit(
            served,
            served.body,
            self.mutation_quota,
            self._image(),
            self.server.config.num_partitions,
            self.server.now_ms(),
        )
        if throttled is not None:
            refused = merge(throttled, refused)
        return (
            None if body is None else dataclasses.replace(served, body=body),
            refused,
            throttle_ms,
        )

    async def handle_envelope(
        self, request: Request, handle: Callable[[Request], Awaitable[Any]]
    ) -> Any:
        """A broker forwarding a client's CreateTopics, CreatePartitions or DeleteTopics in an
        Envelope (KIP-590; `controller/authz.py` checked the broker's CLUSTER_ACTION): served
        with `handle` as the client's own request (what the broker authorized), under its
        principal and client id, so its
        `controller_mutation_rate` is charged here once for the cluster (Kafka's
        `ControllerApis` with the Envelope's context)."""
        try:
            inner, client_host = envelope.unwrap(request.body, ENVELOPED_APIS)
            principal = envelope.principal_of(request.body)
        except envelope.EnvelopeError as e:
            return envelope.envelope_response(None, e.code)
        session = dataclasses.replace(
            request.session,
            principal=principal,
            client_address=client_host.lstrip("/"),
            client_port=-1,
            client_id=inner.client_id,
        )
        # a fresh context: the throttle the client earns is the broker's to apply (it mutes the
        # client's connection), not a reason to mute the broker's forwarding connection. The
        # broker authorized the client's principal and forwards only what it may do (under its
        # own super.users, which the controller's need not list): not authorized again here
        context = dataclasses.replace(
            request.context, session=session, throttle_time_ms=0, authorizer=None
        )
        body = await handle(dataclasses.replace(inner, context=context))
        return envelope.envelope_response(envelope.response_data(inner, body))

    @staticmethod
    def _charges_mutations(request: Request) -> bool:
        if request.api_key not in mutation_admission.STRICT_SINCE:
            return False
        client_id = request.session.client_id or request.client_id or ""
        return not client_id.startswith(BROKER_CLIENT_ID_PREFIX)

    def handle_quota_usage(self, request: Request) -> Any:
        """A broker's quota usage (`sparklog_apis.QuotaUsageRequest`, `quota.scope=cluster`):
        answered with its share of each entity's quota (`metrics/cluster_quota.py`)."""
        body = request.body
        usage = {
            (e.quota_type, tuple((t.name, t.value) for t in e.tags)): (
                float(e.value),
                float(e.limit),
            )
            for e in body.entries
        }
        shares, default = self.balancer.report(int(body.node_id), usage, self.server.now_ms())
        return kio_build.response(
            request,
            {
                "error_code": 0,
                "default_share": default,
                "shares": [
                    {
                        "quota_type": quota_type,
                        "tags": [{"name": k, "value": v} for k, v in tags],
                        "value": share,
                        "limit": 0.0,
                    }
                    for (quota_type, tags), share in sorted(shares.items())
                ],
            },
        )
