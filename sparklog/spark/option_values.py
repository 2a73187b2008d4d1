"""Scalar option values of `format("sparklog")`: Spark's spellings, numbers, booleans, time
strings, per-partition JSON and topic names, each failing with an error naming the option."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any


class SparkLogOptionError(ValueError):
    """An option of `format("sparklog")` is missing, unknown in this context, or malformed."""


_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def check_topic_name(topic: str, where: str) -> None:
    """Kafka's `Topic.validate`: 1..249 of [a-zA-Z0-9._-], not "." or ".."."""
    if _LEGAL_TOPIC.fullmatch(topic) is None or topic in (".", ".."):
        raise SparkLogOptionError(
            f"{where}: {topic!r} is not a valid topic name (legal: 1 to 249 of "
            "[a-zA-Z0-9._-], not '.' or '..')"
        )


def display(key: str) -> str:
    """Spark's spelling of a lower-cased option name, for messages."""
    names = {
        "subscribepattern": "subscribePattern",
        "startingoffsets": "startingOffsets",
        "endingoffsets": "endingOffsets",
        "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
        "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
        "startingtimestamp": "startingTimestamp",
        "endingtimestamp": "endingTimestamp",
        "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy",
        "failondataloss": "failOnDataLoss",
        "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs",
        "fetchoffset.numretries": "fetchOffset.numRetries",
        "fetchoffset.retryintervalms": "fetchOffset.retryIntervalMs",
        "maxoffsetspertrigger": "maxOffsetsPerTrigger",
        "minoffsetspertrigger": "minOffsetsPerTrigger",
        "maxtriggerdelay": "maxTriggerDelay",
        "minpartitions": "minPartitions",
        "maxrecordsperpartition": "maxRecordsPerPartition",
        "groupidprefix": "groupIdPrefix",
        "includeheaders": "includeHeaders",
        "exactlyonce": "exactlyOnce",
        "checkpointlocation": "checkpointLocation",
    }
    return names.get(key, key)


def partition_map(raw: str, key: str, example: str) -> dict[tuple[str, int], int]:
    """Spark's per-partition JSON, `{"topic": {"0": n}}`, as {(topic, partition): n}."""
    data = parse_json(raw, key, example)
    out: dict[tuple[str, int], int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise SparkLogOptionError(
                f"option '{display(key)}': topic {topic!r} needs an object of partition -> "
                f"number, got {parts!r}; expected e.g. {example}"
            )
        for partition, value in parts.items():
            if not is_int(partition) or not is_int(value):
                raise SparkLogOptionError(
                    f"option '{display(key)}': {topic!r} partition {partition!r} -> {value!r} "
                    f"is not a number pair; expected e.g. {example}"
                )
            out[(topic, int(partition))] = int(value)
    return dict(sorted(out.items()))


def parse_json(raw: str, key: str, example: str) -> dict[str, Any]:
    """A JSON object, or an error showing `example`."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise SparkLogOptionError(
            f"option '{display(key)}' is not valid JSON of the expected shape: expected e.g. "
            f"{example}, got {raw!r}"
        )
    return data


def is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value) is not None


def parse_bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in opts:
        return default
    value = opts[key].strip().lower()
    if value not in ("true", "false"):
        raise SparkLogOptionError(
            f"option '{display(key)}' must be 'true' or 'false', got {opts[key]!r}"
        )
    return value == "true"


def parse_long(opts: Mapping[str, str], key: str, default: int, low: int) -> int:
    if key not in opts:
        return default
    raw = opts[key].strip()
    if not is_int(raw) or int(raw) < low:
        raise SparkLogOptionError(
            f"option '{display(key)}' must be an integer >= {low}, got {opts[key]!r}"
        )
    return int(raw)


def parse_positive_long(opts: Mapping[str, str], key: str) -> int | None:
    if key not in opts:
        return None
    raw = opts[key].strip()
    if not is_int(raw) or int(raw) <= 0:
        raise SparkLogOptionError(
            f"option '{display(key)}' must be a positive integer, got {opts[key]!r}"
        )
    return int(raw)


_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000}
_UNIT_MS |= {"h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str) -> int:
    """Spark's time strings (`JavaUtils.timeStringAsMs`): "15m", "30s", "100ms", "2h", "500"."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a duration like 500ms, 30s, 15m, 1h or 1d")
    unit = m.group(2).lower() if m.group(2) else None
    return int(int(m.group(1)) * _UNIT_MS[unit])


def parse_duration_ms(opts: Mapping[str, str], key: str, default: int) -> int:
    if key not in opts:
        return default
    try:
        return duration_ms(opts[key])
    except ValueError as e:
        raise SparkLogOptionError(f"option '{display(key)}': {e}") from None
