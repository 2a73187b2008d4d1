"""CreateAcls, DeleteAcls and DescribeAcls over the metadata image (Kafka's
`AclControlManager`, with the request checks of `AclApis`).

Sans-IO like the other control managers: each call reads the image and returns results plus
the records that make them true; nothing changes until those records are replayed.

- Create: per binding, Kafka's checks in Kafka's order (the CLUSTER resource is only ever
  `kafka-cluster`; a name must not be empty; then `validateNewAcl`) answer INVALID_REQUEST
  with Kafka's message; a binding already stored (or repeated in the request) succeeds
  without a second record, as Kafka's `existingAcls` set makes it.
- Delete: per filter, every stored binding it matches is removed and listed; a binding two
  filters match is removed once but listed under both (Kafka collects the records in a set).
  An UNKNOWN field in a filter answers INVALID_REQUEST for that filter.

DescribeAcls reads the image only: `metadata.acls.describe_acls`, served by brokers too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sparklog.controller.results import NONE, ApiError
from sparklog.errors import InvalidRequestError
from sparklog.metadata.acls import (
    InvalidAclError,
    acl_record,
    check_storable,
    remove_acl_record,
    sorted_acls,
)
from sparklog.metadata.image import MetadataImage
from sparklog.security.acl import CLUSTER_NAME, AclBinding, ResourceType
from sparklog.security.acl_filter import AclBindingFilter

Records = list[dict[str, Any]]


def create_acls(
    image: MetadataImage,
    bindings: Sequence[AclBinding],
    id_factory: Callable[[], uuid.UUID] = uuid.uuid4,
) -> tuple[list[ApiError], Records]:
    """One result per binding, in request order, and the `AccessControlEntry` records."""
    results: list[ApiError] = []
    records: Records = []
    new: set[AclBinding] = set()
    for binding in bindings:
        error = creation_error(binding)
        if error is not None:
            results.append(error)
            continue
        if image.acls_image.id_of(binding) is None and binding not in new:
            new.add(binding)
            acl_id = id_factory()
            while acl_id in image.acls:  # Kafka's newAclId: never reuse a live id
                acl_id = id_factory()
            records.append(acl_record(acl_id, binding))
        results.append(NONE)
    return results, records


def creation_error(binding: AclBinding) -> ApiError | None:
    """Why `binding` cannot be created (AclApis' checks, then `validateNewAcl`), or None."""
    pattern = binding.pattern
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        return _invalid("Invalid empty resource name")
    try:
        check_storable(binding)
    except InvalidAclError as e:
        return _invalid(str(e))
    return None


def delete_acls(
    image: MetadataImage, filters: Sequence[AclBindingFilter]
) -> tuple[list[tuple[ApiError, list[AclBinding]]], Records]:
    """Per filter, in request order: an error or the bindings it deletes; the removal records
    (one per ACL however many filters match it)."""
    results: list[tuple[ApiError, list[AclBinding]]] = []
    removed: dict[uuid.UUID, None] = {}  # ordered set
    for acl_filter in filters:
        reason = acl_filter.indefinite_field()
        if reason is not None:
            results.append((_invalid(reason), []))
            continue
        matched = [(i, b) for i, b in sorted_acls(image.acls) if acl_filter.matches(b)]
        removed.update(dict.fromkeys(i for i, _ in matched))
        results.append((NONE, [b for _, b in matched]))
    return results, [remove_acl_record(i) for i in removed]


def _invalid(message: str) -> ApiError:
    return ApiError(InvalidRequestError.code, message)
