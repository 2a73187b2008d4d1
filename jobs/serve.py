"""Run a sparklog cluster inside a spark-submit application until the job is stopped.

    spark-submit --master local[3] jobs/serve.py --brokers 2 --data-dir /data/sparklog \
        --config num.partitions=6

The controller runs in the driver and each broker is a one-task Spark job (`sparklog.start`)
on the application's SparkSession (the active one, else one built from spark-submit's
settings). Prints `bootstrap.servers=host:port,...` on stdout once every broker is up and
serves until this Python process gets SIGINT/SIGTERM (then it stops the brokers, the
controller and the session) or spark-submit itself is stopped (its JVM, with the broker tasks,
is gone: only the controller is left to stop). Settings
are `python -m sparklog serve`'s: `conf/sparklog-defaults.conf`, `--config-file`, `--config k=v`.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from sparklog.cli import CliError, serve_spark, server_settings, stop_on_signals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--data-dir", required=True, help="controller and broker data")
    parser.add_argument("--config", action="append", metavar="K=V", help="cluster setting")
    parser.add_argument("--config-file", help="properties file (default conf/sparklog-defaults)")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from sparklog.spark.cluster import ClusterStartError
    from sparklog.spark.session import with_reference_jars

    spark = with_reference_jars(SparkSession.builder).appName("sparklog serve").getOrCreate()
    stop = threading.Event()
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    # spark-submit's JVM runs this script as its child; when spark-submit is stopped the JVM
    # exits without telling us, so watch for being orphaned.
    jvm_pid = os.getppid()
    jvm_alive = lambda: os.getppid() == jvm_pid  # noqa: E731
    try:
        with stop_on_signals(stop):
            serve_spark(spark, args.brokers, data_dir, server_settings(args), stop, jvm_alive)
    except (CliError, ClusterStartError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        if jvm_alive():
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
