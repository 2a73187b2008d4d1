"""Client-side partition assignors of the classic group protocol (run by the group leader):
`range`, `roundrobin`, `sticky` and `cooperative-sticky`, with Kafka's names and results for the
common cases.

Each takes {member id: subscribed topics}, {topic: partition count} and, for `sticky`,
{member id: partitions it owned}, and returns {member id: [(topic, partition), ...]}.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparklog.structs import TopicPartition


def range_assign(
    subscriptions: Mapping[str, list[str]],
    counts: Mapping[str, int],
    owned: Mapping = {},  # noqa: B006
) -> dict[str, list[TopicPartition]]:
    """Per topic, contiguous ranges in member-id order; the first members get one extra."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts if counts.get(t, 0) > 0})
    for topic in topics:
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        n, k = counts[topic], len(members)
        start = 0
        for i, m in enumerate(members):
            size = n // k + (1 if i < n % k else 0)
            out[m].extend(TopicPartition(topic, p) for p in range(start, start + size))
            start += size
    return out


def roundrobin_assign(
    subscriptions: Mapping[str, list[str]],
    counts: Mapping[str, int],
    owned: Mapping = {},  # noqa: B006
) -> dict[str, list[TopicPartition]]:
    """All partitions in (topic, partition) order dealt to subscribed members in turn."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    members = sorted(subscriptions)
    i = 0
    for topic in sorted({t for ts in subscriptions.values() for t in ts}):
        for p in range(counts.get(topic, 0)):
            for _ in range(len(members)):
                m = members[i % len(members)]
                i += 1
                if topic in subscriptions[m]:
                    out[m].append(TopicPartition(topic, p))
                    break
    return out


def sticky_assign(
    subscriptions: Mapping[str, list[str]],
    counts: Mapping[str, int],
    owned: Mapping[str, list[TopicPartition]] = {},  # noqa: B006
) -> dict[str, list[TopicPartition]]:
    """Balanced, keeping each member's owned partitions where the balance allows."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    every = [
        TopicPartition(t, p)
        for t in sorted({t for ts in subscriptions.values() for t in ts})
        for p in range(counts.get(t, 0))
    ]
    if not out:
        return out
    quota = -(-len(every) // len(out))
    placed: set[TopicPartition] = set()
    for m in sorted(out):
        for tp in sorted(owned.get(m, ())):
            if tp in placed or tp[0] not in subscriptions[m] or tp[1] >= counts.get(tp[0], 0):
                continue
            if len(out[m]) < quota:
                out[m].append(tp)
                placed.add(tp)
    for tp in every:
        if tp in placed:
            continue
        candidates = [m for m in out if tp[0] in subscriptions[m]]
        if candidates:
            m = min(candidates, key=lambda c: (len(out[c]), c))
            out[m].append(tp)
    return out


def cooperative_sticky_assign(
    subscriptions: Mapping[str, list[str]],
    counts: Mapping[str, int],
    owned: Mapping[str, list[TopicPartition]] = {},  # noqa: B006
) -> dict[str, list[TopicPartition]]:
    """Sticky, in KIP-429's two rounds: a partition moving from A to B is left out of B's
    share this round, so A revokes it first; the rejoin that follows hands it to B."""
    plan = sticky_assign(subscriptions, counts, owned)
    owner = {tp: m for m, tps in owned.items() for tp in tps}
    return {
        m: [tp for tp in tps if owner.get(tp, m) == m or owner.get(tp) not in subscriptions]
        for m, tps in plan.items()
    }


ASSIGNORS = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
    "cooperative-sticky": cooperative_sticky_assign,
}
