"""Client quotas as cluster metadata (Kafka's `ClientQuotaRecord` and `ClientQuotasImage`, the
replay half of `ClientQuotaControlManager`), and the lookups quota enforcers resolve against.

Vocabulary. A quota entity maps entity types to names; a name of None is the type's `<default>`
(Kafka's `ClientQuotaEntity`). Kafka's types are `user`, `client-id` and `ip`; sparklog adds
`client-id-prefix` (Redpanda's: one quota shared by every client id starting with the prefix)
and `topic` (per-topic byte rates, which Kafka users asked for and never got). Which keys an
entity may carry depends on its combination of types (Kafka's `QuotaConfig` config defs):

    user | client-id | user+client-id | client-id-prefix | user+client-id-prefix
        producer_byte_rate, consumer_byte_rate (long), request_percentage,
        controller_mutation_rate (double)
    ip        connection_creation_rate (int)
    topic     producer_byte_rate, consumer_byte_rate (long)

Records (one per entity and key, as Kafka's; the entity's entries in type order):

    {"type": "ClientQuota", "entity": [{"entity_type": "client-id", "entity_name": null},
     {"entity_type": "user", "entity_name": "alice"}], "key": "producer_byte_rate",
     "value": 1048576.0, "remove": false}

`QuotasImage` folds them in (`MetadataImage.quotas`). Its lookups are the seam the enforcers
call on every request, so they probe hash maps only (a constant number of probes, plus one per
distinct client-id-prefix length, whatever the number of entities) and each replayed record
bumps `version` so an enforcer may cache what it resolved:

- `client_quota(key, user, client_id)`: Kafka's `DefaultQuotaCallback` precedence,
  `/users/<u>/clients/<c>`, `/users/<u>/clients/<default>`, `/users/<u>`,
  `/users/<default>/clients/<c>`, `/users/<default>/clients/<default>`, `/users/<default>`,
  `/clients/<c>`, `/clients/<default>`, with the longest matching client-id prefix right below
  each exact client id. The answer carries the metric tags Kafka's callback gives the quota's
  sensor: the real user and client id (not `<default>`) at the levels the entity names, "" at
  the others, so every client under a default quota gets its own sensor; a prefix quota tags
  `client-id-prefix` instead of `client-id`, so all its clients share one sensor.
- `ip_quota(ip)`: the ip, then `<default>` (Kafka's `ConnectionQuotas`).
- `topic_quota(key, topic)`: the topic, then `<default>`.

Replay checks what a stored quota must be (known entity types, each once, a combination and key
that go together, a name that is not empty, a number); the controller validates requests before
it writes (`controller/quota_control.py`), so a record failing here came from a damaged log.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sparklog.errors import InvalidRequestError, UnsupportedVersionError

CLIENT_QUOTA = "ClientQuota"

# -- entity types (Kafka's `ClientQuotaEntity.USER/CLIENT_ID/IP`, then sparklog's) ------------
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
CLIENT_ID_PREFIX = "client-id-prefix"
TOPIC = "topic"
#: Every entity type sparklog stores quotas for; Kafka's three first.
ENTITY_TYPES = (USER, CLIENT_ID, IP, CLIENT_ID_PREFIX, TOPIC)
#: How kafka-configs.sh and DescribeConfigs print a `<default>` entity name.
DEFAULT_NAME = "<default>"

# -- keys (Kafka's `QuotaConfig.*_OVERRIDE_CONFIG`) -------------------------------------------
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

#: Each key's ConfigDef type in Kafka ("long" and "int" values must be whole numbers).
KEY_TYPES: Mapping[str, str] = {
    PRODUCER_BYTE_RATE: "long",
    CONSUMER_BYTE_RATE: "long",
    REQUEST_PERCENTAGE: "double",
    CONTROLLER_MUTATION_RATE: "double",
    CONNECTION_CREATION_RATE: "int",
}
#: Keys of user / client-id entities (Kafka's `userAndClientQuotaConfigs`).
CLIENT_KEYS = frozenset(
    {PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE}
)
#: Keys of ip entities (Kafka's `ipConfigs`).
IP_KEYS = frozenset({CONNECTION_CREATION_RATE})
#: Keys of topic entities (sparklog's per-topic byte rates).
TOPIC_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})

#: Entity type combinations (sorted) -> the keys they may carry.
_COMBINATIONS: Mapping[tuple[str, ...], frozenset[str]] = {
    (USER,): CLIENT_KEYS,
    (CLIENT_ID,): CLIENT_KEYS,
    (CLIENT_ID, USER): CLIENT_KEYS,
    (CLIENT_ID_PREFIX,): CLIENT_KEYS,
    (CLIENT_ID_PREFIX, USER): CLIENT_KEYS,
    (IP,): IP_KEYS,
    (TOPIC,): TOPIC_KEYS,
}
#: Entity types whose name may not be None (`<default>`): a default prefix would be every client.
_NAMED_ONLY = frozenset({CLIENT_ID_PREFIX})

Entries = tuple[tuple[str, str | None], ...]
Tags = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """Entity type -> name (None = `<default>`), as sorted (type, name) pairs so equal entities
    are equal tuples; build one with `ClientQuotaEntity.of({...})`."""

    entries: Entries

    @classmethod
    def of(cls, entries: Mapping[str, str | None]) -> ClientQuotaEntity:
        return cls(tuple(sorted(entries.items())))

    def get(self, entity_type: str) -> str | None:
        """The name for `entity_type` (None for `<default>`); KeyError when the type is absent."""
        for kind, name in self.entries:
            if kind == entity_type:
                return name
        raise KeyError(entity_type)

    def types(self) -> tuple[str, ...]:
        return tuple(kind for kind, _ in self.entries)

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.entries)

    def __str__(self) -> str:  # kafka-configs.sh's spelling: user=alice, client-id=<default>
        return ", ".join(f"{k}={DEFAULT_NAME if n is None else n}" for k, n in self.entries)


class InvalidQuotaError(ValueError):
    """A quota that cannot be stored; the message names the problem."""


def keys_for(entity: ClientQuotaEntity) -> frozenset[str]:
    """The keys `entity` may carry; InvalidQuotaError naming the problem when the entity is
    not one quotas are stored for (unknown or repeated type, a combination that does not go
    together, an empty name, a `<default>` client-id-prefix)."""
    if not entity.entries:
        raise InvalidQuotaError("Invalid empty client quota entity")
    types = entity.types()
    for kind, name in entity.entries:
        if kind not in ENTITY_TYPES:
            raise InvalidQuotaError(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise InvalidQuotaError(f"Empty {kind} not supported")
        if name is None and kind in _NAMED_ONLY:
            raise InvalidQuotaError(f"{kind} needs a name: a <default> {kind} is not supported")
    if len(set(types)) != len(types):
        raise InvalidQuotaError(f"Invalid client quota entity, duplicate entity entry in {entity}")
    keys = _COMBINATIONS.get(types)
    if keys is None:
        raise InvalidQuotaError(
            f"Invalid client quota entity {entity}: the entity types {', '.join(types)} do not "
            "combine (use user, client-id, user+client-id, client-id-prefix, "
            "user+client-id-prefix, ip or topic)"
        )
    return keys


def check_storable(entity: ClientQuotaEntity, key: str) -> None:
    """Raise InvalidQuotaError unless a quota `key` may be stored on `entity`."""
    if key not in keys_for(entity):
        raise InvalidQuotaError(f"Invalid configuration key {key} for client quota entity {entity}")


def quota_record(entity: ClientQuotaEntity, key: str, value: float | None) -> dict[str, Any]:
    """The `ClientQuota` record setting `key` of `entity` to `value` (None: removing it)."""
    return {
        "type": CLIENT_QUOTA,
        "entity": [{"entity_type": k, "entity_name": n} for k, n in entity.entries],
        "key": key,
        "value": 0.0 if value is None else float(value),
        "remove": value is None,
    }


def entity_of(record: Mapping[str, Any]) -> ClientQuotaEntity:
    """The entity a `ClientQuota` record names (types unchecked; see `keys_for`)."""
    entries: dict[str, str | None] = {}
    for item in record["entity"]:
        kind, name = str(item["entity_type"]), item.get("entity_name")
        if kind in entries:
            raise InvalidQuotaError(f"duplicate entity type {kind} in a ClientQuota record")
        entries[kind] = None if name is None else str(name)
    return ClientQuotaEntity.of(entries)


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    """What a lookup resolved to: the `limit`, the metric `tags` of the sensor enforcing it
    (see the module doc) and the `entity` the limit was set on."""

    limit: float
    tags: Tags
    entity: ClientQuotaEntity


def _ip_index_name(name: str) -> str:
    """Ip entity names are indexed in canonical form, so `::1` and `0:0::1` are one address."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


class QuotasImage:
    """The client quotas of the metadata image: entity -> key -> value, plus per-key indexes for
    the lookups. Mutated only by replay; `version` moves on every replayed record."""

    __slots__ = ("_by_entity", "_index", "_prefix_lengths", "_prefix_order", "version")

    def __init__(self) -> None:
        self._by_entity: dict[ClientQuotaEntity, dict[str, float]] = {}
        # key -> lookup entries -> value; ip names canonical (`_ip_index_name`)
        self._index: dict[str, dict[Entries, float]] = {}
        # key -> client-id-prefix length -> how many prefix entities of that length carry it,
        # so a longest-prefix lookup probes each distinct length once
        self._prefix_lengths: dict[str, Counter[int]] = {}
        self._prefix_order: dict[str, tuple[int, ...]] = {}  # its lengths, longest first
        self.version = 0

    # -- reads ------------------------------------------------------------------------------

    def entities(self) -> Mapping[ClientQuotaEntity, Mapping[str, float]]:
        """Every entity with its quotas (DescribeClientQuotas answers from this)."""
        return MappingProxyType(self._by_entity)

    def quotas(self, entity: ClientQuotaEntity) -> Mapping[str, float]:
        return self._by_entity.get(entity, {})

    def __len__(self) -> int:
        return len(self._by_entity)

    def __iter__(self) -> Iterator[tuple[ClientQuotaEntity, Mapping[str, float]]]:
        return iter(self._by_entity.items())

    def client_quota(self, key: str, user: str, client_id: str) -> ResolvedQuota | None:
        """The quota `key` for a request by `user` (the principal's name) with `client_id`, by
        Kafka's precedence with client-id prefixes below exact client ids; None = no limit."""
        index = self._index.get(key)
        if not index:
            return None
        lengths = self._prefix_order.get(key)
        prefixes = [client_id[:n] for n in lengths if n <= len(client_id)] if lengths else ()
        # users entries, user tag: the named user's levels, the default user's, no user's
        for users, user_tag in ((((USER, user),), user), (((USER, None),), user), ((), "")):
            found = self._at_user_level(index, users, user_tag, client_id, prefixes)
            if found is not None:
                return found
        return None

    def _at_user_level(
        self,
        index: Mapping[Entries, float],
        users: Entries,
        user_tag: str,
        client_id: str,
        prefixes: Iterable[str],
    ) -> ResolvedQuota | None:
        """The three-to-four levels under one user spec: client id, longest prefix, default
        client, then the user alone (no user alone at the client-only level)."""
        entries: Entries = ((CLIENT_ID, client_id), *users)
        value = index.get(entries)
        if value is not None:
            return ResolvedQuota(value, ((USER, user_tag), (CLIENT_ID, client_id)), _e(entries))
        for prefix in prefixes:
            entries = ((CLIENT_ID_PREFIX, prefix), *users)
            value = index.get(entries)
            if value is not None:
                tags = ((USER, user_tag), (CLIENT_ID_PREFIX, prefix))
                return ResolvedQuota(value, tags, _e(entries))
        entries = ((CLIENT_ID, None), *users)
        value = index.get(entries)
        if value is not None:
            return ResolvedQuota(value, ((USER, user_tag), (CLIENT_ID, client_id)), _e(entries))
        if users:
            value = index.get(users)
            if value is not None:
                return ResolvedQuota(value, ((USER, user_tag), (CLIENT_ID, "")), _e(users))
        return None

    def ip_quota(self, ip: str) -> ResolvedQuota | None:
        """The `connection_creation_rate` for connections from `ip`: the ip's, else the default."""
        index = self._index.get(CONNECTION_CREATION_RATE)
        if not index:
            return None
        name = _ip_index_name(ip)
        for entries in (((IP, name),), ((IP, None),)):
            value = index.get(entries)
            if value is not None:
                return ResolvedQuota(value, ((IP, name),), _e(entries))
        return None

    def topic_quota(self, key: str, topic: str) -> ResolvedQuota | None:
        """The byte rate `key` of `topic`: the topic's own, else the topic default (each topic
        held to it separately)."""
        index = self._index.get(key)
        if not index:
            return None
        for entries in (((TOPIC, topic),), ((TOPIC, None),)):
            value = index.get(entries)
            if value is not None:
                return ResolvedQuota(value, ((TOPIC, topic),), _e(entries))
        return None

    # -- replay -----------------------------------------------------------------------------

    def replay(self, record: Mapping[str, Any]) -> None:
        """Apply a `ClientQuota` record; InvalidQuotaError (a ValueError) if it cannot be one."""
        entity = entity_of(record)
        key = str(record["key"])
        check_storable(entity, key)
        remove = record.get("remove", False)
        if not isinstance(remove, bool):
            raise InvalidQuotaError(f"ClientQuota record's remove is {remove!r}, not a boolean")
        index_entries = _index_entries(entity)
        if remove:
            quotas = self._by_entity.get(entity)
            if quotas is None or quotas.pop(key, None) is None:
                raise InvalidQuotaError(f"no quota {key} on {entity} to remove")
            if not quotas:
                del self._by_entity[entity]
            index = self._index[key]
            del index[index_entries]
            if index_entries[0][0] == IP and index_entries[0][1] is not None:
                # another spelling of the same address may still carry the key (rare: scan)
                for other, values in self._by_entity.items():
                    if key in values and _index_entries(other) == index_entries:
                        index[index_entries] = values[key]
                        break
            if not index:
                del self._index[key]
            self._count_prefix(key, entity, -1)
        else:
            value = record["value"]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidQuotaError(f"ClientQuota value {value!r} is not a number")
            quotas = self._by_entity.setdefault(entity, {})
            if key not in quotas:
                self._count_prefix(key, entity, +1)
            quotas[key] = float(value)
            self._index.setdefault(key, {})[index_entries] = float(value)
        self.version += 1

    def _count_prefix(self, key: str, entity: ClientQuotaEntity, delta: int) -> None:
        for kind, name in entity.entries:
            if kind == CLIENT_ID_PREFIX and name is not None:
                lengths = self._prefix_lengths.setdefault(key, Counter())
                lengths[len(name)] += delta
                if lengths[len(name)] <= 0:
                    del lengths[len(name)]
                if lengths:
                    self._prefix_order[key] = tuple(sorted(lengths, reverse=True))
                else:
                    del self._prefix_lengths[key], self._prefix_order[key]

    # -- snapshots --------------------------------------------------------------------------

    def to_list(self) -> list[dict[str, Any]]:
        """The snapshot form: one `ClientQuota` record per entity and key, in a stable order."""

        return [
            quota_record(entity, key, value)
            for entity in sorted(self._by_entity, key=_order)
            for key, value in sorted(self._by_entity[entity].items())
        ]

    @classmethod
    def from_list(cls, records: Iterable[Mapping[str, Any]]) -> QuotasImage:
        quotas = cls()
        for record in records:
            quotas.replay(record)
        return quotas


def _e(entries: Entries) -> ClientQuotaEntity:
    """The entity of index entries (already in `ClientQuotaEntity`'s sorted order)."""
    return ClientQuotaEntity(entries)


def _index_entries(entity: ClientQuotaEntity) -> Entries:
    if entity.entries and entity.entries[0][0] == IP and entity.entries[0][1] is not None:
        return ((IP, _ip_index_name(entity.entries[0][1])),)
    return entity.entries


# -- DescribeClientQuotas (Kafka's `ClientQuotasImage.describe`) ------------------------------

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2  # DescribeClientQuotas' match types


def describe_client_quotas(
    quotas: QuotasImage, components: Sequence[tuple[str, int, str | None]], strict: bool
) -> list[tuple[ClientQuotaEntity, dict[str, float]]]:
    """The entities a DescribeClientQuotas filter matches, with their quotas, sorted.

    `components` are (entity type, match type, match): an exact name, the `<default>`, or any
    name of that type. An entity matches when it has every component; with `strict`, only the
    components' types. No component matches every entity (none when strict). InvalidRequestError
    or UnsupportedVersionError (Kafka's, with Kafka's messages) for a bad filter."""
    exact: dict[str, str | None] = {}
    of_type: set[str] = set()
    for kind, match_type, match in components:
        if not kind:
            raise InvalidRequestError("Invalid empty entity type.")
        if kind in exact or kind in of_type:
            raise InvalidRequestError(
                f"Entity type {kind} cannot appear more than once in the filter."
            )
        if kind not in ENTITY_TYPES:
            raise UnsupportedVersionError(f"Unsupported entity type {kind}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise InvalidRequestError(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[kind] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise InvalidRequestError(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                )
            exact[kind] = None
        elif match_type == MATCH_ANY:
            if match is not None:
                raise InvalidRequestError(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                )
            of_type.add(kind)
        else:
            raise InvalidRequestError(f"Unknown match type {match_type}")
    named = set(exact) | of_type
    if IP in named and (USER in named or CLIENT_ID in named):
        raise InvalidRequestError(
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component."
        )
    found = []
    for entity, values in quotas:
        entries = dict(entity.entries)
        if strict and len(entries) != len(named):
            continue
        if all(k in entries and entries[k] == n for k, n in exact.items()) and all(
            k in entries for k in of_type
        ):
            found.append((entity, dict(sorted(values.items()))))
    return sorted(found, key=lambda item: _order(item[0]))


def _order(entity: ClientQuotaEntity) -> tuple[tuple[str, bool, str], ...]:
    return tuple((k, n is not None, n or "") for k, n in entity.entries)
