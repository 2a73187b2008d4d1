"""The first SCRAM credentials of a cluster (Kafka's `kafka-storage format --add-scram`).

A cluster with SASL/SCRAM listeners needs a user before any client (or broker) can log in to
create one. Kafka writes them into the bootstrap metadata when it formats storage; sparklog
takes the same syntax from `sparklog serve --add-scram ...` or the `sparklog.add.scram`
setting (EmbeddedCluster, `sparklog.start`, the Spark conf), one entry per credential:

    SCRAM-SHA-256=[name=alice,password=alice-secret]
    SCRAM-SHA-512=[name=bob,iterations=8192,salt="c2FsdA==",saltedpassword="..."]

(`salt` and `saltedpassword` base64, as Kafka's `ScramParser`; `iterations` 4096 by default;
a `password` gets a random salt unless one is given). Several entries in the setting are
separated by `;`.

At every start the controller writes the credentials the metadata log does not have yet for
that user and mechanism, and leaves the others alone: a password changed later with
AlterUserScramCredentials is never reverted by a restart with the same setting (Kafka applies
`--add-scram` only when formatting, which a restart never does).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparklog.metadata.scram import (
    ScramCredentials,
    credential_from_salted_password,
    salted_password,
    scram_record,
)
from sparklog.security.credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
)
from sparklog.settings import ConfigError, ConfigType, Importance, Scope, Setting, define

ADD_SCRAM = "sparklog.add.scram"

BOOTSTRAP_SETTINGS = define(
    Setting(
        ADD_SCRAM,
        ConfigType.PASSWORD,
        None,
        importance=Importance.MEDIUM,
        doc="SCRAM credentials the controller creates at start when the metadata log lacks "
        "them, in kafka-storage's --add-scram syntax (SCRAM-SHA-256=[name=alice,password=...]), "
        "entries separated by ';'",
        scope=Scope.CONTROLLER,
        sensitive=True,
    ),
)

#: Kafka's `ScramParser` default iteration count.
DEFAULT_ITERATIONS = 4096
_SALT_BYTES = 32
_ENTRY = re.compile(r"\s*([A-Za-z0-9-]+)\s*=\s*\[(.*?)\]\s*(?:;|,|$)", re.S)


@dataclass(frozen=True, slots=True)
class BootstrapCredential:
    user: str
    mechanism: ScramMechanism
    credential: ScramCredential

    def __repr__(self) -> str:  # never the keys
        return f"BootstrapCredential({self.user!r}, {self.mechanism.mechanism_name})"


def parse_add_scram(text: str) -> list[BootstrapCredential]:
    """Credentials from `--add-scram` entries; ConfigError naming the entry and the fix
    (never echoing a password or a salted password)."""
    credentials: list[BootstrapCredential] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _ENTRY.match(text, position)
        if match is None:
            raise ConfigError(
                f"{ADD_SCRAM}: cannot read entry {len(credentials) + 1}: expected "
                "MECHANISM=[name=...,password=...] (kafka-storage's --add-scram syntax)"
            )
        credentials.append(_credential(match.group(1), match.group(2), len(credentials) + 1))
        position = match.end()
    seen: set[tuple[str, ScramMechanism]] = set()
    for c in credentials:
        if (c.user, c.mechanism) in seen:
            raise ConfigError(
                f"{ADD_SCRAM}: user {c.user!r} has two {c.mechanism.mechanism_name} entries"
            )
        seen.add((c.user, c.mechanism))
    return credentials


def parse_entries(entries: Sequence[str]) -> list[BootstrapCredential]:
    """Several `--add-scram` arguments (one credential each, or `;`-separated)."""
    return parse_add_scram(";".join(e for e in entries if e.strip()))


def _credential(mechanism_name: str, body: str, index: int) -> BootstrapCredential:
    where = f"{ADD_SCRAM} entry {index}"
    try:
        mechanism = ScramMechanism.of(mechanism_name)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
    fields: dict[str, str] = {}
    for part in _split_fields(body):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("name", "password", "salt", "saltedpassword", "iterations"):
            shown = key if sep else "a field without '='"
            raise ConfigError(
                f"{where}: unknown field {shown!r}; fields are name, password, salt, "
                "saltedpassword, iterations"
            )
        fields[key] = _unquote(value.strip())
    user = fields.get("name", "")
    if not user:
        raise ConfigError(f"{where}: no name=... (the user the credential is for)")
    where = f"{where} (user {user!r})"
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise ConfigError(f"{where}: iterations must be an integer") from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ConfigError(
            f"{where}: iterations {iterations} is outside {MIN_ITERATIONS}-{MAX_ITERATIONS}"
        )
    salt = _b64(fields["salt"], "salt", where) if "salt" in fields else os.urandom(_SALT_BYTES)
    if ("password" in fields) == ("saltedpassword" in fields):
        raise ConfigError(f"{where}: give exactly one of password=... and saltedpassword=...")
    if "password" in fields:
        salted = salted_password(mechanism, fields["password"], salt, iterations)
    else:
        if "salt" not in fields:
            raise ConfigError(f"{where}: saltedpassword=... needs the salt=... it was made with")
        salted = _b64(fields["saltedpassword"], "saltedpassword", where)
    credential = credential_from_salted_password(mechanism, salt, salted, iterations)
    return BootstrapCredential(user, mechanism, credential)


def _split_fields(body: str) -> list[str]:
    """Split on commas outside double quotes."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for char in body:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _b64(value: str, field: str, where: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{where}: {field} is not base64") from None


def bootstrap_credentials(props: Mapping[str, object]) -> list[BootstrapCredential]:
    """The credentials `sparklog.add.scram` asks for (none when unset)."""
    text = props.get(ADD_SCRAM)
    return parse_add_scram(str(text)) if text else []


def missing_credential_records(
    credentials: Sequence[BootstrapCredential], existing: ScramCredentials
) -> list[dict[str, object]]:
    """`UserScramCredential` records for the credentials `existing` does not hold yet."""
    return [
        scram_record(c.user, c.mechanism, c.credential)
        for c in credentials
        if existing.scram_credential(c.mechanism, c.user) is None
    ]
