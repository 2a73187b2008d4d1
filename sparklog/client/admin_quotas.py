"""Client quotas for the admin client (Kafka's `Admin.alterClientQuotas` and
`describeClientQuotas`, KIP-546).

An entity is a mapping of entity type (`user`, `client-id`, `ip`, sparklog's `client-id-prefix`
and `topic`) to a name, None meaning `<default>`; results key entities as sorted (type, name)
tuples. Writes go to the controller through any broker (brokers forward them); describes are
answered by any broker from its metadata image.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparklog.protocol.api_versions import ApiKey

from .admin_channel import AdminChannel, admin_error

#: DescribeClientQuotas match types (Kafka's `ClientQuotaFilterComponent`)
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Entity = tuple[tuple[str, str | None], ...]


def entity_key(entity: Mapping[str, str | None]) -> Entity:
    """An entity as the results key it: sorted (type, name) pairs."""
    return tuple(sorted(entity.items()))


@dataclass(frozen=True)
class QuotaAlteration:
    """New values for an entity's quotas: key -> value, or None to remove the key."""

    entity: Mapping[str, str | None]
    ops: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class QuotaFilterComponent:
    """One component of a DescribeClientQuotas filter (Kafka's `ClientQuotaFilterComponent`):
    `of_entity` (an exact name), `of_default_entity` or `of_entity_type` (any name)."""

    entity_type: str
    match_type: int
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_EXACT, name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_DEFAULT)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> QuotaFilterComponent:
        return cls(entity_type, MATCH_ANY)


def alter_client_quotas(
    channel: AdminChannel,
    alterations: Iterable[QuotaAlteration],
    validate_only: bool,
    timeout_ms: int | None,
) -> None:
    """Apply (or, with `validate_only`, check) the alterations; raises the first entity's error
    (e.g. InvalidRequestError naming a bad key or value)."""
    entries = [
        {
            "entity": [{"entity_type": k, "entity_name": n} for k, n in a.entity.items()],
            "ops": [
                {"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                for k, v in a.ops.items()
            ],
        }
        for a in alterations
    ]

    def results(response: Any) -> Iterable[tuple[str, Any, str | None]]:
        for result in response.entries:
            name = ", ".join(
                f"{e.entity_type}={'<default>' if e.entity_name is None else e.entity_name}"
                for e in result.entity
            )
            yield name, result.error_code, result.error_message

    channel.controller_call(
        ApiKey.ALTER_CLIENT_QUOTAS,
        {"entries": entries, "validate_only": validate_only},
        timeout_ms,
        results,
        "client quota entity",
    )


def describe_client_quotas(
    channel: AdminChannel,
    components: Iterable[QuotaFilterComponent],
    strict: bool,
    timeout_ms: int | None,
) -> dict[Entity, dict[str, float]]:
    """The quotas of the entities the filter matches (no components: every entity)."""
    fields = {
        "components": [
            {"entity_type": c.entity_type, "match_type": c.match_type, "match": c.match}
            for c in components
        ],
        "strict": strict,
    }

    def attempt() -> Any:
        return channel.request(
            channel.any_node(), ApiKey.DESCRIBE_CLIENT_QUOTAS, fields, timeout_ms
        )

    response = channel.retry(channel.deadline(timeout_ms), attempt)
    if int(response.error_code) != 0:
        raise admin_error(int(response.error_code), "DescribeClientQuotas", response.error_message)
    return {
        entity_key({e.entity_type: e.entity_name for e in entry.entity}): {
            v.key: float(v.value) for v in entry.values
        }
        for entry in response.entries or ()
    }


class AdminQuotaCalls:
    """`AdminClient`'s client quota methods (a base class keeps admin.py's size down)."""

    _channel: AdminChannel

    def alter_client_quotas(
        self,
        alterations: Iterable[QuotaAlteration],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        alter_client_quotas(self._channel, alterations, validate_only, timeout_ms)

    def describe_client_quotas(
        self,
        components: Iterable[QuotaFilterComponent] = (),
        *,
        strict: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[Entity, dict[str, float]]:
        return describe_client_quotas(self._channel, components, strict, timeout_ms)
