"""The group and transaction coordinators' metrics under Kafka's names, registered into
`GroupCoordinatorServer.metrics`.

- Groups (Kafka's `GroupCoordinatorMetrics`): `kafka.coordinator.group:type=
  GroupMetadataManager,name=NumGroups` (every group), `NumGroupsPreparingRebalance|
  NumGroupsCompletingRebalance|NumGroupsStable|NumGroupsEmpty|NumGroupsDead` (classic groups
  by state), `NumOffsets`; `kafka.server:type=group-coordinator-metrics` `group-count
  {protocol}`, `consumer-group-count{state}` (KIP-848 groups), `offset-commit-rate|count`.
- The runtime (Kafka's `CoordinatorRuntimeMetrics`): `batch-flush-time-ms`, which in sparklog
  is the Delta commit of the offsets table (one group commit of many writes), as a summary.
- Transactions: Kafka has no broker-side counts of open transactions (its producers report
  `txn-*` times); sparklog's, named as Kafka's metrics library would under `kafka.server:
  type=transaction-coordinator-metrics`: `transaction-count{state}`, `active-transaction-count`
  (not complete), `partitions-in-transaction` (over open transactions), `transaction-commit-
  rate|count`, `transaction-abort-rate|count`, `pending-marker-jobs`.

Gauges read the cores at scrape time, which may be on another thread than the coordinator's
loop: a pass that meets a dict the loop is changing is retried, then reads as NaN.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Histogram, Metrics
from sparklog.metrics.sensor import Sensor
from sparklog.metrics.stats import CumulativeSum, Rate

logger = logging.getLogger(__name__)

GROUP_DOMAIN = "kafka.coordinator.group"
GROUP_MANAGER = "GroupMetadataManager"
GROUP_METRICS = "group-coordinator-metrics"
TXN_METRICS = "transaction-coordinator-metrics"
#: classic group states (Kafka's `ClassicGroupState`) -> the gauge counting them
CLASSIC_STATES = {
    "PreparingRebalance": "NumGroupsPreparingRebalance",
    "CompletingRebalance": "NumGroupsCompletingRebalance",
    "Stable": "NumGroupsStable",
    "Empty": "NumGroupsEmpty",
    "Dead": "NumGroupsDead",
}
#: KIP-848 consumer group states (Kafka's `ConsumerGroupState`)
CONSUMER_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")
#: transaction states shown (Kafka's `TransactionState`)
TXN_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "PrepareEpochFence",
    "Dead",
)


def _retrying(read: Callable[[], float]) -> Callable[[], float]:
    def gauge() -> float:
        for _ in range(3):
            try:
                return float(read())
            except RuntimeError:  # dict changed size: the loop is mid-change
                continue
        return math.nan

    return gauge


class CoordinatorMetrics:
    """Gauges over the cores and the sensors the server records into."""

    def __init__(self, metrics: Metrics, server: Any) -> None:
        #: the `GroupCoordinatorServer` (its `core`, `txn` and `markers` appear at start)
        self.server = server
        self.metrics = metrics
        manager = {
            "NumGroups": lambda: len(self._groups()),
            "NumOffsets": self._num_offsets,
        }
        for state, gauge in CLASSIC_STATES.items():
            manager[gauge] = self._classic_in(state)
        for name, read in manager.items():
            metrics.gauge(MetricName.of(GROUP_DOMAIN, GROUP_MANAGER, name), _retrying(read))
        for protocol in ("classic", "consumer"):
            metrics.gauge(
                _server(GROUP_METRICS, "group-count", {"protocol": protocol}),
                _retrying(self._of_protocol(protocol)),
            )
        for state in CONSUMER_STATES:
            metrics.gauge(
                _server(GROUP_METRICS, "consumer-group-count", {"state": state}),
                _retrying(self._consumer_in(state)),
            )
        self.offset_commits: Sensor = _meter(metrics, GROUP_METRICS, "offset-commit")
        self.batch_flush_time_ms: Histogram = metrics.histogram(
            _server(GROUP_METRICS, "batch-flush-time-ms")
        )
        for state in TXN_STATES:
            metrics.gauge(
                _server(TXN_METRICS, "transaction-count", {"state": state}),
                _retrying(self._txn_in(state)),
            )
        metrics.gauge(_server(TXN_METRICS, "active-transaction-count"), _retrying(self._active))
        metrics.gauge(
            _server(TXN_METRICS, "partitions-in-transaction"), _retrying(self._txn_partitions)
        )
        metrics.gauge(_server(TXN_METRICS, "pending-marker-jobs"), self._pending_markers)
        self.commits: Sensor = _meter(metrics, TXN_METRICS, "transaction-commit")
        self.aborts: Sensor = _meter(metrics, TXN_METRICS, "transaction-abort")

    # -- hooks the server binds to the cores ------------------------------------------------

    def on_offsets_committed(self, count: int) -> None:
        self.offset_commits.record(count)

    def on_transaction_completed(self, committed: bool) -> None:
        (self.commits if committed else self.aborts).record()

    def on_table_commit(self, rows: int, elapsed_ms: float) -> None:
        self.batch_flush_time_ms.update(elapsed_ms)

    # -- gauges -----------------------------------------------------------------------------

    def _groups(self) -> list[Any]:
        core = getattr(self.server, "core", None)
        return [] if core is None else list(core.groups.values())

    def _classic_in(self, state: str) -> Callable[[], float]:
        return lambda: sum(
            1
            for g in self._groups()
            if getattr(g, "group_type", "classic") == "classic" and g.state.value == state
        )

    def _consumer_in(self, state: str) -> Callable[[], float]:
        return lambda: sum(
            1
            for g in self._groups()
            if getattr(g, "group_type", "classic") == "consumer" and g.state.value == state
        )

    def _of_protocol(self, protocol: str) -> Callable[[], float]:
        return lambda: sum(
            1 for g in self._groups() if getattr(g, "group_type", "classic") == protocol
        )

    def _num_offsets(self) -> float:
        core = getattr(self.server, "core", None)
        return 0 if core is None else sum(len(o) for _, o in core.offsets.items())

    def _transactions(self) -> list[Any]:
        txn = getattr(self.server, "txn", None)
        return [] if txn is None else list(txn.transactions.values())

    def _txn_in(self, state: str) -> Callable[[], float]:
        return lambda: Counter(str(t.state) for t in self._transactions()).get(state, 0)

    def _active(self) -> float:
        return sum(1 for t in self._transactions() if not t.state.is_complete)

    def _txn_partitions(self) -> float:
        return sum(len(t.partitions) for t in self._transactions() if not t.state.is_complete)

    def _pending_markers(self) -> float:
        markers = getattr(self.server, "markers", None)
        return 0 if markers is None else markers.pending()


def _server(type_: str, name: str, tags: dict[str, str] | None = None) -> MetricName:
    return MetricName.of("kafka.server", type_, name, tags or {})


def _meter(metrics: Metrics, type_: str, prefix: str) -> Sensor:
    """A sensor with Kafka's `Meter` pair: `<prefix>-rate` (per second over the sampled
    windows) and `<prefix>-count` (cumulative)."""
    sensor = metrics.sensor(f"{type_}:{prefix}")
    sensor.add(_server(type_, f"{prefix}-rate"), Rate())
    sensor.add(_server(type_, f"{prefix}-count"), CumulativeSum())
    return sensor
