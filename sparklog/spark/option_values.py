"""Option values of `format("sparklog")` the settings registry's types do not cover: Spark's
spellings, time strings, per-partition JSON and topic names, each failing with an error naming
the option. Numbers and booleans are parsed by the registry (`options.py` declares them)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sparklog.settings import Check, ConfigError, ConfigType, Range, Scope, Setting, Table, define
from sparklog.structs import TopicPartition

DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark: spark.network.timeout
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # "15m"
ASSIGN, SUBSCRIBE, PATTERN = "assign", "subscribe", "subscribepattern"


class SparkLogOptionError(ConfigError):
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
        "remotetableroot": "remoteTableRoot",
        "remotetablereads": "remoteTableReads",
    }
    return names.get(key, key)


def partition_map(raw: str, key: str, example: str) -> dict[TopicPartition, int]:
    """Spark's per-partition JSON, `{"topic": {"0": n}}`, as {(topic, partition): n}."""
    data = parse_json(raw, key, example)
    out: dict[TopicPartition, int] = {}
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
            out[TopicPartition(topic, int(partition))] = int(value)
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


# -- the options, declared into the settings registry (scope spark-option) ------------


def _option(key: str, kind: ConfigType, default: Any, doc: str, rule: Any = None, **extra: Any):
    return Setting(
        key,
        kind,
        default,
        rule,
        doc=doc,
        scope=Scope.SPARK_OPTION,
        display=display(key),
        **extra,
    )


_POSITIVE = Range(1, text="a positive integer")
_TIMESTAMP = Range(0, text="a timestamp in epoch milliseconds (>= 0)")
_BOOL, _LONG, _STR = ConfigType.BOOLEAN, ConfigType.LONG, ConfigType.STRING
#: Options of Spark's Kafka source (`KafkaSourceProvider`), lower-cased as Spark hands them
#: over. Strings are parsed by the functions below (JSON, patterns, offsets).
_SOURCE = (
    _option(ASSIGN, _STR, None, "exactly these partitions (JSON)"),
    _option(SUBSCRIBE, _STR, None, "these topics (comma-separated)"),
    _option(PATTERN, _STR, None, "every topic whose whole name matches this regex"),
    _option("startingoffsets", _STR, None, "earliest, latest, group or per-partition JSON"),
    _option("endingoffsets", _STR, None, "latest or per-partition JSON (batch)"),
    _option("startingoffsetsbytimestamp", _STR, None, "per-partition timestamps (JSON)"),
    _option("endingoffsetsbytimestamp", _STR, None, "per-partition timestamps (JSON)"),
    _option("startingtimestamp", _LONG, None, "every partition from this time", _TIMESTAMP),
    _option("endingtimestamp", _LONG, None, "every partition up to this time", _TIMESTAMP),
    _option(
        "startingoffsetsbytimestampstrategy",
        _STR,
        "error",
        "no record at the timestamp: fail or start at latest",
        Check(lambda v: v in ("error", "latest"), "'error' or 'latest'"),
        parser=lambda raw: str(raw).strip().lower(),
    ),
    _option("failondataloss", _BOOL, True, "fail when offsets are no longer there"),
    _option(
        "kafkaconsumer.polltimeoutms",
        _LONG,
        DEFAULT_POLL_TIMEOUT_MS,
        "a task's poll timeout",
        Range(1, text="an integer >= 1"),
    ),
    _option(
        "fetchoffset.numretries",
        _LONG,
        3,
        "offset lookups retried",
        Range(0, text="an integer >= 0"),
    ),
    _option(
        "fetchoffset.retryintervalms",
        _LONG,
        10,
        "pause between offset lookups",
        Range(0, text="an integer >= 0"),
    ),
    _option("maxoffsetspertrigger", _LONG, None, "records per micro-batch at most", _POSITIVE),
    _option("minoffsetspertrigger", _LONG, None, "records a micro-batch waits for", _POSITIVE),
    _option(
        "maxtriggerdelay",
        _LONG,
        DEFAULT_MAX_TRIGGER_DELAY_MS,
        "the longest minOffsetsPerTrigger waits",
        Range(0, text="a duration like 500ms, 30s, 15m, 1h or 1d"),
        parser=lambda raw: duration_ms(str(raw)),
    ),
    _option("minpartitions", _LONG, None, "split ranges into at least this many tasks", _POSITIVE),
    _option("maxrecordsperpartition", _LONG, None, "split ranges larger than this", _POSITIVE),
    _option("groupidprefix", _STR, None, "accepted (Spark's consumer group prefix)"),
    _option("includeheaders", _BOOL, False, "add a headers column"),
    _option("path", _STR, None, "accepted (Spark passes load(path))"),
    # sparklog only: the topics' remote tier (docs/tiered-storage.md "Spark reads")
    _option(
        "remotetableroot",
        _STR,
        None,
        "where topic tables live (default: the brokers' remote.table.root, for topics with "
        "remote.storage.enable=true)",
    ),
    _option(
        "remotetablereads",
        _BOOL,
        True,
        "read the offsets a topic's table holds from its Parquet files in Spark tasks",
    ),
)
_SINK = (
    _option("topic", _STR, None, "the topic rows without a topic column go to"),
    _option("includeheaders", _BOOL, False, "write the headers column"),
    _option("path", _STR, None, "accepted (Spark passes save(path))"),
    _option(
        "exactlyonce", _BOOL, None, "streaming: exactly once (default: when transactions work)"
    ),
    _option("transactional", _BOOL, False, "batch: the whole job visible at once, or nothing"),
    _option("checkpointlocation", _STR, None, "the streaming query's checkpoint"),
)
SOURCE_OPTIONS: Table = define(*(replace(s, group="source") for s in _SOURCE))
SINK_OPTIONS: Table = define(*(replace(s, group="sink") for s in _SINK))


def option_value(table: Table, opts: Mapping[str, str], key: str) -> Any:
    """The typed option (its default when absent); SparkLogOptionError names a bad one."""
    if key not in opts:
        return table[key].default
    try:
        return table[key].parse(opts[key])
    except ConfigError as e:
        raise SparkLogOptionError(str(e)) from None
