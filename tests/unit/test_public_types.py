"""sparklog's public API is typed for its users' type checkers (PEP 561 `py.typed`, real types
rather than Any): mypy, run as a user would on their own code, sees `sparklog.start` take a
SparkSession and return the cluster, and the notebook helpers return DataFrames."""

from __future__ import annotations

import subprocess
import sys

USER_CODE = """\
from pyspark.sql import DataFrame, SparkSession

import sparklog


def job(spark: SparkSession) -> DataFrame:
    cluster = sparklog.start(spark, brokers=1, config={"num.partitions": 3})
    reveal_type(cluster)
    reveal_type(sparklog.register(spark))
    reveal_type(sparklog.topics_df(spark))
    reveal_type(sparklog.group_offsets_df)
    sparklog.start("not a session")
    cluster.stop()
    return sparklog.consumer_lag_df(spark, group="g")
"""


def test_mypy_sees_the_public_api_s_types(tmp_path):
    (tmp_path / "job.py").write_text(USER_CODE)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "job.py"],
        cwd=tmp_path,  # the user's project: none of sparklog's mypy settings
        capture_output=True,
        text=True,
    ).stdout
    notes = [
        line.split("Revealed type is ", 1)[1] for line in out.splitlines() if "Revealed" in line
    ]
    assert notes[:3] == [
        '"sparklog.spark.cluster.SparkLogCluster"',
        '"type[sparklog.spark.source.SparkLogDataSource]"',
        '"pyspark.sql.dataframe.DataFrame"',
    ], out
    assert "spark: pyspark.sql.session.SparkSession" in notes[3], out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and 'incompatible type "str"; expected "SparkSession"' in errors[0], out
