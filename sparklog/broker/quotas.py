"""The broker's throttle stage: client quotas (KIP-13 byte rates, KIP-124 request time)
applied to every request in the pipeline's "throttle" slot, as Kafka's `KafkaApis` does in
`handleProduceRequest`, `handleFetchRequest` and `sendResponseMaybeThrottle`.

- **Produce**: the request's size is recorded against the client's `producer_byte_rate`
  before the append (Kafka records it at response time; the size is the same, and knowing
  the throttle first lets the response carry it). With acks=0 the request quota is not
  applied (no response to carry it; Kafka's rule).
- **Fetch**: the client's `max_bytes` is capped to what fits in its quota window
  (`getMaxValueInQuotaWindow`); the response's record bytes are recorded against
  `consumer_byte_rate`; a throttled Fetch (by either quota) returns no data and its bytes
  are un-recorded (Kafka's `getThrottledResponse` + `unrecordQuotaSensor`). Followers'
  fetches are exempt.
- **Every other request** (and the two above): the event-loop time its handler took is
  recorded against `request_percentage` (the share of this broker's one loop); the throttle
  it earns is known when the next request of that entity arrives (the response of the
  request that went over is already built: a one-request lag Kafka does not have) and is
  capped at one quota window. Inter-broker and internal APIs are exempt (Kafka's
  `exemptRequest`), recorded into `exempt-request-time`.

The response carries the max of the byte-rate and request throttles, never the sum, and the
server then mutes the connection for that long (KIP-219, `protocol/server.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sparklog.metrics.quota_manager import (
    ClientQuotaManager,
    ClientRequestQuotaManager,
    ConnectionRateQuotaManager,
    IpQuotaSource,
    QuotaSource,
    QuotaType,
    TopicQuotaManager,
)
from sparklog.metrics.registry import Metrics
from sparklog.metrics.stats import MetricConfig
from sparklog.protocol import kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request
from sparklog.protocol.file_response import FileResponse
from sparklog.protocol.pipeline import RequestStage

logger = logging.getLogger(__name__)

#: APIs only brokers and the controller send one another (Kafka's `clusterAction` APIs,
#: exempt from the request quota) and sparklog's internal ones.
EXEMPT_APIS = frozenset(
    {
        ApiKey.WRITE_TXN_MARKERS,
        ApiKey.ALTER_PARTITION,
        ApiKey.ENVELOPE,
        ApiKey.BROKER_REGISTRATION,
        ApiKey.BROKER_HEARTBEAT,
        ApiKey.UNREGISTER_BROKER,
        ApiKey.ALLOCATE_PRODUCER_IDS,
        ApiKey.SPARKLOG_END_TXN_BATCH,
        ApiKey.SPARKLOG_AUDIT_EVENTS,
    }
)

#: How often idle quota sensors are looked for (they expire after an hour idle).
EXPIRE_EVERY_MS = 60_000


def fetch_topic_bytes(response: Any) -> dict[str, int]:
    """The record bytes a Fetch response carries per topic (file-backed ones by their
    length): what the consumer byte rates count."""
    files = response.records if isinstance(response, FileResponse) else {}
    body = response.body if isinstance(response, FileResponse) else response
    out: dict[str, int] = {}
    for topic in getattr(body, "responses", ()):
        total = 0
        for partition in topic.partitions:
            records = partition.records
            if not records:
                continue
            file_records = files.get(records) if files else None
            total += len(file_records) if file_records is not None else len(records)
        if total:
            name = topic.topic
            out[name] = out.get(name, 0) + total
    return out


def fetch_record_bytes(response: Any) -> int:
    return sum(fetch_topic_bytes(response).values())


def produce_topic_bytes(body: Any) -> dict[str, int]:
    """The record bytes a Produce request carries per topic."""
    out: dict[str, int] = {}
    for topic in body.topic_data:
        size = sum(len(p.records) for p in topic.partition_data if p.records)
        out[topic.name] = out.get(topic.name, 0) + size
    return out


def _is_follower_fetch(request: Request) -> bool:
    body = request.body
    replica_id = getattr(body, "replica_id", None)
    if replica_id is None:  # Fetch v15+ (KIP-903): the replica state
        state = getattr(body, "replica_state", None)
        replica_id = getattr(state, "replica_id", -1) if state is not None else -1
    return int(replica_id) >= 0


def _has_topic_quotas(source: QuotaSource) -> bool:
    """Whether the source has a `topic` entity (QuotasImage lists its entities; a source
    that cannot list them but answers topic quotas may have some)."""
    entities = getattr(source, "entities", None)
    if callable(entities):
        return any("topic" in entity.types() for entity in entities())
    return hasattr(source, "topic_quota")


class BrokerQuotas:
    """The broker's quota managers (Kafka's `QuotaManagers`: produce, fetch, request)."""

    def __init__(
        self,
        metrics: Metrics,
        config: MetricConfig,
        source: Callable[[], QuotaSource | None],
    ) -> None:
        self.source = source
        self.produce = ClientQuotaManager(metrics, QuotaType.PRODUCE, config, self._source)
        self.fetch = ClientQuotaManager(metrics, QuotaType.FETCH, config, self._source)
        self.request = ClientRequestQuotaManager(metrics, config, self._source)
        self.connection = ConnectionRateQuotaManager(metrics, config, self._ip_source)
        #: sparklog's per-topic byte rates (`topic` entity)
        self.topic_produce = TopicQuotaManager(metrics, QuotaType.PRODUCE, config, self._source)
        self.topic_fetch = TopicQuotaManager(metrics, QuotaType.FETCH, config, self._source)
        self._now_ms = metrics.now_ms
        self._seen: QuotaSource | None = None
        self._seen_version = -1
        self._unlimited: dict[tuple[str, str], bool] = {}
        self._topic_quotas = False

    def _source(self) -> QuotaSource | None:
        return self.source()

    def _ip_source(self) -> IpQuotaSource | None:
        source = self.source()
        return source if isinstance(source, IpQuotaSource) else None

    def has_topic_quotas(self) -> bool:
        """Whether any topic may have a byte rate (as of the last `unlimited` check)."""
        return self._topic_quotas

    def unlimited(self, user: str, client_id: str) -> bool:
        """Whether nothing can limit this client's requests: no byte-rate or request quota
        resolves for it and no topic has a byte rate. Cached per source version, so a broker
        with many quotas none of its clients hit pays a dict lookup per request."""
        source = self.source()
        if source is None:
            return True
        version = source.version
        if source is not self._seen or version != self._seen_version:
            self._seen, self._seen_version = source, version
            self._unlimited.clear()
            self._topic_quotas = _has_topic_quotas(source)
        key = (user, client_id)
        found = self._unlimited.get(key)
        if found is None:
            found = not self._topic_quotas and all(
                source.client_quota(t.key, user, client_id) is None for t in QuotaType
            )
            if len(self._unlimited) >= 100_000:  # bounded: many one-off client ids
                self._unlimited.clear()
            self._unlimited[key] = found
        return found

    def connection_throttle_ms(self, ip: str) -> int:
        """For the accept path: 0 to serve a new connection from `ip`, else the ms after
        which to close it (KIP-612)."""
        return self.connection.record_and_get_throttle_time_ms(ip, self._now_ms())

    def expire(self, now_ms: int) -> int:
        managers = (
            self.produce,
            self.fetch,
            self.request,
            self.connection,
            self.topic_produce,
            self.topic_fetch,
        )
        return sum(m.expire(now_ms) for m in managers)


class ThrottleStage(RequestStage):
    """The pipeline's throttle slot on a broker."""

    name = "throttle"

    def __init__(self, quotas: BrokerQuotas, metrics: Metrics) -> None:
        self.quotas = quotas
        self._now_ms = metrics.now_ms
        self._next_expiry_ms = 0

    def on_request(self, request: Request) -> Any | None:
        now_ms = self._now_ms()
        if now_ms >= self._next_expiry_ms:
            self._next_expiry_ms = now_ms + EXPIRE_EVERY_MS
            self.quotas.expire(now_ms)
        api_key = request.api_key
        if api_key in EXEMPT_APIS:
            return None
        quotas = self.quotas
        context = request.context
        user = context.session.principal.name
        client_id = request.client_id or ""
        if quotas.unlimited(user, client_id):
            return None
        if quotas.request.quota_limit(user, client_id) is not None:
            context.time_handler = True  # the request quota charges its loop time
        if api_key == ApiKey.PRODUCE:
            bandwidth_ms = quotas.produce.record_and_get_throttle_time_ms(
                user, client_id, request.size_bytes, now_ms
            )
            if quotas.has_topic_quotas():
                topic_ms = quotas.topic_produce.record_topics_and_get_throttle_time_ms(
                    produce_topic_bytes(request.body), now_ms
                )
                bandwidth_ms = max(bandwidth_ms, topic_ms)
            request_ms = 0
            if int(request.body.acks) != 0:
                request_ms = quotas.request.current_request_throttle_time_ms(
                    user, client_id, now_ms
                )
            self._throttle(request, quotas.produce, bandwidth_ms, request_ms, now_ms)
            return None
        if api_key == ApiKey.FETCH:
            if _is_follower_fetch(request):
                return None
            cap = quotas.fetch.max_value_in_quota_window(user, client_id)
            if cap is not None:
                request.context.fetch_max_bytes_cap = int(cap)
        request_ms = quotas.request.current_request_throttle_time_ms(user, client_id, now_ms)
        if request_ms:
            request.context.throttle_time_ms = request_ms
            quotas.request.record_throttle_time(user, client_id, request_ms, now_ms)
        return None

    def on_response(self, request: Request, response: Any | None) -> Any | None:
        now_ms = self._now_ms()
        api_key = request.api_key
        context = request.context
        quotas = self.quotas
        if api_key in EXEMPT_APIS or (api_key == ApiKey.FETCH and _is_follower_fetch(request)):
            if context.handler_ns:
                quotas.request.record_exempt(context.handler_ns, now_ms)
            return response
        user = context.session.principal.name
        client_id = request.client_id or ""
        if quotas.unlimited(user, client_id):
            return response
        if context.time_handler and not (api_key == ApiKey.PRODUCE and int(request.body.acks) == 0):
            quotas.request.record_loop_time(user, client_id, context.handler_ns, now_ms)
        if api_key != ApiKey.FETCH or response is None:
            return response
        topic_bytes = fetch_topic_bytes(response)
        size = sum(topic_bytes.values())
        bandwidth_ms = quotas.fetch.record_and_get_throttle_time_ms(user, client_id, size, now_ms)
        topics = quotas.has_topic_quotas()
        if topics:
            topic_ms = quotas.topic_fetch.record_topics_and_get_throttle_time_ms(
                topic_bytes, now_ms
            )
            bandwidth_ms = max(bandwidth_ms, topic_ms)
        request_ms = context.throttle_time_ms
        if not bandwidth_ms and not request_ms:
            return response
        # throttled by any quota: no data this time, and its bytes are taken back
        quotas.fetch.unrecord(user, client_id, size, now_ms)
        if topics:
            quotas.topic_fetch.unrecord_topics(topic_bytes, now_ms)
        if bandwidth_ms > request_ms:
            context.throttle_time_ms = bandwidth_ms
            quotas.fetch.record_throttle_time(user, client_id, bandwidth_ms, now_ms)
        return self._throttled_fetch(request, response)

    def _throttle(
        self,
        request: Request,
        bytes_manager: ClientQuotaManager,
        bandwidth_ms: int,
        request_ms: int,
        now_ms: int,
    ) -> None:
        """Set the request's throttle time: the max of the two, recorded against the quota
        that set it."""
        if not bandwidth_ms and not request_ms:
            return
        user = request.context.session.principal.name
        client_id = request.client_id or ""
        if bandwidth_ms > request_ms:
            bytes_manager.record_throttle_time(user, client_id, bandwidth_ms, now_ms)
        else:
            self.quotas.request.record_throttle_time(user, client_id, request_ms, now_ms)
        request.context.throttle_time_ms = max(bandwidth_ms, request_ms)

    @staticmethod
    def _throttled_fetch(request: Request, response: Any) -> Any:
        """An empty Fetch response for the same session (Kafka's `getThrottledResponse`)."""
        body = response.body if isinstance(response, FileResponse) else response
        if isinstance(response, FileResponse):
            response.close()
        return kio_build.response(
            request,
            {
                "error_code": 0,
                "session_id": int(getattr(body, "session_id", 0)),
                "responses": [],
            },
        )
