"""The streaming source's lag metrics, as Spark's Kafka source reports them.

Spark's Kafka source puts `minOffsetsBehindLatest`, `maxOffsetsBehindLatest` and
`avgOffsetsBehindLatest` into `StreamingQueryProgress.sources[].metrics`
(`KafkaMicroBatchStream.metrics`: per partition, the latest offset it saw minus the offset
the batch consumed up to; a partition the batch did not cover counts from 0). That path needs
the JVM stream to implement `ReportsSourceMetrics`, and PySpark 4.3's Python data source
stream (`PythonMicroBatchStream`, `PythonMicroBatchStreamWithAdmissionControl`) does not: a
Python source cannot fill `sources[].metrics` (nor its `description`, Spark's `toString` of
the JVM object). What does pass through is `reportLatestOffset()`, which sparklog's reader
implements, so every progress carries both the batch's `endOffset` and the `latestOffset`
seen, and the same numbers follow from them:

- `source_metrics(progress)`: the metrics of each sparklog source of one progress (a
  `StreamingQueryProgress`, or its JSON dict as `query.lastProgress` gives it);
- `SourceLagListener`: a `StreamingQueryListener` keeping the latest metrics per query id (and
  logging them at debug level), for those who watch progress through listeners.

`estimatedTotalBytesBehindLatest` (a Databricks connector metric) needs bytes per offset,
which neither the offsets nor the progress carry; it is left out rather than made up.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from sparklog.spark.offsets import PartitionOffsets, from_json_dict

logger = logging.getLogger(__name__)


def offsets_behind_latest(
    consumed: Mapping[str, Mapping[str, int]], latest: Mapping[str, Mapping[str, int]]
) -> dict[str, str]:
    """Spark's `KafkaMicroBatchStream.metrics` over sparklog's offsets JSON
    (`{"topic": {"partition": offset}}`): min/max/avg of latest − consumed per partition,
    as strings (Spark's metrics map is string to string); {} when there is nothing to say."""
    behind = [
        int(offset) - int(consumed.get(topic, {}).get(partition, 0))
        for topic, partitions in latest.items()
        for partition, offset in partitions.items()
    ]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": str(sum(behind) / len(behind)),
    }


def _as_dict(progress: Any) -> dict[str, Any]:
    if isinstance(progress, Mapping):
        return dict(progress)
    text = getattr(progress, "json", None)  # pyspark's StreamingQueryProgress
    if isinstance(text, str):
        return dict(json.loads(text))
    raise TypeError(f"not a streaming progress: {type(progress).__name__}")


def _offsets(value: Any) -> dict[str, dict[str, int]] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    if not all(
        isinstance(parts, Mapping) and all(str(p).isdigit() for p in parts)
        for parts in value.values()
    ):
        return None  # another source's offsets (a Delta table's, a rate source's)
    return {str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in value.items()}


def source_metrics(progress: Any) -> list[dict[str, str]]:
    """The lag metrics of each source of `progress` whose offsets are sparklog's (Kafka's
    shape), in the order of `progress.sources`; {} for one without a latest offset yet."""
    out = []
    for source in _as_dict(progress).get("sources") or ():
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        if end is None and latest is None:
            continue
        out.append({} if end is None or latest is None else offsets_behind_latest(end, latest))
    return out


class SourceLagListener(StreamingQueryListener):
    """Keeps the latest `source_metrics` of every query: `spark.streams.addListener(
    SourceLagListener())`, then `listener.metrics(query.id)`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, list[dict[str, str]]] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        metrics = source_metrics(event.progress)
        with self._lock:
            self._latest[str(event.progress.id)] = metrics
        logger.debug("query %s sources behind latest: %s", event.progress.id, metrics)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def metrics(self, query_id: Any) -> list[dict[str, str]]:
        """The sources' metrics of `query_id`'s latest progress ([] before its first one)."""
        with self._lock:
            return list(self._latest.get(str(query_id), []))


def source_offsets(progress: Any) -> list[PartitionOffsets]:
    """The `endOffset` of each source of `progress` whose offsets have sparklog's (Kafka's)
    shape, as partition offsets, in the order of `progress.sources`."""
    out = []
    for source in _as_dict(progress).get("sources") or ():
        end = _offsets(source.get("endOffset"))
        if end is not None:
            out.append(from_json_dict(end))
    return out
