"""A broker's quota managers, built together (Kafka's `QuotaFactory.instantiate` and its
`QuotaManagers`): client quotas (KIP-13/124, the pipeline's throttle stage) and the KIP-73
replication throttles of the leader and the follower side. Each reads its limits from the
broker's current metadata image (`image`), so quota changes apply as the image moves. The
KIP-599 controller mutation quota is the controller's (`controller/quota_enforcement.py`): a
broker forwards topic admin requests in an Envelope carrying the client's identity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from sparklog.broker.quotas import BrokerQuotas, ThrottleStage
from sparklog.metadata.image import MetadataImage
from sparklog.metrics.cluster_quota import CLUSTER_QUOTA_SETTINGS
from sparklog.metrics.config import MetricsConfig
from sparklog.metrics.registry import Metrics
from sparklog.metrics.replication_quota import ReplicationQuotaManager
from sparklog.metrics.replication_quota import quota_window as replication_quota_window


@dataclasses.dataclass(frozen=True, slots=True)
class QuotaManagers:
    """Kafka's `QuotaFactory.QuotaManagers`, the parts a sparklog broker has."""

    #: produce/fetch/request (and per-topic) client quotas, and the stage applying them
    client: BrokerQuotas
    throttle: ThrottleStage
    #: KIP-73: `leader.replication.throttled.rate` / `follower.replication.throttled.rate`
    leader: ReplicationQuotaManager
    follower: ReplicationQuotaManager


def quota_scope(config: Mapping[str, object] | None) -> str:
    """`quota.scope`: "cluster" has the driver split client quotas among the brokers."""
    parsed = CLUSTER_QUOTA_SETTINGS.parse(config or {}, unknown="ignore")
    return str(parsed.get("quota_scope", "broker"))


def instantiate(
    metrics: Metrics,
    metrics_config: MetricsConfig,
    config: Mapping[str, object] | None,
    image: Callable[[], MetadataImage],
) -> QuotaManagers:
    """Every quota manager of one broker, registering its metrics in `metrics`; replication
    quotas take their windows from `replication.quota.window.*`, the others from
    `quota.window.*`."""
    window = replication_quota_window(config)
    leader = ReplicationQuotaManager(metrics, window, "LeaderReplication")
    follower = ReplicationQuotaManager(metrics, window, "FollowerReplication")
    client = BrokerQuotas(metrics, metrics_config.quota_config, lambda: image().quotas)
    return QuotaManagers(
        client=client,
        throttle=ThrottleStage(client, metrics),
        leader=leader,
        follower=follower,
    )
