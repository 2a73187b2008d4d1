"""`python -m sparklog reassign-partitions` (kafka-reassign-partitions.sh): move replicas
(KIP-455) with an optional replication throttle (KIP-73).

- `--execute --reassignment-json-file F [--throttle B/s]`: prints the current assignment (keep
  it for a rollback) and starts the moves. With `--throttle`, as Kafka's tool: the topics'
  `leader.replication.throttled.replicas` name the moving partitions' current replicas,
  `follower.replication.throttled.replicas` the replicas being added, and every broker of those
  replica sets gets `leader.replication.throttled.rate` and `follower.replication.throttled.rate`.
- `--verify --reassignment-json-file F [--preserve-throttles]`: prints each partition's status
  and, once every one is complete, clears the throttles (the rates on every broker, the replica
  lists on the topics), as Kafka's tool does.
- `--cancel --reassignment-json-file F`: cancels the moves still in progress.

The JSON is Kafka's: `{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from sparklog.cli.common import CliError, admin_client
from sparklog.metrics.replication_quota import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
)

Moves = dict[tuple[str, int], list[int]]


def add_reassign_parser(
    commands: Any, client_command: Callable[[str, str], argparse.ArgumentParser]
) -> None:
    sub = client_command("reassign-partitions", "move replicas, with a replication throttle")
    action = sub.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true", help="start the reassignment")
    action.add_argument("--verify", action="store_true", help="status; clears throttles when done")
    action.add_argument("--cancel", action="store_true", help="cancel moves in progress")
    sub.add_argument("--reassignment-json-file", required=True, metavar="FILE")
    sub.add_argument(
        "--throttle",
        type=int,
        default=-1,
        metavar="B/S",
        help="with --execute: replication between brokers at most this many bytes/s (KIP-73)",
    )
    sub.add_argument(
        "--preserve-throttles",
        action="store_true",
        help="with --verify: leave the throttles in place",
    )


def read_moves(path: str) -> Moves:
    """Kafka's reassignment JSON as {(topic, partition): replicas}; a bad file is a user error."""
    try:
        document = json.loads(Path(path).read_text())
        moves: Moves = {}
        for p in document["partitions"]:
            key = (str(p["topic"]), int(p["partition"]))
            if key in moves:
                raise CliError(f"partition {key[0]}-{key[1]} appears twice in {path}")
            replicas = [int(r) for r in p["replicas"]]
            if not replicas or len(set(replicas)) != len(replicas):
                raise CliError(
                    f"partition {key[0]}-{key[1]} in {path} needs distinct replicas, got {replicas}"
                )
            moves[key] = replicas
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise CliError(
            f"{path} is not a reassignment (Kafka's format: "
            '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}): '
            f"{e!r}"
        ) from None
    if not moves:
        raise CliError(f"{path} lists no partitions")
    return moves


def _json(moves: Mapping[tuple[str, int], Iterable[int]]) -> str:
    partitions = [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(list(r))}
        for (t, p), r in sorted(moves.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def _current(admin: Any, moves: Moves) -> Moves:
    topics = admin.describe_topics(sorted({t for t, _p in moves}))
    current: Moves = {}
    for topic, partition in moves:
        info = next((p for p in topics[topic].partitions if p.partition == partition), None)
        if info is None:
            raise CliError(f"topic {topic} has no partition {partition}")
        current[(topic, partition)] = list(info.replicas)
    return current


def throttles(current: Moves, moves: Moves) -> tuple[dict[str, dict[str, str]], set[int]]:
    """The topic configs (Kafka's `calculateLeaderThrottles` / `calculateFollowerThrottles`)
    and the brokers whose rates to set, for moving from `current` to `moves`."""
    configs: dict[str, dict[str, str]] = {}
    brokers: set[int] = set()
    for (topic, partition), target in sorted(moves.items()):
        now = current[(topic, partition)]
        if now == target:
            continue
        leader = configs.setdefault(topic, {LEADER_REPLICAS: "", FOLLOWER_REPLICAS: ""})
        added = [f"{partition}:{b}" for b in target if b not in now]
        kept = [f"{partition}:{b}" for b in now]
        leader[LEADER_REPLICAS] = ",".join(x for x in (leader[LEADER_REPLICAS], *kept) if x)
        leader[FOLLOWER_REPLICAS] = ",".join(x for x in (leader[FOLLOWER_REPLICAS], *added) if x)
        brokers.update(now, target)
    return configs, brokers


def cmd_reassign(args: argparse.Namespace, out: TextIO) -> int:
    moves = read_moves(args.reassignment_json_file)
    if args.throttle != -1 and not args.execute:
        raise CliError("--throttle goes with --execute (--verify removes the throttle)")
    if args.throttle < -1:
        raise CliError(f"--throttle must be a number of bytes/s, got {args.throttle}")
    with admin_client(args) as admin:
        if args.execute:
            return _execute(admin, moves, args.throttle, out)
        if args.cancel:
            in_progress = admin.list_partition_reassignments(list(moves))
            cancelled = {tp: None for tp in moves if tp in in_progress}
            if cancelled:
                admin.alter_partition_reassignments(cancelled)
            names = ",".join(f"{t}-{p}" for t, p in sorted(cancelled))
            print(f"Successfully cancelled partition reassignments for: {names}", file=out)
            return 0
        return _verify(admin, moves, args.preserve_throttles, out)


def _execute(admin: Any, moves: Moves, throttle: int, out: TextIO) -> int:
    current = _current(admin, moves)
    print("Current partition replica assignment\n", file=out)
    print(_json(current), file=out)
    print("\nSave this to use as the --reassignment-json-file option during rollback", file=out)
    if throttle >= 0:
        configs, brokers = throttles(current, moves)
        if configs:
            admin.incremental_alter_configs({("topic", t): c for t, c in configs.items()})
        if brokers:
            rate = str(throttle)
            admin.incremental_alter_configs(
                {("broker", str(b)): {LEADER_RATE: rate, FOLLOWER_RATE: rate} for b in brokers}
            )
        print(
            "Warning: You must run --verify periodically, until the reassignment completes, "
            "to ensure the throttle is removed.",
            file=out,
        )
        print(f"The inter-broker throttle limit was set to {throttle} B/s", file=out)
    admin.alter_partition_reassignments({tp: r for tp, r in moves.items()})
    names = ",".join(f"{t}-{p}" for t, p in sorted(moves))
    print(f"Successfully started partition reassignments for {names}", file=out)
    return 0


def _verify(admin: Any, moves: Moves, preserve_throttles: bool, out: TextIO) -> int:
    in_progress = admin.list_partition_reassignments(list(moves))
    current = _current(admin, moves)
    done = True
    print("Status of partition reassignment:", file=out)
    for (topic, partition), target in sorted(moves.items()):
        name = f"{topic}-{partition}"
        if (topic, partition) in in_progress:
            done = False
            print(f"Reassignment of partition {name} is still in progress.", file=out)
        elif current[(topic, partition)] == target:
            print(f"Reassignment of partition {name} is complete.", file=out)
        else:
            done = False
            print(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{current[(topic, partition)]} rather than {target}.",
                file=out,
            )
    if done and not preserve_throttles:
        print("", file=out)
        brokers = sorted(n.node_id for n in admin.describe_cluster().brokers)
        admin.incremental_alter_configs(
            {("broker", str(b)): {LEADER_RATE: None, FOLLOWER_RATE: None} for b in brokers}
        )
        print(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}", file=out)
        topics = sorted({t for t, _p in moves})
        admin.incremental_alter_configs(
            {("topic", t): {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None} for t in topics}
        )
        print(f"Clearing topic-level throttles on topic {','.join(topics)}", file=out)
    return 0 if done else 1
