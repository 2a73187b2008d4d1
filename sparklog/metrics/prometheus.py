"""The Prometheus exposition of a registry, under the names Kafka's dashboards expect.

Most Kafka dashboards and alerts are written against the Prometheus JMX exporter with
Strimzi's `kafka-metrics.yaml` rules (`lowercaseOutputName`, `lowercaseOutputLabelNames`), so
a registry's metrics are exposed under the names those rules give Kafka's MBeans:

- a counter (a Yammer meter, `Metrics.meter`): `domain_type_name_total`, a trailing
  `PerSec` dropped: `kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t` →
  `kafka_server_brokertopicmetrics_bytesin_total{topic="t"}`;
- a gauge: `domain_type_name`, a `...Percent` name as `..._percent`
  (`kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent` →
  `kafka_network_socketserver_networkprocessoravgidle_percent`);
- a summary (a Yammer histogram, `Metrics.histogram`): `domain_type_name{quantile="0.99"}`
  for Yammer's 50th … 999thPercentile attributes (Strimzi's `quantile: "0.$N"` labels:
  0.50, 0.75, 0.95, 0.98, 0.99, 0.999) plus cumulative `_count` and `_sum`;
- a Kafka-metrics-library name (type = the metric group, name = the attribute:
  `kafka.server:type=Produce,user=u,client-id=c` attribute `byte-rate`) the same way:
  `kafka_server_produce_byte_rate{user="u",client_id="c"}`.

Everything is lowercased, and any character Prometheus does not allow in a name (`.`, `-`,
...) becomes `_`, in metric and label names alike (`client-id` → `client_id`).

`families(registry, labels)` takes a snapshot of one registry as `prometheus_client` metric
families; it reads live server state, so it runs on the registry's server loop (the HTTP
endpoint asks each loop for its snapshot: `http_endpoint`). `merge` joins the snapshots of
several registries; `RegistryCollector` is the same as a `prometheus_client` Collector for a
user's own `CollectorRegistry` (it reads the registry on the scraping thread: only for a
registry no other thread records into).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from sparklog.metrics.metric import SUMMARY_QUANTILES, KafkaMetric, MetricKind, MetricName
from sparklog.metrics.registry import Histogram, Meter, Metrics

logger = logging.getLogger(__name__)

#: What follows a histogram's quantile label (Strimzi's `quantile: "0.$N"` over Yammer's
#: `50thPercentile` … `999thPercentile`): "0.50", not prometheus_client's "0.5".
QUANTILE_LABELS = tuple("0." + f"{q:.3f}"[2:].rstrip("0").ljust(2, "0") for q in SUMMARY_QUANTILES)

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_PER_SEC = re.compile(r"PerSec\w*$")
_PERCENT = re.compile(r"Percent\w*$")


def _sanitize(text: str) -> str:
    return _INVALID.sub("_", text).lower()


@lru_cache(maxsize=65536)
def family_name(domain: str, type_: str, name: str, kind: MetricKind) -> str:
    """The exposed name (for a counter without `_total`: `prometheus_client` appends it)."""
    if kind is MetricKind.COUNTER:
        name = _PER_SEC.sub("", name)
    elif kind is MetricKind.GAUGE and _PERCENT.search(name):
        name = _PERCENT.sub("", name) + "_percent"
    base = _sanitize(f"{domain}_{type_}_{name}")
    if kind is MetricKind.COUNTER and base.endswith("_total"):
        base = base[: -len("_total")]
    return re.sub(r"_+", "_", base)


@lru_cache(maxsize=1024)
def label_name(tag: str) -> str:
    return _sanitize(tag)


def exposed(name: MetricName, kind: MetricKind) -> tuple[str, dict[str, str]]:
    """`name`'s family name and labels as the exposition shows them."""
    return family_name(name.domain, name.type, name.name, kind), {
        label_name(k): v for k, v in name.tags
    }


def families(registry: Metrics, labels: Mapping[str, str] | None = None) -> list[Metric]:
    """A snapshot of `registry` as metric families, `labels` added to every sample. Reads
    live state: call it on the thread that records into `registry`."""
    builder = FamilyBuilder(registry, labels)
    for metric in registry:
        builder.add(metric)
    return builder.families()


class FamilyBuilder:
    """A snapshot taken metric by metric (so a big registry can be read in slices, the
    server's loop serving requests between them: `http_endpoint`)."""

    def __init__(self, registry: Metrics, labels: Mapping[str, str] | None = None) -> None:
        self.now_ms = registry.now_ms()
        self.labels = dict(labels or {})
        self._out: dict[str, Metric] = {}

    def add(self, metric: KafkaMetric) -> None:
        kind = metric.kind
        fname, tags = exposed(metric.name, kind)
        if self.labels:
            tags = {**tags, **self.labels}
        family = self._out.get(fname)
        if family is None:
            family = self._out[fname] = _new_family(fname, metric.name, kind)
        elif family.type != kind.value:
            logger.debug("%s: %s collides with a %s", fname, metric.name.jmx, family.type)
            return
        measurable = metric.measurable
        if kind is MetricKind.COUNTER:
            assert isinstance(measurable, Meter)
            family.samples.append(Sample(fname + "_total", tags, measurable.count))
        elif kind is MetricKind.SUMMARY:
            assert isinstance(measurable, Histogram)
            _add_summary(family, fname, tags, measurable, self.now_ms)
        else:
            try:
                value = metric.value(self.now_ms)
            except Exception:  # noqa: BLE001 - one broken gauge must not fail the scrape
                logger.debug("gauge %s failed", metric.name.jmx, exc_info=True)
                return
            family.samples.append(Sample(fname, tags, value))

    def families(self) -> list[Metric]:
        return list(self._out.values())


def _new_family(fname: str, name: MetricName, kind: MetricKind) -> Metric:
    doc = name.description or f"{name.domain}:type={name.type},name={name.name}"
    if kind is MetricKind.COUNTER:
        return CounterMetricFamily(fname, doc)
    if kind is MetricKind.SUMMARY:
        return Metric(fname, doc, "summary")
    return GaugeMetricFamily(fname, doc)


def _add_summary(
    family: Metric, fname: str, tags: dict[str, str], histogram: Histogram, now_ms: int
) -> None:
    for label, value in zip(QUANTILE_LABELS, histogram.quantiles(now_ms=now_ms), strict=True):
        family.samples.append(Sample(fname, {**tags, "quantile": label}, value))
    family.samples.append(Sample(fname + "_count", tags, float(histogram.count)))
    family.samples.append(Sample(fname + "_sum", tags, histogram.sum))


def merge(snapshots: Iterable[Sequence[Metric]]) -> list[Metric]:
    """One family per name from several registries' snapshots (the text format allows a
    name's `# TYPE` once); a family whose type differs from the first one's is dropped."""
    out: dict[str, Metric] = {}
    for snapshot in snapshots:
        for family in snapshot:
            have = out.get(family.name)
            if have is None:
                out[family.name] = family
            elif have.type == family.type and have is not family:
                merged = Metric(have.name, have.documentation, have.type)
                merged.samples = [*have.samples, *family.samples]
                out[family.name] = merged
    return list(out.values())


class Snapshot:
    """Families taken earlier, as a Collector (`prometheus_client.generate_latest(snapshot)`)."""

    def __init__(self, metric_families: Sequence[Metric]) -> None:
        self._families = list(metric_families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class RegistryCollector:
    """A `prometheus_client` Collector over one registry (`CollectorRegistry.register`).
    It reads the registry on the scraping thread: use it for a registry recorded into by that
    thread only (a client's, a test's); servers are exposed through `http_endpoint`."""

    def __init__(self, registry: Metrics, labels: Mapping[str, str] | None = None) -> None:
        self.registry = registry
        self.labels = dict(labels or {})

    def collect(self) -> Iterator[Metric]:
        return iter(families(self.registry, self.labels))

    def describe(self) -> list[Metric]:
        return []  # no names up front: the registry's metrics come and go
