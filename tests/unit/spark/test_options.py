"""Option parsing of format("sparklog"): Spark's Kafka connector names, defaults and errors."""

from __future__ import annotations

import pickle

import pytest

from sparklog.spark.option_values import duration_ms
from sparklog.spark.options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    Assign,
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    SparkLogOptionError,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    SubscribePattern,
    parse_sink_options,
    parse_source_options,
)

BS = "127.0.0.1:9092"


def batch(**opts):
    return parse_source_options({"kafka.bootstrap.servers": BS, **opts}, streaming=False)


def stream(**opts):
    return parse_source_options({"kafka.bootstrap.servers": BS, **opts}, streaming=True)


def lower(**opts):
    """Spark hands options over lower-cased (CaseInsensitiveDict)."""
    return {k.lower(): v for k, v in opts.items()}


# ------------------------------------------------------------------------------ bootstrap


def test_bootstrap_from_option_wins_over_default():
    o = parse_source_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "t"},
        streaming=False,
        default_bootstrap="d:2",
    )
    assert o.bootstrap_servers == "h:1"
    assert "bootstrap.servers" not in o.kafka


def test_bootstrap_falls_back_to_running_cluster():
    o = parse_source_options({"subscribe": "t"}, streaming=True, default_bootstrap="d:2")
    assert o.bootstrap_servers == "d:2"
    assert parse_sink_options({}, default_bootstrap="d:2").bootstrap_servers == "d:2"


def test_no_bootstrap_names_both_fixes():
    for parse in (
        lambda: parse_source_options({"subscribe": "t"}, streaming=False),
        lambda: parse_sink_options({"topic": "t"}),
    ):
        with pytest.raises(SparkLogOptionError) as e:
            parse()
        assert "kafka.bootstrap.servers" in str(e.value)
        assert "sparklog.start(spark)" in str(e.value)


# ------------------------------------------------------------------------- subscription


def test_subscribe_splits_and_trims_topics():
    assert batch(subscribe=" a, b ,,a").subscription == Subscribe(("a", "b"))


def test_subscribe_pattern_matches_whole_names():
    sub = batch(**lower(subscribePattern="events-.*")).subscription
    assert isinstance(sub, SubscribePattern)
    assert sub.matches("events-1") and not sub.matches("old-events-1")


def test_assign_parses_json_into_sorted_partitions():
    sub = batch(assign='{"b":[1,0],"a":[2]}').subscription
    assert sub == Assign((("a", 2), ("b", 0), ("b", 1)))


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({}, "One of the following options must be specified"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options"),
        ({"subscribe": " , "}, "No topics to subscribe to"),
        ({"subscribePattern": "  "}, "Pattern to subscribe is empty"),
        ({"subscribePattern": "a[("}, "is not a regex"),
        ({"assign": "a:0"}, "No topicpartitions to assign"),
        ({"assign": '{"a":"0"}'}, "needs a list of partition numbers"),
        ({"assign": '{"a":[]}'}, "No topicpartitions to assign"),
        ({"assign": "{not json"}, "not valid JSON"),
    ],
)
def test_subscription_errors(opts, message):
    with pytest.raises(SparkLogOptionError, match=message):
        batch(**lower(**opts))


# ------------------------------------------------------------------------------ offsets


def test_defaults_batch_earliest_to_latest_stream_from_latest():
    b = batch(subscribe="t")
    assert b.starting == EarliestOffsets() and b.ending == LatestOffsets()
    s = stream(subscribe="t")
    assert s.starting == LatestOffsets() and s.ending is None


def test_specific_offsets_json():
    o = batch(
        **lower(
            subscribe="a,b",
            startingOffsets='{"a":{"0":23,"1":-2},"b":{"0":5}}',
            endingOffsets='{"a":{"0":50,"1":-1},"b":{"0":-1}}',
        )
    )
    assert o.starting == SpecificOffsets({("a", 0): 23, ("a", 1): -2, ("b", 0): 5})
    assert o.ending == SpecificOffsets({("a", 0): 50, ("a", 1): -1, ("b", 0): -1})


def test_offset_keywords_are_case_insensitive():
    assert stream(**lower(subscribe="t", startingOffsets="EARLIEST")).starting == EarliestOffsets()


def test_timestamp_precedence_global_over_per_partition_over_offsets():
    o = batch(
        **lower(
            subscribe="t",
            startingTimestamp="1000",
            startingOffsetsByTimestamp='{"t":{"0":5}}',
            startingOffsets="earliest",
        )
    )
    assert o.starting == GlobalTimestamp(1000, "error")
    o = batch(
        **lower(
            subscribe="t",
            startingOffsetsByTimestamp='{"t":{"0":5}}',
            startingOffsets="earliest",
            startingOffsetsByTimestampStrategy="LATEST",
            endingOffsetsByTimestamp='{"t":{"0":9}}',
        )
    )
    assert o.starting == SpecificTimestamps({("t", 0): 5}, "latest")
    assert o.ending == SpecificTimestamps({("t", 0): 9}, "latest")


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"startingOffsets": "latest"}, "starting offset can't be latest for batch"),
        ({"startingOffsets": '{"t":{"0":-1}}'}, "can't be latest"),
        ({"endingOffsets": "earliest"}, "ending offset can't be earliest"),
        ({"endingOffsets": '{"t":{"0":-2}}'}, "can't be earliest"),
        ({"startingOffsets": '{"t":{"0":-3}}'}, "is not valid"),
        ({"startingOffsets": '{"t":[0]}'}, "needs an object of partition"),
        ({"startingOffsets": '{"t":{"x":1}}'}, "is not a number pair"),
        ({"startingTimestamp": "yesterday"}, "epoch milliseconds"),
        ({"startingOffsetsByTimestampStrategy": "closest"}, "must be 'error' or 'latest'"),
    ],
)
def test_batch_offset_errors(opts, message):
    with pytest.raises(SparkLogOptionError, match=message):
        batch(subscribe="t", **lower(**opts))


@pytest.mark.parametrize("key", ["endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"])
def test_ending_options_refused_in_streams(key):
    value = "latest" if key == "endingOffsets" else ('{"t":{"0":1}}' if "By" in key else "1")
    with pytest.raises(SparkLogOptionError, match="not valid in streaming queries"):
        stream(subscribe="t", **lower(**{key: value}))


def test_assign_requires_offsets_for_exactly_the_assigned_partitions():
    with pytest.raises(SparkLogOptionError, match="every assigned partition"):
        batch(**lower(assign='{"t":[0,1]}', startingOffsets='{"t":{"0":1}}'))
    o = batch(**lower(assign='{"t":[0,1]}', startingOffsets='{"t":{"0":1,"1":-2}}'))
    assert o.starting == SpecificOffsets({("t", 0): 1, ("t", 1): -2})


def test_schema_time_parse_skips_mode_specific_checks():
    o = parse_source_options(
        {"kafka.bootstrap.servers": BS, "subscribe": "t", "endingoffsets": "latest"},
        streaming=None,
    )
    assert o.ending == LatestOffsets()


# ----------------------------------------------------------------------- other options


def test_numbers_booleans_and_durations():
    o = stream(
        **lower(
            subscribe="t",
            failOnDataLoss="FALSE",
            includeHeaders="true",
            minPartitions="8",
            maxRecordsPerPartition="1000",
            maxOffsetsPerTrigger="500",
            minOffsetsPerTrigger="100",
            maxTriggerDelay="30s",
            **{"kafkaConsumer.pollTimeoutMs": "5000", "fetchOffset.numRetries": "0"},
        )
    )
    assert (o.fail_on_data_loss, o.include_headers) == (False, True)
    assert (o.min_partitions, o.max_records_per_partition) == (8, 1000)
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger) == (500, 100)
    assert o.max_trigger_delay_ms == 30_000
    assert (o.poll_timeout_ms, o.fetch_offset_num_retries) == (5000, 0)
    assert stream(subscribe="t").max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"failOnDataLoss": "yes"}, "failOnDataLoss' must be 'true' or 'false'"),
        ({"minPartitions": "0"}, "minPartitions' must be a positive integer"),
        ({"maxOffsetsPerTrigger": "-5"}, "maxOffsetsPerTrigger' must be a positive integer"),
        ({"maxRecordsPerPartition": "lots"}, "maxRecordsPerPartition' must be a positive"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
        ({"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "higher than the"),
        ({"kafkaConsumer.pollTimeoutMs": "0"}, "pollTimeoutMs' must be an integer >= 1"),
    ],
)
def test_malformed_values_name_the_option(opts, message):
    with pytest.raises(SparkLogOptionError, match=message):
        stream(subscribe="t", **lower(**opts))


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("15m", 900_000),
        ("30s", 30_000),
        ("100ms", 100),
        ("2h", 7_200_000),
        ("500", 500),
        ("1d", 86_400_000),
        ("1min", 60_000),
    ],
)
def test_duration_strings(text, ms):
    assert duration_ms(text) == ms


# ------------------------------------------------------------------------ kafka.* settings


def test_kafka_settings_pass_through_and_ours_are_enforced():
    o = batch(
        subscribe="t",
        **{"kafka.isolation.level": "read_committed", "kafka.fetch.max.wait.ms": "100"},
    )
    assert o.isolation_level == "read_committed"
    config = o.consumer_config()
    assert config["fetch.max.wait.ms"] == "100"
    assert config["auto.offset.reset"] == "none"
    assert config["bootstrap.servers"] == BS
    assert "isolation.level" not in o.admin_config()  # admin takes common settings only


def test_range_reads_fetch_8_mib_per_partition_unless_told_otherwise():
    assert batch(subscribe="t").consumer_config()["max.partition.fetch.bytes"] == 8 << 20
    told = batch(subscribe="t", **{"kafka.max.partition.fetch.bytes": "1048576"})
    assert told.consumer_config()["max.partition.fetch.bytes"] == "1048576"


def test_group_id_is_accepted_but_not_used():
    o = batch(subscribe="t", **{"kafka.group.id": "g"})
    assert "group.id" not in o.consumer_config()


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("kafka.auto.offset.reset", "startingOffsets"),
        ("kafka.key.deserializer", "deserialize"),
        ("kafka.value.deserializer", "deserialize"),
        ("kafka.enable.auto.commit", "checkpoint"),
        ("kafka.interceptor.classes", "interceptors"),
    ],
)
def test_refused_consumer_settings(key, message):
    with pytest.raises(SparkLogOptionError, match=message):
        batch(subscribe="t", **{key: "x"})


def test_bad_consumer_setting_fails_on_the_driver():
    with pytest.raises(SparkLogOptionError, match="isolation.level"):
        batch(subscribe="t", **{"kafka.isolation.level": "serializable"})


def test_sink_options():
    o = parse_sink_options(
        {
            "kafka.bootstrap.servers": BS,
            "topic": " out ",
            "kafka.acks": "1",
            "kafka.linger.ms": "20",
        }
    )
    assert o.topic == "out"
    assert o.producer_config() == {"acks": "1", "linger.ms": "20", "bootstrap.servers": BS}
    with pytest.raises(SparkLogOptionError, match="not supported"):
        parse_sink_options({"kafka.bootstrap.servers": BS, "kafka.key.serializer": "x"})
    with pytest.raises(SparkLogOptionError, match="compression.type"):
        parse_sink_options({"kafka.bootstrap.servers": BS, "kafka.compression.type": "brotli"})
    with pytest.raises(SparkLogOptionError, match="'topic' is empty"):
        parse_sink_options({"kafka.bootstrap.servers": BS, "topic": " "})


def test_parsed_options_pickle():
    o = stream(**lower(subscribePattern="a.*", startingOffsetsByTimestamp='{"a":{"0":1}}'))
    assert pickle.loads(pickle.dumps(o)) == o


# ------------------------------------------------------------------------------ security

_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="etl" password="pw-4711";'


def test_security_options_reach_the_clients_and_stay_out_of_reprs():
    """The connector's kafka.security.protocol / kafka.sasl.* / kafka.ssl.* options reach the
    consumers, producers and admin lookups; the JAAS text never shows in a repr (Spark
    pickles and logs these objects)."""
    opts = {
        "kafka.bootstrap.servers": BS,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": _JAAS,
        "subscribe": "t",
    }
    source = parse_source_options(opts, streaming=False)
    for config in (source.consumer_config(), source.admin_config()):
        assert config["security.protocol"] == "SASL_PLAINTEXT"
        assert config["sasl.jaas.config"] == _JAAS
    sink = parse_sink_options({k: v for k, v in opts.items() if k != "subscribe"})
    for config in (sink.producer_config(), sink.admin_config()):
        assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    for shown in (repr(source), repr(sink), repr(pickle.loads(pickle.dumps(source)))):
        assert "pw-4711" not in shown


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"kafka.security.protocol": "SASL_PLAINTEXT"}, "needs sasl.jaas.config"),
        (
            {
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.jaas.config": 'x.PlainLoginModule required username="u" password="pw-4711"',
            },
            "JAAS",
        ),
        ({"kafka.sasl.mechanism": "MD5"}, "sasl.mechanism"),
    ],
)
def test_bad_security_options_fail_on_the_driver_without_the_secret(opts, message):
    with pytest.raises(SparkLogOptionError, match=message) as e:
        batch(subscribe="t", **opts)
    assert "pw-4711" not in str(e.value)
