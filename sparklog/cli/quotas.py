"""`quotas describe|alter` (kafka-configs.sh --entity-type users|clients|ips): client quotas.

Entities are named as kafka-configs.sh names them: `--entity-type` (users, clients, ips, and
sparklog's client-id-prefixes and topics), each followed by `--entity-name NAME` or
`--entity-default`, in order; `--entity-type users --entity-name alice --entity-type clients
--entity-default` is the (user alice, default client id) entity. `alter` takes
`--add-config k=v[,k=v...]` and `--delete-config k[,k...]`, and `--validate-only`. `describe`
lists the entities of exactly the named types (kafka-configs.sh's strict match): with a name
or `--entity-default`, that one; with none, every entity of the type; with no `--entity-type`,
every entity. It prints kafka-configs.sh's lines.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from sparklog.cli.common import CliError, admin_client

#: kafka-configs.sh's entity type names (and their singular forms) -> the quota entity type
ENTITY_TYPES = {
    "users": "user",
    "clients": "client-id",
    "ips": "ip",
    "client-id-prefixes": "client-id-prefix",
    "topics": "topic",
}
_ALIASES = {**ENTITY_TYPES, **{v: v for v in ENTITY_TYPES.values()}, "user": "user",
            "client": "client-id", "ip": "ip", "topic": "topic"}  # fmt: skip
#: how kafka-configs.sh describes each entity type in its lines
_SHOWN = {"user": "user-principal", "client-id": "client-id", "ip": "ip",
          "client-id-prefix": "client-id-prefix", "topic": "topic"}  # fmt: skip


class _Ordered(argparse.Action):
    """Keeps --entity-type / --entity-name / --entity-default in the order given."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        spec = list(getattr(namespace, "entity_spec", None) or [])
        spec.append((self.const, values))
        namespace.entity_spec = spec


def add_quotas_parser(client_command: Any) -> None:
    quotas = client_command("quotas", "describe or alter client quotas (kafka-configs.sh)")
    quotas.add_argument("action", choices=("describe", "alter"))
    quotas.add_argument("--entity-type", action=_Ordered, const="type",
                        help="users, clients, ips, client-id-prefixes or topics")  # fmt: skip
    quotas.add_argument("--entity-name", action=_Ordered, const="name")
    quotas.add_argument("--entity-default", action=_Ordered, const="default", nargs=0)
    quotas.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]",
                        help="producer_byte_rate, consumer_byte_rate, request_percentage, "
                        "controller_mutation_rate, connection_creation_rate")  # fmt: skip
    quotas.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")
    quotas.add_argument("--validate-only", action="store_true", help="alter: check only")
    quotas.set_defaults(entity_spec=[])


def parse_entity(spec: list[tuple[str, Any]]) -> list[tuple[str, str | None, bool]]:
    """(entity type, name or None, whether named or defaulted) per --entity-type, in order."""
    entity: list[tuple[str, str | None, bool]] = []
    for kind, value in spec:
        if kind == "type":
            key = str(value).lower()
            if key not in _ALIASES:
                raise CliError(f"--entity-type {value!r}: use one of {', '.join(ENTITY_TYPES)}")
            entity.append((_ALIASES[key], None, False))
        else:
            if not entity or entity[-1][2]:
                raise CliError(f"--entity-{kind} must follow an --entity-type")
            name = None if kind == "default" else str(value)
            entity[-1] = (entity[-1][0], name, True)
    types = [t for t, _, _ in entity]
    if len(set(types)) != len(types):
        raise CliError(f"--entity-type {types[-1]} given twice")
    return entity


def parse_ops(args: argparse.Namespace) -> dict[str, float | None]:
    ops: dict[str, float | None] = {}
    for text in args.add_config:
        for item in filter(None, (part.strip() for part in text.split(","))):
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise CliError(f"--add-config {item!r}: expected KEY=VALUE")
            try:
                ops[key.strip()] = float(value)
            except ValueError:
                raise CliError(f"--add-config {item!r}: {value!r} is not a number") from None
    for text in args.delete_config:
        for key in filter(None, (part.strip() for part in text.split(","))):
            ops[key] = None
    return ops


def cmd_quotas(args: argparse.Namespace, out: TextIO) -> int:
    from sparklog.client.admin_quotas import QuotaAlteration, QuotaFilterComponent

    entity = parse_entity(args.entity_spec)
    if args.action == "alter":
        if not entity or not all(named for _, _, named in entity):
            raise CliError(
                "alter needs the entity: --entity-type TYPE with --entity-name NAME or "
                "--entity-default (e.g. --entity-type users --entity-name alice)"
            )
        ops = parse_ops(args)
        if not ops:
            raise CliError("nothing to alter: give --add-config k=v or --delete-config k")
        with admin_client(args) as admin:
            admin.alter_client_quotas(
                [QuotaAlteration({t: n for t, n, _ in entity}, ops)],
                validate_only=args.validate_only,
            )
        done = "Validated" if args.validate_only else "Completed updating"
        out.write(f"{done} config for {_describe_entity(tuple((t, n) for t, n, _ in entity))}.\n")
        return 0
    components = [
        QuotaFilterComponent.of_entity_type(t)
        if not named
        else QuotaFilterComponent.of_default_entity(t)
        if n is None
        else QuotaFilterComponent.of_entity(t, n)
        for t, n, named in entity
    ]
    with admin_client(args) as admin:
        found = admin.describe_client_quotas(components, strict=bool(components))
    for key, values in sorted(found.items(), key=lambda kv: [(t, n or "") for t, n in kv[0]]):
        shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        out.write(f"Quota configs for {_describe_entity(key)} are {shown}\n")
    return 0


def _describe_entity(entity: tuple[tuple[str, str | None], ...]) -> str:
    """kafka-configs.sh's words: user-principal 'alice', the default client-id, ..."""
    order = {t: i for i, t in enumerate(_SHOWN)}
    parts = [
        f"the default {_SHOWN[t]}" if n is None else f"{_SHOWN[t]} '{n}'"
        for t, n in sorted(entity, key=lambda e: order.get(e[0], 99))
    ]
    return ", ".join(parts)
