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
