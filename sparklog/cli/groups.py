"""`groups list|describe|reset-offsets|delete|delete-offsets` (kafka-consumer-groups).

`describe` prints Kafka's columns (GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
CONSUMER-ID HOST CLIENT-ID); with `--members` one line per member (GROUP CONSUMER-ID HOST
CLIENT-ID #PARTITIONS, plus ASSIGNMENT with `--verbose`), with `--state` the group's (GROUP
COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS). A group that does not exist is an error
(exit 1), as kafka-consumer-groups.sh's "Consumer group 'g' does not exist.". `reset-offsets` plans new offsets (`--to-earliest`, `--to-latest`,
`--to-datetime`, `--to-offset`, `--shift-by`) for `--topic T[:P,P...]` or `--all-topics`, prints
the plan, and commits it only with `--execute` (`--dry-run` is the default), which Kafka allows
only while the group has no active members.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from sparklog.cli.common import CliError, admin_client
from sparklog.client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

_RESETS = ("to_earliest", "to_latest", "to_datetime", "to_offset", "shift_by")


def add_groups_parser(
    commands: Any, client_command: Callable[[str, str], argparse.ArgumentParser]
) -> None:
    groups = client_command("groups", "list, describe, reset offsets of, or delete groups")
    groups.add_argument(
        "action", choices=("list", "describe", "reset-offsets", "delete", "delete-offsets")
    )
    groups.add_argument("--group", help="the consumer group")
    groups.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]")
    groups.add_argument("--all-topics", action="store_true", help="every topic with an offset")
    groups.add_argument("--state", action="append", nargs="?", const="",
                        help="list: only groups in this state; describe: the group's state")  # fmt: skip
    groups.add_argument("--members", action="store_true", help="describe: one line per member")
    groups.add_argument("--verbose", action="store_true", help="describe --members: assignments")
    target = groups.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS[.sss][+HH:MM]")
    target.add_argument("--to-offset", type=int)
    target.add_argument("--shift-by", type=int)
    run = groups.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="print the plan only (default)")
    run.add_argument("--execute", action="store_true", help="commit the new offsets")


def cmd_groups(args: argparse.Namespace, out: TextIO) -> int:
    with admin_client(args) as admin:
        if args.action == "list":
            for g in admin.list_groups([s for s in args.state or () if s]):
                out.write(f"{g.group_id}\t{g.state}\t{g.protocol_type}\n")
            return 0
        group = _required(args.group, "--group")
        if args.action == "describe" and args.members:
            _describe_members(admin, group, args.verbose, out)
        elif args.action == "describe" and args.state is not None:
            _describe_state(admin, group, out)
        elif args.action == "describe":
            _describe(admin, group, out)
        elif args.action == "delete":
            admin.delete_groups([group])
            out.write(f"Deleted group {group!r}\n")
        elif args.action == "delete-offsets":
            partitions = _partitions(admin, group, args)
            admin.delete_group_offsets(group, partitions)
            for topic, partition in partitions:
                out.write(f"{group}\t{topic}\t{partition}\tdeleted\n")
        else:
            _reset_offsets(admin, group, args, out)
    return 0


def _required(value: Any, flag: str) -> Any:
    if value is None:
        raise CliError(f"{flag} is required for this action")
    return value


def _existing_group(admin: Any, group: str) -> Any:
    """The group's description; one the coordinator does not know (state Dead, DescribeGroups
    before v6) is a user error, as in kafka-consumer-groups.sh."""
    description = admin.describe_group(group)
    if description.state == "Dead":
        raise CliError(f"Consumer group {group!r} does not exist "
                       "(see `python -m sparklog groups list`)")  # fmt: skip
    return description


def _table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write(" ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _describe_members(admin: Any, group: str, verbose: bool, out: TextIO) -> None:
    description = _existing_group(admin, group)
    if not description.members:
        out.write(f"Consumer group {group!r} has no active members.\n")
        return
    header = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    rows: list[tuple[str, ...]] = [(*header, "ASSIGNMENT") if verbose else header]
    for m in sorted(description.members, key=lambda m: m.member_id):
        row: tuple[str, ...] = (group, m.member_id, m.host, m.client_id, str(len(m.assignment)))
        if verbose:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in m.assignment:
                by_topic.setdefault(topic, []).append(partition)
            assigned = ",".join(
                f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items())
            )
            row = (*row, assigned or "-")
        rows.append(row)
    _table(rows, out)


def _describe_state(admin: Any, group: str, out: TextIO) -> None:
    description = _existing_group(admin, group)
    coordinator = admin.find_group_coordinator(group)
    rows = [
        ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
        (
            group,
            f"{coordinator.host}:{coordinator.port} ({coordinator.node_id})",
            description.protocol or "",
            description.state,
            str(len(description.members)),
        ),
    ]
    _table(rows, out)


def _describe(admin: Any, group: str, out: TextIO) -> None:
    description = _existing_group(admin, group)
    committed = admin.list_group_offsets(group)
    owners = {tp: m for m in description.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owners))
    ends = admin.list_offsets(dict.fromkeys(partitions, LATEST_TIMESTAMP)) if partitions else {}
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "HOST", "CLIENT-ID")  # fmt: skip
    rows = [header]
    for tp in partitions:
        current, end = committed.get(tp), ends[tp].offset
        member = owners.get(tp)
        rows.append(
            (
                group,
                tp[0],
                str(tp[1]),
                "-" if current is None else str(current),
                str(end),
                "-" if current is None else str(max(0, end - current)),
                member.member_id if member else "-",
                member.host if member else "-",
                member.client_id if member else "-",
            )
        )
    if len(rows) == 1:
        out.write(f"Consumer group {group!r} has no committed offsets and no members "
                  f"(state {description.state}).\n")  # fmt: skip
        return
    _table(rows, out)


def _partitions(admin: Any, group: str, args: argparse.Namespace) -> list[tuple[str, int]]:
    """The partitions `--topic T[:P,...]` / `--all-topics` name."""
    if args.all_topics:
        return sorted(admin.list_group_offsets(group))
    specs = _required(args.topic, "--topic (or --all-topics)")
    out: list[tuple[str, int]] = []
    for spec in specs:
        topic, _sep, parts = spec.partition(":")
        if parts:
            try:
                out.extend((topic, int(p)) for p in parts.split(","))
            except ValueError:
                raise CliError(
                    f"--topic {spec!r}: partitions must be numbers, e.g. t:0,1"
                ) from None
        else:
            described = admin.describe_topics([topic])[topic]
            out.extend((topic, p.partition) for p in described.partitions)
    return sorted(set(out))


def _reset_offsets(admin: Any, group: str, args: argparse.Namespace, out: TextIO) -> None:
    chosen = [name for name in _RESETS if getattr(args, name) not in (None, False)]
    if not chosen:
        raise CliError("reset-offsets needs one of --to-earliest, --to-latest, --to-datetime, "
                       "--to-offset, --shift-by")  # fmt: skip
    partitions = _partitions(admin, group, args)
    earliest = admin.list_offsets(dict.fromkeys(partitions, EARLIEST_TIMESTAMP))
    latest = admin.list_offsets(dict.fromkeys(partitions, LATEST_TIMESTAMP))
    committed = admin.list_group_offsets(group)
    plan = {}
    for tp in partitions:
        low, high = earliest[tp].offset, latest[tp].offset
        if args.to_earliest:
            target = low
        elif args.to_latest:
            target = high
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.shift_by is not None:
            target = committed.get(tp, low) + args.shift_by
        else:
            target = _offset_at(admin, tp, args.to_datetime, high)
        plan[tp] = min(max(target, low), high)  # Kafka clamps into the log's range
    out.write("GROUP\tTOPIC\tPARTITION\tNEW-OFFSET\n")
    for (topic, partition), offset in sorted(plan.items()):
        out.write(f"{group}\t{topic}\t{partition}\t{offset}\n")
    if args.execute:
        admin.alter_group_offsets(group, plan)
    else:
        out.write("(dry run: add --execute to commit these offsets)\n")


def _offset_at(admin: Any, tp: tuple[str, int], text: str, latest: int) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--to-datetime {text!r}: use YYYY-MM-DDTHH:mm:SS[.sss][+HH:MM]") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    found = admin.list_offsets({tp: int(moment.timestamp() * 1000)})[tp].offset
    return latest if found < 0 else found
