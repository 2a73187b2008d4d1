"""The ACL and SCRAM credential APIs on the wire, for the controller and the brokers alike:
kio requests into bindings, filters and alterations, results into kio responses, and the
read-only answers (DescribeAcls, DescribeUserScramCredentials) straight from an image.

Kafka's request-level quirks, checked against Apache Kafka 4.x (tests/oracle):

- an enum field with the code 0 (UNKNOWN) in CreateAcls, DescribeAcls or DeleteAcls fails
  parsing (`AclBinding.isUnknown` in the request's validation) and Kafka closes the
  connection: `ProtocolError`. A code Kafka does not know (say 99) reads as UNKNOWN and is
  answered per binding or filter instead.
- a CreateAcls creation naming ANY (resource type, operation or permission) or the pattern
  type ANY or MATCH cannot even become an `AclBinding`; the handler fails and every creation
  of the request is answered UNKNOWN_SERVER_ERROR with no message (`names_any`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from sparklog.metadata.acls import describe_acls
from sparklog.metadata.scram import ScramCredentials, describe_user_scram_credentials
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import ProtocolError, Request
from sparklog.protocol.responses import Response
from sparklog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from sparklog.security.acl_filter import AclBindingFilter

#: (error code, message) of one binding, filter or user in a response; (0, None) = success
Outcome = tuple[int, str | None]

E = TypeVar("E", bound=enum.IntEnum)


def _enum(kind: type[E], code: int, field: str) -> E:
    if code == 0:
        raise ProtocolError(f"ACL request with {field} UNKNOWN (0): Kafka closes the connection")
    try:
        return kind(code)
    except ValueError:
        return kind(0)  # a code this side does not know reads as UNKNOWN, as in Kafka


# -- ACLs ---------------------------------------------------------------------------------------


def acl_creations(body: Any) -> list[AclBinding]:
    """The bindings of a CreateAcls request; ProtocolError for a 0 (see the module doc)."""
    return [
        AclBinding(
            ResourcePattern(
                _enum(ResourceType, c.resource_type, "resource type"),
                c.resource_name,
                _enum(PatternType, c.resource_pattern_type, "pattern type"),
            ),
            AccessControlEntry(
                c.principal,
                c.host,
                _enum(AclOperation, c.operation, "operation"),
                _enum(AclPermissionType, c.permission_type, "permission type"),
            ),
        )
        for c in body.creations
    ]


def names_any(bindings: Sequence[AclBinding]) -> bool:
    """Whether a creation names ANY or MATCH, which Kafka fails the whole request for."""
    return any(
        b.pattern.resource_type is ResourceType.ANY
        or b.pattern.pattern_type in (PatternType.ANY, PatternType.MATCH)
        or b.entry.operation is AclOperation.ANY
        or b.entry.permission_type is AclPermissionType.ANY
        for b in bindings
    )


def acl_filter(f: Any) -> AclBindingFilter:
    """A DescribeAcls request body or a DeleteAcls filter as a filter; ProtocolError for a 0."""
    return AclBindingFilter(
        resource_type=_enum(ResourceType, f.resource_type_filter, "resource type"),
        name=f.resource_name_filter,
        pattern_type=_enum(PatternType, f.pattern_type_filter, "pattern type"),
        principal=f.principal_filter,
        host=f.host_filter,
        operation=_enum(AclOperation, f.operation, "operation"),
        permission_type=_enum(AclPermissionType, f.permission_type, "permission type"),
    )


# Kafka's `AclApis` messages with no authorizer (SECURITY_DISABLED): CreateAcls and DeleteAcls
# put this in every result, DescribeAcls at the top level with its own wording.
NO_AUTHORIZER = "No Authorizer is configured."
NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"


def create_acls_response(request: Request, outcomes: Sequence[Outcome]) -> Any:
    """CreateAcls' answer: one result per creation (Kafka sends "" as a success's message)."""
    respond = Response(request)
    results = tuple(
        respond.nested(
            "AclCreationResult", error_code=code, error_message="" if code == 0 else message
        )
        for code, message in outcomes
    )
    return respond(results=results)


def create_acls_refused(request: Request, code: int, message: str | None) -> Any:
    return create_acls_response(request, [(code, message)] * len(request.body.creations))


def matching_acl_binding(m: Any) -> AclBinding:
    """A DeleteAcls response's matching ACL as a binding (codes from our own answer)."""
    return AclBinding(
        ResourcePattern(
            ResourceType(int(m.resource_type)), m.resource_name, PatternType(int(m.pattern_type))
        ),
        AccessControlEntry(
            m.principal,
            m.host,
            AclOperation(int(m.operation)),
            AclPermissionType(int(m.permission_type)),
        ),
    )


def delete_acls_response(
    request: Request, results: Sequence[tuple[Outcome, Sequence[AclBinding]]]
) -> Any:
    """DeleteAcls' answer: per filter, its error or the bindings it deleted."""
    respond = Response(request)
    filter_results = []
    for (code, message), deleted in results:
        matching = tuple(
            respond.nested(
                "DeleteAclsMatchingAcl",
                error_code=0,
                error_message=None,
                resource_type=int(b.pattern.resource_type),
                resource_name=b.pattern.name,
                pattern_type=int(b.pattern.pattern_type),
                principal=b.entry.principal,
                host=b.entry.host,
                operation=int(b.entry.operation),
                permission_type=int(b.entry.permission_type),
            )
            for b in deleted
        )
        filter_results.append(
            respond.nested(
                "DeleteAclsFilterResult",
                error_code=code,
                error_message=message,
                matching_acls=matching,
            )
        )
    return respond(filter_results=tuple(filter_results))


def delete_acls_refused(request: Request, code: int, message: str | None) -> Any:
    return delete_acls_response(request, [((code, message), ())] * len(request.body.filters))


def describe_acls_response(request: Request, acls: Mapping[Any, AclBinding]) -> Any:
    """DescribeAcls answered from `acls` (an image's); ProtocolError for a 0 in the filter."""
    respond = Response(request)
    matched = describe_acls(acls, acl_filter(request.body))
    resources = tuple(
        respond.nested(
            "DescribeAclsResource",
            resource_type=int(pattern.resource_type),
            resource_name=pattern.name,
            pattern_type=int(pattern.pattern_type),
            acls=tuple(
                respond.nested(
                    "AclDescription",
                    principal=b.entry.principal,
                    host=b.entry.host,
                    operation=int(b.entry.operation),
                    permission_type=int(b.entry.permission_type),
                )
                for b in bindings
            ),
        )
        for pattern, bindings in matched.items()
    )
    return respond(error_code=0, error_message="", resources=resources)


def describe_acls_refused(request: Request, code: int, message: str | None) -> Any:
    return Response(request)(error_code=code, error_message=message, resources=())


# -- SCRAM credentials --------------------------------------------------------------------------


def alter_scram_response(request: Request, results: Sequence[tuple[str, Outcome]]) -> Any:
    respond = Response(request)
    return respond(
        results=tuple(
            respond.nested(
                "AlterUserScramCredentialsResult",
                user=user,
                error_code=code,
                error_message=message,
            )
            for user, (code, message) in results
        )
    )


def alter_scram_refused(request: Request, code: int, message: str | None) -> Any:
    body = request.body
    users = dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
    return alter_scram_response(request, [(u, (code, message)) for u in users])


def describe_scram_response(request: Request, credentials: ScramCredentials) -> Any:
    """DescribeUserScramCredentials answered from an image's credentials: mechanisms and
    iteration counts, never keys (Kafka's `ScramImage.describe`)."""
    respond = Response(request)
    users = request.body.users
    described = describe_user_scram_credentials(
        credentials, None if users is None else [u.name for u in users]
    )
    results = tuple(
        respond.nested(
            "DescribeUserScramCredentialsResult",
            user=d.user,
            error_code=d.error_code,
            error_message="" if d.error_code == 0 else d.error_message,
            credential_infos=tuple(
                respond.nested("CredentialInfo", mechanism=int(m), iterations=i)
                for m, i in d.credentials
            ),
        )
        for d in described
    )
    return respond(error_code=0, error_message="", results=results)


def describe_scram_refused(request: Request, code: int, message: str | None) -> Any:
    return Response(request)(error_code=code, error_message=message, results=())


def refused(request: Request, code: int, message: str | None) -> Any:
    """The answer refusing every item of one of these five requests with `code` (a broker's
    forward that never reached the controller, or an authorization failure)."""
    return {
        ApiKey.CREATE_ACLS: create_acls_refused,
        ApiKey.DELETE_ACLS: delete_acls_refused,
        ApiKey.DESCRIBE_ACLS: describe_acls_refused,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_scram_refused,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_scram_refused,
    }[ApiKey(request.api_key)](request, code, message)
