"""What consumer groups cost: offset commits into Delta, and rebalance times.

(a) OffsetCommit: `--members` committers (50) each commit `--partitions` offsets (40) every
    `--interval-ms` (100) to the group coordinator over Kafka's protocol: latency p50/p99 at that
    rate; then the same committers commit back to back: partition-offsets committed per second.
    They send to a broker, which forwards to the driver's coordinator (as every client does since
    issue 29); `--direct` sends to the coordinator's own listener (the hop's cost is the
    difference).
    The committers run in their own process. Both phases run twice: with the Delta table
    (durable) and with an in-memory store (the baseline), so `durable_vs_memory` is the cost of
    durability in Delta.
(b) Rebalance: a group of `--group-size` (10) confluent-kafka consumers, stable; then one more
    joins (`rebalance_after_join_s`: until every member holds a clean split again), and one
    leaves gracefully (`rebalance_after_leave_s`). Eager range assignor, session 10 s.

Usage: .venv/bin/python jobs/bench_groups.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sparklog.client import AdminClient, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.async_client import AsyncKafkaConnection

TOPIC = "bench-groups"


class MemoryStore:
    """The baseline: an offsets store that keeps nothing (same interface as OffsetsStore)."""

    def __init__(self, path: str, maintenance_commits: int) -> None:
        self.path = path
        self.commits = 0

    def read_rows(self) -> list[dict[str, Any]]:
        return []

    def append(self, rows: list[dict[str, Any]]) -> None:
        self.commits += 1

    def version(self) -> int:
        return 0

    def wait_for_maintenance(self, timeout_s: float = 60.0) -> None:
        pass


def commit_fields(group: str, partitions: int, offset: int) -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                    for p in range(partitions)
                ],
            }
        ],
    }


async def committers(
    host: str, port: int, members: int, partitions: int, interval_ms: float, seconds: float
) -> tuple[list[float], int]:
    """`members` connections committing every `interval_ms` (0: back to back) for `seconds`;
    (latencies in ms, commits)."""
    conns = [AsyncKafkaConnection(host, port, client_id=f"bench-{i}") for i in range(members)]
    for c in conns:
        await c.connect()
    latencies: list[float] = []
    end = time.monotonic() + seconds
    schema = codec.request_schema(ApiKey.OFFSET_COMMIT, 8)

    async def member(i: int, conn: AsyncKafkaConnection) -> None:
        group, offset = f"bench-{uuid.uuid4().hex[:6]}-{i}", 0
        next_at = time.monotonic() + (i * interval_ms / members) / 1000
        while time.monotonic() < end:
            if interval_ms:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                next_at += interval_ms / 1000
            offset += 1
            started = time.perf_counter()
            body = kio_build.build(schema, commit_fields(group, partitions, offset))
            response = await conn.request(body)
            latencies.append((time.perf_counter() - started) * 1000)
            assert all(int(p.error_code) == 0 for t in response.topics for p in t.partitions)

    await asyncio.gather(*(member(i, c) for i, c in enumerate(conns)))
    for c in conns:
        await c.close()
    return latencies, len(latencies)


def run_committers(
    host: str, port: int, members: int, partitions: int, interval_ms: float, seconds: float
) -> tuple[list[float], int, float]:
    """`committers` in a fresh process: (latencies, commits, elapsed seconds)."""
    started = time.monotonic()
    latencies, commits = asyncio.run(
        committers(host, port, members, partitions, interval_ms, seconds)
    )
    return latencies, commits, time.monotonic() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def commit_figures(args: argparse.Namespace, durable: bool) -> dict[str, float]:
    from sparklog.coordinator.server import GroupCoordinatorServer

    config = {"group.initial.rebalance.delay.ms": "0"}
    with (
        tempfile.TemporaryDirectory(prefix="bench-groups-") as tmp,
        EmbeddedCluster(brokers=1, data_dir=tmp, config=config) as cluster,
    ):
        with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic(TOPIC, args.partitions)])
        if not durable:  # on the same port: the brokers forward to it
            port = cluster.coordinator.port
            cluster.coordinator.stop()
            cluster.coordinator = GroupCoordinatorServer(
                Path(tmp) / "memory",
                cluster.controller,
                port=port,
                config=config,
                store_factory=MemoryStore,
            ).start_in_thread()
        if args.direct:
            host, port = cluster.coordinator.host, cluster.coordinator.port
        else:
            host, port = cluster.brokers[0].host, cluster.brokers[0].port
        # the committers run in their own process, as clients would: the coordinator's
        # process (and its GIL) is not shared with 50 client connections
        spawn = multiprocessing.get_context("spawn")
        with spawn.Pool(1) as pool:
            paced, _, _ = pool.apply(
                run_committers,
                (host, port, args.members, args.partitions, args.interval_ms, args.seconds),
            )
            _, commits, elapsed = pool.apply(
                run_committers, (host, port, args.members, args.partitions, 0, args.seconds)
            )
        store = cluster.coordinator.store
        return {
            "commit_p50_ms": statistics.median(paced),
            "commit_p99_ms": percentile(paced, 0.99),
            "paced_commits_per_s": len(paced) / args.seconds,
            "offsets_committed_per_s": commits * args.partitions / elapsed,
            "delta_commits": float(store.commits) if durable else 0.0,
        }


def stable_split(consumers: list[Any], partitions: int) -> bool:
    parts = [{tp.partition for tp in c.assignment()} for c in consumers]
    return (
        all(parts) and sum(map(len, parts)) == partitions and len(set().union(*parts)) == partitions
    )


def wait_stable(consumers: list[Any], partitions: int, timeout_s: float = 120) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        for c in consumers:
            c.poll(0.005)
        if stable_split(consumers, partitions):
            return time.monotonic() - started
    raise TimeoutError(f"the group did not settle within {timeout_s} s")


def rebalance_figures(args: argparse.Namespace) -> dict[str, float]:
    from confluent_kafka import Consumer

    partitions = args.group_size * 2
    delay_ms = 3000

    with (
        tempfile.TemporaryDirectory(prefix="bench-rebalance-") as tmp,
        EmbeddedCluster(
            brokers=1, data_dir=tmp, config={"group.initial.rebalance.delay.ms": str(delay_ms)}
        ) as cluster,
    ):
        with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic(TOPIC, partitions)])

        def member() -> Any:
            c = Consumer(
                {
                    "bootstrap.servers": cluster.bootstrap_servers,
                    "group.id": "bench-rebalance",
                    "session.timeout.ms": 10_000,
                    "heartbeat.interval.ms": 500,
                    "partition.assignment.strategy": "range",
                }
            )
            c.subscribe([TOPIC])
            return c

        consumers = [member() for _ in range(args.group_size)]
        first_s = wait_stable(consumers, partitions)
        consumers.append(member())
        join_s = wait_stable(consumers, partitions)
        leaving = consumers.pop()
        leaving.close()
        leave_s = wait_stable(consumers, partitions)
        for c in consumers:
            c.close()
    return {
        "first_generation_s": first_s,
        "rebalance_after_join_s": join_s,
        "rebalance_after_leave_s": leave_s,
        "initial_rebalance_delay_s": delay_ms / 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=40, help="offsets per commit")
    parser.add_argument("--interval-ms", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--group-size", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument(
        "--direct",
        action="store_true",
        help="commit to the coordinator's own listener, not through a broker (the extra hop)",
    )
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.members, args.partitions, args.seconds, args.group_size = 5, 4, 1.0, 2

    durable = commit_figures(args, durable=True)
    memory = commit_figures(args, durable=False)
    rebalance = rebalance_figures(args)
    figures = {
        "commit_p50_ms": durable["commit_p50_ms"],
        "commit_p99_ms": durable["commit_p99_ms"],
        "offsets_committed_per_s": durable["offsets_committed_per_s"],
        "durable_vs_memory": durable["offsets_committed_per_s"] / memory["offsets_committed_per_s"],
        "rebalance_after_join_s": rebalance["rebalance_after_join_s"],
        "rebalance_after_leave_s": rebalance["rebalance_after_leave_s"],
        "durable": durable,
        "memory": memory,
        "rebalance": rebalance,
        "settings": {
            "members": args.members,
            "offsets_per_commit": args.partitions,
            "interval_ms": args.interval_ms,
            "seconds": args.seconds,
            "group_size": args.group_size,
            "commits_sent_to": "coordinator" if args.direct else "broker",
        },
    }
    for key in ("commit_p50_ms", "commit_p99_ms", "offsets_committed_per_s", "durable_vs_memory",
                "rebalance_after_join_s", "rebalance_after_leave_s"):  # fmt: skip
        print(f"{key:>26} = {figures[key]:,.3f}")
    print(f"{'paced commits/s':>26} = {durable['paced_commits_per_s']:,.0f} "
          f"(memory: p50 {memory['commit_p50_ms']:.2f} ms, p99 {memory['commit_p99_ms']:.2f} ms; "
          f"{durable['delta_commits']:.0f} Delta commits)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
