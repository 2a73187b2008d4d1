"""`configs describe|alter` (kafka-configs.sh --entity-type topics|brokers|groups).

As kafka-configs.sh: `--entity-type topics --entity-name T`, `--entity-type brokers
--entity-name ID` or `--entity-default` (the cluster-wide broker default), `--entity-type groups
--entity-name G` (a consumer group's own `consumer.session.timeout.ms`,
`consumer.heartbeat.interval.ms`; metadata/group_configs.py); `describe` prints
`Dynamic configs for topic T are:` and one `  name=value sensitive=... synonyms={SOURCE:name=value}`
line per override (every config with `--all`); `alter` takes `--add-config k=v[,k=[a,b]]` and
`--delete-config k[,k]` and prints `Completed updating config for topic T.` Client quotas and
SCRAM users (the other entity types of kafka-configs.sh) are `quotas` and `users`.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from sparklog.cli.common import CliError, admin_client
from sparklog.cli.topics import describe_topics

#: kafka-configs.sh's entity type names (and singular forms) -> the config resource type
_TYPES = {
    "topics": "topic",
    "topic": "topic",
    "brokers": "broker",
    "broker": "broker",
    "groups": "group",
    "group": "group",
}
#: where an override comes from: the sources describe lists without --all (kafka-configs.sh)
_DYNAMIC = {
    "DYNAMIC_TOPIC_CONFIG",
    "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG",
    "GROUP_CONFIG",
}


def add_configs_parser(client_command: Any) -> None:
    configs = client_command("configs", "describe or alter topic, broker and group configs")
    configs.add_argument("action", choices=("describe", "alter"))
    configs.add_argument("--entity-type", required=True, help="topics, brokers or groups")
    target = configs.add_mutually_exclusive_group()
    target.add_argument("--entity-name", help="the topic, the broker id or the group")
    target.add_argument("--entity-default", action="store_true",
                        help="brokers: the cluster-wide default")  # fmt: skip
    configs.add_argument("--all", action="store_true", help="describe: every config, not only "
                         "the overrides")  # fmt: skip
    configs.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]")
    configs.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")


def split_config_list(text: str) -> list[str]:
    """`a=1,b=[x,y],c=2` as `["a=1", "b=x,y", "c=2"]`: kafka-configs.sh's list values go in
    square brackets so that their commas do not separate configs."""
    items, depth, current = [], 0, ""
    for char in text:
        if char in "[]":  # brackets only group, they are not part of the value
            depth += 1 if char == "[" else -1
        elif char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth != 0:
        raise CliError(f"--add-config {text!r}: unbalanced [ ]")
    items.append(current)
    return [i.strip() for i in items if i.strip()]


def parse_changes(args: argparse.Namespace) -> dict[str, str | None]:
    """{name: value} to set and {name: None} to delete; a name in both is a user error."""
    changes: dict[str, str | None] = {}
    for text in args.add_config:
        for pair in split_config_list(text):
            name, sep, value = pair.partition("=")
            if not sep or not name.strip():
                raise CliError(f"--add-config expects name=value, got {pair!r}")
            changes[name.strip()] = value.strip()
    for text in args.delete_config:
        for name in (n.strip() for n in text.split(",")):
            if name in changes:
                raise CliError(f"{name} is both in --add-config and --delete-config")
            if name:
                changes[name] = None
    return changes


def _resource(args: argparse.Namespace) -> tuple[str, str, str]:
    """(resource type, name, how kafka-configs.sh names it in its lines)."""
    kind = _TYPES.get(args.entity_type.lower())
    if kind is None:
        raise CliError(
            f"--entity-type {args.entity_type!r}: configs handles topics, brokers and groups "
            "(client quotas: `quotas`, SCRAM users: `users`)"
        )
    if args.entity_default:
        if kind != "broker":
            raise CliError(f"--entity-default is for brokers; {kind}s take --entity-name")
        return kind, "", "default config for brokers in the cluster"
    if args.entity_name is None:
        raise CliError(f"configs {args.action} needs --entity-name (or --entity-default)")
    if kind == "broker" and not args.entity_name.isdigit():
        raise CliError(f"--entity-name {args.entity_name!r}: a broker is named by its id")
    return kind, args.entity_name, f"{kind} {args.entity_name}"


def cmd_configs(args: argparse.Namespace, out: TextIO) -> int:
    kind, name, shown = _resource(args)
    with admin_client(args) as admin:
        if kind == "topic":
            describe_topics(admin, [name])  # an unknown topic fails naming it
        if args.action == "alter":
            changes = parse_changes(args)
            if not changes:
                raise CliError("configs alter needs --add-config and/or --delete-config")
            admin.incremental_alter_configs({(kind, name): changes})
            what = shown if name else "default config for brokers in the cluster"
            out.write(f"Completed updating {'config for ' if name else ''}{what}.\n")
            return 0
        entries = admin.describe_configs([(kind, name)])
        entries = next(iter(entries.values()), {})
        heading = "All" if args.all else ("Default" if not name else "Dynamic")
        out.write(f"{heading} configs for {shown if name else 'brokers in the cluster'} are:\n")
        for e in sorted(entries.values(), key=lambda e: e.name):
            if not args.all and e.source not in _DYNAMIC:
                continue
            value = None if e.is_sensitive else e.value
            out.write(f"  {e.name}={'' if value is None else value} "
                      f"sensitive={str(e.is_sensitive).lower()} "
                      f"synonyms={{{e.source}:{e.name}={'' if value is None else value}}}\n")  # fmt: skip
    return 0
