"""The topic table on a real S3-compatible server (S3Proxy, filesystem-backed): exactly-once
appends, concurrent leaders of different partitions, record-identical reads, retention,
maintenance and drop through `storage.options.*`, as on a local path."""

from __future__ import annotations

import uuid

import pytest

from sparklog.storage.remote.table import DeltaTopicTable
from sparklog.storage.remote.tier import FencedUploadError, RemoteStorageError, SegmentUpload
from tests.s3proxy import SECRET_KEY
from tests.unit.remote.test_table import batch, copy_side_by_side, upload

TOPIC_ID = uuid.uuid4()


@pytest.fixture
def root(s3proxy):
    bucket = s3proxy.create_bucket(f"tier-{uuid.uuid4().hex[:8]}")
    return f"s3://{bucket}/tables"


def test_the_topic_table_on_s3(s3proxy, root):
    options = s3proxy.storage_options()
    table = DeltaTopicTable(root, "orders", TOPIC_ID, storage_options=options)
    assert table.location == f"{root}/orders"
    first = upload(0, [batch(0, 5), batch(5, 5)])
    assert table.append([first, upload(1, [batch(0, 3)])]) == 1
    assert table.append([first]) is None  # a retry
    with pytest.raises(FencedUploadError):
        table.append([SegmentUpload(0, 3, 8, batch(3, 5))])
    # a second broker opens the same table and continues the copy
    other = DeltaTopicTable(root, "orders", TOPIC_ID, storage_options=options)
    other.append([upload(0, [batch(10, 5)])])
    table.refresh()
    assert table.copied_end_offset(0) == 15
    assert table.read(0, 6, 1 << 20).records == batch(5, 5) + batch(10, 5)
    assert table.offset_for_timestamp(0, -3) is not None
    assert table.delete_before(0, 7) == 5
    assert table.start_offset(0) == 5
    table.maintain(vacuum_retention_hours=0)
    table.refresh()
    assert table.read(0, 0, 1 << 20).records == batch(5, 5) + batch(10, 5)
    table.drop()
    with pytest.raises(RemoteStorageError, match="No topic table"):
        DeltaTopicTable(root, "orders", storage_options=options, create=False)


def test_concurrent_leaders_of_different_partitions_on_s3(s3proxy, root):
    options = s3proxy.storage_options()
    DeltaTopicTable(root, "orders", TOPIC_ID, storage_options=options)
    tables = [DeltaTopicTable(root, "orders", TOPIC_ID, storage_options=options) for _ in range(2)]
    copy_side_by_side(tables, 5, 2)
    check = DeltaTopicTable(root, "orders", TOPIC_ID, storage_options=options)
    assert [check.copied_end_offset(p) for p in range(2)] == [10, 10]


def test_errors_name_the_table_without_credentials(s3proxy, root):
    options = dict(s3proxy.storage_options(), AWS_SECRET_ACCESS_KEY="wrong-" + SECRET_KEY)
    with pytest.raises(RemoteStorageError) as refused:
        DeltaTopicTable(root, "orders", TOPIC_ID, storage_options=options)
    assert "orders" in str(refused.value)
    assert SECRET_KEY not in str(refused.value)
