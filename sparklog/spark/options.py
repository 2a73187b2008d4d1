"""Options of `format("sparklog")`: Spark's Kafka connector option names, parsed and checked.

Pure Python (no pyspark): the data source parses once on the driver and carries the frozen
result to executors. Names, defaults, precedence and error wording follow Spark's
`KafkaSourceProvider` (`validateGeneralOptions`, `validateBatchOptions`,
`validateStreamOptions`, `getKafkaOffsetRangeLimit`) so code written for `format("kafka")`
behaves the same; every error names the option and how to fix it.

Spark hands options over in a case-insensitive dict with lower-cased keys; `kafka.*` options
keep their (lower-case, which is what Kafka's setting names are) suffix and go to the client.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparklog.spark.option_values import (
    ASSIGN,
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    DEFAULT_POLL_TIMEOUT_MS,
    PATTERN,
    SINK_OPTIONS,
    SOURCE_OPTIONS,
    SUBSCRIBE,
    SparkLogOptionError,
    check_topic_name,
    display,
    is_int,
    option_value,
    parse_json,
    partition_map,
)
from sparklog.structs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition

logger = logging.getLogger(__name__)


DEFAULT_MAX_POLL_RECORDS = 10_000  # rows per poll_arrow batch (Spark's Arrow batch size)
DEFAULT_FETCH_MAX_WAIT_MS = 10
#: A range read knows its records exist: 8 MiB per Fetch instead of the client's 1 MiB means an
#: eighth of the requests, wake-ups and response parses (bench_dataframe: read workers 3.1 ->
#: 2.4 CPU-s, broker 0.7 -> 0.3 per 5M rows); `kafka.max.partition.fetch.bytes` overrides it.
DEFAULT_RANGE_FETCH_BYTES = 8 << 20

_STRATEGIES = (ASSIGN, SUBSCRIBE, PATTERN)
_STRATEGY_NAMES = "assign, subscribe, subscribePattern"

# Kafka client settings Spark refuses for the source, and why (KafkaSourceProvider).
_SOURCE_REFUSED = {
    "auto.offset.reset": (
        "set the source option 'startingOffsets' to 'earliest' or 'latest' instead: the "
        "query tracks which offsets it consumed itself"
    ),
    "key.deserializer": (
        "keys are returned as binary; use DataFrame operations (e.g. CAST(key AS STRING)) "
        "to deserialize them"
    ),
    "value.deserializer": (
        "values are returned as binary; use DataFrame operations (e.g. CAST(value AS STRING)) "
        "to deserialize them"
    ),
    "enable.auto.commit": "the query commits its offsets in its checkpoint",
    "interceptor.classes": "interceptors could change records behind the query's back",
}
_SINK_REFUSED = {
    "key.serializer": "keys are written as binary; give a string or binary 'key' column",
    "value.serializer": "values are written as binary; give a string or binary 'value' column",
    "interceptor.classes": "interceptors could change records behind the query's back",
}
#: Not a client setting: streaming sources commit each batch's offsets to this group
#: (stream_reader.commit) and batch reads may start from its offsets; sinks ignore it.
_SPARK_ONLY = {"group.id"}


# ------------------------------------------------------------------------------ values


@dataclass(frozen=True, slots=True)
class Assign:
    """`assign`: exactly these partitions."""

    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class Subscribe:
    """`subscribe`: every partition of these topics, including partitions added later."""

    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubscribePattern:
    """`subscribePattern`: every topic whose whole name matches `pattern`."""

    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


Subscription = Assign | Subscribe | SubscribePattern


@dataclass(frozen=True, slots=True)
class EarliestOffsets:
    """Every partition from its log start offset."""


@dataclass(frozen=True, slots=True)
class LatestOffsets:
    """Every partition from its end (the high watermark, or the LSO with read_committed)."""


@dataclass(frozen=True, slots=True)
class SpecificOffsets:
    """Offsets per partition; -2 means earliest and -1 latest (Spark's JSON)."""

    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class SpecificTimestamps:
    """Per partition: the first offset whose timestamp is >= the given epoch ms."""

    timestamps: Mapping[TopicPartition, int]
    strategy: str = "error"  # no such record when starting: "error" or "latest"


@dataclass(frozen=True, slots=True)
class GlobalTimestamp:
    """Every partition: the first offset whose timestamp is >= `timestamp_ms`."""

    timestamp_ms: int
    strategy: str = "error"


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    """`startingOffsets="group"`: the committed offsets of `kafka.group.id` (a partition the
    group never committed starts at its log start offset). sparklog only."""


OffsetSpec = (
    EarliestOffsets
    | LatestOffsets
    | SpecificOffsets
    | SpecificTimestamps
    | GlobalTimestamp
    | GroupOffsets
)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Everything the source needs, parsed once on the driver and pickled to executors."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # None for streaming queries
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    #: kafka.* without the prefix; out of repr: sasl.jaas.config and ssl.* passwords are here
    kafka: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: the remote tier: read what topic tables hold from their files (docs/tiered-storage.md)
    remote_table_reads: bool = True
    remote_table_root: str | None = None
    #: `storage.options.<key>` without the prefix: delta-rs options to reach an object store
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def isolation_level(self) -> str:
        return self.kafka.get("isolation.level", "read_uncommitted")

    def consumer_config(self) -> dict[str, Any]:
        """Settings of the consumers that read ranges: pass-through first, ours enforced."""
        config: dict[str, Any] = {
            "max.poll.records": DEFAULT_MAX_POLL_RECORDS,
            # A range read knows its records exist: long polls only slow down its last poll.
            "fetch.max.wait.ms": DEFAULT_FETCH_MAX_WAIT_MS,
            "max.partition.fetch.bytes": DEFAULT_RANGE_FETCH_BYTES,
            **self.kafka,
        }
        config.pop("group.id", None)
        config["bootstrap.servers"] = self.bootstrap_servers
        config["auto.offset.reset"] = "none"  # out-of-range must surface: failOnDataLoss decides
        config["enable.auto.commit"] = False
        return config

    def admin_config(self) -> dict[str, Any]:
        """Settings of the driver-side offset lookups: the common client settings only."""
        from sparklog.client.config import ADMIN_SETTINGS

        config = {k: v for k, v in self.kafka.items() if k in ADMIN_SETTINGS}
        config["bootstrap.servers"] = self.bootstrap_servers
        return config


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The sink's options: the bootstrap, an optional fixed topic, producer settings."""

    bootstrap_servers: str
    topic: str | None = None
    #: kafka.* without the prefix; out of repr: sasl.jaas.config and ssl.* passwords are here
    kafka: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: streaming: `exactlyOnce` (None: on when the cluster serves transactions)
    exactly_once: bool | None = None
    #: batch: `transactional` (the whole job visible at once, or nothing)
    transactional: bool = False
    #: `kafka.transactional.id`: the prefix of the tasks' transactional ids
    transactional_id: str | None = None
    checkpoint_location: str | None = None

    def producer_config(self) -> dict[str, Any]:
        config: dict[str, Any] = dict(self.kafka)
        config["bootstrap.servers"] = self.bootstrap_servers
        return config

    def admin_config(self) -> dict[str, Any]:
        from sparklog.client.config import ADMIN_SETTINGS

        config = {k: v for k, v in self.kafka.items() if k in ADMIN_SETTINGS}
        config["bootstrap.servers"] = self.bootstrap_servers
        return config


# ------------------------------------------------------------------------------ parsing


def parse_source_options(
    options: Mapping[str, str], *, streaming: bool | None, default_bootstrap: str | None = None
) -> SourceOptions:
    """Check and parse reader options: for a streaming read, a batch read (False), or (None)
    only the checks both share, when Spark asks for the schema before it knows which."""
    opts = _lower(options)
    kafka = _kafka_settings(opts, _SOURCE_REFUSED, "source")
    storage = _storage_options(options)
    _warn_unknown(
        {k: v for k, v in opts.items() if not k.startswith(STORAGE_OPTIONS_PREFIX)},
        frozenset(SOURCE_OPTIONS),
        "source",
    )
    bootstrap = _bootstrap(kafka, default_bootstrap)
    kafka.pop("bootstrap.servers", None)
    _check_client_settings(kafka, "consumer")
    subscription = _subscription(opts)
    strategy = _timestamp_strategy(opts)
    if streaming:
        refuse_ending_in_stream(opts)
        starting = _offset_spec(opts, "starting", LatestOffsets(), strategy)
        ending = None
    elif streaming is None:
        starting = _offset_spec(opts, "starting", EarliestOffsets(), strategy)
        ending = _offset_spec(opts, "ending", LatestOffsets(), "latest")
    else:
        starting = _offset_spec(opts, "starting", EarliestOffsets(), strategy)
        ending = _offset_spec(opts, "ending", LatestOffsets(), "latest")
        _check_batch_bounds(starting, ending)
        for key in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
            if key in opts:
                logger.warning("%s option ignored in batch queries", display(key))
    if isinstance(starting, GroupOffsets) and not kafka.get("group.id"):
        raise SparkLogOptionError(
            "startingOffsets 'group' starts from a consumer group's committed offsets: set "
            "the option 'kafka.group.id' to that group"
        )
    if isinstance(subscription, Assign) and streaming is not None:
        _check_assigned(subscription, starting, "starting")
        if ending is not None:
            _check_assigned(subscription, ending, "ending")
    max_offsets = option_value(SOURCE_OPTIONS, opts, "maxoffsetspertrigger")
    min_offsets = option_value(SOURCE_OPTIONS, opts, "minoffsetspertrigger")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise SparkLogOptionError(
            f"The value of minOffsetsPerTrigger({min_offsets}) is higher than the "
            f"maxOffsetsPerTrigger({max_offsets}); lower the first or raise the second"
        )
    return SourceOptions(
        bootstrap_servers=bootstrap,
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_on_data_loss=option_value(SOURCE_OPTIONS, opts, "failondataloss"),
        include_headers=option_value(SOURCE_OPTIONS, opts, "includeheaders"),
        min_partitions=option_value(SOURCE_OPTIONS, opts, "minpartitions"),
        max_records_per_partition=option_value(SOURCE_OPTIONS, opts, "maxrecordsperpartition"),
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=option_value(SOURCE_OPTIONS, opts, "maxtriggerdelay"),
        poll_timeout_ms=option_value(SOURCE_OPTIONS, opts, "kafkaconsumer.polltimeoutms"),
        fetch_offset_num_retries=option_value(SOURCE_OPTIONS, opts, "fetchoffset.numretries"),
        fetch_offset_retry_interval_ms=option_value(
            SOURCE_OPTIONS, opts, "fetchoffset.retryintervalms"
        ),
        kafka=kafka,
        remote_table_reads=option_value(SOURCE_OPTIONS, opts, "remotetablereads"),
        remote_table_root=(opts.get("remotetableroot") or "").strip() or None,
        storage_options=storage,
    )


def refuse_ending_in_stream(names: Iterable[str]) -> None:
    """The error of a streaming read given one of the batch-only ending options (lower-case
    option names): Spark's Kafka source refuses them the same way."""
    given = set(names)
    for key, what in (
        ("endingoffsets", "ending offset"),
        ("endingoffsetsbytimestamp", "ending timestamp"),
        ("endingtimestamp", "ending timestamp"),
    ):
        if key in given:
            raise SparkLogOptionError(
                f"{what} not valid in streaming queries: remove the option "
                f"'{display(key)}' (a stream reads on as records arrive)"
            )


def parse_sink_options(
    options: Mapping[str, str], *, default_bootstrap: str | None = None
) -> SinkOptions:
    """Check and parse writer options."""
    opts = _lower(options)
    kafka = _kafka_settings(opts, _SINK_REFUSED, "sink")
    _warn_unknown(opts, frozenset(SINK_OPTIONS), "sink")
    bootstrap = _bootstrap(kafka, default_bootstrap)
    kafka.pop("bootstrap.servers", None)
    transactional_id = kafka.pop("transactional.id", None)
    if transactional_id is not None and not transactional_id.strip():
        raise SparkLogOptionError("option 'kafka.transactional.id' is empty: give a prefix")
    _check_client_settings(kafka, "producer")
    exactly_once = option_value(SINK_OPTIONS, opts, "exactlyonce")
    transactional = option_value(SINK_OPTIONS, opts, "transactional")
    topic = opts.get("topic")
    if topic is not None:
        topic = topic.strip()
        if not topic:
            raise SparkLogOptionError("option 'topic' is empty: give a topic name or drop it")
        check_topic_name(topic, "option 'topic'")
    return SinkOptions(
        bootstrap_servers=bootstrap,
        topic=topic,
        kafka=kafka,
        exactly_once=exactly_once,
        transactional=transactional,
        transactional_id=transactional_id,
        checkpoint_location=opts.get("checkpointlocation") or None,
    )


# ------------------------------------------------------------------------------ pieces


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): "" if v is None else str(v) for k, v in options.items()}


#: Source options `storage.options.<key>` reach a topic table on an object store (the cluster's
#: setting names, `sparklog/storage/object_store.py`).
STORAGE_OPTIONS_PREFIX = "storage.options."


def _storage_options(options: Mapping[str, str]) -> dict[str, str]:
    """`storage.options.<key>` options, prefix removed; `<key>` keeps its case (delta-rs
    accepts upper and lower case, Spark hands keys over lower-cased)."""
    n = len(STORAGE_OPTIONS_PREFIX)
    return {
        str(k)[n:]: "" if v is None else str(v)
        for k, v in options.items()
        if str(k).lower().startswith(STORAGE_OPTIONS_PREFIX) and len(str(k)) > n
    }


def _kafka_settings(
    opts: Mapping[str, str], refused: Mapping[str, str], what: str
) -> dict[str, str]:
    kafka = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
    for name, why in refused.items():
        if name in kafka:
            raise SparkLogOptionError(f"Kafka option 'kafka.{name}' is not supported: {why}")
    if what == "sink":
        for name in _SPARK_ONLY & kafka.keys():
            logger.info("kafka.%s is not used by the sink", name)
    return kafka


def _check_client_settings(kafka: Mapping[str, str], kind: str) -> None:
    """Fail on the driver, before any task, on a client setting the client would refuse."""
    from sparklog.client.config import ConfigError, consumer_config, producer_config
    from sparklog.client.security import client_security

    check = consumer_config if kind == "consumer" else producer_config
    settings = {k: v for k, v in kafka.items() if k not in _SPARK_ONLY}
    try:
        # security too (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*): a JAAS typo or a
        # missing trust store fails here, once, not in every task
        client_security(check({**settings, "bootstrap.servers": "127.0.0.1:9092"}))
    except ConfigError as e:
        raise SparkLogOptionError(f"bad Kafka {kind} option (kafka.<setting>): {e}") from e


def _warn_unknown(opts: Mapping[str, str], known: frozenset[str], what: str) -> None:
    for key in opts:
        if key not in known and not key.startswith("kafka."):
            logger.warning("option %r is not a sparklog %s option and is ignored", key, what)


def _bootstrap(kafka: Mapping[str, str], default: str | None) -> str:
    servers = kafka.get("bootstrap.servers", "").strip()
    if servers:
        return servers
    if default:
        return default
    raise SparkLogOptionError(
        "no Kafka cluster to talk to: set option 'kafka.bootstrap.servers' (host:port,...) "
        "or start a sparklog cluster in this application first with sparklog.start(spark)"
    )


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in _STRATEGIES if k in opts]
    if not given:
        raise SparkLogOptionError(
            f"One of the following options must be specified for the sparklog source: "
            f"{_STRATEGY_NAMES} (e.g. .option('subscribe', 'topic1,topic2'))"
        )
    if len(given) > 1:
        raise SparkLogOptionError(
            f"Only one of the following options can be specified for the sparklog source: "
            f"{_STRATEGY_NAMES}; got {', '.join(display(k) for k in given)}"
        )
    key, value = given[0], opts[given[0]]
    if key == ASSIGN:
        return Assign(_parse_assign(value))
    if key == SUBSCRIBE:
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise SparkLogOptionError(
                f"No topics to subscribe to as specified value for option 'subscribe' is {value!r}"
            )
        return Subscribe(topics)
    pattern = value.strip()
    if not pattern:
        raise SparkLogOptionError(
            f"Pattern to subscribe is empty as specified value for option 'subscribePattern' "
            f"is {value!r}"
        )
    try:
        re.compile(pattern)
    except re.error as e:
        raise SparkLogOptionError(
            f"option 'subscribePattern' {pattern!r} is not a regex: {e}"
        ) from None
    return SubscribePattern(pattern)


def _parse_assign(value: str) -> tuple[TopicPartition, ...]:
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    if not value.strip().startswith("{"):
        raise SparkLogOptionError(
            f"No topicpartitions to assign as specified value for option 'assign' is "
            f"{value!r}; expected JSON like {example}"
        )
    data = parse_json(value, "assign", example)
    out: list[TopicPartition] = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(is_int(p) for p in parts):
            raise SparkLogOptionError(
                f"option 'assign': topic {topic!r} needs a list of partition numbers, got "
                f"{parts!r}; expected e.g. {example}"
            )
        out.extend(TopicPartition(topic, int(p)) for p in parts)
    if not out:
        raise SparkLogOptionError(
            f"No topicpartitions to assign as specified value for option 'assign' is {value!r}"
        )
    return tuple(sorted(set(out)))


def _timestamp_strategy(opts: Mapping[str, str]) -> str:
    return option_value(SOURCE_OPTIONS, opts, "startingoffsetsbytimestampstrategy")


def _offset_spec(
    opts: Mapping[str, str], which: str, default: OffsetSpec, strategy: str
) -> OffsetSpec:
    """Spark's precedence: `<which>Timestamp`, then `<which>OffsetsByTimestamp`, then
    `<which>Offsets`."""
    global_key = f"{which}timestamp"
    by_ts_key = f"{which}offsetsbytimestamp"
    offsets_key = f"{which}offsets"
    if global_key in opts:
        return GlobalTimestamp(option_value(SOURCE_OPTIONS, opts, global_key), strategy)
    if by_ts_key in opts:
        example = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
        return SpecificTimestamps(partition_map(opts[by_ts_key], by_ts_key, example), strategy)
    if offsets_key not in opts:
        return default
    raw = opts[offsets_key].strip()
    if raw.lower() == "earliest":
        return EarliestOffsets()
    if raw.lower() == "latest":
        return LatestOffsets()
    if raw.lower() == "group" and which == "starting":
        return GroupOffsets()
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    offsets = partition_map(raw, offsets_key, example)
    for tp, offset in offsets.items():
        if offset < EARLIEST_TIMESTAMP:
            raise SparkLogOptionError(
                f"option '{display(offsets_key)}': offset {offset} for {tp[0]}-{tp[1]} is "
                "not valid; use an offset >= 0, -2 for earliest or -1 for latest"
            )
    return SpecificOffsets(offsets)


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    if isinstance(starting, LatestOffsets):
        raise SparkLogOptionError(
            "starting offset can't be latest for batch queries: a batch read would be empty; "
            "use startingOffsets 'earliest' or per-partition offsets"
        )
    if isinstance(starting, SpecificOffsets):
        for (topic, p), offset in starting.offsets.items():
            if offset == LATEST_TIMESTAMP:
                raise SparkLogOptionError(
                    f"startingOffsets for {topic}-{p} can't be latest (-1) for batch queries"
                )
    if isinstance(ending, EarliestOffsets):
        raise SparkLogOptionError(
            "ending offset can't be earliest for batch queries; use endingOffsets 'latest' "
            "or per-partition offsets"
        )
    if isinstance(ending, SpecificOffsets):
        for (topic, p), offset in ending.offsets.items():
            if offset == EARLIEST_TIMESTAMP:
                raise SparkLogOptionError(
                    f"ending offset for {topic}-{p} can't be earliest (-2) for batch queries"
                )


def _check_assigned(assign: Assign, spec: OffsetSpec, which: str) -> None:
    """With `assign`, per-partition offsets must name exactly the assigned partitions."""
    given = (
        spec.offsets
        if isinstance(spec, SpecificOffsets)
        else spec.timestamps
        if isinstance(spec, SpecificTimestamps)
        else None
    )
    if given is None:
        return
    assigned = set(assign.partitions)
    if set(given) != assigned:
        raise SparkLogOptionError(
            f"{which} offsets must name every assigned partition and only those: assigned "
            f"{_names(assigned)}, specified {_names(given)} (use -2 for earliest, -1 for latest)"
        )


def _names(tps: Any) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"
