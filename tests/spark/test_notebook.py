"""notebooks/quickstart.py runs top to bottom, as Databricks would run it, on local[4].

The notebook is split on `# COMMAND ----------`; `# MAGIC` lines (markdown cells) become blank
lines so tracebacks keep the notebook's line numbers. Every code cell runs in order in one
namespace holding `spark` and a `display` that collects what it is given; the test then checks
what the notebook computed and showed.
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame

from sparklog.client import AdminClient, KafkaProducer, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.spark.cluster import active_cluster
from sparklog.spark.notebook import brokers_df, offsets_df, topics_df

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SPARK_DELTA = True  # the notebook queries the offsets table with Spark SQL on delta.`path`

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.py"
HEADER = "# Databricks notebook source"
SEPARATOR = re.compile(r"^# COMMAND ----------$", re.MULTILINE)


def code_cells(text: str) -> list[tuple[int, str]]:
    """(first line number, source) of each code cell; markdown cells are dropped."""
    assert text.startswith(HEADER + "\n"), f"first line must be {HEADER!r}"
    cells = []
    start = 0
    for match in [*SEPARATOR.finditer(text), None]:
        end = match.start() if match is not None else len(text)
        chunk = text[start:end]
        first_line = text.count("\n", 0, start) + 1
        lines = chunk.splitlines()
        magic = [line for line in lines if line.startswith("# MAGIC")]
        if magic:  # Databricks keeps magic cells pure: every line is `# MAGIC ...`
            rest = [line for line in lines if line.strip() and not line.startswith("# MAGIC")]
            assert rest in ([], [HEADER]), f"cell at line {first_line} mixes MAGIC and code"
            assert magic[0].startswith("# MAGIC %md"), f"cell at line {first_line}: not markdown"
        else:
            code = "\n".join("" if line == HEADER else line for line in lines)
            if code.strip():
                cells.append((first_line, code))
        start = match.end() if match is not None else end
    return cells


class Display:
    """The notebook's `display`: collects each DataFrame (it must be one, and not empty)."""

    def __init__(self) -> None:
        self.shown: list[tuple[list[str], list]] = []

    def __call__(self, df: DataFrame) -> None:
        assert isinstance(df, DataFrame), f"display() got {type(df).__name__}"
        rows = df.collect()
        assert rows, f"display() of an empty DataFrame {df.columns}"
        self.shown.append((df.columns, rows))

    def all_with(self, *columns: str) -> list[list]:
        """The rows of every displayed frame that has these columns, in display order."""
        return [rows for names, rows in self.shown if set(columns) <= set(names)]


def test_the_quickstart_notebook_runs_every_cell(spark, tmp_path, monkeypatch):
    # sparklog.start and the checkpoint use temp dirs: keep them under tmp_path
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    display = Display()
    namespace = {"__name__": "__main__", "spark": spark, "display": display}
    timings = []
    try:
        for first_line, code in code_cells(NOTEBOOK.read_text()):
            started = time.perf_counter()
            exec(compile("\n" * (first_line - 1) + code, str(NOTEBOOK), "exec"), namespace)
            timings.append((first_line, round(time.perf_counter() - started, 1)))
    finally:
        if namespace.get("cluster") is not None:
            namespace["cluster"].stop()
    print("cell seconds by first line:", timings)

    rows, partitions, topic = namespace["ROWS"], namespace["PARTITIONS"], namespace["TOPIC"]
    late = 3_000

    [brokers] = display.all_with("broker_id", "executor_id", "fenced")
    [broker] = brokers
    assert (broker.executor_id, broker.fenced, broker.leader_partitions) == ("driver", False, 0)

    [topics] = display.all_with("topic", "replication_factor", "configs")
    assert [(t.topic, t.partitions, t.replication_factor, t.configs) for t in topics] == [
        (topic, partitions, 1, {"retention.ms": str(7 * 24 * 3600 * 1000)})
    ]

    [offsets] = display.all_with("leader", "earliest", "latest", "records")
    assert [(o.partition, o.leader, o.earliest) for o in offsets] == [
        (p, broker.broker_id, 0) for p in range(partitions)
    ]
    assert all(o.records == o.latest for o in offsets)
    assert namespace["written"] == sum(o.records for o in offsets) == rows
    assert all(o.records > rows // partitions // 2 for o in offsets)  # 1,000 keys spread out

    [sample] = display.all_with("key", "value", "headers")
    assert len(sample) == 5
    assert all([(h.key, h.value) for h in r.headers] == [("source", b"quickstart")] for r in sample)

    [per_partition] = display.all_with("rows", "first_offset", "last_offset")
    assert [(r.partition, r.rows, r.first_offset, r.last_offset) for r in per_partition] == [
        (o.partition, o.records, 0, o.records - 1) for o in offsets
    ]
    assert sum(r.users for r in per_partition) == 1000  # each key lives in one partition

    batches = namespace["batches"]
    assert sum(batches) == rows and len(batches) >= 2  # bounded by maxOffsetsPerTrigger
    expected = {kind: [0, 0] for kind in namespace["KINDS"]}
    for i in range(rows):
        expected[namespace["KINDS"][i % 3]][0] += 1
        expected[namespace["KINDS"][i % 3]][1] += i % 100
    first_totals, final_totals = display.all_with("kind", "events", "amount")
    assert {r.kind: [r.events, r.amount] for r in first_totals} == expected
    assert sum(r.events for r in final_totals) == rows + late

    assert namespace["lag_after_first_run"] == 0
    assert namespace["lag_before_catch_up"] == late
    assert namespace["caught_up"] == late
    assert namespace["lag_after_catch_up"] == 0
    lag_views = display.all_with("query_offset", "latest", "lag")
    assert [len(view) for view in lag_views] == [partitions, partitions]
    assert sum(r.lag for r in lag_views[1]) == late

    # the streaming query commits its progress to the group: lag 0, then the late records, then 0
    group = namespace["GROUP"]
    group_views = display.all_with("group_id", "committed_offset", "log_end_offset", "lag")
    assert len(group_views) == 2
    caught_up_view, behind_view = group_views
    assert [
        (r.group_id, r.topic, r.partition, r.committed_offset, r.lag) for r in caught_up_view
    ] == [(group, topic, o.partition, o.records, 0) for o in offsets]
    assert sum(r.lag for r in behind_view) == late
    assert namespace["group_lag_after_first_run"] == 0
    assert namespace["group_lag_before_catch_up"] == late
    assert namespace["group_lag_after_catch_up"] == 0

    # Spark SQL over the offsets table (Delta's own reader: the session has Delta's extension)
    assert namespace["offsets_table"].startswith("delta.`")
    [committed_sql] = display.all_with("group_id", "committed_offset", "commit_timestamp")
    assert [(r.group_id, r.topic, r.partition) for r in committed_sql] == [
        (group, topic, p) for p in range(partitions)
    ]
    assert sum(r.committed_offset for r in committed_sql) == rows + late  # caught up: lag 0
    assert namespace["committed_by_sql"] == {
        (topic, r.partition): r.committed_offset for r in committed_sql
    }

    # what the notebook wrote is gone: group, topic, in-memory table, checkpoint, cluster files
    assert group not in namespace["groups_left"]
    assert namespace["topics_left"] == []
    assert not spark.catalog.tableExists("quickstart_totals")
    assert not Path(namespace["checkpoint"]).exists()
    assert not Path(namespace["data_dir"]).exists()

    assert active_cluster() is None
    # the broker's job has ended; Spark's status store hears of it through its listener bus
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 30
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tracker.getActiveJobsIds() == []


def test_views_of_any_cluster_show_log_start_offsets_and_overrides(spark, tmp_path):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path) as cluster:
        servers = cluster.bootstrap_servers
        with AdminClient({"bootstrap.servers": servers}) as admin:
            admin.create_topics([NewTopic("a", 2, 1, {"retention.ms": "60000"}), NewTopic("b", 1)])
            with KafkaProducer({"bootstrap.servers": servers}) as producer:
                batch = pa.record_batch({"value": pa.array([b"x"] * 10)})
                producer.send_arrow("a", batch, partition=0).result()
            admin.delete_records({("a", 0): 4})

        offsets = offsets_df(spark, "a", bootstrap_servers=servers).collect()
        assert [
            (o.topic, o.partition, o.leader, o.earliest, o.latest, o.records) for o in offsets
        ] == [
            ("a", 0, 0, 4, 10, 6),
            ("a", 1, 0, 0, 0, 0),
        ]
        every = offsets_df(spark, bootstrap_servers=servers).collect()
        assert [(o.topic, o.partition) for o in every] == [("a", 0), ("a", 1), ("b", 0)]
        topics = topics_df(spark, bootstrap_servers=servers).collect()
        assert [(t.topic, t.partitions, t.replication_factor, t.configs) for t in topics] == [
            ("a", 2, 1, {"retention.ms": "60000"}),
            ("b", 1, 1, {}),
        ]


def test_views_without_a_cluster_name_the_fix(spark):
    assert active_cluster() is None
    for view in (topics_df, offsets_df, brokers_df):
        with pytest.raises(ValueError, match=r"sparklog\.start\(spark\)"):
            view(spark)
