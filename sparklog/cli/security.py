"""`acls add|list|remove` (kafka-acls.sh) and `users add-scram|describe|delete`
(kafka-configs.sh --entity-type users).

`acls` takes kafka-acls.sh's options: `--allow-principal`/`--deny-principal` (with
`--allow-host`/`--deny-host`, `*` by default), `--operation` (repeatable, `All` by default
when adding), the resources `--topic`, `--group`, `--transactional-id` (repeatable) and
`--cluster`, `--resource-pattern-type` (literal or prefixed to add and remove; `list` also takes
match and any, its default), `--principal` to filter a list, and `--force` to remove every
ACL of a resource without naming them. `list` prints kafka-acls.sh's lines.

`users add-scram --user U [--mechanism SCRAM-SHA-512] [--iterations 4096]` reads the password
from `--password`, or from stdin when not given (keeping it out of the process list); only the
salted password leaves the client. `describe` prints kafka-configs.sh's line per user.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from sparklog.cli.common import CliError, admin_client
from sparklog.errors import SecurityDisabledError
from sparklog.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from sparklog.security.acl_filter import AclBindingFilter
from sparklog.security.credentials import MAX_ITERATIONS, MIN_ITERATIONS, ScramMechanism

_PATTERNS = {p.name.lower(): p for p in (PatternType.LITERAL, PatternType.PREFIXED,
                                         PatternType.MATCH, PatternType.ANY)}  # fmt: skip
_OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}  # fmt: skip


def add_security_parsers(
    commands: Any, client_command: Callable[[str, str], argparse.ArgumentParser]
) -> None:
    acls = client_command("acls", "add, list or remove ACLs (kafka-acls.sh)")
    acls.add_argument("action", choices=("add", "list", "remove"))
    for flag in ("--allow-principal", "--deny-principal", "--allow-host", "--deny-host"):
        acls.add_argument(flag, action="append", default=[])
    acls.add_argument("--operation", action="append", default=[],
                      help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                      "DescribeConfigs, AlterConfigs, IdempotentWrite, All, ...")  # fmt: skip
    acls.add_argument("--topic", action="append", default=[])
    acls.add_argument("--group", action="append", default=[])
    acls.add_argument("--transactional-id", action="append", default=[])
    acls.add_argument("--cluster", action="store_true")
    acls.add_argument("--resource-pattern-type", choices=sorted(_PATTERNS))
    acls.add_argument("--principal", action="append", default=[], help="list: only these")
    acls.add_argument("--force", action="store_true", help="remove: every ACL of the resources")

    users = client_command("users", "add, describe or delete SCRAM users (kafka-configs.sh)")
    users.add_argument("action", choices=("add-scram", "describe", "delete"))
    users.add_argument("--user", "--entity-name", dest="user")
    users.add_argument("--mechanism", default="SCRAM-SHA-512", help="(SCRAM-SHA-512)")
    users.add_argument("--iterations", type=int, default=4096, help="(4096)")
    users.add_argument("--password", help="(default: read from stdin)")


# -- acls ---------------------------------------------------------------------------------


def cmd_acls(args: argparse.Namespace, out: TextIO) -> int:
    default_pattern = "any" if args.action == "list" else "literal"
    pattern_type = _PATTERNS[args.resource_pattern_type or default_pattern]
    if args.action != "list" and pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CliError(
            f"--resource-pattern-type {pattern_type.name.lower()} is for list only; "
            "add and remove take literal or prefixed"
        )
    resources = list(_resources(args))
    try:
        return _acls(args, out, resources, pattern_type)
    except SecurityDisabledError:
        # Kafka's brokers answer SECURITY_DISABLED without an authorizer; say how to get one
        raise CliError(
            "the cluster has no authorizer, so it keeps no ACLs (SECURITY_DISABLED): set "
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer on "
            "the brokers and the controller (with super.users for the admins) and restart"
        ) from None


def _acls(
    args: argparse.Namespace,
    out: TextIO,
    resources: list[tuple[ResourceType, str | None]],
    pattern_type: PatternType,
) -> int:
    with admin_client(args) as admin:
        if args.action == "add":
            bindings = _bindings(args, resources, pattern_type)
            admin.create_acls(bindings)
            out.write(f"Adding ACLs for {len(resources)} resource(s): {len(bindings)} ACL(s)\n")
        elif args.action == "remove":
            filters = _removal_filters(args, resources, pattern_type)
            removed = admin.delete_acls(filters)
            out.write(f"Removed {len(removed)} ACL(s)\n")
            _print_acls(removed, out)
        else:
            principals = args.principal or [None]
            filters = [
                AclBindingFilter(rtype, name, pattern_type, principal=p)
                for rtype, name in (resources or [(ResourceType.ANY, None)])
                for p in principals
            ]
            found: dict[AclBinding, None] = {}
            for f in filters:
                found.update(dict.fromkeys(admin.describe_acls(f)))
            _print_acls(list(found), out)
    return 0


def _resources(args: argparse.Namespace) -> Iterator[tuple[ResourceType, str | None]]:
    for name in args.topic:
        yield ResourceType.TOPIC, name
    for name in args.group:
        yield ResourceType.GROUP, name
    for name in args.transactional_id:
        yield ResourceType.TRANSACTIONAL_ID, name
    if args.cluster:
        yield ResourceType.CLUSTER, CLUSTER_NAME


def _operations(args: argparse.Namespace, default: list[str]) -> list[AclOperation]:
    operations: list[AclOperation] = []
    for text in args.operation or default:
        key = text.replace("_", "").replace("-", "").lower()
        if key not in _OPERATIONS:
            raise CliError(f"--operation {text!r}: not an ACL operation ({', '.join(_OPERATIONS)})")
        operations.append(_OPERATIONS[key])
    return operations


def _entries(args: argparse.Namespace, operations: list[AclOperation]) -> list[AccessControlEntry]:
    entries: list[AccessControlEntry] = []
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        for principal in principals:
            if ":" not in principal:
                raise CliError(f"principal {principal!r} needs a type, e.g. User:{principal}")
            for host in hosts or ["*"]:
                entries.extend(AccessControlEntry(principal, host, op, permission)
                               for op in operations)  # fmt: skip
    return entries


def _bindings(
    args: argparse.Namespace, resources: list[tuple[ResourceType, str | None]], pattern: Any
) -> list[AclBinding]:
    if not resources:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries(args, _operations(args, ["All"]))
    if not entries:
        raise CliError("name who: --allow-principal or --deny-principal (e.g. User:alice)")
    return [
        AclBinding(ResourcePattern(rtype, str(name), pattern), entry)
        for rtype, name in resources
        for entry in entries
    ]


def _removal_filters(
    args: argparse.Namespace, resources: list[tuple[ResourceType, str | None]], pattern: Any
) -> list[AclBindingFilter]:
    if not resources:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries(args, _operations(args, ["All"]) if args.operation else [AclOperation.ANY])
    if not entries:
        if not args.force:
            raise CliError(
                "name the ACLs to remove (--allow-principal/--deny-principal, --operation), "
                "or give --force to remove every ACL of the resources"
            )
        return [AclBindingFilter(rtype, name, pattern) for rtype, name in resources]
    return [
        AclBindingFilter(
            rtype, name, pattern, e.principal, e.host, e.operation, e.permission_type
        )  # fmt: skip
        for rtype, name in resources
        for e in entries
    ]


def _print_acls(bindings: list[AclBinding], out: TextIO) -> None:
    """kafka-acls.sh's listing: the resource pattern, then its entries."""
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    for p, entries in by_pattern.items():
        out.write(
            f"Current ACLs for resource `ResourcePattern(resourceType={p.resource_type.name}, "
            f"name={p.name}, patternType={p.pattern_type.name})`: \n"
        )
        for e in entries:
            out.write(
                f" \t(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
                f"permissionType={e.permission_type.name})\n"
            )
        out.write("\n")


# -- users --------------------------------------------------------------------------------


def cmd_users(args: argparse.Namespace, out: TextIO, stdin: TextIO | None = None) -> int:
    from sparklog.client.admin_security import ScramUpsert

    if args.action != "describe" and not args.user:
        raise CliError(f"users {args.action} needs --user NAME")
    try:
        mechanism = ScramMechanism.of(args.mechanism)
    except ValueError as e:
        raise CliError(f"--mechanism: {e}") from None
    if args.action == "add-scram":
        if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
            raise CliError(f"--iterations must be {MIN_ITERATIONS}-{MAX_ITERATIONS}")
        password = args.password
        if password is None:
            password = (stdin or sys.stdin).readline().rstrip("\r\n")
        if not password:
            raise CliError("no password: give --password or one line on stdin")
    with admin_client(args) as admin:
        if args.action == "add-scram":
            upsert = ScramUpsert(args.user, mechanism, password, args.iterations)
            admin.alter_user_scram_credentials([upsert])
            out.write(f"Completed updating config for user {args.user}.\n")
        elif args.action == "delete":
            admin.alter_user_scram_credentials(deletions=[(args.user, mechanism)])
            out.write(f"Completed updating config for user {args.user}.\n")
        else:
            users = admin.describe_user_scram_credentials([args.user] if args.user else None)
            for user, infos in users.items():
                shown = ",".join(f"{m.mechanism_name}=iterations={i}" for m, i in infos.items())
                out.write(f"SCRAM credential configs for user-principal '{user}' are {shown}\n")
    return 0
