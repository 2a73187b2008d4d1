"""A Spark user's first day with `format("sparklog")` (issue 35 §1): found without ceremony,
a missing topic or a wrong address fails at `load()` and says so on Spark's summary line."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.client import AdminClient, KafkaProducer, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.errors import KafkaError
from sparklog.spark.offset_reader import OffsetReader
from sparklog.spark.option_values import SparkLogOptionError
from sparklog.spark.options import parse_source_options

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path_factory.mktemp("first-day")) as running:
        with AdminClient({"bootstrap.servers": running.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic("orders", 2)])
        with KafkaProducer({"bootstrap.servers": running.bootstrap_servers}) as producer:
            values = pa.array([f"v{i}".encode() for i in range(25)])
            producer.send_arrow("orders", pa.record_batch({"value": values})).result()
        yield running


@pytest.fixture(scope="module")
def sl(spark):
    """The module's session with format("sparklog") registered, so that each test below
    checks its own behaviour whether or not discovery works (the first test checks that)."""
    import sparklog

    sparklog.register(spark)
    return spark


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DISCOVERY = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    df = (spark.read.format("sparklog").option("kafka.bootstrap.servers", sys.argv[1])
          .option("subscribe", "orders").load())
    print("rows", df.count(), "imported", "sparklog" in sys.modules)
    spark.stop()
    """
)


def test_format_sparklog_is_found_in_a_fresh_session_without_import_or_register(cluster):
    # the usual order (imports, getOrCreate(), read) in a new process that never imports
    # sparklog: PySpark's lookup of installed pyspark_* modules must find the data source
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(
        [sys.executable, "-c", DISCOVERY, cluster.bootstrap_servers],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows 25 imported False" in done.stdout


def test_a_misspelled_topic_fails_at_load_naming_close_matches(sl, cluster):
    for reader in (sl.read, sl.readStream):
        loading = reader.format("sparklog").option(
            "kafka.bootstrap.servers", cluster.bootstrap_servers
        )
        with pytest.raises(Exception) as failed:
            loading.option("subscribe", "ordres").load()  # no action: load() itself fails
        message = str(failed.value)
        assert "UnknownTopicOrPartitionError: Topic 'ordres' not present in metadata" in message
        assert "did you mean: orders" in message
        assert "topics create --topic ordres" in message


def test_assigned_partitions_that_do_not_exist_fail_at_load(sl, cluster):
    loading = sl.read.format("sparklog").option(
        "kafka.bootstrap.servers", cluster.bootstrap_servers
    )
    with pytest.raises(Exception, match="names partitions that do not exist: orders-7"):
        loading.option("assign", '{"orders":[0,7]}').load()


def test_user_errors_come_first_without_a_traceback(sl, cluster):
    loading = sl.read.format("sparklog").option(
        "kafka.bootstrap.servers", cluster.bootstrap_servers
    )
    with pytest.raises(Exception) as failed:
        loading.option("subscribe", "orders").option("startingOffsets", "latest").load().count()
    message = str(failed.value)
    assert "Traceback" not in message
    summary = message.splitlines()[0]
    assert "SparkLogOptionError: starting offset can't be latest for batch" in summary


def test_a_wrong_bootstrap_fails_once_at_the_api_timeout_naming_the_address(caplog):
    address = f"127.0.0.1:{closed_port()}"
    options = parse_source_options(
        {
            "kafka.bootstrap.servers": address,
            "subscribe": "orders",
            "kafka.default.api.timeout.ms": "1500",
        },
        streaming=False,
    )
    caplog.set_level(logging.WARNING, logger="sparklog.spark.offset_reader")
    with OffsetReader(options) as lookups, pytest.raises(KafkaError, match=address):
        lookups.partitions()
    # the admin call retried until the api timeout: retrying it fetchOffset.numRetries
    # times more would wait (1 + 3) x the timeout (247 s with the 60 s default)
    assert not [r for r in caplog.records if "attempt" in r.getMessage()]


def test_a_wrong_bootstrap_fails_at_load_with_the_address(sl):
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(Exception) as failed:
        (
            sl.read.format("sparklog")
            .option("kafka.bootstrap.servers", address)
            .option("kafka.default.api.timeout.ms", "1500")
            .option("subscribe", "orders")
            .load()
        )
    message = str(failed.value)
    assert "Traceback" not in message
    assert address in message.splitlines()[0]


def test_an_ending_option_on_a_stream_fails_at_load(sl, cluster):
    """As Spark's Kafka source: `load()` refuses it, however the option is given."""
    bs = cluster.bootstrap_servers

    def reader():
        return sl.readStream.format("sparklog").option("kafka.bootstrap.servers", bs)

    attempts = [
        lambda: reader().option("subscribe", "orders").option("endingOffsets", "latest").load(),
        lambda: reader().options(subscribe="orders", endingTimestamp="1").load(),
        lambda: sl.readStream.load(
            format="sparklog",
            subscribe="orders",
            endingOffsetsByTimestamp="{}",
            **{"kafka.bootstrap.servers": bs},
        ),
    ]
    wanted = ("ending offset", "ending timestamp", "ending timestamp")
    for attempt, what in zip(attempts, wanted, strict=True):
        with pytest.raises(SparkLogOptionError, match=f"{what} not valid in streaming queries"):
            attempt()
    # a batch read keeps them, another format is not looked at
    assert reader().option("subscribe", "orders").load().isStreaming
    batch = sl.read.format("sparklog").option("kafka.bootstrap.servers", bs)
    assert (
        batch.option("subscribe", "orders").option("endingOffsets", "latest").load().count() == 25
    )


def test_a_refused_stream_option_fails_the_query_with_its_own_message(sl, cluster):
    """Where `load()` is not checked (sparklog not registered in the driver: PySpark tells
    the source batch or stream only at query start), the query fails with the same error."""
    reader = (
        sl.readStream.format("sparklog")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("subscribe", "orders")
        .option("endingOffsets", "latest")
    )
    stream = type(reader).load.__wrapped__(reader)  # PySpark's own load(), unchecked
    with pytest.raises(Exception) as failed:
        stream.writeStream.format("noop").start().awaitTermination(60)
    message = str(failed.value)
    assert "SparkLogOptionError: ending offset not valid in streaming queries" in message
    assert "Traceback" not in message and "UnboundLocalError" not in message
