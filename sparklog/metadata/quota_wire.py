"""DescribeClientQuotas (48) and AlterClientQuotas (49) on the wire, shared by the controller
and brokers: DescribeClientQuotas answered from an image's quotas (a bad filter answers its
error with no entries, as Kafka's broker does), AlterClientQuotas' per-entity results, and the
refusals (CLUSTER_AUTHORIZATION_FAILED without DESCRIBE_CONFIGS / ALTER_CONFIGS on the
cluster, as Kafka's `KafkaApis` and `ControllerApis` check)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparklog.errors import KafkaError
from sparklog.metadata.quotas import ClientQuotaEntity, QuotasImage, describe_client_quotas
from sparklog.protocol.connection import Request
from sparklog.protocol.responses import Response

Outcome = tuple[int, str | None]


def describe_response(request: Request, quotas: QuotasImage) -> Any:
    respond = Response(request)
    body = request.body
    components = [(c.entity_type, int(c.match_type), c.match) for c in body.components]
    try:
        found = describe_client_quotas(quotas, components, bool(body.strict))
    except KafkaError as e:
        return respond(error_code=e.code, error_message=str(e), entries=None)
    entries = tuple(
        respond.nested(
            "EntryData",
            entity=_entity_data(respond, entity),
            values=tuple(respond.nested("ValueData", key=k, value=v) for k, v in values.items()),
        )
        for entity, values in found
    )
    # Kafka's describe answers an empty message, not null, on success
    return respond(error_code=0, error_message="", entries=entries)


def describe_refused(request: Request, code: int, message: str | None) -> Any:
    return Response(request)(error_code=code, error_message=message, entries=None)


def request_entities(request: Request) -> list[tuple[tuple[str, str | None], ...]]:
    """The entities of an AlterClientQuotas request, as listed."""
    return [
        tuple((e.entity_type, e.entity_name) for e in entry.entity)
        for entry in request.body.entries
    ]


def alter_response(request: Request, results: Sequence[tuple[ClientQuotaEntity, Outcome]]) -> Any:
    respond = Response(request)
    return respond(
        entries=tuple(
            respond.nested(
                "EntryData",
                error_code=code,
                error_message=message,
                entity=_entity_data(respond, entity),
            )
            for entity, (code, message) in results
        )
    )


def alter_refused(request: Request, code: int, message: str | None) -> Any:
    """Every entity of the request answered `code` (one result per distinct entity)."""
    entities = dict.fromkeys(ClientQuotaEntity.of(dict(e)) for e in request_entities(request))
    return alter_response(request, [(e, (code, message)) for e in entities])


def _entity_data(respond: Response, entity: ClientQuotaEntity) -> tuple[Any, ...]:
    return tuple(
        respond.nested("EntityData", entity_type=k, entity_name=n) for k, n in entity.entries
    )
