"""Shared builders for the client unit tests: clusters and batches without sockets."""

from __future__ import annotations

from sparklog.client.metadata import BrokerNode, Cluster, PartitionInfo, TopicInfo


def cluster(topics: dict[str, list[int]], brokers: tuple[int, ...] = (1, 2)) -> Cluster:
    """A cluster whose topic partitions have the given leaders (-1 = no leader)."""
    return Cluster(
        brokers={b: BrokerNode(b, "127.0.0.1", 9000 + b) for b in brokers},
        topics={
            name: TopicInfo(
                name, tuple(PartitionInfo(name, i, leader) for i, leader in enumerate(leaders))
            )
            for name, leaders in topics.items()
        },
    )
