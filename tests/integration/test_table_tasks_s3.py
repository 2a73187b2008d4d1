"""The Spark source's table tasks on a real S3-compatible server (S3Proxy): the driver lists a
topic table on `s3://` with the read's `storage.options.*`, and a task reads its files with
pyarrow's S3 filesystem configured from the same options (no Spark needed for either half)."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from sparklog.records.builder import SimpleRecord, build_batch
from sparklog.spark.offsets import OffsetRange
from sparklog.spark.table_listing import TierLocator
from sparklog.spark.table_plan import plan_tiers
from sparklog.spark.table_reader import load_rows, to_connector_batches
from sparklog.storage.remote.table import open_topic_table
from sparklog.storage.remote.tier import SegmentUpload


def batch(base, count):
    records = [
        SimpleRecord(f"v{base + i}".encode(), b"k", 1_700_000_000_000 + i) for i in range(count)
    ]
    return build_batch(records, base_offset=base)


@pytest.fixture
def root(s3proxy):
    return f"s3://{s3proxy.create_bucket(f'tasks-{uuid.uuid4().hex[:8]}')}/tables"


def test_tasks_read_a_table_on_s3(s3proxy, root):
    options = s3proxy.storage_options()
    table = open_topic_table(root, "orders", uuid.uuid4(), storage_options=options)
    for lo in (0, 50):
        table.append([SegmentUpload(0, lo, lo + 50, batch(lo, 25) + batch(lo + 25, 25))])
    # Spark hands options over lower-cased: the task's filesystem takes either case
    lowered = {k.lower(): v for k, v in options.items()}
    snapshots = TierLocator(root, lowered).snapshots(["orders"])
    tier = snapshots["orders"].partitions[0]
    assert (tier.start_offset, tier.end_offset) == (0, 100)
    tasks, brokers = plan_tiers([OffsetRange("orders", 0, 10, 120)], snapshots)
    assert [(b.from_offset, b.until_offset) for b in brokers] == [(100, 120)]
    ((task,),) = [tasks]
    assert task.files[0].uri.startswith(root)
    rows = load_rows(task, include_headers=True)
    out = pa.Table.from_batches(
        list(to_connector_batches(rows, "orders", 0, True, "read_committed"))
    )
    assert out.column("offset").to_pylist() == list(range(10, 100))
    assert out.column("value").to_pylist() == [f"v{i}".encode() for i in range(10, 100)]
