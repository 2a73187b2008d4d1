"""Importing sparklog stays cheap: no pyspark until a Spark feature is used."""

from __future__ import annotations

import subprocess
import sys


def modules_loaded_by(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules under `prefixes` that a fresh interpreter has loaded after running `code`."""
    code += f"\nprint(sorted(m for m in sys.modules if m.startswith({prefixes!r})))"
    out = subprocess.run(
        [sys.executable, "-c", "import sys\n" + code], capture_output=True, text=True, check=True
    )
    return eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own printed list


def test_importing_sparklog_does_not_import_pyspark():
    code = (
        "import sparklog, sparklog.spark, sparklog.spark.options, sparklog.spark.offsets\n"
        "assert callable(sparklog.register) and callable(sparklog.start)"
    )
    assert modules_loaded_by(code, ("pyspark",)) == []


def test_the_servers_and_the_embedded_cluster_do_not_import_pyspark():
    # nothing below `spark` imports pyspark (tests/unit/test_layering.py checks the source; this
    # checks what the servers really load, their lazy imports on start excepted)
    code = (
        "import sparklog.broker.server, sparklog.controller.server, sparklog.coordinator.server\n"
        "import sparklog.cluster.embedded, sparklog.client.producer, sparklog.client.consumer"
    )
    assert modules_loaded_by(code, ("pyspark",)) == []


def test_planning_a_read_or_write_loads_neither_the_broker_nor_the_network_stack():
    # Spark plans each read and write in fresh Python workers, which unpickle the data source
    # and ask it for its options: that must not import the broker (through the cluster
    # launcher) or the client's network stack and Kafka schemas (through the config check).
    # The first read or write of a session waits for it. (A read's schema() asks the cluster
    # whether its topics exist, issue 35, so it loads the client: checked below.)
    code = (
        "from sparklog.spark.register import data_source_class\n"
        "from sparklog.spark.options import parse_sink_options, parse_source_options\n"
        "ds = data_source_class(None)({'kafka.bootstrap.servers': '127.0.0.1:1', "
        "'subscribe': 't', 'kafka.max.poll.records': '7'})\n"
        "ds._source_options(streaming=None)\n"
        "parse_sink_options({'topic': 't', 'kafka.linger.ms': '5'}, "
        "default_bootstrap=ds._default_bootstrap() or '127.0.0.1:1')"
    )
    heavy = (
        "sparklog.broker",
        "sparklog.client.network",
        "sparklog.client.broker_connection",
        "sparklog.spark.cluster",
        "kio.schema",
    )
    assert modules_loaded_by(code, (*heavy, "crc32c")) == []


def test_finding_the_data_source_loads_only_the_data_source():
    # PySpark imports every installed pyspark_* module in one worker at a session's first data
    # source lookup; ours must not load the client, the broker or the launcher there
    code = "import pyspark_sparklog\nassert pyspark_sparklog.DefaultSource.name() == 'sparklog'"
    heavy = ("sparklog.broker", "sparklog.client", "sparklog.spark.cluster", "kio.schema")
    assert modules_loaded_by(code, (*heavy, "crc32c")) == []


def test_a_reads_schema_loads_the_client_but_not_the_broker():
    code = (
        "from sparklog.spark.source import SparkLogDataSource\n"
        "ds = SparkLogDataSource({'kafka.bootstrap.servers': '127.0.0.1:1', 'subscribe': 't', "
        "'kafka.default.api.timeout.ms': '200'})\n"
        "try:\n    ds.schema()\nexcept Exception:\n    pass"
    )
    loaded = modules_loaded_by(
        code, ("sparklog.broker", "sparklog.spark.cluster", "sparklog.client.admin")
    )
    assert "sparklog.client.admin" in loaded
    assert not [m for m in loaded if m.startswith(("sparklog.broker", "sparklog.spark.cluster"))]


def test_the_client_package_loads_a_name_on_first_use():
    code = "import sparklog.client as c\nassert c.KafkaProducer.__name__ == 'KafkaProducer'"
    assert "sparklog.client.producer" in modules_loaded_by(code, ("sparklog.client",))
    assert modules_loaded_by("import sparklog.client", ("sparklog.client.",)) == []


def test_the_config_check_still_refuses_a_bad_client_setting():
    from sparklog.spark.options import SparkLogOptionError, parse_sink_options

    try:
        parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:1", "kafka.linger.ms": "soon"})
    except SparkLogOptionError as e:
        assert "linger.ms" in str(e)
    else:
        raise AssertionError("a non-numeric linger.ms passed the driver-side check")


def test_every_public_client_name_loads():
    # __all__ stays a literal list (linters read it statically); it must name what loads
    import sparklog.client as client

    assert set(client.__all__) == set(client._MODULES)
    for name in client.__all__:
        assert getattr(client, name) is not None, name


def test_the_data_source_imports_no_delta_until_a_read_lists_a_table():
    # the remote tier's listing (deltalake) and the tasks' dataset reader load when a read
    # plans with a topic table, not when format("sparklog") is registered or its readers load
    code = (
        "import pyspark_sparklog, sparklog.spark.register, sparklog.spark.source\n"
        "import sparklog.spark.batch_reader, sparklog.spark.stream_reader"
    )
    assert (
        modules_loaded_by(code, ("deltalake", "pyarrow.dataset", "sparklog.spark.table_listing"))
        == []
    )
