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


def test_broker_tasks_carry_no_storage_credentials():
    """storage.options.* (object-store secrets) are for the driver's controller and
    coordinator; a broker task's payload, shipped to an executor, never holds them."""
    from types import SimpleNamespace

    from sparklog.broker.kafka_apis import GROUP_COORDINATOR_ENDPOINT
    from sparklog.spark.cluster import SparkLogCluster, _Slot

    cluster = SparkLogCluster.__new__(SparkLogCluster)
    cluster.settings = {
        "storage.options.AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
        "metadata.log.dir": "s3://bucket/cluster",
        "log.dirs": "/data",
    }
    cluster.cluster_id = "cluster"
    cluster.broker_host = "127.0.0.1"
    cluster.controller = SimpleNamespace(bootstrap="driver:9093")
    cluster.coordinator = SimpleNamespace(bootstrap="driver:9094")
    spec = cluster._spec(_Slot(node_id=0))
    assert spec.config == {
        "metadata.log.dir": "s3://bucket/cluster",
        "log.dirs": "/data",
        GROUP_COORDINATOR_ENDPOINT: "driver:9094",
    }
    assert "s3cr3t" not in repr(spec)


def test_the_offsets_table_helpers_use_the_clusters_storage_options(monkeypatch):
    """group_offsets_df / consumer_lag_df without `path` (or with the cluster's own table)
    read with the running cluster's storage.options.*; another path with the given ones."""
    from types import SimpleNamespace

    import sparklog.spark.cluster as cluster_module
    from sparklog.spark.group_views import offsets_table

    table = "s3://bucket/cluster/__consumer_offsets"
    running = SimpleNamespace(
        coordinator=SimpleNamespace(table_path=table),
        settings={"storage.options.AWS_REGION": "eu-west-1", "num.partitions": "3"},
    )
    monkeypatch.setattr(cluster_module, "active_cluster", lambda: running)
    assert offsets_table() == (table, {"AWS_REGION": "eu-west-1"})
    assert offsets_table(table + "/") == (table + "/", {"AWS_REGION": "eu-west-1"})
    assert offsets_table("s3://other/t") == ("s3://other/t", None)
    assert offsets_table("s3://other/t", {"AWS_REGION": "x"}) == (
        "s3://other/t",
        {"AWS_REGION": "x"},
    )
    monkeypatch.setattr(cluster_module, "active_cluster", lambda: None)
    assert offsets_table("/local/t") == ("/local/t", None)
