"""A metric's name and value (Kafka's `MetricName` and `KafkaMetric`).

`MetricName` is Kafka's JMX name (domain, type, name, tags in Kafka's order), which the
Prometheus exposition turns into the JMX exporter's names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from urllib.parse import quote

from sparklog.metrics.stats import Measurable, MetricConfig


def sanitize(name: str) -> str:
    """Kafka's `Sanitizer.sanitize` for a principal name in a metric tag: URL-encoded (UTF-8),
    with a space as `%20` and `*` as `%2A` (JMX patterns), so `CN=app,O=x` is tagged
    `CN%3Dapp%2CO%3Dx` as Kafka's quota metrics tag it. Java's URLEncoder also encodes `~`."""
    return quote(name, safe="").replace("~", "%7E")


@dataclass(frozen=True, slots=True)
class MetricName:
    """A metric's Kafka JMX name: `domain:type=T,name=N,tag=v,...` (tags in Kafka's order)."""

    domain: str
    type: str
    name: str
    tags: tuple[tuple[str, str], ...] = ()
    description: str = field(default="", compare=False)

    @classmethod
    def of(
        cls,
        domain: str,
        type_: str,
        name: str,
        tags: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        description: str = "",
    ) -> MetricName:
        items = tags.items() if isinstance(tags, Mapping) else tags
        return cls(domain, type_, name, tuple((k, str(v)) for k, v in items), description)

    @property
    def jmx(self) -> str:
        tags = "".join(f",{k}={v}" for k, v in self.tags)
        return f"{self.domain}:type={self.type},name={self.name}{tags}"

    def tag(self, key: str) -> str | None:
        for k, v in self.tags:
            if k == key:
                return v
        return None


class MetricKind(Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    SUMMARY = "summary"


#: The quantiles a summary exposes (Yammer's histogram attributes: 50th … 999thPercentile).
SUMMARY_QUANTILES = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)


class KafkaMetric:
    """One named value of the registry."""

    __slots__ = ("name", "kind", "config", "_measurable", "_clock")

    def __init__(
        self,
        clock: Callable[[], int],
        name: MetricName,
        kind: MetricKind,
        measurable: Measurable | Callable[[], float],
        config: MetricConfig,
    ) -> None:
        self._clock = clock
        self.name = name
        self.kind = kind
        self._measurable = measurable
        self.config = config

    def value(self, now_ms: int | None = None) -> float:
        if now_ms is None:
            now_ms = self._clock()
        measurable = self._measurable
        if callable(measurable):
            return float(measurable())
        return measurable.measure(self.config, now_ms)

    @property
    def measurable(self) -> Measurable | Callable[[], float]:
        return self._measurable
