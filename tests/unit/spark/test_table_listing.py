"""Where a read finds a topic's table: the source option, else the cluster's settings (a fake
admin stands in for DescribeConfigs and DescribeCluster)."""

from __future__ import annotations

from types import SimpleNamespace

from sparklog.spark.options import parse_source_options
from sparklog.spark.table_listing import TierLocator, locator_for


class FakeAdmin:
    def __init__(self, topics, root):
        self.topics = topics  # topic -> remote.storage.enable
        self.root = root
        self.asked = []

    def describe_configs(self, resources):
        ((kind, name),) = resources
        self.asked.append((kind, name))
        if kind == "topic":
            value = "true" if self.topics[name] else "false"
            return {(kind, name): {"remote.storage.enable": SimpleNamespace(value=value)}}
        return {(kind, name): {"remote.table.root": SimpleNamespace(value=self.root)}}

    def describe_cluster(self):
        return SimpleNamespace(brokers=(SimpleNamespace(node_id=3), SimpleNamespace(node_id=1)))


def test_the_option_wins():
    locator = TierLocator("/tables/", admin=FakeAdmin({}, "/elsewhere"))
    assert locator.location("orders") == "/tables/orders"


def test_the_cluster_says_which_topics_are_tiered_and_where():
    admin = FakeAdmin({"orders": True, "clicks": False}, "s3://bucket/tables")
    locator = TierLocator(None, admin=admin)
    assert locator.location("orders") == "s3://bucket/tables/orders"
    assert locator.location("clicks") is None
    assert locator.location("orders") == "s3://bucket/tables/orders"  # asked once
    assert admin.asked == [("topic", "orders"), ("broker", "1"), ("topic", "clicks")]


def test_brokers_without_a_root_mean_brokers_only():
    locator = TierLocator(None, admin=FakeAdmin({"orders": True}, ""))
    assert locator.location("orders") is None


def test_remote_table_reads_false_turns_it_off():
    base = {"subscribe": "t", "kafka.bootstrap.servers": "h:1"}
    off = parse_source_options({**base, "remotetablereads": "false"}, streaming=False)
    assert locator_for(off, FakeAdmin({}, "")) is None
    on = parse_source_options(
        {**base, "remoteTableRoot": "/r", "storage.options.AWS_REGION": "x"}, streaming=False
    )
    assert (on.remote_table_root, dict(on.storage_options)) == ("/r", {"AWS_REGION": "x"})
    assert "AWS_REGION" not in repr(on)


def test_a_table_of_another_topic_id_is_not_read(tmp_path):
    """A topic deleted and created again under the same name: its old table (kept) holds
    another topic's records, so the read goes to the brokers."""
    import uuid

    from sparklog.records.builder import SimpleRecord, build_batch
    from sparklog.storage.remote.table import open_topic_table
    from sparklog.storage.remote.tier import SegmentUpload

    old = uuid.uuid4()
    table = open_topic_table(str(tmp_path), "orders", old)
    table.append(
        [SegmentUpload(0, 0, 1, build_batch([SimpleRecord(b"v", b"k", 0)], base_offset=0))]
    )

    def snapshots(current):
        admin = FakeAdmin({}, "")
        admin.describe_topics = lambda names: {n: SimpleNamespace(topic_id=current) for n in names}
        return TierLocator(str(tmp_path), admin=admin).snapshots(["orders"])

    assert snapshots(uuid.uuid4()) == {}
    found = snapshots(old)["orders"]
    assert (found.partitions[0].start_offset, found.partitions[0].end_offset) == (0, 1)
