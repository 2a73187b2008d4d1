"""AlterClientQuotas over the metadata image (Kafka's `ClientQuotaControlManager.alterClientQuotas`,
KIP-546): which alterations become `ClientQuota` records, and each entity's result.

Kafka 4.4's rules, in its order (checked against Apache Kafka by
`tests/oracle/test_differential_quotas.py`):

- an entity named twice in one request: the second answers "Ignoring duplicate entity ..." (the
  first is applied, and its result is replaced by that error: one result per entity), and so
  does an entity with a key twice among its ops (nothing applied);
- the entity: not empty, known types (sparklog's `client-id-prefix` and `topic` too), no empty
  name; an `ip` alone (with user or client id: "IP entity shouldnot be combined ..." as Kafka
  spells it), an ip address or a host name that resolves; then sparklog's combination rules (`keys_for`);
- every set op's key must be one the entity may carry ("Invalid configuration key k"; removals
  are not checked), then each value: finite, greater than 0, whole for long/int keys, within a
  Java long/int;
- a removal of a key that is not set, and a value equal to the current one, write nothing;
- a failing entity writes none of its ops (the others of the request still apply);
  `validate_only` answers the same and writes nothing.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sparklog.controller.results import NONE, ApiError
from sparklog.errors import InvalidRequestError
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.quotas import (
    CLIENT_ID,
    ENTITY_TYPES,
    IP,
    KEY_TYPES,
    USER,
    ClientQuotaEntity,
    InvalidQuotaError,
    keys_for,
    quota_record,
)

_INVALID = InvalidRequestError.code
_LONG_MAX = 2**63 - 1
_INT_MAX = 2**31 - 1
#: a host name (RFC 1123 labels); the handler resolves those before the request is judged
#: (`host_names`), as Kafka's `InetAddress.getByName` does
_HOST_NAME = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+$")


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    """One entry of AlterClientQuotas: the entity as the request lists it (type, name) and its
    ops (key, value or None to remove)."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


def _entity(entries: Sequence[tuple[str, str | None]]) -> ClientQuotaEntity:
    # Kafka's request -> ClientQuotaEntity goes through a map: a repeated type keeps the last name
    return ClientQuotaEntity.of(dict(entries))


def host_names(alterations: Sequence[QuotaAlteration]) -> set[str]:
    """The ip entity names that are host names, not addresses: the handler resolves them."""
    names = set()
    for alteration in alterations:
        for kind, name in alteration.entity:
            if kind == IP and name and _is_address(name) is False and _HOST_NAME.match(name):
                names.add(name)
    return names


def alter_client_quotas(
    image: MetadataImage,
    alterations: Sequence[QuotaAlteration],
    *,
    validate_only: bool = False,
    unresolvable: Collection[str] = (),
) -> tuple[list[tuple[ClientQuotaEntity, ApiError]], list[dict[str, Any]]]:
    """Per entity (in first-seen order): its result; and the records to write. `unresolvable`:
    the ip host names that did not resolve."""
    results: dict[ClientQuotaEntity, ApiError] = {}
    records: list[dict[str, Any]] = []
    for alteration in alterations:
        entity = _entity(alteration.entity)
        ops: dict[str, float | None] = {}
        duplicate_key = False
        for key, value in alteration.ops:
            if key in ops:
                duplicate_key = True
            else:
                ops[key] = value
        if duplicate_key or entity in results:
            results[entity] = ApiError(_INVALID, f"Ignoring duplicate entity {_kafka_str(entity)}")
            continue
        error, new = _alter_entity(image, entity, ops, unresolvable)
        results[entity] = error
        if error.is_success:
            records.extend(new)
    return list(results.items()), [] if validate_only else records


def _alter_entity(
    image: MetadataImage,
    entity: ClientQuotaEntity,
    ops: dict[str, float | None],
    unresolvable: Collection[str],
) -> tuple[ApiError, list[dict[str, Any]]]:
    error = _entity_error(entity, unresolvable)
    if error is not None:
        return ApiError(_INVALID, error), []
    try:
        allowed = keys_for(entity)
    except InvalidQuotaError as e:
        return ApiError(_INVALID, str(e)), []
    for key, value in ops.items():
        if value is not None and key not in allowed:
            return ApiError(_INVALID, f"Invalid configuration key {key}"), []
    current = image.quotas.quotas(entity)
    records: list[dict[str, Any]] = []
    for key, value in ops.items():
        if value is None:
            if key in current:
                records.append(quota_record(entity, key, None))
            continue
        message = value_error(key, value)
        if message is not None:
            return ApiError(_INVALID, message), []
        if current.get(key) != value:
            records.append(quota_record(entity, key, value))
    return NONE, records


def _entity_error(entity: ClientQuotaEntity, unresolvable: Collection[str] = ()) -> str | None:
    """Kafka's `validateEntity` and its ip combination check, with Kafka's messages."""
    if not entity.entries:
        return "Invalid empty client quota entity"
    for kind, name in entity.entries:
        if kind not in ENTITY_TYPES:
            return f"Unhandled client quota entity type: {kind}"
        if name is not None and not name:
            return f"Empty {kind} not supported"
    types = entity.types()
    if IP in types:
        if USER in types or CLIENT_ID in types:
            return "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
        name = entity.get(IP)
        if name is not None and (not is_valid_ip_entity(name) or name in unresolvable):
            return f"{name} is not a valid IP or resolvable host."
    return None


def is_valid_ip_entity(name: str) -> bool:
    """An ip address, or a syntactically valid host name (see `_HOST_NAME`)."""
    return _is_address(name) or bool(_HOST_NAME.match(name))


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def value_error(key: str, value: float) -> str | None:
    """Kafka's message for a quota value `key` may not take, or None when it may."""
    if math.isnan(value) or math.isinf(value):
        return f"Quota {key} must be a finite number"
    if value <= 0:
        return f"Quota {key} must be greater than 0"
    kind = KEY_TYPES.get(key, "double")
    if kind in ("long", "int"):
        if value != math.floor(value):
            return f"{key} cannot be a fractional value."
        if kind == "long" and value > _LONG_MAX:
            return f"Proposed value for {key} is too large for a LONG."
        if kind == "int" and value > _INT_MAX:
            return f"Proposed value for {key} is too large for an INT."
    return None


def _kafka_str(entity: ClientQuotaEntity) -> str:
    """Kafka's `ClientQuotaEntity.toString`: `ClientQuotaEntity(entries={user=bob})`."""
    inner = ", ".join(f"{k}={n}" for k, n in entity.entries)
    return f"ClientQuotaEntity(entries={{{inner}}})"
