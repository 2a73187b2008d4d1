"""Importing sparklog stays cheap: no pyspark until a Spark feature is used."""

from __future__ import annotations

import subprocess
import sys


def test_importing_sparklog_does_not_import_pyspark():
    code = (
        "import sys, sparklog, sparklog.spark, sparklog.spark.options, sparklog.spark.offsets; "
        "assert callable(sparklog.register) and callable(sparklog.start); "
        "print(sorted(m for m in sys.modules if m.startswith('pyspark')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_planning_a_read_or_write_loads_neither_the_broker_nor_the_network_stack():
    # Spark plans each read and write in fresh Python workers, which unpickle the data source
    # and ask it for its schema and options: that must not import the broker (through the
    # cluster launcher) or the client's network stack and Kafka schemas (through the config
    # check). The first read or write of a session waits for it.
    code = (
        "import sys\n"
        "from sparklog.spark.register import data_source_class\n"
        "from sparklog.spark.options import parse_sink_options\n"
        "ds = data_source_class(None)({'kafka.bootstrap.servers': '127.0.0.1:1', "
        "'subscribe': 't', 'kafka.max.poll.records': '7'})\n"
        "ds.schema()\n"
        "parse_sink_options({'topic': 't', 'kafka.linger.ms': '5'}, "
        "default_bootstrap=ds._default_bootstrap() or '127.0.0.1:1')\n"
        "print(sorted(m for m in sys.modules if m.startswith(('sparklog.broker', "
        "'sparklog.client.network', 'sparklog.spark.cluster', 'kio.schema', 'crc32c'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_config_check_still_refuses_a_bad_client_setting():
    from sparklog.spark.options import SparkLogOptionError, parse_sink_options

    try:
        parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:1", "kafka.linger.ms": "soon"})
    except SparkLogOptionError as e:
        assert "linger.ms" in str(e)
    else:
        raise AssertionError("a non-numeric linger.ms passed the driver-side check")
