"""Cluster settings from the Spark conf: `spark.sparklog.<Kafka name>` entries (spark-submit
--conf), which `sparklog.start(config=...)` and keyword settings override."""

from __future__ import annotations

from sparklog.spark.cluster import _settings, spark_conf_settings


def test_spark_conf_entries_become_settings_that_arguments_override():
    entries = [
        ("spark.sparklog.metadata.log.dir", "s3://bucket/cluster"),
        ("spark.sparklog.storage.options.AWS_REGION", "eu-west-1"),
        ("spark.sparklog.num.partitions", "3"),
        ("spark.sparklog.", "ignored"),
        ("spark.app.name", "not ours"),
    ]
    from_conf = spark_conf_settings(entries)
    assert from_conf == {
        "metadata.log.dir": "s3://bucket/cluster",
        "storage.options.AWS_REGION": "eu-west-1",
        "num.partitions": "3",
    }
    merged = {**from_conf, **_settings({"num.partitions": 6}, {"auto_create_topics_enable": False})}
    assert merged["num.partitions"] == "6" and merged["auto.create.topics.enable"] == "false"
    assert merged["metadata.log.dir"] == "s3://bucket/cluster"
