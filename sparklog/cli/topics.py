"""`topics create|list|describe|alter|delete` (kafka-topics).

`alter --topic T --partitions N` grows the topic to N partitions (kafka-topics.sh --alter);
`alter --config k=v` / `--delete-config k` change its configs, which kafka-topics.sh leaves to
kafka-configs.sh (`configs alter` here does the same).
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from sparklog.cli.common import (
    CliError,
    admin_client,
    parse_pairs,
)
from sparklog.errors import UnknownTopicOrPartitionError


def _topic_name(args: argparse.Namespace) -> str:
    name: str | None = args.topic
    if not name:
        raise CliError(f"topics {args.action} needs a topic: --topic NAME")
    return name


def cmd_topics(args: argparse.Namespace, out: TextIO) -> int:
    from sparklog.client import NewTopic
    from sparklog.errors import TopicAlreadyExistsError

    with admin_client(args) as admin:
        if args.action == "list":
            for name in admin.list_topics():
                print(name, file=out)
        elif args.action == "create":
            name = _topic_name(args)
            topic = NewTopic(
                name, args.partitions, args.replication_factor, parse_pairs(args.config, "--config")
            )
            try:
                admin.create_topics([topic])
            except TopicAlreadyExistsError:
                if not args.if_not_exists:
                    raise CliError(f"topic {name!r} already exists") from None
                return 0
            print(f"Created topic {name}.", file=out)
        elif args.action == "describe":
            names = [args.topic] if args.topic else admin.list_topics()
            for description in describe_topics(admin, names).values():
                _print_description(admin, description, out)
        elif args.action == "alter":
            _alter(admin, args, out)
        elif args.action == "delete":
            name = _topic_name(args)
            describe_topics(admin, [name])
            admin.delete_topics([name])
            print(f"Deleted topic {name}.", file=out)
    return 0


def _alter(admin: Any, args: argparse.Namespace, out: TextIO) -> None:
    name = _topic_name(args)
    changes: dict[str, str | None] = dict(parse_pairs(args.config, "--config"))
    changes.update(dict.fromkeys(args.delete_config or ()))
    if args.partitions < 0 and not changes:
        raise CliError("topics alter needs --partitions N and/or --config k=v / --delete-config k")
    (described,) = describe_topics(admin, [name]).values()
    current = len(described.partitions)
    if args.partitions >= 0:
        if args.partitions <= current:
            # kafka-topics.sh's wording: partitions only grow (keys would move otherwise)
            raise CliError(
                f"topic {name!r} has {current} partitions; the number of partitions can only "
                f"be increased (give --partitions above {current})"
            )
        admin.create_partitions({name: args.partitions})
        out.write(f"Topic {name} now has {args.partitions} partitions.\n")
    if changes:
        admin.incremental_alter_configs({("topic", name): changes})
        out.write(f"Completed updating config for topic {name}.\n")


def describe_topics(admin: Any, names: list[str]) -> dict[str, Any]:
    try:
        return admin.describe_topics(names) if names else {}
    except UnknownTopicOrPartitionError:
        missing = [n for n in names if n not in admin.list_topics()]
        raise CliError(
            f"topic {', '.join(map(repr, missing or names))} does not exist "
            "(see `python -m sparklog topics list`)"
        ) from None


def _print_description(admin: Any, d: Any, out: TextIO) -> None:
    """kafka-topics --describe's format: a topic line, then one line per partition."""
    entries = admin.describe_configs([("topic", d.name)]).get(("topic", d.name), {})
    configs = ",".join(
        f"{e.name}={e.value}"
        for e in sorted(entries.values(), key=lambda e: e.name)
        if e.source == "DYNAMIC_TOPIC_CONFIG"
    )
    replication = max((len(p.replicas) for p in d.partitions), default=0)
    print(
        f"Topic: {d.name}\tTopicId: {d.topic_id}\tPartitionCount: {len(d.partitions)}\t"
        f"ReplicationFactor: {replication}\tConfigs: {configs}",
        file=out,
    )
    for p in sorted(d.partitions, key=lambda p: p.partition):
        ids = lambda xs: ",".join(map(str, xs))  # noqa: E731
        print(
            f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: "
            f"{p.leader if p.leader >= 0 else 'none'}\tReplicas: {ids(p.replicas)}\tIsr: {ids(p.isr)}",
            file=out,
        )
