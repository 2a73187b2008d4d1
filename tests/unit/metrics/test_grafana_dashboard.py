"""The Grafana dashboard's per-client quota panels against what a broker's quota managers
serve: each panel selects only client-entity series (not sparklog's per-topic quota series,
which share the families `kafka_server_produce_byte_rate` / `..._throttle_time`) and groups
by every label that tells client entities apart, so no two entities fold into one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sparklog.metadata.quotas import ClientQuotaEntity, QuotasImage, quota_record
from sparklog.metrics.prometheus import RegistryCollector
from sparklog.metrics.quota_manager import ClientQuotaManager, QuotaType, TopicQuotaManager
from sparklog.metrics.registry import Metrics
from sparklog.metrics.stats import MetricConfig

DASHBOARD = Path(__file__).resolve().parents[3] / "docs" / "grafana" / "sparklog-overview.json"
#: `agg by (labels) (family{selector})`, the shape of the dashboard's quota queries
QUERY = re.compile(
    r"^(?:sum|max) by \(([^)]*)\) \((kafka_server_(?:produce|fetch)_\w+)(\{[^}]*\})?\)$"
)
NOW_MS = 1_000_000


def served_quota_samples() -> list:
    """One broker's quota metrics with a client-id, a client-id-prefix and a topic quota,
    each gone over (so byte rates and throttle times exist for all three)."""
    image = QuotasImage()
    for entries in ({"client-id": "app"}, {"client-id-prefix": "etl-"}, {"topic": "orders"}):
        for key in ("producer_byte_rate", "consumer_byte_rate"):
            image.replay(quota_record(ClientQuotaEntity.of(entries), key, 100.0))
    metrics = Metrics(clock=lambda: NOW_MS)
    config = MetricConfig(samples=11, time_window_ms=1000)
    for quota_type in (QuotaType.PRODUCE, QuotaType.FETCH):
        clients = ClientQuotaManager(metrics, quota_type, config, lambda: image)
        topics = TopicQuotaManager(metrics, quota_type, config, lambda: image)
        for client_id in ("app", "etl-7"):
            assert clients.record_and_get_throttle_time_ms("ANONYMOUS", client_id, 10**5, NOW_MS)
        assert topics.record_topics_and_get_throttle_time_ms({"orders": 10**5}, NOW_MS)
    collectors = CollectorRegistry()
    collectors.register(RegistryCollector(metrics))
    text = generate_latest(collectors).decode()
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def quota_queries() -> list[tuple[set[str], str, dict[str, str]]]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            if not re.search(r"kafka_server_(produce|fetch)_", target["expr"]):
                continue
            match = QUERY.match(target["expr"])
            assert match, f"unexpected shape of a quota query: {target['expr']}"
            by = {x.strip() for x in match.group(1).split(",")}
            selector = dict(re.findall(r'(\w+)="([^"]*)"', match.group(3) or ""))
            queries.append((by, match.group(2), selector))
    return queries


def test_quota_panels_show_client_entities_only_each_on_its_own_line() -> None:
    samples = served_quota_samples()
    queries = quota_queries()
    assert queries, "the dashboard has no per-client quota panel"
    for by, family, selector in queries:
        served = [s for s in samples if s.name == family]
        assert any("topic" in s.labels for s in served), family  # both kinds are served
        selected = [s for s in served if all(s.labels.get(k, "") == v for k, v in selector.items())]
        assert selected and not any(s.labels.get("topic") for s in selected), (family, selector)
        groups = {tuple(s.labels.get(k, "") for k in sorted(by)) for s in selected}
        assert len(groups) == len(selected) == 2, (family, by, [s.labels for s in selected])
